"""Property-based fuzzing of the real server, driven by the OpenAPI document.

Hand-rolled hypothesis strategies derived from ``docs/openapi.json``'s schemas (schemathesis
loads and runs this 3.1 document fine, but it is not a dependency of the project, so the
suite cannot rely on it): for every served operation, random path names (valid, invalid,
percent-encoded junk), documented and unknown query parameters, headers (request ids,
idempotency keys, content types and encodings, auth), and bodies that are schema-valid,
mutated (a member dropped, added or retyped), arbitrary JSON, raw bytes or gzip, plus the
wrong method on a real path. Two servers: dev mode and keys with scopes and prefixes.

Every answer must:
1. never be a 500;
2. carry a status the document lists for that operation (404/405 for unknown paths and
   methods), with its required headers;
3. validate against the document's schema for its status and media type; a non-2xx is the
   error envelope with a known code of that status and the response's request id.

The default run is ~200 examples (seconds); ``pytest -m slow`` adds a 2,000-example run.
"""

from __future__ import annotations

import gzip
import json
import string
import time
from collections import deque
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.server import ServerProcess, spawn_server
from topics.frontends.http import ROUTE_MODULES

from .test_openapi import Contract, contract

KEYS = {"full": "full-key", "ro": "ro-key", "t1": "t1-key", "bad": "not-a-key"}
POOL = ["fz-a", "fz-b", "fz-q", "fz-full", "t1.a", "t1.q"]
QUEUES = {"fz-q", "t1.q"}
ROUTERS = ["fz-a->fz-b", "t1.a->t1.b", "fz-r"]
#: Watch sessions (one per server, made by _seed) plus ids that name none.
WIDS = ["wid_AAAAAAAAAAAAAAAAAAAAAA", "not-a-wid"]

#: Long waits would stall the fuzzer: a diff's wait_ms and a queue's claim_jitter_ms are
#: capped at these (the server clamps larger values itself; that path is tour-tested).
MAX_WAIT_MS = 20
MAX_JITTER_MS = 5

# Served (method, template) pairs, from the route modules (no engine needed).
_TAKES_BODY = {  # the /v0 API (the /console page for people is not in the document)
    (route.method, route.pattern): route.body
    for module in ROUTE_MODULES
    for route in module.ROUTES
    if not route.pattern.startswith("/console")
}
SERVED = sorted(_TAKES_BODY)

_JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
ANY_JSON = st.recursive(
    _JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


# -- strategies from the document's schemas ------------------------------------------------


class Schemas:
    """Builds hypothesis strategies for (a subset of) JSON Schema: the subset the document
    uses for request bodies and parameters."""

    def __init__(self, c: Contract) -> None:
        self.contract = c
        self._cache: dict[tuple[int, int], st.SearchStrategy[Any]] = {}

    def deref(self, schema: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in schema:
            schema, _ = self.contract.resolve(schema, "")
        return schema

    def valid(self, schema: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
        """Values the schema accepts (the document's schemas are cached, so strategies are
        keyed by the schema object's identity)."""
        key = (id(schema), depth)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._build(self.deref(schema), depth)
        return found

    def _build(self, schema: dict[str, Any], depth: int) -> st.SearchStrategy[Any]:
        if depth > 6:
            return st.none()
        if "const" in schema:
            return st.just(schema["const"])
        if "enum" in schema:
            return st.sampled_from(schema["enum"])
        for key in ("anyOf", "oneOf"):
            if key in schema:
                return st.one_of([self.valid(s, depth + 1) for s in schema[key]])
        kind = schema.get("type")
        if isinstance(kind, list):
            return st.one_of([self._build({**schema, "type": k}, depth) for k in kind])
        if kind == "null":
            return st.none()
        if kind == "boolean":
            return st.booleans()
        if kind == "integer":
            lo = schema.get("minimum", -(2**63))
            hi = schema.get("maximum", 2**63)
            return st.integers(min_value=lo, max_value=hi) | st.sampled_from(
                [v for v in (lo, hi, 0, 1, 2, 100) if lo <= v <= hi]
            )
        if kind == "number":
            return st.floats(min_value=schema.get("minimum"), allow_nan=False, allow_infinity=False)
        if kind == "string":
            if "pattern" in schema:
                return st.from_regex(schema["pattern"], fullmatch=True).filter(
                    lambda s: len(s) <= 300
                )
            return st.text(
                min_size=schema.get("minLength", 0), max_size=min(schema.get("maxLength", 30), 30)
            )
        if kind == "array":
            if "prefixItems" in schema:
                return st.tuples(*[self.valid(s, depth + 1) for s in schema["prefixItems"]]).map(
                    list
                )
            items = self.valid(schema.get("items", {}), depth + 1)
            return st.lists(
                items,
                min_size=schema.get("minItems", 0),
                max_size=max(schema.get("minItems", 0), 4),
            )
        if kind == "object" or "properties" in schema:
            return self._object(schema, depth)
        return ANY_JSON  # {} (any JSON)

    def _object(self, schema: dict[str, Any], depth: int) -> st.SearchStrategy[Any]:
        props: dict[str, Any] = schema.get("properties", {})
        required = set(schema.get("required", ()))
        extra = schema.get("additionalProperties")
        parts = {
            name: self.valid(sub, depth + 1) for name, sub in props.items() if name in required
        }
        optional = {
            name: self.valid(sub, depth + 1) for name, sub in props.items() if name not in required
        }
        base = st.fixed_dictionaries(parts, optional=optional)
        if isinstance(extra, dict) and not props:
            keys = self.valid(schema.get("propertyNames", {"type": "string"}), depth + 1)
            return st.dictionaries(
                keys,
                self.valid(extra, depth + 1),
                min_size=schema.get("minProperties", 0),
                max_size=3,
            )
        return base


@cache
def _schemas() -> Schemas:
    return Schemas(contract())


@st.composite
def mutated(draw: st.DrawFn, value: st.SearchStrategy[Any]) -> Any:
    """A schema-valid value, or the same with one member dropped, added or retyped."""
    body = draw(value)
    how = draw(st.sampled_from(["keep", "keep", "drop", "add", "retype", "nest"]))
    if not isinstance(body, dict) or how == "keep":
        return body
    if how == "drop" and body:
        body.pop(draw(st.sampled_from(sorted(body))))
    elif how == "add":
        body[draw(st.text(min_size=1, max_size=12))] = draw(ANY_JSON)
    elif how == "retype" and body:
        body[draw(st.sampled_from(sorted(body)))] = draw(ANY_JSON)
    elif how == "nest" and isinstance(body.get("records"), list) and body["records"]:
        record = body["records"][0]
        if isinstance(record, dict):
            record[draw(st.sampled_from(["data", "tag", "node", "meta", "tga"]))] = draw(ANY_JSON)
    return body


def _sanitize(template: str, body: Any) -> Any:
    """Keep a request from stalling the run (see MAX_WAIT_MS)."""
    if not isinstance(body, dict):
        return body
    if "/diff" in template and isinstance(body.get("wait_ms"), int) and body["wait_ms"] > 0:
        body["wait_ms"] = min(body["wait_ms"], MAX_WAIT_MS)
    for holder in (body, body.get("config")):
        if not isinstance(holder, dict):
            continue
        if isinstance(holder.get("claim_jitter_ms"), int):
            holder["claim_jitter_ms"] = min(holder["claim_jitter_ms"], MAX_JITTER_MS)
    return body


# -- one request ----------------------------------------------------------------------------


def _name(draw: st.DrawFn, param: str) -> str:
    pool = {"router": ROUTERS, "wid": WIDS}.get(param, POOL)
    kind = draw(st.sampled_from(["pool", "pool", "pool", "valid", "junk"]))
    if kind == "pool":
        return quote(draw(st.sampled_from(pool)), safe="")
    if kind == "valid":
        pattern = r"[A-Za-z0-9][A-Za-z0-9._:-]{0,20}"
        return quote(draw(st.from_regex(pattern, fullmatch=True)), safe="")
    return quote(draw(st.text(min_size=1, max_size=20)), safe="") or "x"


QUERY_VALUES = st.sampled_from(["true", "false", "1", "0", "", "maybe", "5", "1000", "99999999999"])


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    c = contract()
    schemas = _schemas()
    method, template = draw(st.sampled_from(SERVED))
    op = c.doc["paths"][template][method.lower()]
    path = template
    for name in ("topic", "router", "wid"):
        if "{" + name + "}" in path:
            path = path.replace("{" + name + "}", _name(draw, name))
    query: list[tuple[str, str]] = []
    headers: dict[str, str] = {}
    for ref in op["parameters"]:
        param = schemas.deref(ref)
        if param["in"] == "query" and draw(st.booleans()):
            query.append((param["name"], draw(QUERY_VALUES | st.text(max_size=10))))
        elif param["in"] == "header" and draw(st.integers(0, 3)) == 0:
            value = draw(
                st.one_of(
                    st.from_regex(r"[A-Za-z0-9._-]{1,40}", fullmatch=True),
                    st.text(string.printable.strip(), max_size=40),
                )
            )
            headers[param["name"]] = value
    if draw(st.integers(0, 9)) == 0:
        query.append((draw(st.sampled_from(["token", "unknown", "x"])), "full-key"))
    if draw(st.integers(0, 4)) == 0:
        headers["accept-encoding"] = "gzip"
    if template == "/v0/metrics" and draw(st.booleans()):
        headers["accept"] = "application/json"
    if "x-sse-events" in op and draw(st.integers(0, 3)):
        headers["accept"] = "text/event-stream"
    content: bytes | None = None
    body_spec = op.get("requestBody")
    if body_spec is not None:
        schema = body_spec["content"]["application/json"]["schema"]
        shape = draw(st.sampled_from(["valid", "valid", "valid", "json", "raw", "none"]))
        if shape == "valid":
            value = _sanitize(template, draw(mutated(schemas.valid(schema))))
            content = json.dumps(value, ensure_ascii=draw(st.booleans())).encode()
        elif shape == "json":
            content = json.dumps(_sanitize(template, draw(ANY_JSON))).encode()
        elif shape == "raw":
            content = draw(st.binary(max_size=64))
        if content is not None:
            headers["content-type"] = draw(
                st.sampled_from(
                    ["application/json"] * 6
                    + [
                        "application/json; charset=utf-8",
                        "text/plain",
                        "application/json; charset=latin-1",
                    ]
                )
            )
            encoding = draw(st.sampled_from([None] * 6 + ["gzip", "identity", "br"]))
            if encoding is not None:
                headers["content-encoding"] = encoding
                if encoding == "gzip" and draw(st.integers(0, 4)):
                    content = gzip.compress(content)
    if draw(st.integers(0, 14)) == 0:  # the wrong method on a real path
        method = draw(st.sampled_from(["GET", "PUT", "POST", "DELETE", "PATCH"]))
    url = path + ("?" + urlencode(query) if query else "")
    server = draw(st.sampled_from(["dev", "auth"]))
    key = (
        draw(st.sampled_from([None, "full", "full", "ro", "t1", "bad"]))
        if server == "auth"
        else None
    )
    return {
        "server": server,
        "key": key,
        "method": method,
        "template": template,
        "url": url,
        "headers": headers,
        "content": content,
    }


def _documented(c: Contract, method: str, template: str) -> bool:
    return method.lower() in c.doc["paths"][template]


#: The last requests sent, quoted when one times out (the culprit may be an earlier one).
_RECENT: deque[dict[str, Any]] = deque(maxlen=5)


def _send(clients: dict[str, httpx.Client], req: dict[str, Any]) -> None:
    c = contract()
    headers = dict(req["headers"])
    if req["key"] is not None:
        headers["authorization"] = f"Bearer {KEYS[req['key']]}"
    client = clients[req["server"]]
    recent = list(_RECENT)
    _RECENT.append(req)
    try:
        _exchange(c, client, req, headers)
    except httpx.TimeoutException as exc:
        raise AssertionError(f"timed out; the requests before it: {recent}") from exc


def _exchange(
    c: Contract, client: httpx.Client, req: dict[str, Any], headers: dict[str, str]
) -> None:
    with client.stream(req["method"], req["url"], headers=headers, content=req["content"]) as r:
        if not r.headers.get("content-type", "").startswith("text/event-stream"):
            r.read()
        where = f"{req['method']} {req['url']} -> {r.status_code}"
        assert r.status_code != 500, f"{where}: {r.text[:500]}"
        documented = _documented(c, req["method"], req["template"])
        template = req["template"] if documented else None
        if not documented:
            assert r.status_code in (404, 405), where
        c.check(req["method"] if documented else None, template, r)


# -- the servers ----------------------------------------------------------------------------


def _seed(client: httpx.Client) -> None:
    for name in POOL:
        config: dict[str, Any] = {"type": "queue"} if name in QUEUES else {}
        if name == "fz-full":
            config = {"cap_records": 3, "discard": "reject"}
        client.put(f"/v0/topics/{name}", json=config).raise_for_status()
        client.post(
            f"/v0/topics/{name}", json={"records": [{"data": i, "tag": f"t{i}"} for i in range(3)]}
        ).raise_for_status()
    session = client.post("/v0/watch", json={"topics": {"t1.a": {"from_seq": 0}}})
    session.raise_for_status()
    WIDS.append(session.json()["wid"])


@pytest.fixture(scope="module")
def clients(
    server: ServerProcess, start_server: Callable[..., ServerProcess]
) -> Iterator[dict[str, httpx.Client]]:
    auth = start_server({"TOPICS_API_KEYS": "full-key,ro-key:read,t1-key::t1."})
    dev_client = server.client()
    auth_client = auth.client()
    for client in (dev_client, auth_client):
        client.timeout = httpx.Timeout(10.0)
    _seed(dev_client)
    _seed(auth.client("full-key"))
    yield {"dev": dev_client, "auth": auth_client}
    dev_client.close()
    auth_client.close()


_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]


@settings(max_examples=200, deadline=None, suppress_health_check=_HEALTH)
@given(req=requests())
def test_fuzz_every_served_endpoint(clients: dict[str, httpx.Client], req: dict[str, Any]) -> None:
    _send(clients, req)


@pytest.mark.slow
@settings(max_examples=2000, deadline=None, suppress_health_check=_HEALTH)
@given(req=requests())
def test_fuzz_every_served_endpoint_heavy(
    clients: dict[str, httpx.Client], req: dict[str, Any]
) -> None:
    _send(clients, req)


# -- what the fuzzer found (open bugs are strict xfails: they fail once fixed, then drop the mark)


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/v0/topics/fz-none/diff", {"wait_ms": 10}, 404),
        ("/v0/topics/fz-a/diff", {"wait_ms": 10, "limit": -1}, 400),
        ("/v0/topics/fz-a/diff", {"wait_ms": 10, "from_seq": 1.5}, 400),
    ],
)
def test_long_poll_errors_are_not_500(
    clients: dict[str, httpx.Client], path: str, body: dict[str, Any], status: int
) -> None:
    r = clients["dev"].post(path, json=body)
    assert r.status_code == status, r.text


