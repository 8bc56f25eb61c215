"""API keys: the ``TOPICS_API_KEYS`` grammar, the hashed key store, scopes and prefixes (§0.2).

Pure: no I/O, no trio, no web framework. Frontends call :meth:`KeyStore.authenticate` with
the presented bearer token and then ask the returned :class:`Principal` what it may do.

Rules:
1. Only SHA-256 digests of the secrets are kept. The plaintext entries are parsed once and
   dropped; nothing here stores, logs or echoes a secret (errors name the entry by position).
2. Fail closed: a malformed entry (empty secret, unknown or empty scope token, empty prefix
   in a non-empty list, duplicate secret) raises ``ValueError`` and the server must not start.
3. Authentication hashes the presented token and compares its digest with *every* stored
   digest using ``hmac.compare_digest``, with no early exit, so neither which key matched nor
   how many leading bytes did leaks through timing.
4. A bare key (no scopes, no prefixes) and an empty scopes field mean all scopes; an empty
   prefixes field means every name. A prefix match is a byte prefix of the raw name.
5. Every route names the scopes it needs in :data:`ROUTE_SCOPES` (the §0.2 table); a route
   that is absent needs no scope (the probes).
6. The allowlist covers every name a request makes the server touch, not only the path's:
   :func:`names_in` yields each topic name a decoded body names (a dead letter, a router's
   source and dest, watched topics, a WebSocket command's topics), and every frontend calls
   :meth:`Principal.check_body` with it before the engine runs, so a refused request changes
   nothing. Each body field of every kind is classified in :data:`NAME_FIELDS` or
   :data:`NAME_FREE_FIELDS`; tests/unit/test_auth_names.py fails on a field in neither, so a
   field added later cannot skip the check by being forgotten.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal, get_args

from .errors import ForbiddenError

__all__ = [
    "ALL_SCOPES",
    "NAME_FIELDS",
    "NAME_FREE_FIELDS",
    "ROUTE_SCOPES",
    "BodyKind",
    "KeyStore",
    "Principal",
    "Scope",
    "bearer_token",
    "names_in",
    "parse_api_keys",
    "required_scopes",
]

Scope = Literal["read", "write", "delete", "admin"]
ALL_SCOPES: frozenset[Scope] = frozenset(get_args(Scope))

# Every spelling §0.2 accepts for a scope token, and what it grants.
_SCOPE_TOKENS: Mapping[str, frozenset[Scope]] = {
    "read": frozenset({"read"}),
    "write": frozenset({"write"}),
    "delete": frozenset({"delete"}),
    "admin": frozenset({"admin"}),
    "r": frozenset({"read"}),
    "w": frozenset({"write"}),
    "d": frozenset({"delete"}),
    "a": frozenset({"admin"}),
    "rw": frozenset({"read", "write"}),
}

_READ: frozenset[Scope] = frozenset({"read"})
_WRITE: frozenset[Scope] = frozenset({"write"})
_READ_WRITE: frozenset[Scope] = frozenset({"read", "write"})
_DELETE: frozenset[Scope] = frozenset({"delete"})
_ADMIN: frozenset[Scope] = frozenset({"admin"})

#: The per-route scope table of §0.2, keyed by (method, route pattern). Routes of other
#: frontends (WebSocket commands) check the same scopes by operation.
ROUTE_SCOPES: Mapping[tuple[str, str], frozenset[Scope]] = {
    ("GET", "/v0/topics"): _READ,
    ("GET", "/v0/topics/{topic}"): _READ,
    ("POST", "/v0/topics/{topic}/diff"): _READ,
    ("GET", "/v0/routers"): _READ,
    ("GET", "/v0/routers/{router}"): _READ,
    ("POST", "/v0/watch"): _READ,
    ("GET", "/v0/watch/{wid}"): _READ,
    ("GET", "/v0/metrics"): _READ,
    # Named cursors: committing is part of reading (a consumer group's position, as
    # Kafka's offset commit needs only READ), forgetting one is a delete.
    ("GET", "/v0/topics/{topic}/cursors"): _READ,
    ("GET", "/v0/topics/{topic}/cursors/{cursor}"): _READ,
    ("PUT", "/v0/topics/{topic}/cursors/{cursor}"): _READ,
    ("DELETE", "/v0/topics/{topic}/cursors/{cursor}"): _DELETE,
    ("POST", "/v0/topics/{topic}"): _WRITE,
    ("POST", "/v0/topics/{topic}/ack"): _WRITE,
    ("POST", "/v0/topics/{topic}/nack"): _WRITE,
    ("POST", "/v0/topics/{topic}/extend"): _WRITE,
    ("POST", "/v0/topics/{topic}/claim"): _READ_WRITE,
    ("GET", "/v0/topics/{topic}/work"): _READ_WRITE,
    ("DELETE", "/v0/topics/{topic}"): _DELETE,
    ("DELETE", "/v0/routers/{router}"): _DELETE,
    ("POST", "/v0/topics/{topic}/delete"): _DELETE,
    ("PUT", "/v0/topics/{topic}"): _ADMIN,
    # Redrive writes to queues it names itself and deletes from the dead-letter topic.
    ("POST", "/v0/topics/{topic}/redrive"): _ADMIN,
    ("PUT", "/v0/routers/{router}"): _ADMIN,
    # A backup reads every topic of every tenant.
    ("GET", "/v0/backup"): _ADMIN,
}


def bearer_token(header: bytes | None) -> bytes:
    """The credential of an ``Authorization: Bearer <key>`` header value; ``b""`` when
    the header is absent, empty or of another scheme (the one parser of every frontend)."""
    if not header:
        return b""
    scheme, _, credential = header.strip().partition(b" ")
    return credential.strip() if scheme.lower() == b"bearer" else b""


def required_scopes(method: str, pattern: str) -> frozenset[Scope]:
    """The scopes a route needs (empty for routes outside the table, e.g. the probes)."""
    return ROUTE_SCOPES.get((method, pattern), frozenset())


# -- names in request bodies (rule 6) ----------------------------------------------------------

#: What a decoded body is: a topic config (PUT /v0/topics/:t), a write body (POST
#: /v0/topics/:t, whose inline ``config`` is a topic config), a router definition, a watch
#: body (POST /v0/watch), or a WebSocket ``subscribe``/``publish`` command.
BodyKind = Literal["topic_config", "write", "router", "watch", "ws_subscribe", "ws_publish"]

#: The body fields that name a topic, per kind (a container such as a write's ``config`` is
#: listed too: its own fields are classified under its kind).
NAME_FIELDS: Mapping[BodyKind, frozenset[str]] = {
    "topic_config": frozenset({"dead_letter"}),
    "write": frozenset({"config"}),
    "router": frozenset({"source", "dest"}),
    "watch": frozenset({"topics"}),
    "ws_subscribe": frozenset({"topic", "topics"}),
    "ws_publish": frozenset({"topic", "config"}),
}

#: Body fields known to name nothing the allowlist covers (tags, nodes, numbers, flags).
#: Every other route's body (diff, delete records, claim/ack/nack/extend) is all of these.
NAME_FREE_FIELDS: frozenset[str] = frozenset(
    {
        # topic config (§0.10)
        "type", "ttl_ms", "cap_records", "cap_bytes", "discard", "durable", "durability",
        "priority", "auto_priority", "auto_create", "idempotency_window_ms", "dedupe_node",
        "lease_ms", "claim_jitter_ms", "max_deliveries", "leases_durable",
        # writes, reads, deletes, queues
        "records", "node", "idempotency_key", "create", "disable_backpressure", "return_seqs",
        "from_seq", "tail", "limit", "include_tags", "include_meta", "include_data", "wait_ms",
        "max_batch_bytes", "before_seq", "match", "max", "seqs", "lease_ids", "delay_ms",
        # named cursors (a cursor name is scoped by its topic, which the path names)
        "cursor", "commit", "seq", "expect_seq",
        # routers (the filter matches tags), watch, WebSocket framing
        "preserve_node", "preserve_tag", "create_dest", "filter", "allow_cycle", "guarantee",
        "heartbeat_ms", "consistency", "op", "request_id",
        # watch prefixes are narrowed to the allowlist by the engine (topics.watch.prefix)
        "topic_prefix", "max_backlog", "on_backlog",
        # compare-and-append and producer fencing (a producer id is not a topic name)
        "expected_head_seq", "producer_id", "epoch",
        # queue jobs: dedupe keys and debounce
        "dedupe", "dedupe_ms", "replace",
        # bounded, filtered and CloudEvents reads (a predicate names record fields only)
        "from_ts", "to_ts", "to_seq", "where", "format", "ce_type_field",
    }
)  # fmt: skip


def names_in(kind: BodyKind, body: object) -> Iterator[tuple[str, str]]:
    """Every (field, topic name) a decoded request body names (rule 6).

    Values of the wrong type are skipped: the engine answers them with 400 before it
    touches anything. ``watch`` and ``ws_subscribe`` bodies name topics by the keys of
    their ``topics`` object (a ``ws_subscribe`` may name one ``topic`` instead).
    """
    if not isinstance(body, Mapping):
        return
    if kind == "topic_config":
        yield from _named(body, ("dead_letter",), "")
    elif kind in ("write", "ws_publish"):
        if kind == "ws_publish":
            yield from _named(body, ("topic",), "")
        config = body.get("config")
        if isinstance(config, Mapping):
            yield from _named(config, ("dead_letter",), "config.")
    elif kind == "router":
        yield from _named(body, ("source", "dest"), "")
    else:  # watch, ws_subscribe
        yield from _named(body, ("topic",), "")
        topics = body.get("topics")
        if isinstance(topics, Mapping):
            yield from (("topic", name) for name in topics if isinstance(name, str))


def _named(
    body: Mapping[str, object], fields: tuple[str, ...], at: str
) -> Iterator[tuple[str, str]]:
    for field in fields:
        value = body.get(field)
        if isinstance(value, str):
            yield at + field, value


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated key: its position in ``TOPICS_API_KEYS``, scopes and name prefixes.

    ``prefixes`` empty means every name is allowed. ``key_index`` identifies the key for
    per-key accounting (in-flight caps) without ever holding the secret. ``owner_id`` is
    what state that outlives the process records as its creator (a named cursor): derived
    from the key itself, so it stays the same when keys are added, removed or reordered
    in ``TOPICS_API_KEYS`` (-1: no key).
    """

    key_index: int
    scopes: frozenset[Scope]
    prefixes: tuple[str, ...] = ()
    owner_id: int = -1

    def allows(self, scope: Scope) -> bool:
        """True when the key carries ``scope``."""
        return scope in self.scopes

    def allows_all(self, scopes: Iterable[Scope]) -> bool:
        """True when the key carries every scope in ``scopes``."""
        return self.scopes.issuperset(scopes)

    def missing(self, scopes: Iterable[Scope]) -> list[Scope]:
        """The scopes of ``scopes`` this key lacks, in a stable order."""
        return sorted(set(scopes) - self.scopes)

    def may_touch(self, name: str) -> bool:
        """True when ``name`` (a topic or router) starts with one of the allowed prefixes."""
        if not self.prefixes:
            return True
        return name.startswith(self.prefixes)

    def list_prefixes(self, query_prefix: str | None) -> list[str] | None:
        """Name prefixes to list so that every result is both allowed and matches
        ``query_prefix``.

        Returns None when the key is unrestricted (list ``query_prefix`` as asked), an
        empty list when nothing can match, else the narrowed prefixes.
        """
        if not self.prefixes:
            return None
        query = query_prefix or ""
        out: set[str] = set()
        for prefix in self.prefixes:
            if query.startswith(prefix):
                out.add(query)
            elif prefix.startswith(query):
                out.add(prefix)
        # A narrower prefix is covered by a broader one in the set: keep the broad ones.
        return sorted(p for p in out if not any(q != p and p.startswith(q) for q in out))

    def filter_names(self, names: Iterable[str]) -> list[str]:
        """The names of ``names`` this key may see (list endpoints are filtered, §0.2)."""
        return [n for n in names if self.may_touch(n)]

    def check_name(self, field: str, name: str) -> None:
        """Raise 403 ``forbidden`` when ``name`` (given in ``field``) is outside the allowlist.

        ``detail`` is ``{field: name}``: the field of the path or body that named it.
        """
        if self.prefixes and not name.startswith(self.prefixes):
            raise ForbiddenError(
                f'api key may not touch "{name}" ({field}): outside its name prefix allowlist',
                detail={field: name},
            )

    def check_body(self, kind: BodyKind, body: object) -> None:
        """Raise 403 ``forbidden`` for the first topic name in ``body`` outside the allowlist
        (rule 6; free for a key without prefixes). Call it before the engine."""
        if self.prefixes:
            for field, name in names_in(kind, body):
                self.check_name(field, name)


