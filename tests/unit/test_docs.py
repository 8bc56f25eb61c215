"""The user docs stay true: ENDPOINTS.md is what scripts/gen_endpoints.py makes of openapi.json,
and every relative link in the user pages points at a file that exists."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
USER_PAGES = ("QUICKSTART", "CONCEPTS", "GUARANTEES", "GUIDES", "OPERATIONS", "ENDPOINTS")


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_endpoints", ROOT / "scripts/gen_endpoints.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_endpoints_page_is_generated_from_the_openapi_document() -> None:
    gen = _generator()
    doc = json.loads((DOCS / "openapi.json").read_text(encoding="utf-8"))
    expected = gen.render(doc)
    actual = (DOCS / "ENDPOINTS.md").read_text(encoding="utf-8")
    assert actual == expected, "docs/ENDPOINTS.md is stale: run python scripts/gen_endpoints.py"
    assert actual.startswith(gen.BANNER)
    for path, ops in doc["paths"].items():
        for method in ops:
            if method in gen.METHODS:
                assert f"| `{method.upper()}` | `{path}` |" in actual, (method, path)


def test_user_pages_exist_and_their_relative_links_resolve() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in USER_PAGES:
        page = DOCS / f"{name}.md"
        assert page.is_file(), page
        assert f"docs/{name}.md" in readme, f"README.md does not link docs/{name}.md"
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"
