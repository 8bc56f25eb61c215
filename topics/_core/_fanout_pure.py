"""Pure-Python fan-out write: the fallback of ``_fanout.pyx`` (identical results)."""

from __future__ import annotations

import os
from collections.abc import Sequence

__all__ = ["write_each"]


def write_each(fds: Sequence[int], data: bytes) -> list[int]:
    """Write ``data`` to every descriptor of ``fds`` without blocking.

    Per descriptor, the bytes the kernel took: ``len(data)`` when all of it, fewer for a
    partial write, ``0`` when the socket's buffer is full, ``-1`` when the write failed
    otherwise (the peer is gone). ``os.write`` retries an interrupted write itself.
    """
    out = []
    for fd in fds:
        try:
            out.append(os.write(fd, data))
        except BlockingIOError:
            out.append(0)
        except OSError:
            out.append(-1)
    return out
