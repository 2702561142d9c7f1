"""A sweep whose param or scalar outputs are NaN or infinite: the table shows those values as such, and the
plots leave out what has no place on an axis, so headless Chromium draws the page without an error."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess

import pytest

from hetflow.engine.cli import main

MANIFEST = """\
version: 1
name: nf
params: {w: 1.0}
matrix: {w: [.nan, 0.5, 2.0, .inf]}
executors: {h: {vendor: cpu}}
stages:
  x: {op: arange, args: {stop: 5}}
  y: {op: mul, inputs: [x], args: {value: "${w}"}}
  s: {op: sum, inputs: [y]}
  c: {op: sum, inputs: [x]}
outputs: {s: s, c: c}
"""


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    root = tmp_path_factory.mktemp("nf")
    (root / "m.yaml").write_text(MANIFEST)
    runs, out, err = root / "runs", io.StringIO(), io.StringIO()
    assert main(["run", str(root / "m.yaml"), "--runs-dir", str(runs), "--quiet", "--json"], out, err) == 0, \
        err.getvalue()
    sweep = json.loads(out.getvalue())["sweep_id"]
    path = root / "sweep.html"
    assert main(["report", sweep, "--runs-dir", str(runs), "-o", str(path)], io.StringIO(), io.StringIO()) == 0
    return root, path.read_text()


def _row(text: str, point: str) -> str:
    return re.search(r'<tr class="point" data-point="' + re.escape(point) + r'">(.*?)</tr>', text).group(1)


def test_nonfinite_scalars_are_shown_as_values_not_as_digests(page):
    _, text = page
    cells = re.findall(r'<td class="num">([^<]*)</td>', _row(text, "nf[w=NaN]"))
    assert cells[0] == "NaN" and cells[-2:] == ["10", "nan"]  # w, then c and s: s's value, where a digest was shown
    assert re.findall(r'<td class="num">([^<]*)</td>', _row(text, "nf[w=0.5]"))[-2:] == ["10", "5"]
    assert "sha256:" not in _row(text, "nf[w=Infinity]")


def test_plots_place_every_finite_value_and_count_what_they_leave_out(page):
    _, text = page
    coordinates = re.findall(r' (?:cx|cy|x|y|x1|x2|y1|y2|d)="([^"]*)"', text.split('<div class="plots">', 1)[1])
    assert coordinates and not [c for c in coordinates if "nan" in c or "inf" in c]
    c_plot = text.split('data-output="c"', 1)[1].split("</svg>", 1)[0]
    assert c_plot.count("<circle") == 4  # every point: w's NaN and inf have their place as categories
    s_caption = re.search(r"<figcaption>s against w(.*?)</figcaption>", text).group(1)
    assert "2 points not plotted: s is NaN or infinite there" in s_caption
    s_plot = text.split('data-output="s"', 1)[1].split("</svg>", 1)[0]
    assert s_plot.count("<circle") == 2


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed (apt-get install -y chromium)")
def test_the_page_renders_in_headless_chromium_without_console_errors(page):
    root, _ = page
    dom = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                          f"--user-data-dir={root / 'profile'}", "--enable-logging=stderr", "--v=0", "--dump-dom",
                          (root / "sweep.html").as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert [line for line in dom.stderr.splitlines() if ":CONSOLE" in line] == []
    assert 'data-interactive="true"' in dom.stdout
