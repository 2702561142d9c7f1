"""The bad-manifest corpus: `hetflow validate` refuses each manifest in tests/data/bad/ where its first line says.

The folder is the repository's copy of the public corpus (``checks/bad/``
beside the project), in its format: a manifest's first line reads
``# expect: LINES COL WORD``. The refusal must be exit code 2, printed as
FILE:LINE:COL with LINE one of LINES (``7|8``, or ``*`` for any) and the
column within one of COL (any, for ``-``), contain WORD (case-insensitive;
anything, for ``-``), and show no Python traceback. A plugin a manifest
names lies beside it.

Each case runs twice: in-process through ``cli.main``, on a copy in a
fresh folder so that nothing written there goes unseen; and all of them
through one real ``hetflow`` process, for the exit code, the places and
the absence of a traceback as a pre-commit hook or a CI job sees them.
"""

import io
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from hetflow.engine import cli

CORPUS = Path(__file__).resolve().parent / "data" / "bad"
CASES = sorted(CORPUS.glob("*.yaml"))
TRACEBACK = "Traceback (most recent call last)"


class Expect(NamedTuple):
    lines: frozenset[int] | None
    col: int | None
    word: str | None


def expectation(path: Path) -> Expect:
    """The ``# expect:`` header of a corpus manifest, read as the public checker reads it."""
    first = path.read_bytes().split(b"\n")[0].decode("utf-8", "replace")
    m = re.match(r"#\s*expect:\s*(\S+)\s+(\S+)\s+(\S+)", first)
    assert m, f"{path.name}: the first line must read '# expect: LINES COL WORD'"
    lines = None if m.group(1) == "*" else frozenset(int(x) for x in m.group(1).split("|"))
    col = None if m.group(2) == "-" else int(m.group(2))
    word = None if m.group(3) == "-" else m.group(3).lower()
    return Expect(lines, col, word)


def positions(text: str, path: str) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in re.findall(re.escape(path) + r":(\d+):(\d+)", text)]


def at_expected_place(found: list[tuple[int, int]], want: Expect) -> bool:
    # one column either way: a checker may count the column of a quoted scalar at its quote or its text
    return any((want.lines is None or line in want.lines) and (want.col is None or abs(col - want.col) <= 1)
               for line, col in found)


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_the_corpus_has_every_case_of_issue_29():
    names = {p.stem for p in CASES}
    assert {"matmul_inner_dims", "reshape_count", "vulkan_refuses_op", "vulkan_refuses_dtype", "plugin_shape_rule",
            "matrix_undeclared_key", "matrix_exclude_typo", "matrix_value_string", "matrix_value_float",
            "matrix_point_shape", "cron_fortnightly"} <= names
    assert {"bad_version", "cycle", "undefined_param", "unknown_executor", "unknown_input", "unknown_op",
            "yaml_syntax"} <= names
    for path in CASES:
        expectation(path)
        for plugin in re.findall(r"^plugins:\s*\[(.*)\]", path.read_text(), re.M):
            for name in plugin.split(","):
                assert (CORPUS / name.strip()).is_file(), f"{path.name}: plugin {name.strip()} is not beside it"


@pytest.mark.parametrize("case", CASES, ids=[p.stem for p in CASES])
def test_validate_refuses_it_at_its_place(case, tmp_path, monkeypatch):
    for src in CORPUS.iterdir():
        if src.is_file():
            shutil.copy(src, tmp_path / src.name)
    path = str(tmp_path / case.name)
    want = expectation(case)
    before = listing(tmp_path)
    monkeypatch.chdir(tmp_path)
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["validate", path], out=out, err=err)
    text = out.getvalue() + err.getvalue()
    assert TRACEBACK not in text
    assert code == 2, f"exit code {code}, expected 2; validate printed:\n{text}"
    found = positions(text, path)
    assert at_expected_place(found, want), f"no error at LINES {sorted(want.lines or [])} COL {want.col}:\n{text}"
    assert want.word is None or want.word in text.lower(), f"the message does not mention {want.word!r}:\n{text}"
    assert f"{path}: ok" not in text
    assert listing(tmp_path) == before


def test_a_hetflow_process_refuses_every_case(tmp_path):
    done = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "validate", *map(str, CASES)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    text = done.stdout + done.stderr
    assert TRACEBACK not in text
    assert done.returncode == 2
    missed = [p.name for p in CASES if not at_expected_place(positions(text, str(p)), expectation(p))]
    assert missed == [], f"no error at the expected place for {missed}; validate printed:\n{text}"
    assert listing(tmp_path) == []
