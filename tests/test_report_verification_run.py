"""The report of a verification run says whose: without it, the page read as a run of the manifest like any other
(its outputs then taken for the experiment's own)."""

from __future__ import annotations

import html
import io
import json

from hetflow.engine.cli import main

MANIFEST = """\
version: 1
name: vr
executors: {h: {vendor: cpu}}
stages:
  x: {op: arange, args: {stop: 4}}
outputs: {x: x}
"""


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


def test_a_verification_runs_report_names_the_run_it_verified_and_a_runs_own_does_not(tmp_path):
    (tmp_path / "m.yaml").write_text(MANIFEST)
    runs = tmp_path / "runs"
    code, out, err = _cli("run", str(tmp_path / "m.yaml"), "--runs-dir", str(runs), "--quiet")
    assert code == 0, err
    run_id = out.split()[-1]
    code, out, err = _cli("verify", run_id, "--runs-dir", str(runs), "--json")
    assert code == 0, err
    rerun = json.loads(out)["rerun_id"]
    said = f"a verification run (hetflow verify) of run {run_id}: it reran that run's manifest without the cache"
    for rid, shown in ((rerun, True), (run_id, False)):
        page = tmp_path / f"{rid}.html"
        code, _, err = _cli("report", rid, "--runs-dir", str(runs), "-o", str(page))
        assert code == 0, err
        text = page.read_text()
        assert (f'<p class="note">{html.escape(said)}' in text) is shown
        assert "verification run" not in text or shown
