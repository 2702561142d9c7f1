// sum, mean, max, argmax, min or argmin over one axis. The input is viewed as
// [outer, R, inner] with R the reduced axis (R = n, outer = inner = 1 for
// all axes); one workgroup computes one of the outer * inner results: its
// 256 invocations stride over R, then halve their partial results in
// workgroup memory. argmax and argmin keep (value, index) pairs and prefer
// the lower index on a tie, numpy's first occurrence (the higher one with
// select_last_index). An empty reduction never reaches the kernel: its
// identity is the CPU body's.
// P: [outer, R, inner, rows]
@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@group(0) @binding(2) var<storage, read> P: array<u32>;

const MODE: u32 = {{MODE}}u;  // 0 sum, 1 mean, 2 max, 3 argmax, 4 min, 5 argmin
var<workgroup> sv: array<f32, 256>;
var<workgroup> si: array<u32, 256>;

const LAST: bool = {{LAST}}u == 1u;  // argmax/argmin: the last extreme on a tie (select_last_index)

fn better(v: f32, i: u32, w: f32, j: u32) -> bool {
    if (i == 0xffffffffu) { return false; }
    if (j == 0xffffffffu) { return true; }
    let tie = v == w && select((i < j), (i > j), LAST);
    if (MODE >= 4u) { return v < w || tie; }
    return v > w || tie;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= P[3]) { return; }
    let R = P[1];
    let inner = P[2];
    let base = (row / inner) * R * inner + row % inner;
    var acc = 0.0;
    var idx = 0xffffffffu;
    if (MODE >= 2u) { acc = bitcast<f32>(select(0xff800000u, 0x7f800000u, MODE >= 4u)); }
    for (var r = lid; r < R; r = r + 256u) {
        let v = X[base + r * inner];
        if (MODE < 2u) {
            acc = acc + v;
        } else if (better(v, r, acc, idx)) {
            acc = v;
            idx = r;
        }
    }
    sv[lid] = acc;
    si[lid] = idx;
    for (var s = 128u; s > 0u; s = s >> 1u) {
        workgroupBarrier();
        if (lid < s) {
            if (MODE < 2u) {
                sv[lid] = sv[lid] + sv[lid + s];
            } else if (better(sv[lid + s], si[lid + s], sv[lid], si[lid])) {
                sv[lid] = sv[lid + s];
                si[lid] = si[lid + s];
            }
        }
    }
    workgroupBarrier();
    if (lid == 0u) {
        switch MODE {
            case 1u: { Y[row] = sv[0] / f32(R); }
            case 3u, 5u: { Y[row] = f32(si[0]); }
            default: { Y[row] = sv[0]; }
        }
    }
}
