"""HTML run reports, generated from real runs: a success with bridges, a failing stage, a sweep, old records."""

import doctest
import importlib
import io
import json
import os
import tempfile
import pkgutil
import re
import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from hetflow.engine import report
from hetflow.engine.cli import main
from hetflow.engine.errors import RunFailed, UsageError
from hetflow.engine.manifest.validate import compile_manifest, load
from hetflow.engine.plan.planner import plan
from hetflow.engine.store.records import load_output
from hetflow.engine.run.execute import execute
from hetflow.executors import probe

REPO = Path(__file__).resolve().parent.parent
# screenshots a person can open after a run; outside the repository unless asked for
ARTIFACTS = Path(os.environ.get("HETFLOW_TEST_ARTIFACTS", Path(tempfile.gettempdir()) / "hetflow-test-artifacts"))

SPLIT = """
version: 1
name: split
params: {n: 16}
executors:
  host: {vendor: cpu}
  accel: {vendor: cpu}
stages:
  x:  {op: random.normal, args: {shape: ["${n}", 32], seed: 3}, executor: host}
  w:  {op: random.uniform, args: {shape: [32, 8], seed: 4, low: -1, high: 1}, executor: accel}
  h:  {op: matmul, inputs: [x, w], executor: accel}
  g:  {op: gelu, inputs: [h], executor: accel}
  s:  {op: softmax, inputs: [g], executor: host}
  m:  {op: mean, inputs: [s], args: {axis: 0}, executor: host}
  b:  {op: cast, inputs: [g], dtype: bf16, executor: accel}
outputs: {s: s, m: m, b: b}
"""

FAILING = """
version: 1
name: failing
executors:
  host: {vendor: cpu}
  accel: {vendor: cpu}
stages:
  x:    {op: ones, args: {shape: [4, 4]}, executor: host}
  y:    {op: relu, inputs: [x], executor: accel}
  w:    {op: load, args: {path: broken.npy}, executor: accel, retries: 1}
  z:    {op: add, inputs: [y, w]}
  keep: {op: relu, inputs: [x]}
outputs: {z: z, keep: keep}
"""

SWEPT = """
version: 1
name: swept
params: {n: 4, low: 0.0}
executors:
  host: {vendor: cpu}
  accel: {vendor: cpu}
stages:
  x:     {op: random.uniform, args: {shape: ["${n}", 8], seed: 1, low: "${low}", high: 1.0}, executor: host}
  y:     {op: relu, inputs: [x], executor: accel}
  total: {op: mean, inputs: [y]}
outputs: {total: total, y: y}
"""


