"""``plan`` keeps a stage off a Vulkan device whose kernels cannot bind its tensors: a relu of a 256 MiB tensor on
lavapipe (128 MiB bindings) was planned there and the run failed ("a tensor of 268435456 bytes exceeds the device's
largest storage binding"). The limits are the adapter's, which the probe's offer now carries."""

import pytest

from hetflow.engine.errors import ManifestError
from hetflow.engine.manifest.validate import compile_manifest, loads
from hetflow.engine.plan.planner import plan
from hetflow.executors import Offer, probe
from hetflow.executors.base import Vendor

vulkan = pytest.importorskip("hetflow.executors.vulkan")
from hetflow.executors.vulkan_device import AdapterDevice  # noqa: E402


def small_device(vendor):
    """A Vulkan device that binds 1 KiB at once and holds buffers of 4 KiB."""
    if vendor is Vendor.vulkan:
        device = AdapterDevice("vulkan:0:0000:0000", "a small device", device_type="cpu", max_binding_bytes=1024,
                               max_buffer_bytes=4096)
        return Offer(vendor, True, "planning-only offer", (device,), vulkan.SUPPORTED_DTYPES, vulkan.offered_ops())
    return probe(vendor)


def make(text):
    return plan(compile_manifest(loads(text, "m.yaml")), small_device)


MANIFEST = """\
version: 1
name: v
executors:
  host: {vendor: cpu}
  vk: {vendor: vulkan}
stages:
  a: {op: ones, args: {shape: [SIDE]}, executor: vk}
  b: {op: relu, inputs: [a]PIN}
outputs: {b: b}
"""


def test_a_stage_whose_tensor_the_device_cannot_bind_runs_elsewhere_or_is_refused_when_pinned():
    fits = make(MANIFEST.replace("SIDE", "256").replace("PIN", ""))  # 1 KiB: bound as it is
    assert fits.nodes["b"].executor == "vk"
    big = make(MANIFEST.replace("SIDE", "512").replace("PIN", ""))  # 2 KiB: held (ones binds nothing), not bound
    assert big.nodes["a"].executor == "vk" and big.nodes["b"].executor == "host"
    assert "its output of 2.0 KiB is larger than the 1.0 KiB the device's kernels bind at once" in big.nodes["b"].reason
    with pytest.raises(ManifestError) as info:
        make(MANIFEST.replace("SIDE", "512").replace("PIN", ", executor: vk"))
    (d,) = info.value.diagnostics
    assert str(d) == ("m.yaml:8:3: error: stage 'b' cannot run on executor 'vk' (vulkan): its output of 2.0 KiB is "
                      "larger than the 1.0 KiB the device's kernels bind at once (its max-storage-buffer-binding-size); "
                      "pin it to another executor (a cpu one computes it as written)")
    with pytest.raises(ManifestError) as info:  # past the largest buffer: not even held
        make(MANIFEST.replace("SIDE", "2048").replace("PIN", ""))
    assert "stage 'a' cannot run on executor 'vk' (vulkan): its output of 8.0 KiB is larger than the device's " \
           "largest buffer (4.0 KiB)" in str(info.value.diagnostics[0])


def test_this_machines_vulkan_adapter_says_its_limits():
    offer = probe(Vendor.vulkan)
    if not offer.available:
        pytest.skip("no Vulkan adapter here")
    device = offer.devices[0]
    assert device.max_binding_bytes > 0 and device.max_buffer_bytes >= device.max_binding_bytes


def software_device(vendor):
    """A software Vulkan device (lavapipe's kind) with roomy buffers."""
    if vendor is Vendor.vulkan:
        device = AdapterDevice("vulkan:0:0000:0000", "a software device", device_type="cpu",
                               max_binding_bytes=2**31, max_buffer_bytes=2**31)
        return Offer(vendor, True, "planning-only offer", (device,), vulkan.SUPPORTED_DTYPES, vulkan.offered_ops())
    return probe(vendor)


ATTENTION = """\
version: 1
name: a
executors:
  host: {vendor: cpu}
  vk: {vendor: vulkan}
stages:
  q: {op: ones, args: {shape: [1, 1, 1, 64]}, executor: host}
  k: {op: ones, args: {shape: [1, 1, KEYS, 64]}, executor: host}
  y: {op: attention, inputs: [q, k, k]PIN}
outputs: {y: y}
"""


def test_attention_a_software_device_would_cut_short_is_kept_off_it():
    """Attention over 32,768 keys of head size 64 on lavapipe was planned there and failed its stage at run:
    one invocation would loop past the 65535 iterations after which lavapipe ends a loop."""
    def make_on(text):
        return plan(compile_manifest(loads(text, "m.yaml")), software_device)

    short = make_on(ATTENTION.replace("KEYS", "4096").replace("PIN", ", executor: vk"))
    assert short.nodes["y"].executor == "vk"
    free = make_on(ATTENTION.replace("KEYS", "32768").replace("PIN", ""))
    assert free.nodes["y"].executor == "host" and "loops 66561 times in one invocation" in free.nodes["y"].reason
    with pytest.raises(ManifestError) as info:
        make_on(ATTENTION.replace("KEYS", "32768").replace("PIN", ", executor: vk"))
    (d,) = info.value.diagnostics
    assert str(d) == ("m.yaml:9:3: error: stage 'y' cannot run on executor 'vk' (vulkan): attention over 32768 keys of "
                      "head size 64 (values 64) loops 66561 times in one invocation, past the 65535 after which a "
                      "software Vulkan device (lavapipe) ends a loop; pin it to another executor (a cpu one computes "
                      "it as written)")
