"""The OpenAPI document stays true (frontends/http/openapi/, docs/openapi.json).

(a) The served document, the module's document and the generated copy are one document,
    and the copy is exactly what its banner's command prints.
(b) Every route the app serves is documented, and every documented endpoint is served,
    except those listed in :data:`NOT_YET_SERVED`.
(c) A scripted tour of every served endpoint and of the errors each can answer, over the
    real server (and in-process for the states a subprocess cannot reach: recovery,
    draining, CPU pressure), validates each response against the document: status, the
    required headers, the body's schema for its media type.

:class:`Contract` (the validator) is shared with test_http_fuzz.py.
"""

from __future__ import annotations

import gzip
import json
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from jsonschema import Draft202012Validator  # type: ignore[import-untyped, unused-ignore]
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.events import Message as WsMessage

from topics.auth import ROUTE_SCOPES
from topics.engine import Engine
from topics.errors import FAMILY_CODES, TopicsError, error_class_for_code, registered_codes
from topics.frontends.http import ROUTE_MODULES, openapi
from topics.frontends.http.openapi import GENERATED_BY, error_codes, stream_error_codes
from topics.wire.sse import Event, SSEDecoder

from .conftest import InProc, ServerProcess

ROOT = Path(__file__).resolve().parents[2]
DOC_PATH = ROOT / "docs" / "openapi.json"
DOC_URI = "urn:topics:openapi"
JSON = {"content-type": "application/json"}
METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")

#: Endpoints the document describes (from the contract) that the app does not serve yet.
#: Whoever lands one removes it here: the test fails until the list is exactly the gap.
#: Empty since every endpoint of the contract is served; an endpoint added to the document
#: ahead of its implementation goes here, e.g. ``("GET", "/v0/topics/{topic}/work"),``.
NOT_YET_SERVED: frozenset[tuple[str, str]] = frozenset()

#: The app's route table, which the document is built from.
API_ROUTES = tuple(route for module in ROUTE_MODULES for route in module.ROUTES)


def build_document() -> dict[str, Any]:
    return openapi.build_document(API_ROUTES)


def document_text() -> str:
    return openapi.document_text(API_ROUTES)


# -- the validator -------------------------------------------------------------------------


def _pointer(*parts: str) -> str:
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)


