// f32 -> packed storage of dtype DT, one 32-bit word per invocation, so no
// two invocations write the same word. Elements past n pad with zero bits.
// P: [n, words]
@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> S: array<u32>;
@group(0) @binding(2) var<storage, read> P: array<u32>;

const DT: u32 = {{DT}}u;
const BITS: u32 = {{BITS}}u;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let w = gid.x + gid.y * nwg.x * 256u;
    if (w >= P[1]) { return; }
    let n = P[0];
    let per = 32u / BITS;
    var word = 0u;
    for (var j = 0u; j < per; j = j + 1u) {
        let e = w * per + j;
        if (e < n) {
            word = word | (encode_bits(bitcast<u32>(X[e]), DT) << (j * BITS));
        }
    }
    S[w] = word;
}
