"""A plan phase's ``sizes:`` and a phase's inputs are refused at the entry that is wrong, naming it: ``sizes``
with one bad entry was one sentence at the whole map, and ``main: true`` passed as a row count of 1."""

import io
import os

import pytest

from hetflow.engine.cli import main

GUEST = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "guests", "fib.elf")


def _validate(tmp_path, stages):
    path = tmp_path / "m.yaml"
    path.write_text("version: 1\nname: t\nexecutors: {host: {vendor: cpu}}\n"
                    f"emulators: {{g: {{isa: rv64imac, backend: fast, program: {GUEST}, chunk_steps: 1024}}}}\n"
                    f"stages:\n  run: {{phase: execute, emulator: g}}\n{stages}outputs: {{s: run.steps}}\n")
    out, err = io.StringIO(), io.StringIO()
    return main(["validate", str(path)], out=out, err=err), err.getvalue().replace(f"{path}:", "")


@pytest.mark.parametrize("sizes, said", [
    ("{main: true, mian: 3, mem: 0}", [
        "7:59: error: sizes.main must be a positive row count (an integer above 0), found True",
        "7:65: error: sizes names no state machine 'mian' (state machines: main, binary, arith, mem); did you mean "
        "'main'?",
        "7:79: error: sizes.mem must be a positive row count (an integer above 0), found 0"]),
    ("[1]", ["7:52: error: sizes maps state machines (main, binary, arith, mem) to positive row counts, found [1]"]),
])
def test_a_plan_phases_sizes_are_refused_entry_by_entry(tmp_path, sizes, said):
    code, err = _validate(tmp_path, f"  inst: {{phase: plan, inputs: [run], args: {{sizes: {sizes}}}}}\n")
    assert code == 2 and err.splitlines() == said, err


def test_a_phase_given_too_many_inputs_says_what_it_takes(tmp_path):
    code, err = _validate(tmp_path, "  mem: {phase: mem-plans, inputs: [run, run]}\n")
    assert code == 2 and err == "7:35: error: phase 'mem-plans' takes 1 input (an execute phase), stage 'mem' gives 2 inputs\n"
