"""The import graph of topics/ and frontends/ may not get worse (issue 16's ratchet).

Three rules, read from the source with ``ast`` (nothing is imported):

1. No module imports another module's private name (``from .engine import _append_batch``).
   A module of the package may be private (``topics.log.topic_log``); a *name* starting with ``_``
   belongs to its module.
2. No import cycles. Every import counts, deferred ones inside functions too (a cycle held
   together by a function-level import is still a cycle a reader has to untangle); only
   imports under ``if TYPE_CHECKING:`` are left out, since they never run.
2b. No type-only import cycles either: counting the ``if TYPE_CHECKING:`` imports too, no
   cycle beyond those of rule 2 (issue 29). Two modules that need each other's names even
   only for annotations are one piece split in two: merge them, or give the lower one a
   protocol of what it uses (``topics/client/_client_like.py``).
3. Layers (docs/ARCHITECTURE.md opens with the list): the layers are an ordered list of
   folders (and the few top-level modules), :data:`LAYERS`; every module belongs to one and
   imports only from its own layer and those below it. A module in a new folder must be
   given a layer here.
4. The Engine is a facade: no module but ``topics/engine.py`` reads or calls an Engine's
   ``_private`` attribute (``engine._registry``), and no module below the facade imports
   ``topics.engine`` at all, not even for type hints: the subsystems get what they need
   from the appender the Engine hands them (issue 16).

The layering work of issue 16 removes what exists today; until then the lists below hold
exactly today's violations, so the test fails on a new one, and on a listed one that is
gone (the list must shrink with the code, never hide a fixed entry).
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("topics", "frontends")

#: The layers, lowest first: (name, its folders and top-level modules). A folder holds
#: every module below it; a module named here wins over its folder (frontends/inproc.py).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "core",
        (
            "topics/_core/",
            "topics/_limits.py",
            "topics/_clock.py",
            "topics/_version.py",
            "topics/errors.py",
            "topics/_names.py",
            "topics/_args.py",
            "topics/_meta_keys.py",
        ),
    ),
    ("storage", ("topics/_storage/",)),
    (
        "shapes",
        (
            "topics/types.py",
            "topics/*_types.py",
            "topics/config.py",
            "topics/settings.py",
            "topics/record_fields.py",
            "topics/result_fields.py",
            "topics/auth.py",
            "topics/query/",
        ),
    ),
    ("logs", ("topics/log/",)),
    # What joins storage to topic logs: logging and recovering them, the appender every
    # subsystem writes through, and reading a data directory offline.
    ("persistence", ("topics/_persistence/", "topics/reader.py")),
    (
        "subsystems",
        ("topics/ops/", "topics/cursors/", "topics/watch/", "topics/queues/", "topics/routers/"),
    ),
    (
        "facade",
        (
            "topics/engine.py",
            "topics/_facade.py",
            "topics/worker.py",
            "topics/consumer.py",
            "frontends/inproc.py",
        ),
    ),
    (
        "edges",
        (
            "topics/__init__.py",
            "topics/wire/",
            "topics/client/",
            "topics/spark/",
            "topics/cli/",
            "frontends/",
        ),
    ),
)

#: Imports of a higher layer that exist today: (importer, imported).
KNOWN_LAYER_VIOLATIONS: frozenset[tuple[str, str]] = frozenset()

#: Cross-module private imports that exist today: (importer, module, name).
KNOWN_PRIVATE_IMPORTS: frozenset[tuple[str, str, str]] = frozenset()

#: Import cycles that exist today, each as the sorted modules of one strongly connected
#: component of the graph.
KNOWN_CYCLES: frozenset[tuple[str, ...]] = frozenset()

#: Cycles that exist today only through ``if TYPE_CHECKING:`` imports (rule 2b), each as
#: the sorted modules of one strongly connected component of the graph with those imports.
KNOWN_TYPE_ONLY_CYCLES: frozenset[tuple[str, ...]] = frozenset()


@functools.cache
def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "frontends" in path.relative_to(ROOT).parts[1:]:
                continue  # topics/frontends is a link to frontends/
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, type_only: bool = False) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports that run; with ``type_only``, those under ``if TYPE_CHECKING:`` too."""
    todo: list[ast.AST] = [tree]
    while todo:  # depth first, in source order
        node = todo.pop()
        if not type_only and isinstance(node, ast.If) and _is_type_checking(node):
            todo.extend(reversed(node.orelse))
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        todo.extend(reversed(list(ast.iter_child_nodes(node))))


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *(node.module.split(".") if node.module else [])])


