"""Type stubs for the compiled fan-out write (``topics._core._fanout``); ``_fanout_pure``
matches them exactly."""

from collections.abc import Sequence

def write_each(fds: Sequence[int], data: bytes) -> list[int]:
    """Write ``data`` to every descriptor without blocking: per descriptor, the bytes the
    kernel took (``len(data)`` all, fewer partial, ``0`` buffer full), ``-1`` on an error."""
