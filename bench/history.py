"""History bigger than memory (issue 31): sealed segment files of ``disk`` topics as the
store, memory a bounded cache. Prints numbers and the targets' verdicts; never asserts.

    python bench/history.py [--records 2000000] [--record-bytes 64] [--topics 4]
        [--cache-mb 32,1024] [--reads 200] [--rounds 3] [--tail 5000] [--dir DIR] [--keep]
        [--segment-bytes N] [--page-cache drop|keep] [--no-spark] [--baseline OLD.json]
        [--quick] [--json out.json]

Phases:
(a) load: ``--records`` records (``--record-bytes`` of JSON data each) written in-process in
    10,000-record batches round-robin into ``--topics`` ``disk`` topics; clean close; bytes
    on disk and the write rate.
(b) per cache size (``TOPICS_CACHE_BYTES`` for topics-server; ``cache_bytes`` for
    ``topics.open``): time from spawning topics-server to ready; RSS at rest; ``--reads``
    diffs of limit 1000 spread over every topic's whole range, first touch after the
    start ("cold", with the segment files dropped from the page cache unless
    ``--page-cache keep``), then reads the cache holds ("hot": the same ones again, or the
    first of them that fit in the cache, repeated): records/s and cold p50/p99, over HTTP
    and in-process, each over ``--rounds`` fresh starts (medians; the ratio is the median
    of each round's own); a full scan over HTTP (every topic from 0 to its head, limit 1000)
    with the server's VmRSS sampled every 20 ms; then ``--tail`` records written after the
    last checkpoint, SIGKILL, and the time to ready again.
(c) offline: the whole directory read with ``topics.Reader`` (what Spark's path mode
    opens), and a Spark path-mode ``count()`` per topic when pyspark and java are there.

Until issue 31's knob exists (``Limits.cache_bytes`` / ``topics.open(cache_bytes=)``)
the cache sizes are not honoured: the bench says so and runs anyway. ``--segment-bytes``
changes the segment size of the in-process load only (the unit test's tiny segments).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import _history_targets as targets  # noqa: E402
from _history_offline import offline  # noqa: E402
from _machine import facts, utc_now  # noqa: E402

import topics  # noqa: E402
from tests.support.server import ServerProcess, spawn_server  # noqa: E402
from topics.log import topic_log  # noqa: E402

MIB = 1 << 20
LIMIT = 1000
BATCH = 10_000
ENV = {"TOPICS_ALLOW_INSECURE_NO_AUTH": "1"}
METRICS = (
    "topics_cache_bytes",
    "topics_cache_hits_total",
    "topics_cache_misses_total",
    "topics_cache_evictions_total",
)


# -- the knob -----------------------------------------------------------------------------


def cache_knob() -> dict[str, bool]:
    """Whether this tree honours a cache size: for the server (a Limits field, read from
    TOPICS_CACHE_BYTES) and for ``topics.open``."""
    fields = {f.name for f in dataclasses.fields(topics.Limits)}
    return {
        "server": "cache_bytes" in fields,
        "inproc": "cache_bytes" in inspect.signature(topics.open).parameters
        or "cache_bytes" in fields,
    }


def open_cached(path: str, cache_bytes: int) -> topics.SyncEngine:
    if "cache_bytes" in inspect.signature(topics.open).parameters:
        return topics.open(path, cache_bytes=cache_bytes)  # type: ignore[call-arg]
    if "cache_bytes" in {f.name for f in dataclasses.fields(topics.Limits)}:
        return topics.open(path, limits=topics.Limits(cache_bytes=cache_bytes))  # type: ignore[call-arg]
    return topics.open(path)


# -- small measures -----------------------------------------------------------------------


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def disk_bytes(path: str) -> dict[str, int]:
    """Allocated and apparent bytes under ``path``, and the segment files among them."""
    alloc = apparent = segs = seg_bytes = 0
    for dirpath, _, names in os.walk(path):
        for name in names:
            st = os.stat(os.path.join(dirpath, name))
            alloc += st.st_blocks * 512
            apparent += st.st_size
            if name.endswith(".seg"):
                segs += 1
                seg_bytes += st.st_size
    return {"allocated": alloc, "apparent": apparent, "segment_files": segs,
            "segment_bytes": seg_bytes}  # fmt: skip


def drop_page_cache(path: str) -> int:
    """Ask the kernel to forget every file under ``path`` (clean pages only)."""
    n = 0
    for dirpath, _, names in os.walk(path):
        for name in names:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                n += 1
            finally:
                os.close(fd)
    return n


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


class RssSampler:
    """The peak VmRSS of ``pid`` while the block runs, sampled every 20 ms."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak = pid, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, rss_mib(self.pid))

    def __enter__(self) -> RssSampler:
        self.peak = rss_mib(self.pid)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mib(self.pid))