class Contract:
    """Validates real responses against the document."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        resource: Resource[Any] = Resource.from_contents(doc, default_specification=DRAFT202012)
        self.registry: Registry[Any] = Registry().with_resource(DOC_URI, resource)
        self._validators: dict[str, Draft202012Validator] = {}

    def validator(self, pointer: str) -> Draft202012Validator:
        found = self._validators.get(pointer)
        if found is None:
            found = Draft202012Validator({"$ref": f"{DOC_URI}#{pointer}"}, registry=self.registry)
            self._validators[pointer] = found
        return found

    def resolve(self, node: dict[str, Any], pointer: str) -> tuple[dict[str, Any], str]:
        """Follow a local ``$ref`` (components.responses/headers); return node and pointer."""
        ref = node.get("$ref")
        if ref is None:
            return node, pointer
        assert ref.startswith("#/"), ref
        out: Any = self.doc
        for part in ref[2:].split("/"):
            out = out[part.replace("~1", "/").replace("~0", "~")]
        return out, ref[1:]

    def operations(self) -> Iterator[tuple[str, str, dict[str, Any]]]:
        for template, item in self.doc["paths"].items():
            for method, operation in item.items():
                if method in METHODS:
                    yield method.upper(), template, operation

    def response_spec(
        self, method: str | None, template: str | None, status: int
    ) -> tuple[dict[str, Any], str]:
        """The response object documented for ``status`` (generic 404/405 when the request
        matched no documented operation)."""
        if template is None or method is None:
            code = {404: "not_found", 405: "method_not_allowed"}.get(status)
            assert code is not None, f"status {status} for an undocumented path/method"
            node = self.doc["components"]["responses"][code]
            return node, _pointer("components", "responses", code)
        responses = self.doc["paths"][template][method.lower()]["responses"]
        assert str(status) in responses, (
            f"{method} {template} answered {status}, which the document does not list "
            f"(documented: {sorted(responses)})"
        )
        base = _pointer("paths", template, method.lower(), "responses", str(status))
        return self.resolve(responses[str(status)], base)

    def check(
        self, method: str | None, template: str | None, response: httpx.Response, body: Any = None
    ) -> Any:
        """Assert ``response`` is what the document says ``method template`` answers.

        Returns the decoded JSON body (None for other media types). A 404 ``not_found`` or
        405 ``method_not_allowed`` is checked against the generic answer any path may give
        (a name that percent-decodes to contain '/' matches no route, for example).
        """
        where = f"{response.request.method} {response.request.url} -> {response.status_code}"
        if response.status_code in (404, 405) and _error_code(response) in (
            "not_found",
            "method_not_allowed",
        ):
            method = template = None
        spec, pointer = self.response_spec(method, template, response.status_code)
        for name, header in spec.get("headers", {}).items():
            header, hpointer = self.resolve(header, pointer + _pointer("headers", name))
            value = response.headers.get(name)
            if header.get("required"):
                assert value is not None, f"{where}: missing header {name}"
            if value is not None and "schema" in header:
                errors = list(self.validator(hpointer + "/schema").iter_errors(value))
                assert not errors, f"{where}: header {name}={value!r}: {errors[0].message}"
        content = spec.get("content")
        if response.status_code == 101 or not content:
            return None
        media = response.headers.get("content-type", "").split(";")[0].strip()
        assert media in content, f"{where}: content-type {media!r} not in {sorted(content)}"
        if media == "text/event-stream":
            return None
        schema_ptr = pointer + _pointer("content", media, "schema")
        if media == "application/json":
            decoded = response.json() if body is None else body
        else:
            decoded = response.text
        errors = sorted(self.validator(schema_ptr).iter_errors(decoded), key=lambda e: e.path)
        assert not errors, f"{where}: {_describe(errors, decoded)}"
        if response.status_code >= 400:
            error = decoded["error"]
            assert error["code"] in error_codes(), f"{where}: unknown code {error['code']}"
            assert error_class_for_code(error["code"]).status == response.status_code, where
            assert error["request_id"] == response.headers["x-request-id"], where
        return decoded


def _error_code(response: httpx.Response) -> str | None:
    try:
        return str(response.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return None


def _describe(errors: list[Any], decoded: Any) -> str:
    best = errors[0]
    for sub in best.context or ():
        if sub.path:
            best = sub
            break
    snippet = json.dumps(decoded)[:600]
    return f"{best.message} at {list(best.absolute_path)} ({len(errors)} errors); body: {snippet}"


@cache
def contract() -> Contract:
    return Contract(build_document())


# -- (a) one document ----------------------------------------------------------------------


def test_docs_copy_is_the_generated_document() -> None:
    text = DOC_PATH.read_text(encoding="utf-8")
    assert text == document_text(), (
        "docs/openapi.json is stale; regenerate it with: " + GENERATED_BY
    )
    assert json.loads(text)["x-generated-by"] == GENERATED_BY


def test_write_record_is_closed_and_lists_the_declared_record_fields() -> None:
    """One declaration (topics/record_fields.py) of what a record may hold: the document
    lists exactly those members and forbids others, as the server does."""
    from topics.record_fields import RECORD_FIELDS

    schema = json.loads(document_text())["components"]["schemas"]["WriteRecord"]
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) == RECORD_FIELDS


def test_the_banner_command_prints_the_copy() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "topics.frontends.http.openapi"],
        capture_output=True,
        check=True,
        cwd=ROOT,
    )
    assert out.stdout.decode("utf-8") == DOC_PATH.read_text(encoding="utf-8")


def test_served_document_equals_the_module_and_the_copy(http: httpx.Client) -> None:
    r = http.get("/v0/openapi.json", headers={"accept-encoding": "gzip"})
    assert r.status_code == 200
    served = contract().check("GET", "/v0/openapi.json", r)
    assert served == build_document()
    assert served == json.loads(DOC_PATH.read_text(encoding="utf-8"))
    assert "performance" not in served


def test_every_schema_is_valid_json_schema_and_every_ref_resolves() -> None:
    doc = build_document()
    assert doc["openapi"].startswith("3.1")
    for name, schema in doc["components"]["schemas"].items():
        Draft202012Validator.check_schema(schema)  # raises on an invalid schema
        assert name.replace(".", "").replace("_", "").replace("-", "").isalnum()
    refs: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                refs.append(node["$ref"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(doc)
    c = contract()
    for ref in set(refs):
        c.resolve({"$ref": ref}, "")  # raises KeyError if dangling
    ids = [op["operationId"] for _, _, op in c.operations()]
    assert len(ids) == len(set(ids))


def test_error_codes_match_the_error_classes() -> None:
    doc = build_document()
    for code, status in doc["x-error-codes"].items():
        assert error_class_for_code(code).code == code, f"{code} is not a registered code"
        assert error_class_for_code(code).status == status
    # every operation answers internal and carries X-Request-ID as an optional parameter
    for method, template, op in contract().operations():
        assert "500" in op["responses"], (method, template)
        assert {"$ref": "#/components/parameters/X-Request-ID"} in op["parameters"]


def test_security_matches_the_scope_table() -> None:
    """The role names are the scopes the served route needs (the contract's table for the
    routes not served yet)."""
    routes = {(r.method, r.pattern): r for module in ROUTE_MODULES for r in module.ROUTES}
    for method, template, op in contract().operations():
        route = routes.get((method, template))
        scopes = route.needed_scopes if route else ROUTE_SCOPES.get((method, template))
        needed = sorted(scopes or ())
        bearer = [req["bearerAuth"] for req in op["security"] if "bearerAuth" in req]
        assert bearer == [needed], (method, template, bearer, needed)
        query = [req for req in op["security"] if "queryToken" in req]
        sse = template in ("/v0/watch/{wid}", "/v0/topics/{topic}/work")
        assert bool(query) == sse, (method, template)


# -- (b) the route table and the document -------------------------------------------------


async def test_served_routes_and_documented_endpoints_agree(inproc: InProc) -> None:
    app = inproc.app
    # The web console (/console) is a page for people, not part of the /v0 API document.
    api_routes = [route for route in app.table.routes if not route.pattern.startswith("/console")]
    served = {(route.method, route.pattern) for route in api_routes}
    served |= {
        ("GET", rule.rule.replace("<", "{").replace(">", "}"))
        for rule in app.quart.url_map.iter_rules()
        if rule.websocket
    }
    documented = {(method, template) for method, template, _ in contract().operations()}
    assert served - documented == set(), "served but not documented (give the Route an op=)"
    gap = documented - served
    assert gap == NOT_YET_SERVED, (
        f"now served, remove from NOT_YET_SERVED: {sorted(NOT_YET_SERVED - gap)}; "
        f"documented, not served, not listed: {sorted(gap - NOT_YET_SERVED)}"
    )
    for route in api_routes:
        op = contract().doc["paths"][route.pattern][route.method.lower()]
        params = {p["$ref"].rsplit("/", 1)[1] for p in op["parameters"]}
        if route.param:
            assert route.param in params, (route.method, route.pattern)


def test_stream_error_codes_match_their_classes() -> None:
    for code, status in stream_error_codes().items():
        assert error_class_for_code(code).code == code
        assert error_class_for_code(code).status == status
        assert error_class_for_code(code).stream_only


def _error_frame_codes(doc: dict[str, Any]) -> tuple[set[str], set[str]]:
    schemas = doc["components"]["schemas"]
    sse = schemas["SseErrorEvent"]["properties"]["error_code"]["enum"]
    (ws,) = (
        frame["properties"]["code"]["enum"]
        for frame in schemas["WsServerFrame"]["oneOf"]
        if frame["properties"]["op"] == {"const": "error"}
    )
    return set(sse), set(ws)


def test_every_registered_error_code_is_documented() -> None:
    """The codes come from topics.errors' registry: every class but a family base is an
    HTTP code (x-error-codes, one response and one Error.<code> schema each) or a
    stream-only one (the SSE and WebSocket error frames), with its class's status."""
    doc = build_document()
    schemas = doc["components"]["schemas"]
    enum = set(schemas["ErrorObject"]["properties"]["code"]["enum"])
    sse, ws = _error_frame_codes(doc)
    for code, cls in registered_codes().items():
        if code in FAMILY_CODES:
            assert code not in doc["x-error-codes"], code
            assert code not in sse, code
            continue
        assert code in sse, f"{code} missing from the SSE error frame"
        assert code in ws, f"{code} missing from the WebSocket error frame"
        if cls.stream_only:
            assert code not in doc["x-error-codes"], code
            continue
        assert doc["x-error-codes"].get(code) == cls.status, f"{code} not documented"
        assert code in doc["components"]["responses"], code
        assert code in enum, code
        assert schemas[f"Error.{code}"]["description"].startswith(f"{cls.status} {code}: ")