def test_a_huge_ttl_is_not_fatal() -> None:
    """Found by the fuzzer: a u64 ttl_ms over int64 on a topic with records made the PUT a
    500 (OverflowError in SegmentBuffer.first_ts_at_least) and the background retention
    sweep then killed the server. Its own server, so the shared ones survive a regression."""
    proc = spawn_server()
    try:
        with proc.client() as client:
            client.post("/v0/topics/ttl", json={"records": [{"data": 1}]}).raise_for_status()
            r = client.put("/v0/topics/ttl", json={"ttl_ms": 2**64 - 1})
            assert r.status_code == 200, r.text
            time.sleep(1.5)  # one retention sweep
            assert client.get("/v0/health").status_code == 200
    finally:
        if proc.proc.poll() is None:
            proc.proc.kill()
        proc.proc.wait()


def test_a_stray_body_does_not_hang_the_connection() -> None:
    """A GET/DELETE with a body, served by Quart (which never reads it), leaves the
    keep-alive connection so that the next request on it often gets no answer (about one
    time in three here). Routes the dispatcher answers itself (404, 405, 415) are fine.
    Its own server: a hung request would hold the shared one's drain at teardown."""
    proc = spawn_server({"TOPICS_DRAIN_TIMEOUT_MS": "200"})
    try:
        for _ in range(40):
            with proc.client() as client:
                client.timeout = httpx.Timeout(2.0)
                assert client.request("GET", "/v0/health", content=b"{}").status_code == 200
                try:
                    client.get("/v0/health")
                except httpx.TimeoutException:
                    pytest.fail("the request after a GET with a body got no answer")
    finally:
        proc.stop()
