"""Read a trace file into snapshots: streaming, in file order, bad lines reported not fatal.

``read_snapshots(path, format="auto", unit="invocation", ...)`` reads JSONL line by line (one
JSON value per line; an array value is a list of records), or, when the file is one pretty-
printed JSON document, that document. Record formats are parsed and cut as each line is read, so
memory stays constant. Group formats (OTLP spans/logs, LangSmith runs) are buffered per trace
until their root closes them (or the file ends); at most ``max_open_traces`` groups are held,
past which the oldest closed (else oldest) group is parsed early.

Invalid input never stops the file when a :class:`ImportErrorReport` is passed: each bad line
becomes a :class:`RejectedLine` naming file, line, field (a JSON path) and a reason code, and
the rest of the file is processed. Without a report the first bad line raises
:class:`InvalidTraceError`. Traces with in-flight work are never snapshotted: they are recorded
as :class:`NotReady` in the report (or logged when there is none).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import ijson  # type: ignore[import-untyped]  # no stubs; BSD-licensed streaming JSON parser
from pydantic import BaseModel, ConfigDict, ValidationError

from producer._units import NotReadyError, UnitName, cut
from producer.importers import FORMATS, FieldError, GroupFormat, ParsedTrace, RecordFormat, detect
from producer.snapshot import MAX_ITEM_BYTES, Snapshot
from worker.canonical_json import canonical_json

__all__ = [
    "IMPORTER_ERROR",
    "JSON_TOO_DEEP",
    "MAX_LINE_BYTES",
    "PAYLOAD_TOO_LARGE",
    "ImportErrorReport",
    "InvalidTraceError",
    "Located",
    "NotReady",
    "RejectedLine",
    "read_located",
    "read_snapshots",
]

log = logging.getLogger(__name__)
_T = TypeVar("_T")
IMPORTER_ERROR = "IMPORTER_ERROR"
"""Rejection code of a record an importer failed on unexpectedly (a bug, reported not fatal)."""
JSON_TOO_DEEP = "JSON_TOO_DEEP"
"""Rejection code of JSON nested too deeply to parse or send."""
PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
"""Rejection code of a snapshot over the worker's :data:`~producer.snapshot.MAX_ITEM_BYTES`."""


class RejectedLine(BaseModel):
    """One rejected input: where (file, 1-based line, JSON path of the field) and why (code)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str
    line: int
    field: str
    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.field}: {self.code}: {self.message}"


class NotReady(BaseModel):
    """A trace that gave no snapshot: in-flight work (``code`` from the importer) or no unit."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str
    line: int
    trace_id: str
    code: str


class InvalidTraceError(ValueError):
    """Raised (when no report collects errors) for the first invalid line."""

    def __init__(self, rejected: RejectedLine) -> None:
        super().__init__(str(rejected))
        self.rejected = rejected


@dataclass
class ImportErrorReport:
    """Collects rejected lines and not-ready traces: counts all, keeps the first ``keep``."""

    keep: int = 1000
    rejected: list[RejectedLine] = field(default_factory=list)
    not_ready: list[NotReady] = field(default_factory=list)
    rejected_count: int = 0
    not_ready_count: int = 0
    lines_read: int = 0
    traces: int = 0
    snapshots: int = 0

    def reject(self, item: RejectedLine) -> None:
        """Record one rejected line."""
        self.rejected_count += 1
        if len(self.rejected) < self.keep:
            self.rejected.append(item)

    def defer(self, item: NotReady) -> None:
        """Record one trace that was not made into a snapshot."""
        self.not_ready_count += 1
        if len(self.not_ready) < self.keep:
            self.not_ready.append(item)

    @property
    def rejected_lines(self) -> int:
        """Distinct lines with at least one rejection (among the kept ones)."""
        return len({(r.path, r.line) for r in self.rejected})


@dataclass(frozen=True)
class Located:
    """A snapshot and the 1-based line of the file where its trace started."""

    path: str
    line: int
    snapshot: Snapshot


@dataclass
class _Group:
    line: int
    payloads: list[Any]
    closed: bool = False