def test_a_new_error_class_is_documented_by_its_docstring() -> None:
    """A code added to topics.errors reaches the document without an edit of openapi/."""
    import topics.errors

    class MadeUpError(TopicsError):
        """A code this test makes up.

        Only the first paragraph describes it."""

        code = "made_up_for_openapi_test"
        status = 418

    class MadeUpStreamError(TopicsError):
        """A stream-only code this test makes up."""

        code = "made_up_stream_code_for_openapi_test"
        status = 499
        stream_only = True

    try:
        doc = build_document()
        assert doc["x-error-codes"]["made_up_for_openapi_test"] == 418
        schema = doc["components"]["schemas"]["Error.made_up_for_openapi_test"]
        assert schema["description"] == "418 made_up_for_openapi_test: A code this test makes up."
        assert "made_up_stream_code_for_openapi_test" not in doc["x-error-codes"]
        assert stream_error_codes()["made_up_stream_code_for_openapi_test"] == 499
        for codes in _error_frame_codes(doc):
            assert {"made_up_for_openapi_test", "made_up_stream_code_for_openapi_test"} <= codes
    finally:
        topics.errors._REGISTRY.pop(MadeUpError.code)
        topics.errors._REGISTRY.pop(MadeUpStreamError.code)


def test_name_patterns_are_the_validators() -> None:
    """TopicName, RouterName and CursorName carry the regexes the engine validates with."""
    from topics._names import ROUTER_NAME_RE, TOPIC_NAME_RE
    from topics.cursors.store import CURSOR_NAME_RE

    schemas = build_document()["components"]["schemas"]
    for name, regex in (
        ("TopicName", TOPIC_NAME_RE),
        ("RouterName", ROUTER_NAME_RE),
        ("CursorName", CURSOR_NAME_RE),
    ):
        assert schemas[name]["pattern"] == f"^{regex.pattern}$", name


def test_route_modules_are_the_apps() -> None:
    assert any(getattr(m, "__name__", "").endswith(".openapi") for m in ROUTE_MODULES)


# -- (c) the tour --------------------------------------------------------------------------


