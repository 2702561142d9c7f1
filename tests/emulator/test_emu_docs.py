"""docs/reference/emulator.md against the code it describes: the witness codes table is the ISA table's, the
mem_op codes are what the backends write, and the entry points live where the page says."""

import re
from pathlib import Path

import numpy as np
import pytest

import hetflow.executors.emulator as emu
from hetflow.executors.emulator import isa, witness
from hetflow.executors.emulator.output import BackendArtifacts

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "emulator.md").read_text()
SUITE = Path(__file__).resolve().parents[1] / "data" / "riscv-tests" / "elf"


def test_codes_table_is_the_isa_table():
    rows = re.findall(r"^\| (\d+) `(\w+)` \| (.+) \|$", PAGE, re.M)
    assert [(int(i), c) for i, c, _ in rows] == list(enumerate(isa.CLASSES))
    documented = {}
    for _, cls, ops in rows:
        for code, name in re.findall(r"(\d+) `([\w.]+)`", ops):
            documented[int(code)] = (name, cls)
    assert documented == {i: (r.name, r.cls) for i, r in enumerate(isa.TABLE)}


def test_witness_columns_are_the_documented_ones():
    listed = re.search(r"One row a step, in step order, 16 int64 columns \(.*?\): (.*?)\.\n", PAGE, re.S).group(1)
    assert tuple(re.findall(r"`(\w+)`", listed)) == witness.COLUMNS


@pytest.mark.parametrize("name, codes", [("rv64ua-p-lrsc", {0, 1, 2, 3}), ("rv64ua-p-amoadd_d", {0, 1, 2, 3}),
                                         ("rv64uc-p-rvc", {0, 1, 2})])
def test_mem_op_codes_are_what_the_page_says(name, codes):
    program = emu.load_elf(SUITE / name, memory="flat")
    out = emu.execute(program, backend="reference")
    t = np.concatenate([emu.witness_table(program, tr) for tr in out.min_traces])
    col = {c: t[:, witness.COLUMNS.index(c)] for c in witness.COLUMNS}
    names = np.array([isa.TABLE[o].name if o >= 0 else "" for o in col["op"]])
    trapped = col["trap"] >= 0
    loads = np.isin(names, [r.name for r in isa.TABLE if r.cls == "load"] + ["lr.w", "lr.d"]) & ~trapped
    stores = np.isin(names, [r.name for r in isa.TABLE if r.cls == "store"]) & ~trapped
    amos = np.char.startswith(names, "amo") & ~trapped
    # "0 none (or a trapped step), 1 read (loads, LR), 2 write (stores, a successful SC), 3 read then write (AMOs)"
    assert (col["mem_op"][loads] == 1).all() and (col["mem_op"][stores] == 2).all()
    assert (col["mem_op"][amos] == 3).all() and (col["mem_op"][trapped] == 0).all()
    sc = np.char.startswith(names, "sc.") & ~trapped
    assert (col["mem_op"][sc] == np.where(col["rd_value"][sc] == 0, 2, 0)).all()
    assert set(np.unique(col["mem_op"]).tolist()) == codes
    # compressed rows hold the 16-bit parcel, and op names the base instruction it expands to
    rvc = (col["insn"] & 3) != 3
    assert (rvc.any() if name == "rv64uc-p-rvc" else not rvc.any())
    assert (col["insn"][rvc] < 1 << 16).all() and (col["op"][rvc] >= 0).all()


def test_await_lives_on_the_backend_artifacts_as_the_page_says():
    assert "`await_mem_plans()` and `await_rom_histogram()` are methods of\n  `out.backend`" in PAGE
    for name in ("await_mem_plans", "await_rom_histogram"):
        assert callable(getattr(BackendArtifacts, name))
        with pytest.raises(AttributeError):
            getattr(emu, name)
    out = emu.execute(emu.load_elf(SUITE / "rv64ui-p-simple"), backend="fast")
    plans, _ = out.backend.await_mem_plans()
    assert plans == emu.mem_plans_from_min_traces(emu.load_elf(SUITE / "rv64ui-p-simple"), out.min_traces)[0]