@dataclass
class _Run:
    """State of one read: options, error sink, and the open groups of group formats."""

    path: str
    forced: str | None
    unit: UnitName
    cutoff_event_id: str | None
    max_open: int
    report: ImportErrorReport | None
    groups: OrderedDict[tuple[str, str], _Group] = field(default_factory=OrderedDict)
    flushed: set[tuple[str, str]] = field(default_factory=set)

    def reject(self, line: int, fld: str, code: str, message: str) -> None:
        rejected = RejectedLine(path=self.path, line=line, field=fld, code=code, message=message)
        if self.report is None:
            raise InvalidTraceError(rejected)
        self.report.reject(rejected)

    def defer(self, line: int, trace_id: str, code: str) -> None:
        item = NotReady(path=self.path, line=line, trace_id=trace_id, code=code)
        if self.report is None:
            log.info("trace not snapshotted: %s:%d %s %s", self.path, line, trace_id, code)
            return
        self.report.defer(item)


def read_snapshots(
    path: str | Path,
    format: str = "auto",  # noqa: A002 - the public name the CLI's --format mirrors
    unit: str = "invocation",
    *,
    report: ImportErrorReport | None = None,
    cutoff_event_id: str | None = None,
    max_open_traces: int = 10_000,
) -> Iterator[Snapshot]:
    """Snapshots of every trace in ``path``, in file order (see the module docstring).

    ``format``: ``"auto"`` or a name in :data:`producer.importers.FORMATS`. ``unit``:
    ``invocation`` | ``session`` | ``tool_call`` | ``through_event`` (needs ``cutoff_event_id``).
    """
    for located in read_located(
        path,
        format,
        unit,
        report=report,
        cutoff_event_id=cutoff_event_id,
        max_open_traces=max_open_traces,
    ):
        yield located.snapshot


def read_located(
    path: str | Path,
    format: str = "auto",  # noqa: A002 - mirrors read_snapshots
    unit: str = "invocation",
    *,
    report: ImportErrorReport | None = None,
    cutoff_event_id: str | None = None,
    max_open_traces: int = 10_000,
) -> Iterator[Located]:
    """Like :func:`read_snapshots`, with the line each snapshot's trace started on."""
    run = _Run(
        path=str(path),
        forced=_check_format(format),
        unit=_check_unit(unit, cutoff_event_id),
        cutoff_event_id=cutoff_event_id,
        max_open=max(1, max_open_traces),
        report=report,
    )
    for entry in _json_texts(Path(path), run):
        if report is not None:
            report.lines_read += 1
        if isinstance(entry, _Item):
            yield from _record(run, entry.line, entry.value, entry.prefix)
        else:
            yield from _line(run, *entry)
    yield from _flush(run, everything=True)


def _check_format(name: str) -> str | None:
    if name == "auto":
        return None
    if name not in FORMATS:
        raise ValueError(f"unknown format {name!r}; expected auto or one of {sorted(FORMATS)}")
    return name


def _check_unit(unit: str, cutoff_event_id: str | None) -> UnitName:
    try:
        value = UnitName(unit)
    except ValueError:
        names = [u.value for u in UnitName]
        raise ValueError(f"unknown unit {unit!r}; expected one of {names}") from None
    if (value is UnitName.THROUGH_EVENT) != (cutoff_event_id is not None):
        raise ValueError("cutoff_event_id is required by, and only by, unit='through_event'")
    return value


# --- input -----------------------------------------------------------------------------------


MAX_LINE_BYTES = 4 * MAX_ITEM_BYTES
"""Longest input line read; a longer one is one ``LINE_TOO_LARGE`` rejection, skipped unread."""
_SKIP_CHUNK_BYTES = 1 << 20
_DOCUMENT_PREFIX = "item"  # ijson's path of a top-level array's members


@dataclass(frozen=True)
class _Item:
    """One record of a pretty-printed document: its line (the document's), value and index."""

    line: int
    value: Any
    prefix: str


def _json_texts(path: Path, run: _Run) -> Iterator[tuple[int, str] | _Item]:
    """(line number, text) of each non-blank line, or the records of one JSON document.

    The input is opened once and read once, as a stream: FIFOs and ``/dev/stdin`` work like
    files, and a document is parsed while it is read (memory holds one record, not the file).
    """
    first = True
    with path.open("rb") as handle:
        for number, raw in _bounded_lines(handle, run):
            text = _decode(raw, number, run)
            if text is None or not text.strip():
                continue
            # Only the first non-blank line may open a pretty-printed multi-line document.
            if first and _is_document_start(text):
                yield from _document(handle, raw, number, run)
                return
            first = False
            yield number, text


