"""Loading: YAML text -> a :class:`Document`, plain data that knows where each value was written.

``load`` parses YAML with PyYAML's safe composer and keeps, for every
value, where it was written: a :class:`Document` is the plain data tree
(dicts, lists, scalars) plus ``marks``, a table from a value's *path*
(the tuple of keys and indexes leading to it) to its :class:`Origin`, and
``key_marks`` for the keys of mappings. Later passes never look at YAML
again; they look up a path. Recording a mark for each of a million values
costs more than parsing them, so the happy path builds the tree alone
and the marks are recovered from the text when an error or warning first
needs one (see :class:`Document`); anything unusual (a non-string or
duplicate key, a merge key, a constructor error, the size and depth
limits) goes straight to the precise build, which alone reports problems.

Examples
--------
>>> doc = loads("version: 1\\nname: demo\\n", "demo.yaml")
>>> doc.value["name"], str(doc.at(("name",)))
('demo', 'demo.yaml:2:7')
"""

from __future__ import annotations

import contextlib
import gc
import os
from typing import Any, Mapping

import yaml

from hetflow.engine.errors import Diagnostic, ManifestError, Origin

__all__ = ["Document", "load", "loads", "gc_paused", "MAX_VALUES", "MAX_DEPTH"]

Path = tuple  # a value's position in the tree: keys and list indexes

MAX_VALUES = 2_000_000
MAX_DEPTH = 64

_MAP, _SEQ, _SCALAR = yaml.MappingNode, yaml.SequenceNode, yaml.ScalarNode

# libyaml's parser when PyYAML was built with it: same nodes and marks, ten times faster.
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_SafeLoader):  # type: ignore[misc, valid-type]
    """The safe loader, with its tag resolution said faster.

    The composer asks ``resolve`` for the tag of every node: PyYAML looks
    up the implicit resolvers of the scalar's first character, joins two
    lists and tries each regular expression, in Python, for each of a
    million nodes. Here the joined lists are made once per first
    character, from the same table, and tried in the same order; the
    safe loader has no path resolvers, so the rest of ``resolve`` is its
    defaults.
    """

    _by_first = {first: tuple(rs) + tuple(_SafeLoader.yaml_implicit_resolvers.get(None, ()))
                 for first, rs in _SafeLoader.yaml_implicit_resolvers.items() if first is not None}
    _wildcard = tuple(_SafeLoader.yaml_implicit_resolvers.get(None, ()))

    def resolve(self, kind, value, implicit):  # noqa: ANN001, ANN201 - PyYAML's signature
        if self.yaml_path_resolvers:
            return super().resolve(kind, value, implicit)
        if kind is _SCALAR:
            if implicit[0]:
                for tag, regexp in self._by_first.get(value[:1], self._wildcard):
                    if regexp.match(value):
                        return tag
            return self.DEFAULT_SCALAR_TAG
        return self.DEFAULT_SEQUENCE_TAG if kind is _SEQ else self.DEFAULT_MAPPING_TAG

_STR_TAG = "tag:yaml.org,2002:str"


