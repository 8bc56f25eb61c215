"""topics.auth: the TOPICS_API_KEYS grammar, hashed store, constant-time check, scopes, prefixes."""

from __future__ import annotations

import hashlib

import pytest

import topics.auth as auth
from topics.auth import (
    ALL_SCOPES,
    KeyStore,
    Principal,
    bearer_token,
    parse_api_keys,
    required_scopes,
)


def _one(spec: str) -> Principal:
    entries = parse_api_keys(spec)
    assert len(entries) == 1
    return entries[0][1]


@pytest.mark.parametrize(
    ("spec", "scopes", "prefixes"),
    [
        ("k", ALL_SCOPES, ()),
        ("k:", ALL_SCOPES, ()),
        ("k:read", {"read"}, ()),
        ("k:write", {"write"}, ()),
        ("k:delete", {"delete"}, ()),
        ("k:admin", {"admin"}, ()),
        ("k:r", {"read"}, ()),
        ("k:w", {"write"}, ()),
        ("k:d", {"delete"}, ()),
        ("k:a", {"admin"}, ()),
        ("k:rw", {"read", "write"}, ()),
        ("k:read+write", {"read", "write"}, ()),
        ("k:rw+a", {"read", "write", "admin"}, ()),
        ("k:r+w+d+a", ALL_SCOPES, ()),
        ("k:read:", {"read"}, ()),
        ("k:read:tenant42:", {"read"}, ("tenant42:",)),
        ("k:rw:tenant42:|shared.", {"read", "write"}, ("tenant42:", "shared.")),
        ("k::tenant42:", ALL_SCOPES, ("tenant42:",)),
        ("  k:read  ", {"read"}, ()),
    ],
)
def test_grammar_accepts(spec: str, scopes: set[str], prefixes: tuple[str, ...]) -> None:
    principal = _one(spec)
    assert principal.scopes == frozenset(scopes)
    assert principal.prefixes == prefixes


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        (":read", "empty"),
        ("::x", "empty"),
        ("k:raed", "unknown scope 'raed'"),
        ("k:READ", "unknown scope 'READ'"),
        ("k:read+", "an empty token"),
        ("k:+read", "an empty token"),
        ("k:read++write", "an empty token"),
        ("k:read:a||b", "empty prefix"),
        ("k:read:a|", "empty prefix"),
        ("k:read:|a", "empty prefix"),
        ("k,k:read", "repeats the key of entry 1"),
    ],
)
def test_grammar_fails_closed(spec: str, problem: str) -> None:
    with pytest.raises(ValueError, match="TOPICS_API_KEYS entry") as info:
        parse_api_keys(spec)
    assert problem in str(info.value)


def test_errors_never_echo_the_secret() -> None:
    secret = "s3cr3t-value-xyz"
    for spec in (f"{secret}:bogus", f"{secret}:read:a||b", f"{secret},{secret}"):
        with pytest.raises(ValueError) as info:
            parse_api_keys(spec)
        assert secret not in str(info.value)


def test_blank_entries_are_skipped_and_empty_spec_disables_auth() -> None:
    assert parse_api_keys("") == []
    assert parse_api_keys(" , ,") == []
    assert not KeyStore.from_spec(None).enabled
    assert not KeyStore.from_spec("  ").enabled
    assert len(parse_api_keys("a,,b,")) == 2


def test_only_digests_are_stored() -> None:
    store = KeyStore.from_spec("plain-secret:read")
    entries = store._entries
    assert entries[0].digest == hashlib.sha256(b"plain-secret").digest()
    assert "plain-secret" not in repr(entries)


def test_authenticate_maps_tokens_to_principals() -> None:
    store = KeyStore.from_spec("alpha,beta:read,gamma::t1:")
    alpha = store.authenticate("alpha")
    assert alpha is not None
    assert alpha.key_index == 0
    assert alpha.scopes == ALL_SCOPES
    beta = store.authenticate(b"beta")
    assert beta is not None
    assert beta.key_index == 1
    assert beta.scopes == {"read"}
    gamma = store.authenticate("gamma")
    assert gamma is not None
    assert gamma.prefixes == ("t1:",)
    assert store.authenticate("alph") is None
    assert store.authenticate("alpha ") is None
    assert store.authenticate("") is None
    assert store.authenticate(None) is None


def test_authenticate_compares_every_digest_without_early_exit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = KeyStore.from_spec("k0,k1,k2,k3,k4")
    calls: list[tuple[bytes, bytes]] = []
    real = auth.hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", counting)
    for token in ("k0", "k4", "nope"):
        calls.clear()
        store.authenticate(token)
        assert len(calls) == 5  # the first key matching does not stop the loop
        digest = hashlib.sha256(token.encode()).digest()
        assert all(b == digest for _, b in calls)  # the token is hashed once, up front


def test_scopes_and_missing() -> None:
    p = _one("k:read+delete")
    assert p.allows("read")
    assert p.allows("delete")
    assert not p.allows("write")
    assert p.allows_all({"read"})
    assert not p.allows_all({"read", "write"})
    assert p.missing({"read", "write", "admin"}) == ["admin", "write"]


def test_prefix_rules() -> None:
    p = _one("k::tenant42:|shared.")
    assert p.may_touch("tenant42:jobs")
    assert p.may_touch("shared.events")
    assert not p.may_touch("tenant4")
    assert not p.may_touch("tenant43:jobs")
    assert not p.may_touch("xshared.events")  # a prefix, not a substring
    assert p.filter_names(["a", "tenant42:x", "shared.y", "tenant42"]) == ["tenant42:x", "shared.y"]
    assert _one("k").may_touch("anything")


def test_list_prefixes_narrowing() -> None:
    p = _one("k::tenant42:|shared.")
    assert p.list_prefixes(None) == ["shared.", "tenant42:"]
    assert p.list_prefixes("tenant42:a") == ["tenant42:a"]
    assert p.list_prefixes("ten") == ["tenant42:"]
    assert p.list_prefixes("other") == []
    assert _one("k").list_prefixes("x") is None
    overlapping = _one("k::a|ab")
    assert overlapping.list_prefixes(None) == ["a"]


@pytest.mark.parametrize(
    ("method", "pattern", "scopes"),
    [
        ("GET", "/v0/topics", {"read"}),
        ("GET", "/v0/topics/{topic}", {"read"}),
        ("POST", "/v0/topics/{topic}/diff", {"read"}),
        ("GET", "/v0/metrics", {"read"}),
        ("POST", "/v0/topics/{topic}", {"write"}),
        ("POST", "/v0/topics/{topic}/claim", {"read", "write"}),
        ("DELETE", "/v0/topics/{topic}", {"delete"}),
        ("POST", "/v0/topics/{topic}/delete", {"delete"}),
        ("PUT", "/v0/topics/{topic}", {"admin"}),
        ("PUT", "/v0/routers/{router}", {"admin"}),
        ("GET", "/v0/health", set()),
    ],
)
def test_route_scope_table(method: str, pattern: str, scopes: set[str]) -> None:
    assert required_scopes(method, pattern) == frozenset(scopes)


@pytest.mark.parametrize(
    ("header", "token"),
    [
        (None, b""),
        (b"", b""),
        (b"Bearer abc", b"abc"),
        (b"bearer  abc ", b"abc"),
        (b"  BEARER abc", b"abc"),
        (b"Basic abc", b""),
        (b"Bearer", b""),
        (b"Bearerabc", b""),
    ],
)
def test_one_bearer_parser_serves_every_frontend(header: bytes | None, token: bytes) -> None:
    assert bearer_token(header) == token