def _bounded_lines(handle: BinaryIO, run: _Run) -> Iterator[tuple[int, bytes]]:
    """Lines of at most :data:`MAX_LINE_BYTES`; a longer one is rejected and skipped unread."""
    number = 0
    while raw := handle.readline(MAX_LINE_BYTES + 1):
        number += 1
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            while (rest := handle.readline(_SKIP_CHUNK_BYTES)) and not rest.endswith(b"\n"):
                pass
            limit_mib = MAX_LINE_BYTES // (1024 * 1024)
            run.reject(number, "$", "LINE_TOO_LARGE", f"line is over {limit_mib} MiB")
            continue
        yield number, raw


def _decode(raw: bytes, number: int, run: _Run) -> str | None:
    try:
        return raw.decode("utf-8-sig" if number == 1 else "utf-8")
    except UnicodeDecodeError:
        run.reject(number, "$", "INVALID_ENCODING", "line is not valid UTF-8")
        return None


def _is_document_start(text: str) -> bool:
    """A first line that is an unfinished JSON value: the start of a pretty-printed document.

    Only a value cut off by the end of the line qualifies (a line broken in the middle is just a
    bad line), so a JSONL file with a bad first line is never read whole into memory.
    """
    stripped = text.strip()
    if not stripped.startswith(("{", "[")):
        return False
    try:
        json.loads(stripped)
    except json.JSONDecodeError as exc:
        return exc.pos >= len(stripped)
    except (ValueError, RecursionError):
        return False
    return False


class _Prefixed:
    """A binary stream: the already-read first line, then the rest of ``handle``."""

    def __init__(self, head: bytes, handle: BinaryIO) -> None:
        self._head = head.removeprefix(b"\xef\xbb\xbf")
        self._handle = handle

    def read(self, size: int = -1) -> bytes:
        if size == 0:  # ijson probes read(0) to tell bytes from text: consume nothing
            return b""
        if self._head:
            head, self._head = self._head, b""
            return head
        return self._handle.read(size)


def _document(
    handle: BinaryIO, head: bytes, line: int, run: _Run
) -> Iterator[tuple[int, str] | _Item]:
    """The records of one pretty-printed document, parsed while read (ijson, one record held).

    An object is one record; an array's members are records named by index. When the document
    turns out to be invalid, a seekable input is re-read: an array member by member, so a bad
    record is one rejection naming its index and the others are kept; anything else (and a
    stream, which cannot be re-read) line by line as before, or as one rejection.
    """
    is_array = head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"[")
    stream = _Prefixed(head, handle)
    emitted = 0
    try:
        for value in ijson.items(stream, _DOCUMENT_PREFIX if is_array else "", use_float=True):
            yield _Item(line, value, f"[{emitted}]" if is_array else "")
            emitted += 1
    except (ijson.JSONError, UnicodeDecodeError, RecursionError):
        yield from _recover(handle, run, line, is_array=is_array, emitted=emitted)


def _recover(
    handle: BinaryIO, run: _Run, line: int, *, is_array: bool, emitted: int
) -> Iterator[tuple[int, str] | _Item]:
    """After an invalid document: re-read what can be re-read, reject the rest once."""
    if not handle.seekable():
        where = f"[{emitted}]" if is_array else "$"
        run.reject(line, where, "INVALID_JSON", "document is not valid JSON from here on")
        return
    handle.seek(0)
    if not is_array:  # a JSONL file whose first line is cut short: line by line, as ever
        for number, raw in _bounded_lines(handle, run):
            text = _decode(raw, number, run)
            if text is not None and text.strip():
                yield number, text
        return
    try:
        text = handle.read().decode("utf-8-sig")
    except UnicodeDecodeError:
        run.reject(line, f"[{emitted}]", "INVALID_ENCODING", "document is not valid UTF-8")
        return
    for index, value in _members(text):
        if index < emitted:
            continue
        if value is _BAD:
            run.reject(line, f"[{index}]", "INVALID_JSON", "record is not valid JSON")
        else:
            yield _Item(line, value, f"[{index}]")


_BAD = object()


