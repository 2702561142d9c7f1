"""Shared helpers of the emulator conformance suite: the committed guest
ELFs and a per-session cache of runs (each (guest, backend, input,
chunk_steps) executes once)."""

from pathlib import Path

import pytest  # noqa: F401

from hetflow.executors.emulator import execute, load_elf

GUESTS = Path(__file__).resolve().parents[2] / "examples" / "guests"
ISA_TESTS = ["isa_alu", "isa_muldiv", "isa_mem", "isa_amo", "isa_smc", "isa_trap", "isa_rvc"]
_runs = {}


def guest(name):
    return load_elf(GUESTS / f"{name}.elf")


def run(name, backend, input=b"", chunk_steps=97, max_steps=2_000_000):
    key = (name, backend, input, chunk_steps)
    if key not in _runs:
        _runs[key] = execute(guest(name), backend=backend, input=input, chunk_steps=chunk_steps, max_steps=max_steps)
    return _runs[key]

