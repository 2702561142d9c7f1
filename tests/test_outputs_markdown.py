"""``runs table --format markdown``: each cell, rendered by a markdown parser, shows the value it holds as text,
whatever markdown would otherwise read in it (code spans, emphasis, HTML, links, entities, backslash escapes, the
cell's own end), and each row stays one line."""

import io
import json
from html.parser import HTMLParser

import pytest

from hetflow.engine.cli import main

markdown_it = pytest.importorskip("markdown_it")

VALUES = ["`code`", "*em* _u_", "<b>bold</b>", "[link](http://x)", "a|b", "x\\*y", "~~gone~~", "&amp;", "one\ntwo"]

MANIFEST = """\
version: 1
name: marks
params: {tag: ""}
matrix: {tag: %s}
executors: {host: {vendor: cpu}}
stages:
  z: {op: ones, args: {shape: [1]}, executor: host}
outputs: {z: z}
""" % json.dumps(VALUES)


def cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


class _Cells(HTMLParser):
    """The text of each body cell of a rendered table, row by row, and every tag met inside a cell."""

    def __init__(self):
        super().__init__()
        self.rows, self.inner, self._cell = [], [], None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = ""
        elif self._cell is not None:
            self.inner.append(tag)

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.rows[-1].append(self._cell)
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


def test_markdown_cells_show_their_values_as_text(tmp_path):
    manifest = tmp_path / "m.yaml"
    manifest.write_text(MANIFEST)
    runs = str(tmp_path / "runs")
    code, out, err = cli("run", str(manifest), "--runs-dir", runs, "--quiet", "--json")
    assert code == 0, err
    sweep = json.loads(out)
    code, text, err = cli("runs", "table", sweep["sweep_id"], "--runs-dir", runs, "--format", "markdown")
    assert code == 0, err
    assert len(text.splitlines()) == 2 + len(VALUES)
    html = markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(text)
    cells = _Cells()
    cells.feed(html)
    assert cells.inner == []  # no code, emphasis, link, strikethrough or raw HTML made of a value
    header, *body = cells.rows
    assert header == ["run", "point", "status", "tag", "z"]
    # a newline reads as its escape, as in the text table
    assert [row[3] for row in body] == [v.replace("\n", "\\n") for v in VALUES]
    assert [row[1] for row in body] == [p["name"].replace("\n", "\\n") for p in sweep["points"]]
    assert {row[4] for row in body} == {"1"}
