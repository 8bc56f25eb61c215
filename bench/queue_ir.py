"""A fixed in-process queue workload to count instructions under callgrind (issue 19's
"costs nothing when unused" check). Prints nothing; never asserts.

N plain jobs (the queue bench's record shape) written in batches of 100, then drained by
16 worker tasks (claim max 16 + ack). Run it at two sizes and take the difference, so the
interpreter's start-up and imports cancel out::

    for n in 2000 12000; do
      PYTHONPATH=$TREE valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.$n \\
        .venv/bin/python bench/queue_ir.py $n
    done   # per job: (Ir(12000) - Ir(2000)) / 10000, from each file's "summary:" line
"""

from __future__ import annotations

import sys

import trio

import topics

PAD = "x" * 48


async def main(n: int) -> None:
    async with topics.open_engine(None) as engine:
        await engine.put_topic("jobs", {"type": "queue"})
        for lo in range(0, n, 100):
            records = [{"data": {"job": i, "pad": PAD}} for i in range(lo, min(n, lo + 100))]
            await engine.write("jobs", records, return_seqs=False)
        acked = 0

        async def worker(k: int) -> None:
            nonlocal acked
            while acked < n:
                res = await engine.claim("jobs", node=f"w{k}", max=16)
                if not res.count:
                    await trio.lowlevel.checkpoint()
                    continue
                await engine.ack("jobs", node=f"w{k}", seqs=res.seqs, lease_ids=res.lease_ids)
                acked += res.count

        async with trio.open_nursery() as nursery:
            for k in range(16):
                nursery.start_soon(worker, k)


if __name__ == "__main__":
    trio.run(main, int(sys.argv[1]))
