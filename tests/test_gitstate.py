"""The git state a record names, answered from memory while the tree holds (engine/store/gitstate.py).

Real repositories in temporary folders and the real ``git``; each answer
that git gives is counted by wrapping the function that starts it, so a
test can tell an answer from memory from one asked again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from hetflow.engine.store import gitstate

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(folder, *args):
    return subprocess.run(["git", "-C", str(folder), "-c", "user.email=t@example.com", "-c", "user.name=t",
                           "-c", "protocol.file.allow=always", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    top = tmp_path / "repo"
    top.mkdir()
    _git(top, "init", "-q")
    (top / "p.yaml").write_text("version: 1\n")
    (top / "a").mkdir()
    (top / "a" / "b.txt").write_text("b")
    (top / "c.txt").write_text("c")
    (top / ".gitignore").write_text("ignored/\n")
    (top / "ignored").mkdir()
    (top / "empty").mkdir()  # git shows no empty folder: a clean tree may hold one
    _git(top, "add", "-A")
    _git(top, "commit", "-q", "-m", "first")
    return top


@pytest.fixture(params=["watch", "stat"])
def mode(request, monkeypatch):
    """Both ways a clean tree is watched: inotify where the file system allows, each path's stat elsewhere."""
    if request.param == "watch":
        if not sys.platform.startswith("linux"):
            pytest.skip("inotify is Linux's")
    else:
        stat_only = gitstate._Inotify()
        stat_only.broken = True
        monkeypatch.setattr(gitstate, "_WATCHES", stat_only)
        # the files were made a moment ago; their timestamps need not settle for these tests
        monkeypatch.setattr(gitstate, "SETTLE_NS", 0)
    return request.param


