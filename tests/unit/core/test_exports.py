"""Both core implementations export the same names, values and call signatures, and
topics._core picks the right one."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

import topics._core as core_pkg
from topics._core import _pure

try:
    from topics._core import _ext
except ImportError:
    _ext = None  # type: ignore[assignment]

needs_ext = pytest.mark.skipif(_ext is None, reason="compiled core (topics._core._ext) not built")
NAMES = [n for n in core_pkg.__all__ if n != "IMPLEMENTATION"]
STUB = "_ext.pyi"


def stub_names() -> set[str]:
    """Public top-level names the interface stub declares."""
    import ast
    from pathlib import Path

    tree = ast.parse((Path(core_pkg.__file__).parent / STUB).read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
    return {n for n in names if not n.startswith("_")}


def test_all_lists_every_stub_name() -> None:
    assert set(NAMES) == stub_names()
    assert len(core_pkg.__all__) == len(set(core_pkg.__all__))


@pytest.mark.parametrize(
    "module", [pytest.param(_pure, id="pure"), pytest.param(_ext, id="ext", marks=needs_ext)]
)
def test_module_exports_every_name(module: ModuleType) -> None:
    missing = [n for n in NAMES if not hasattr(module, n)]
    assert missing == []


def defined_here(module: ModuleType) -> set[str]:
    """Public functions and classes the module itself defines (not imports)."""
    return {
        name
        for name, obj in vars(module).items()
        if not name.startswith("_")
        and getattr(obj, "__module__", None) == module.__name__
        and callable(obj)
    }


@needs_ext
def test_same_public_definitions_and_constants() -> None:
    assert defined_here(_pure) == defined_here(_ext)
    for name in NAMES:
        value = getattr(_pure, name)
        if isinstance(value, int):
            assert getattr(_ext, name) == value, name
    assert _pure.Buffer == _ext.Buffer
    assert issubclass(_ext.FrameError, ValueError)


def parameters(obj: Any) -> list[tuple[str, Any, Any]] | None:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    return [(p.name, p.kind, p.default) for p in sig.parameters.values()]


def callables() -> Iterator[tuple[str, Any, Any]]:
    assert _ext is not None
    for name in sorted(defined_here(_pure)):
        pure_obj, ext_obj = getattr(_pure, name), getattr(_ext, name)
        yield name, pure_obj, ext_obj
        if inspect.isclass(pure_obj):
            for attr, member in vars(pure_obj).items():
                if attr.startswith("_") or isinstance(member, property):
                    continue
                yield f"{name}.{attr}", getattr(pure_obj, attr), getattr(ext_obj, attr)


@needs_ext
def test_signatures_match_where_introspectable() -> None:
    checked = 0
    for name, pure_obj, ext_obj in callables():
        ext_params = parameters(ext_obj)
        if ext_params is None:
            continue
        assert ext_params == parameters(pure_obj), name
        checked += 1
    assert checked >= 25  # every function, constructor and method, in practice


@needs_ext
def test_properties_match() -> None:
    for cls in ("SegmentBuffer", "TagTrie"):
        pure_props = {n for n, v in vars(getattr(_pure, cls)).items() if isinstance(v, property)}
        for prop in pure_props:
            assert hasattr(getattr(_ext, cls), prop), f"{cls}.{prop}"
    assert hasattr(_ext.TagTrie, "__len__")


def reload_core(monkeypatch: pytest.MonkeyPatch, value: str | None) -> ModuleType:
    if value is None:
        monkeypatch.delenv("TOPICS_PURE_PYTHON", raising=False)
    else:
        monkeypatch.setenv("TOPICS_PURE_PYTHON", value)
    return importlib.reload(core_pkg)


def implementation(module: ModuleType) -> str:
    return str(module.IMPLEMENTATION)


def test_implementation_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        forced = reload_core(monkeypatch, "1")
        assert implementation(forced) == "pure"
        assert forced.SegmentBuffer is _pure.SegmentBuffer
        assert all(getattr(forced, n) is getattr(_pure, n) for n in NAMES)
        default = reload_core(monkeypatch, None)
        expected = "pure" if _ext is None else "cython"
        assert implementation(default) == expected
        assert default.encode_batch is (_pure if _ext is None else _ext).encode_batch
        assert implementation(reload_core(monkeypatch, "0")) == expected
    finally:
        monkeypatch.undo()
        importlib.reload(core_pkg)
