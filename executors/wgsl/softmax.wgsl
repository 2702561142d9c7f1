// softmax over one axis, viewed as [outer, R, inner] like the reductions,
// after them: M holds each row's maximum and S its sum of exp(x - max)
// (reduce.wgsl's passes), and each value becomes exp(x - max) / sum, one
// per invocation, as the CPU body computes it.
// P: [n, R, inner]
@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read> M: array<f32>;
@group(0) @binding(2) var<storage, read> S: array<f32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;
@group(0) @binding(4) var<storage, read> P: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P[0]) { return; }
    let inner = P[2];
    let row = (i / (P[1] * inner)) * inner + i % inner;
    Y[i] = exp(X[i] - M[row]) / S[row];
}