class Elements(HTMLParser):
    """Every start tag of a page with its attributes, and its text."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def having(self, tag=None, **attrs) -> list[dict]:
        out = []
        for t, a in self.tags:
            if tag and t != tag:
                continue
            if all((v is True and k in a) or a.get(k) == v or (k == "class_" and v in (a.get("class") or "").split())
                   for k, v in attrs.items()):
                out.append(a)
        return out


def run(text: str, folder: Path, overrides=None, name="m.yaml", before_run=None):
    path = folder / name
    path.write_text(text)
    m = compile_manifest(load(str(path)), overrides or {})
    p = plan(m, probe)
    if before_run is not None:
        before_run()
    try:
        return execute(m, p, runs_dir=str(folder / "runs"), overrides=overrides or {}).record
    except RunFailed as e:
        return json.loads(Path(e.record_path).read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("report")
    np.save(folder / "broken.npy", np.ones((4, 4), np.float32))
    ok = run(SPLIT, folder, name="split.yaml")
    # validate reads the file whole; it breaks between the plan and the run
    bad = run(FAILING, folder, name="m.yaml", before_run=lambda: (folder / "broken.npy").write_bytes(b"\x93NUMPY garbage"))
    assert ok["status"] == "succeeded" and bad["status"] == "failed"
    return {"dir": folder, "runs": folder / "runs", "ok": ok, "bad": bad}


def page(runs, which: str, graph: str = "builtin") -> tuple[str, Elements]:
    record = runs[which]
    text = report.render_run(str(runs["runs"] / record["run_id"]), record, graph=graph)
    return text, Elements(text)


def test_success_report_has_every_stage_bridge_lane_and_bar(runs):
    record = runs["ok"]
    text, doc = page(runs, "ok")
    assert doc.having("svg", class_="plan-graph", **{"data-layout": "builtin"})
    for node in record["plan"]["nodes"]:
        assert doc.having("g", id=f"stage-{node}", class_="status-succeeded"), node
    bridges = record["plan"]["bridges"]
    assert len(bridges) == 2
    for b in bridges:
        assert doc.having("g", id=f"bridge-{b['id']}", class_="bridge")
    bridge_text = "".join(doc.text)
    assert "x → accel" in bridge_text and "g → host" in bridge_text
    assert "2.0 KiB" in bridge_text and "512 B" in bridge_text
    lanes = {a["data-lane"] for a in doc.having("g", class_="lane")}
    assert lanes == {"host", "accel"}
    bars = {(a["data-kind"], a["data-id"]) for a in doc.having("g", class_="bar")}
    assert bars == {(t["kind"], t["id"]) for t in record["tasks"]}
    assert {k for k, _ in bars} == {"partition", "export", "import", "output"}
    export = next(a for a in doc.having("g", class_="bar") if a["data-kind"] == "export" and a["data-id"] == "x@accel")
    assert "bytes 2.0 KiB (2048 B)" in export["data-tip"] and "duration" in export["data-tip"]
    assert len(doc.having("path", class_="hop")) == 2
    assert "No stage failed." in text


def test_outputs_show_stats_and_a_histogram_from_the_npy_files(runs):
    record = runs["ok"]
    text, doc = page(runs, "ok")
    rows = {a["data-output"] for a in doc.having("tr", class_="output")}
    assert rows == {"s", "m", "b"}
    s = load_output(str(runs["runs"] / record["run_id"]), "s").astype(np.float64)
    row = text[text.index('data-output="s"'):text.index("</tr>", text.index('data-output="s"'))]
    for value in (s.min(), s.max(), s.mean()):
        assert f'<td class="num">{report.text._fmt_num(value)}</td>' in row
    assert "16×8" in row and "fp32" in row and record["outputs"]["s"]["digest"][:19] in row
    assert row.count("<rect") == 24  # the histogram's bins
    b_row = text[text.index('data-output="b"'):]
    assert "bf16" in b_row[:400]


def test_docstring_examples():
    modules = [report] + [importlib.import_module(f"{report.__name__}.{m.name}") for m in pkgutil.iter_modules(report.__path__)]
    results = [doctest.testmod(m, optionflags=doctest.ELLIPSIS) for m in modules]
    assert sum(r.attempted for r in results) >= 5 and sum(r.failed for r in results) == 0


def test_output_stats_follow_numpy():
    x = np.array([0.0, 1.0, 1.0, 3.0, np.inf], dtype=np.float32)
    stats = report.output_stats(x, bins=3)
    assert (stats["min"], stats["max"], stats["mean"], stats["nonfinite"]) == (0.0, 3.0, 1.25, 1)
    assert stats["counts"] == [1, 2, 1] and sum(stats["counts"]) == 4
    constant = report.output_stats(np.full(5, 2.0))
    assert constant["counts"] == [5] and constant["min"] == constant["max"] == 2.0
    assert report.output_stats(np.float32(7.0))["counts"] == []


def test_failed_stage_is_marked_with_error_attempts_and_manifest_line(runs):
    record = runs["bad"]
    text, doc = page(runs, "bad")
    assert doc.having("g", id="stage-w", class_="status-failed")
    assert "✗" in "".join(doc.text)
    z_status = record["nodes"]["z"]["status"].replace(" ", "-")
    assert doc.having("g", id="stage-z", class_=f"status-{z_status}")
    assert doc.having("g", id="stage-keep", class_="status-succeeded")
    failure = doc.having("div", class_="failure")
    assert [a["data-stage"] for a in failure] == ["w"]
    section = text[text.index('<section id="failures">'):]
    origin = record["error"]["origin"]
    assert origin.endswith("m.yaml:10:3")
    assert origin.rsplit(":", 1)[0] in section  # FILE:LINE
    assert "load failed" in section and "<dt>attempts</dt><dd>2</dd>" in section  # retries: 1
    assert "Not run because of the failure: z" in section or "cancelled" in record["nodes"]["z"]["status"]
    failed_bar = doc.having("g", class_="status-failed", **{"data-kind": "partition"})
    assert len(failed_bar) == 1 and "attempt 2" in failed_bar[0]["data-tip"] and "load failed" in failed_bar[0]["data-tip"]
    assert "No outputs were written because the run failed" in text


def test_builtin_layout_puts_executors_in_bands_and_bridges_between_them(runs):
    lay = report.layout_plan(runs["ok"]["plan"])
    bands = {name: (top, top + h) for name, top, h in lay.bands}
    for node in lay.nodes.values():
        if node.kind == "stage":
            top, bottom = bands[node.data["executor"]]
            assert top <= node.y and node.y + node.h <= bottom
        else:
            inside = [n for n, (t, b) in bands.items() if t < node.y + node.h / 2 < b]
            assert inside == [], f"bridge {node.id} sits in band {inside}"
    for u, v in lay.edges:
        assert lay.nodes[u].column < lay.nodes[v].column


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed (apt-get install graphviz)")
def test_graphviz_layout_when_dot_is_installed(runs):
    text, doc = page(runs, "bad", graph="auto")
    assert doc.having("svg", class_="plan-graph", **{"data-layout": "graphviz"})
    assert doc.having("g", id="stage-w")
    assert doc.having("g", id="bridge-x@accel")
    assert "✗ failed" in text and "#c62828" in text
    dot = report.plan_dot(runs["bad"])
    assert "subgraph cluster_0" in dot and "subgraph cluster_1" in dot and 'shape="cds"' in dot


def test_report_is_self_contained(runs):
    text, doc = page(runs, "ok", graph="auto")
    assert not doc.having("link") and not doc.having("img")
    assert not [a for _, a in doc.tags if "src" in a]
    assert not re.search(r"""(href|src)\s*=\s*["']?(https?:)?//""", text)
    assert not re.search(r"url\((?!#)", text)
    assert "@import" not in text