@pytest.fixture
def asked(monkeypatch):
    """How many times git was asked for the status."""
    count = [0]
    real = gitstate._ask_status

    def counted(*args, **kwargs):
        count[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(gitstate, "_ask_status", counted)
    gitstate.forget()
    yield count
    gitstate.forget()


def _new_repository(folder, name, text):
    """A repository at ``folder`` with one commit of one file."""
    folder.mkdir()
    _git(folder, "init", "-q")
    (folder / name).write_text(text)
    _git(folder, "add", name)
    _git(folder, "commit", "-q", "-m", name)


def _settle(manifest, asked):
    """Ask until the answer comes from memory: the first answer is git's alone, the second watches the tree."""
    first = gitstate.state(str(manifest))
    assert gitstate.state(str(manifest)) == first
    n = asked[0]
    assert gitstate.state(str(manifest)) == first and asked[0] == n, "the third answer should come from memory"
    return first


def mode_of_tree(manifest):
    entry = gitstate._WATCHED.get(str(manifest.parent))
    return None if entry is None else ("watch" if entry[1].watch is not None else "stat")


def test_a_clean_tree_is_answered_from_memory_until_a_tracked_file_is_written(repo, mode, asked):
    manifest = repo / "p.yaml"
    clean = _settle(manifest, asked)
    assert clean == {"commit": _git(repo, "rev-parse", "HEAD"), "dirty": False, "manifest_dirty": False,
                     "path": "p.yaml"}
    assert mode_of_tree(manifest) == mode
    n = asked[0]
    for _ in range(5):
        assert gitstate.state(str(manifest)) == clean
    assert asked[0] == n

    # what git ignores changes nothing
    (repo / "ignored" / "out.npy").write_bytes(b"x")
    assert gitstate.state(str(manifest)) == clean and asked[0] == n

    (repo / "a" / "b.txt").write_text("b, edited")
    assert gitstate.state(str(manifest)) == {**clean, "dirty": True}
    assert asked[0] == n + 1


@pytest.mark.parametrize("change", ["new file in a subfolder", "new file in an empty folder", "rename", "delete",
                                    "new folder with a file", "exclude no longer ignores"])
def test_every_change_git_would_see_is_seen(repo, mode, asked, change):
    manifest = repo / "p.yaml"
    exclude = repo / ".git" / "info" / "exclude"
    exclude.parent.mkdir(exist_ok=True)
    exclude.write_text("scratch/\n")
    (repo / "scratch").mkdir()
    (repo / "scratch" / "notes.txt").write_text("n")
    clean = _settle(manifest, asked)
    assert not clean["dirty"]
    if change == "new file in a subfolder":
        (repo / "a" / "new.txt").write_text("n")
    elif change == "new file in an empty folder":
        (repo / "empty" / "new.txt").write_text("n")
    elif change == "rename":
        os.rename(repo / "a" / "b.txt", repo / "a" / "d.txt")
    elif change == "delete":
        os.unlink(repo / "c.txt")
    elif change == "new folder with a file":
        (repo / "a" / "deeper").mkdir()
        (repo / "a" / "deeper" / "x.txt").write_text("x")
    else:
        exclude.write_text("")
    assert gitstate.state(str(manifest)) == {**clean, "dirty": True}
    assert _git(repo, "status", "--porcelain"), "git agrees the tree is dirty"


def test_a_dirty_tree_is_watched_too_and_found_clean_once_cleaned_by_hand(repo, mode, asked):
    manifest = repo / "p.yaml"
    (repo / "a" / "draft.txt").write_text("d")
    (repo / "p.yaml").write_text("version: 1\n# edited\n")
    dirty = _settle(manifest, asked)
    assert dirty["dirty"] and dirty["manifest_dirty"]
    assert mode_of_tree(manifest) == mode
    n = asked[0]
    # another manifest of the same tree: its own answer, from the same watch
    assert gitstate.state(str(repo / "c.txt")) == {**dirty, "manifest_dirty": False, "path": "c.txt"}
    assert asked[0] == n
    os.unlink(repo / "a" / "draft.txt")
    _git(repo, "checkout", "--", "p.yaml")  # the manifest's own stat changes too: both cleaned
    assert gitstate.state(str(manifest)) == {**dirty, "dirty": False, "manifest_dirty": False}


def test_a_touched_file_is_asked_again_and_found_clean(repo, mode, asked):
    manifest = repo / "p.yaml"
    clean = _settle(manifest, asked)
    n = asked[0]
    st = (repo / "c.txt").stat()
    os.utime(repo / "c.txt", ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    assert gitstate.state(str(manifest)) == clean
    assert asked[0] == n + 1


def test_a_tracked_file_in_an_ignored_folder_is_watched_too(repo, mode, asked):
    (repo / "ignored" / "kept.txt").write_text("k")
    _git(repo, "add", "-f", "ignored/kept.txt")
    _git(repo, "commit", "-q", "-m", "kept")
    manifest = repo / "p.yaml"
    clean = _settle(manifest, asked)
    (repo / "ignored" / "kept.txt").write_text("k, edited")
    assert gitstate.state(str(manifest)) == {**clean, "dirty": True}


def test_a_tree_changed_a_moment_ago_is_not_trusted_by_its_stat(repo, asked, monkeypatch):
    """Timestamps come from a clock that ticks every few ms (seconds on some file systems): a file written
    twice within one tick keeps its stat, so a tree that changed lately is asked again instead."""
    stat_only = gitstate._Inotify()
    stat_only.broken = True
    monkeypatch.setattr(gitstate, "_WATCHES", stat_only)
    monkeypatch.setattr(gitstate, "SETTLE_NS", 3600 * 10**9)  # everything here changed within the hour
    manifest = repo / "p.yaml"
    for i in range(4):
        assert not gitstate.state(str(manifest))["dirty"]
        assert asked[0] == i + 1
    assert str(repo) not in gitstate._WATCHED


def test_a_tree_with_a_submodule_is_asked_every_time(repo, tmp_path, mode, asked):
    inner = tmp_path / "inner"
    _new_repository(inner, "x.txt", "x")
    _git(repo, "submodule", "add", "-q", str(inner), "sub")
    _git(repo, "commit", "-q", "-m", "sub")
    manifest = repo / "p.yaml"
    for i in range(3):
        assert not gitstate.state(str(manifest))["dirty"]
    assert asked[0] == 3
    (repo / "sub" / "x.txt").write_text("edited inside the submodule")
    assert gitstate.state(str(manifest))["dirty"]


def test_a_forked_child_forgets_the_watches(repo, asked):
    if not hasattr(os, "fork"):
        pytest.skip("no fork here")
    manifest = repo / "p.yaml"
    _settle(manifest, asked)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            os.write(write, b"%d" % len(gitstate._WATCHED))
        finally:
            os._exit(0)
    os.close(write)
    got = os.read(read, 16)
    os.close(read)
    os.waitpid(pid, 0)
    assert got == b"0", "the child must not read its parent's watch"
    assert str(repo) in gitstate._WATCHED


def test_the_mount_type_is_read():
    if not os.path.exists("/proc/self/mountinfo"):
        pytest.skip("no /proc here")
    assert gitstate._mount_type("/")


def test_the_manifests_of_one_tree_share_its_watch(repo, tmp_path, mode, asked, monkeypatch):
    (repo / "a" / "q.yaml").write_text("version: 1\n")
    _git(repo, "add", "a/q.yaml")
    _git(repo, "commit", "-q", "-m", "q")
    first, second = repo / "p.yaml", repo / "a" / "q.yaml"
    _settle(first, asked)
    n = asked[0]
    assert gitstate.state(str(second)) == {"commit": _git(repo, "rev-parse", "HEAD"), "dirty": False,
                                           "manifest_dirty": False, "path": os.path.join("a", "q.yaml")}
    assert asked[0] == n and len(gitstate._WATCHED) == 1

    # a second repository's tree takes the place of the first where only one is kept
    monkeypatch.setattr(gitstate, "WATCHED_TREES", 1)
    other = tmp_path / "other"
    _new_repository(other, "p.yaml", "version: 1\n")
    tree = gitstate._WATCHED[str(repo)][1]
    _settle(other / "p.yaml", asked)
    assert list(gitstate._WATCHED) == [str(other)]
    assert tree.watch is None, "the tree let go is closed"


def _quickstart_runs(repo, runs):
    """The quickstart committed in ``repo``; returns a function that runs it in this process (into ``runs``) and
    gives the ``git`` entry of its record."""
    import json

    import hetflow

    quickstart = os.path.join(os.path.dirname(__file__), os.pardir, "examples", "quickstart.yaml")
    shutil.copy(quickstart, repo / "quickstart.yaml")
    _git(repo, "add", "quickstart.yaml")
    _git(repo, "commit", "-q", "-m", "quickstart")

    def recorded():
        done = hetflow.run(str(repo / "quickstart.yaml"), runs_dir=str(runs), cache=False)
        with open(done.record_path, encoding="utf-8") as f:
            return json.load(f)["host"]["git"]

    return recorded


def test_runs_in_one_process_record_the_tree_as_it_is_at_each_run(repo, tmp_path, asked, monkeypatch):
    monkeypatch.setattr(gitstate, "SETTLE_NS", 0)  # where the tree's stat is watched, not its events
    recorded = _quickstart_runs(repo, tmp_path / "runs")
    states = [recorded()["dirty"] for _ in range(4)]
    (repo / "a" / "b.txt").write_text("edited between two runs")
    states.append(recorded()["dirty"])
    _git(repo, "commit", "-q", "-a", "-m", "second")
    states.append(recorded()["dirty"])
    assert states == [False] * 4 + [True, False]
    # asked by the first run, the second (which starts watching), the edit and the commit
    assert asked[0] == 4, "the repeated clean runs are answered from memory"


def test_a_linked_worktree_is_watched_as_its_own_tree(repo, tmp_path, mode, asked):
    linked = tmp_path / "linked"
    _git(repo, "worktree", "add", "-q", str(linked))
    manifest = linked / "p.yaml"
    clean = _settle(manifest, asked)
    assert not clean["dirty"] and mode_of_tree(manifest) == mode
    (repo / "c.txt").write_text("the main tree's edit is not the linked tree's")
    assert gitstate.state(str(manifest)) == clean
    (linked / "c.txt").write_text("edited in the linked tree")
    assert gitstate.state(str(manifest))["dirty"]


def test_a_tree_too_big_to_watch_is_asked_while_clean_and_kept_by_its_key_while_dirty(repo, asked, monkeypatch):
    monkeypatch.setattr(gitstate, "WATCH_LIMIT", 2)  # the repository has 4 folders git looks into
    monkeypatch.setattr(gitstate, "STAT_LIMIT", 2)
    manifest = repo / "p.yaml"
    for i in range(3):
        assert not gitstate.state(str(manifest))["dirty"]
    assert asked[0] == 3 and not gitstate._WATCHED
    (repo / "a" / "new.txt").write_text("n")
    for _ in range(3):
        assert gitstate.state(str(manifest))["dirty"]
    assert asked[0] == 4


def test_runs_written_into_an_untracked_runs_folder_do_not_make_git_asked_again(repo, tmp_path, asked, monkeypatch):
    """A runs folder inside the repository that nobody ignored: git lists it as one untracked entry, whatever
    the runs put in it, so the watch leaves its inside alone (the tree is dirty, and stays so)."""
    monkeypatch.setattr(gitstate, "SETTLE_NS", 0)
    recorded = _quickstart_runs(repo, repo / "runs")
    states = [recorded() for _ in range(5)]
    assert all(s["dirty"] and not s["manifest_dirty"] for s in states[1:]), states
    assert asked[0] <= 3, "the first run, the one that starts watching, and at most the first run's new folder"
    assert _git(repo, "status", "--porcelain") == "?? runs/"
