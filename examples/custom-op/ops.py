"""Two ops of one's own: a normalisation with a hand-written Vulkan kernel, and a score."""

from hetflow import op

# The Vulkan kernel of lab.scale_shift: input at binding 0, output at 1, and P
# with P[0] the element count, then the args in declared order as f32 bits.
SCALE_SHIFT_WGSL = """
@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@group(0) @binding(2) var<storage, read> P: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P[0]) { return; }
    Y[i] = X[i] * bitcast<f32>(P[1]) + bitcast<f32>(P[2]);
}
"""


@op("lab.scale_shift", dtypes=["fp32", "fp16", "bf16"])
def scale_shift(xp, x, *, scale: float = 1.0, shift: float = 0.0):
    """x * scale + shift."""
    return x * scale + shift


scale_shift.kernel("vulkan", wgsl=SCALE_SHIFT_WGSL)


@op("lab.accuracy", dtypes=["fp32"], shape=lambda logits, labels: (),
    cost=lambda logits, labels: {"flops": 2 * logits[0] * logits[1], "bytes": 4 * logits[0] * (logits[1] + 1)})
def accuracy(xp, logits, labels):
    """The share of rows whose largest logit is at the label."""
    return xp.mean(xp.argmax(logits, axis=1) == labels).astype("float32")