def test_older_records_without_new_fields_still_render(runs):
    record = json.loads(json.dumps(runs["ok"]))
    for task in record["tasks"]:
        task.pop("offset_s", None)
    for key in ("inventory", "versions", "scheduler", "live_activations_after", "overrides", "matrix_point"):
        record.pop(key)
    record["format"] = 0
    text = report.render_run(str(runs["runs"] / record["run_id"]), record, graph="builtin")
    assert "record format 0 (older than" in text
    assert len(Elements(text).having("g", class_="bar")) == len(record["tasks"])
    bare = {"run_id": "r", "status": "failed", "error": {"message": "boom"}}
    text = report.render_run(str(runs["dir"]), bare, graph="builtin")
    assert "This record has no plan." in text and "This record has no task timings." in text and "boom" in text


def test_cli_report_writes_the_page_and_rejects_unknown_runs(runs, tmp_path):
    out, err = io.StringIO(), io.StringIO()
    target = tmp_path / "r.html"
    rid = runs["bad"]["run_id"]
    assert main(["report", rid, "--runs-dir", str(runs["runs"]), "-o", str(target)], out, err) == 0
    assert out.getvalue() == f"report: {target}\n"
    assert target.read_text().startswith("<!DOCTYPE html>")
    assert main(["report", rid, "--runs-dir", str(runs["runs"])], io.StringIO(), io.StringIO()) == 0
    assert (runs["runs"] / rid / "report.html").exists()
    from hetflow.engine.store.runs import list_runs

    newest = list_runs(str(runs["runs"]))[0]["id"]  # what `hetflow runs list` shows first
    for ref in ("latest", newest[:-3]):
        out = io.StringIO()
        assert main(["report", ref, "--runs-dir", str(runs["runs"]), "-o", str(tmp_path / "l.html")], out, io.StringIO()) == 0
        assert f'{newest}' in (tmp_path / "l.html").read_text()
    (tmp_path / "empty").mkdir()
    err = io.StringIO()
    assert main(["report", "latest", "--runs-dir", str(tmp_path / "empty")], io.StringIO(), err) == 2
    assert err.getvalue() == f"hetflow: error: no run or sweep in {tmp_path / 'empty'} yet\n"

    err = io.StringIO()
    assert main(["report", "no-such-run", "--runs-dir", str(runs["runs"])], io.StringIO(), err) == 2
    assert err.getvalue() == (
        f"hetflow: error: no run or sweep 'no-such-run' in {runs['runs']} (looked for "
        f"{runs['runs'] / 'no-such-run' / 'record.json'} and sweep.json there); pass a run id, a sweep id or a run folder\n")
    broken = tmp_path / "runs" / "broken"
    broken.mkdir(parents=True)
    (broken / "record.json").write_text('{"run_id": "broken",\n  "status": }\n')
    err = io.StringIO()
    assert main(["report", "broken", "--runs-dir", str(tmp_path / "runs")], io.StringIO(), err) == 2
    assert err.getvalue().startswith(f"hetflow: error: {broken / 'record.json'}:2:13: error: not valid JSON")
    assert "Traceback" not in err.getvalue()


