"""``hetflow emulate --json`` of a guest that fails names why its run ended in ``end_reason``, as that of a guest
that exits says ``exit`` or ``tohost``: a trap, the step limit, the time limit or the output bound."""

import io
import json
from importlib.resources import files

import pytest

from hetflow.engine.cli import main

GUESTS = files("hetflow.examples") / "guests"


def emulate(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(["emulate", *map(str, argv), "--json", "--backend", "reference"], out=out, err=err)
    return code, json.loads(out.getvalue())


@pytest.mark.parametrize("argv, reason, said", [
    (("illegal.elf",), "trap", "unhandled trap: illegal instruction"),
    (("fault_store.elf",), "trap", "unhandled trap: store/AMO access fault"),
    (("spin.elf", "--max-steps", 1000), "step-limit", "step limit reached"),
    (("spin.elf", "--max-steps", 10**9, "--timeout", 0.001), "time-limit", "time limit reached"),
    (("fib.elf", "--max-output", 1), "output-limit", "output limit reached"),
])
def test_a_failed_guest_names_why_it_ended(argv, reason, said):
    code, r = emulate(GUESTS / argv[0], *argv[1:])
    assert (code, r["status"], r["end_reason"]) == (1, "failed", reason)
    assert r["error"].startswith(said)


def test_a_guest_that_exits_says_how_it_exited():
    code, r = emulate(GUESTS / "exit3.elf")
    assert (code, r["status"], r["end_reason"], r["guest_exit_code"]) == (1, "failed", "exit", 3)
