// Y[i] = C[i] != 0 ? A[i] : B[i] with numpy broadcasting of all three, the
// values as words of type T, the condition as i32 words (a bool is 0 or 1)
// or, for a float condition (COND_F32 1), f32 words, where -0.0 is zero too.
// P: [n, rank, dims[rank], c_strides[rank], a_strides[rank], b_strides[rank]]
@group(0) @binding(0) var<storage, read> C: array<u32>;
@group(0) @binding(1) var<storage, read> A: array<{{T}}>;
@group(0) @binding(2) var<storage, read> B: array<{{T}}>;
@group(0) @binding(3) var<storage, read_write> Y: array<{{T}}>;
@group(0) @binding(4) var<storage, read> P: array<u32>;

const COND_F32: bool = {{COND_F32}}u == 1u;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P[0]) { return; }
    let rank = P[1];
    var rest = i;
    var ic = 0u;
    var ia = 0u;
    var ib = 0u;
    for (var d = rank; d > 0u; d = d - 1u) {
        let k = d - 1u;
        let c = rest % P[2u + k];
        rest = rest / P[2u + k];
        ic = ic + c * P[2u + rank + k];
        ia = ia + c * P[2u + 2u * rank + k];
        ib = ib + c * P[2u + 3u * rank + k];
    }
    let c = select(C[ic], C[ic] & 0x7fffffffu, COND_F32);
    Y[i] = select(B[ib], A[ia], c != 0u);
}
