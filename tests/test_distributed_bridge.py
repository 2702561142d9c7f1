"""A bridge's portable bytes on Dask's wire: out of band, no copy on export, into or out of the message, or on import.

Dask's comms turn a message into frames with ``distributed.protocol.dumps``
and back with ``loads``; a TCP read fills one fresh buffer per frame. The
portable activation's bytes must be a frame of their own, sent from the
exporter's memory, and the importer must adopt the received frame.
"""

import pickle

import numpy as np
import pytest

from hetflow.executors.base import Dtype, PortableActivation
from hetflow.executors.cpu import CpuExecutor

pytest.importorskip("distributed")

from distributed.protocol import dumps, loads  # noqa: E402
from distributed.protocol.serialize import Serialize  # noqa: E402


def _frames_of(value):
    # what a worker sends for a task result another worker fetches
    return dumps({"data": Serialize(value)})


@pytest.mark.parametrize("dtype", [Dtype.fp32, Dtype.bf16, Dtype.int8])
def test_the_bytes_are_a_frame_of_their_own_sent_from_the_exporters_memory(dtype):
    source = CpuExecutor("source")
    values = np.random.default_rng(0).standard_normal((256, 300)).astype(dtype.numpy)
    handle = source.import_activation(PortableActivation.from_array(values, dtype))
    portable = source.export_activation(handle)
    exported = np.frombuffer(portable.bytes, np.uint8)
    assert np.shares_memory(exported, source._get(handle)), "the export copied the activation"

    frames = _frames_of(portable)
    big = [f for f in frames if len(memoryview(f).cast("B")) >= portable.nbytes]
    assert len(big) == 1 and len(memoryview(big[0]).cast("B")) == portable.nbytes
    assert np.shares_memory(np.frombuffer(big[0], np.uint8), exported), "the bytes were copied into the message"
    assert sum(len(memoryview(f).cast("B")) for f in frames) < portable.nbytes + 1024


@pytest.mark.parametrize("dtype", [Dtype.fp32, Dtype.fp16, Dtype.int8])
def test_the_importer_adopts_the_received_frame(dtype):
    source, destination = CpuExecutor("source"), CpuExecutor("destination")
    values = np.random.default_rng(1).standard_normal((128, 77)).astype(dtype.numpy)
    portable = source.export_activation(source.import_activation(PortableActivation.from_array(values, dtype)))

    received = [bytearray(f) for f in _frames_of(portable)]  # a socket read fills fresh buffers
    arrived = loads(received)["data"]
    assert isinstance(arrived, PortableActivation) and arrived.bytes.readonly
    handle = destination.import_activation(arrived)
    adopted = destination.export_activation(handle).to_array()
    assert np.array_equal(adopted, values)
    frame = next(f for f in received if len(f) == portable.nbytes)
    held = destination._get(handle)
    assert np.shares_memory(held, np.frombuffer(frame, np.uint8)), "the import copied the received bytes"
    assert not held.flags.writeable
    destination.release_activation(handle)
    assert destination.live_activations() == 0


def test_older_pickle_protocols_carry_plain_bytes():
    portable = PortableActivation.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), Dtype.fp32)
    again = pickle.loads(pickle.dumps(portable, protocol=4))
    assert isinstance(again.bytes, bytes) and np.array_equal(again.to_array(), portable.to_array())
    in_band = pickle.loads(pickle.dumps(portable, protocol=5))
    assert np.array_equal(in_band.to_array(), portable.to_array()) and in_band.shape == portable.shape


def test_a_non_contiguous_activation_is_exported_through_a_staging_copy():
    source = CpuExecutor("source")
    handle = source.import_activation(PortableActivation.from_array(np.arange(12, dtype=np.float32).reshape(3, 4),
                                                                    Dtype.fp32))
    array = source._get(handle)
    strided = source._register(array.T)
    portable = source.export_activation(strided)
    assert np.array_equal(portable.to_array(), np.arange(12, dtype=np.float32).reshape(3, 4).T)
    assert not np.shares_memory(np.frombuffer(portable.bytes, np.uint8), array)
