// Transpose as a gather of words of type T (f32 or i32): output
// coordinates, last axis fastest, index the input through its strides
// permuted into output order.
// P: [n, rank, out_dims[rank], in_strides[rank]]
@group(0) @binding(0) var<storage, read> X: array<{{T}}>;
@group(0) @binding(1) var<storage, read_write> Y: array<{{T}}>;
@group(0) @binding(2) var<storage, read> P: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P[0]) { return; }
    let rank = P[1];
    var rest = i;
    var src = 0u;
    for (var d = rank; d > 0u; d = d - 1u) {
        let k = d - 1u;
        let c = rest % P[2u + k];
        rest = rest / P[2u + k];
        src = src + c * P[2u + rank + k];
    }
    Y[i] = X[src];
}
