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


def _distribution() -> tuple[str, set[str]]:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return project["name"], set(project["optional-dependencies"])


def _doc_files() -> list[Path]:
    return [
        ROOT / "README.md",
        *sorted(DOCS.glob("*.md")),
        *sorted((ROOT / "examples").glob("*.py")),
    ]


def _commands(path: Path) -> list[str]:
    """The lines a reader would paste: fenced code in a page, every line of an example."""
    lines = path.read_text(encoding="utf-8").splitlines()
    if path.suffix != ".md":
        return lines
    fenced, inside = [], False
    for line in lines:
        if line.lstrip().startswith("```"):
            inside = not inside
        elif inside:
            fenced.append(line)
    return fenced


# Packages a doc may tell people to install beside this project.
THIRD_PARTY = {"pyarrow", "redis", "nats-py", "pyspark", "pip", "setuptools", "wheel"}


def test_install_lines_name_this_distribution_or_the_checkout() -> None:
    """`pip install topics` installs an unrelated project from PyPI: every install line in the
    docs installs the checkout (`.`, with extras pyproject declares) or the distribution
    pyproject names, never the bare import name."""
    name, extras = _distribution()
    assert name != "topics"
    seen = 0
    for path in _doc_files():
        for line in _commands(path):
            m = re.search(r"pip install ([^#`]*)", line)
            if m is None:
                continue
            for word in m.group(1).replace("'", " ").replace('"', " ").split():
                if word.startswith("-") or word.startswith("("):
                    continue
                req = re.match(r"([A-Za-z0-9_.\-]+)(?:\[([a-z,]+)\])?", word)
                assert req is not None, (path.name, line)
                base, wanted = req.group(1), req.group(2)
                if base in THIRD_PARTY:
                    continue
                assert base in (".", name), f"{path.name}: {line.strip()!r} installs {base!r}"
                for extra in (wanted or "").split(","):
                    assert not extra or extra in extras, f"{path.name}: no extra {extra!r}"
                seen += 1
    assert seen >= 2  # QUICKSTART.md and SPARK.md install the project


def test_examples_say_how_to_run_them_with_the_venv() -> None:
    """Outside the venv `python examples/x.py` cannot import topics: each example's Run line
    uses the venv's Python, which ./scripts/serve creates."""
    for path in sorted((ROOT / "examples").glob("[!_]*.py")):  # _x.py: helpers, not examples
        text = path.read_text(encoding="utf-8")
        runs = re.findall(r"^\s*(?:Run:)?\s*(?:\w+=\S+ )?(\S*python\S*) examples/", text, re.M)
        assert runs, f"{path.name} does not say how to run it"
        assert set(runs) == {".venv/bin/python"}, (path.name, runs)
    for path in _doc_files():
        for line in path.read_text(encoding="utf-8").splitlines():
            assert not re.search(r"(?<![/\w])python3? examples/", line), (path.name, line)


# A "§N.M" right after one of these names another document (STYLE.md, an RFC, ...), not the
# contract.
_FOREIGN_SECTION = re.compile(
    r"(?:STYLE(?:\.md)?|RFC \d+|\d{4}|ARCHITECTURE(?:\.md)?|DESIGN(?:\.md)?)\s*$"
)


def _contract_citations(pattern: str) -> dict[str, list[str]]:
    """Every contract reference ``pattern`` finds in topics/, frontends/ and tests/ -> where."""
    found: dict[str, list[str]] = {}
    for top in ("topics", "frontends", "tests"):
        for path in sorted((ROOT / top).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            for m in re.finditer(pattern, text):
                if _FOREIGN_SECTION.search(text[max(0, m.start() - 20) : m.start()]):
                    continue
                line = text.count("\n", 0, m.start()) + 1
                found.setdefault(m.group(1), []).append(f"{path.relative_to(ROOT)}:{line}")
    return found


def test_every_contract_section_the_code_cites_is_in_contract_md() -> None:
    """A ``§3.3`` in a comment means the heading ``§3.3`` of docs/CONTRACT.md, and
    ``CONTRACT-NOTES 5`` its heading of that name: every reference resolves in the repo."""
    contract = (DOCS / "CONTRACT.md").read_text(encoding="utf-8")
    sections = set(re.findall(r"^#{2,4} §(\d+(?:\.\d+)*) ", contract, re.M))
    notes = set(re.findall(r"^#{2,4} CONTRACT-NOTES (\d+) ", contract, re.M))
    cited = _contract_citations(r"§ ?(\d+(?:\.\d+)*)")
    assert len(cited) >= 40  # (the extraction itself works)
    missing = {s: where[:3] for s, where in cited.items() if s not in sections}
    assert not missing, f"sections cited but not in docs/CONTRACT.md: {missing}"
    cited_notes = _contract_citations(r"CONTRACT-NOTES (\d+)")
    assert cited_notes
    missing = {n: where[:3] for n, where in cited_notes.items() if n not in notes}
    assert not missing, f"settlements cited but not in docs/CONTRACT.md: {missing}"


def test_no_doc_links_outside_the_repository() -> None:
    """Every relative link in README.md and docs/*.md resolves to a file inside the
    repository (a link to ../shared or a spec file works only on the machine it was written
    on); anchors and absolute URLs are left alone."""
    pages = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
    checked = 0
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for outside in ("../shared", "CONTRACT-NOTES.md", "STYLE.md"):  # plain-text mentions
            assert outside not in text, f"{page.name} refers to {outside} outside the repo"
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # https:, mailto:, an anchor in the same page
            path = (page.parent / target.split("#", 1)[0]).resolve()
            assert path.is_relative_to(ROOT), f"{page.name} links outside the repo: {target}"
            assert path.exists(), f"{page.name} links to missing {target}"
            checked += 1
    assert checked > 20
