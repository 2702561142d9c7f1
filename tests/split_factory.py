"""The split CPU executor as a factory for the executor conformance suite (``HETFLOW_EXECUTOR``).

    HETFLOW_EXECUTOR=split_factory:make python -m pytest tests/test_executor_contract.py -k external
"""

from hetflow.executors.base import DeviceSet
from hetflow.executors.split import SplitCpuExecutor


def make(name, memory_limit=None):
    # even shares: the suite's memory test fills the executor's memory_limit exactly, and each device holds an
    # even share of it (an uneven split puts more than its share on the first device, as it should)
    return SplitCpuExecutor(name, DeviceSet((0, 1)), memory_limit=memory_limit)
