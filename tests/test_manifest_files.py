"""Manifest files no one meant to give: nested past any stack, not regular files, too large to be a manifest.
Each is an error naming the file (exit 2), at once; none hangs, crashes the process or reads without end."""

import os
import subprocess
import sys
import time

import pytest

HEAD = "version: 1\nname: d\nexecutors: {host: {vendor: cpu}}\nstages:\n"


def hetflow(*argv, timeout=120):
    return subprocess.run([sys.executable, "-m", "hetflow.engine.cli", *argv], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("levels, opening, closing", [
    (3_000, "[", "]"),  # past libyaml's own limit (0.2.6 on), under the bound that reads the events first
    (40_000, "[", "]"),  # past the 8 MiB stack libyaml's composer recursed on: the process died of SIGSEGV
    (30_000, "{a: ", "}"),
    (400_000, "[", "]"),  # deeper than a thread's stack would take, and square in time for libyaml's scanner
])
def test_a_document_nested_past_any_stack_is_refused_at_its_depth_not_a_crash(tmp_path, levels, opening, closing):
    path = tmp_path / "deep.yaml"
    path.write_text(HEAD + "  x: {op: random.normal, args: {shape: [4, 4], seed: 1}, description: "
                    + opening * levels + "1" + closing * levels + "}\noutputs: {x: x}\n")
    for command in ("validate", "plan"):
        began = time.monotonic()
        done = hetflow(command, str(path))
        assert done.returncode == 2, (command, done.returncode, done.stderr[-500:])
        assert f"{path}:5:" in done.stderr and "the document has nesting deeper than 64 levels" in done.stderr
        assert "Traceback" not in done.stderr and time.monotonic() - began < 60


def test_a_wide_manifest_whose_brackets_are_in_its_strings_is_read_as_it_is(tmp_path):
    # brackets that nest deep only inside quoted text: the document itself is shallow, and valid
    path = tmp_path / "wide.yaml"
    path.write_text(HEAD + "  x: {op: random.normal, args: {shape: [4, 4], seed: 1}, description: \""
                    + "[" * 20_000 + "\"}\noutputs: {x: x}\n")
    done = hetflow("validate", str(path))
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are a POSIX file")
def test_a_manifest_path_that_is_a_fifo_a_device_or_a_directory_is_refused_at_once(tmp_path):
    fifo = tmp_path / "m.yaml"
    os.mkfifo(fifo)
    for path, what in ((fifo, "a FIFO (a named pipe)"), ("/dev/zero", "a character device"),
                       (tmp_path, "a directory")):
        for command in ("validate", "plan", "run"):
            done = hetflow(command, str(path), timeout=30)  # a read of the FIFO would wait for ever
            assert done.returncode == 2, (path, command, done.stderr)
            assert f"{path}: cannot read: it is {what}; a manifest is a file" in done.stderr, done.stderr


def test_a_file_larger_than_any_manifest_is_refused_before_it_is_read(tmp_path, monkeypatch):
    from hetflow.engine.errors import ManifestError
    from hetflow.engine.manifest import loader

    path = tmp_path / "big.yaml"
    with open(path, "wb") as f:
        f.truncate(loader.MAX_FILE_BYTES + 1)  # sparse: its size, without its bytes on disk
    with pytest.raises(ManifestError) as raised:
        loader.load(str(path))
    assert f"holds {loader.MAX_FILE_BYTES + 1:,} bytes; a manifest is at most" in str(raised.value)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are a POSIX file")
def test_files_a_manifest_names_that_are_no_files_are_said_to_be_what_they_are(tmp_path):
    os.mkfifo(tmp_path / "fifo.npy")
    (tmp_path / "folder.npy").mkdir()
    os.mkfifo(tmp_path / "guest.elf")
    os.mkfifo(tmp_path / "lib.yaml")
    (tmp_path / "m.yaml").write_text(HEAD + "  x: {op: load, args: {path: fifo.npy}}\n"
                                     "  y: {op: load, args: {path: folder.npy}}\noutputs: {x: x, y: y}\n")
    done = hetflow("validate", str(tmp_path / "m.yaml"), timeout=30)  # a read of a FIFO would wait for ever
    assert done.returncode == 2, done.stderr
    assert f"{tmp_path}/fifo.npy: is a FIFO (a named pipe), not a file it can read" in done.stderr
    assert f"{tmp_path}/folder.npy: is a directory, not a file" in done.stderr
    (tmp_path / "e.yaml").write_text(
        "version: 1\nname: e\nemulators:\n  guest: {isa: rv64imac, program: guest.elf}\n"
        "stages:\n  run: {phase: execute, emulator: guest}\noutputs: {steps: run.steps}\n")
    done = hetflow("validate", str(tmp_path / "e.yaml"), timeout=30)
    assert done.returncode == 2 and "cannot read program 'guest.elf': is a FIFO" in done.stderr, done.stderr
    (tmp_path / "b.yaml").write_text(HEAD + "  u: {use: lib.yaml#blk}\noutputs: {y: u.y}\n")
    done = hetflow("validate", str(tmp_path / "b.yaml"), timeout=30)
    assert done.returncode == 2 and "it is a FIFO (a named pipe); a manifest is a file" in done.stderr, done.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are a POSIX file")
def test_a_guest_program_that_is_a_fifo_a_device_or_a_folder_is_refused_by_emulate_at_once(tmp_path):
    os.mkfifo(tmp_path / "guest.elf")
    for path, what in ((tmp_path / "guest.elf", "is a FIFO (a named pipe), not a file it can read"),
                       ("/dev/zero", "is a character device, not a file it can read"),
                       (tmp_path, "is a directory, not a file")):
        done = hetflow("emulate", str(path), timeout=30)
        assert done.returncode == 2 and f"{path}: {what}" in done.stderr, done.stderr
