"""What crash recovery skips, and what keeping heads exact costs (issue 20). Prints numbers;
never asserts.

Three parts (``--only skip,pause,append``; all by default):

* ``skip``: SIGKILL rounds against a real ``topics-server`` (``--rounds``). Per durability
  class one *busy* topic, appended to by a writer thread (4-record batches, round-robin)
  until the kill, and one *idle* topic (5 records, then nothing). After each restart:
  seqs skipped = new head - last acknowledged seq (what a reader can never see and no
  writer was told of; one in-flight batch, 4 seqs, is the floor), and the seqs the
  ``crash`` tombstone names. Each round is recovered twice from a copy of the killed
  directory: as it is (same boot: the heads table says how far each topic went) and with
  the ``heads`` file removed (what a power loss leaves: the durable watermark bounds it).
  "Fsync skips" counts rounds where an fsync topic's head moved above its last ack
  without any tombstone (silent).
* ``pause``: the latency of a ``disk`` write that follows a pause long enough for the
  topic to release its reservation (Rule 2a: it then waits for one synced WATERMARK entry)
  beside the same write with the release turned off, alternating, ``--pauses`` each.
* ``sporadic``: a ``disk`` topic written at uneven intervals (50 ms .. 1.5 s) under each
  ``RELEASE_AFTER_S`` of ``--release-after``: how many writes paid for a reservation.
* ``append``: engine append throughput (batch 100, 64 B records) for ``disk`` and ``fsync``
  with 1 and 16 writers, with the heads table (every change stores the head into a
  shared mapping) and without it, alternating ``--repeats`` times; medians and the
  same-run ratio of records/s and of process CPU per write, and the cost of one head store
  alone; then, steadiest on a shared machine, one engine whose head store is switched on
  and off every 0.3 s, 30 times: CPU per 100-record ``disk`` write.

Usage: python bench/crash_heads.py [--only skip,pause,sporadic,append] [--rounds 5]
           [--pauses 40] [--sporadic-writes 40] [--release-after 0.1,1] [--repeats 3]
           [--duration 2] [--dir PATH] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.persistence import bench_append
from tests.integration.conftest import ServerProcess, spawn_server
from topics._storage.heads import HeadTable
from topics.engine import open_engine
from topics.ops import durability as _durability

CLASSES = ["ephemeral", "memory", "disk", "fsync"]
BATCH = 4
ENV = {"TOPICS_ALLOW_INSECURE_NO_AUTH": "1"}


# -- skip -------------------------------------------------------------------------------


def _ready(server: ServerProcess) -> httpx.Client:
    client = server.client()
    deadline = time.monotonic() + 120
    while client.get("/v0/ready").status_code != 200:
        if time.monotonic() > deadline:
            raise RuntimeError("the server never got ready")
        time.sleep(0.01)
    return client


def _kill_round(root: str, acks_before_kill: int) -> tuple[str, dict[str, int]]:
    """One server, written until ``acks_before_kill`` acks, then SIGKILLed: its data dir and
    the last acknowledged seq per topic."""
    data_dir = tempfile.mkdtemp(prefix="kill-", dir=root)
    server = spawn_server(ENV, "--data-dir", data_dir)
    last: dict[str, int] = {}
    try:
        client = server.client()
        for cls in CLASSES:
            for kind in ("idle", "busy"):
                client.put(f"/v0/topics/{kind}-{cls}", json={"durability": cls})
            res = client.post(f"/v0/topics/idle-{cls}", json={"records": [{"data": 1}] * 5})
            last[f"idle-{cls}"] = res.json()["last_seq"]
        enough = threading.Event()

        def write() -> None:
            i = 0
            with contextlib.suppress(httpx.HTTPError), server.client() as writer:
                while True:
                    name = f"busy-{CLASSES[i % len(CLASSES)]}"
                    res = writer.post(f"/v0/topics/{name}", json={"records": [{"data": i}] * BATCH})
                    if res.status_code == 200:
                        last[name] = res.json()["last_seq"]
                    i += 1
                    if i >= acks_before_kill:
                        enough.set()

        thread = threading.Thread(target=write, daemon=True)
        thread.start()
        enough.wait(60)
        server.stop(signal.SIGKILL)
        thread.join(30)
        client.close()
    finally:
        if server.proc.poll() is None:
            server.stop(signal.SIGKILL)
    return data_dir, last


def _recover(data_dir: str, last: dict[str, int]) -> dict[str, dict[str, Any]]:
    server = spawn_server(ENV, "--data-dir", data_dir)
    out: dict[str, dict[str, Any]] = {}
    try:
        client = _ready(server)
        for name, acked in last.items():
            head = client.get(f"/v0/topics/{name}").json()["head_seq"]
            body = client.post(f"/v0/topics/{name}/diff", json={"from_seq": acked}).json()
            tomb = body["tombstone"]
            out[name] = {
                "skipped": head - acked,
                "tombstone": tomb["gap_to"] - tomb["gap_from"] + 1 if tomb else 0,
                "reason": tomb["reason"] if tomb else "",
            }
        client.close()
    finally:
        server.stop()
    return out


def bench_skip(root: str, rounds: int) -> dict[str, Any]:
    results: dict[str, list[dict[str, dict[str, Any]]]] = {"heads": [], "watermark": []}
    for r in range(rounds):
        data_dir, last = _kill_round(root, acks_before_kill=40 + 20 * r)
        copy = data_dir + "-no-heads"
        shutil.copytree(data_dir, copy)
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(copy, "heads"))
        results["heads"].append(_recover(data_dir, last))
        results["watermark"].append(_recover(copy, last))
        shutil.rmtree(data_dir, ignore_errors=True)
        shutil.rmtree(copy, ignore_errors=True)
    table: dict[str, Any] = {}
    for mode, runs in results.items():
        for name in runs[0]:
            skipped = [run[name]["skipped"] for run in runs]
            tombs = [run[name]["tombstone"] for run in runs]
            silent = sum(
                1 for run in runs if run[name]["skipped"] > 0 and not run[name]["tombstone"]
            )
            table[f"{mode}/{name}"] = {
                "skipped_median": statistics.median(skipped),
                "skipped_max": max(skipped),
                "tombstone_median": statistics.median(tombs),
                "tombstone_max": max(tombs),
                "silent_skips": silent,
                "reasons": sorted({run[name]["reason"] for run in runs} - {""}),
            }
    return {"rounds": rounds, "table": table}


# -- pause ------------------------------------------------------------------------------


async def _pause_latencies(root: str, pauses: int, release: bool) -> list[float]:
    path = tempfile.mkdtemp(prefix="pause-", dir=root)
    saved = _durability.RELEASE_AFTER_S
    _durability.RELEASE_AFTER_S = saved if release else 3600.0
    out: list[float] = []
    try:
        async with open_engine(path) as engine:
            await engine.put_topic("t", {"durability": "disk"})
            await engine.write("t", [{"data": 0}])
            for i in range(pauses):
                await trio.sleep(2.5 * saved)  # two release passes certainly ran
                t0 = time.perf_counter()
                await engine.write("t", [{"data": i}])
                out.append(time.perf_counter() - t0)
    finally:
        _durability.RELEASE_AFTER_S = saved
        shutil.rmtree(path, ignore_errors=True)
    return out


def bench_pause(root: str, pauses: int) -> dict[str, Any]:
    on: list[float] = []
    off: list[float] = []
    for _ in range(2):  # alternate, so both see the same load
        on += trio.run(_pause_latencies, root, pauses // 2, True)
        off += trio.run(_pause_latencies, root, pauses // 2, False)
    res: dict[str, Any] = {}
    for label, xs in (("release_on", on), ("release_off", off)):
        xs = sorted(xs)
        res[label] = {
            "n": len(xs),
            "p50_ms": xs[len(xs) // 2] * 1e3,
            "p90_ms": xs[int(len(xs) * 0.9)] * 1e3,
        }
    res["p50_ratio"] = res["release_on"]["p50_ms"] / res["release_off"]["p50_ms"]
    return res


# -- sporadic ---------------------------------------------------------------------------


async def _sporadic(root: str, release_after: float, gaps: list[float]) -> list[float]:
    path = tempfile.mkdtemp(prefix="sporadic-", dir=root)
    saved = _durability.RELEASE_AFTER_S
    _durability.RELEASE_AFTER_S = release_after
    out: list[float] = []
    try:
        async with open_engine(path) as engine:
            await engine.put_topic("t", {"durability": "disk"})
            await engine.write("t", [{"data": 0}])
            for i, gap in enumerate(gaps):
                await trio.sleep(gap)
                t0 = time.perf_counter()
                await engine.write("t", [{"data": i}])
                out.append(time.perf_counter() - t0)
    finally:
        _durability.RELEASE_AFTER_S = saved
        shutil.rmtree(path, ignore_errors=True)
    return out


def bench_sporadic(root: str, writes: int, values: list[float]) -> dict[str, Any]:
    """A ``disk`` topic written at uneven intervals (uniform 50 ms .. 1.5 s, seeded), once
    per ``RELEASE_AFTER_S`` value, alternating halves: the share of writes that waited for a
    synced reservation (slower than 1 ms) and the mean write latency."""
    import random

    rng = random.Random(20)
    gaps = [rng.uniform(0.05, 1.5) for _ in range(writes)]
    lat: dict[float, list[float]] = {v: [] for v in values}
    half = len(gaps) // 2
    for part in (gaps[:half], gaps[half:]):
        for v in values:
            lat[v] += trio.run(_sporadic, root, v, part)
    out: dict[str, Any] = {}
    for v, xs in lat.items():
        out[f"{v:g}"] = {
            "writes": len(xs),
            "paid_share": sum(1 for x in xs if x > 1e-3) / len(xs),
            "mean_ms": statistics.fmean(xs) * 1e3,
            "p50_ms": statistics.median(xs) * 1e3,
        }
    return out


# -- append -----------------------------------------------------------------------------


def bench_slot_store(root: str, n: int = 200_000) -> float:
    """Nanoseconds one change notification spends storing the head (the whole added cost
    of the table on the write path)."""
    import timeit

    from topics.config import TopicConfig
    from topics.log.topic_log import TopicLog

    table = HeadTable.create(root, [])
    assert table is not None
    log = TopicLog("t", 1, TopicConfig())
    table.track(log)
    store = log.listeners[-1]
    try:
        return min(timeit.repeat(store, number=n, repeat=5)) / n * 1e9
    finally:
        table.close()


async def _interleaved(root: str, rounds: int, slice_s: float) -> dict[str, float]:
    path = tempfile.mkdtemp(prefix="interleaved-", dir=root)
    payload = b'"' + b"x" * 62 + b'"'
    records = [{"data": payload}] * 100
    cpu: dict[bool, list[float]] = {True: [], False: []}
    try:
        async with open_engine(path) as engine:
            await engine.put_topic("t", {"durability": "disk"})
            await engine.write("t", records)
            log = engine._registry.topics["t"]
            listeners = log.listeners  # the heads table's store is the only one here
            for _ in range(rounds):
                for on in (True, False):
                    log.listeners = listeners if on else ()
                    n, c0, t0 = 0, time.process_time(), time.perf_counter()
                    while time.perf_counter() - t0 < slice_s:
                        await engine.write("t", records, return_seqs=False)
                        n += 1
                    cpu[on].append((time.process_time() - c0) / n * 1e6)
            log.listeners = listeners
    finally:
        shutil.rmtree(path, ignore_errors=True)
    with_t, without = statistics.median(cpu[True]), statistics.median(cpu[False])
    return {"rounds": rounds, "with_us": with_t, "without_us": without, "ratio": with_t / without}


def bench_heads_append(root: str, repeats: int, duration: float) -> dict[str, Any]:
    create = HeadTable.__dict__["create"]
    cases = [("disk", 1), ("disk", 16), ("fsync", 1), ("fsync", 16)]
    raw: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    for repeat in range(repeats):
        # ABBA: with/without, then without/with, so neither side always runs first.
        for table in (True, False) if repeat % 2 == 0 else (False, True):
            HeadTable.create = create if table else classmethod(lambda cls, *a: None)  # type: ignore[method-assign,assignment]
            try:
                for durability, writers in cases:
                    r = trio.run(bench_append, root, durability, writers, duration)
                    key = f"{durability}/{writers}/{'heads' if table else 'none'}"
                    raw.setdefault(key, []).append(r["records_per_s"])
                    cpu.setdefault(key, []).append(r["cpu_us_per_write"])
            finally:
                HeadTable.create = create  # type: ignore[method-assign]
    out: dict[str, Any] = {}
    for durability, writers in cases:
        with_t = statistics.median(raw[f"{durability}/{writers}/heads"])
        without = statistics.median(raw[f"{durability}/{writers}/none"])
        cpu_with = statistics.median(cpu[f"{durability}/{writers}/heads"])
        cpu_without = statistics.median(cpu[f"{durability}/{writers}/none"])
        out[f"{durability}/{writers}"] = {
            "heads_records_per_s": with_t,
            "none_records_per_s": without,
            "ratio": with_t / without,
            # Process CPU per 100-record write: far steadier than rates on a shared box.
            "heads_cpu_us_per_write": cpu_with,
            "none_cpu_us_per_write": cpu_without,
            "cpu_ratio": cpu_with / cpu_without,
        }
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="skip,pause,sporadic,append")
    ap.add_argument("--sporadic-writes", type=int, default=40)
    ap.add_argument("--release-after", default="0.1,1")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pauses", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    root = args.dir or tempfile.mkdtemp(prefix="bench-crash-heads-")
    only = set(args.only.split(","))
    report: dict[str, Any] = {"loadavg_start": os.getloadavg()}
    if "skip" in only:
        report["skip"] = bench_skip(root, args.rounds)
        print(f"## seqs skipped by a SIGKILL ({args.rounds} rounds)")
        print(
            "| recovery | topic | skipped median / max | crash tombstone median / max | silent skips |"
        )
        for key, row in report["skip"]["table"].items():
            mode, name = key.split("/")
            print(
                f"| {mode} | {name} | {row['skipped_median']:g} / {row['skipped_max']} | "
                f"{row['tombstone_median']:g} / {row['tombstone_max']} {row['reasons']} | "
                f"{row['silent_skips']} |"
            )
    if "pause" in only:
        report["pause"] = p = bench_pause(root, args.pauses)
        print("## a disk write after a pause (release on = waits one synced reservation)")
        for label in ("release_on", "release_off"):
            row = p[label]
            print(f"{label}: n={row['n']} p50 {row['p50_ms']:.3f} ms  p90 {row['p90_ms']:.3f} ms")
        print(f"p50 ratio on/off: {p['p50_ratio']:.2f}")
    if "sporadic" in only:
        values = [float(v) for v in args.release_after.split(",")]
        report["sporadic"] = sp = bench_sporadic(root, args.sporadic_writes, values)
        print("## a disk topic written every 50 ms .. 1.5 s, by RELEASE_AFTER_S")
        for key, row in sp.items():
            print(
                f"{key} s: {row['writes']} writes, {row['paid_share']:.0%} waited for a "
                f"reservation, mean {row['mean_ms']:.3f} ms, p50 {row['p50_ms']:.3f} ms"
            )
    if "append" in only:
        report["append"] = a = bench_heads_append(root, args.repeats, args.duration)
        report["slot_store_ns"] = bench_slot_store(root)
        print(f"one head store (per change notification): {report['slot_store_ns']:.0f} ns")
        report["interleaved"] = il = trio.run(_interleaved, root, 30, 0.3)
        print(
            f"CPU per 100-record disk write, one engine, store on/off alternating "
            f"{il['rounds']} times: {il['with_us']:.1f} / {il['without_us']:.1f} us, "
            f"ratio {il['ratio']:.3f}"
        )
        print("## append records/s with / without the heads table (medians, same run)")
        for key, row in a.items():
            print(
                f"{key}: {row['heads_records_per_s']:,.0f} / {row['none_records_per_s']:,.0f}"
                f"  ratio {row['ratio']:.3f}; CPU per write {row['heads_cpu_us_per_write']:.1f}"
                f" / {row['none_cpu_us_per_write']:.1f} us, ratio {row['cpu_ratio']:.3f}"
            )
    report["loadavg_end"] = os.getloadavg()
    print(f"load average: {report['loadavg_start']} -> {report['loadavg_end']}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    if not args.dir:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
