// Packed storage of dtype DT -> f32, one element per invocation.
// P: [n]
@group(0) @binding(0) var<storage, read> S: array<u32>;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@group(0) @binding(2) var<storage, read> P: array<u32>;

const DT: u32 = {{DT}}u;
const BITS: u32 = {{BITS}}u;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P[0]) { return; }
    let per = 32u / BITS;
    let word = S[i / per];
    let h = (word >> ((i % per) * BITS)) & select((1u << BITS) - 1u, 0xffffffffu, BITS == 32u);
    Y[i] = decode_bits(h, DT);
}
