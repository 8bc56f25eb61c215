"""The allowlist over request bodies (topics.auth rule 6) and the per-key namespace quotas
(topics.log.quotas): every body field is classified, every name-bearing field is checked."""

from __future__ import annotations

from typing import Any

import pytest

from topics import config as topic_config
from topics.auth import (
    NAME_FIELDS,
    NAME_FREE_FIELDS,
    BodyKind,
    Principal,
    names_in,
)
from topics.errors import ForbiddenError, ThrottledError
from topics.frontends.http import queue_routes, record_routes, watch_routes
from topics.log.quotas import NamespaceQuotas, count_under
from topics.routers.ops import _FIELDS as ROUTER_FIELDS
from topics.wire import ws as wire_ws

TENANT = Principal(key_index=0, scopes=frozenset({"read", "write"}), prefixes=("tenA-",))
OPEN = Principal(key_index=1, scopes=frozenset({"read", "write"}))

#: Every decoded-body field set the frontends accept, by the kind it is checked as (None:
#: bodies that name no topic at all, whose every field must be name-free).
BODY_FIELD_SETS: list[tuple[BodyKind | None, frozenset[str]]] = [
    ("topic_config", topic_config._KNOWN),
    ("write", record_routes.WRITE_FIELDS),
    ("router", ROUTER_FIELDS),
    ("watch", watch_routes.WATCH_FIELDS),
    ("ws_subscribe", wire_ws._SUBSCRIBE),
    ("ws_subscribe", wire_ws._UNSUBSCRIBE),  # names only what the connection holds already
    ("ws_publish", wire_ws._PUBLISH),
    ("ws_subscribe", wire_ws._COMMIT),  # a named cursor commit names its topic
    (None, record_routes.DIFF_FIELDS),
    (None, record_routes.DELETE_FIELDS),
    (None, queue_routes.CLAIM_FIELDS),
    (None, queue_routes.ACK_FIELDS),
    (None, queue_routes.NACK_FIELDS),
    (None, queue_routes.EXTEND_FIELDS),
]


@pytest.mark.parametrize(("kind", "fields"), BODY_FIELD_SETS)
def test_every_body_field_is_classified(kind: BodyKind | None, fields: frozenset[str]) -> None:
    named = NAME_FIELDS[kind] if kind is not None else frozenset()
    unclassified = sorted(fields - named - NAME_FREE_FIELDS)
    assert not unclassified, (
        f"body fields {unclassified} are in neither NAME_FIELDS[{kind!r}] nor "
        "NAME_FREE_FIELDS (topics/auth.py): say whether they name a topic"
    )
    assert not (named & NAME_FREE_FIELDS)


@pytest.mark.parametrize(
    ("kind", "body", "expected"),
    [
        ("topic_config", {"type": "queue", "dead_letter": "x"}, [("dead_letter", "x")]),
        ("topic_config", {"dead_letter": None}, []),
        ("write", {"records": [], "config": {"dead_letter": "x"}}, [("config.dead_letter", "x")]),
        ("write", {"records": [], "config": "junk"}, []),
        ("router", {"source": "s", "dest": "d"}, [("source", "s"), ("dest", "d")]),
        ("router", {"source": 7}, []),
        ("watch", {"topics": {"a": {}, "b": None}}, [("topic", "a"), ("topic", "b")]),
        ("ws_subscribe", {"topics": {"a": {}}}, [("topic", "a")]),
        ("ws_subscribe", {"topic": "a"}, [("topic", "a")]),
        (
            "ws_publish",
            {"topic": "t", "config": {"dead_letter": "d"}},
            [("topic", "t"), ("config.dead_letter", "d")],
        ),
        ("write", None, []),
    ],
)
def test_names_in_yields_every_named_topic(
    kind: BodyKind, body: Any, expected: list[tuple[str, str]]
) -> None:
    assert list(names_in(kind, body)) == expected


def test_check_body_names_the_field_and_is_free_without_prefixes() -> None:
    body = {"records": [], "config": {"type": "queue", "dead_letter": "tenB-secret"}}
    with pytest.raises(ForbiddenError) as info:
        TENANT.check_body("write", body)
    assert info.value.detail == {"config.dead_letter": "tenB-secret"}
    TENANT.check_body("write", {"records": [], "config": {"dead_letter": "tenA-dlq"}})
    OPEN.check_body("write", body)  # a key without prefixes may name anything
    with pytest.raises(ForbiddenError) as info:
        TENANT.check_body("router", {"source": "tenA-s", "dest": "tenB-d"})
    assert info.value.detail == {"dest": "tenB-d"}


# -- namespace quotas ----------------------------------------------------------------------


def test_count_under_counts_each_name_once() -> None:
    names = sorted(["a", "a1", "a2", "ab", "b", "b.x", "c"])
    assert count_under(names, ("a",)) == 4
    assert count_under(names, ("a1", "b.")) == 2
    assert count_under(names, ()) == 0
    quotas = NamespaceQuotas([("a", "ab"), ("b.",)], max_topics=4)
    assert quotas.namespaces == [("a",), ("b.",)]  # "ab" is inside "a": counted once


def test_quota_refuses_only_inside_a_full_namespace() -> None:
    quotas = NamespaceQuotas([("tenA-",), ("tenB-", "shared.")], max_topics=2, max_routers=1)
    names = sorted(["tenA-1", "tenA-2", "shared.x", "other"])
    with pytest.raises(ThrottledError) as info:
        quotas.check_topic("tenA-3", names)
    assert info.value.detail == {"limit": "max_topics_per_key", "max": 2}
    quotas.check_topic("tenB-1", names)  # tenB-|shared. holds one
    quotas.check_topic("free-name", names)  # in no key's namespace
    with pytest.raises(ThrottledError):
        quotas.check_router("tenA-r2", ["tenA-r1"])
    quotas.check_router("tenB-r1", ["tenA-r1"])


def test_no_quota_without_limits_or_prefixed_keys() -> None:
    assert not NamespaceQuotas([("tenA-",)]).active
    assert not NamespaceQuotas([(), ()], max_topics=1).active
    assert NamespaceQuotas([("tenA-",)], max_routers=1).active
