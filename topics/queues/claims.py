"""The claim passes of the queue endpoints (``_queue_ops`` rule 2): who asked for what in
one coalescing window, how the jobs taken for a window are dealt out, and which of the
seqs an ack, nack or extend names its node really holds.

It sits below ``state.py``: the projection hands out ``Taken`` jobs and keeps the open
``Cohort``, so this module takes the projection's leases rather than the projection.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..log.cold_segment import Segment

if TYPE_CHECKING:
    from .._storage.wal import WalTicket
    from .leases import Lease

__all__ = ["Claim", "Cohort", "Taken", "deal", "seq_of", "split_held"]


@dataclass(slots=True)
class Taken:
    """One job handed out by a claim pass (before it is leased)."""

    seq: int
    seg: Segment
    idx: int


@dataclass(slots=True, eq=False)
class Claim:
    """One claimer in a pass: what it asked for and what it got."""

    node: str
    want: int
    lease_ms: int
    fragments: list[bytes] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    lease_ids: list[str] = field(default_factory=list)
    ticket: WalTicket | None = None


@dataclass(slots=True, eq=False)
class Cohort:
    """The claimers of one coalescing window (_queue_ops rule 2)."""

    deadline: float
    members: list[Claim] = field(default_factory=list)
    served: bool = False


def split_held(
    leases: Mapping[int, Lease], node: str, refs: list[tuple[int, str | None]]
) -> tuple[list[int], list[int]]:
    """Split requested seqs into those ``node`` holds (each once) and the skipped rest,
    by a queue's ``QueueState.leases``."""
    held: list[int] = []
    skipped: list[int] = []
    seen: set[int] = set()
    for seq, lease_id in refs:
        # (q.held inlined: once per job of every ack, nack and extend.)
        lease = leases.get(seq)
        if (
            lease is not None
            and lease.node == node
            and (lease_id is None or lease.lease_id == lease_id)
            and seq not in seen
        ):
            held.append(seq)
            seen.add(seq)
        else:
            skipped.append(seq)
    return held, skipped


def seq_of(job: Taken) -> int:
    return job.seq


def deal(taken: list[Taken], wants: list[int]) -> list[list[Taken]]:
    """Divide ``taken`` among claimers in proportion to what each wants (largest
    remainder, ties to the earlier arrival), dealing round-robin so each share mixes
    reclaimed and fresh jobs."""
    n, total = len(taken), sum(wants)
    quotas = [n * w // total for w in wants]
    left = n - sum(quotas)
    by_remainder = sorted(range(len(wants)), key=lambda i: -(n * wants[i] % total))
    for i in by_remainder:
        if left == 0:
            break
        if quotas[i] < wants[i]:
            quotas[i] += 1
            left -= 1
    shares: list[list[Taken]] = [[] for _ in wants]
    pos = 0
    while pos < n:
        before = pos
        for i, quota in enumerate(quotas):
            if len(shares[i]) < quota and pos < n:
                shares[i].append(taken[pos])
                pos += 1
        if pos == before:  # cannot happen (quotas sum to n); never spin on a bug
            shares[0].extend(taken[pos:])
            break
    return shares