#: The principal used when auth is disabled (no keys configured): full access.
DEV_PRINCIPAL = Principal(key_index=-1, scopes=ALL_SCOPES)


@dataclass(frozen=True, slots=True)
class _Entry:
    digest: bytes
    principal: Principal


def _digest(secret: str | bytes) -> bytes:
    raw = secret.encode("utf-8", "surrogateescape") if isinstance(secret, str) else secret
    return hashlib.sha256(raw).digest()


def owner_id_of(secret: str) -> int:
    """A key's stable owner id: 63 bits of a personalised BLAKE2b of the key. It is written
    to the data directory, so it is a different hash from the one the store compares."""
    raw = secret.encode("utf-8", "surrogateescape")
    digest = hashlib.blake2b(raw, digest_size=8, person=b"topics-owner").digest()
    return int.from_bytes(digest, "big") >> 1


def _parse_scopes(field: str, where: str) -> frozenset[Scope]:
    if field == "":
        return ALL_SCOPES
    scopes: set[Scope] = set()
    for token in field.split("+"):
        granted = _SCOPE_TOKENS.get(token)
        if granted is None:
            shown = repr(token) if token else "an empty token"
            raise ValueError(
                f"{where}: unknown scope {shown}; use read, write, delete, admin "
                "(or r, w, d, a, rw) joined with '+'"
            )
        scopes |= granted
    return frozenset(scopes)


