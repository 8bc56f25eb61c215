"""Frontends never set attributes of engine objects (issue 29, item 3; docs/ARCHITECTURE.md
"How the engine tells a frontend").

A frontend hears from the engine through the listener it hands over
(topics/listener_types.py) and changes engine state only by calling methods. Read from the
source with ``ast`` (nothing is imported): in ``frontends/``, an assignment (``=``,
augmented, annotated; of the attribute or of an item in it), a ``del`` or a ``setattr``
of ``<expr>.<name>``, where ``<expr>``
is not the method's own ``self``, must name an attribute the frontends' own classes
define and no engine class does. An attribute only the engine's classes define
(``feed.sink``, ``stream.on_stop``, ``session.cursor``) fails; so does one nobody defines,
unless it belongs to a third-party object listed below with the reason.

"The engine's classes" are the classes of every module of ``topics/`` below the edges
(the wire formats, the clients, Spark and the CLI are frontends of their own).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Parts of ``topics/`` that are edges themselves, not the engine.
EDGES = ("topics/wire/", "topics/client/", "topics/spark/", "topics/cli/", "topics/frontends/")

#: Attributes of third-party objects a frontend sets, by name: why it may.
THIRD_PARTY_ATTRIBUTES = {
    "deadline": "trio.CancelScope.deadline: how a frontend bounds its own waits",
}
#: Third-party objects a frontend builds and configures, by (module, variable): why.
THIRD_PARTY_OBJECTS = {
    ("frontends/server.py", "config"): "hypercorn.config.Config, built by the server's main",
    ("frontends/http/hypercorn_server.py", "protocol"): (
        "hypercorn's H11Protocol, whose h11 connection that module replaces with its own"
    ),
}
#: Attributes both a frontend class and an engine class define, set here on the
#: frontend's own object, by (module, target): which object it is.
SHARED_NAMES = {
    ("frontends/http/app.py", "ctx.name"): "RequestContext (frontends/http/state.py)",
    ("frontends/http/app.py", "ctx.principal"): "RequestContext (frontends/http/state.py)",
    ("frontends/http/app.py", "connection.request_id"): "ConnectionInfo (http/connection.py)",
    ("frontends/ws.py", "connection.request_id"): "ConnectionInfo (http/connection.py)",
    ("frontends/http/app.py", "_random.buf"): "_RandomPool (the same module), after a fork",
    ("frontends/http/connection.py", "info.scope"): "ConnectionInfo (the same module)",
}


def _modules(folder: str) -> Iterator[tuple[str, ast.Module]]:
    for path in sorted((ROOT / folder).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if folder == "topics" and (rel.startswith(EDGES) or rel == "topics/__init__.py"):
            continue
        yield rel, ast.parse(path.read_text(encoding="utf-8"), rel)


def _targets(node: ast.AST) -> Iterator[ast.expr]:
    """The expressions ``node`` assigns or deletes (tuple targets unpacked)."""
    if isinstance(node, ast.Assign):
        todo = list(node.targets)
    elif isinstance(node, ast.AnnAssign | ast.AugAssign):
        todo = [node.target]
    elif isinstance(node, ast.Delete):
        todo = list(node.targets)
    else:
        return
    while todo:
        target = todo.pop()
        if isinstance(target, ast.Tuple | ast.List):
            todo.extend(target.elts)
        elif isinstance(target, ast.Starred):
            todo.append(target.value)
        else:
            yield target


def _is_self(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Name) and expr.id == "self"


def _defined(trees: Iterator[tuple[str, ast.Module]]) -> frozenset[str]:
    """Attribute names the classes of ``trees`` define: ``self.x = `` in a method, a
    ``__slots__`` entry, or a field declared in the class body (dataclasses, tuples)."""
    names: set[str] = set()
    for _, tree in trees:
        for cls in ast.walk(tree):
            if not isinstance(cls, ast.ClassDef):
                continue
            for stmt in cls.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    names.add(stmt.target.id)
                if isinstance(stmt, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__slots__" for t in stmt.targets
                ):
                    names.update(
                        c.value
                        for c in ast.walk(stmt.value)
                        if isinstance(c, ast.Constant) and isinstance(c.value, str)
                    )
            for node in ast.walk(cls):
                for target in _targets(node):
                    if isinstance(target, ast.Attribute) and _is_self(target.value):
                        names.add(target.attr)
    return frozenset(names)


@functools.cache
def _engine_names() -> frozenset[str]:
    return _defined(_modules("topics"))


@functools.cache
def _frontend_names() -> frozenset[str]:
    return _defined(_modules("frontends"))


def _settings(tree: ast.Module) -> Iterator[tuple[int, ast.expr, str]]:
    """(line, object, attribute) of every attribute set or deleted outside ``self``; an
    item set in one (``stream.session.topics[name] = st``) changes that attribute too."""
    for node in ast.walk(tree):
        for target in _targets(node):
            while isinstance(target, ast.Subscript):
                target = target.value
            if isinstance(target, ast.Attribute) and not _is_self(target.value):
                yield node.lineno, target.value, target.attr
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and node.args
            and not _is_self(node.args[0])
        ):
            name = node.args[1] if len(node.args) > 1 else None
            attr = name.value if isinstance(name, ast.Constant) else "<computed>"
            yield node.lineno, node.args[0], str(attr)


def violations(module: str, tree: ast.Module) -> list[str]:
    """Where ``module`` (a frontend) sets an attribute that is not its own (see above)."""
    engine, frontend = _engine_names(), _frontend_names()
    out = []
    for line, obj, attr in sorted(_settings(tree), key=lambda found: found[0]):
        target = f"{ast.unparse(obj)}.{attr}"
        if attr in THIRD_PARTY_ATTRIBUTES or (module, target) in SHARED_NAMES:
            continue
        if isinstance(obj, ast.Name) and (module, obj.id) in THIRD_PARTY_OBJECTS:
            continue
        if attr in frontend and attr not in engine:
            continue
        out.append(f"{module}:{line}: {target}")
    return out


def test_no_frontend_sets_an_engine_objects_attribute() -> None:
    found = [v for module, tree in _modules("frontends") for v in violations(module, tree)]
    assert not found, (
        "a frontend sets attributes that are not its own; call a method of the engine "
        "object (WatchStream.attach/group/detach, WorkSession.poll/detach) instead:\n"
        + "\n".join(found)
    )


def test_the_exceptions_are_still_there() -> None:
    """Each listed exception names code that exists (the lists shrink with the code)."""
    trees = dict(_modules("frontends"))
    for module, target in SHARED_NAMES:
        assert any(
            f"{ast.unparse(obj)}.{attr}" == target for _, obj, attr in _settings(trees[module])
        ), (module, target)
    for module, name in THIRD_PARTY_OBJECTS:
        assert any(
            isinstance(obj, ast.Name) and obj.id == name for _, obj, _ in _settings(trees[module])
        ), (module, name)


def test_the_check_sees_the_old_ways() -> None:
    """What the frontends did before issue 29 fails; their own state does not."""
    source = (
        "def run(self, stream, session, conn, now):\n"
        "    stream.on_stop = self.stopped\n"
        "    self.stream.feed.sink = self\n"
        "    stream.feed.deliver, x = None, 1\n"
        "    del session.stream\n"
        "    setattr(stream, 'active', False)\n"
        "    stream.session.topics['a'] = None\n"
        "    conn.last_sent = now\n"
        "    self.last_sent = now\n"
        "    self.ids['a'] = 1\n"
    )
    found = violations("frontends/example.py", ast.parse(source))
    assert found == [
        "frontends/example.py:2: stream.on_stop",
        "frontends/example.py:3: self.stream.feed.sink",
        "frontends/example.py:4: stream.feed.deliver",
        "frontends/example.py:5: session.stream",
        "frontends/example.py:6: stream.active",
        "frontends/example.py:7: stream.session.topics",
    ]
