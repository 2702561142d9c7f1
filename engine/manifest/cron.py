"""The cron side of a ``schedule:`` block: fire times, slots, and which slots are due.

A manifest's ``schedule:`` names a cron expression (5 fields, or 6 with
seconds first) read in an IANA time zone. Each fire time is a *slot*,
identified by its instant in UTC (``2026-03-29T01:00:00Z``). Across the
changes of daylight saving time fire times follow cron (Vixie cron,
cronie): a wall-clock time the spring-forward skips fires at the first
instant after the gap for a fixed-time expression, and not at all for a
wildcard one, which follows the clock; where the fall-back repeats an hour, an expression
whose minute or hour field is a wildcard (``*/15 * * * *``, ``@hourly``)
fires through both passes of it, as often as in any other hour, and one
at fixed times (``30 2 * * *``) fires once.

The *due* slots at instant ``now`` are the fire times after the newest
slot of the history and at or before ``now``: all of them (at most
:data:`CATCHUP_LIMIT`, the newest) when ``catchup`` is true, only the
newest when it is false. A manifest with no history has one due slot,
its latest fire time; nothing before it is back-filled. A slot of the
history that is :data:`RETURNED` (a scheduler gave it back before it
started its run) is no decision: it is due again with ``catchup`` true,
in its turn, and does not count as the newest slot; one no decision
takes again (older than the newest :data:`CATCHUP_LIMIT`, or than the
latest fire time with ``catchup`` false) is :func:`passed_over`. This module is
pure: what the history is, and what happens to a due slot, is
:mod:`hetflow.engine.batch.schedule`'s business.

Examples
--------
>>> s = Schedule("0 0 L * *", "UTC", False, "skip", {})
>>> [slot_id(t) for t in s.after(parse_instant("2026-01-15T00:00:00Z"), 3)]
['2026-01-31T00:00:00Z', '2026-02-28T00:00:00Z', '2026-03-31T00:00:00Z']
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass
from datetime import MAXYEAR, MINYEAR, datetime, timedelta, timezone
from functools import lru_cache
from itertools import islice
from typing import Any, Iterator, Mapping
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from croniter import CroniterError, croniter

from hetflow.engine.errors import Diagnostic, UsageError, argument

__all__ = ["CATCHUP_LIMIT", "POLICIES", "Schedule", "check", "unfed_inputs", "from_tree", "slot_id", "parse_instant",
           "slot_run", "due_slots", "past_catchup", "passed_over"]

CATCHUP_LIMIT = 100

#: the history's state of a slot given back undecided (``SLOT.returned`` beside the claims)
RETURNED = "returned"

POLICIES = ("skip", "queue", "allow")

_UTC = timezone.utc


@dataclass(frozen=True)
class Schedule:
    """A parsed ``schedule:`` block; fire times are timezone-aware datetimes."""

    cron: str
    timezone: str
    catchup: bool
    max_active: str
    params: Mapping[str, Any]
    on_failure: str | None = None
    on_success: str | None = None

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def _walk(self, start: datetime, backwards: bool = False) -> croniter:
        """croniter over naive wall-clock times of the zone, from ``start``'s wall-clock time widened by the
        shift of any change of offset within three hours of ``start`` (no fall-back of this century repeats more):
        across a fall-back, a wall-clock time before ``start``'s may fire, in its second pass, after it, and one
        after it, in its first, before it."""
        tz = self.tz
        offsets = [(start + timedelta(minutes=m)).astimezone(tz).utcoffset() for m in range(-180, 181, 15)]
        margin = max(offsets) - min(offsets)
        wall = start.astimezone(tz).replace(tzinfo=None)
        wall = wall + margin + timedelta(seconds=1) if backwards else wall - margin
        return croniter(self.cron, wall.replace(microsecond=0), second_at_beginning=_has_seconds(self.cron))

    def _instants(self, wall: datetime, once: bool) -> tuple[list[datetime], datetime, datetime]:
        """The instants (UTC) the wall-clock time ``wall`` fires at, and its earliest and latest mapping, bounds
        of the instants of every later and every earlier wall-clock time. As cron (Vixie cron, cronie) does: a
        time the fall-back repeats fires in both passes for a wildcard expression, in the first for a fixed-time
        one; a time the spring-forward skips fires at the first instant after the gap for a fixed-time
        expression, and not at all for a wildcard one, which follows the clock as it goes."""
        tz = self.tz
        first = wall.replace(tzinfo=tz, fold=0).astimezone(_UTC)
        second = wall.replace(tzinfo=tz, fold=1).astimezone(_UTC)
        low, high = min(first, second), max(first, second)
        if first == second:
            return [first], low, high
        if first.astimezone(tz).replace(tzinfo=None) == wall:  # repeated: both passes show this wall-clock time
            return ([low] if once else [low, high]), low, high
        if not once:
            return [], low, high
        # skipped: the gap ends between the two readings, at whole seconds
        offset = low.astimezone(tz).utcoffset()
        a, b = low, high
        while b - a > timedelta(seconds=1):
            mid = a + timedelta(seconds=((b - a).total_seconds() // 2))
            if mid.astimezone(tz).utcoffset() == offset:
                a = mid
            else:
                b = mid
        return [b], low, high

    def _fires(self, start: datetime, backwards: bool = False) -> Iterator[datetime]:
        """Fire times after ``start`` (before it, newest first, with ``backwards``), each once, in order.

        Wall-clock times come in their own order, which is not the order of
        their instants across a fall-back: an instant is given out once no
        wall-clock time still to come can fire before (after) it."""
        once = not _wildcard(self.cron)
        it = self._walk(start, backwards)
        pending: list[datetime] = []
        last = None
        wall = start.replace(tzinfo=None)
        while True:
            try:
                wall = (it.get_prev if backwards else it.get_next)(datetime)
                fires, low, high = self._instants(wall, once)
            except (ValueError, OverflowError):
                if not (wall.year >= MAXYEAR - 1 or wall.year <= MINYEAR + 1):
                    raise
                # the calendar ends (year 9999, year 1): no fire time lies beyond, and what is pending is given out
                for t in sorted(pending, reverse=backwards):
                    if t != last and (t < start if backwards else t > start):
                        last = t
                        yield t
                return
            bound = high if backwards else low
            pending.sort(reverse=backwards)
            while pending and (pending[0] > bound if backwards else pending[0] < bound):
                t = pending.pop(0)
                if t != last and (t < start if backwards else t > start):
                    last = t
                    yield t
            pending.extend(fires)

    def after(self, start: datetime, count: int) -> list[datetime]:
        """The next ``count`` fire times strictly after ``start``; fewer where the calendar ends (year 9999) first."""
        return list(islice(self._fires(start), count))

    def latest(self, now: datetime, count: int = 1) -> list[datetime]:
        """The newest ``count`` fire times at or before ``now``, newest first; fewer where the calendar begins first."""
        return list(islice(self._fires(now + timedelta(microseconds=1), backwards=True), count))

    def record(self, slot: datetime) -> dict:
        """What a scheduled run's record says about its schedule."""
        return {"slot": slot_id(slot), "cron": self.cron, "timezone": self.timezone}


