"""How the ``topics`` command line shows records to people: verbatim data, ISO times, colour.

Rules:
1. ``data`` and ``meta`` are printed as the exact JSON text the server stored (``1.50`` stays
   ``1.50``): a diff page's ``records_json``, or a watch frame's, is split with the server's
   own raw-span scanner (:func:`topics._core.scan.split_write_body`), never decoded and
   re-encoded. Only a record that arrives without its text is re-encoded.
2. ``$ts`` is shown as ISO 8601 UTC with milliseconds (``2026-11-25T17:09:24.123Z``);
   ``--raw-ts`` shows the milliseconds since the epoch. ``--json`` output keeps the API's
   integers whatever the flag.
3. Colour only on a terminal: ``--color auto`` (the default) colours when the stream is a tty
   and ``NO_COLOR`` is unset or empty (https://no-color.org); ``always``/``never`` force it.
"""

from __future__ import annotations

import datetime as _dt
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

import ujson

from topics._core.scan import BodyError, split_write_body
from topics.types import Record

__all__ = [
    "RawRecord",
    "Style",
    "iso_ms",
    "raw_from_record",
    "raw_page",
    "raw_records",
    "use_colour",
]

_RESET = "\x1b[0m"
_COLOURS = {
    "seq": "\x1b[1;36m",  # bold cyan
    "ts": "\x1b[2m",  # dim
    "topic": "\x1b[35m",  # magenta
    "tag": "\x1b[33m",  # yellow
    "node": "\x1b[34m",  # blue
    "loss": "\x1b[1;31m",  # bold red
    "header": "\x1b[1m",  # bold
}


def _dumps(value: Any) -> bytes:
    return ujson.dumps(value, ensure_ascii=False, escape_forward_slashes=False).encode()


@dataclass(frozen=True, slots=True)
class RawRecord:
    """A record with its ``data``/``meta`` as the JSON text the server sent (rule 1)."""

    seq: int
    ts: int
    data_json: bytes
    meta_json: bytes | None = None
    tag: str | None = None
    node: str | None = None

    def json_line(self, topic: str | None = None) -> str:
        """The record in the API's shape (§0.4), ``data``/``meta`` spliced verbatim."""
        head: dict[str, Any] = {}
        if topic is not None:
            head["topic"] = topic
        head["$seq"], head["$ts"] = self.seq, self.ts
        if self.node is not None:
            head["$node"] = self.node
        if self.tag is not None:
            head["$tag"] = self.tag
        out = _dumps(head)[:-1] + b',"data":' + self.data_json
        if self.meta_json is not None:
            out += b',"meta":' + self.meta_json
        return (out + b"}").decode("utf-8", "surrogatepass")


def raw_records(body: bytes) -> list[RawRecord] | None:
    """The records of a JSON object's ``records`` array (a watch frame), verbatim; None when
    the text cannot be split (the caller falls back to decoded records)."""
    try:
        records, _ = split_write_body(body)
    except BodyError:
        return None
    if records is None:
        return []
    out = []
    for obj in records:
        data, meta, tag, node = (obj.get(k) for k in ("data", "meta", "$tag", "$node"))
        out.append(
            RawRecord(
                seq=_int(obj.get("$seq")),
                ts=_int(obj.get("$ts")),
                data_json=data if isinstance(data, bytes) else b"null",
                meta_json=meta if isinstance(meta, bytes) else None,
                tag=tag if isinstance(tag, str) else None,
                node=node if isinstance(node, str) else None,
            )
        )
    return out


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0


def raw_page(records_json: bytes) -> list[RawRecord] | None:
    """A diff page's ``records_json`` (a JSON array of records) as raw records."""
    return raw_records(b'{"records":' + records_json + b"}")


def raw_from_record(rec: Record) -> RawRecord:
    """A decoded record, re-encoded (the fallback of rule 1)."""
    meta = _dumps(rec.meta) if rec.meta is not None else None
    return RawRecord(rec.seq, rec.ts, _dumps(rec.data), meta, rec.tag, rec.node)


