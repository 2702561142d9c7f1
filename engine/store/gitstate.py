"""The git state a run's record names: the commit, whether the work tree is dirty, whether the manifest is.

Asked of ``git`` itself (``git --no-optional-locks status --porcelain=v2``),
and answered again from this process's memory while nothing it depends on
has changed (:func:`state`).
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["state", "key"]

# (manifest path, _git_key) -> the record's ``git`` entry of a dirty tree; only the latest key per manifest is kept
_GIT_CACHE: dict[str, tuple[tuple, dict]] = {}
_GIT_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR", "GIT_CEILING_DIRECTORIES")


def _stat_key(path: str) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino


def key(manifest: str) -> tuple | None:
    """What the manifest's git state depends on, by ``stat``: ``()`` when no folder above it holds a ``.git``;
    None when it cannot be told without git (the environment points git elsewhere, a ``.git`` unread)."""
    if any(name in os.environ for name in _GIT_ENV):
        return None
    folder = os.path.dirname(manifest)
    while True:
        dot = os.path.join(folder, ".git")
        if os.path.isdir(dot):
            gitdir = dot
            break
        if os.path.isfile(dot):  # a worktree or a submodule: the file names the git folder
            try:
                with open(dot, encoding="utf-8") as f:
                    line = f.read().strip()
            except (OSError, UnicodeDecodeError):
                return None
            if not line.startswith("gitdir:"):
                return None
            gitdir = os.path.join(folder, line[len("gitdir:"):].strip())
            break
        parent = os.path.dirname(folder)
        if parent == folder:
            # every folder up to the root was looked at: one that gets a .git later changes the answer
            return ()
        folder = parent
    common = gitdir
    try:
        with open(os.path.join(gitdir, "commondir"), encoding="utf-8") as f:
            common = os.path.join(gitdir, f.read().strip())
    except OSError:
        pass
    try:
        with open(os.path.join(gitdir, "HEAD"), encoding="utf-8") as f:
            head = f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None
    ref = head[len("ref:"):].strip() if head.startswith("ref:") else None
    ref_file = None if ref is None else (os.path.join(gitdir, ref) if os.path.exists(os.path.join(gitdir, ref))
                                         else os.path.join(common, ref))
    return (folder, head, _stat_key(os.path.join(gitdir, "HEAD")), ref_file and _stat_key(ref_file),
            _stat_key(os.path.join(common, "packed-refs")), _stat_key(os.path.join(gitdir, "index")),
            _stat_key(manifest))


def state(manifest_file: str) -> dict[str, Any] | None:
    manifest = os.path.abspath(manifest_file)
    now = key(manifest)
    if now == ():
        return None
    if now is not None:
        cached = _GIT_CACHE.get(manifest)
        if cached is not None and cached[0] == now:
            return dict(cached[1])
    answer = _ask_git(manifest, now[0] if now else None)
    # a dirty answer holds while the key does (see provenance); the key is read again after git ran, and
    # only when git did not change it meanwhile (its index refresh rewrites the index) is it kept
    if now is not None and answer is not None and answer["dirty"]:
        after = key(manifest)
        if after is not None:
            _GIT_CACHE[manifest] = (after, dict(answer))
    else:
        _GIT_CACHE.pop(manifest, None)
    return answer


def _ask_git(manifest: str, top: str | None = None) -> dict[str, Any] | None:
    """The record's ``git`` entry, asked of git. Where the work tree's top is known (the folder holding the
    ``.git`` above the manifest), one ``git status --porcelain=v2 --branch`` answers all of it: the commit,
    whether anything changed, and whether the manifest did; otherwise (git pointed elsewhere by the
    environment) ``rev-parse`` says the top first."""
    import subprocess

    folder = os.path.dirname(manifest)

    def start(*args: str) -> subprocess.Popen | None:
        try:
            # paths come raw with -z: bytes that are not UTF-8 stay as os.fsdecode would give them.
            # --no-optional-locks: a status refreshes the index and writes it back, under index.lock, when a
            # file's stat changed; a run asking beside the user's own git command would make that command
            # fail on the lock, and the index rewritten changes what the cache of a dirty answer keys on
            return subprocess.Popen(["git", "--no-optional-locks", "-C", folder, *args], stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL,
                                    text=True, errors="surrogateescape")
        except OSError:
            return None

    def result(proc: subprocess.Popen | None, strip: bool = True) -> str | None:
        if proc is None:
            return None
        try:
            stdout, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return None
        return (stdout.strip() if strip else stdout) if proc.returncode == 0 else None

    if top is not None:
        return _status_v2(result(start("status", "--porcelain=v2", "--branch", "-z"), strip=False), manifest, top)
    # four questions in two rounds of processes run side by side: a run pays for git once per round
    head = result(start("rev-parse", "HEAD", "--show-toplevel"))
    if not (head and len(head.splitlines()) == 2):
        return None
    commit, top = head.splitlines()
    status, mine = start("status", "--porcelain"), start("status", "--porcelain", "--", manifest)
    status_text, mine_text = result(status), result(mine)
    return {"commit": commit, "dirty": bool(status_text), "manifest_dirty": bool(mine_text),
            "path": os.path.relpath(manifest, top or folder)}


def _status_v2(text: str | None, manifest: str, top: str) -> dict[str, Any] | None:
    """The ``git`` entry from ``git status --porcelain=v2 --branch -z``'s output (paths from the top of the work
    tree; an untracked folder is one entry ending in ``/``); None for a repository without a commit.

    >>> out = chr(0).join(["# branch.oid 2092", "# branch.head main", "? new/", ""])
    >>> _status_v2(out, "/r/new/m.yaml", "/r")
    {'commit': '2092', 'dirty': True, 'manifest_dirty': True, 'path': 'new/m.yaml'}
    >>> _status_v2("# branch.oid 2092" + chr(0), "/r/m.yaml", "/r")["dirty"]
    False
    >>> _status_v2("# branch.oid (initial)" + chr(0), "/r/m.yaml", "/r") is None
    True
    """
    if text is None:
        return None
    commit, changed = None, []
    entries = iter(text.split("\0"))
    for entry in entries:
        if entry.startswith("# branch.oid "):
            commit = entry[len("# branch.oid "):]
        elif not entry or entry.startswith("#"):
            continue
        elif entry[0] == "1":
            changed.append(entry.split(" ", 8)[-1])
        elif entry[0] == "2":  # a rename or copy: its new path, then (the next entry) where it came from
            changed.append(entry.split(" ", 9)[-1])
            changed.append(next(entries, ""))
        elif entry[0] == "u":
            changed.append(entry.split(" ", 10)[-1])
        elif entry[0] in "?!":
            changed.append(entry[2:])
    if commit is None or commit == "(initial)":
        return None
    path = os.path.relpath(manifest, top)
    mine = path.replace(os.sep, "/")
    return {"commit": commit, "dirty": bool(changed),
            "manifest_dirty": any(c == mine or (c.endswith("/") and mine.startswith(c)) for c in changed),
            "path": path}
