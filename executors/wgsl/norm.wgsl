// rmsnorm or layernorm over the last axis: one workgroup per row of R
// values. rms: y = x / sqrt(mean(x^2) + eps); layer: the mean first, then
// the variance around it (two passes, as numpy computes it), then
// y = (x - mean) / sqrt(var + eps). Weight and bias, each of R values,
// apply when the flags in P say they were given.
// P: [rows, R, has_weight, has_bias, bitcast<u32>(eps)]
@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read> W: array<f32>;
@group(0) @binding(2) var<storage, read> Bv: array<f32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;
@group(0) @binding(4) var<storage, read> P: array<u32>;

const MODE: u32 = {{MODE}}u;  // 0 rms, 1 layer
var<workgroup> sv: array<f32, 256>;

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
    if (row >= P[0]) { return; }
    let R = P[1];
    let eps = bitcast<f32>(P[4]);
    let base = row * R;
    var mean = 0.0;
    if (MODE == 1u) {
        var s = 0.0;
        for (var r = lid; r < R; r = r + 256u) { s = s + X[base + r]; }
        mean = reduce_sum(lid, s) / f32(R);
    }
    var q = 0.0;
    for (var r = lid; r < R; r = r + 256u) {
        let c = X[base + r] - mean;
        q = q + c * c;
    }
    let inv = 1.0 / sqrt(reduce_sum(lid, q) / f32(R) + eps);
    for (var r = lid; r < R; r = r + 256u) {
        var y = (X[base + r] - mean) * inv;
        if (P[2] != 0u) { y = y * W[r]; }
        if (P[3] != 0u) { y = y + Bv[r]; }
        Y[base + r] = y;
    }
}
