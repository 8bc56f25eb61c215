"""The /v0 calls as values: request building and response parsing, with no I/O (STYLE §4).

Every public method of :class:`topics.Client` and :class:`topics.AsyncClient` is one
:class:`Call` built here and run by the sync or async driver, so the two clients cannot
drift apart: same paths, bodies, result types and error mapping. One module per area:
:mod:`.call` (the value, the JSON encoding, the paths), :mod:`.topic_set`, :mod:`.records`
(writes, reads, deletes), :mod:`.cursors`, :mod:`.routers`, :mod:`.queues`, :mod:`.probes`.
The drivers reach them all through this package (``from . import _protocol as p``).

Rules:
1. Results are the in-process API's types (``topics.types``, ``topics.router_types``,
   ``topics.queue_types``), so code moves between ``topics.open`` and ``Client`` by changing
   one line. Unknown response members are ignored (contract §0.1).
2. A record's ``data``/``meta`` given as ``bytes`` is already-encoded JSON: it is spliced
   into the request body verbatim, never decoded and re-encoded (``1.50`` stays ``1.50``).
   Any other value is encoded once with ujson (NaN/Infinity refused, as the engine does).
3. Names are checked with the engine's own rules before anything is sent, so a bad name
   is the same ``invalid_request`` embedded and remote (and never becomes another path).
4. A diff answer keeps the server's ``records`` bytes as ``records_json`` when the body has
   the server's layout (checked, not trusted: the span must parse as exactly one array);
   otherwise the records are re-encoded from the parsed body.
5. ``idempotent`` says whether a call may be sent again after a lost answer: reads,
   PUT/DELETE upserts, ack/nack/extend, and writes that carry an ``idempotency_key``.
"""

from __future__ import annotations

from .call import Call, Reply, dumps
from .cursors import cursor_info, delete_cursor, get_cursor, list_cursors, put_cursor
from .probes import metrics, probe
from .queues import ack, claim, claim_result, extend, nack, redrive
from .records import delete_records, diff, split_array, tombstone, write, write_body
from .routers import delete_router, get_router, list_routers, put_router, router_config, router_info
from .topic_set import delete_topic, get_topic, list_topics, put_topic, topic_config, topic_state

__all__ = [
    "Call",
    "Reply",
    "ack",
    "claim",
    "claim_result",
    "cursor_info",
    "delete_cursor",
    "delete_records",
    "delete_router",
    "delete_topic",
    "diff",
    "dumps",
    "extend",
    "get_cursor",
    "get_router",
    "get_topic",
    "list_cursors",
    "list_routers",
    "list_topics",
    "metrics",
    "nack",
    "probe",
    "put_cursor",
    "put_router",
    "put_topic",
    "redrive",
    "router_config",
    "router_info",
    "split_array",
    "tombstone",
    "topic_config",
    "topic_state",
    "write",
    "write_body",
]
