"""A cluster started by hand whose workers have too little memory for the run (``dask worker --memory-limit``).

Each worker's nanny restarts it, under the same name on a new address,
when its process passes 95% of its limit. The run recovers from the
first restarts and gives up at the third in a row; what it records of
them is what happened.
"""

import io
import json
from pathlib import Path

import pytest

from hetflow.engine import cli

pytest.importorskip("distributed")

from test_distributed_cluster import START_TIMEOUT_S, by_hand  # noqa: E402

LIMIT = ["--memory-limit", "400MB"]
# 12000 x 12000 fp32 is 549 MiB, past either worker's limit as soon as it is made
BIG = """\
version: 1
name: big
executors: {h: {vendor: cpu}}
stages:
  a: {op: random.normal, args: {shape: [12000, 12000], seed: 1}}
  y: {op: relu, inputs: [a]}
  z: {op: sum, inputs: [y]}
outputs: {z: z}
"""


@pytest.fixture(scope="module")
def outgrown(tmp_path_factory):
    """The run of BIG on two workers of 400 MB, under nannies: (exit code, record, run events, stderr)."""
    from distributed import Client

    folder = tmp_path_factory.mktemp("memory")
    path = folder / "big.yaml"
    path.write_text(BIG)
    with by_hand(folder, ["--name", "wa", *LIMIT], ["--name", "wb", *LIMIT]) as file:
        with Client(scheduler_file=str(file), timeout=START_TIMEOUT_S, set_as_default=False) as client:
            client.wait_for_workers(2, timeout=START_TIMEOUT_S)
        out, err = io.StringIO(), io.StringIO()
        code = cli.main(["run", str(path), "--scheduler", str(file), "--runs-dir", str(folder / "runs"), "--no-cache",
                         "--log-format", "json", "--json"], out=out, err=err)
    record = json.loads(Path(json.loads(out.getvalue())["record"]).read_text())
    events = [json.loads(line) for line in err.getvalue().splitlines() if line.startswith("{")]
    return code, record, [e for e in events if e.get("kind") == "run"], err.getvalue()


def test_every_lost_worker_is_named_though_its_nanny_started_it_after_placement(outgrown):
    """Placement asked the workers once; a worker its nanny restarted joined later, and the record and the event
    of its loss named it null ('worker tcp://... lost', ``lost_workers: [{"name": null}]``)."""
    code, record, events, err = outgrown
    assert code == 1, err[-3000:]
    lost = [e for e in events if e["event"] == "worker-lost"]
    assert len(lost) >= 2, err[-3000:]
    assert all(e["name"] in ("wa", "wb") for e in lost), lost
    entries = [w for r in record["recovery"] for w in r["lost_workers"]]
    assert entries and all(w["name"] in ("wa", "wb") for w in entries), record["recovery"]


def test_the_run_gives_up_at_the_third_restart_for_memory_and_names_that_one(outgrown):
    """The run said it gave up after 3 restarts in a row, naming the third as the last, while a fourth had
    happened (its worker named nowhere) and ended it."""
    code, record, events, err = outgrown
    assert code == 1 and record["status"] == "failed", err[-3000:]
    message = record["error"]["message"]
    assert "restarted for exceeding their memory limit 3 times in a row" in message, message
    lost = [e for e in events if e["event"] == "worker-lost"]
    assert len(lost) == 3 and all(e.get("memory") for e in lost), lost
    assert len(record["recovery"]) == 2, record["recovery"]
    last = lost[-1]
    assert f"the last: worker {last['name']} ({last['worker']}) restarted by its nanny" in message, message
    assert last["rerun"] == []
    assert record["error"]["lost"]["workers"][0]["address"] == last["worker"]
    # the first two were recovered from: each entry is the loss its event told
    assert [r["lost_workers"][0]["address"] for r in record["recovery"]] == [e["worker"] for e in lost[:2]]
