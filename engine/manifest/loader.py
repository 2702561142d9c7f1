"""Loading: YAML text -> a :class:`Document`, plain data that knows where each value was written.

The value of a document is exactly what ``yaml.safe_load`` returns for
the same text, or the document is refused where ``yaml.safe_load``
refuses it, at ``FILE:LINE:COL``, with one difference: a number written
with an exponent and no dot or no exponent sign (``1e-5``, ``2E3``) is a
float, as YAML 1.2 reads it, not a string (:class:`SafeLoader`). Two refusals go beyond it, both
resource limits: more than ``MAX_VALUES`` values once aliases are
expanded (an alias bomb; a recursive alias expands without end) and
nesting deeper than ``MAX_DEPTH``. What YAML allows but a manifest does
not (a key that is not a string, a key written twice, an empty file) is
kept in ``Document.problems``, which validation reports first; the value
keeps the last of two equal keys, as PyYAML's does.

Every value remembers where it was written: a :class:`Document` is the
plain data tree (dicts, lists, scalars) plus ``marks``, a table from a
value's *path* (the tuple of keys and indexes leading to it) to its
:class:`Origin`, and ``key_marks`` for the keys of mappings. Later passes
never look at YAML again; they look up a path. Recording a mark for each
of a million values costs more than parsing them, so the happy path
builds the tree alone and the marks are recovered from the text when an
error or warning first needs one (see :class:`Document`); anything
unusual (a non-string or duplicate key, a merge key, a tag on a mapping
or sequence, a constructor error, the size and depth limits) goes
straight to the precise build, which alone reports problems. Where
libyaml parses, the happy path builds the tree from its events without
composing YAML nodes (most of a large manifest's load was composing);
an anchor, an alias, a tag or a ``?`` in a plain scalar of a flow
collection sends the text to the node path.

Parsing: libyaml (PyYAML's C parser) is ten times faster than PyYAML's
own, and differs from it at the edges: a tab after ``key:``, a byte
order mark at the start of a later line, some error positions, and a
few constructs it takes where PyYAML refuses them or reads them
otherwise (a directive, ``>#``, a lone ``!`` tag, a tag running into a
flow indicator, a ``?`` inside a plain scalar in a flow collection). So
libyaml parses only text made of printable ASCII and newlines without
those constructs, where the two agree (:func:`_libyaml_parses`), and a
document it refuses is parsed again by PyYAML's own parser, whose
answer stands; any other text goes to PyYAML's parser, the one
``yaml.safe_load`` uses. Both resolve tags with the same table and
build values with the same ``SafeConstructor``. The official YAML test
suite holds the loader to ``yaml.safe_load``'s values and refusals
(``tests/test_yaml_suite.py``).

Examples
--------
>>> doc = loads("version: 1\\nname: demo\\n", "demo.yaml")
>>> doc.value["name"], str(doc.at(("name",)))
('demo', 'demo.yaml:2:7')
>>> loads("a: !!python/object:os.system {}\\n", "bad.yaml")
Traceback (most recent call last):
  ...
hetflow.engine.errors.ManifestError: bad.yaml:1:4: error: YAML: could not determine a constructor for the tag 'tag:yaml.org,2002:python/object:os.system'
"""

from __future__ import annotations

import os
import stat
import threading
import re
from typing import Any, Callable, Mapping

import yaml

from hetflow.engine.heap import gc_paused

from hetflow.engine.errors import Diagnostic, ManifestError, Origin

__all__ = ["Document", "SafeLoader", "SafeDumper", "load", "loads", "dialect_problem", "files_read", "gc_paused",
           "frozen_instance", "MAX_VALUES", "MAX_DEPTH", "not_json", "dates_as_text"]

Path = tuple  # a value's position in the tree: keys and list indexes

MAX_VALUES = 2_000_000
MAX_DEPTH = 64

_MAP, _SEQ, _SCALAR = yaml.MappingNode, yaml.SequenceNode, yaml.ScalarNode

_STR_TAG = "tag:yaml.org,2002:str"
_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_BOOL_TAG, _INT_TAG, _FLOAT_TAG = "tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_BOOLS_12 = frozenset(("true", "True", "TRUE", "false", "False", "FALSE"))
_DIALECT_TAGS = frozenset((_BOOL_TAG, _INT_TAG, _FLOAT_TAG))


def _dialect(tag: str, written: str, value: Any) -> str | None:
    """Where YAML 1.1, which the loader reads (PyYAML's), and YAML 1.2, which editors' language servers read,
    make different things of the plain scalar ``written`` (``value`` to YAML 1.1): what to write instead.

    A manifest means one thing to both: ``yes``, ``off``, ``1_000``, ``1:30`` (90, base 60), ``0b101``,
    ``017`` (octal 15) and ``-0x1f`` are numbers or booleans to YAML 1.1 alone.

    >>> _dialect(_BOOL_TAG, "yes", True)
    "'yes' is the boolean true to YAML 1.1, which hetflow reads, and text to YAML 1.2, which editors read: write true, or quote it ('yes') for the text"
    >>> _dialect(_INT_TAG, "1:30", 90), _dialect(_INT_TAG, "017", 15) is not None, _dialect(_INT_TAG, "0x1f", 31)
    ("'1:30' is the number 90 to YAML 1.1, which hetflow reads, and text or another number to YAML 1.2, which editors read: write 90, or quote it ('1:30') for the text", True, None)
    """
    if tag == _BOOL_TAG:
        if written in _BOOLS_12:
            return None
        said = "true" if value else "false"
        return (f"{written!r} is the boolean {said} to YAML 1.1, which hetflow reads, and text to YAML 1.2, which "
                f"editors read: write {said}, or quote it ({written!r}) for the text")
    if tag != _INT_TAG and tag != _FLOAT_TAG:
        return None
    body = written.lstrip("+-")
    if not ("_" in written or ":" in written or body[:2] == "0b" or (body[:2] == "0x" and body != written)
            or (tag == _INT_TAG and len(body) > 1 and body[0] == "0" and body[1].isdigit() and int(written, 10) != value)):
        return None
    return (f"{written!r} is the number {value} to YAML 1.1, which hetflow reads, and text or another number to "
            f"YAML 1.2, which editors read: write {value}, or quote it ({written!r}) for the text")


