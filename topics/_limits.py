"""Limits of the contract that more than one layer needs, defined once (§11).

Each layer used to keep its own copy (the 1 MiB diff budget was written five times); the
engine, the storage reader, the HTTP routes, the watch options and the client all import
it from here. This module imports nothing, so any layer may depend on it. (The contract
model in tests/support keeps its own values on purpose: an oracle that imported these
would agree with a wrong one.)
"""

from __future__ import annotations

__all__ = ["DIFF_BYTE_BUDGET", "DIFF_BYTE_CEILING"]

#: Default byte budget of one diff answer or watch batch: 1 MiB of rendered records (one
#: record always goes out, however large).
DIFF_BYTE_BUDGET = 1 << 20
#: What an asked-for budget (``max_batch_bytes``) is clamped to.
DIFF_BYTE_CEILING = 8 << 20
