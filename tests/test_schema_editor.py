"""The editor schema in Red Hat's yaml-language-server itself: diagnostics, hover and completion.

Runs when ``yaml-language-server`` is on PATH (``npm install -g yaml-language-server``)
or named by ``HETFLOW_YAML_LS``; skips with that reason otherwise.
"""

from __future__ import annotations

import json
import os
import pathlib
import queue
import shutil
import subprocess
import threading

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "schemas" / "pipeline.schema.json"
SERVER = os.environ.get("HETFLOW_YAML_LS") or shutil.which("yaml-language-server")

pytestmark = pytest.mark.skipif(SERVER is None, reason="yaml-language-server is not installed "
                                "(npm install -g yaml-language-server, or set HETFLOW_YAML_LS)")


class LanguageServer:
    """A minimal LSP client over stdio: requests answered in order, diagnostics kept per document."""

    def __init__(self):
        self.proc = subprocess.Popen([SERVER, "--stdio"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)
        self.replies: queue.Queue = queue.Queue()
        self.diagnostics: dict[str, queue.Queue] = {}
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()
        self.request("initialize", {"processId": os.getpid(), "rootUri": None, "capabilities": {
            "textDocument": {"hover": {"contentFormat": ["markdown"]}}}})
        self.notify("initialized", {})

    def _send(self, message: dict) -> None:
        body = json.dumps(message).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def _read(self) -> None:
        stream = self.proc.stdout
        while True:
            length = None
            while (line := stream.readline().strip()):
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            if length is None:
                return
            message = json.loads(stream.read(length))
            if message.get("method") == "workspace/configuration":
                settings = {"validate": True, "hover": True, "completion": True, "schemas": {}}
                self._send({"jsonrpc": "2.0", "id": message["id"], "result": [settings] * len(message["params"]["items"])})
            elif "method" in message and "id" in message:
                self._send({"jsonrpc": "2.0", "id": message["id"], "result": None})
            elif message.get("method") == "textDocument/publishDiagnostics":
                self.diagnostics.setdefault(message["params"]["uri"], queue.Queue()).put(message["params"]["diagnostics"])
            elif "id" in message:
                self.replies.put(message)

    def notify(self, method: str, params: dict) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def request(self, method: str, params: dict):
        self.next_id += 1
        self._send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        reply = self.replies.get(timeout=30)
        assert reply["id"] == self.next_id
        return reply.get("result")

    def open(self, path: pathlib.Path, text: str) -> tuple[str, list[tuple[int, str]]]:
        uri = path.resolve().as_uri()
        self.diagnostics.setdefault(uri, queue.Queue())
        self.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "yaml", "version": 1, "text": text}})
        found = self.diagnostics[uri].get(timeout=30)
        return uri, [(d["range"]["start"]["line"] + 1, d["message"]) for d in found]

    def at(self, method: str, uri: str, text: str, needle: str, offset: int = 1):
        lines = text.splitlines()
        line = next(i for i, t in enumerate(lines) if needle in t)
        return self.request(method, {"textDocument": {"uri": uri},
                                     "position": {"line": line, "character": lines[line].index(needle) + offset}})

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="module")
def server():
    ls = LanguageServer()
    yield ls
    ls.close()


def with_schema(text: str) -> str:
    lines = [t for t in text.splitlines() if not t.startswith("# yaml-language-server:")]
    return "\n".join([f"# yaml-language-server: $schema={SCHEMA.as_uri()}"] + lines) + "\n"


def test_zkvm_trace_shows_no_false_errors(server):
    path = ROOT / "pipelines" / "zkvm_trace.yaml"
    _, found = server.open(path, with_schema(path.read_text()))
    assert found == []


def test_the_shipped_manifests_show_no_false_errors(server):
    """Every example and pipeline as its author sees it, users' ops (examples/custom-op) included."""
    manifests = sorted(p for folder in ("examples", "pipelines") for p in (ROOT / folder).rglob("*.y*ml"))
    assert any("plugins:" in p.read_text() for p in manifests)
    for path in manifests:
        _, found = server.open(path, with_schema(path.read_text()))
        assert found == [], f"{path.relative_to(ROOT)}: {found}"


EDITED = """\
version: 1
name: edited
params: {n: 4}
executors:
  gpu:
    vendor: cuda
stages:
  a:
    op: random.normal
    args:
      shape: ["${n}", 3]
      seed: 1
      sed: 2
  b:
    op: matmull
    inputs: [a, a]
outputs: {a: a}
"""


def test_diagnostics_hover_and_completion(server, tmp_path):
    text = with_schema(EDITED)
    uri, found = server.open(tmp_path / "edited.yaml", text)
    assert [line for line, _ in sorted(found)] == [14, 16]
    assert "Property sed is not allowed." in dict(found)[14]
    from hetflow.executors.ops import BUILTIN

    # the editors' schema lists the op registry's names, sorted: the misspelt op is told the one it meant
    assert dict(found)[16].startswith(f'Value is not accepted. Valid values: "{sorted(BUILTIN)[0]}"')
    assert '"matmul"' in dict(found)[16]

    vendor = server.at("textDocument/hover", uri, text, "vendor: cuda")["contents"]["value"]
    assert "The vendor of this executor" in vendor
    seed = server.at("textDocument/hover", uri, text, "seed: 1")["contents"]["value"]
    assert "Argument `seed` of `random.normal`" in seed

    ops = server.at("textDocument/completion", uri, text, "op: matmull", offset=len("op: "))
    assert {"matmul", "random.normal", "relu"} <= {item["label"] for item in ops["items"]}
    args = server.at("textDocument/completion", uri, text, "sed: 2", offset=1)
    assert {item["label"] for item in args["items"]} >= {"mean", "std"}