def _members(text: str) -> Iterator[tuple[int, Any]]:
    """(index, value or ``_BAD``) of each member of a top-level JSON array, bad ones skipped."""
    pos = _skip_space(text, text.index("[") + 1)
    index = 0
    while pos < len(text) and text[pos] != "]":
        try:
            value, end = _DECODER.raw_decode(text, pos)  # NaN and Infinity are rejected
        except (ValueError, RecursionError):
            value, end = _BAD, _member_end(text, pos)
        yield index, value
        index += 1
        pos = _skip_space(text, end)
        if pos >= len(text) or text[pos] != ",":
            return
        pos = _skip_space(text, pos + 1)


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _member_end(text: str, pos: int) -> int:
    """Where a (bad) array member ends: the ``,`` or ``]`` at its own depth, strings skipped."""
    depth, in_string, escaped = 0, False, False
    for end in range(pos, len(text)):
        char = text[end]
        if escaped:
            escaped = False
        elif in_string:
            escaped = char == "\\"
            in_string = char != '"'
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
        elif char in "]}" and depth:
            depth -= 1
        elif char in ",]" and not depth:
            return end
    return len(text)


def _reject_constant(name: str) -> None:
    raise ValueError(f"non-finite number {name}")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


class _TooDeepError(ValueError):
    """JSON nested deeper than Python's parser recurses."""


def _loads(text: str) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise _TooDeepError("JSON nested too deeply") from None


# --- one line --------------------------------------------------------------------------------


def _line(run: _Run, line: int, text: str) -> Iterator[Located]:
    try:
        value = _loads(text)
    except _TooDeepError:
        run.reject(line, "$", JSON_TOO_DEEP, "JSON is nested too deeply")
        return
    except ValueError:
        run.reject(line, "$", "INVALID_JSON", "line is not valid JSON")
        return
    if isinstance(value, list):
        for index, item in enumerate(value):
            yield from _record(run, line, item, f"[{index}]")
    else:
        yield from _record(run, line, value, "")


def _record(run: _Run, line: int, value: Any, prefix: str) -> Iterator[Located]:
    if not isinstance(value, dict):
        run.reject(line, prefix or "$", "NOT_AN_OBJECT", "expected a JSON object")
        return
    name = run.forced or detect(value)
    if name is None:
        run.reject(line, prefix or "$", "UNKNOWN_FORMAT", "no importer recognizes this record")
        return
    fmt = FORMATS[name]
    if isinstance(fmt, RecordFormat):
        traces = _guard(run, line, prefix, lambda: fmt.parse(value, _fallback_id(value)))
        yield from _emit(run, line, traces or [], prefix)
    else:
        yield from _collect(run, line, fmt, value, prefix)


def _fallback_id(record: dict[str, Any]) -> str:
    """A deterministic trace id for records without one: a digest of their content."""
    try:
        digest = hashlib.sha256(canonical_json(record).encode("utf-8", "surrogatepass"))
    except ValueError:
        digest = hashlib.sha256(repr(sorted(record)).encode("utf-8", "surrogatepass"))
    return f"trace-{digest.hexdigest()[:24]}"


def _guard(run: _Run, line: int, prefix: str, parse: Callable[[], _T]) -> _T | None:
    """Run an importer; a malformed record becomes a rejection naming its field."""
    try:
        result = parse()
    except FieldError as exc:
        run.reject(line, _join(prefix, exc.field), exc.code, exc.message)
        return None
    except ValidationError as exc:
        run.reject(line, _join(prefix, _loc(exc)), "INVALID_FIELD", "value fails validation")
        return None
    except Exception as exc:  # noqa: BLE001 - an importer bug must not stop the whole file
        # Defence in depth: the record is reported (never silently dropped) and the rest of the
        # file is still read. The property tests assert this code never appears.
        log.warning("importer failed: %s:%d (%s)", run.path, line, type(exc).__name__)
        run.reject(line, prefix or "$", IMPORTER_ERROR, "the importer failed on this record")
        return None
    return result


def _join(prefix: str, fld: str) -> str:
    if not prefix:
        return fld or "$"
    return f"{prefix}.{fld}" if fld and not fld.startswith("[") else f"{prefix}{fld}"


def _loc(exc: ValidationError) -> str:
    errors = exc.errors()
    return ".".join(str(p) for p in errors[0]["loc"]) if errors else ""


def _emit(run: _Run, line: int, traces: Iterable[ParsedTrace], prefix: str) -> Iterator[Located]:
    for trace in traces:
        if run.report is not None:
            run.report.traces += 1
        for snapshot in _cut(run, line, trace, prefix):
            if run.report is not None:
                run.report.snapshots += 1
            yield Located(run.path, line, snapshot)


