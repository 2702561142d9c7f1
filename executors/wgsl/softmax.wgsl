// softmax over one axis, viewed as [outer, R, inner] like the reductions:
// one workgroup per row, three passes over it in the workgroup: the
// maximum, the sum of exp(x - max), then each exp(x - max) / sum.
// P: [outer, R, inner, rows]
@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@group(0) @binding(2) var<storage, read> P: array<u32>;

var<workgroup> sv: array<f32, 256>;

fn reduce_max(lid: u32, v: f32) -> f32 {
    sv[lid] = v;
    for (var s = 128u; s > 0u; s = s >> 1u) {
        workgroupBarrier();
        if (lid < s) { sv[lid] = max(sv[lid], sv[lid + s]); }
    }
    workgroupBarrier();
    let out = sv[0];
    workgroupBarrier();
    return out;
}

fn reduce_sum(lid: u32, v: f32) -> f32 {
    sv[lid] = v;
    for (var s = 128u; s > 0u; s = s >> 1u) {
        workgroupBarrier();
        if (lid < s) { sv[lid] = sv[lid] + sv[lid + s]; }
    }
    workgroupBarrier();
    let out = sv[0];
    workgroupBarrier();
    return out;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= P[3]) { return; }
    let R = P[1];
    let inner = P[2];
    let base = (row / inner) * R * inner + row % inner;
    var m = bitcast<f32>(0xff800000u);
    for (var r = lid; r < R; r = r + 256u) { m = max(m, X[base + r * inner]); }
    m = reduce_max(lid, m);
    var s = 0.0;
    for (var r = lid; r < R; r = r + 256u) { s = s + exp(X[base + r * inner] - m); }
    s = reduce_sum(lid, s);
    for (var r = lid; r < R; r = r + 256u) {
        Y[base + r * inner] = exp(X[base + r * inner] - m) / s;
    }
}
