// Y[i] = EXPR(x), contiguous, one element per invocation, in words of type
// T (f32, or i32 for an op computing on integers). s0 and s1 are the op's
// scalar arguments (clip's bounds), as T.
// P: [n, s0, s1]
@group(0) @binding(0) var<storage, read> X: array<{{T}}>;
@group(0) @binding(1) var<storage, read_write> Y: array<{{T}}>;
@group(0) @binding(2) var<storage, read> P: array<u32>;

{{LIB}}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P[0]) { return; }
    let x = X[i];
    let s0 = bitcast<{{T}}>(P[1]);
    let s1 = bitcast<{{T}}>(P[2]);
    Y[i] = {{EXPR}};
}