def _canonical(name: str) -> str:
    # topics.frontends.x is frontends.x reached through the link.
    return name.removeprefix("topics.") if name.startswith("topics.frontends") else name


def graph(type_only: bool = False) -> tuple[dict[str, set[str]], set[tuple[str, str, str]]]:
    """The package's import edges, and its cross-module private-name imports; with
    ``type_only``, the ``if TYPE_CHECKING:`` imports count too."""
    modules = _modules()
    edges: dict[str, set[str]] = {m: set() for m in modules}
    private: set[tuple[str, str, str]] = set()

    def known(name: str) -> str | None:
        name = _canonical(name)
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text(), str(path)), type_only):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = known(alias.name)
                    if target and target != module:
                        edges[module].add(target)
                continue
            source = _canonical(_resolve(module, is_package, node))
            for alias in node.names:
                full = f"{source}.{alias.name}"
                if _canonical(full) in modules:  # a submodule, not a name
                    target = _canonical(full)
                elif (ROOT / full.replace(".", "/")).with_suffix(".pyx").exists():
                    target = None  # a compiled submodule (topics._core._scan)
                else:
                    target = known(source)
                    name = alias.name
                    if (
                        target
                        and target != module
                        and name.startswith("_")
                        and not name.startswith("__")
                    ):
                        private.add((module, target, name))
                if target and target != module:
                    edges[module].add(target)
    return edges, private