# -- (a) load -----------------------------------------------------------------------------


def topic_names(n: int) -> list[str]:
    return [f"history-{i}" for i in range(n)]


def payload(record_bytes: int) -> Callable[[int], bytes]:
    pad = max(0, record_bytes - len(b'{"i":0000000000,"p":""}'))
    template = b'{"i":%10d,"p":"' + b"x" * pad + b'"}'
    return lambda i: template % i


def load(path: str, n: int, record_bytes: int, names: list[str]) -> dict[str, Any]:
    make = payload(record_bytes)
    batch = max(1, min(BATCH, n // (4 * len(names))))  # every topic gets several batches
    heads = {name: 0 for name in names}
    t0 = time.perf_counter()
    with topics.open(path) as db:
        for name in names:
            db.put_topic(name, {"durability": "disk"})
        for k, start in enumerate(range(0, n, batch)):
            records = [{"data": make(i)} for i in range(start, min(n, start + batch))]
            db.write(names[k % len(names)], records, return_seqs=False)
            heads[names[k % len(names)]] += len(records)
        wrote = time.perf_counter() - t0
    closed = time.perf_counter() - t0
    return {
        "records": n,
        "record_bytes": len(make(0)),
        "topics": len(names),
        "seconds": round(closed, 2),
        "records_s": n / wrote if wrote else 0.0,
        "close_s": round(closed - wrote, 2),
        "disk": disk_bytes(path),
        "heads": heads,
    }


# -- reads --------------------------------------------------------------------------------


def positions(heads: dict[str, int], reads: int, seed: int = 31) -> list[tuple[str, int]]:
    """``reads`` diff starts spread evenly over every topic's whole range, in shuffled
    order (neighbours in time are far apart on disk)."""
    names = list(heads)
    out = []
    for i in range(reads):
        name = names[i % len(names)]
        span = max(0, heads[name] - LIMIT)
        out.append((name, int(span * ((i // len(names)) + 0.5) / -(-reads // len(names)))))
    random.Random(seed).shuffle(out)
    return out


def hot_set(
    spots: list[tuple[str, int]], cache_bytes: int, record_bytes: int
) -> list[tuple[str, int]]:
    """The reads the cache can hold all at once: the cache keeps whole segments, and a
    diff's records (~64 B of frame beside each record's data) may straddle one more."""
    seg = topic_log.SEGMENT_TARGET_BYTES
    per_read = (-(-LIMIT * (record_bytes + 64) // seg) + 1) * seg
    fit = max(1, min(len(spots), cache_bytes // per_read))
    return spots[:fit]


def timed_reads(diff: Callable[[str, int], int], spots: list[tuple[str, int]]) -> dict[str, Any]:
    lat: list[float] = []
    got = 0
    t0 = time.perf_counter()
    for name, start in spots:
        t = time.perf_counter()
        got += diff(name, start)
        lat.append(time.perf_counter() - t)
    took = time.perf_counter() - t0
    return {"records_s": got / took if took else 0.0, "records": got, "latencies": lat}


def tail_spots(heads: dict[str, int]) -> list[tuple[str, int]]:
    """Each topic's newest records: in memory whatever the cache, so reading them first
    warms the code paths and the connection without touching a cold segment."""
    return [(name, max(0, head - LIMIT)) for name, head in heads.items()]


def cold_hot(diff: Callable[[str, int], int], spots: list[tuple[str, int]], hot: list[tuple[str, int]],
             warmup: list[tuple[str, int]], path: str, drop: bool) -> dict[str, Any]:  # fmt: skip
    timed_reads(diff, warmup * 3)
    if drop:
        drop_page_cache(path)
    cold = timed_reads(diff, spots)
    timed_reads(diff, hot)  # warm what fits (already warm when hot is a prefix of spots)
    repeated = (hot * -(-len(spots) // len(hot)))[: len(spots)]
    return {"cold": cold, "hot": timed_reads(diff, repeated), "reads": len(spots),
            "hot_distinct": len(hot)}  # fmt: skip


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over rounds (each a fresh start: its cold reads are cold again); the ratio
    is the median of each round's own cold/hot, which shares that round's load."""
    ratios = [
        r["cold"]["records_s"] / r["hot"]["records_s"] for r in rounds if r["hot"]["records_s"]
    ]
    cold_lat = [x for r in rounds for x in r["cold"]["latencies"]]
    hot_lat = [x for r in rounds for x in r["hot"]["latencies"]]
    return {
        "rounds": len(rounds),
        "reads": rounds[0]["reads"],
        "hot_distinct": rounds[0]["hot_distinct"],
        "cold_records_s": statistics.median(r["cold"]["records_s"] for r in rounds),
        "hot_records_s": statistics.median(r["hot"]["records_s"] for r in rounds),
        "cold_over_hot": statistics.median(ratios) if ratios else None,
        "cold_over_hot_rounds": ratios,
        "cold_p50_ms": pct(cold_lat, 0.50) * 1e3,
        "cold_p99_ms": pct(cold_lat, 0.99) * 1e3,
        "hot_p50_ms": pct(hot_lat, 0.50) * 1e3,
    }


THROTTLED = {"count": 0}


def post(client: httpx.Client, url: str, body: dict[str, object]) -> httpx.Response:
    """POST as a well-behaved client does: a 429/503 answer (the server's CPU-pressure
    shedding on a busy machine) is retried after its Retry-After, and counted."""
    for _ in range(200):
        res = client.post(url, json=body)
        if res.status_code not in (429, 503):
            res.raise_for_status()
            return res
        THROTTLED["count"] += 1
        time.sleep(min(float(res.headers.get("retry-after", "0.1") or 0.1), 2.0))
    res.raise_for_status()
    return res


def http_diff(client: httpx.Client) -> Callable[[str, int], int]:
    def diff(name: str, start: int) -> int:
        res = post(client, f"/v0/topics/{name}/diff", {"from_seq": start, "limit": LIMIT})
        return len(res.json()["records"])

    return diff


# -- the server ---------------------------------------------------------------------------


def start(path: str | None, cache_bytes: int | None) -> tuple[ServerProcess, httpx.Client, float]:
    """A topics-server on ``path``; the client and the seconds from spawn to ready."""
    env = dict(ENV)
    if cache_bytes is not None:
        env["TOPICS_CACHE_BYTES"] = str(cache_bytes)
    args = ("--data-dir", path) if path else ()
    t0 = time.perf_counter()
    server = spawn_server(env, *args)
    client = server.client()
    while client.get("/v0/ready").status_code != 200:
        if time.perf_counter() - t0 > 600:
            raise RuntimeError(f"topics-server never got ready:\n{server.stderr()}")
        time.sleep(0.005)
    return server, client, time.perf_counter() - t0


def stop(server: ServerProcess, client: httpx.Client) -> None:
    client.close()
    code = server.stop()
    if code != 0:
        raise RuntimeError(f"topics-server exited {code}:\n{server.stderr()}")


def cache_metrics(client: httpx.Client) -> dict[str, Any]:
    res = client.get("/v0/metrics", headers={"Accept": "application/json"})
    body = res.json() if res.status_code == 200 else {}
    return {name: body[name] for name in METRICS if name in body}


def empty_server() -> dict[str, Any]:
    """The floor every server figure stands on: a server on an empty data directory."""
    path = tempfile.mkdtemp(prefix="history-empty-")
    try:
        server, client, ready = start(path, None)
        time.sleep(0.5)
        rss = rss_mib(server.proc.pid)
        stop(server, client)
    finally:
        shutil.rmtree(path, ignore_errors=True)
    return {"ready_s": ready, "rss_mib": rss}


def full_scan(client: httpx.Client, heads: dict[str, int]) -> int:
    got = 0
    for name in heads:
        start = 0
        while True:
            res = post(client, f"/v0/topics/{name}/diff", {"from_seq": start, "limit": LIMIT})
            body = res.json()
            got += len(body["records"])
            start = body["next_from_seq"]
            if body["caught_up"]:
                break
    return got


def server_phase(path: str, cache_bytes: int, heads: dict[str, int], spots: list[tuple[str, int]],
                 hot: list[tuple[str, int]], args: argparse.Namespace, empty_rss: float) -> dict[str, Any]:  # fmt: skip
    out: dict[str, Any] = {}
    drop = args.page_cache == "drop"
    if drop:
        drop_page_cache(path)
    server, client, ready = start(path, cache_bytes)
    try:
        time.sleep(0.5)  # let the start's garbage settle before calling it "at rest"
        rss = rss_mib(server.proc.pid)
        rest_metrics = cache_metrics(client)
        held = sum(heads.values())
        beyond = (rss - empty_rss) * MIB - rest_metrics.get("topics_cache_bytes", 0)
        out["rest"] = {"rss_mib": rss, "metrics": rest_metrics,
                       "bytes_per_record_beyond_cache": beyond / held if held else None}  # fmt: skip
        rounds = [cold_hot(http_diff(client), spots, hot, tail_spots(heads), path, drop)]
        http_metrics = cache_metrics(client)
        if drop:
            drop_page_cache(path)
        with RssSampler(server.proc.pid) as sampler:
            t0 = time.perf_counter()
            scanned = full_scan(client, heads)
            took = time.perf_counter() - t0
        out["scan"] = {"records": scanned, "records_s": scanned / took if took else 0.0,
                       "seconds": round(took, 2), "peak_rss_mib": sampler.peak,
                       "rss_after_mib": rss_mib(server.proc.pid), "metrics": cache_metrics(client)}  # fmt: skip
    finally:
        stop(server, client)
    for _ in range(args.rounds - 1):
        server, client, _ = start(path, cache_bytes)
        try:
            rounds.append(cold_hot(http_diff(client), spots, hot, tail_spots(heads), path, drop))
        finally:
            stop(server, client)
    out["http"] = {**summarize(rounds), "metrics": http_metrics}
    out["restart"] = {"clean_ready_s": ready, **kill_restart(path, cache_bytes, heads, args.tail)}
    return out


def kill_restart(path: str, cache_bytes: int, heads: dict[str, int], tail: int) -> dict[str, Any]:
    """Write ``tail`` records (right after a start: after the last checkpoint), SIGKILL,
    and time the restart to ready; the tail's records must all be there."""
    name = next(iter(heads))
    server, client, _ = start(path, cache_bytes)
    try:
        for start_at in range(0, tail, 1000):
            n = min(1000, tail - start_at)
            post(client, f"/v0/topics/{name}", {"records": [{"data": {"tail": 1}}] * n})
        expected = client.get(f"/v0/topics/{name}").json()["head_seq"]
        # `disk` acks once queued for the WAL; its last tick (~50 ms) may die with the
        # process. Past it, the whole tail is in the WAL and nothing of it in a segment.
        time.sleep(0.2)
    finally:
        client.close()
        server.stop(signal.SIGKILL)
    heads[name] = expected
    server, client, ready = start(path, cache_bytes)
    try:
        head = client.get(f"/v0/topics/{name}").json()["head_seq"]
    finally:
        stop(server, client)
    if head != expected:
        raise RuntimeError(f"after SIGKILL {name}'s head is {head}, {expected} were acknowledged")
    return {"kill_ready_s": ready, "tail_records": tail}


# -- in-process ---------------------------------------------------------------------------


def inproc_phase(path: str, cache_bytes: int, heads: dict[str, int], spots: list[tuple[str, int]],
                 hot: list[tuple[str, int]], drop: bool, rounds: int) -> dict[str, Any]:  # fmt: skip
    done, opens = [], []
    metrics: dict[str, Any] = {}
    for _ in range(rounds):
        if drop:
            drop_page_cache(path)
        t0 = time.perf_counter()
        with open_cached(path, cache_bytes) as db:
            opens.append(time.perf_counter() - t0)

            def diff(name: str, start: int) -> int:
                return db.diff(name, from_seq=start, limit=LIMIT).record_count

            done.append(cold_hot(diff, spots, hot, tail_spots(heads), path, drop))
            metrics = inproc_metrics(db)
    return {**summarize(done), "open_s": statistics.median(opens), "metrics": metrics}


def inproc_metrics(db: topics.SyncEngine) -> dict[str, Any]:
    """The cache's counters from the engine's statistics, when it reports them."""

    async def snapshot() -> Any:
        return db.engine.statistics()

    stats = db._call(snapshot)
    return {name: getattr(stats, name.removeprefix("topics_"))
            for name in METRICS if hasattr(stats, name.removeprefix("topics_"))}  # fmt: skip


# -- main ---------------------------------------------------------------------------------


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--record-bytes", type=int, default=64)
    ap.add_argument("--topics", type=int, default=4)
    ap.add_argument("--cache-mb", default="32,1024", help="comma-separated MiB (fractions ok)")
    ap.add_argument("--reads", type=int, default=200, help="cold diffs per cache size")
    ap.add_argument("--tail", type=int, default=5000, help="records written before SIGKILL")
    ap.add_argument("--rounds", type=int, default=3, help="fresh starts per cold/hot measure")
    ap.add_argument("--dir", help="parent of the data directory (default: beside /work)")
    ap.add_argument("--keep", action="store_true", help="keep the data directory")
    ap.add_argument("--segment-bytes", type=int, help="segment target size of the load")
    ap.add_argument("--page-cache", choices=("drop", "keep"), default="drop")
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument("--baseline", help="an earlier run's JSON: judge the offline reads")
    ap.add_argument("--quick", action="store_true", help="smoke sizes")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    if args.quick:
        args.records = min(args.records, 200_000)
        args.reads, args.tail, args.no_spark = min(args.reads, 40), min(args.tail, 2000), True
        args.rounds = min(args.rounds, 2)
    try:
        args.caches = [int(float(x) * MIB) for x in args.cache_mb.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--cache-mb takes comma-separated numbers, got {args.cache_mb!r}")
    if not args.caches or min(args.caches) <= 0 or args.records < args.topics or args.topics < 1:
        ap.error("need cache sizes > 0, at least one topic, and at least one record per topic")
    if args.rounds < 1 or args.reads < 1:
        ap.error("need --rounds >= 1 and --reads >= 1")
    return args


def label(cache_bytes: int) -> str:
    if cache_bytes >= 1 << 30 and cache_bytes % (1 << 30) == 0:
        return f"{cache_bytes >> 30} GiB"
    return f"{cache_bytes / MIB:g} MiB" if cache_bytes >= MIB else f"{cache_bytes >> 10} KiB"


def run(args: argparse.Namespace) -> dict[str, Any]:
    knob = cache_knob()
    if not all(knob.values()):
        print(f"WARNING: this tree does not honour a cache size ({knob}): every cache row "
              "measures the same all-in-memory engine", flush=True)  # fmt: skip
    if args.segment_bytes:
        topic_log.SEGMENT_TARGET_BYTES = args.segment_bytes
    parent = args.dir or str(ROOT.parent)
    path = tempfile.mkdtemp(prefix="history-", dir=parent)
    out: dict[str, Any] = {"started_utc": utc_now(), "machine": facts(), "cache_knob": knob,
                           "page_cache": args.page_cache, "segment_target_bytes": topic_log.SEGMENT_TARGET_BYTES,
                           "data_dir": path}  # fmt: skip
    try:
        print(
            f"loading {args.records:,} records into {args.topics} disk topics in {path} ...",
            flush=True,
        )
        out["load"] = load(path, args.records, args.record_bytes, topic_names(args.topics))
        d = out["load"]["disk"]
        print(f"  {out['load']['records_s']:,.0f} records/s; {d['allocated'] / MIB:,.1f} MiB on disk "
              f"({d['allocated'] / args.records:.1f} B/record, {d['segment_files']} segment files)", flush=True)  # fmt: skip
        heads = dict(out["load"]["heads"])
        out["empty_server"] = empty_server()
        spots = positions(heads, args.reads)
        out["caches"] = []
        for cache in args.caches:
            hot = hot_set(spots, cache, args.record_bytes)
            print(f"cache {label(cache)}: server ...", flush=True)
            entry = {"cache_bytes": cache, "cache_label": label(cache)}
            entry.update(
                server_phase(path, cache, heads, spots, hot, args, out["empty_server"]["rss_mib"])
            )
            print(f"cache {label(cache)}: in-process ...", flush=True)
            entry["inproc"] = inproc_phase(
                path, cache, heads, spots, hot, args.page_cache == "drop", args.rounds
            )
            out["caches"].append(entry)
        out["heads_after"] = heads
        out["offline"] = offline(path, heads, spark=not args.no_spark, baseline=args.baseline)
    finally:
        if not args.keep:
            shutil.rmtree(path, ignore_errors=True)
    out["targets"] = targets.judge(out)
    out["http_throttled_retries"] = THROTTLED["count"]
    out["finished_utc"] = utc_now()
    return out


def report(out: dict[str, Any]) -> None:
    load_ = out["load"]
    print(f"\nhistory: {load_['records']:,} records x {load_['record_bytes']} B in {load_['topics']} "
          f"disk topics; {load_['disk']['allocated'] / MIB:,.1f} MiB on disk; load {load_['records_s']:,.0f} records/s; "
          f"empty server {out['empty_server']['rss_mib']:.1f} MiB, ready in {out['empty_server']['ready_s']:.2f} s")  # fmt: skip
    print("\n".join(targets.render_table(out)))
    for key, o in out["offline"].items():
        rate = f"{o.get('records_s', 0):,.0f} records/s"
        print(f"offline {key}: {o.get('note') or rate}")
    print("\ntargets:")
    for v in out["targets"]:
        verdict = {True: "met", False: "MISSED", None: "not judged"}[v["met"]]
        print(f"  [{verdict}] {v['target']}: {v['measured']}")


def main(argv: list[str]) -> int:
    args = parse(argv)
    out = run(args)
    report(out)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    print(json.dumps({k: v for k, v in out.items() if k != "machine"}, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