class Document:
    """A parsed YAML file: plain data plus the origin of every value.

    ``marks`` maps a value's path to its :class:`Origin` and ``key_marks``
    a mapping key's path to the key's. A document loaded from text keeps
    the text instead of the marks, and :meth:`at` and :meth:`key_at` hand
    out pending origins. The first one asked for its position parses the
    text again into YAML nodes, which the document then keeps: each
    pending origin walks them along its path (a mapping's keys indexed
    once), so a hundred thousand positions cost one parse, not a mark
    for every value. ``marks`` itself is built in full only when read. A
    manifest that is valid never pays for its positions; one with an
    error pays once.
    """

    __slots__ = ("file", "value", "_marks", "_key_marks", "text", "_root", "_index")

    def __init__(self, file: str, value: Any, marks: Mapping[Path, Origin] | None = None,
                 key_marks: Mapping[Path, Origin] | None = None, *, text: str | None = None) -> None:
        self.file = file
        self.value = value
        self.text = text
        if marks is None and text is None:
            marks, key_marks = {}, {}
        self._marks = marks
        self._key_marks = key_marks if key_marks is not None else ({} if marks is not None else None)
        self._root: yaml.Node | None = None
        self._index: dict[int, dict[str, tuple[yaml.Node, yaml.Node]]] = {}

    def _find(self, path: Path, is_key: bool) -> Origin:
        """What ``key_at(path)`` (``is_key``) or ``at(path)`` would say once the marks are known."""
        if self._marks is not None:
            return self.key_at(path) if is_key else self.at(path)
        if self._root is None:
            with gc_paused():
                self._root = _compose(self.text or "", self.file)[1]
        node, key_node, depth = self._root, None, 0
        for part in path:
            if node.__class__ is _MAP and isinstance(part, str):
                index = self._index.get(id(node))
                if index is None:
                    # only documents the fast build accepted get here: every key a plain string, none repeated
                    index = self._index[id(node)] = {k.value: (k, v) for k, v in node.value}
                found = index.get(part)
            elif node.__class__ is _SEQ and isinstance(part, int) and 0 <= part < len(node.value):
                found = (None, node.value[part])
            else:
                found = None
            if found is None:
                break
            (key_node, node), depth = found, depth + 1
        if is_key and depth == len(path) and key_node is not None:
            return _origin(self.file, key_node.start_mark)
        return _origin(self.file, node.start_mark)

    def _recover(self) -> None:
        with gc_paused():
            loader, root = _compose(self.text or "", self.file)
            precise = _precise(loader, root, self.file, self.text)
        self._marks, self._key_marks = precise.marks, precise.key_marks

    @property
    def marks(self) -> Mapping[Path, Origin]:
        if self._marks is None:
            self._recover()
        return self._marks

    @property
    def key_marks(self) -> Mapping[Path, Origin]:
        if self._key_marks is None:
            self._recover()
        return self._key_marks

    def at(self, path: Path) -> Origin:
        """Origin of the value at ``path``, or of its nearest written ancestor."""
        path = tuple(path)
        if self._marks is None:
            return _Unresolved(self, path, False)
        return self._value_origin(path)

    def _value_origin(self, path: Path) -> Origin:
        marks = self.marks
        while path not in marks and path:
            path = path[:-1]
        return marks.get(path, Origin(self.file, 1, 1))

    def key_at(self, path: Path) -> Origin:
        """Origin of the key naming the value at ``path``."""
        path = tuple(path)
        if self._marks is None:
            return _Unresolved(self, path, True)
        return self._key_marks.get(path) or self._value_origin(path)


class _Unresolved(Origin):
    """The origin of a path in a document whose marks are not known yet (one object, no closure:
    a large manifest hands out hundreds of thousands of these)."""

    __slots__ = ("_doc", "_path", "_is_key")

    def __init__(self, doc: Document, path: Path, is_key: bool) -> None:
        self.file, self._line, self._col = doc.file, None, None
        self._doc, self._path, self._is_key = doc, path, is_key

    def _resolve(self) -> None:
        found = self._doc._find(self._path, self._is_key)
        self._line, self._col = found.line, found.col
        self._doc = None


def _origin(file: str, mark: yaml.Mark | None) -> Origin:
    if mark is None:
        return Origin(file, 1, 1)
    return Origin(file, mark.line + 1, mark.column + 1)