def _has_seconds(cron: str) -> bool:
    return not cron.strip().startswith("@") and len(cron.split()) == 6


def _wildcard(cron: str) -> bool:
    """Whether ``cron`` is what cron calls a wildcard job, one whose minute or hour field begins with ``*``: such a
    job runs through an hour the fall-back repeats as in any other, and a fixed-time one does not run again in it.

    >>> [_wildcard(c) for c in ("*/15 * * * *", "0 * * * *", "@hourly", "30 2 * * *", "@daily", "*/20 0 12 * * *")]
    [True, True, True, False, False, False]
    """
    fields = cron.split()
    if cron.strip().startswith("@"):
        return cron.strip().lower() == "@hourly"
    if len(fields) == 6:
        fields = fields[1:]
    return any(f.startswith("*") for f in fields[:2])


def slot_id(t: datetime) -> str:
    """A slot's identity: its instant in UTC, to the second."""
    return t.astimezone(_UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _slot_file(t: datetime) -> str:
    return t.astimezone(_UTC).strftime("%Y%m%dT%H%M%SZ")


def parse_instant(text: str) -> datetime:
    """An ISO 8601 instant (``--now``); without an offset it is UTC.

    >>> slot_id(parse_instant("2026-03-29T03:30:00+02:00"))
    '2026-03-29T01:30:00Z'
    """
    try:
        t = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise UsageError(f"--now expects an ISO 8601 instant such as 2026-03-29T01:30:00Z, got {text!r}") from None
    try:
        t = t.replace(tzinfo=_UTC) if t.tzinfo is None else t.astimezone(_UTC)
    except OverflowError:
        t = None
    # a schedule's slots are looked for around it, a year and more each way: within Python's years 1-9999
    if t is None or not _EARLIEST <= t <= _LATEST:
        raise UsageError(f"--now must be an instant from {_EARLIEST.year} to {_LATEST.year}, got {text!r}") from None
    return t


_EARLIEST = datetime(1970, 1, 1, tzinfo=timezone.utc)
_LATEST = datetime(9000, 1, 1, tzinfo=timezone.utc)


@lru_cache(maxsize=1)
def _zones() -> tuple[str, ...]:
    # the zone folder's "localtime" is the host's own zone, not one of the database's
    return tuple(sorted(available_timezones() - {"localtime"}))


#: the shorthands croniter reads in place of five fields
SHORTHANDS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")

#: each field of a 5-field expression, with the values it takes
_FIELDS = (("minute", "0-59"), ("hour", "0-23"), ("day-of-month", "1-31 or L"), ("month", "1-12 or JAN-DEC"),
           ("day-of-week", "0-7 or SUN-SAT, 0 and 7 both Sunday"))


def _why_not(cron: str, error: BaseException) -> str:
    """Why croniter refused ``cron``, in the terms of hetflow's rule (5 fields, or 6 with seconds first),
    naming the field at fault; croniter's own words say the expression needs "5, 6 or 7 columns", counts
    fields from 0 and speaks of iterators.

    >>> _why_not("@fortnightly", ValueError())
    'a shorthand is one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly; otherwise write 5 fields (minute hour day-of-month month day-of-week), or 6 with seconds first'
    >>> _why_not("0 25 * * *", ValueError())
    "the hour field '25' is not valid: hour takes 0-23, as lists (1,15), ranges (1-5) and steps (*/15)"
    >>> from croniter import CroniterBadDateError
    >>> _why_not("0 0 30 2 *", CroniterBadDateError())
    'no date matches it: its day-of-month and month fields never meet (day 30 of February, say)'
    """
    from croniter import CroniterBadDateError

    if cron.startswith("@"):
        return (f"a shorthand is one of {', '.join(SHORTHANDS)}; otherwise write 5 fields "
                "(minute hour day-of-month month day-of-week), or 6 with seconds first")
    fields = cron.split()
    names = ((("second", "0-59"),) if len(fields) == 6 else ()) + _FIELDS
    for i, (field, (name, values)) in enumerate(zip(fields, names)):
        alone = " ".join(field if j == i else "*" for j in range(len(fields)))
        try:
            croniter(alone, datetime(2000, 1, 1, tzinfo=_UTC), second_at_beginning=len(fields) == 6).get_next(datetime)
        except (CroniterError, ValueError, KeyError):
            step = "; a step of 0 never advances" if re.search(r"/0+(?=,|$)", field) else ""
            return (f"the {name} field {field!r} is not valid: {name} takes {values}, as lists (1,15), ranges (1-5) "
                    f"and steps (*/15){step}")
    if isinstance(error, CroniterBadDateError):
        return "no date matches it: its day-of-month and month fields never meet (day 30 of February, say)"
    return f"croniter refuses it ({error})"


def check(value: Any, doc: Any, params: Mapping[str, Any]) -> list[Diagnostic]:
    """What is wrong with a ``schedule:`` block beyond its shape (the schema checks that)."""
    if not isinstance(value, dict):
        return []
    problems = []
    cron = value.get("cron")
    if isinstance(cron, str) and cron and not cron.strip():
        # the schema takes it (it is not empty), and no cron reads blanks as a time
        problems.append(Diagnostic(doc.at(("schedule", "cron")), (
            f"schedule.cron {cron!r} holds only blanks; a cron expression has 5 fields "
            "(minute hour day-of-month month day-of-week), or 6 with seconds first, or is a shorthand such as @daily")))
    elif isinstance(cron, str) and cron.strip():
        fields = cron.split()
        if not cron.strip().startswith("@") and len(fields) not in (5, 6):
            problems.append(Diagnostic(doc.at(("schedule", "cron")), (
                f"schedule.cron {cron!r} has {len(fields)} fields; a cron expression has 5 "
                "(minute hour day-of-month month day-of-week) or 6 with seconds first")))
        else:
            try:
                croniter(cron, datetime(2000, 1, 1, tzinfo=_UTC), second_at_beginning=_has_seconds(cron)).get_next(datetime)
            except (CroniterError, ValueError, KeyError) as e:
                hint = "; schedule: is not interpolated, write the expression itself" if "${" in cron else ""
                problems.append(Diagnostic(doc.at(("schedule", "cron")),
                                           f"schedule.cron {cron!r} is not a valid cron expression: "
                                           f"{_why_not(cron.strip(), e)}{hint}"))
    tz = value.get("timezone")
    if isinstance(tz, str) and tz:
        try:
            # files of the zone folder that are not zones of the database ("localtime", the host's own zone, which
            # another host reads otherwise or not at all; "posixrules"; "posix/..." and "right/..." copies) load too
            known = tz in _zones() or not _zones()
            ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            known = False
        if not known:
            same = [z for z in _zones() if z.lower() == tz.lower()]
            close = same or difflib.get_close_matches(tz.split("/", 1)[1] if tz.startswith(("posix/", "right/"))
                                                      else tz, _zones(), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            problems.append(Diagnostic(doc.at(("schedule", "timezone")),
                                       f"unknown time zone {tz!r} in schedule.timezone: give an IANA name such as "
                                       f"Europe/Berlin or UTC{hint}"))
    overrides = value.get("params")
    if isinstance(overrides, dict):
        for key in overrides:
            if key not in params:
                declared = ", ".join(sorted(params)) or "none"
                problems.append(Diagnostic(doc.key_at(("schedule", "params", key)),
                                           f"schedule.params sets {key!r}, which is not a declared param (declared: {declared})"))
    return problems


def unfed_inputs(tree: Any, doc: Any) -> list[Diagnostic]:
    """The ``input`` stages of a scheduled manifest: only a run given their arrays can feed them, and a scheduled
    run is given none, so each of its slots would fail with bad input."""
    if not isinstance(tree, dict) or not isinstance(tree.get("schedule"), dict):
        return []
    stages = tree.get("stages")
    if not isinstance(stages, dict):
        return []
    return [Diagnostic(doc.at(("stages", sid, "op")), (
        f"stage {sid!r} is an input stage, which only a run given its array can feed (--input {sid}=PATH, "
        "hetflow.run(inputs=)); a scheduled run is given none, so every slot of schedule: would fail: read the "
        "array from a file with op: load, or remove schedule: and run it by hand"))
        for sid, stage in stages.items() if isinstance(stage, dict) and stage.get("op") == "input"]


def from_tree(tree: Any) -> Schedule | None:
    """The :class:`Schedule` of a validated manifest tree, or None when it has none."""
    value = tree.get("schedule") if isinstance(tree, dict) else None
    if not isinstance(value, dict):
        return None
    return Schedule(value["cron"].strip(), value.get("timezone", "UTC"), bool(value.get("catchup", False)),
                    value.get("max_active", "skip"), dict(value.get("params") or {}),
                    value.get("on_failure"), value.get("on_success"))


def slot_run(doc: Any, name: str, slot_text: str, runs_dir: str | None = None) -> tuple[dict, str]:
    """For ``hetflow run --schedule-slot``: the record's ``schedule`` entry and the run lock's name.

    An ``allow`` schedule locks the slot, not the manifest, so its runs may overlap.
    """
    sched = from_tree(doc.value)
    if sched is None:
        raise UsageError(f"{doc.file} has no schedule: block, so {argument('schedule_slot', slot_text)} names no slot of it")
    try:
        slot = parse_instant(slot_text)
    except UsageError:
        raise UsageError(f"{argument('schedule_slot')} expects a UTC instant such as 2026-03-29T01:00:00Z, got {slot_text!r}") from None
    # a record's slot is the history the scheduler decides from: one that is no fire time (a typo, a guess) would
    # be the newest slot decided, and no slot before it would ever run. A slot a scheduler claimed stays its to
    # run, though the cron was edited since.
    fire = sched.latest(slot, 1)[0]
    claimed = runs_dir is not None and os.path.isfile(os.path.join(runs_dir, ".schedule", name, _slot_file(slot) + ".json"))
    if fire != slot and not claimed:
        after = sched.after(slot, 1)[0]
        raise UsageError(f"{argument('schedule_slot', slot_text)} is not a fire time of schedule.cron {sched.cron!r} in "
                         f"{sched.timezone}: the nearest are {slot_id(fire)} and {slot_id(after)}")
    lock_name = f"{name}@{_slot_file(slot)}" if sched.max_active == "allow" else name
    return sched.record(slot), lock_name


def due_slots(schedule: Schedule, done: Mapping[str, str] | set, now: datetime) -> list[datetime]:
    """The slots to decide at ``now``, oldest first (see the module docstring).

    >>> s = Schedule("0 * * * *", "UTC", True, "skip", {})
    >>> now = parse_instant("2026-01-01T03:30:00Z")
    >>> [slot_id(t) for t in due_slots(s, {"2026-01-01T01:00:00Z"}, now)]
    ['2026-01-01T02:00:00Z', '2026-01-01T03:00:00Z']
    >>> [slot_id(t) for t in due_slots(Schedule("0 * * * *", "UTC", False, "skip", {}), {"2026-01-01T01:00:00Z"}, now)]
    ['2026-01-01T03:00:00Z']
    >>> [slot_id(t) for t in due_slots(s, {"2026-01-01T01:00:00Z": RETURNED, "2026-01-01T02:00:00Z": "skipped"}, now)]
    ['2026-01-01T01:00:00Z', '2026-01-01T03:00:00Z']
    """
    returned = {k for k, v in done.items() if v == RETURNED} if isinstance(done, Mapping) else set()
    decided = [k for k in done if k not in returned]
    newest = max(decided) if decided else None
    recent = schedule.latest(now, CATCHUP_LIMIT if schedule.catchup else 1)
    missed = [t for t in recent if newest is None or slot_id(t) > newest]
    if newest is None or not schedule.catchup:
        missed = missed[:1]
    if schedule.catchup and returned:
        due = {slot_id(t) for t in missed}
        missed += [parse_instant(k) for k in returned if k not in due and parse_instant(k) <= now]
        missed = sorted(missed)[-CATCHUP_LIMIT:]
    return sorted(missed)


def past_catchup(schedule: Schedule, done: Mapping[str, str] | set, slots: list[datetime]) -> tuple[str, str] | None:
    """(the newest decided slot, the oldest of ``slots`` after it) when fire times between the two are left out
    of ``slots``, the due slots of ``done``: a downtime longer than :data:`CATCHUP_LIMIT` fire times, whose older
    fire times are never run; else None.

    >>> s = Schedule("0 * * * *", "UTC", True, "skip", {})
    >>> done = {"2026-01-01T00:00:00Z": "succeeded"}
    >>> past_catchup(s, done, due_slots(s, done, parse_instant("2026-01-09T00:00:00Z")))
    ('2026-01-01T00:00:00Z', '2026-01-04T21:00:00Z')
    >>> past_catchup(s, done, due_slots(s, done, parse_instant("2026-01-02T00:00:00Z"))) is None
    True
    """
    if not schedule.catchup or len(slots) < CATCHUP_LIMIT:
        return None
    returned = {k for k, v in done.items() if v == RETURNED} if isinstance(done, Mapping) else set()
    decided = [k for k in done if k not in returned]
    if not decided:
        return None
    newest = max(decided)
    after = [t for t in slots if slot_id(t) > newest]
    if not after or schedule.after(parse_instant(newest), 1)[0] >= after[0]:
        return None
    return newest, slot_id(after[0])


def passed_over(schedule: Schedule, done: Mapping[str, str], slots: list[datetime], now: datetime) -> list[str]:
    """The slots of ``done`` given back (:data:`RETURNED`) that the decision of ``slots``, the due slots at ``now``,
    leaves out for good, oldest first: with ``catchup`` true those older than the newest :data:`CATCHUP_LIMIT` it
    runs, with ``catchup`` false every one but the latest fire time. No later decision takes them either.

    >>> s = Schedule("0 * * * *", "UTC", False, "skip", {})
    >>> done = {"2026-01-01T00:00:00Z": "succeeded", "2026-01-01T01:00:00Z": RETURNED}
    >>> now = parse_instant("2026-01-01T03:30:00Z")
    >>> passed_over(s, done, due_slots(s, done, now), now)
    ['2026-01-01T01:00:00Z']
    >>> c = Schedule("0 * * * *", "UTC", True, "skip", {})
    >>> passed_over(c, done, due_slots(c, done, now), now)
    []
    """
    due = {slot_id(t) for t in slots}
    return sorted(k for k, v in done.items() if v == RETURNED and k not in due and parse_instant(k) <= now)
