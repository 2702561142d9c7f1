"""The user's own text (an op's error message, a param's value, a file's name) as the CLI says it: escape sequences,
carriage returns and backspaces in it are written as escapes, never acted on by the terminal, and rich markup in it
is shown as written."""

import io
import json

import pytest

from hetflow.engine.cli import main
from hetflow.engine.run import events
from hetflow.engine.store.compare import render_table

HOSTILE = "[red]x[/] \x1b[2J\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\ \rover\bb \x9b31m [link=http://e]y[/link] \x7f"

OPS = '''\
from hetflow import op

@op("lab.boom", dtypes=["fp32"])
def boom(xp, x, *, tag: str = ""):
    """Fails with the user's text."""
    raise ValueError(tag)
'''

MANIFEST = """\
version: 1
name: hostile
plugins: [ops.py]
params: {tag: ""}
executors: {h: {vendor: cpu}}
stages:
  x: {op: full, args: {shape: [2], value: 1}}
  z: {op: lab.boom, inputs: [x], args: {tag: "${tag}"}}
outputs: {z: z}
"""

RAW = ("\x1b", "\r", "\b", "\x9b", "\x7f")


def cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


@pytest.fixture
def failed(tmp_path):
    (tmp_path / "ops.py").write_text(OPS)
    (tmp_path / "m.yaml").write_text(MANIFEST)
    runs = tmp_path / "runs"
    code, out, err = cli("run", str(tmp_path / "m.yaml"), "--runs-dir", str(runs), "-p", f"tag={json.dumps(HOSTILE)}")
    assert code == 1, err
    return runs, out, err


def test_an_ops_error_with_escape_sequences_is_said_with_them_escaped(failed):
    runs, out, err = failed
    assert not [c for c in RAW if c in err], err
    # every word is there, the escape sequences as their escapes
    assert "\\x1b[2J" in err and "\\x0dover\\x08b" in err and "\\u009b31m" in err and "\\x7f" in err
    failures = [line for line in err.splitlines() if line.startswith("hetflow: run failed:")]
    assert len(failures) == 1 and "[red]x[/]" in failures[0] and "[link=http://e]y[/link]" in failures[0]
    # the record keeps the message as it was raised
    record = json.loads((runs / out.strip().splitlines()[-1] / "record.json").read_text())
    assert HOSTILE in record["error"]["message"]


