"""The emulator's records written out as :class:`~hetflow.executors.emulator.tuples.FieldTuple`s
behave as the namedtuples they replace: the same fields, defaults, repr,
``_replace``/``_asdict``/``_make``, pickling, and Dask rebuilding them on
a worker rather than shipping a plain tuple."""

import collections
import doctest
import pickle

import pytest

from hetflow.executors.emulator import EmuTraceStart, MemPlan, Program, load_elf, tuples
from hetflow.executors.emulator.elf import Segment
from hetflow.executors.emulator.isa import CInstr, Decoded, Instr
from hetflow.executors.emulator.machine import Region

from _guests import GUESTS

# each record, one value of it, and the namedtuple it stands for (its fields and defaults as they were)
CASES = [
    (Segment(0x1000, b"\x13\x00\x00\x00", 5), "vaddr data perm", ()),
    (Program("g", 0x1000, (), 8), "name entry segments tohost fetch stack memory symbols isa",
     (None, "executable", None, "protected", (), "rv64imac")),
    (Instr("addi", "I", 0x13, 0x707F, "alu"), "name fmt match mask cls", ()),
    (Decoded(3, 1, 2, 0, -5), "op rd rs1 rs2 imm size", (4,)),
    (CInstr("c.nop", 1, 0xFFFF, "addi", 0, 0, 0, "nz6", None), "name match mask base rd rs1 rs2 imm nonzero", ()),
    (Region("ram", 0x2000, 8, 3, bytes(8)), "name base size perm data", ()),
    (EmuTraceStart(0x1000, 7, 3, (0,) * 32, (0,) * 7), "pc step priv regs csrs reservation", (-1,)),
    (MemPlan(0, 0, 3, (8, 1), (16, 0), True), "segment_id first_row count first last is_last", ()),
]


@pytest.mark.parametrize("value,fields,defaults", CASES, ids=[type(c[0]).__name__ for c in CASES])
def test_a_record_behaves_as_its_namedtuple(value, fields, defaults):
    like = collections.namedtuple(type(value).__name__, fields, defaults=defaults)
    twin = like(*value)
    assert value == twin and hash(value) == hash(twin) and repr(value) == repr(twin)
    assert type(value)._fields == like._fields and type(value)._field_defaults == like._field_defaults
    assert [getattr(value, f) for f in like._fields] == list(twin)
    assert value._asdict() == twin._asdict()
    first = like._fields[0]
    changed = value._replace(**{first: "other"})
    assert type(changed) is type(value) and changed == twin._replace(**{first: "other"})
    with pytest.raises(ValueError, match="unexpected field names"):
        value._replace(nonsense=1)
    assert type(value)._make(list(value)) == value
    with pytest.raises(TypeError, match="Expected"):
        type(value)._make(list(value)[:-1])
    for protocol in (2, pickle.HIGHEST_PROTOCOL):
        back = pickle.loads(pickle.dumps(value, protocol))
        assert back == value and type(back) is type(value)


def test_dask_rebuilds_a_program_on_its_worker():
    # Dask ships a tuple as a namedtuple (rebuilt by its __new__) only when it has the whole namedtuple API;
    # else a witness task on a worker receives a plain tuple where it expects a Program
    dask = pytest.importorskip("dask")
    from dask.utils import is_namedtuple_instance

    program = load_elf(GUESTS / "fib.elf")
    assert is_namedtuple_instance(program)
    got = dask.get({"p": program, "kind": (type, "p"), "same": (lambda p: p, "p")}, ["kind", "same"])
    assert got == (Program, program)


def test_the_module_examples_run():
    assert doctest.testmod(tuples).failed == 0
