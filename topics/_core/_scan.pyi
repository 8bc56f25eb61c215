"""Type stubs for the compiled write-body splitter (``topics._core._scan``); ``_scan_pure``
matches them exactly (see its docstring for the rules both follow).

The HTTP frontend splits a write body such as::

    {"records":[{"data":{"b":1,"a":[1.50,2e3]},"tag":"t"}],"node":"n"}

into its records and its other top-level fields in one pass, keeping each record's
``data`` and ``meta`` as the exact bytes of their JSON text (``b'{"b":1,"a":[1.50,2e3]}'``)
so they are stored verbatim, never parsed and re-dumped.
"""

from typing import Final

MAX_DEPTH: Final[int]  # 512: how deep one member value may nest

class BodyError(ValueError):
    """A write body that cannot be split.

    ``problem`` says what is wrong ("invalid number", "records must be an array", ...),
    ``path`` where ("$", "$.records", "$.records[3]", "$.records[3].data", "$.config",
    '$["odd key"]'), ``offset`` the byte offset in the body: the first byte that cannot
    continue a valid body (``len(body)`` when it ends too early; the lead byte of a bad
    UTF-8 sequence; the value's first byte for a shape or decoding problem).
    ``str(exc)`` is ``f"{problem} at {path} (byte {offset})"``.
    """

    problem: str
    path: str
    offset: int
    def __init__(self, problem: str, path: str = "$", offset: int = 0) -> None: ...
    def __reduce__(self) -> tuple[type[BodyError], tuple[str, str, int]]: ...

def member_path(parent: str, key: str) -> str:
    """``parent.key``, or ``parent["key"]`` (key as a JSON string) for other keys."""

def split_write_body(
    body: bytes | bytearray | memoryview,
) -> tuple[list[dict[str, object]] | None, dict[str, object]]:
    """Split a write body (exactly one JSON object) into ``(records, fields)``.

    ``records`` is None when the body has no "records" member; else it must be an array
    of objects, and each becomes a dict with the record's members: "data" and "meta" as
    bytes (the raw JSON text of the value, exactly as in the body), every other member
    ("tag", "node", ...) decoded (so a non-string tag stays e.g. an int for the engine to
    reject). A JSON null member is None. ``fields`` holds every other top-level member,
    decoded. Duplicate keys: the last wins, "records" included. Strings are fully
    unescaped; a lone surrogate escape stays a lone surrogate.

    Raises BodyError for invalid JSON (RFC 8259, strict UTF-8, no NaN/Infinity, member
    values nested at most MAX_DEPTH deep), a body that is not an object, a "records" that
    is not an array of objects, or a value Python cannot decode (an int over its digit
    limit). Syntax errors are reported at the first bad byte; the records' shape only
    once the whole body is read. TypeError when ``body`` is not bytes-like.
    """
