"""The reader process of the fan-out benchmarks (bench/watch.py, bench/peers_nats.py).

Every subscriber of every system is one raw non-blocking socket in one child process with
a plain epoll loop, so the client costs the same few microseconds per delivery whichever
server it reads: the hot loop only reads the clock and keeps the bytes, and the stamps are
parsed when the benchmark asks for them. Each benchmark brings its protocol as a *framer*;
this module owns the loop, the control protocol on stdin/stdout and the parent's handle.

Control (one command a line on stdin, one answer a line on stdout): ``count`` -> stamps
seen so far; ``take`` -> JSON list of latencies (ms) since the last take; ``per_socket`` ->
JSON list of the stamps each subscriber has seen so far (a starved one shows); ``stop``.

Many subscribers (10,000) are spread over several such processes (``ReaderGroup``): one
process per ``per_process`` sockets, each with its own descriptors and epoll set; the
parent sums their answers. Their CPU time is the client's own overhead (``cpu_s``).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

#: (fd, buffered bytes, receive time in ns) -> (bytes to keep for later, whole frames to
#: keep for ``take`` or None, stamps in them). May write to the socket (a protocol's
#: PONG, the next blocking read).
Framer = Callable[[int, bytes], tuple[bytes, bytes | None, int]]
#: Turns what was kept [(receive ns, whole frames)] into latencies in ms.
Latencies = Callable[[list[tuple[int, bytes]]], list[float]]


#: The reader's one receive buffer.
RECV_BYTES = 262144


def raise_fd_limit() -> None:
    """A thousand subscribers need more descriptors than the default soft limit."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def serve(socks: dict[int, socket.socket], frame: Framer, latencies: Latencies) -> None:
    """Run the child's loop until ``stop`` (or stdin closes); prints ``ready`` first."""
    for s in socks.values():
        s.setblocking(False)
    ep = select.epoll()
    for fd in socks:
        ep.register(fd, select.EPOLLIN)
    stdin = sys.stdin.fileno()
    ep.register(stdin, select.EPOLLIN)
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    bufs = dict.fromkeys(socks, b"")
    per_socket = dict.fromkeys(socks, 0)
    got: list[tuple[int, bytes]] = []
    count = 0
    now_ns = time.monotonic_ns
    # One receive buffer for every read: ``recv(n)`` allocates n bytes per call, and for a
    # large n that is an mmap + munmap (measured: +1 ms p50 at 100 readers of 1 frame).
    rbuf = bytearray(RECV_BYTES)
    rview = memoryview(rbuf)
    ctl = b""
    while True:
        for fd, _ in ep.poll():
            if fd == stdin:
                ctl += os.read(stdin, 4096)
                while b"\n" in ctl:
                    cmd, _, ctl = ctl.partition(b"\n")
                    if cmd == b"count":
                        out.write(f"{count}\n")
                    elif cmd == b"take":
                        out.write(json.dumps(latencies(got)) + "\n")
                        got = []
                    elif cmd == b"per_socket":
                        out.write(json.dumps(list(per_socket.values())) + "\n")
                    elif cmd == b"stop" or not cmd:
                        return
                    out.flush()
                continue
            try:
                n = socks[fd].recv_into(rbuf)
            except BlockingIOError:
                continue
            t = now_ns()
            chunk = rview[:n].tobytes()
            if not chunk:
                ep.unregister(fd)
                continue
            keep, whole, stamps = frame(fd, bufs[fd] + chunk if bufs[fd] else chunk)
            bufs[fd] = keep
            if whole is not None:
                got.append((t, whole))
                count += stamps
                per_socket[fd] += stamps


class ReaderProcess:
    """The reader child seen from the benchmark: started with ``script --_readers`` and
    handed ``spec`` (JSON) on its first stdin line; ready once it printed ``ready``."""

    def __init__(self, script: str, spec: dict[str, Any], *, wait: bool = True) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(script), "--_readers"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        self.stdin.write(json.dumps(spec) + "\n")
        self.stdin.flush()
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        if self.stdout.readline().strip() != "ready":
            raise RuntimeError("the reader process did not get ready")

    def _ask(self, cmd: str) -> str:
        self.stdin.write(cmd + "\n")
        self.stdin.flush()
        return self.stdout.readline()

    def count(self) -> int:
        return int(self._ask("count"))

    def take(self) -> list[float]:
        return list(json.loads(self._ask("take")))

    def per_socket(self) -> list[int]:
        return list(json.loads(self._ask("per_socket")))

    def cpu_s(self) -> float:
        return process_cpu_s(self.proc.pid)

    def close(self) -> None:
        with contextlib.suppress(BrokenPipeError):
            self.stdin.write("stop\n")
            self.stdin.flush()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds used so far by process ``pid`` (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ReaderGroup:
    """Subscribers spread over ``ceil(len(ids) / per_process)`` reader processes, seen as
    one: ``spec`` goes to every process with its own slice of ``ids``. The processes
    connect at the same time and answer ``count``/``take`` in turn."""

    def __init__(self, script: str, spec: dict[str, Any], ids: list[str], per_process: int) -> None:
        parts = [ids[i : i + per_process] for i in range(0, len(ids), per_process)] or [[]]
        self.procs: list[ReaderProcess] = []
        try:
            for part in parts:
                self.procs.append(ReaderProcess(script, {**spec, "ids": part}, wait=False))
            for proc in self.procs:
                proc.wait_ready()
        except BaseException:
            self.close()
            raise

    def count(self) -> int:
        return sum(p.count() for p in self.procs)

    def take(self) -> list[float]:
        return [x for p in self.procs for x in p.take()]

    def per_socket(self) -> list[int]:
        return [x for p in self.procs for x in p.per_socket()]

    def cpu_s(self) -> float:
        """CPU seconds the reader processes used so far: the client's own overhead."""
        return sum(p.cpu_s() for p in self.procs)

    def close(self) -> None:
        for proc in self.procs:
            proc.close()