class Tour:
    """Sends requests and checks each answer against the document and the expectation."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self.contract = contract()
        self.seen: set[tuple[str, str, int]] = set()

    def __call__(
        self,
        method: str,
        template: str | None,
        path: str,
        status: int,
        code: str | None = None,
        **kwargs: Any,
    ) -> Any:
        r = self.client.request(method, path, **kwargs)
        assert r.status_code == status, f"{method} {path}: {r.status_code} {r.text[:500]}"
        body = self.contract.check(method if template else None, template, r)
        if code is not None:
            assert body["error"]["code"] == code, body
        self.seen.add((method, template or "*", status))
        return body


def served(method: str, template: str) -> bool:
    return (method, template) not in NOT_YET_SERVED


@pytest.fixture(scope="module")
def auth_server(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    return start_server(
        {
            "TOPICS_API_KEYS": "full-key,ro-key:read,t1-key::t1.",
            "TOPICS_PROBE_AUTH": "1",
        }
    )


@pytest.fixture(scope="module")
def small_server(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    return start_server(
        {
            "TOPICS_MAX_BODY_BYTES": "4096",
            "TOPICS_MAX_BATCH_RECORDS": "5",
            "TOPICS_MAX_RECORD_BYTES": "100",
            "TOPICS_MAX_TOPICS": "2",
        }
    )


def _records(n: int, **extra: Any) -> dict[str, Any]:
    return {"records": [{"data": {"i": i}, **extra} for i in range(n)]}


def test_tour_topics(http: httpx.Client) -> None:
    t = Tour(http)
    T = "/v0/topics/{topic}"
    t("PUT", T, "/v0/topics/tour-a", 201, content=b"")
    t("PUT", T, "/v0/topics/tour-a", 200, json={"ttl_ms": 0, "priority": 5000})
    t("PUT", T, "/v0/topics/tour-a", 400, "invalid_request", json={"ttl_ms": -1})
    t("PUT", T, "/v0/topics/tour-a", 400, "invalid_request", json={"ttlMs": 1})
    t("PUT", T, "/v0/topics/tour-a", 400, "invalid_request", content=b"{", headers=JSON)
    t("PUT", T, "/v0/topics/tour-a", 415, "unsupported_media_type", content=b"{}")
    t(
        "PUT",
        T,
        "/v0/topics/tour-a",
        415,
        "unsupported_media_type",
        json={},
        headers={"content-encoding": "br"},
    )
    t("PUT", T, "/v0/topics/" + quote("bad name"), 400, "invalid_request", json={})
    t("PUT", T, "/v0/topics/tour-q", 201, json={"type": "queue", "durable": True})
    t("PUT", T, "/v0/topics/tour-q", 409, "topic_exists_incompatible", json={"type": "log"})
    state = t("GET", T, "/v0/topics/tour-q", 200)
    assert state["queue"] == {
        "ready": 0,
        "in_flight": 0,
        "dead_lettered": 0,
        "scheduled": 0,
        "backoff": 0,
    }
    t("GET", T, "/v0/topics/tour-a?touch=false", 200)
    t("GET", T, "/v0/topics/tour-a?touch=maybe", 400, "invalid_request")
    t("GET", T, "/v0/topics/tour-none", 404, "topic_not_found")
    L = "/v0/topics"
    page = t("GET", L, "/v0/topics?page_size=1&prefix=tour-", 200)
    assert page["next_cursor"]
    t("GET", L, "/v0/topics", 200, params={"cursor": page["next_cursor"], "page_size": "5"})
    t("GET", L, "/v0/topics?cursor=garbage", 400, "invalid_request")
    t("GET", L, "/v0/topics?page_size=0", 400, "invalid_request")
    t("GET", L, "/v0/topics?page_size=x", 400, "invalid_request")
    t("DELETE", T, "/v0/topics/tour-absent", 200)
    t("POST", "/v0/topics/{topic}", "/v0/topics/tour-d", 201, json=_records(1))
    t("DELETE", T, "/v0/topics/tour-d?if_empty=true", 409, "topic_not_empty")
    t("DELETE", T, "/v0/topics/tour-d?if_empty=nope", 400, "invalid_request")
    assert t("DELETE", T, "/v0/topics/tour-d", 200)["deleted"] is True


def test_tour_cursors(http: httpx.Client) -> None:
    t = Tour(http)
    L, C = "/v0/topics/{topic}/cursors", "/v0/topics/{topic}/cursors/{cursor}"
    t("POST", "/v0/topics/{topic}", "/v0/topics/tour-cur", 201, json=_records(4))
    assert t("GET", L, "/v0/topics/tour-cur/cursors", 200)["cursors"] == []
    t("GET", C, "/v0/topics/tour-cur/cursors/g", 404, "cursor_not_found")
    assert t("PUT", C, "/v0/topics/tour-cur/cursors/g", 200, json={"seq": 1})["lag"] == 3
    t("PUT", C, "/v0/topics/tour-cur/cursors/g", 200, json={"seq": 2, "expect_seq": 1})
    t(
        "PUT",
        C,
        "/v0/topics/tour-cur/cursors/g",
        409,
        "cursor_conflict",
        json={"seq": 3, "expect_seq": 1},
    )
    t("PUT", C, "/v0/topics/tour-cur/cursors/g", 400, "invalid_request", json={"seq": 9})
    t("PUT", C, "/v0/topics/tour-none/cursors/g", 404, "topic_not_found", json={"seq": 0})
    t("GET", C, "/v0/topics/tour-cur/cursors/g", 200)
    t("GET", L, "/v0/topics/tour-cur/cursors", 200)
    body = t(
        "POST",
        "/v0/topics/{topic}/diff",
        "/v0/topics/tour-cur/diff",
        200,
        json={"cursor": "g", "commit": True},
    )
    assert [r["$seq"] for r in body["records"]] == [3, 4]
    snap = t("GET", "/v0/metrics", "/v0/metrics", 200, headers={"Accept": "application/json"})
    assert snap["topics_cursor_lag"]["tour-cur"] == {"g": 0}
    assert t("DELETE", C, "/v0/topics/tour-cur/cursors/g", 200)["deleted"] is True
    assert t("DELETE", C, "/v0/topics/tour-cur/cursors/g", 200)["deleted"] is False


def test_tour_records(http: httpx.Client) -> None:
    t = Tour(http)
    W, D, X = "/v0/topics/{topic}", "/v0/topics/{topic}/diff", "/v0/topics/{topic}/delete"
    t("POST", W, "/v0/topics/tour-r", 201, json=_records(3, tag="tg-1", node="n1"))
    t("POST", W, "/v0/topics/tour-r", 200, json={**_records(2), "node": "n2", "return_seqs": False})
    t("POST", W, "/v0/topics/tour-r?return_seqs=false", 200, json=_records(1))
    first = t(
        "POST", W, "/v0/topics/tour-r", 200, json=_records(1), headers={"idempotency-key": "k-1"}
    )
    again = t(
        "POST", W, "/v0/topics/tour-r", 200, json=_records(1), headers={"idempotency-key": "k-1"}
    )
    assert again["deduped"]
    assert again["seqs"] == first["seqs"]
    t(
        "POST",
        W,
        "/v0/topics/tour-r",
        200,
        content=gzip.compress(json.dumps(_records(2)).encode()),
        headers={**JSON, "content-encoding": "gzip"},
    )
    t(
        "POST",
        W,
        "/v0/topics/tour-r",
        400,
        "invalid_request",
        content=b"\x1f\x8b junk",
        headers={**JSON, "content-encoding": "gzip"},
    )
    t(
        "POST",
        W,
        "/v0/topics/tour-new",
        404,
        "topic_not_found",
        json={**_records(1), "create": False},
    )
    t("POST", W, "/v0/topics/tour-r", 400, "invalid_request", content=b"[1,", headers=JSON)
    t("POST", W, "/v0/topics/tour-r", 400, "invalid_request", json={"records": []})
    t("POST", W, "/v0/topics/tour-r", 400, "invalid_request", json={"records": [{}]})
    t(
        "POST",
        W,
        "/v0/topics/tour-r",
        400,
        "invalid_request",
        json={**_records(1), "idempotencyKey": "typo"},
    )
    t(
        "POST",
        W,
        "/v0/topics/tour-r",
        415,
        "unsupported_media_type",
        content=b'{"records":[{"data":1}]}',
        headers={"content-type": "text/plain"},
    )
    t(
        "PUT",
        "/v0/topics/{topic}",
        "/v0/topics/tour-full",
        201,
        json={"cap_records": 1, "discard": "reject"},
    )
    t("POST", W, "/v0/topics/tour-full", 200, json=_records(1))
    t("POST", W, "/v0/topics/tour-full", 422, "topic_full", json=_records(1))
    t("POST", W, "/v0/topics/tour-full", 400, "record_too_large", json=_records(2))
    # diff
    t("POST", D, "/v0/topics/tour-r/diff", 200, content=b"")
    body = t(
        "POST",
        D,
        "/v0/topics/tour-r/diff",
        200,
        json={"from_seq": 0, "limit": 2, "include_tags": True, "node": ["n2"]},
    )
    assert body["records"][0]["$tag"] == "tg-1"
    t("POST", D, "/v0/topics/tour-r/diff", 200, json={"include_data": False, "include_meta": False})
    t("POST", D, "/v0/topics/tour-r/diff", 200, json={"from_seq": 10**6, "wait_ms": 10})
    t("POST", D, "/v0/topics/tour-r/diff", 400, "invalid_request", json={"limit": -1})
    t("POST", D, "/v0/topics/tour-r/diff", 400, "invalid_request", json={"from": 1})
    t("POST", D, "/v0/topics/tour-r/diff", 400, "invalid_request", json={"max_batch_bytes": 0})
    t("POST", D, "/v0/topics/tour-none/diff", 404, "topic_not_found", json={})
    t("PUT", "/v0/topics/{topic}", "/v0/topics/tour-cap", 201, json={"cap_records": 2})
    t("POST", W, "/v0/topics/tour-cap", 200, json=_records(5))
    gap = t("POST", D, "/v0/topics/tour-cap/diff", 200, json={"from_seq": 1})
    assert gap["tombstone"] is not None
    assert gap["tombstone"]["reason"] == "cap"
    # delete records
    t("POST", X, "/v0/topics/tour-r/delete", 200, json={"match": ["tag", "Glob", "tg-*"]})
    t("POST", X, "/v0/topics/tour-r/delete", 200, json={"before_seq": 3, "match": "tg-1"})
    t("POST", X, "/v0/topics/tour-r/delete", 200, json={"before_seq": 2})
    t("POST", X, "/v0/topics/tour-r/delete", 400, "invalid_request", json={})
    t(
        "POST",
        X,
        "/v0/topics/tour-r/delete",
        400,
        "invalid_request",
        json={"match": ["tag", "Glob", "no-star"]},
    )
    t("POST", X, "/v0/topics/tour-none/delete", 404, "topic_not_found", json={"before_seq": 1})


def test_tour_routers(http: httpx.Client) -> None:
    if not served("PUT", "/v0/routers/{router}"):
        pytest.skip("routers are not served yet")
    t = Tour(http)
    R, L = "/v0/routers/{router}", "/v0/routers"
    t("PUT", "/v0/topics/{topic}", "/v0/topics/rt-src", 201, content=b"")
    name = quote("rt-src->rt-dst", safe="")
    t("PUT", R, f"/v0/routers/{name}", 201, json={"source": "rt-src", "dest": "rt-dst"})
    t("PUT", R, f"/v0/routers/{name}", 200, json={"source": "rt-src", "dest": "rt-dst"})
    t("GET", R, f"/v0/routers/{name}", 200)
    t("GET", L, "/v0/routers", 200)
    t("GET", L, "/v0/routers?source=rt-src&page_size=1", 200)
    t("GET", L, "/v0/routers?cursor=garbage", 400, "invalid_request")
    t(
        "PUT",
        R,
        "/v0/routers/rt-self",
        400,
        "invalid_request",
        json={"source": "rt-src", "dest": "rt-src"},
    )
    t("PUT", R, "/v0/routers/rt-bad", 400, "invalid_request", json={"source": "rt-src"})
    t(
        "PUT",
        R,
        "/v0/routers/rt-back",
        409,
        "router_cycle",
        json={"source": "rt-dst", "dest": "rt-src"},
    )
    t(
        "PUT",
        R,
        "/v0/routers/rt-nodest",
        404,
        "topic_not_found",
        json={"source": "rt-src", "dest": "rt-absent", "create_dest": False},
    )
    t("GET", R, "/v0/routers/rt-none", 404, "router_not_found")
    t("DELETE", R, f"/v0/routers/{name}", 200)
    assert t("DELETE", R, f"/v0/routers/{name}", 200)["deleted"] is False


def test_tour_queues(http: httpx.Client) -> None:
    if not served("POST", "/v0/topics/{topic}/claim"):
        pytest.skip("queues are not served yet")
    t = Tour(http)
    C, A = "/v0/topics/{topic}/claim", "/v0/topics/{topic}/ack"
    N, E = "/v0/topics/{topic}/nack", "/v0/topics/{topic}/extend"
    t("PUT", "/v0/topics/{topic}", "/v0/topics/tq", 201, json={"type": "queue"})
    t("POST", "/v0/topics/{topic}", "/v0/topics/tq", 200, json=_records(4, tag="job"))
    claim = t("POST", C, "/v0/topics/tq/claim", 200, json={"node": "w1", "max": 3})
    seqs = [job["$seq"] for job in claim["claimed"]]
    lease_ids = [job["lease_id"] for job in claim["claimed"]]
    t(
        "POST",
        E,
        "/v0/topics/tq/extend",
        200,
        json={"node": "w1", "seqs": seqs[:1], "lease_ms": 5000},
    )
    t("POST", E, "/v0/topics/tq/extend", 400, "invalid_request", json={"node": "w1", "seqs": [1]})
    t("POST", N, "/v0/topics/tq/nack", 200, json={"node": "w1", "seqs": seqs[1:2], "delay_ms": 0})
    t(
        "POST",
        A,
        "/v0/topics/tq/ack",
        200,
        json={"node": "w1", "seqs": seqs, "lease_ids": lease_ids},
    )
    t(
        "POST",
        A,
        "/v0/topics/tq/ack",
        400,
        "batch_too_large",
        json={"node": "w1", "seqs": list(range(1, 1002))},
    )
    t("POST", C, "/v0/topics/tq/claim", 400, "invalid_request", json={"max": 1})
    t("POST", C, "/v0/topics/tq/claim", 400, "invalid_request", json={"node": "w", "maxx": 1})
    W = "/v0/topics/{topic}/work"
    sse = {"accept": "text/event-stream"}
    t("GET", W, "/v0/topics/tq/work?node=w2", 406, "not_acceptable")
    t("GET", W, "/v0/topics/tq/work", 400, "invalid_request", headers=sse)
    t("GET", W, "/v0/topics/tq/work?node=w2&max=x", 400, "invalid_request", headers=sse)
    t("GET", W, "/v0/topics/tq-none/work?node=w2", 404, "topic_not_found", headers=sse)
    t("POST", "/v0/topics/{topic}", "/v0/topics/tq", 200, json=_records(1, tag="job"))
    with http.stream("GET", "/v0/topics/tq/work?node=w2&max=1", headers=sse) as r:
        assert r.status_code == 200
        contract().check("GET", W, r)
        assert "job" in _check_sse_events(r, W, until="job")
    t("POST", "/v0/topics/{topic}", "/v0/topics/tq-log", 201, json=_records(1))
    t("GET", W, "/v0/topics/tq-log/work?node=w2", 409, "not_a_queue", headers=sse)
    for template, path in ((C, "claim"), (A, "ack"), (N, "nack"), (E, "extend")):
        payload = (
            {"node": "w1", "seqs": [1], "lease_ms": 1000} if path != "claim" else {"node": "w1"}
        )
        if path in ("ack", "nack"):
            payload.pop("lease_ms")
        t("POST", template, f"/v0/topics/tq-log/{path}", 409, "not_a_queue", json=payload)
        t("POST", template, f"/v0/topics/tq-none/{path}", 404, "topic_not_found", json=payload)


def test_tour_queue_jobs(http: httpx.Client) -> None:
    """Scheduled and keyed writes, the queue state with them, and redrive (issue 19)."""
    t = Tour(http)
    T, RD = "/v0/topics/{topic}", "/v0/topics/{topic}/redrive"
    config = {"type": "queue", "max_deliveries": 1, "dead_letter": "tj-dlq"}
    t("PUT", T, "/v0/topics/tj", 201, json=config)
    jobs = {"records": [{"data": 1, "delay_ms": 60_000, "dedupe_key": "k"}], "dedupe": "until_ack"}
    t("POST", T, "/v0/topics/tj", 200, json=jobs)
    dup = t("POST", T, "/v0/topics/tj", 200, json=jobs)
    assert dup["dedupe"][0]["outcome"] == "duplicate"
    swap = t("POST", T, "/v0/topics/tj", 200, json={**jobs, "replace": True})
    assert swap["dedupe"][0]["replaced_seq"] == 1
    bad = {"records": [{"data": 1}], "dedupe": "window"}
    t("POST", T, "/v0/topics/tj", 400, "invalid_request", json=bad)
    assert t("GET", T, "/v0/topics/tj", 200)["queue"]["scheduled"] == 1
    t("POST", T, "/v0/topics/tj", 200, json=_records(2))
    claim = t("POST", "/v0/topics/{topic}/claim", "/v0/topics/tj/claim", 200, json={"node": "w"})
    seqs = [job["$seq"] for job in claim["claimed"]]
    t(
        "POST",
        "/v0/topics/{topic}/nack",
        "/v0/topics/tj/nack",
        200,
        json={"node": "w", "seqs": seqs},
    )
    t("POST", "/v0/topics/{topic}/claim", "/v0/topics/tj/claim", 200, json={"node": "w"})
    moved = t("POST", RD, "/v0/topics/tj-dlq/redrive", 200, json={"max": 5})
    assert moved["moved"] == 1
    t("POST", RD, "/v0/topics/tj-dlq/redrive", 200, content=b"")
    t("POST", RD, "/v0/topics/tj-none/redrive", 404, "topic_not_found", json={})
    t("POST", RD, "/v0/topics/tj-dlq/redrive", 400, "invalid_request", json={"max": 0})
    t("POST", T, "/v0/topics/tj-log", 201, json=_records(1))
    t("POST", RD, "/v0/topics/tj-dlq/redrive", 409, "not_a_queue", json={"to": "tj-log"})


def test_tour_watch(http: httpx.Client) -> None:
    if not served("POST", "/v0/watch"):
        pytest.skip("watch is not served yet")
    t = Tour(http)
    t("POST", "/v0/topics/{topic}", "/v0/topics/tw", 201, json=_records(2))
    session = t("POST", "/v0/watch", "/v0/watch", 200, json={"topics": {"tw": {"from_seq": 0}}})
    t("POST", "/v0/watch", "/v0/watch", 404, "topic_not_found", json={"topics": {"tw-none": {}}})
    lenient = t(
        "POST", "/v0/watch", "/v0/watch?lenient=true", 200, json={"topics": {"tw": {}, "x": {}}}
    )
    assert set(lenient["topics"]) == {"tw"}
    t("POST", "/v0/watch", "/v0/watch", 400, "invalid_request", json={"topics": {}})
    S = "/v0/watch/{wid}"
    with http.stream("GET", session["stream_url"], headers={"accept": "text/event-stream"}) as r:
        assert r.status_code == 200
        contract().check("GET", S, r)
        seen = _check_sse_events(r, S, until="caught-up")
    assert {"connection-established", "record", "caught-up"} <= seen, seen
    t(
        "GET",
        S,
        session["stream_url"],
        406,
        "not_acceptable",
        headers={"accept": "application/json"},
    )
    t(
        "GET",
        S,
        "/v0/watch/wid_AAAAAAAAAAAAAAAAAAAAAA",
        404,
        "not_found",
        headers={"accept": "text/event-stream"},
    )


def test_tour_probes_and_generic_errors(http: httpx.Client) -> None:
    t = Tour(http)
    for path in ("/v0/health", "/healthz"):
        t("GET", path, path, 200)
    for path in ("/v0/ready", "/readyz"):
        t("GET", path, path, 200)
    t("GET", "/v0/metrics", "/v0/metrics", 200)
    snapshot = t("GET", "/v0/metrics", "/v0/metrics", 200, headers={"accept": "application/json"})
    assert "topics_topics" in snapshot
    t("GET", "/v0/openapi.json", "/v0/openapi.json", 200)
    t("GET", None, "/nope", 404, "not_found")
    t("GET", None, "/v0/topics/a/b/c", 404, "not_found")
    t("PATCH", None, "/v0/topics/x", 405, "method_not_allowed")
    t("POST", None, "/v0/health", 405, "method_not_allowed")


def test_tour_limits(small_server: ServerProcess) -> None:
    with small_server.client() as client:
        t = Tour(client)
        W = "/v0/topics/{topic}"
        t("POST", W, "/v0/topics/lim-a", 201, json=_records(1))
        t(
            "POST",
            W,
            "/v0/topics/lim-a",
            413,
            "payload_too_large",
            content=b" " * 5000,
            headers=JSON,
        )
        big = gzip.compress(b'{"records":[' + b" " * 10_000 + b"]}")
        t(
            "POST",
            W,
            "/v0/topics/lim-a",
            413,
            "payload_too_large",
            content=big,
            headers={**JSON, "content-encoding": "gzip"},
        )
        t("POST", W, "/v0/topics/lim-a", 400, "batch_too_large", json=_records(6))
        t(
            "POST",
            W,
            "/v0/topics/lim-a",
            400,
            "record_too_large",
            json={"records": [{"data": "x" * 200}]},
        )
        t("PUT", W, "/v0/topics/lim-b", 201, content=b"")
        t("PUT", W, "/v0/topics/lim-c", 429, "throttled", content=b"")
        t("POST", W, "/v0/topics/lim-c", 429, "throttled", json=_records(1))
        t(
            "POST",
            "/v0/topics/{topic}/diff",
            "/v0/topics/lim-a/diff",
            413,
            "payload_too_large",
            content=b" " * 5000,
            headers=JSON,
        )


def test_tour_auth(auth_server: ServerProcess) -> None:
    def as_key(key: str | None) -> Tour:
        return Tour(auth_server.client(key))

    anon, full, ro, t1, bad = (as_key(k) for k in (None, "full-key", "ro-key", "t1-key", "nope"))
    T, W = "/v0/topics/{topic}", "/v0/topics/{topic}"
    full("PUT", T, "/v0/topics/t1.a", 201, content=b"")
    full("PUT", T, "/v0/topics/other", 201, content=b"")
    anon("GET", T, "/v0/topics/t1.a", 401, "unauthorized")
    bad("GET", T, "/v0/topics/t1.a", 401, "unauthorized")
    anon("GET", T, "/v0/topics/t1.a?token=full-key", 401, "unauthorized")
    ro("GET", T, "/v0/topics/t1.a", 200)
    ro("PUT", T, "/v0/topics/t1.a", 403, "forbidden", content=b"")
    ro("POST", W, "/v0/topics/t1.a", 403, "forbidden", json=_records(1))
    ro("DELETE", T, "/v0/topics/t1.a", 403, "forbidden")
    t1("POST", W, "/v0/topics/t1.a", 200, json=_records(1))
    t1("GET", T, "/v0/topics/other", 403, "forbidden")
    listing = t1("GET", "/v0/topics", "/v0/topics", 200)
    assert [x["topic"] for x in listing["topics"]] == ["t1.a"]
    anon("GET", "/v0/health", "/v0/health", 401, "unauthorized")
    anon("GET", "/v0/ready", "/v0/ready", 401, "unauthorized")
    anon("GET", "/v0/metrics", "/v0/metrics", 401, "unauthorized")
    anon("GET", "/v0/openapi.json", "/v0/openapi.json", 401, "unauthorized")
    ro("GET", "/v0/health", "/v0/health", 200)
    ro("GET", "/v0/metrics", "/v0/metrics", 200)
    ro("GET", "/v0/openapi.json", "/v0/openapi.json", 200)
    if served("PUT", "/v0/routers/{router}"):
        t1(
            "PUT",
            "/v0/routers/{router}",
            "/v0/routers/t1.r",
            403,
            "forbidden",
            json={"source": "t1.a", "dest": "other"},
        )
        ro("DELETE", "/v0/routers/{router}", "/v0/routers/t1.r", 403, "forbidden")
    if served("POST", "/v0/topics/{topic}/claim"):
        ro(
            "POST",
            "/v0/topics/{topic}/claim",
            "/v0/topics/t1.a/claim",
            403,
            "forbidden",
            json={"node": "w"},
        )
    for tour in (anon, full, ro, t1, bad):
        tour.client.close()


class _Recovering:
    """An engine that says it is still replaying its WAL (503 not_ready everywhere)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.ready = False
        self.recovery_progress = 0.25

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


