// ONNX Gather along one axis: the data viewed as [outer, D, inner] with D
// the gathered axis, the output as [outer, m, inner] with m the number of
// indices; Y[o, j, r] = X[o, idx(j), r]. An index in [-D, D) counts from
// the end when negative, as numpy's take does; one outside it sets the
// status word S to 1 + its position, which the executor reports as the
// error numpy raises, and the element to 0.
// P: [n, outer, D, inner, m]
@group(0) @binding(0) var<storage, read> X: array<{{T}}>;
@group(0) @binding(1) var<storage, read> I: array<i32>;
@group(0) @binding(2) var<storage, read_write> Y: array<{{T}}>;
@group(0) @binding(3) var<storage, read_write> S: array<atomic<u32>>;
@group(0) @binding(4) var<storage, read> P: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P[0]) { return; }
    let D = P[2];
    let inner = P[3];
    let m = P[4];
    let r = i % inner;
    let j = (i / inner) % m;
    let o = i / (inner * m);
    var k = I[j];
    if (k < 0) { k = k + i32(D); }
    if (k < 0 || u32(k) >= D) {
        atomicMax(&S[0], j + 1u);
        Y[i] = {{T}}(0);
        return;
    }
    Y[i] = X[(o * D + u32(k)) * inner + r];
}