def _cut(run: _Run, line: int, trace: ParsedTrace, prefix: str) -> list[Snapshot]:
    try:
        snapshots = cut(trace, run.unit, run.cutoff_event_id)
    except NotReadyError as exc:
        run.defer(line, trace.trace_id, exc.code)
        return []
    except ValidationError as exc:
        run.reject(line, _join(prefix, _loc(exc)), "INVALID_FIELD", "value fails validation")
        return []
    except RecursionError:
        run.reject(line, prefix or "$", JSON_TOO_DEEP, "JSON is nested too deeply")
        return []
    kept = []
    for snapshot in snapshots:
        problem = _sendable(snapshot)
        if problem is None:
            kept.append(snapshot)
        else:
            run.reject(line, prefix or "$", *problem)
    return kept


def _sendable(snapshot: Snapshot) -> tuple[str, str] | None:
    """Why a worker would refuse ``snapshot`` (code, message), checked here; ``None`` if none.

    The JSON a producer sends is measured against the worker's :data:`MAX_ITEM_BYTES`, and
    serializing it proves it can be sent at all: pydantic stops at a nesting depth of about
    255 (raising, in the middle of a batch, with no file or line).
    """
    try:
        _ = snapshot.snapshot_id  # proves the content hashes (lone surrogates do not)
        size = len(snapshot.model_dump_json().encode("utf-8"))
    except UnicodeEncodeError:
        return "INVALID_UNICODE", "text holds an unpaired surrogate"
    except (ValueError, RecursionError) as exc:  # pydantic: "Maximum serialization depth ..."
        if isinstance(exc, RecursionError) or "depth" in str(exc):
            return JSON_TOO_DEEP, "JSON is nested too deeply to be sent"
        return "INVALID_FIELD", "value cannot be serialized as JSON"
    if size > MAX_ITEM_BYTES:
        limit_mib = MAX_ITEM_BYTES // (1024 * 1024)
        return PAYLOAD_TOO_LARGE, f"snapshot is over the worker's {limit_mib} MiB limit"
    return None


# --- group formats ---------------------------------------------------------------------------


def _collect(
    run: _Run, line: int, fmt: GroupFormat, value: dict[str, Any], prefix: str
) -> Iterator[Located]:
    session = run.unit is UnitName.SESSION
    items = _guard(run, line, prefix, lambda: list(fmt.split(value, session)))
    for item in items or []:
        key = (fmt.name, item.key)
        if key in run.flushed:
            run.reject(line, prefix or "$", "LATE_ITEM", "item of an already-emitted trace")
            continue
        group = run.groups.setdefault(key, _Group(line, []))
        group.payloads.append(item.payload)
        group.closed = group.closed or item.closes
    yield from _flush(run, everything=False)


def _flush(run: _Run, *, everything: bool) -> Iterator[Located]:
    """Parse groups: the oldest closed ones past the bound, or (at the end) all of them.

    At the end of the file each format's ``merge`` sees all its traces at once, so a history
    repeated by a later trace of the same conversation is only cut once.
    """
    if not everything:
        while len(run.groups) > run.max_open:
            key = next((k for k, g in run.groups.items() if g.closed), next(iter(run.groups)))
            run.flushed.add(key)
            yield from _emit_all(run, _parse_groups(run, [key]))
        return
    for name in dict.fromkeys(k[0] for k in run.groups):
        keys = [k for k in run.groups if k[0] == name]
        fmt = FORMATS[name]
        assert isinstance(fmt, GroupFormat)  # only group formats are ever buffered
        parsed = _parse_groups(run, keys)
        kept = {id(t) for t in fmt.merge([t for _, t in parsed])}
        yield from _emit_all(run, [(line, t) for line, t in parsed if id(t) in kept])


def _parse_groups(run: _Run, keys: list[tuple[str, str]]) -> list[tuple[int, ParsedTrace]]:
    parsed: list[tuple[int, ParsedTrace]] = []
    for key in keys:
        group = run.groups.pop(key)
        fmt = FORMATS[key[0]]
        assert isinstance(fmt, GroupFormat)  # only group formats are ever buffered
        traces = _guard(run, group.line, "", partial(fmt.parse, key[1], group.payloads))
        parsed.extend((group.line, trace) for trace in traces or [])
    return parsed


def _emit_all(run: _Run, parsed: list[tuple[int, ParsedTrace]]) -> Iterator[Located]:
    for line, trace in parsed:
        yield from _emit(run, line, [trace], "")