async def test_tour_in_process_states(inproc: InProc) -> None:
    """Recovery, draining and CPU pressure, which a subprocess cannot be put into."""
    c = contract()
    state = inproc.app.state
    async with inproc.client() as client:

        async def call(
            method: str, template: str, path: str, status: int, code: str, **kw: Any
        ) -> dict[str, Any]:
            r = await client.request(method, path, **kw)
            assert r.status_code == status, r.text
            body = c.check(method, template, r)
            assert body["error"]["code"] == code
            return body  # type: ignore[no-any-return]

        state.pressure.inject(1000.0)
        body = await call(
            "POST", "/v0/topics/{topic}/diff", "/v0/topics/p/diff", 429, "throttled", json={}
        )
        assert body["error"]["detail"]["retry_after_ms"] > 0
        await call("POST", "/v0/topics/{topic}", "/v0/topics/p", 429, "throttled", json=_records(1))
        state.pressure.inject(None)

        real = state.engine
        state.engine = _Recovering(real)  # type: ignore[assignment]
        try:
            body = await call("GET", "/v0/topics", "/v0/topics", 503, "not_ready")
            assert body["error"]["detail"]["replay_progress"] == 0.25
            await call("GET", "/v0/ready", "/v0/ready", 503, "not_ready")
        finally:
            state.engine = real

        state.begin_shutdown()
        await call("GET", "/v0/ready", "/v0/ready", 503, "shutting_down")
        await call("GET", "/readyz", "/readyz", 503, "shutting_down")


