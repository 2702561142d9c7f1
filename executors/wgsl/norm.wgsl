// rmsnorm or layernorm over the last axes, rows of R values, after the
// reductions (reduce.wgsl's passes): MEAN holds each row's mean (zeros for
// rms) and VAR its mean of (x - mean)^2, the two passes numpy makes; each
// value becomes y = (x - mean) / sqrt(var + eps), one per invocation.
// Weight and bias, each of R values, apply when the flags in P say they
// were given.
// P: [n, R, has_weight, has_bias, bitcast<u32>(eps)]
@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read> W: array<f32>;
@group(0) @binding(2) var<storage, read> Bv: array<f32>;
@group(0) @binding(3) var<storage, read> MEAN: array<f32>;
@group(0) @binding(4) var<storage, read> VAR: array<f32>;
@group(0) @binding(5) var<storage, read_write> Y: array<f32>;
@group(0) @binding(6) var<storage, read> P: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P[0]) { return; }
    let R = P[1];
    let row = i / R;
    let r = i % R;
    let inv = 1.0 / sqrt(VAR[row] + bitcast<f32>(P[4]));
    var y = (X[i] - MEAN[row]) * inv;
    if (P[2] != 0u) { y = y * W[r]; }
    if (P[3] != 0u) { y = y + Bv[r]; }
    Y[i] = y;
}
