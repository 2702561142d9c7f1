"""Named tuples written out: what :func:`collections.namedtuple` makes, without making it at import.

``namedtuple`` compiles each class's ``__new__`` from a string when the
class is made, 0.1-0.2 ms a class here: the emulator's eight were about a
millisecond of every ``hetflow emulate`` start.  A class here names its
fields and writes its ``__new__`` in its source (compiled once, into the
``.pyc``) and takes the rest from :class:`FieldTuple`: fields read at C
speed, ``_fields``, ``_field_defaults``, ``_replace``, ``_asdict``,
``_make``, and the repr, equality, hashing and pickling a namedtuple has::

    >>> class Point(FieldTuple):
    ...     __slots__ = ()
    ...     _fields = ("x", "y")
    ...     x, y = getters(2)
    ...
    ...     def __new__(cls, x, y=0):
    ...         return tuple.__new__(cls, (x, y))
    >>> p = Point(1)
    >>> p, p.y, p._replace(y=2), p == (1, 0), Point._field_defaults
    (Point(x=1, y=0), 0, Point(x=1, y=2), True, {'y': 0})
"""

from __future__ import annotations

from operator import itemgetter

try:
    from _collections import _tuplegetter      # what namedtuple's fields are: a C descriptor
except ImportError:                             # an interpreter without it: what collections falls back to
    def _tuplegetter(index: int, doc: str | None):
        return property(itemgetter(index), doc=doc)

__all__ = ["FieldTuple", "getters"]


def getters(n: int) -> tuple:
    """Descriptors reading fields ``0 .. n-1``, to unpack into a class body's field names."""
    return tuple(_tuplegetter(i, f"Alias for field number {i}") for i in range(n))


class FieldTuple(tuple):
    """The methods a namedtuple class has, for a tuple subclass that sets ``_fields`` and ``__new__``."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()
    _field_defaults: dict = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # namedtuple's API has the defaults too, and Dask takes a tuple for a namedtuple (rebuilt on the
        # worker through __new__) only when it has all of it; else it ships a plain tuple
        defaults = cls.__new__.__defaults__ or ()
        cls._field_defaults = dict(zip(cls._fields[len(cls._fields) - len(defaults):], defaults))

    @classmethod
    def _make(cls, iterable):
        result = tuple.__new__(cls, iterable)
        if len(result) != len(cls._fields):
            raise TypeError(f"Expected {len(cls._fields)} arguments, got {len(result)}")
        return result

    def _replace(self, **changes):
        result = self._make(map(changes.pop, self._fields, self))
        if changes:
            raise ValueError(f"Got unexpected field names: {list(changes)!r}")
        return result

    def _asdict(self) -> dict:
        return dict(zip(self._fields, self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{n}={v!r}' for n, v in zip(self._fields, self))})"

    def __getnewargs__(self):
        # pickle and copy make a new one through __new__, with the fields as its arguments
        return tuple(self)
