"""An emulator's ``fetch:`` in a manifest reaches the emulator: a guest that
jumps into a data segment faults under the default protection and runs
under ``fetch: any``, as the ISA lets machine mode without PMP fetch."""

import json
import struct

import pytest

from hetflow.engine.cli import main

BASE = 0x8000_0000
JUMP_TO_DATA = bytes.fromhex("b70208009b8212009392c200e7800200")   # li t0, 0x80001000; jalr t0
EXIT_0 = bytes.fromhex("130500009308d00573000000")                   # li a0, 0; li a7, 93; ecall


def _elf(segments):
    """A minimal RV64 ELF executable: one PT_LOAD per (address, bytes, p_flags)."""
    header, phsize = 64, 56
    offset = header + phsize * len(segments)
    phdrs, body = b"", b""
    for addr, data, flags in segments:
        phdrs += struct.pack("<IIQQQQQQ", 1, flags, offset + len(body), addr, addr, len(data), len(data), 8)
        body += data
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    ehdr = ident + struct.pack("<HHIQQQIHHHHHH", 2, 243, 1, BASE, header, 0, 0, header, phsize, len(segments), 64, 0, 0)
    return ehdr + phdrs + body


MANIFEST = """\
version: 1
name: fetch-{mode}
emulators:
  guest: {{isa: rv64imac, program: jump.elf, {fetch}}}
executors:
  host: {{vendor: cpu}}
stages:
  run: {{phase: execute, emulator: guest}}
outputs:
  steps: run.steps
"""


@pytest.mark.parametrize("mode", ["executable", "any", None])
def test_fetch_in_the_manifest_reaches_the_emulator(tmp_path, capsys, mode):
    (tmp_path / "jump.elf").write_bytes(_elf([(BASE, JUMP_TO_DATA, 5), (BASE + 0x1000, EXIT_0, 6)]))
    path = tmp_path / "m.yaml"
    path.write_text(MANIFEST.format(mode=mode or "default", fetch=f"fetch: {mode}" if mode else ""))
    code = main(["run", str(path), "--runs-dir", str(tmp_path / "runs")])
    out, err = capsys.readouterr()
    run_id = out.split()[-1]
    record = json.loads((tmp_path / "runs" / run_id / "record.json").read_text())
    if mode == "any":
        assert code == 0 and record["status"] == "succeeded", err
        assert record["outputs"]["steps"]["value"] == 7
    else:
        assert code == 1 and record["status"] == "failed"
        assert "instruction access fault" in json.dumps(record["error"]), record["error"]