def dialect_problem(written: str, value: Any) -> str | None:
    """:func:`_dialect` of the plain scalar ``written``, which YAML 1.1 read as ``value`` (a ``-p`` value's text)."""
    if not isinstance(value, (bool, int, float)):
        return None
    return _dialect(_BOOL_TAG if isinstance(value, bool) else _INT_TAG if isinstance(value, int) else _FLOAT_TAG,
                    written, value)


def _tagged(node: yaml.Node, text: str | None) -> bool:
    """Whether a scalar node was given its tag in the text (``!!bool yes``): what it is, it was told."""
    if text is None:
        return False
    return "!" in text[node.start_mark.index:node.end_mark.index][:-len(node.value) or None]

# Where libyaml and PyYAML's parser agree: printable ASCII and newlines; no tab, CR, BOM or control character.
_NOT_PLAIN = re.compile(r"[^\n\x20-\x7e]")

# A block scalar's header followed by ``#`` (``>#``, ``|-#``): libyaml reads a comment, PyYAML wants a space first.
_HEADER_THEN_HASH = re.compile(r"[|>][-+0-9]{0,2}#")

# A tag that libyaml reads and PyYAML does not, or reads otherwise: a lone ``!`` (PyYAML resolves the empty
# node it tags to null, libyaml to ''), or one running into a flow indicator (``!!str,``), where libyaml ends
# the tag and PyYAML either keeps the indicator in it or refuses the character.
_ODD_TAG = re.compile(r"!(?<![^ \n\[{,:]!)(?:[^ \n]*[,\[\]{}]|(?=[ \n]|\Z))")
# What stands before a tag on its line: the line's indentation, an indicator, an anchor or a document marker.
_BEFORE_TAG = re.compile(r"(?:^|[-:?,\[{]|&[^ \n]*|---) *\Z", re.M)

# Where a comment starts on a line: ``#`` first or after a space.
_COMMENT = re.compile(r"(?:^| )#")


def _question_in_content(text: str) -> bool:
    """Whether a ``?`` of ``text`` may stand in a plain scalar, not in a comment (``# why?``).

    A ``#`` at the start of a line or after a space starts a comment, or
    stands in a block scalar's text or in a quoted scalar that began on
    an earlier line; a ``?`` after it with no quote between the line's
    start and the ``?`` (none could close that quoted scalar) is in
    none of a flow collection's plain scalars.

    >>> _question_in_content("a: 1  # why?\\n# and?\\n"), _question_in_content("a: [x?]\\n"), _question_in_content("a: '#' [x?]\\n")
    (False, True, True)
    >>> _question_in_content('a: ["one\\n  two #x?", b?c]\\n')
    True
    """
    at = text.find("?")
    while at != -1:
        line = text[text.rfind("\n", 0, at) + 1:at]
        if "'" in line or '"' in line or _COMMENT.search(line) is None:
            return True
        at = text.find("?", at + 1)
    return False


def _libyaml_parses(text: str) -> bool:
    """Whether libyaml may parse ``text``: where it could read the text otherwise than PyYAML's parser, it does not.

    Besides characters beyond printable ASCII (``_NOT_PLAIN``), libyaml
    takes what PyYAML refuses in a few constructs a manifest has no use
    for: a directive (``%YAML 1.1#…``) and a comment right after a block
    scalar's header (``>#``) are found here, and go to PyYAML's parser.
    The other two need the parse: some tags (:func:`_odd_tags`), which
    the event build declines as it declines every tag, and a ``?``
    inside a plain scalar in a flow collection (``[a?b]``, which PyYAML
    reads as a key indicator), which it declines too
    (:func:`_question_in_flow`); :func:`_compose` sends the first to
    PyYAML's parser and looks for the second in libyaml's nodes.

    >>> _libyaml_parses("a: [1, 2]\\n"), _libyaml_parses("%YAML 1.1\\n---\\na: 1\\n"), _libyaml_parses("a: >#\\n  b\\n")
    (True, False, False)
    """
    if _NOT_PLAIN.search(text) is not None:
        return False
    if text.startswith("%") or "\n%" in text:
        return False
    return ("|" not in text and ">" not in text) or _HEADER_THEN_HASH.search(text) is None


def _odd_tags(text: str) -> bool:
    """Whether ``text`` may hold a tag that libyaml reads otherwise than PyYAML (``_ODD_TAG``) where a tag can start.

    A ``!`` inside a word (``Hi!``) or a sentence (``wow ! there``) is no tag.

    >>> _odd_tags("a: !!str 1\\nb: wow ! there\\n"), _odd_tags("a: !\\n"), _odd_tags("{a: !!str, b: 1}\\n"), _odd_tags("- &x !\\n")
    (False, True, True, True)
    """
    if "!" not in text:
        return False
    for found in _ODD_TAG.finditer(text):
        at = found.start()
        if _BEFORE_TAG.search(text, text.rfind("\n", 0, at) + 1, at) is not None:
            return True
    return False