def test_sweep_report_has_a_row_per_point_and_plots_scalars_against_params(tmp_path):
    sweep_dir = tmp_path / "runs" / "swept-sweep"
    points = []
    for n in (4, 8):
        for low in (0.0, 0.5):
            record = run(SWEPT, tmp_path, {"n": n, "low": low})
            points.append({"name": f"swept[low={low},n={n}]", "params": {"n": n, "low": low},
                           "run_id": record["run_id"], "status": record["status"],
                           "record": f"../{record['run_id']}/record.json"})
    sweep_dir.mkdir()
    (sweep_dir / "sweep.json").write_text(json.dumps({
        "format": report.SWEEP_FORMAT, "kind": "sweep", "sweep_id": "swept-sweep", "name": "swept",
        "matrix": {"n": [4, 8], "low": [0.0, 0.5]}, "status": "succeeded", "points": points}))
    located = report.locate("swept-sweep", str(tmp_path / "runs"))
    assert located.kind == "sweep"
    text = report.render(located, runs_dir=str(tmp_path / "runs"))
    doc = Elements(text)
    assert [a["data-point"] for a in doc.having("tr", class_="point")] == [p["name"] for p in points]
    plots = {(a["data-output"], a["data-param"]) for a in doc.having("svg", class_="sweep-plot")}
    assert plots == {("total", "n"), ("total", "low")}  # y has 32 or 64 elements: not a scalar
    by_low = text[text.index('data-param="low"'):]
    by_low = by_low[:by_low.index("</svg>")]
    assert by_low.count("<circle") == 4 and "n=4" in by_low and "n=8" in by_low
    for p in points:
        value = float(load_output(str(tmp_path / "runs" / p["run_id"]), "total"))
        assert report.text._fmt_num(value) in text
        assert f"total={report.text._fmt_num(value)}" in text
    out = io.StringIO()
    assert main(["report", "swept-sweep", "--runs-dir", str(tmp_path / "runs")], out, io.StringIO()) == 0
    assert (sweep_dir / "report.html").exists()


