"""The fan-out write (``topics._core.fanout.write_each``): the compiled ``_fanout`` against
its pure twin ``_fanout_pure`` as the oracle, on real non-blocking socket pairs.

Each case builds the same sockets twice, runs one implementation on each set, and compares
the per-descriptor results and the bytes each peer received: a full write, a partial
write into a nearly full buffer, a full buffer (0), a peer that is gone and a closed
descriptor (-1), and an empty list.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager

import pytest

from topics._core import _fanout_pure, fanout

try:
    from topics._core import _fanout
except ImportError:
    _fanout = None  # type: ignore[assignment]

needs_compiled = pytest.mark.skipif(_fanout is None, reason="compiled _fanout not built")
WriteEach = Callable[[Sequence[int], bytes], list[int]]
FRAME = b"data: " + b"x" * 1000 + b"\n\n"
SNDBUF = 16_384


def _drain(sock: socket.socket) -> bytes:
    out = bytearray()
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except BlockingIOError:
            return bytes(out)
        if not chunk:
            return bytes(out)
        out += chunk


def _fill(sock: socket.socket) -> None:
    """Fill ``sock``'s send path until the kernel takes no more; the peer reads nothing."""
    while True:
        try:
            if sock.send(b"f" * 4096) == 0:
                return
        except BlockingIOError:
            return


def _unused_fd() -> int:
    """A descriptor number no file holds (a freed low number would be reused by the next
    socket this test opens, so take one far above them)."""
    fd = 900
    while True:
        try:
            os.fstat(fd)
        except OSError:
            return fd
        fd += 1


@contextmanager
def _pairs(kinds: Sequence[str]) -> Iterator[tuple[list[int], list[socket.socket | None]]]:
    """One descriptor per kind, and the peer each one's bytes reach (None: no peer)."""
    with ExitStack() as stack:
        fds: list[int] = []
        peers: list[socket.socket | None] = []
        for kind in kinds:
            a, b = socket.socketpair()
            stack.callback(a.close)
            stack.callback(b.close)
            a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF)
            b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SNDBUF)
            a.setblocking(False)
            b.setblocking(False)
            if kind == "full":
                _fill(a)
            elif kind == "gone":
                b.close()
            elif kind == "closed":
                fds.append(_unused_fd())  # a descriptor number that names nothing
                peers.append(None)
                continue
            fds.append(a.fileno())
            peers.append(b if kind != "gone" else None)
        yield fds, peers


def _run(impl: WriteEach, kinds: Sequence[str], data: bytes) -> tuple[list[int], list[bytes]]:
    with _pairs(kinds) as (fds, peers):
        result = impl(fds, data)
        got = [b"" if p is None else _drain(p) for p in peers]
    return result, got


IMPLS = [pytest.param(_fanout_pure.write_each, id="pure")]
if _fanout is not None:
    IMPLS.append(pytest.param(_fanout.write_each, id="compiled"))


@pytest.mark.parametrize("impl", IMPLS)
def test_each_outcome(impl: WriteEach) -> None:
    result, got = _run(impl, ["ok", "gone", "closed", "ok"], FRAME)
    assert result == [len(FRAME), -1, -1, len(FRAME)]
    assert got[0] == FRAME
    assert got[3] == FRAME


@pytest.mark.parametrize("impl", IMPLS)
def test_a_full_buffer_takes_nothing_or_part(impl: WriteEach) -> None:
    """A peer that stopped reading: the write takes 0 bytes (or, where the kernel still
    had a little room, a part), never blocks, and never reports more than it took."""
    big = b"y" * (4 * SNDBUF)
    result, got = _run(impl, ["full"], big)
    assert 0 <= result[0] < len(big)
    assert got[0][len(got[0]) - result[0] :] == big[: result[0]]


@pytest.mark.parametrize("impl", IMPLS)
def test_a_partial_write_reports_what_the_kernel_took(impl: WriteEach) -> None:
    big = b"z" * (64 * SNDBUF)  # more than the socket pair can hold at once
    result, got = _run(impl, ["ok"], big)
    assert 0 < result[0] < len(big)
    assert got[0] == big[: result[0]]


@pytest.mark.parametrize("impl", IMPLS)
def test_empty_and_buffer_types(impl: WriteEach) -> None:
    assert impl([], FRAME) == []
    for data in (bytearray(FRAME), memoryview(FRAME)):
        result, got = _run(impl, ["ok"], data)  # type: ignore[arg-type]
        assert result == [len(FRAME)]
        assert got == [FRAME]


@needs_compiled
@pytest.mark.parametrize(
    "kinds",
    [["ok"], ["gone"], ["closed"], ["ok", "ok", "gone", "closed", "ok"], ["full", "ok"]],
)
def test_compiled_matches_the_pure_oracle(kinds: list[str]) -> None:
    assert _fanout is not None
    for data in (FRAME, b"", b"q" * (64 * SNDBUF)):
        want = _run(_fanout_pure.write_each, kinds, data)
        got = _run(_fanout.write_each, kinds, data)
        if "full" in kinds or len(data) > SNDBUF:
            # How much a nearly full buffer takes is the kernel's choice; the outcome kind
            # (all, part, none, error) and the bytes delivered must agree.
            assert [_kind(r, len(data)) for r in got[0]] == [_kind(r, len(data)) for r in want[0]]
            # (a filled peer's bytes start with the filler: compare the tail the write added)
            assert all(
                g[len(g) - r :] == data[:r] for g, r in zip(got[1], got[0], strict=True) if r >= 0
            )
        else:
            assert got == want


def _kind(taken: int, size: int) -> str:
    return "error" if taken < 0 else "all" if taken == size else "part" if taken else "none"


def test_the_package_picks_the_compiled_one_when_built() -> None:
    if os.environ.get("TOPICS_PURE_PYTHON", "") not in ("", "0") or _fanout is None:
        assert fanout.IMPLEMENTATION == "pure"
        assert fanout.write_each is _fanout_pure.write_each
    else:
        assert fanout.IMPLEMENTATION == "cython"
        assert fanout.write_each is _fanout.write_each
