// Y[i] = EXPR(a, b) with numpy broadcasting, in words of type T (f32, or
// i32 for an op computing on integers, whose + - * wrap as numpy's do):
// the output index is split into coordinates, last axis fastest, and each
// input's element is found through its strides (0 along an axis it is
// broadcast over).
// P: [n, rank, dims[rank], a_strides[rank], b_strides[rank]]
@group(0) @binding(0) var<storage, read> A: array<{{T}}>;
@group(0) @binding(1) var<storage, read> B: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> Y: array<{{T}}>;
@group(0) @binding(3) var<storage, read> P: array<u32>;

{{LIB}}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P[0]) { return; }
    let rank = P[1];
    var rest = i;
    var ia = 0u;
    var ib = 0u;
    for (var d = rank; d > 0u; d = d - 1u) {
        let k = d - 1u;
        let c = rest % P[2u + k];
        rest = rest / P[2u + k];
        ia = ia + c * P[2u + rank + k];
        ib = ib + c * P[2u + 2u * rank + k];
    }
    let a = A[ia];
    let b = B[ib];
    Y[i] = {{EXPR}};
}
