// 32-bit words of kind WORD (0 f32, 1 i32) -> packed storage of dtype DT,
// one 32-bit output word per invocation, so no two invocations write the
// same word. An i32 word is first wrapped to CT, the integer type the op's
// result has before conversion (numpy computes uint8 + uint8 in uint8).
// Elements past n pad with zero bits.
// P: [n, words]
@group(0) @binding(0) var<storage, read> X: array<u32>;
@group(0) @binding(1) var<storage, read_write> S: array<u32>;
@group(0) @binding(2) var<storage, read> P: array<u32>;

const DT: u32 = {{DT}}u;
const BITS: u32 = {{BITS}}u;
const LOW: u32 = 0xffffffffu >> (32u - BITS);  // the low BITS bits
const WORD: u32 = {{WORD}}u;
const CT: u32 = {{CT}}u;

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
            var bits = 0u;
            if (WORD == 1u) {
                bits = encode_i32(wrap_i32(bitcast<i32>(X[e]), CT), DT);
            } else {
                bits = encode_bits(X[e], DT);
            }
            word = word | ((bits & LOW) << (j * BITS));
        }
    }
    S[w] = word;
}
