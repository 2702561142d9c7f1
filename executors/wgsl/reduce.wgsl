// sum, mean, max, argmax, min or argmin over one axis, in passes. The input
// is viewed as [outer, R, inner] with R the reduced axis (R = n, outer =
// inner = 1 for all axes), and each of the outer * inner rows is cut into
// chunks of SPAN values: one workgroup reduces one chunk, its 256
// invocations striding over it, then halving their partial results in
// workgroup memory. With more than one chunk a row's partial results go to
// Y (and their indices to YI) as the [rows, chunks] input of the next pass;
// the pass with one chunk writes the result. Chunks, not one workgroup
// striding over a whole row, because lavapipe ends every loop of an
// invocation after 65535 iterations in all (llvmpipe's loop limiter, one
// counter per invocation): SPAN / 256 iterations a pass stay far below it.
// argmax and argmin keep (value, index) pairs and prefer the lower index on
// a tie, numpy's first occurrence (the higher one with select_last_index);
// a NaN is more extreme than any number, so max and min are NaN and
// argmax and argmin find the first NaN (the last), as numpy's do. Their
// result is the index's bits, an i32 word, exact above 2^24. PRE transforms
// each value of the first pass with the row's value in M: exp(x - m) (the
// softmax's sum) or (x - m)^2 (a variance). An empty reduction never
// reaches the kernel: its identity is the CPU body's.
// P: [outer, R, inner, rows, chunks, SPAN, count (mean's divisor), first pass]
@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read> XI: array<u32>;
@group(0) @binding(2) var<storage, read> M: array<f32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;
@group(0) @binding(4) var<storage, read_write> YI: array<u32>;
@group(0) @binding(5) var<storage, read> P: array<u32>;

const MODE: u32 = {{MODE}}u;  // 0 sum, 1 mean, 2 max, 3 argmax, 4 min, 5 argmin
const PRE: u32 = {{PRE}}u;  // 0 x, 1 exp(x - m), 2 (x - m)^2
var<workgroup> sv: array<f32, 256>;
var<workgroup> si: array<u32, 256>;

const LAST: bool = {{LAST}}u == 1u;  // argmax/argmin: the last extreme on a tie (select_last_index)

fn is_nan(x: f32) -> bool {
    let b = bitcast<u32>(x);
    return (b & 0x7f800000u) == 0x7f800000u && (b & 0x007fffffu) != 0u;
}

fn better(v: f32, i: u32, w: f32, j: u32) -> bool {
    if (i == 0xffffffffu) { return false; }
    if (j == 0xffffffffu) { return true; }
    let vn = is_nan(v);
    let wn = is_nan(w);
    let tie = select((i < j), (i > j), LAST);
    if (vn || wn) { return vn && (!wn || tie); }
    if (v == w) { return tie; }
    if (MODE >= 4u) { return v < w; }
    return v > w;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let g = wid.x + wid.y * nwg.x;
    let chunks = P[4];
    if (g >= P[3] * chunks) { return; }
    let row = g / chunks;
    let R = P[1];
    let inner = P[2];
    let base = (row / inner) * R * inner + row % inner;
    let start = (g % chunks) * P[5];
    let end = min(R, start + P[5]);
    let first = P[7] != 0u;
    var acc = 0.0;
    var idx = 0xffffffffu;
    if (MODE >= 2u) { acc = bitcast<f32>(select(0xff800000u, 0x7f800000u, MODE >= 4u)); }
    for (var r = start + lid; r < end; r = r + 256u) {
        var v = X[base + r * inner];
        if (PRE == 1u && first) {
            v = exp(v - M[row]);
        } else if (PRE == 2u && first) {
            let c = v - M[row];
            v = c * c;
        }
        if (MODE < 2u) {
            acc = acc + v;
        } else {
            let i = select(XI[base + r * inner], r, first);
            if (better(v, i, acc, idx)) {
                acc = v;
                idx = i;
            }
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
        if (chunks > 1u) {
            Y[g] = sv[0];
            YI[g] = si[0];
            return;
        }
        switch MODE {
            case 1u: { Y[row] = sv[0] / f32(P[6]); }
            case 3u, 5u: { Y[row] = bitcast<f32>(si[0]); }
            default: { Y[row] = sv[0]; }
        }
    }
}