def use_colour(choice: str, stream: IO[str], environ: Mapping[str, str] = os.environ) -> bool:
    """Rule 3."""
    if choice == "always":
        return True
    if choice == "never":
        return False
    if environ.get("NO_COLOR"):
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def iso_ms(ms: int) -> str:
    """Milliseconds since the epoch as ISO 8601 UTC (rule 2)."""
    try:
        when = _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.UTC)
    except (OverflowError, OSError, ValueError):
        return str(ms)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


class Style:
    """Colour and time format for one output stream."""

    def __init__(self, colour: bool, raw_ts: bool) -> None:
        self.colour = colour
        self.raw_ts = raw_ts

    def paint(self, kind: str, text: str) -> str:
        return f"{_COLOURS[kind]}{text}{_RESET}" if self.colour else text

    def ts(self, ms: int | None) -> str | int | None:
        """A timestamp for a table or a ``key  value`` line (None stays None: shown as -)."""
        if ms is None or self.raw_ts:
            return ms
        return iso_ms(ms)

    def record_line(self, topic: str | None, rec: RawRecord, limit: int = 200) -> str:
        """``[TOPIC  ]SEQ  TS[  tag=…][  node=…]  DATA`` with DATA verbatim (rule 1), cut
        at ``limit`` characters with an ellipsis."""
        parts = []
        if topic is not None:
            parts.append(self.paint("topic", topic))
        parts.append(self.paint("seq", str(rec.seq)))
        parts.append(self.paint("ts", str(self.ts(rec.ts))))
        if rec.tag is not None:
            parts.append(self.paint("tag", f"tag={rec.tag}"))
        if rec.node is not None:
            parts.append(self.paint("node", f"node={rec.node}"))
        data = rec.data_json.decode("utf-8", "surrogatepass")
        if len(data) > limit:
            data = data[: limit - 1] + "…"
        parts.append(data)
        return "  ".join(parts)


# -- tables, pairs and progress (the people's output of cli.py rule 1) --------------------


def dumps(value: Any) -> str:
    return ujson.dumps(value, ensure_ascii=False, escape_forward_slashes=False)


def table(rows: Sequence[Sequence[object]], header: Sequence[str], out: IO[str]) -> None:
    """An aligned text table; numbers are right-aligned."""
    cells = [[str(c) if c is not None else "-" for c in row] for row in rows]
    widths = [len(h) for h in header]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    numeric = [bool(rows) and all(isinstance(r[i], int) for r in rows) for i in range(len(header))]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    out.write(line(header) + "\n")
    for row in cells:
        out.write(line(row) + "\n")


def pairs(items: Sequence[tuple[str, object]], out: IO[str]) -> None:
    width = max((len(k) for k, _ in items), default=0)
    for key, value in items:
        shown = dumps(value) if isinstance(value, dict | list) else value
        out.write(f"{key.ljust(width)}  {'-' if shown is None else shown}\n")


def short(value: Any, limit: int = 60) -> str:
    return cut(dumps(value), limit)


def cut(text: str, limit: int = 60) -> str:
    """``text`` at most ``limit`` characters long, with an ellipsis where it was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Progress:
    """A one-line progress bar on a terminal (no dependency): percent when the input size
    is known, records, bytes and rate, redrawn at most 10 times a second."""

    def __init__(self, out: IO[str], total_bytes: int | None, enabled: bool) -> None:
        self.out, self.total, self.enabled = out, total_bytes, enabled
        self.records = self.bytes = 0
        self.started = self._drawn = time.monotonic()

    def update(self, records: int, nbytes: int) -> None:
        self.records += records
        self.bytes += nbytes
        now = time.monotonic()
        if self.enabled and now - self._drawn >= 0.1:
            self._drawn = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        rate = self.records / max(now - self.started, 1e-6)
        text = f"{self.records:,} records  {self.bytes / 1e6:,.1f} MB  {rate:,.0f} rec/s"
        if self.total:
            frac = min(1.0, self.bytes / self.total)
            filled = int(frac * 30)
            text = f"[{'#' * filled}{'.' * (30 - filled)}] {frac:4.0%}  " + text
        self.out.write("\r" + text)
        self.out.flush()

    def finish(self) -> None:
        if self.enabled:
            self._draw(time.monotonic())
            self.out.write("\n")
            self.out.flush()
            self.enabled = False  # once
