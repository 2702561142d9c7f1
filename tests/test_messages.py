"""What users read: a failed run's line names the stage's FILE:LINE:COL, long error lists are capped, and
what a library would say (croniter, jsonschema, numpy) is said in hetflow's terms."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from hetflow.engine import cli
from hetflow.engine.errors import SHOWN


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


FAILS = """\
version: 1
name: fails
plugins: [boom.py]
executors: {host: {vendor: cpu}}
stages:
  x: {op: arange, args: {stop: 4}}
  y: {op: t.boom, inputs: [x]}
outputs: {y: y}
"""


def test_a_failed_run_names_the_stage_file_line_and_col(manifest_file, tmp_path):
    (tmp_path / "boom.py").write_text("from hetflow import op\n\n\n@op('t.boom', shape=lambda x: x)\n"
                                      "def boom(xp, x):\n    raise RuntimeError('no data today')\n")
    path = manifest_file(FAILS)
    runs = str(tmp_path / "runs")
    code, out, err = _cli("run", path, "--runs-dir", runs, "--quiet")
    assert code == 1
    lines = err.splitlines()
    assert lines[0] == (f"hetflow: run failed: {path}:7:3: stage 'y' failed: backend error: op 't.boom' raised "
                        "RuntimeError: no data today (boom.py:6)")
    assert lines[1].startswith("traceback: ") and lines[2].startswith("record: ")
    code, out, _ = _cli("run", path, "--runs-dir", runs, "--quiet", "--json")
    assert code == 1 and json.loads(out)["origin"] == f"{path}:7:3"


def _unknown_ops(n: int) -> str:
    return ("version: 1\nname: many\nexecutors: {host: {vendor: cpu}}\nstages:\n"
            + "".join(f"  s{i}: {{op: nosuchop}}\n" for i in range(n)) + "outputs: {s0: s0}\n")


@pytest.mark.parametrize("command", ["validate", "plan", "run"])
def test_error_lists_are_capped_on_stderr_and_whole_in_json(manifest_file, tmp_path, command):
    n = 1200
    path = manifest_file(_unknown_ops(n))
    extra = () if command == "validate" else ("--runs-dir", str(tmp_path / "runs"))
    code, out, err = _cli(command, path, *extra)
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == SHOWN + 1 == 51
    assert lines[0] == f"{path}:5:12: error: unknown op 'nosuchop' in stage 's0'"
    assert lines[-1] == f"... and {n - SHOWN:,} more"
    if command == "validate":
        return
    code, out, err = _cli(command, path, *extra, *(("--json",) if command == "run" else ("--format", "json")))
    if command == "run":
        data = json.loads(out)
        assert data["count"] == n and len(data["diagnostics"]) == n
        assert data["message"].splitlines()[-1] == f"... and {n - SHOWN:,} more"
    assert not (tmp_path / "runs").exists()


SCHEDULED = """\
version: 1
name: sched
executors: {host: {vendor: cpu}}
schedule: {cron: "CRON"}
stages:
  x: {op: arange, args: {stop: 4}}
outputs: {x: x}
"""


@pytest.mark.parametrize("cron, why", [
    ("@fortnightly", "a shorthand is one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly; "
                     "otherwise write 5 fields (minute hour day-of-month month day-of-week), or 6 with seconds first"),
    ("0 25 * * *", "the hour field '25' is not valid: hour takes 0-23, as lists (1,15), ranges (1-5) and steps (*/15)"),
    ("*/0 * * * *", "the minute field '*/0' is not valid: minute takes 0-59, as lists (1,15), ranges (1-5) and steps "
                    "(*/15); a step of 0 never advances"),
    ("0 0 0 * * 9", "the day-of-week field '9' is not valid: day-of-week takes 0-7 or SUN-SAT, 0 and 7 both Sunday, "
                    "as lists (1,15), ranges (1-5) and steps (*/15)"),
    ("0 0 30 2 *", "no date matches it: its day-of-month and month fields never meet (day 30 of February, say)"),
])
def test_cron_messages_speak_of_fields_not_columns(manifest_file, cron, why):
    path = manifest_file(SCHEDULED.replace("CRON", cron))
    code, _, err = _cli("validate", path)
    assert code == 2
    assert err == f"{path}:4:18: error: schedule.cron {cron!r} is not a valid cron expression: {why}\n"
    assert "columns" not in err and "croniter" not in err


def test_schema_messages_say_list_mapping_and_bounds(manifest_file):
    path = manifest_file("""\
        version: 1
        name: s
        executors: {host: {vendor: cpu}}
        stages:
          x: {op: arange, args: {stop: 4}, retries: -2, timeout: "soon", cache: 3}
          y: {op: relu, inputs: [x], executor: [host]}
        outputs: {y: y}
        matrix: []
        """)
    code, _, err = _cli("validate", path)
    assert code == 2
    assert err.splitlines() == [
        f"{path}:5:45: error: stages.x.retries must be at least 0, found -2",
        f"{path}:5:58: error: stages.x.timeout must be a number or null, found 'soon'",
        f"{path}:5:73: error: stages.x.cache must be true or false, found 3",
        f"{path}:6:40: error: stages.y.executor must be a string, found ['host']",
        f"{path}:8:9: error: matrix must be a mapping, found []",
    ]
    assert "of type" not in err and "'object'" not in err


@pytest.mark.parametrize("make, why", [
    (lambda f: np.save(f, np.array([1, "a", None], dtype=object)),
     "it holds Python objects, which hetflow never reads (save a numeric array)"),
    (lambda f: f.write_text("not an array"),
     "it is not an array file numpy wrote, or it holds pickled Python objects, which hetflow never reads "
     "(save a numeric array with numpy.save)"),
    (lambda f: (np.save(f, np.arange(64.0)), f.write_bytes(f.read_bytes()[:-40])),
     "the file is shorter than its header says (cut short?)"),
])
def test_numpy_load_errors_in_hetflow_terms(manifest_file, tmp_path, make, why):
    make(tmp_path / "bad.npy")
    path = manifest_file("""\
        version: 1
        name: l
        executors: {host: {vendor: cpu}}
        stages:
          x: {op: load, args: {path: bad.npy}}
        outputs: {x: x}
        """)
    code, _, err = _cli("validate", path)
    assert code == 2
    assert err == f"{path}:5:30: error: stage 'x': bad.npy does not parse as .npy: {why}\n"
    assert "allow_pickle" not in err and "mmap" not in err
