"""Scheduled jobs, dedupe keys and redrive (issue 19). Prints a table; never asserts.

In-process (the async Engine, memory-only), the same N jobs of the queue bench's shape:
  * write: N jobs in batches of 100 — plain, scheduled (``deliver_at`` on every job), keyed
    (a distinct ``dedupe_key`` each, until_ack) — jobs/s of the writes alone;
  * drain: W workers claim (max B) and ack the N jobs — plain, and scheduled jobs once
    their time came (all due at once: the timer heap pops them on the first claim);
  * redrive: N dead-lettered jobs moved back with ``redrive(max=M)`` calls — jobs/s, and
    over HTTP (``topics-server --memory``, ``POST /v0/topics/dlq/redrive``).

Each measurement is repeated ``--repeat`` times, the variants interleaved (reversed every
other round) so a noisy neighbour hits them alike; medians are printed.

    python bench/queue_jobs.py [--jobs 20000] [--workers 16] [--batch 16] [--repeat 5]
                               [--redrive-max 1000] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import trio

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from queues import PRODUCE_BATCH, LeanHttp, _record, _start_topics_server

import topics

WRITES = ("plain", "scheduled", "keyed")


def _job(i: int, kind: str, due: int) -> dict[str, Any]:
    record = _record(i)
    if kind == "scheduled":
        record["deliver_at"] = due
    elif kind == "keyed":
        record["dedupe_key"] = f"job-{i}"
    return record


async def _write_and_drain(n: int, workers: int, batch: int, kind: str) -> tuple[float, float]:
    """(write jobs/s, drain jobs/s) of ``n`` jobs of ``kind``."""
    async with topics.open_engine(None) as engine:
        await engine.put_topic("jobs", {"type": "queue"})
        due = engine.clock.now_ms() + 200  # after the writes; the drain waits for it
        batches = [
            [_job(i, kind, due) for i in range(lo, min(n, lo + PRODUCE_BATCH))]
            for lo in range(0, n, PRODUCE_BATCH)
        ]
        t0 = time.perf_counter()
        for records in batches:
            await engine.write("jobs", records, return_seqs=False)
        write_s = time.perf_counter() - t0
        if kind == "scheduled":
            await trio.sleep(max(0, due - engine.clock.now_ms()) / 1000)
        acked = 0
        done = trio.Event()

        async def worker(k: int) -> None:
            nonlocal acked
            while not done.is_set():
                res = await engine.claim("jobs", node=f"w{k}", max=batch)
                if not res.count:
                    with trio.move_on_after(0.05):
                        await engine.wait_claimable("jobs")
                    continue
                await engine.ack("jobs", node=f"w{k}", seqs=res.seqs, lease_ids=res.lease_ids)
                acked += res.count
                if acked >= n:
                    done.set()
                await trio.lowlevel.checkpoint()

        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for k in range(workers):
                nursery.start_soon(worker, k)
        drain_s = time.perf_counter() - t0
    return n / write_s, n / drain_s


async def _dead_letters(engine: Any, n: int) -> None:
    await engine.put_topic("dlq")
    await engine.put_topic("jobs", {"type": "queue", "max_deliveries": 1, "dead_letter": "dlq"})
    for lo in range(0, n, PRODUCE_BATCH):
        records = [_record(i) for i in range(lo, min(n, lo + PRODUCE_BATCH))]
        await engine.write("jobs", records, return_seqs=False)
    while (await engine.get_topic("jobs", touch=False)).count:
        res = await engine.claim("jobs", node="w", max=1000)
        if res.count:
            await engine.nack("jobs", node="w", seqs=list(res.seqs))


async def _redrive_inproc(n: int, per_call: int) -> float:
    async with topics.open_engine(None) as engine:
        await _dead_letters(engine, n)
        t0 = time.perf_counter()
        moved = 0
        while moved < n:
            moved += (await engine.redrive("dlq", max=per_call)).moved
        return n / (time.perf_counter() - t0)


def _redrive_http(n: int, per_call: int) -> float:
    proc, host, port = _start_topics_server()
    try:
        http = LeanHttp(host, port)
        http.call("PUT", "/v0/topics/dlq", {})
        http.call(
            "PUT", "/v0/topics/jobs", {"type": "queue", "max_deliveries": 1, "dead_letter": "dlq"}
        )
        for lo in range(0, n, PRODUCE_BATCH):
            body = {"records": [_record(i) for i in range(lo, min(n, lo + PRODUCE_BATCH))]}
            http.call("POST", "/v0/topics/jobs", body)
        while http.call("GET", "/v0/topics/jobs")["count"]:
            res = http.call("POST", "/v0/topics/jobs/claim", {"node": "w", "max": 1000})
            seqs = [j["$seq"] for j in res["claimed"]]
            if seqs:
                http.call("POST", "/v0/topics/jobs/nack", {"node": "w", "seqs": seqs})
        t0 = time.perf_counter()
        moved = 0
        while moved < n:
            moved += http.call("POST", "/v0/topics/dlq/redrive", {"max": per_call})["moved"]
        return n / (time.perf_counter() - t0)
    finally:
        proc.terminate()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--redrive-max", type=int, default=1000)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    n, w, b = args.jobs, args.workers, args.batch
    from topics._core import IMPLEMENTATION

    print(
        f"queue jobs: {n:,} jobs, {w} workers, batch {b}, redrive max {args.redrive_max}, "
        f"core={IMPLEMENTATION}, loadavg {os.getloadavg()[0]:.2f}, repeat {args.repeat}"
    )
    plan: dict[str, Callable[[], Any]] = {
        kind: (lambda kind=kind: trio.run(_write_and_drain, n, w, b, kind)) for kind in WRITES
    }
    plan["redrive_inproc"] = lambda: trio.run(_redrive_inproc, n, args.redrive_max)
    plan["redrive_http"] = lambda: _redrive_http(n, args.redrive_max)
    got: dict[str, list[Any]] = {k: [] for k in plan}
    load = [os.getloadavg()[0]]
    for rep in range(args.repeat):
        order = list(plan.items())
        for key, run in order[::-1] if rep % 2 else order:
            got[key].append(run())
            load.append(os.getloadavg()[0])
    out: dict[str, Any] = {"jobs": n, "workers": w, "batch": b, "repeat": args.repeat}
    print(f"{'variant':<18} {'write jobs/s':>13} {'drain jobs/s':>13}")
    for kind in WRITES:
        write = statistics.median(r[0] for r in got[kind])
        drain = statistics.median(r[1] for r in got[kind])
        out[f"{kind}_write_jobs_s"], out[f"{kind}_drain_jobs_s"] = round(write), round(drain)
        out[f"{kind}_write_all"] = [round(r[0]) for r in got[kind]]
        out[f"{kind}_drain_all"] = [round(r[1]) for r in got[kind]]
        print(f"{kind:<18} {write:>13,.0f} {drain:>13,.0f}")
    for key in ("redrive_inproc", "redrive_http"):
        rate = statistics.median(got[key])
        out[f"{key}_jobs_s"], out[f"{key}_all"] = round(rate), [round(r) for r in got[key]]
        print(f"{key:<18} {rate:>13,.0f} jobs/s moved")
    out["loadavg_1m_start"], out["loadavg_1m_max"] = round(load[0], 2), round(max(load), 2)
    print(f"(medians; loadavg {load[0]:.2f} -> max {max(load):.2f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, sort_keys=True)
            f.write("\n")


if __name__ == "__main__":
    main()
