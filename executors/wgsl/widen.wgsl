// Packed storage of dtype DT -> 32-bit words of kind WORD (0 f32, 1 i32),
// one element per invocation. i32 words are for the integer dtypes only.
// P: [n]
@group(0) @binding(0) var<storage, read> S: array<u32>;
@group(0) @binding(1) var<storage, read_write> Y: array<u32>;
@group(0) @binding(2) var<storage, read> P: array<u32>;

const DT: u32 = {{DT}}u;
const BITS: u32 = {{BITS}}u;
const LOW: u32 = 0xffffffffu >> (32u - BITS);  // the low BITS bits
const WORD: u32 = {{WORD}}u;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P[0]) { return; }
    let per = 32u / BITS;
    let word = S[i / per];
    let h = (word >> ((i % per) * BITS)) & LOW;
    if (WORD == 1u) {
        Y[i] = bitcast<u32>(decode_i32(h, DT));
    } else {
        Y[i] = bitcast<u32>(decode_bits(h, DT));
    }
}