def cycles(edges: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[tuple[str, ...]] = set()
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.add(tuple(sorted(component)))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_new_private_name_imports() -> None:
    _, private = graph()
    new = sorted(private - KNOWN_PRIVATE_IMPORTS)
    gone = sorted(KNOWN_PRIVATE_IMPORTS - private)
    assert not new, f"imports of another module's private names: {new}"
    assert not gone, f"fixed, take them off KNOWN_PRIVATE_IMPORTS: {gone}"


def test_no_new_import_cycles() -> None:
    edges, _ = graph()
    found = cycles(edges)
    new = sorted(found - KNOWN_CYCLES)
    gone = sorted(KNOWN_CYCLES - found)
    assert not new, f"new or grown import cycles: {new}"
    assert not gone, f"gone or shrunk, update KNOWN_CYCLES: {gone}"


def test_no_new_type_only_import_cycles() -> None:
    # The cycles the TYPE_CHECKING imports make or grow; rule 2's own are the test above's.
    found = cycles(graph(type_only=True)[0]) - cycles(graph()[0])
    new = sorted(found - KNOWN_TYPE_ONLY_CYCLES)
    gone = sorted(KNOWN_TYPE_ONLY_CYCLES - found)
    assert not new, f"new or grown type-only import cycles: {new}"
    assert not gone, f"gone or shrunk, update KNOWN_TYPE_ONLY_CYCLES: {gone}"


def layer_of(module: str) -> int | None:
    """The layer whose most specific entry holds the module's file."""
    path = _modules().get(module)
    if path is None:
        return None
    rel = path.relative_to(ROOT).as_posix()
    best: tuple[int, int] | None = None  # (specificity, layer)
    for i, (_, entries) in enumerate(LAYERS):
        for entry in entries:
            if entry.endswith("/"):
                hit, weight = rel.startswith(entry), len(entry)
            else:
                hit, weight = fnmatch.fnmatchcase(rel, entry), 10_000 + len(entry)
            if hit and (best is None or weight > best[0]):
                best = (weight, i)
    return None if best is None else best[1]


def test_every_module_has_a_layer_and_imports_none_above_it() -> None:
    edges, _ = graph()
    unplaced = sorted(m for m in edges if layer_of(m) is None)
    assert not unplaced, f"give these modules a layer in LAYERS: {unplaced}"
    upward = set()
    for module, targets in edges.items():
        mine = layer_of(module)
        assert mine is not None
        for target in targets:
            theirs = layer_of(target)
            assert theirs is not None, target
            if theirs > mine:
                upward.add((module, target))
    new = sorted(upward - KNOWN_LAYER_VIOLATIONS)
    gone = sorted(KNOWN_LAYER_VIOLATIONS - upward)
    assert not new, f"imports from a higher layer: {new}"
    assert not gone, f"fixed, take them off KNOWN_LAYER_VIOLATIONS: {gone}"


_ENGINE_TYPE = re.compile(r"\bEngine\b")


def engine_private_uses(tree: ast.AST) -> set[tuple[str, int]]:
    """``(attribute, line)`` of every ``_private`` attribute read on an Engine: on a name
    called ``engine`` or annotated ``Engine`` (a parameter or a variable), or on an
    ``engine``/``_engine`` attribute (``self.engine._x``)."""
    names = {"engine"}
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            annotation, name = node.annotation, node.arg
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            annotation, name = node.annotation, node.target.id
        else:
            continue
        if _ENGINE_TYPE.search(ast.unparse(annotation)):
            names.add(name)
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        if not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        owner = node.value
        if (isinstance(owner, ast.Name) and owner.id in names) or (
            isinstance(owner, ast.Attribute) and owner.attr in ("engine", "_engine")
        ):
            found.add((node.attr, node.lineno))
    return found


def test_no_module_reaches_into_the_engine() -> None:
    reaching = []
    for module, path in _modules().items():
        if module == "topics.engine":
            continue
        uses = engine_private_uses(ast.parse(path.read_text(), str(path)))
        reaching.extend(f"{module}:{line} .{attr}" for attr, line in sorted(uses))
    assert not reaching, f"private Engine attributes used outside engine.py: {reaching}"


def test_nothing_below_the_facade_imports_the_engine() -> None:
    facade = [name for name, _ in LAYERS].index("facade")
    importers = []
    for module, path in _modules().items():
        mine = layer_of(module)
        if mine is None or mine >= facade:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):  # TYPE_CHECKING imports too
            if isinstance(node, ast.ImportFrom):
                source = _resolve(module, path.name == "__init__.py", node)
                targets = [source] + [f"{source}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            if "topics.engine" in targets:
                importers.append(f"{module}:{node.lineno}")
    assert not importers, f"modules below the facade importing topics.engine: {importers}"


def test_the_checks_see_what_they_look_for() -> None:
    """The analysis itself: a private import, a two-module cycle and a type-only import
    are found."""
    tree = ast.parse("from ..engine import _append_batch\nfrom . import hub\n")
    nodes = [n for n in _imports(tree) if isinstance(n, ast.ImportFrom)]
    assert _resolve("topics.routers.ops", False, nodes[0]) == "topics.engine"
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == {("a", "b")}
    guarded = ast.parse("if TYPE_CHECKING:\n    from .x import y\nimport z\n")
    assert [type(n).__name__ for n in _imports(guarded)] == ["Import"]
    assert [type(n).__name__ for n in _imports(guarded, type_only=True)] == [
        "ImportFrom",
        "Import",
    ]
    names = [name for name, _ in LAYERS]
    assert names[layer_of("topics._core._pure")] == "core"  # type: ignore[index]
    assert names[layer_of("topics._storage.wal")] == "storage"  # type: ignore[index]
    assert names[layer_of("topics._persistence.store")] == "persistence"  # type: ignore[index]
    assert names[layer_of("frontends.http.app")] == "edges"  # type: ignore[index]
    assert names[layer_of("frontends.inproc")] == "facade"  # type: ignore[index]
    assert names[layer_of("topics.watch.hub")] == "subsystems"  # type: ignore[index]
    assert names[layer_of("topics.queue_types")] == "shapes"  # type: ignore[index]
    assert layer_of("topics.no_such_module") is None
    reach = ast.parse(
        "def f(e: Engine, db: SyncEngine) -> None:\n"
        "    e._store\n    db.engine._registry\n    engine._wait(1)\n    db._call()\n"
    )
    assert engine_private_uses(reach) == {("_store", 2), ("_registry", 3), ("_wait", 4)}
