// C = A @ B for row-major A [M, K] and B [K, N], one 64x64 tile of C per
// workgroup of 16x16 invocations, each accumulating 4x4 outputs in
// registers. The K axis is walked in steps of 16: the workgroup stages a
// 64x16 slab of A and a 16x64 slab of B in workgroup memory (each value
// read from global memory once per tile), then every invocation reads its
// rows and columns from there as vec4s. Invocation (tx, ty) owns rows
// 4ty..4ty+3 and columns 4tx..4tx+3. The accumulators are four vec4s, not
// an indexed array, so the compiler keeps them in registers (indexing an
// array with a loop variable sends it to memory on some drivers).
// Batches: first + workgroup_id.z (a dispatch has at most 65535 in z, so
// more batches take more dispatches), split into coordinates over the
// broadcast batch dims; each operand's batch offset comes from its strides.
// One dispatch sums the products of k in [k0, k1) and adds C's values when
// k0 > 0: long K axes go in slices, as lavapipe ends every loop of an
// invocation after 65535 iterations in all.
// P: [M, N, K, first, k0, k1, brank, bdims[brank], a_strides[brank], b_strides[brank]]
@group(0) @binding(0) var<storage, read> A: array<f32>;
@group(0) @binding(1) var<storage, read> B: array<f32>;
@group(0) @binding(2) var<storage, read_write> C: array<f32>;
@group(0) @binding(3) var<storage, read> P: array<u32>;

var<workgroup> As: array<vec4<f32>, 256>;  // [16 k][16 row quads]
var<workgroup> Bs: array<vec4<f32>, 256>;  // [16 k][16 column quads]

fn load_a(aoff: u32, r: u32, k: u32, M: u32, K: u32) -> f32 {
    if (r < M && k < K) { return A[aoff + r * K + k]; }
    return 0.0;
}

fn load_b(boff: u32, k: u32, c: u32, K: u32, N: u32) -> f32 {
    if (k < K && c < N) { return B[boff + k * N + c]; }
    return 0.0;
}

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let M = P[0];
    let N = P[1];
    let K = P[2];
    let brank = P[6];
    let batch = P[3] + wid.z;
    var rest = batch;
    var aoff = 0u;
    var boff = 0u;
    for (var d = brank; d > 0u; d = d - 1u) {
        let k = d - 1u;
        let c = rest % P[7u + k];
        rest = rest / P[7u + k];
        aoff = aoff + c * P[7u + brank + k];
        boff = boff + c * P[7u + 2u * brank + k];
    }
    let coff = batch * M * N;
    let row0 = wid.y * 64u;
    let col0 = wid.x * 64u;
    let tx = lid.x;
    let ty = lid.y;
    // staging: invocation (tx, ty) loads rows 4q..4q+3 of A at k = kq, and
    // columns 4q..4q+3 of B at k = kq, with kq = ty and q = tx
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    let k1 = P[5];
    for (var k0 = P[4]; k0 < k1; k0 = k0 + 16u) {
        let k = k0 + ty;
        let r = row0 + 4u * tx;
        As[ty * 16u + tx] = vec4<f32>(load_a(aoff, r, k, M, K), load_a(aoff, r + 1u, k, M, K),
                                      load_a(aoff, r + 2u, k, M, K), load_a(aoff, r + 3u, k, M, K));
        let c = col0 + 4u * tx;
        Bs[ty * 16u + tx] = vec4<f32>(load_b(boff, k, c, K, N), load_b(boff, k, c + 1u, K, N),
                                      load_b(boff, k, c + 2u, K, N), load_b(boff, k, c + 3u, K, N));
        workgroupBarrier();
        for (var kk = 0u; kk < 16u; kk = kk + 1u) {
            let a = As[kk * 16u + ty];
            let b = Bs[kk * 16u + tx];
            acc0 = acc0 + a.x * b;
            acc1 = acc1 + a.y * b;
            acc2 = acc2 + a.z * b;
            acc3 = acc3 + a.w * b;
        }
        workgroupBarrier();
    }
    let gr = row0 + 4u * ty;
    let gc = col0 + 4u * tx;
    let more = P[4] > 0u;
    store(coff, gr, gc, M, N, acc0, more);
    store(coff, gr + 1u, gc, M, N, acc1, more);
    store(coff, gr + 2u, gc, M, N, acc2, more);
    store(coff, gr + 3u, gc, M, N, acc3, more);
}

fn store(coff: u32, r: u32, c: u32, M: u32, N: u32, v: vec4<f32>, more: bool) {
    if (r >= M) { return; }
    let o = coff + r * N + c;
    if (c < N) { put(o, v.x, more); }
    if (c + 1u < N) { put(o + 1u, v.y, more); }
    if (c + 2u < N) { put(o + 2u, v.z, more); }
    if (c + 3u < N) { put(o + 3u, v.w, more); }
}

fn put(o: u32, v: f32, more: bool) {
    if (more) { C[o] = C[o] + v; } else { C[o] = v; }
}