@contextlib.contextmanager
def gc_paused():
    """Cyclic GC off for a pass that allocates millions of small acyclic objects (nodes, stages,
    plan entries): collections would walk them again and again and free nothing.

    On the way out the survivors move straight to the oldest generation
    (``gc.freeze`` then ``gc.unfreeze``: two list splices), so the first
    young collection after the pass does not walk all of them once more;
    they stay collectable like any long-lived object. A process that has
    frozen objects of its own (before forking workers, say) keeps them
    frozen: there the survivors are left where they are.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()



def loads(text: str, file: str = "<string>") -> Document:
    """Parse YAML text into a :class:`Document`; raises :class:`ManifestError`."""
    with gc_paused():
        return _loads(text, file)


class _Decline(Exception):
    """The fast build met something that only the precise build handles or reports."""


def _loads(text: str, file: str) -> Document:
    loader, root = _compose(text, file)
    try:
        value = _fast_build(loader, root, 0, [1])
    except (_Decline, yaml.YAMLError):
        # a constructor that raised leaves its node marked as under construction
        loader.constructed_objects, loader.recursive_objects, loader.deep_construct = {}, {}, False
        return _precise(loader, root, file, text)
    return Document(file, value, text=text)


def _compose(text: str, file: str) -> tuple[Any, yaml.Node]:
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
    except RecursionError:
        raise ManifestError([Diagnostic(Origin(file, 1, 1), f"the document has nesting deeper than {MAX_DEPTH} levels")]) from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        what = e.problem or "invalid YAML"
        if e.context:
            started = ""
            if e.context_mark is not None and mark is not None and e.context_mark.line != mark.line:
                started = f" (opened at line {e.context_mark.line + 1}, column {e.context_mark.column + 1})"
            what = f"{e.context}{started}: {what}"
        raise ManifestError([Diagnostic(_origin(file, mark), f"YAML syntax: {what}")]) from None
    except yaml.YAMLError as e:
        raise ManifestError([Diagnostic(Origin(file, 1, 1), f"YAML: {e}")]) from None
    finally:
        loader.dispose()
    if root is None:
        raise ManifestError([Diagnostic(Origin(file, 1, 1), "the file is empty; a manifest is a YAML mapping")])
    return loader, root


def _fast_build(loader: Any, node: yaml.Node, depth: int, size: list[int]) -> Any:
    """The plain tree of ``node`` without marks, or :class:`_Decline`.

    It returns exactly what :func:`_precise` would, and declines wherever
    :func:`_precise` would report a problem or do more than construct:
    a key that is not a plain string (a merge key among them), a duplicate
    key, the value or depth limits. ``size`` counts values as
    :func:`_precise` does, aliases expanded.
    """
    cls = node.__class__
    if cls is _SCALAR:
        return node.value if node.tag == _STR_TAG else loader.construct_object(node, deep=True)
    items = node.value
    size[0] += len(items)
    if depth >= MAX_DEPTH or size[0] > MAX_VALUES:
        raise _Decline
    if cls is _MAP:
        out: dict[str, Any] = {}
        for key_node, value_node in items:
            if key_node.__class__ is not _SCALAR or key_node.tag != _STR_TAG:
                raise _Decline
            key = key_node.value
            if key in out:
                raise _Decline
            if value_node.__class__ is _SCALAR and value_node.tag == _STR_TAG:
                out[key] = value_node.value
            else:
                out[key] = _fast_build(loader, value_node, depth + 1, size)
        return out
    return [_fast_build(loader, item, depth + 1, size) for item in items]


def _precise(loader: Any, root: yaml.Node, file: str, text: str | None) -> Document:
    """The plain tree with the origin of every value and key; raises :class:`ManifestError`."""
    marks: dict[Path, Origin] = {}
    key_marks: dict[Path, Origin] = {}
    problems: list[Diagnostic] = []

    built = [0]

    def build(node: yaml.Node, path: Path) -> Any:
        # Aliases are expanded into the plain tree, so a few lines can name billions of values
        # (an alias bomb); a manifest is never that large or that deep.
        built[0] += 1
        if built[0] > MAX_VALUES or len(path) > MAX_DEPTH:
            what = (f"more than {MAX_VALUES:,} values once aliases are expanded" if built[0] > MAX_VALUES
                    else f"nesting deeper than {MAX_DEPTH} levels")
            raise ManifestError([Diagnostic(_origin(file, node.start_mark), f"the document has {what}")])
        marks[path] = _origin(file, node.start_mark)
        if isinstance(node, yaml.MappingNode):
            out: dict[str, Any] = {}
            loader.flatten_mapping(node)
            for key_node, value_node in node.value:
                key = loader.construct_object(key_node, deep=True)
                where = _origin(file, key_node.start_mark)
                if not isinstance(key, str):
                    problems.append(Diagnostic(where, f"keys must be strings, found {key!r}"))
                    key = str(key)
                if key in out:
                    problems.append(Diagnostic(where, f"duplicate key {key!r}"))
                key_marks[path + (key,)] = where
                out[key] = build(value_node, path + (key,))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [build(item, path + (i,)) for i, item in enumerate(node.value)]
        if node.tag == _STR_TAG:
            # What SafeConstructor returns for a str scalar, without its per-object bookkeeping.
            return node.value
        try:
            return loader.construct_object(node, deep=True)
        except yaml.constructor.ConstructorError as e:
            problems.append(Diagnostic(_origin(file, node.start_mark), f"YAML: {e.problem}"))
            return None

    value = build(root, ())
    if problems:
        raise ManifestError(problems)
    return Document(file, value, marks, key_marks, text=text)


def load(file: str | os.PathLike) -> Document:
    """Read and parse a manifest file."""
    name = os.fspath(file)
    try:
        with open(name, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise ManifestError([Diagnostic(None, f"{name}: no such file")]) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ManifestError([Diagnostic(None, f"{name}: cannot read: {e}")]) from None
    return loads(text, name)