# What PyYAML's reader counts as a line break, for the line of a character it refuses.
_BREAK = re.compile(r"\r\n|[\n\r\x85\u2028\u2029]")

class SafeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that also reads YAML 1.2's exponent floats (``1e-5``, ``1.5e3``), which YAML 1.1 leaves strings.

    >>> yaml.load("[1e-5, 2E3, 1.5e3, 1e, e3, 1.0e-05]", Loader=SafeLoader)
    [1e-05, 2000.0, 1500.0, '1e', 'e3', 1e-05]
    """


class SafeDumper(yaml.SafeDumper):
    """``yaml.SafeDumper`` that quotes a string :class:`SafeLoader` would read as a float (``'1e3'``)."""


_FLOAT_12 = re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$")
for _cls in (SafeLoader, SafeDumper):
    _cls.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789."))

_RESOLVERS = SafeLoader.yaml_implicit_resolvers


class _Resolve:
    """PyYAML's tag resolution, said faster.

    The composer asks ``resolve`` for the tag of every node: PyYAML looks
    up the implicit resolvers of the scalar's first character, joins two
    lists and tries each regular expression, in Python, for each of a
    million nodes. Here the joined lists are made once per first
    character, from the same table, and tried in the same order; the
    safe loader has no path resolvers, so the rest of ``resolve`` is its
    defaults.
    """

    _by_first = {first: tuple(rs) + tuple(_RESOLVERS.get(None, ())) for first, rs in _RESOLVERS.items() if first is not None}
    _wildcard = tuple(_RESOLVERS.get(None, ()))

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


class _PyLoader(_Resolve, SafeLoader):
    """``yaml.safe_load``'s loader: PyYAML's parser."""


# libyaml's parser when PyYAML was built with it: same nodes and marks, ten times faster.
_CLoader = type("_CLoader", (_Resolve, yaml.CSafeLoader), {}) if hasattr(yaml, "CSafeLoader") else None
_CParser = yaml.cyaml.CParser if _CLoader is not None else None

class Document:
    """A parsed YAML file: plain data plus the origin of every value.

    ``marks`` maps a value's path to its :class:`Origin` and ``key_marks``
    a mapping key's path to the key's. A document loaded from text keeps
    the text instead of the marks, and :meth:`at` and :meth:`key_at` hand
    out pending origins. The positions of the top two levels of mappings
    (a stage's key, an executor's) are kept from the first parse, as the
    parser's marks of each key and value: a plan prints every stage's
    origin. Any deeper position parses the text again into YAML nodes,
    which the document then keeps: each pending origin walks them along
    its path (a mapping's keys indexed once), so a hundred thousand
    positions cost one parse, not a mark for every value. ``marks``
    itself is built in full only when read. A manifest that is valid
    never pays for its deeper positions; one with an error pays once.

    ``problems`` holds what YAML allows and a manifest does not (a key
    that is not a string, a key written twice, no document at all);
    validation reports them before anything else. ``libyaml`` says which
    parser read the text first (``True`` libyaml, ``False`` PyYAML's),
    so that reading it again for positions takes the same one unasked.
    """

    __slots__ = ("file", "value", "_marks", "_key_marks", "text", "_root", "_index", "_shallow", "problems", "_libyaml")

    def __init__(self, file: str, value: Any, marks: Mapping[Path, Origin] | None = None,
                 key_marks: Mapping[Path, Origin] | None = None, *, text: str | None = None,
                 problems: tuple[Diagnostic, ...] = (),
                 shallow: Mapping[Path, Mapping[str, tuple[yaml.Mark, yaml.Mark]]] | None = None,
                 libyaml: bool | None = None) -> None:
        self.file = file
        self._libyaml = libyaml
        self.value = value
        self.text = text
        self.problems = problems
        self._shallow = shallow
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
        level = self._shallow.get(path[:-1]) if self._shallow and path else None
        marks = level.get(path[-1]) if level is not None else None
        if marks is not None:
            return _origin(self.file, marks[0] if is_key else marks[1])
        if self._root is None:
            with gc_paused():
                self._root = _compose(self.text or "", self.file, self._libyaml)[1]
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
            loader, root = _compose(self.text or "", self.file, self._libyaml)
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
        if path.__class__ is not tuple:
            path = tuple(path)
        if self._marks is None:
            # a stage's key, an executor's: known from the first parse, so said at once (a plan prints them all)
            level = self._shallow.get(path[:-1]) if self._shallow and path else None
            marks = level.get(path[-1]) if level is not None else None
            if marks is None:
                return _Unresolved(self, path, True)
            mark = marks[0]
            return Origin(self.file, mark.line + 1, mark.column + 1) if mark is not None else Origin(self.file, 1, 1)
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


def frozen_instance(cls: type, values: dict[str, Any]) -> Any:
    """What ``cls(**values)`` makes, for a frozen dataclass ``cls`` without ``__post_init__``, given
    every field that has no default; ``values`` becomes the instance's own ``__dict__``, and a field
    left out reads as its default, the class attribute a dataclass keeps it in.

    A frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``, a call a field; a large manifest makes a
    hundred thousand stages and plan nodes of a dozen fields each.

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Point:
    ...     x: int
    ...     y: int = 0
    >>> frozen_instance(Point, {"x": 1, "y": 2}) == Point(1, 2), frozen_instance(Point, {"x": 1, "y": 2})
    (True, Point(x=1, y=2))
    >>> frozen_instance(Point, {"x": 1}) == Point(1), frozen_instance(Point, {"x": 1})
    (True, Point(x=1, y=0))
    """
    obj = object.__new__(cls)
    object.__setattr__(obj, "__dict__", values)
    return obj


def loads(text: str, file: str = "<string>") -> Document:
    """Parse YAML text into a :class:`Document`; raises :class:`ManifestError`.

    The value is ``yaml.safe_load(text)``'s; see the module's docstring.

    Examples
    --------
    >>> loads("a: &x {b: 1}\\nc:\\n  <<: *x\\n  d: 0o7\\n").value
    {'a': {'b': 1}, 'c': {'b': 1, 'd': '0o7'}}
    >>> [str(d) for d in loads("a: 1\\na: 2\\n", "t.yaml").problems]
    ["t.yaml:2:1: error: duplicate key 'a'"]
    """
    with gc_paused():
        return _loads(text, file)


class _Decline(Exception):
    """The fast build met something that only the precise build handles or reports."""


def _loads(text: str, file: str) -> Document:
    if _CParser is not None and _libyaml_parses(text):
        try:
            value, shallow = _event_build(text)
        except Exception:  # noqa: BLE001 - _Decline, a YAML error or a constructor's: the node path decides and reports
            pass
        else:
            # no tag and no ``?`` in a flow scalar either, or the build would have declined: libyaml's nodes are PyYAML's
            return Document(file, value, text=text, shallow=shallow, libyaml=True)
        loader, root = _compose(text, file)
    else:
        loader, root = _compose(text, file, False)
    if root is None:
        return Document(file, None, problems=(Diagnostic(Origin(file, 1, 1), "the file is empty; a manifest is a YAML mapping"),))
    shallow: dict[Path, dict[str, tuple[yaml.Mark, yaml.Mark]]] = {}
    try:
        value = _fast_build(loader, root, 0, [1], shallow)
    except Exception:  # noqa: BLE001 - _Decline, or whatever SafeConstructor raised: the precise build reports it
        # a constructor that raised leaves its node marked as under construction
        loader.constructed_objects, loader.recursive_objects, loader.deep_construct = {}, {}, False
        return _precise(loader, root, file, text)
    return Document(file, value, text=text, shallow=shallow, libyaml=loader.__class__ is _CLoader)


_SCALAR_EVENT, _END_EVENTS = yaml.ScalarEvent, (yaml.MappingEndEvent, yaml.SequenceEndEvent)
_START_EVENTS = {yaml.MappingStartEvent: dict, yaml.SequenceStartEvent: list}
_NO_KEY = object()


def _event_build(text: str) -> tuple[Any, dict[Path, dict[str, tuple[yaml.Mark, yaml.Mark]]]]:
    """What :func:`_fast_build` returns for ``text``, built from libyaml's events without composing nodes.

    The composer makes a node of every event and asks the resolver, in
    Python, about each; most of a large manifest's load was that. Here
    the tree is built as the events arrive: a plain scalar's tag comes
    from the same table :class:`_Resolve` uses, and a scalar that is not
    a string is built by ``SafeConstructor`` from its node, as the
    composer would have made it. Anything :func:`_fast_build` declines,
    and an anchor, an alias, a tag or a ``?`` in a plain scalar of a
    flow collection (:func:`_question_in_flow`) as well, raises :class:`_Decline`,
    so the node path takes the document; a document this accepts is
    one it accepts, with the same value and the same ``shallow`` marks.
    """
    parser = _CParser(text)
    try:
        get = parser.get_event
        if get().__class__ is not yaml.StreamStartEvent or get().__class__ is not yaml.DocumentStartEvent:
            raise _Decline
        by_first, wildcard = _Resolve._by_first, _Resolve._wildcard
        constructor = yaml.constructor.SafeConstructor()
        scalar_event, end_events, start_events, no_key, node = _SCALAR_EVENT, _END_EVENTS, _START_EVENTS, _NO_KEY, _SCALAR
        shallow: dict[Path, dict[str, tuple[yaml.Mark, yaml.Mark]]] = {}
        # the collection being built, the key waiting for its value, and the shallow marks it records, if any;
        # ``stack`` holds the same three of each collection around it
        cur: Any = None
        key: Any = no_key
        level: dict | None = None
        key_mark = None
        stack: list[tuple[Any, Any, dict | None]] = []
        root: Any = None
        size = 1
        # ids of the flow collections being built, when a ``?`` in one of their plain scalars is possible
        question = _question_in_content(text)
        flows: set[int] = set()
        while True:
            event = get()
            cls = event.__class__
            if cls is scalar_event:
                if event.anchor is not None or event.tag is not None:
                    raise _Decline
                item = event.value
                if event.implicit[0]:
                    if question and "?" in item and id(cur) in flows:
                        raise _Decline  # see _question_in_flow
                    for tag, regexp in by_first.get(item[:1], wildcard):
                        if regexp.match(item):
                            written = item
                            item = constructor.construct_object(
                                node(tag, item, event.start_mark, event.end_mark, event.style), deep=True)
                            if _dialect(tag, written, item) is not None:
                                raise _Decline  # the node path says where and what to write
                            break
                if cur.__class__ is dict:
                    if key is no_key:
                        if item.__class__ is not str or item in cur:
                            raise _Decline  # a key that is not a string (a merge key too), or one written twice
                        key = item
                        if level is not None:
                            key_mark = event.start_mark
                        continue
                    cur[key] = item
                    if level is not None:
                        level[key] = (key_mark, event.start_mark)
                    key = no_key
                elif cur is not None:
                    cur.append(item)
                else:
                    root = item
                    break
                size += 1
            elif cls in end_events:
                cur, key, level = stack.pop()
                if cur is None:
                    break
                key = no_key
            else:
                kind = start_events.get(cls)
                if kind is None or event.anchor is not None or event.tag is not None:
                    raise _Decline  # an alias, or a collection with an anchor or a tag
                if len(stack) >= MAX_DEPTH or size > MAX_VALUES:
                    raise _Decline
                new = kind()
                inner = None
                if cur.__class__ is dict:
                    if key is no_key:
                        raise _Decline
                    cur[key] = new
                    if level is not None:
                        level[key] = (key_mark, event.start_mark)
                        if kind is dict and len(stack) == 1:
                            inner = shallow[(key,)] = {}  # a mapping in the top mapping
                elif cur is not None:
                    cur.append(new)
                else:
                    root = new
                    if kind is dict:
                        inner = shallow[()] = {}
                size += 1
                if question and event.flow_style:
                    flows.add(id(new))
                stack.append((cur, key, level))
                cur, key, level = new, no_key, inner
        if size > MAX_VALUES or get().__class__ is not yaml.DocumentEndEvent or get().__class__ is not yaml.StreamEndEvent:
            raise _Decline
        return root, shallow
    finally:
        parser.dispose()


# libyaml's composer (PyYAML's C extension) nests a C call per level of the document, with no limit of its own:
# 30,000 levels overran a thread's 8 MiB stack and killed the process. A document that cannot nest _C_LEVELS deep
# is composed where it is called; any other on a thread of its own whose stack is _DEEP_STACK bytes (address space,
# taken only as used: about 280 bytes a level), after the parser's events have shown it no deeper than MAX_DEPTH
# where its brackets say it may be (libyaml takes time square in the levels it holds open).
_C_LEVELS = 10_000
_C_DEEP_LEVELS = 800_000
_DEEP_STACK = 256 * 1024 * 1024
_SUSPECT_DEPTH = 4 * 64


def _depth_bound(text: str) -> int:
    """More levels than ``text`` can nest: each level opens with a ``[``, ``{``, ``-`` or ``?``, or with
    an indentation deeper than the last, which ``d`` levels need ``d * (d - 1) / 2`` characters for.

    >>> _depth_bound("a: [[1]]") >= 3, _depth_bound("[" * 40000) > 40000
    (True, True)
    """
    return (text.count("[") + text.count("{") + text.count("-") + text.count("?")
            + int((2 * len(text)) ** 0.5) + 2)


def _bracket_depth(text: str) -> int:
    """How deep ``text``'s brackets nest, counting every ``[ { ] }`` wherever it is (in quotes too) and never
    below none: where it is small the document is composed without its events read first.

    >>> _bracket_depth("a: [[1], {b: [2]}]"), _bracket_depth("]]] [[x"), _bracket_depth("[" * 500)
    (3, 2, 500)
    """
    import numpy as np

    raw = np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    step = ((raw == 91) | (raw == 123)).astype(np.int64) - ((raw == 93) | (raw == 125))
    walk = np.cumsum(step)
    if walk.size == 0:
        return 0
    return int((walk - np.minimum(np.minimum.accumulate(walk), 0)).max())


def _refuse_deep(text: str, file: str) -> None:
    """Refuse ``text`` where it nests deeper than ``MAX_DEPTH``, found from the parser's events, which keep their
    levels on the heap: a composer, in C or in Python, would first have to nest as deep (and PyYAML's scanner
    takes time square in the levels it holds open)."""
    parser = _CParser(text) if _CParser is not None else _PyLoader(text)
    depth = 0
    try:
        while True:
            event = parser.get_event()
            if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    raise ManifestError([Diagnostic(_origin(file, event.start_mark),
                                                    f"the document has nesting deeper than {MAX_DEPTH} levels")])
            elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                depth -= 1
            elif event is None or isinstance(event, yaml.StreamEndEvent):
                return
    except yaml.MarkedYAMLError as e:
        if "nesting depth" in str(e.problem or ""):  # libyaml 0.2.6 and later keep a limit of their own
            raise ManifestError([Diagnostic(_origin(file, e.problem_mark),
                                            f"the document has nesting deeper than {MAX_DEPTH} levels")]) from None
        return  # the composer says what is wrong, and where
    except yaml.YAMLError:
        return
    finally:
        parser.dispose()


def _on_deep_stack(call: Callable[[], Any]) -> Any:
    """``call()`` on a thread whose stack is ``_DEEP_STACK`` bytes; a :class:`RecursionError` where no such
    thread can start (an address space too small for it), which sends the document to PyYAML's parser."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            box["error"] = e

    try:
        old = threading.stack_size(_DEEP_STACK)
    except (ValueError, RuntimeError):
        raise RecursionError("no thread stack deep enough for libyaml's composer") from None
    try:
        thread = threading.Thread(target=target, name="hetflow-yaml-compose", daemon=True)
        thread.start()
    except RuntimeError:
        raise RecursionError("no thread stack deep enough for libyaml's composer") from None
    finally:
        threading.stack_size(old)
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _compose(text: str, file: str, libyaml: bool | None = None) -> tuple[Any, yaml.Node | None]:
    """The loader and the root node of ``text`` (``None`` when it holds no document).

    ``libyaml`` is ``True`` where libyaml is known to read ``text`` as
    PyYAML's parser does (it read it so before), ``False`` where it may
    not, and ``None`` to find out: :func:`_libyaml_parses`,
    :func:`_odd_tags` and :func:`_question_in_flow`.
    """
    known = libyaml is not None
    if not known:
        libyaml = _libyaml_parses(text) and not _odd_tags(text)
    depth = _depth_bound(text)
    if depth >= _C_LEVELS and (depth >= _C_DEEP_LEVELS or _bracket_depth(text) > _SUSPECT_DEPTH):
        _refuse_deep(text, file)
        depth = MAX_DEPTH
    if libyaml and _CLoader is not None:
        loader = _CLoader(text)
        try:
            root = loader.get_single_node() if depth < _C_LEVELS else _on_deep_stack(loader.get_single_node)
            if known or not _question_in_content(text) or not _question_in_flow(root):
                return loader, root
        except RecursionError:
            pass
        except yaml.MarkedYAMLError as e:
            if "nesting depth" in str(e.problem or ""):  # libyaml's own limit (0.2.6 on): deeper than ours
                raise ManifestError([Diagnostic(_origin(file, e.problem_mark), "the document has nesting deeper "
                                                f"than {MAX_DEPTH} levels")]) from None
            # libyaml refuses a few documents that PyYAML's parser accepts; PyYAML's answer stands
        except yaml.YAMLError:
            pass
        finally:
            loader.dispose()
    loader = None
    try:
        loader = _PyLoader(text)  # its reader refuses control characters here, before parsing
        return loader, loader.get_single_node()
    except RecursionError:
        raise ManifestError([Diagnostic(Origin(file, 1, 1), f"the document has nesting deeper than {MAX_DEPTH} levels")]) from None
    except yaml.MarkedYAMLError as e:
        raise ManifestError([_yaml_problem(file, e, "YAML syntax")]) from None
    except yaml.reader.ReaderError as e:
        before = text[:e.position]
        line = len(_BREAK.findall(before))
        col = e.position - max(before.rfind(c) for c in "\n\r\x85\u2028\u2029")
        raise ManifestError([Diagnostic(Origin(file, line + 1, col), f"YAML: character #x{e.character:04x} is not allowed "
                                        "(YAML allows tab, newline and printable characters)")]) from None
    finally:
        if loader is not None:
            loader.dispose()


def _question_in_flow(root: yaml.Node | None) -> bool:
    """Whether a plain scalar in a flow collection of the tree at ``root`` holds a ``?``.

    libyaml reads ``[a?b]`` as one scalar; PyYAML's parser reads the
    ``?`` as a key indicator there, and refuses the text or reads other
    values. A scalar an alias brings into a flow collection counts too:
    the slower parser then reads a text it would have read the same way.
    """
    todo, seen, scalar = [root] if root is not None and root.__class__ is not _SCALAR else [], set(), _SCALAR
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        children = node.value if node.__class__ is _SEQ else [part for pair in node.value for part in pair]
        if node.flow_style:
            for child in children:
                if child.__class__ is scalar and "?" in child.value and not child.style:
                    return True
        todo += [child for child in children if child.__class__ is not scalar]
    return False


def _yaml_problem(file: str, e: yaml.MarkedYAMLError, kind: str, node: yaml.Node | None = None) -> Diagnostic:
    mark = e.problem_mark or e.context_mark or (node.start_mark if node is not None else None)
    what = e.problem or "invalid YAML"
    if e.context:
        started = ""
        if e.context_mark is not None and mark is not None and e.context_mark.line != mark.line:
            started = f" (opened at line {e.context_mark.line + 1}, column {e.context_mark.column + 1})"
        what = f"{e.context}{started}: {what}"
    if "'\\t'" in what:  # PyYAML's words for a tab where YAML allows none: say what to do about it
        what += "; YAML takes no tab there (it indents with spaces): replace the tab with spaces"
    return Diagnostic(_origin(file, mark), f"{kind}: {what}")


def _fast_build(loader: Any, node: yaml.Node, depth: int, size: list[int],
                shallow: dict[Path, dict] | None = None, path: Path = ()) -> Any:
    """The plain tree of ``node`` without marks, or :class:`_Decline`.

    It returns exactly what :func:`_precise` would, and declines wherever
    :func:`_precise` would report a problem or do more than build plain
    mappings, sequences and scalars: a key that is not a plain string (a
    merge key among them), a duplicate key, a tag on a mapping or a
    sequence (``!!set``, ``!!omap``, ``!!python/...``, ``!foo``), the
    value or depth limits. ``size`` counts values as :func:`_precise`
    does, aliases expanded. With ``shallow``, the mappings at depth 0
    and 1 record the marks of each key and value there, under the
    mapping's ``path``.
    """
    cls = node.__class__
    if cls is _SCALAR:
        if node.tag == _STR_TAG:
            return node.value
        value = loader.construct_object(node, deep=True)
        if _dialect(node.tag, node.value, value) is not None:
            raise _Decline  # the precise build says where and what to write, unless its tag was written
        return value
    items = node.value
    size[0] += len(items)
    if depth >= MAX_DEPTH or size[0] > MAX_VALUES:
        raise _Decline
    if cls is _MAP:
        if node.tag != _MAP_TAG:
            raise _Decline
        out: dict[str, Any] = {}
        level = None
        if shallow is not None:
            level = shallow[path] = {}
        deeper = shallow if depth == 0 else None
        for key_node, value_node in items:
            if key_node.__class__ is not _SCALAR or key_node.tag != _STR_TAG:
                raise _Decline
            key = key_node.value
            if key in out:
                raise _Decline
            if level is not None:
                level[key] = (key_node.start_mark, value_node.start_mark)
            if value_node.__class__ is _SCALAR and value_node.tag == _STR_TAG:
                out[key] = value_node.value
            elif deeper is not None:
                out[key] = _fast_build(loader, value_node, depth + 1, size, deeper, (key,))
            else:
                out[key] = _fast_build(loader, value_node, depth + 1, size)
        return out
    if node.tag != _SEQ_TAG:
        raise _Decline
    # a string in a sequence (a stage's inputs) is its own value: no call for each
    return [item.value if item.__class__ is _SCALAR and item.tag == _STR_TAG else _fast_build(loader, item, depth + 1, size)
            for item in items]


class _Refused(Exception):
    """A value ``yaml.safe_load`` would not build, or one past the limits; carries its diagnostic."""


def _precise(loader: Any, root: yaml.Node, file: str, text: str | None) -> Document:
    """The plain tree with the origin of every value and key; raises :class:`ManifestError`.

    Mappings are built as ``SafeConstructor.construct_mapping`` builds
    them (merge keys flattened, a later key replacing an equal earlier
    one), nodes with any other tag by the constructor itself. Keys that
    are not strings and keys written twice (not counting those a merge
    brings in) become ``problems`` of the document, not refusals.
    """
    marks: dict[Path, Origin] = {}
    key_marks: dict[Path, Origin] = {}
    refusals: list[Diagnostic] = []
    problems: list[Diagnostic] = []
    merged: dict[int, int] = {}  # id of a flattened mapping node -> how many of its pairs a merge brought
    built = [0]

    def limit(where: yaml.Mark | None, depth: int) -> None:
        # Aliases are expanded into the plain tree, so a few lines can name billions of values
        # (an alias bomb); a manifest is never that large or that deep.
        built[0] += 1
        if built[0] > MAX_VALUES or depth > MAX_DEPTH:
            what = (f"more than {MAX_VALUES:,} values once aliases are expanded" if built[0] > MAX_VALUES
                    else f"nesting deeper than {MAX_DEPTH} levels")
            raise ManifestError([Diagnostic(_origin(file, where), f"the document has {what}")])

    def count(value: Any, where: yaml.Mark, depth: int) -> Any:
        """A value the constructor built: its parts count against the limits, as in the plain tree."""
        if isinstance(value, (list, tuple, set, dict)):
            for part in (value.items() if isinstance(value, dict) else value):
                limit(where, depth + 1)
                count(part, where, depth + 1)
        return value

    def construct(node: yaml.Node, deep: bool) -> Any:
        try:
            return loader.construct_object(node, deep=deep)
        except yaml.constructor.ConstructorError as e:
            raise _Refused(_yaml_problem(file, e, "YAML", node)) from None
        except Exception:  # noqa: BLE001
            # SafeConstructor lets ValueError, KeyError and others out for a scalar its tag cannot read
            # (``!!int yes``, ``!!bool y``); safe_load raises them too
            raise _Refused(Diagnostic(_origin(file, node.start_mark),
                                      f"YAML: {node.value!r} is not a valid {node.tag.rsplit(':', 1)[-1]}")) from None

    def key_of(key_node: yaml.Node) -> Any:
        if key_node.__class__ is _SCALAR and key_node.tag == _STR_TAG:
            return key_node.value
        key = construct(key_node, False)  # as construct_mapping does: a mapping key is refused unbuilt
        try:
            hash(key)
        except TypeError:
            raise _Refused(Diagnostic(_origin(file, key_node.start_mark),
                                      "YAML: while constructing a mapping: found unhashable key")) from None
        return key

    def build(node: yaml.Node, path: Path) -> Any:
        limit(node.start_mark, len(path))
        marks[path] = _origin(file, node.start_mark)
        cls, tag = node.__class__, node.tag
        if cls is _MAP and tag == _MAP_TAG:
            if id(node) not in merged:
                # flatten_mapping puts the pairs merges bring in front of the written ones
                written_pairs = sum(1 for k, _ in node.value if k.tag != _MERGE_TAG)
                try:
                    loader.flatten_mapping(node)
                except yaml.constructor.ConstructorError as e:
                    raise _Refused(_yaml_problem(file, e, "YAML", node)) from None
                merged[id(node)] = len(node.value) - written_pairs
            out: dict[Any, Any] = {}
            written: set = set()
            for i, (key_node, value_node) in enumerate(node.value):
                key = key_of(key_node)
                where = _origin(file, key_node.start_mark)
                if i >= merged[id(node)]:
                    if not isinstance(key, str):
                        hint = (_dialect(key_node.tag, key_node.value, key)
                                if key_node.__class__ is _SCALAR and not _tagged(key_node, text) else None)
                        problems.append(Diagnostic(where, f"keys must be strings, found {key!r}" + (
                            f": {key_node.value!r} is {key!r} to YAML 1.1, which hetflow reads, and text to YAML 1.2, "
                            f"which editors read; quote it ({key_node.value!r})" if hint else "")))
                    elif key in written:
                        problems.append(Diagnostic(where, f"duplicate key {key!r}"))
                    written.add(key)
                key_marks[path + (key,)] = where
                out[key] = build(value_node, path + (key,))
            return out
        if cls is _SEQ and tag == _SEQ_TAG:
            return [build(item, path + (i,)) for i, item in enumerate(node.value)]
        if tag == _STR_TAG and cls is _SCALAR:
            # What SafeConstructor returns for a str scalar, without its per-object bookkeeping.
            return node.value
        value = count(construct(node, True), node.start_mark, len(path))
        if cls is _SCALAR and tag in _DIALECT_TAGS:
            hint = _dialect(tag, node.value, value)
            if hint is not None and not _tagged(node, text):
                problems.append(Diagnostic(marks[path], hint))
        return value

    try:
        value = build(root, ())
    except _Refused as e:
        refusals.append(e.args[0])
    if refusals:
        raise ManifestError(refusals)
    return Document(file, value, marks, key_marks, text=text, problems=tuple(problems))


def not_json(value: Any) -> str | None:
    """What YAML made of a value that no manifest field holds (a date, a timestamp, bytes), said with what to
    write instead; None for any other value.

    >>> import datetime
    >>> not_json(datetime.date(2001, 12, 14))
    "a date (YAML reads an unquoted 2001-12-14 so); quote it, '2001-12-14', to give it as text"
    """
    import datetime

    if isinstance(value, (datetime.date, datetime.datetime)):
        kind = "a timestamp" if isinstance(value, datetime.datetime) else "a date"
        text = value.isoformat()
        return f"{kind} (YAML reads an unquoted {text} so); quote it, '{text}', to give it as text"
    if isinstance(value, (bytes, bytearray)):
        return "bytes (a !!binary value), which no manifest field holds; give it as text"
    return None



def dates_as_text(value: Any) -> Any:
    """``value`` with every date and timestamp YAML made of it given back as its ISO text: what a ``-p`` or a
    point's name on the command line means by ``2001-12-14``.

    >>> import datetime
    >>> dates_as_text([datetime.date(2001, 12, 14), 1])
    ['2001-12-14', 1]
    """
    import datetime

    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, list):
        return [dates_as_text(v) for v in value]
    if isinstance(value, dict):
        return {k: dates_as_text(v) for k, v in value.items()}
    return value


#: the largest manifest file read: a 100,000-stage manifest is about 6 MB
MAX_FILE_BYTES = 256 * 1024 * 1024

_FILE_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO (a named pipe)", stat.S_IFCHR: "a character device",
               stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


_READING = threading.local()


class files_read:
    """``with files_read() as read:`` lists, in ``read``, every file :func:`load` reads in this thread meanwhile
    (a manifest, the block libraries it uses), each as ``(absolute path, its os.stat_result when read)``."""

    def __enter__(self) -> list[tuple[str, os.stat_result]]:
        self._outer = getattr(_READING, "files", None)
        _READING.files = []
        return _READING.files

    def __exit__(self, *exc: object) -> None:
        mine, _READING.files = _READING.files, self._outer
        if self._outer is not None:
            self._outer.extend(mine)


def load(file: str | os.PathLike) -> Document:
    """Read and parse a manifest file; text that is not UTF-8 is refused at its first bad byte."""
    name = os.fspath(file)
    if isinstance(name, str) and "\0" in name:
        raise ManifestError([Diagnostic(None, f"{name!r}: no such file (a path cannot hold a NUL character)")])
    try:
        # opened without waiting: a FIFO would hold the open until something writes to it
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ManifestError([Diagnostic(None, f"{name}: no such file")]) from None
    except OSError as e:
        raise ManifestError([Diagnostic(None, f"{name}: cannot read: {e.strerror or e}")]) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            what = _FILE_KINDS.get(stat.S_IFMT(info.st_mode), "not a regular file")
            raise ManifestError([Diagnostic(None, f"{name}: cannot read: it is {what}; a manifest is a file")])
        if info.st_size > MAX_FILE_BYTES:
            raise ManifestError([Diagnostic(None, f"{name}: cannot read: it holds {info.st_size:,} bytes; a manifest "
                                                  f"is at most {MAX_FILE_BYTES:,}")])
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise ManifestError([Diagnostic(None, f"{name}: cannot read: {e.strerror or e}")]) from None
    finally:
        os.close(fd)
    reading = getattr(_READING, "files", None)
    if reading is not None:
        reading.append((os.path.abspath(name), info))
    if len(data) > MAX_FILE_BYTES:  # it grew while it was read
        raise ManifestError([Diagnostic(None, f"{name}: cannot read: it holds more than {MAX_FILE_BYTES:,} bytes; "
                                              f"a manifest is at most {MAX_FILE_BYTES:,}")])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ManifestError([_not_utf8(name, data, e)]) from None
    return loads(text, name)


def _not_utf8(file: str, data: bytes, e: UnicodeDecodeError) -> Diagnostic:
    """Where the first byte that is not UTF-8 is, counted in the characters before it on its line."""
    before = data[:e.start].decode("utf-8")  # everything before the first bad byte decodes
    line = len(_BREAK.findall(before))
    col = len(before) - max(before.rfind(c) for c in "\n\r\x85\u2028\u2029")
    return Diagnostic(Origin(file, line + 1, col), f"the file is not UTF-8: byte 0x{data[e.start]:02x} ({e.reason}); "
                      "save it as UTF-8")
