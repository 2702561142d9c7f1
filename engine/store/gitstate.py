"""The git state a run's record names: the commit, whether the work tree is dirty, whether the manifest is.

Asked of ``git`` itself (``git --no-optional-locks status --porcelain=v2``),
and answered again from this process's memory while nothing it depends on
has changed (:func:`state`).
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

__all__ = ["state", "key", "forget"]

# manifest path -> (its key(), the record's ``git`` entry of a dirty tree): the latest key per manifest only
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
    return (folder, gitdir, common, head, _stat_key(os.path.join(gitdir, "HEAD")), ref_file and _stat_key(ref_file),
            _stat_key(os.path.join(common, "packed-refs")), _stat_key(os.path.join(gitdir, "index")),
            _stat_key(manifest))


def state(manifest_file: str) -> dict[str, Any] | None:
    """The record's ``git`` entry for the manifest: ``{commit, dirty, manifest_dirty, path}``, or None outside
    a repository (or in one without a commit).

    Asked of git (one ``status`` process, 5-8 ms on 2 cores, more than a
    small run's own work) once for each state of what can change the
    answer, and answered from this process's memory while that state
    holds:

    * the :func:`key`: the repository's ``HEAD``, the branch it names,
      ``packed-refs``, the index and the manifest file, each by its
      ``stat``. A commit, a checkout, ``git add`` or a reset rewrites one
      of them; an edit of the manifest changes its own.
    * from the second question under one key, also the work tree
      itself (:class:`_Tree`): on Linux's local file systems an inotify
      watch on every folder git looks into (all but ``.git`` and ignored
      ones), which the kernel tells of any file in it written, made,
      removed or renamed; elsewhere the ``stat`` of every tracked file
      and of those folders, by the fields no write leaves unchanged
      (``st_ctime_ns`` and the inode). A question is then one ``read`` of
      the watch, or one ``stat`` a path.

    A tree that cannot be watched (more than a few thousand folders, or a
    submodule, whose inside shows in none of them) is asked again while
    it is clean, and answered from the key while it is dirty: a dirty tree
    stays dirty until the key changes. The one way that can be wrong is
    conservative: such a tree cleaned by hand without touching the index
    (an untracked file deleted) is still called dirty until the index
    changes. Without a ``.git`` above the manifest (an installed example,
    a temporary folder), no process is started at all.
    """
    manifest = os.path.abspath(manifest_file)
    now = key(manifest)
    if now == ():
        return None
    if now is None:
        return _ask_git(manifest)
    # one question at a time: a watch's events are read once, and two runs of a sweep asking together
    # would both pay git where the second can take the first's answer
    with _LOCK:
        top, repository = now[0], now[:-1]
        watched = _WATCHED.pop(top, None)
        if watched is not None:
            if watched[0] == repository and watched[1].holds():
                _WATCHED[top] = watched
                return _answer(watched[2], watched[3], manifest, top)
            watched[1].close()
        tree = before = None
        if _SEEN.pop(top, None) == repository:
            # asked once under this key: worth watching the tree, so the next answers come from it
            tree = _Tree.read(now)
            if tree is None:
                _UNWATCHABLE[top] = repository
            else:
                before = tree.before
        if tree is None:
            cached = _GIT_CACHE.get(manifest)
            if cached is not None and cached[0] == now:
                return dict(cached[1])
        status = _ask_status(top)
        # the key is read again after git ran; only an answer whose key git left as it was is kept
        after = key(manifest)
        _GIT_CACHE.pop(manifest, None)
        answer = None if status is None else _answer(*status, manifest, top)
        if answer is not None and after == now:
            if tree is not None and tree.settled(before):
                tree.seen = before
                _WATCHED[top] = (repository, tree, *status)
                tree = None
                while len(_WATCHED) > WATCHED_TREES:  # each watch is one of the user's inotify instances
                    _WATCHED.pop(next(iter(_WATCHED)))[1].close()
            else:
                if _UNWATCHABLE.get(top) != repository:
                    _SEEN[top] = repository
                if answer["dirty"]:
                    # a dirty tree stays dirty until the key changes (or, conservatively, is cleaned by hand)
                    _GIT_CACHE[manifest] = (now, dict(answer))
        if tree is not None:
            tree.close()
        return answer


def forget() -> None:
    """Let go of every answer kept and every watch: the next question of each tree is asked of git."""
    with _LOCK:
        _forget()


def _forget() -> None:
    for watched in _WATCHED.values():
        watched[1].close()
    for memo in (_WATCHED, _SEEN, _UNWATCHABLE, _GIT_CACHE):
        memo.clear()


def _forget_after_fork() -> None:
    # a forked child shares its parent's watches (reading one would take the parent's events) and lock
    global _LOCK
    _LOCK = threading.Lock()
    _forget()


# work tree's top -> (its key, less the manifest's stat; its _Tree; the commit; the changed paths): git's
# answer, kept while the key and the tree hold; the latest few trees only
_WATCHED: dict[str, tuple[tuple, "_Tree", str, tuple[str, ...]]] = {}
WATCHED_TREES = 8
# work tree's top -> the key under which git was last asked, before its tree was watched
_SEEN: dict[str, tuple] = {}
# work tree's top -> a key under which its tree could not be watched (too big, a submodule, git gone)
_UNWATCHABLE: dict[str, tuple] = {}
# the most files and folders whose stat each run compares: each costs about 2 us here against git's 1 us
# (its start is 4-5 ms), so past a few thousand asking git again is as cheap
STAT_LIMIT = 4000
# the most folders watched by inotify (each takes one of the user's watches, 8,192 on older kernels), and
# the most tracked files read to find them
WATCH_LIMIT = 4096
FILES_LIMIT = 200_000
# a file changed this recently may change again within the same timestamp (the kernel's clock for them
# ticks every few ms; some file systems keep seconds): such a tree is asked again rather than trusted
SETTLE_NS = 2_000_000_000


class _Tree:
    """What says whether a work tree still answers as it did when git was asked.

    Every tracked file, every folder of the work tree that git looks into
    for untracked files (all but ``.git``, ignored folders, and folders git
    lists whole as untracked, whose files change nothing it says while it
    holds any: a runs folder nobody ignored fills as runs go), and the
    files that say what is ignored or how git reads the tree (the
    repository's ``info/exclude`` and ``config``, the user's and the
    system's configuration and excludes). A tree with a submodule is not
    watched: what changes inside one shows in none of these.
    """

    def __init__(self, paths: list[bytes], watch: int | None) -> None:
        self.paths = paths
        self.watch = watch
        self.before: list | None = None  # the snapshot taken before git was asked
        self.seen: list | None = None  # the one a clean answer holds for

    def close(self) -> None:
        if self.watch is not None:
            os.close(self.watch)
            self.watch = None

    @classmethod
    def read(cls, now: tuple) -> "_Tree | None":
        top, gitdir, common = now[0], now[1], now[2]
        # four questions at once: what is tracked, what is ignored, which folders git lists as untracked
        # (one entry each, whatever they hold: a run's folders made in a runs folder nobody ignored change
        # nothing), and the user's own excludes file
        outs = [_result(proc) for proc in (
            _start(top, "ls-files", "-z", "--stage", text=False),
            _start(top, "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory", text=False),
            _start(top, "ls-files", "-z", "--others", "--exclude-standard", "--directory", "--no-empty-directory",
                   text=False),
            _start(top, "config", "--path", "--get", "core.excludesFile", text=False))]
        if outs[0] is None or outs[1] is None or outs[2] is None:
            return None
        btop = os.fsencode(top)
        paths: list[bytes] = []
        for entry in outs[0].split(b"\0"):
            if not entry:
                continue
            meta, _, path = entry.partition(b"\t")
            if meta.startswith(b"160000"):  # a submodule
                return None
            paths.append(os.path.join(btop, path))
            if len(paths) > FILES_LIMIT:
                return None
        skip = {os.path.join(btop, p.rstrip(b"/")) for p in outs[1].split(b"\0") + outs[2].split(b"\0")
                if p.endswith(b"/")}
        skip.add(os.path.join(btop, b".git"))
        # each folder is watched, or its stat taken, before it is read: a file made in it after its read
        # shows, and so does one made before (the read finds it, and git after it)
        watch = _WATCHES.start(btop)
        folders, seen = [btop], []
        try:
            for folder in folders:
                if watch is not None and not _WATCHES.add(watch, folder):
                    os.close(watch)
                    watch = None
                seen.append(_stat(folder))
                with os.scandir(folder) as entries:
                    for e in entries:
                        if e.is_dir(follow_symlinks=False) and e.path not in skip:
                            folders.append(e.path)
                if len(folders) > WATCH_LIMIT or (watch is None and len(folders) + len(paths) > STAT_LIMIT):
                    raise OSError("too many folders to watch")
            # a tracked file inside an ignored folder (added with --force) is in no folder the walk kept
            for folder in sorted({os.path.dirname(p) for p in paths} - set(folders)):
                if watch is not None and not _WATCHES.add(watch, folder):
                    os.close(watch)
                    watch = None
                folders.append(folder)
                seen.append(_stat(folder))
        except OSError:
            if watch is not None:
                os.close(watch)
            return None
        home = os.path.expanduser("~")
        config_home = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
        settings = [os.path.join(gitdir, "info", "exclude"), os.path.join(common, "info", "exclude"),
                    os.path.join(gitdir, "config"), os.path.join(common, "config"), os.path.join(home, ".gitconfig"),
                    os.path.join(config_home, "git", "config"), os.path.join(config_home, "git", "ignore"),
                    "/etc/gitconfig"]
        if outs[3]:
            settings.append(os.fsdecode(outs[3].strip()))
        settings_b = [os.fsencode(p) for p in settings]
        if watch is not None:
            # with a watch, only the settings are stat'ed on each run
            tree = cls(settings_b, watch)
            tree.before = tree.snapshot()
            return tree
        if len(paths) + len(folders) + len(settings_b) > STAT_LIMIT:
            return None
        tree = cls(paths + settings_b + folders, None)
        tree.before = [_stat(p) for p in paths + settings_b] + seen
        return tree

    def snapshot(self) -> list:
        lstat = os.lstat
        out = []
        append = out.append
        for path in self.paths:
            try:
                st = lstat(path)
            except OSError:
                append(None)
                continue
            append((st.st_ctime_ns, st.st_ino))
        return out


    def settled(self, before: list | None) -> bool:
        """True where the snapshot taken before git ran is the one after it, and nothing in it changed lately
        (with a watch: nothing happened in the tree since it was armed, before git ran)."""
        if before is None or self.snapshot() != before:
            return False
        if self.watch is not None:
            return _WATCHES.quiet(self.watch)
        import time

        newest = max((seen[0] for seen in before if seen is not None), default=0)
        return newest < time.time_ns() - SETTLE_NS

    def holds(self) -> bool:
        if self.watch is not None and not _WATCHES.quiet(self.watch):
            return False
        return self.snapshot() == self.seen


def _stat(path: bytes) -> tuple | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_ctime_ns, st.st_ino


class _Inotify:
    """Linux's inotify, through libc: one watch on every folder of a clean tree, which the kernel tells of any
    file of it written, its metadata changed, or one made, removed or renamed in it. Asking whether anything
    happened is one non-blocking ``read`` (a few us), where a ``stat`` of each path costs about 2 us a path.

    Used only where the kernel's events are the whole truth: a local file system (not NFS, SMB or FUSE,
    where another host's writes raise no event) with every folder on the tree's own mount."""

    # IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
    # | IN_DELETE_SELF | IN_MOVE_SELF, on folders only (IN_ONLYDIR), not through a link (IN_DONT_FOLLOW)
    MASK = 0x2 | 0x4 | 0x8 | 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800 | 0x01000000 | 0x02000000
    LOCAL = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "overlay", "zfs", "f2fs", "bcachefs",
                       "jfs", "reiserfs", "nilfs2"})

    def __init__(self) -> None:
        self.libc: Any = None
        self.device = 0
        self.broken = not sys.platform.startswith("linux")

    def _load(self) -> Any:
        if self.libc is None and not self.broken:
            try:
                import ctypes

                libc = ctypes.CDLL(None, use_errno=True)
                libc.inotify_init1.argtypes = [ctypes.c_int]
                libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
                self.libc = libc
            except (OSError, AttributeError):
                self.broken = True
        return self.libc

    def start(self, top: bytes) -> int | None:
        """A new inotify instance for the tree at ``top``, or None where events would not be the whole truth."""
        if self.broken or self._load() is None or _mount_type(os.fsdecode(top)) not in self.LOCAL:
            return None
        fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            return None
        try:
            self.device = os.stat(top).st_dev
        except OSError:
            os.close(fd)
            return None
        return fd

    def add(self, fd: int, folder: bytes) -> bool:
        """Watch ``folder``; False where it cannot be (another mount inside the tree, out of watches)."""
        try:
            if os.lstat(folder).st_dev != self.device:
                return False
        except OSError:
            return False
        return self.libc.inotify_add_watch(fd, folder, self.MASK) >= 0

    @staticmethod
    def quiet(fd: int) -> bool:
        try:
            return not os.read(fd, 65536)
        except BlockingIOError:
            return True
        except OSError:
            return False


def _mount_type(path: str) -> str | None:
    """The file system type of the mount holding ``path``, from ``/proc/self/mountinfo``."""
    real = os.path.realpath(path)
    best, kind = "", None
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                fields = line.split()
                point = fields[4].replace("\\040", " ")
                if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
                    best, kind = point, fields[fields.index("-") + 1]
    except (OSError, ValueError, IndexError):
        return None
    return kind


_WATCHES = _Inotify()
_LOCK = threading.Lock()
os.register_at_fork(after_in_child=_forget_after_fork)


def _ask_git(manifest: str, top: str | None = None) -> dict[str, Any] | None:
    """The record's ``git`` entry, asked of git. Where the work tree's top is known (the folder holding the
    ``.git`` above the manifest), one ``git status --porcelain=v2 --branch`` answers all of it: the commit,
    whether anything changed, and whether the manifest did; otherwise (git pointed elsewhere by the
    environment) ``rev-parse`` says the top first."""
    folder = os.path.dirname(manifest)

    def start(*args: str) -> Any:
        return _start(folder, *args)

    def result(proc: Any) -> str | None:
        out = _result(proc)
        return None if out is None else out.strip()

    if top is not None:
        status = _ask_status(top)
        return None if status is None else _answer(*status, manifest, top)
    # four questions in two rounds of processes run side by side: a run pays for git once per round
    head = result(start("rev-parse", "HEAD", "--show-toplevel"))
    if not (head and len(head.splitlines()) == 2):
        return None
    commit, top = head.splitlines()
    status, mine = start("status", "--porcelain"), start("status", "--porcelain", "--", manifest)
    status_text, mine_text = result(status), result(mine)
    return {"commit": commit, "dirty": bool(status_text), "manifest_dirty": bool(mine_text),
            "path": os.path.relpath(manifest, top or folder)}


def _ask_status(top: str) -> tuple[str, tuple[str, ...]] | None:
    """``git status`` at the work tree's top: (the commit, the paths it lists), or None."""
    # paths come raw with -z: bytes that are not UTF-8 stay as os.fsdecode would give them
    stdout = _result(_start(top, "status", "--porcelain=v2", "--branch", "-z"))
    return None if stdout is None else _parse_v2(stdout)


def _start(folder: str | bytes, *args: str, text: bool = True) -> Any:
    """A ``git`` process in ``folder`` (its output read by :func:`_result`), or None where git cannot start.

    ``--no-optional-locks``: a status refreshes the index and writes it
    back, under ``index.lock``, when a file's stat changed; a run asking
    beside the user's own git command would make that command fail on the
    lock, and the index rewritten changes what an answer is kept by.
    """
    import subprocess

    try:
        return subprocess.Popen(["git", "--no-optional-locks", "-C", folder, *args], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=text, errors="surrogateescape" if text else None)
    except OSError:
        return None


def _result(proc: Any) -> Any:
    """What ``proc`` (from :func:`_start`) wrote, once it has ended well; None where it did not."""
    import subprocess

    if proc is None:
        return None
    try:
        stdout, _ = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return None
    return stdout if proc.returncode == 0 else None


def _parse_v2(text: str) -> tuple[str, tuple[str, ...]] | None:
    """The commit and the changed paths in ``git status --porcelain=v2 --branch -z``'s output (paths from the
    top of the work tree; an untracked folder is one entry ending in ``/``); None for a repository without
    a commit.

    >>> _parse_v2(chr(0).join(["# branch.oid 2092", "# branch.head main", "? new/", ""]))
    ('2092', ('new/',))
    >>> _parse_v2("# branch.oid (initial)" + chr(0)) is None
    True
    """
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
    return commit, tuple(changed)


def _answer(commit: str, changed: tuple[str, ...], manifest: str, top: str) -> dict[str, Any]:
    """The ``git`` entry for ``manifest`` in the work tree at ``top``, from what its status listed.

    >>> _answer("2092", ("new/",), "/r/new/m.yaml", "/r")
    {'commit': '2092', 'dirty': True, 'manifest_dirty': True, 'path': 'new/m.yaml'}
    >>> _answer("2092", (), "/r/m.yaml", "/r")["dirty"]
    False
    """
    path = os.path.relpath(manifest, top)
    mine = path.replace(os.sep, "/")
    return {"commit": commit, "dirty": bool(changed),
            "manifest_dirty": any(c == mine or (c.endswith("/") and mine.startswith(c)) for c in changed),
            "path": path}