def test_runs_show_says_the_error_with_its_escape_sequences_escaped(failed):
    runs, out, _ = failed
    code, shown, err = cli("runs", "--runs-dir", str(runs), "show", out.strip().splitlines()[-1])
    assert code == 0, err
    errors = [line for line in shown.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and not [c for c in RAW if c in shown]
    assert "[red]x[/] \\x1b[2J" in errors[0] and "\\x0dover\\x08b" in errors[0]


def test_the_progress_display_shows_markup_literally_and_escapes_control_characters():
    out = io.StringIO()
    display = events.ProgressDisplay(out, force_terminal=True)
    display({"event": "started", "kind": "run", "id": "r1", "tasks": 1, "time": 0.0})
    display({"event": "failed", "kind": "partition", "id": "p0", "executor": "h", "attempt": 1,
             "error": HOSTILE + " \\", "time": 0.1})
    display({"event": "failed", "kind": "run", "id": "r1", "error": HOSTILE, "time": 0.2})
    display.close()
    said = out.getvalue()
    for raw in ("\x1b[2J", "\x1b]8;;", "\x9b", "\x7f"):  # rich's own sequences move the cursor with \r
        assert raw not in said
    assert "[red]x[/]" in said and "[link=http://e]y[/link]" in said and "\\x1b[2J" in said


def test_a_file_name_with_an_escape_sequence_is_said_escaped_in_a_bad_input_error(tmp_path):
    code, out, err = cli("validate", str(tmp_path / "a\x1b[2J\rb.yaml"))
    assert code == 2
    assert "\x1b" not in err and "\r" not in err
    assert "a\\x1b[2J\\x0db.yaml" in err


def test_a_right_to_left_override_in_a_file_name_is_said_as_its_escape(tmp_path):
    # shown raw, the override turns what follows it around: "run-\u202elmy.txt" reads "run-txt.yml", another file
    code, out, err = cli("validate", str(tmp_path / "run-\u202elmy.txt"), str(tmp_path / "x\u2067y.yaml"))
    assert code == 2
    assert "\u202e" not in err and "\u2067" not in err
    assert "run-\\u202elmy.txt" in err and "x\\u2067y.yaml" in err
    # the text of other scripts is left as it is
    code, out, err = cli("validate", str(tmp_path / "שלום-é-🙂.yaml"))
    assert "שלום-é-🙂.yaml" in err


SWEEP = """\
version: 1
name: cells
params: {tag: ""}
matrix: {tag: ["a,b\\"c\\nd|e", "\\u001b[2J\\tz", "plain", "\\u202eplain"]}
executors: {h: {vendor: cpu}}
stages:
  z: {op: full, args: {shape: [1], value: 1}}
outputs: {z: z}
"""


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cells")
    (tmp / "m.yaml").write_text(SWEEP)
    code, out, err = cli("run", str(tmp / "m.yaml"), "--runs-dir", str(tmp / "runs"), "--quiet", "--json")
    assert code == 0, err
    return tmp / "runs", json.loads(out)["sweep_id"]


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_a_table_row_is_one_line_whatever_a_params_value_holds(swept, fmt):
    runs, sweep = swept
    code, out, err = cli("runs", "--runs-dir", str(runs), "table", sweep, "--format", fmt)
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 1 + 4 + (fmt == "markdown")
    assert not [c for c in ("\x1b", "\t", "\r", "\u202e") if c in out]
    if fmt == "markdown":  # markdown's own escapes over the one-line ones: the cell shows a,b"c\nd|e
        assert any('a,b"c\\\\nd\\|e' in line for line in lines) and any("\\\\x1b\\[2J\\\\tz" in line for line in lines)
        cells = {line.count(" | ") for line in lines if not line.startswith("|-")}
        assert len(cells) == 1
    else:
        assert any('a,b"c\\nd|e' in line for line in lines) and any("\\x1b[2J\\tz" in line for line in lines)


def test_csv_keeps_a_params_value_as_it_is(swept):
    import csv

    runs, sweep = swept
    code, out, err = cli("runs", "--runs-dir", str(runs), "table", sweep, "--format", "csv")
    assert code == 0, err
    rows = list(csv.reader(io.StringIO(out, newline="")))
    assert sorted(r[3] for r in rows[1:]) == sorted(['a,b"c\nd|e', "\x1b[2J\tz", "plain", "\u202eplain"])


def test_runs_diff_does_not_call_a_nan_param_of_both_runs_a_change(tmp_path):
    (tmp_path / "m.yaml").write_text("""\
version: 1
name: nans
params: {v: .nan, w: [.nan, 1.0], tag: a}
matrix: {tag: [a, b]}
executors: {h: {vendor: cpu}}
stages:
  z: {op: full, args: {shape: [1], value: 1}}
outputs: {z: z}
""")
    runs = tmp_path / "runs"
    code, out, err = cli("run", str(tmp_path / "m.yaml"), "--runs-dir", str(runs), "--quiet", "--json")
    assert code == 0, err
    a, b = (p["run_id"] for p in json.loads((runs / json.loads(out)["sweep_id"] / "sweep.json").read_text())["points"])
    code, out, err = cli("runs", "--runs-dir", str(runs), "--json", "diff", a, b)
    assert code == 0, err
    assert [row[0] for row in json.loads(out)["params"]] == ["tag"]
    code, out, err = cli("runs", "--runs-dir", str(runs), "diff", a, b)
    assert "tag:" in out and "v:" not in out and "w:" not in out


def test_the_editors_schema_is_json_with_a_plugin_ops_infinite_default(tmp_path):
    (tmp_path / "bounds.py").write_text('''\
import math

from hetflow import op

@op("usertext.below", dtypes=["fp32"])
def below(xp, x, *, hi: float = math.inf, lo: float = -math.inf, fill: float = math.nan):
    """x clipped."""
    return x
''')
    code, out, err = cli("schema", "--plugins", str(tmp_path / "bounds.py"))
    assert code == 0, err

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    schema = json.loads(out, parse_constant=refuse)  # an editor's JSON parser takes no NaN or Infinity
    found = [node for node in _walk(schema) if "Argument `hi` of `usertext.below`" in str(node.get("description"))]
    assert found and all("default" not in node and "Default Infinity" in node["description"] for node in found)


def _walk(node):
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def test_a_sweeps_failed_point_is_said_with_its_errors_escape_sequences_escaped(tmp_path):
    (tmp_path / "ops.py").write_text(OPS)
    (tmp_path / "m.yaml").write_text(MANIFEST + f"matrix: {{tag: [{json.dumps(HOSTILE)}, plain]}}\n")
    code, out, err = cli("run", str(tmp_path / "m.yaml"), "--runs-dir", str(tmp_path / "runs"), "--quiet")
    assert code == 1, err
    said = [line for line in err.splitlines() if line.startswith("hetflow: point ")]
    assert len(said) == 2 and not [c for c in RAW if c in out + err]
    assert any("\\x1b[2J" in line and "\\x0dover" in line for line in said)


def _chromium():
    import shutil

    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


# the page's own script cannot say where its boxes end; this one, added to a copy, marks what spills past its card
OVERFLOW_PROBE = """<script>
(function () {
  var cards = document.querySelectorAll("header.top, section"), wide = [];
  for (var i = 0; i < cards.length; i++) {
    if (cards[i].scrollWidth > cards[i].clientWidth + 1) { wide.push(cards[i].id || cards[i].className); }
  }
  document.documentElement.setAttribute("data-overflow", wide.join(" ") || "none");
})();
</script>"""


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed (apt-get install -y chromium)")
def test_long_names_and_values_stay_inside_the_reports_cards(tmp_path):
    import re
    import subprocess

    name, out_name, stage = "n" + "x" * 99, "o" * 64, "s" * 64
    (tmp_path / "m.yaml").write_text(f"""\
version: 1
name: {name}
params: {{tag: "{'T' * 3000}"}}
executors: {{h: {{vendor: cpu}}}}
stages:
  {stage}: {{op: full, args: {{shape: [2], value: 1}}}}
outputs: {{{out_name}: {stage}}}
""")
    runs = tmp_path / "runs"
    code, out, err = cli("run", str(tmp_path / "m.yaml"), "--runs-dir", str(runs), "--quiet")
    assert code == 0, err
    page = tmp_path / "report.html"
    code, _, err = cli("report", "--runs-dir", str(runs), out.strip().splitlines()[-1], "-o", str(page))
    assert code == 0, err
    probed = tmp_path / "probed.html"
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", OVERFLOW_PROBE + "</body>"), encoding="utf-8")
    dom = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                          f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,1400", "--dump-dom",
                          probed.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert re.search(r'data-overflow="([^"]*)"', dom.stdout).group(1) == "none"


@pytest.fixture(scope="module")
def big_run(tmp_path_factory):
    """A run of 420 stages: its report draws the plan by partitions, their stages from data in the page."""
    tmp = tmp_path_factory.mktemp("big")
    stages = "\n".join(f"  s{i}: {{op: relu, inputs: [s{i - 1}]}}" for i in range(1, 420))
    (tmp / "m.yaml").write_text("version: 1\nname: big\nexecutors: {h: {vendor: cpu}}\nstages:\n"
                                f"  s0: {{op: full, args: {{shape: [2], value: 1}}}}\n{stages}\noutputs: {{o: s419}}\n")
    code, out, err = cli("run", str(tmp / "m.yaml"), "--runs-dir", str(tmp / "runs"), "--quiet")
    assert code == 0, err
    return tmp / "runs", out.strip().splitlines()[-1]


def _open_in_chromium(page, profile, fragment=""):
    import subprocess

    dom = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                          "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri() + fragment],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert [line for line in dom.stderr.splitlines() if ":CONSOLE" in line] == []
    assert 'data-interactive="true"' in dom.stdout  # report.js, after the partitions' script, ran to its end
    return dom.stdout


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed (apt-get install -y chromium)")
@pytest.mark.parametrize("fragment", ["open=%E0", "open=constructor", "open=__proto__"])
def test_a_big_reports_address_naming_no_partition_leaves_the_page_working(big_run, tmp_path, fragment):
    runs, run_id = big_run
    page = tmp_path / "report.html"
    code, _, err = cli("report", "--runs-dir", str(runs), run_id, "-o", str(page))
    assert code == 0, err
    assert 'id="partition-stages"' in page.read_text(encoding="utf-8")  # the page of a plan drawn by partitions
    dom = _open_in_chromium(page, tmp_path / "p", "#" + fragment)
    assert 'class="plan-graph partition-stages"' not in dom


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed (apt-get install -y chromium)")
def test_a_big_reports_stage_data_holding_a_comment_and_script_tag_keeps_the_page_whole(big_run, tmp_path):
    import shutil

    runs, run_id = big_run
    copied = tmp_path / "runs"
    shutil.copytree(runs / run_id, copied / run_id)
    record_file = copied / run_id / "record.json"
    record = json.loads(record_file.read_text())
    # a record edited by hand, or written by another hetflow: an op named as no manifest may name one
    record["plan"]["nodes"]["s5"]["op"] = "<!--<script>"
    record_file.write_text(json.dumps(record))
    page = tmp_path / "report.html"
    code, _, err = cli("report", "--runs-dir", str(copied), run_id, "-o", str(page))
    assert code == 0, err
    partition = record["plan"]["nodes"]["s5"]["partition"]
    dom = _open_in_chromium(page, tmp_path / "p", f"#open={partition}")
    assert 'class="plan-graph partition-stages"' in dom and "&lt;!--&lt;script&gt; ·" in dom


def _shown_width(text):
    import unicodedata

    return sum(0 if unicodedata.combining(c) or unicodedata.category(c) == "Cf" else
               2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def test_a_text_tables_columns_line_up_as_the_terminal_shows_wide_and_combining_characters():
    values = ["plain", "中文", "e\u0301e\u0301", "a\u200bb", "🙂"]
    data = {"params": ["tag"], "outputs": ["total"],
            "rows": [{"run_id": f"r{i}", "point": f"p{i}", "status": "succeeded", "record": None,
                      "params": {"tag": v}, "outputs": {"total": 1.5}} for i, v in enumerate(values)]}
    lines = render_table(data, "text").splitlines()
    assert len(lines) == 1 + len(values)
    # where the total column starts, in the terminal's columns
    starts = {_shown_width(line[:line.rindex(" ") + 1]) for line in lines}
    assert len(starts) == 1, lines


def test_runs_and_runs_show_line_up_points_with_wide_characters(tmp_path):
    (tmp_path / "m.yaml").write_text("""\
version: 1
name: wide
params: {tag: a}
matrix: {tag: ["中文中文", "abcd", "e\\u0301e\\u0301"]}
executors: {h: {vendor: cpu}}
stages:
  z: {op: full, args: {shape: [1], value: 1}}
outputs: {z: z}
""")
    runs = tmp_path / "runs"
    code, out, err = cli("run", str(tmp_path / "m.yaml"), "--runs-dir", str(runs), "--quiet")
    assert code == 0, err
    sweep = out.strip().splitlines()[-1]
    code, listed, err = cli("runs", "--runs-dir", str(runs))
    assert code == 0, err
    rows = [line for line in listed.splitlines() if "wide[" in line]
    assert len(rows) == 3 and len({_shown_width(line[:line.index("succeeded")]) for line in rows}) == 1, rows
    code, shown, err = cli("runs", "--runs-dir", str(runs), "show", sweep)
    assert code == 0, err
    rows = [line for line in shown.splitlines() if "wide[" in line]
    assert len(rows) == 3 and len({_shown_width(line[:line.index("succeeded")]) for line in rows}) == 1, rows


def test_schedule_list_and_status_say_a_manifests_file_name_with_its_escape_sequences_escaped(tmp_path):
    body = ('version: 1\nname: nightly\nschedule: {cron: "0 2 * * *"}\nexecutors: {h: {vendor: cpu}}\n'
            "stages:\n  z: {op: full, args: {shape: [1], value: 1}}\noutputs: {z: z}\n")
    (tmp_path / "a\x1b[2J\rb.yaml").write_text(body)
    (tmp_path / "bad\x1b[31m.yaml").write_text(body.replace('"0 2 * * *"', '"0 25 * * *"'))
    for argv in (("list",), ("status", "--runs-dir", str(tmp_path / "runs"))):
        code, out, err = cli("schedule", *argv, str(tmp_path), "--now", "2026-01-01T00:00:00Z")
        assert code == 2, (argv, out, err)
        assert "\x1b" not in out + err and "\r" not in out + err
        assert "a\\x1b[2J\\x0db.yaml" in out and "bad\\x1b[31m.yaml" in err


def test_verify_says_a_reruns_error_with_its_escape_sequences_escaped(tmp_path):
    marker = tmp_path / "fail-now"
    (tmp_path / "ops.py").write_text(f'''\
import os

from hetflow import op

@op("lab.later", dtypes=["fp32"])
def later(xp, x):
    """Fails once the marker is there."""
    if os.path.exists({str(marker)!r}):
        raise ValueError({HOSTILE!r})
    return x
''')
    (tmp_path / "m.yaml").write_text("version: 1\nname: later\nplugins: [ops.py]\nexecutors: {h: {vendor: cpu}}\n"
                                     "stages:\n  x: {op: full, args: {shape: [2], value: 1}}\n"
                                     "  y: {op: lab.later, inputs: [x]}\noutputs: {y: y}\n")
    runs = tmp_path / "runs"
    code, out, err = cli("run", str(tmp_path / "m.yaml"), "--runs-dir", str(runs), "--quiet")
    assert code == 0, err
    marker.write_text("")
    code, out, err = cli("verify", out.strip().splitlines()[-1], "--runs-dir", str(runs))
    assert code == 1, err
    said = [line for line in err.splitlines() if line.startswith("hetflow: the rerun failed:")]
    assert len(said) == 1 and "\\x1b[2J" in said[0] and "\\x0dover" in said[0]
    assert not [c for c in RAW if c in out + err]


@pytest.mark.parametrize("graph", ["builtin", "graphviz"])
def test_the_report_says_control_characters_and_overrides_in_user_text_as_escapes(tmp_path, graph):
    import shutil

    if graph == "graphviz" and shutil.which("dot") is None:
        pytest.skip("Graphviz's dot is not installed")
    folder = tmp_path / "d\u202eir\x1b[31m"
    folder.mkdir()
    (folder / "ops.py").write_text(OPS)
    (folder / "m.yaml").write_text(MANIFEST)
    runs = tmp_path / "runs"
    code, out, err = cli("run", str(folder / "m.yaml"), "--runs-dir", str(runs), "-p", f"tag={json.dumps(HOSTILE)}")
    assert code == 1, err
    page = tmp_path / "report.html"
    code, _, err = cli("report", "--runs-dir", str(runs), out.strip().splitlines()[-1], "-o", str(page), "--graph", graph)
    assert code == 0, err
    html = page.read_text(encoding="utf-8")
    assert not [c for c in ("\x1b", "\u202e", "\x9b", "\b", "\x7f") if c in html]
    assert "d\\u202eir\\x1b[31m" in html  # the manifest's path, in the header and the plan's tooltips
    assert "\\x1b[2J" in html and "\\x0dover\\x08b" in html  # the op's message, in the failure's card
    assert "[red]x[/] \\x1b" in html  # markup shown as written