def _parse_prefixes(field: str, where: str) -> tuple[str, ...]:
    if field == "":
        return ()
    prefixes = tuple(field.split("|"))
    if any(p == "" for p in prefixes):
        # An empty prefix would match every name and silently widen the key.
        raise ValueError(f"{where}: empty prefix in the allowlist {field!r}")
    return prefixes


def parse_api_keys(spec: str) -> list[tuple[bytes, Principal]]:
    """Parse a ``TOPICS_API_KEYS`` value into (SHA-256 digest, principal) pairs.

    Grammar (comma-separated entries; blank entries are skipped)::

        key                  full access: all scopes, all topics
        key:scopes           scopes only, all topics
        key:scopes:prefixes  scopes + a topic-name prefix allowlist
        key::prefixes        all scopes, prefix-restricted

    Raises:
        ValueError: a malformed entry; the message names the entry by position and never
            contains the secret.
    """
    entries: list[tuple[bytes, Principal]] = []
    seen: dict[bytes, int] = {}
    position = 0
    for raw in spec.split(","):
        entry = raw.strip()
        if not entry:
            continue
        position += 1
        where = f"TOPICS_API_KEYS entry {position}"
        secret, sep, rest = entry.partition(":")
        if not secret:
            raise ValueError(f"{where}: the key (text before the first ':') is empty")
        scopes_field, _, prefixes_field = rest.partition(":") if sep else ("", "", "")
        principal = Principal(
            key_index=len(entries),
            scopes=_parse_scopes(scopes_field, where),
            prefixes=_parse_prefixes(prefixes_field, where),
            owner_id=owner_id_of(secret),
        )
        digest = _digest(secret)
        if digest in seen:
            raise ValueError(f"{where}: repeats the key of entry {seen[digest]}")
        seen[digest] = position
        entries.append((digest, principal))
    return entries


