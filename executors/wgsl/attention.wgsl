// Scaled dot-product attention, one workgroup of 64 invocations per query
// row (b, h, i) of the [B, Hq, Sq] rows, in three passes over the keys:
// the scores q.k * scale, masked to -inf (bool mask false, a key after the
// causal frontier j > i + offset) or with an additive float mask added,
// go to the scratch rows SC while their maximum is found; then exp(s -
// max) (0 for a masked key; max is 0 when every key is masked), divided by
// their sum (1 when it is 0, so a fully masked row gives zeros), as the
// CPU body computes them; then each output value sum_j w_j * v_j.
// Grouped-query attention: query head h reads key/value head h / GROUP.
// Every tensor is addressed through (batch, head, position) strides, so 4-D
// [B, H, S, D] and 3-D [B, S, H * D] (heads packed in the last axis) are
// the same kernel; a stride is 0 along an axis an input broadcasts over.
// P: [B, Hq, Sq, Skv, D, Dv, GROUP, q(3), k(3), v(3), y(3), mask(4), mask_len, causal, offset, scale]
@group(0) @binding(0) var<storage, read> Q: array<f32>;
@group(0) @binding(1) var<storage, read> K: array<f32>;
@group(0) @binding(2) var<storage, read> V: array<f32>;
@group(0) @binding(3) var<storage, read> M: array<u32>;
@group(0) @binding(4) var<storage, read_write> SC: array<f32>;
@group(0) @binding(5) var<storage, read_write> Y: array<f32>;
@group(0) @binding(6) var<storage, read> P: array<u32>;

const MASK: u32 = {{MASK}}u;  // 0 none, 1 bool (i32 words), 2 additive float
const NEG_INF: u32 = 0xff800000u;
var<workgroup> sv: array<f32, 64>;

fn reduce(lid: u32, v: f32, is_max: bool) -> f32 {
    sv[lid] = v;
    for (var s = 32u; s > 0u; s = s >> 1u) {
        workgroupBarrier();
        if (lid < s) {
            if (is_max) { sv[lid] = max(sv[lid], sv[lid + s]); } else { sv[lid] = sv[lid] + sv[lid + s]; }
        }
    }
    workgroupBarrier();
    let out = sv[0];
    workgroupBarrier();
    return out;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let Hq = P[1];
    let Sq = P[2];
    let Skv = P[3];
    let D = P[4];
    let Dv = P[5];
    let row = wid.x + wid.y * nwg.x;
    if (row >= P[0] * Hq * Sq) { return; }
    let i = row % Sq;
    let h = (row / Sq) % Hq;
    let b = row / (Sq * Hq);
    let hk = h / P[6];
    let qo = b * P[7] + h * P[8] + i * P[9];
    let ko = b * P[10] + hk * P[11];
    let vo = b * P[13] + hk * P[14];
    let yo = b * P[16] + h * P[17] + i * P[18];
    let mo = b * P[19] + h * P[20] + i * P[21];
    let mlen = P[23];
    let causal = P[24] != 0u;
    let offset = bitcast<i32>(P[25]);
    let scale = bitcast<f32>(P[26]);
    let base = row * Skv;

    var top = bitcast<f32>(NEG_INF);
    for (var j = lid; j < Skv; j = j + 64u) {
        var masked = causal && i32(j) > i32(i) + offset;
        var add = 0.0;
        if (MASK != 0u) {
            if (j >= mlen) {
                masked = true;
            } else {
                let w = M[mo + j * P[22]];
                if (MASK == 1u) {
                    masked = masked || w == 0u;
                } else if (w == NEG_INF) {
                    masked = true;
                } else {
                    add = bitcast<f32>(w);
                }
            }
        }
        var s = bitcast<f32>(NEG_INF);
        if (!masked) {
            var dot = 0.0;
            for (var c = 0u; c < D; c = c + 1u) { dot = dot + Q[qo + c] * K[ko + j * P[12] + c]; }
            s = dot * scale + add;
            top = max(top, s);
        }
        SC[base + j] = s;
    }
    top = reduce(lid, top, true);
    if (bitcast<u32>(top) == NEG_INF) { top = 0.0; }
    var total = 0.0;
    for (var j = lid; j < Skv; j = j + 64u) {
        let s = SC[base + j];
        var e = 0.0;
        if (bitcast<u32>(s) != NEG_INF) { e = exp(s - top); }
        SC[base + j] = e;
        total = total + e;
    }
    total = reduce(lid, total, false);
    if (total == 0.0) { total = 1.0; }
    storageBarrier();
    workgroupBarrier();
    for (var c = lid; c < Dv; c = c + 64u) {
        var acc = 0.0;
        for (var j = 0u; j < Skv; j = j + 1u) { acc = acc + (SC[base + j] / total) * V[vo + j * P[15] + c]; }
        Y[yo + c] = acc;
    }
}