def test_sweep_points_found_by_run_id_alone(tmp_path):
    record = run(SWEPT, tmp_path, {"n": 2})
    sweep_dir = tmp_path / "runs" / "s"
    sweep_dir.mkdir()
    (sweep_dir / "sweep.json").write_text(json.dumps({"points": [{"name": "p", "run_id": record["run_id"]},
                                                                  {"name": "lost", "run_id": "gone"}]}))
    text = report.render(report.locate(str(sweep_dir)), runs_dir=str(tmp_path / "runs"))
    doc = Elements(text)
    assert [a["data-point"] for a in doc.having("tr", class_="point")] == ["p", "lost"]
    assert "missing" in text and "succeeded" in text


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed (apt-get install -y chromium)")
def test_report_renders_in_headless_chromium_without_console_errors(runs, tmp_path):
    path = tmp_path / "report.html"
    rid = runs["bad"]["run_id"]
    assert main(["report", rid, "--runs-dir", str(runs["runs"]), "-o", str(path)], io.StringIO(), io.StringIO()) == 0
    flags = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,2200"]
    dom = subprocess.run(flags + ["--enable-logging=stderr", "--v=0", "--dump-dom", path.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    assert console == []
    rendered = Elements(dom.stdout)
    assert rendered.having("html", **{"data-interactive": "true"})  # the page's script ran to its end
    assert rendered.having("svg", class_="plan-graph") and rendered.having("svg", class_="timeline")
    assert rendered.having("g", id="stage-w", class_="status-failed")
    assert len(rendered.having("g", class_="bar")) == len(runs["bad"]["tasks"])

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report-failed-run.png"
    done = subprocess.run(flags + [f"--screenshot={shot}", path.as_uri()], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    header = shot.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", header[16:24]) == (1400, 2200)


def test_lanes_per_worker_and_other_task_kinds(runs):
    record = json.loads(json.dumps(runs["ok"]))
    for i, task in enumerate(record["tasks"]):
        task["worker"] = f"tcp://127.0.0.1:{4000 + i % 2}"
    chunk = dict(record["tasks"][0], kind="chunk", id="rv#0", executor="rv", worker="tcp://127.0.0.1:4000",
                 nodes=["trace"], bytes=4096)
    record["tasks"].append(chunk)
    bars = report.data._bars(record)
    assert {b.lane for b in bars} == {f"tcp://127.0.0.1:{port} · {executor}" for port in (4000, 4001)
                                      for executor in ("host", "accel")} | {"tcp://127.0.0.1:4000 · rv"}
    doc = Elements(report.render_run(str(runs["runs"] / record["run_id"]), record, graph="builtin"))
    assert len(doc.having("g", class_="lane")) == 5
    assert doc.having("g", class_="bar", **{"data-kind": "chunk", "data-id": "rv#0"})
    assert len(doc.having("g", class_="bar")) == len(record["tasks"])


def test_a_cluster_runs_workers_and_recovery_read_as_words_not_python(runs):
    """The scheduler row printed a cluster's workers as a Python repr, and a recovered run said nothing of it."""
    record = json.loads(json.dumps(runs["ok"]))
    record["scheduler"] = {"kind": "cluster", "address": "tcp://127.0.0.1:8786",
                           "workers": [{"address": "tcp://127.0.0.1:4000", "name": "a", "nthreads": 1, "resources": {}},
                                       {"address": "tcp://127.0.0.1:4001", "name": "b", "nthreads": 1, "resources": {}}]}
    record["recovery"] = [{"lost_workers": [{"address": "tcp://127.0.0.1:4000", "name": "a"}],
                           "detected_at": "2026-12-07T05:03:11.299Z", "cause": "worker tcp://127.0.0.1:4000 left the cluster",
                           "executors": {"accel": {"from": {"address": "tcp://127.0.0.1:4000", "name": "a"},
                                                   "to": {"address": "tcp://127.0.0.1:4001", "name": "b"}}},
                           "recomputed": [{"task": "partition:p1"}, {"task": "output:y"}]}]
    text = report.render_run(str(runs["runs"] / record["run_id"]), record, graph="builtin")
    assert ("cluster, address tcp://127.0.0.1:8786, workers a (tcp://127.0.0.1:4000), b (tcp://127.0.0.1:4001)"
            in text) and "{&#x27;address" not in text and "{'address" not in text
    assert ("recovered at 2026-12-07T05:03:11.299Z from worker tcp://127.0.0.1:4000 left the cluster: lost a "
            "(tcp://127.0.0.1:4000); executors moved: accel to b (tcp://127.0.0.1:4001); 2 tasks ran again") in text


def test_report_of_a_sweep_that_hetflow_run_wrote(tmp_path):
    manifest = tmp_path / "sw.yaml"
    manifest.write_text(SWEPT.replace("params: {n: 4, low: 0.0}", "params: {n: 4, low: 0.0}\nmatrix: {n: [4, 8], low: [0.0, 0.5]}"))
    runs_dir = tmp_path / "runs"
    assert main(["run", str(manifest), "--runs-dir", str(runs_dir)], io.StringIO(), io.StringIO()) == 0
    sweep_id = next(p.parent.name for p in runs_dir.glob("*/sweep.json"))
    out = io.StringIO()
    assert main(["report", sweep_id, "--runs-dir", str(runs_dir)], out, io.StringIO()) == 0
    text = (runs_dir / sweep_id / "report.html").read_text()
    doc = Elements(text)
    summary = json.loads((runs_dir / sweep_id / "sweep.json").read_text())
    assert [a["data-point"] for a in doc.having("tr", class_="point")] == [p["name"] for p in summary["points"]]
    assert {(a["data-output"], a["data-param"]) for a in doc.having("svg", class_="sweep-plot")} == {("total", "n"), ("total", "low")}
    for p in summary["points"]:
        value = float(load_output(str(runs_dir / p["run_id"]), "total"))
        assert f"total={report.text._fmt_num(value)}" in text
    point = Elements(report.render(report.locate(summary["points"][0]["run_id"], str(runs_dir))))
    assert "swept[" in "".join(point.text)  # the run page names its matrix point


def _scale(n: int) -> str:
    """``bench/bench_planner.py``'s ``generate``: two CPU executors, a partition every 50 stages."""
    lines = ["version: 1", f"name: scale-{n}", "executors:", "  e0: {vendor: cpu}", "  e1: {vendor: cpu}", "stages:"]
    for i in range(n):
        if i % 50 == 0:
            lines.append(f"  s{i}: {{op: ones, args: {{shape: [8, 8]}}, executor: e{(i // 50) % 2}}}")
        elif i % 7 == 3 and i % 50 >= 2:
            lines.append(f"  s{i}: {{op: add, inputs: [s{i - 1}, s{i - 2}]}}")
        else:
            lines.append(f"  s{i}: {{op: relu, inputs: [s{i - 1}]}}")
    lines.append(f"outputs: {{y: s{n - 1}}}")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """A real run of 20,000 stages and its page, written by the CLI."""
    folder = tmp_path_factory.mktemp("big")
    record = run(_scale(20_000), folder, name="big.yaml")
    assert record["status"] == "succeeded"
    path = folder / "report.html"
    assert main(["report", record["run_id"], "--runs-dir", str(folder / "runs"), "-o", str(path)],
                io.StringIO(), io.StringIO()) == 0
    return {"record": record, "path": path, "text": path.read_text(encoding="utf-8")}


def _stage_data(text: str) -> dict:
    start = text.index('<script type="application/json" id="partition-stages">')
    start = text.index(">", start) + 1
    return json.loads(text[start:text.index("</script>", start)])


def test_big_plan_collapses_to_partitions_that_hold_every_stage(big):
    text, record = big["text"], big["record"]
    plan = record["plan"]
    assert len(text.encode()) <= 3 * 2**20
    doc = Elements(text)
    assert doc.having("svg", class_="plan-graph", **{"data-layout": "partitions"})
    nodes = doc.having("g", class_="partition")
    assert sorted(a["data-partition"] for a in nodes) == sorted(p["id"] for p in plan["partitions"])
    assert not doc.having("g", class_="stage")  # stages are drawn only when a partition is opened
    data = _stage_data(text)
    laid = {row[0]: (pid, row) for pid, rows in data["partitions"].items() for row in rows}
    assert set(laid) == set(plan["nodes"]) and sum(len(r) for r in data["partitions"].values()) == 20_000
    for nid, n in plan["nodes"].items():
        pid, row = laid[nid]
        assert pid == n["partition"] and row[1] == n["op"] and data["statuses"][row[4]] == record["nodes"][nid]["status"]
        rows = data["partitions"][pid]
        assert sorted(rows[i][0] for i in row[7]) == sorted(n["inputs"])  # the generated stages read their own partition
        assert all(rows[i][5] < row[5] for i in row[7])  # every input is in an earlier column
    options = [a["value"] for a in doc.having("option") if a.get("value")]
    assert options == [p["id"] for p in plan["partitions"]]
    assert f"{len(plan['nodes'])} stages in {len(plan['partitions'])} partitions" in text
    # the timeline is small enough to draw one by one; its tips name a partition's first stages only
    bars = doc.having("g", class_="bar")
    assert len(bars) == len(record["tasks"])
    p0 = next(a for a in bars if a["data-id"] == "p0" and a["data-kind"] == "partition")
    assert "s0, s1," in p0["data-tip"] and "(50 in all)" in p0["data-tip"] and "s49" not in p0["data-tip"]


def test_collapsed_plan_marks_the_failed_partition_and_its_bridges(runs, monkeypatch):
    monkeypatch.setattr(report.run_page, "GRAPH_NODE_LIMIT", 2)
    record = runs["bad"]
    nodes = record["plan"]["nodes"]
    text, doc = page(runs, "bad")
    failed = {nodes[n]["partition"] for n, v in record["nodes"].items() if v["status"] == "failed"}
    shown = {a["data-partition"] for a in doc.having("g", class_="partition") if "status-failed" in a["class"].split()}
    assert failed and shown == failed
    crossing = {(nodes[b["tensor"]]["partition"], nodes[c]["partition"]) for b in record["plan"]["bridges"]
                for c in b["consumers"]}
    edges = doc.having("path", class_="bridged")
    assert len(edges) == len(crossing) and all("bridge" in a["data-tip"] for a in edges)
    assert sum(len(r) for r in _stage_data(text)["partitions"].values()) == len(nodes)


def test_timeline_of_many_tasks_counts_them_in_bins_with_exact_totals(runs, monkeypatch):
    monkeypatch.setattr(report.run_page, "TIMELINE_TASK_LIMIT", 3)
    monkeypatch.setattr(report.run_page, "TABLE_ROW_LIMIT", 2)
    for which in ("ok", "bad"):
        record = runs[which]
        text, doc = page(runs, which)
        tasks = record["tasks"]
        assert doc.having("svg", class_="binned") and doc.having("rect", class_="bin")
        lanes = {a["data-lane"] for a in doc.having("g", class_="lane")}
        assert lanes == {t["executor"] for t in tasks}
        for lane in lanes:
            assert f"{sum(t['executor'] == lane for t in tasks):,} tasks</text>" in text
        assert f"{len(tasks):,} tasks on {len(lanes)} lanes" in text
        started = sum(int(re.search(r"\n(\d+) tasks started", a["data-tip"]).group(1)) for a in doc.having("rect", class_="bin"))
        assert started == len(tasks)
        failed = [t for t in tasks if t["status"] == "failed"]
        assert len(doc.having("g", class_="bar")) == len(failed)
        assert len(doc.having("tr", class_="task")) == 2 and f"of {len(tasks):,} tasks" in text
        if failed:
            assert any("status-failed" in a["class"].split() for a in doc.having("tr", class_="task"))


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed (apt-get install -y chromium)")
def test_report_of_20000_stages_renders_in_headless_chromium_and_opens_a_partition(big, tmp_path):
    record = big["record"]
    opened = record["plan"]["partitions"][3]
    flags = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,2200"]
    url = big["path"].as_uri() + f"#open={opened['id']}"
    dom = subprocess.run(flags + ["--enable-logging=stderr", "--v=0", "--dump-dom", url],
                         capture_output=True, text=True, timeout=240)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert [line for line in dom.stderr.splitlines() if ":CONSOLE" in line] == []
    rendered = Elements(dom.stdout)
    assert rendered.having("html", **{"data-interactive": "true"})
    assert len(rendered.having("g", class_="partition")) == len(record["plan"]["partitions"])
    assert rendered.having("g", id=f"partition-{opened['id']}", class_="open")
    view = rendered.having("svg", class_="partition-stages")
    assert [a["data-partition"] for a in view] == [opened["id"]]
    stages = rendered.having("g", class_="stage")
    assert sorted(a["id"] for a in stages) == sorted(f"stage-{n}" for n in opened["nodes"])
    assert all("status-succeeded" in a["class"].split() for a in stages)
    assert len(rendered.having("path", class_="edge")) >= sum(len(record["plan"]["nodes"][n]["inputs"]) for n in opened["nodes"])

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report-20000-stages.png"
    done = subprocess.run(flags + [f"--screenshot={shot}", url], capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