def _check_sse_events(response: httpx.Response, template: str, until: str) -> set[str]:
    """Validate each event's data against the operation's x-sse-events until ``until``."""
    c = contract()
    events = c.doc["paths"][template]["get"]["x-sse-events"]
    decoder = SSEDecoder()
    seen: set[str] = set()
    for chunk in response.iter_bytes():
        for item in decoder.feed(chunk):
            if not isinstance(item, Event):
                continue
            assert item.event in events, f"undocumented SSE event {item.event!r}"
            pointer = _pointer("paths", template, "get", "x-sse-events", item.event)
            schema_ptr = c.resolve(events[item.event], pointer)[1]
            data = json.loads(item.data)
            errors = list(c.validator(schema_ptr).iter_errors(data))
            assert not errors, f"event {item.event}: {_describe(errors, data)}"
            seen.add(item.event)
            if item.event == until:
                return seen
    return seen


class _WsClient:
    """A minimal blocking WebSocket client (wsproto over a socket) for the tour."""

    def __init__(self, base_url: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        host, port = base_url.removeprefix("http://").rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.status = 0
        self.rejection = b""
        self.sock.sendall(
            self.ws.send(Request(host="topics.test", target="/v0/ws", extra_headers=headers or []))
        )
        self.pending: list[Any] = []
        while not self.status:
            self._pump()

    def _pump(self) -> None:
        data = self.sock.recv(65536)
        self.ws.receive_data(data or None)
        for event in self.ws.events():
            if isinstance(event, AcceptConnection):
                self.status = 101
            elif isinstance(event, RejectConnection):
                self.status = event.status_code
            elif isinstance(event, RejectData):
                self.rejection += event.data
            elif isinstance(event, TextMessage):
                self.pending.append(json.loads(event.data))
        if not data and not self.status:
            raise AssertionError("connection closed during the handshake")

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(self.ws.send(WsMessage(data=json.dumps(message))))

    def receive(self) -> dict[str, Any]:
        while not self.pending:
            self._pump()
        return self.pending.pop(0)  # type: ignore[no-any-return]

    def close(self) -> None:
        self.sock.close()


def test_tour_websocket(server: ServerProcess, auth_server: ServerProcess) -> None:
    if not served("GET", "/v0/ws"):
        pytest.skip("the WebSocket endpoint is not served yet")
    c = contract()
    frame = c.validator(_pointer("components", "schemas", "WsServerFrame"))
    command = c.validator(_pointer("components", "schemas", "WsClientCommand"))
    with server.client() as http:
        Tour(http)("GET", "/v0/ws", "/v0/ws", 400, "invalid_request")
    ws = _WsClient(server.base_url)
    try:
        assert ws.status == 101
        script: list[dict[str, Any]] = [
            {"op": "ping", "request_id": "p"},
            {"op": "publish", "request_id": "w", "topic": "tws", "records": [{"data": 1}]},
            {"op": "subscribe", "request_id": "s", "topic": "tws", "from_seq": 0},
            {"op": "unsubscribe", "request_id": "u", "topic": "tws"},
            {"op": "publish", "request_id": "bad", "topic": "bad name", "records": []},
        ]
        for message in script:
            assert not list(command.iter_errors(message)) or message["request_id"] == "bad"
            ws.send(message)
        answered: set[str] = set()
        while not {"pong", "ack", "subscribed", "caught_up", "unsubscribed", "error"} <= answered:
            message = ws.receive()
            errors = list(frame.iter_errors(message))
            assert not errors, f"ws frame: {_describe(errors, message)}"
            answered.add(message["op"])
    finally:
        ws.close()
    refused = _WsClient(auth_server.base_url)  # auth is on: no key, no upgrade
    try:
        assert refused.status == 401
        body = json.loads(refused.rejection or b"{}") if refused.rejection else None
        if body is not None:
            errors = list(
                c.validator(
                    _pointer(
                        "components",
                        "responses",
                        "unauthorized",
                        "content",
                        "application/json",
                        "schema",
                    )
                ).iter_errors(body)
            )
            assert not errors, _describe(errors, body)
    finally:
        refused.close()