class KeyStore:
    """The hashed key store: authenticates bearer tokens in constant time.

    Example::

        store = KeyStore.from_spec("ops::,dash:read:tenant42:")
        principal = store.authenticate(token)  # None: unknown key -> 401
    """

    __slots__ = ("_entries",)

    def __init__(self, entries: Iterable[tuple[bytes, Principal]] = ()) -> None:
        self._entries = tuple(_Entry(d, p) for d, p in entries)

    @classmethod
    def from_spec(cls, spec: str | None) -> KeyStore:
        """Parse ``TOPICS_API_KEYS`` (None or blank: no keys, auth disabled)."""
        return cls(parse_api_keys(spec or ""))

    @property
    def enabled(self) -> bool:
        """True when at least one key is configured (auth is on)."""
        return bool(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def principals(self) -> tuple[Principal, ...]:
        """Every configured key's principal, in ``TOPICS_API_KEYS`` order (no secrets)."""
        return tuple(entry.principal for entry in self._entries)

    def authenticate(self, token: str | bytes | None) -> Principal | None:
        """The principal of ``token``, or None when it matches no key (or is empty).

        Hashes the token once and compares the digest against every stored digest with
        ``hmac.compare_digest``; the loop never exits early.
        """
        if not token:
            return None
        digest = _digest(token)
        found: Principal | None = None
        for entry in self._entries:
            # No early exit: every digest is compared whatever matched before.
            if hmac.compare_digest(entry.digest, digest):
                found = entry.principal
        return found
