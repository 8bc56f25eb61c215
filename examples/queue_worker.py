"""A queue with two remote workers: ``client.work`` leases, heartbeats, acks and retries.

Starts its own memory-only ``topics-server``, fills a queue, drains it with two worker
threads (one job fails once and is retried after its backoff) and stops.

Run: .venv/bin/python examples/queue_worker.py
"""

from __future__ import annotations

import threading
import time

from http_client import server  # the same throwaway-server helper

import topics


def worker(url: str, node: str, done: list[tuple[str, int]]) -> topics.WorkerStats:
    with (
        topics.Client(url) as client,
        client.work("jobs", node=node, max=4, backoff_ms=100, until_empty=True) as jobs,
    ):
        for job in jobs:
            with job:  # acked on success; an exception nacks it with backoff
                if job.data["n"] == 7 and job.deliveries == 1:
                    raise RuntimeError("flaky job 7 (will be retried)")
                time.sleep(0.01)  # the work
                done.append((node, job.data["n"]))
        return jobs.stats


def main() -> None:
    with server() as url, topics.Client(url) as client:
        client.put_topic("jobs", {"type": "queue", "lease_ms": 5000})
        client.write("jobs", [{"data": {"n": n}} for n in range(20)])

        done: list[tuple[str, int]] = []
        stats: dict[str, topics.WorkerStats] = {}
        threads = [
            threading.Thread(target=lambda n=n: stats.update({n: worker(url, n, done)}))
            for n in ("worker-a", "worker-b")
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # until_empty ends a worker when a claim finds nothing; the retried job may still
        # be in its backoff then, so finish the stragglers.
        client.run_worker("jobs", "worker-c", lambda j: done.append(("worker-c", j.data["n"])),
                          until_empty=True)  # fmt: skip
        for node, s in stats.items():
            print(f"{node}: acked {s.acked}, nacked {s.nacked}, lost {s.lost}")
        print("jobs done:", sorted(n for _, n in done))
        print("queue now:", client.get_topic("jobs").queue)


if __name__ == "__main__":
    main()
