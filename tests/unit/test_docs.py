"""The user docs stay true: ENDPOINTS.md is what scripts/gen_endpoints.py makes of openapi.json,
every relative link in the user pages points at a file that exists, and every reference to a
section or a heading (``§3.3``, ``STYLE §5``, ``docs/WATCH.md, "Fan-out"``,
``WATCH.md#fan-out``) in code, tests and docs lands on one that exists."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

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


# -- References to sections and headings ---------------------------------------------------
#
# Code, tests and docs cite the style guide as ``STYLE §n`` (or ``STYLE.md §n``) and a
# heading of a page by its title, or by the title's part before a colon or a parenthesis:
# ``docs/WATCH.md, "Fan-out"``, ``WATCH.md "Resume order"``, ``[CLI.md](CLI.md), "Filters"``,
# ``[WATCH.md](WATCH.md) ("Prefix watch", "Backlog guard")``, or a link to its anchor.
# Every such reference must land on a heading that exists. Files are found through git, not
# a list, so a module or page that moves is still read where it now is.

# STYLE.md lives in the team's shared folder, beside the clone (read-only in CI).
STYLE = ROOT.parent / "shared" / "STYLE.md"

_STYLE_CITATION = re.compile(r"\bSTYLE(?:\.md)?[,:]?\s*§\s*(\d+)")

_HEADING_CITATION = re.compile(
    r"(?<![\w/.\"'-])"  # the start of a name, not the middle of a path or a string literal
    r"(?:\[[^\]\n]*\]\()?"  # the "[text](" of a Markdown link, if it is one
    r"(?P<doc>(?:[\w.-]+/)*[A-Z][A-Z0-9_]+(?:\.md)?)(?:#[\w-]+)?(?:\)|`{1,2})?"
    r"(?P<sep>[,:]?[ \t]*(?:\n[ \t]*(?:#[ \t]*)?)?\(?)"  # may wrap onto a comment line
    r"(?P<quoted>[\"“][^\s\"”][^\"”]{0,160}[\"”]"
    r"(?:[ \t]*,[ \t]*(?:and[ \t]+)?[\"“][^\s\"”][^\"”]{0,160}[\"”])*)"
)
_QUOTED = re.compile(r"[\"“]([^\"”]+)[\"”]")
_ANCHOR = re.compile(r"(?<![\w/.\"'-])(?P<doc>(?:[\w.-]+/)*[\w-]+\.md)?#(?P<anchor>[a-z0-9_-]+)\b")


def _repo_text_files() -> list[Path]:
    """Every text file of the checkout: tracked or new, not ignored, not a symlink."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=False,
    )
    if listed.returncode == 0:
        paths = [ROOT / name for name in listed.stdout.decode().split("\0") if name]
    else:  # not a git checkout (an unpacked sdist): every file outside hidden folders
        paths = [
            p for p in ROOT.rglob("*") if not any(s[0] == "." for s in p.relative_to(ROOT).parts)
        ]
    files = []
    for path in sorted(set(paths)):
        if path.is_symlink() or not path.is_file() or path.suffix in {".png", ".ico", ".so"}:
            continue
        files.append(path)
    return files


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None


def _squash(text: str) -> str:
    """A heading or a citation of it, wrapped and marked up however: plain words."""
    text = re.sub(r"\s*\n\s*(?:#\s*)?", " ", text)
    return " ".join(text.replace("`", "").replace("*", "").split()).casefold()


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower()).replace(" ", "-")


def _names(heading: str, cited: str) -> bool:
    """Whether ``cited`` names ``heading``: the whole of it, or its title before a colon, a
    parenthesis, a dash or a comma ("Filters" for "Filters: `--since`, `--where`")."""
    heading, cited = _squash(heading), _squash(cited)
    if heading == cited:
        return True
    rest = heading[len(cited) :] if heading.startswith(cited) else ""
    return rest.startswith((":", " (", " —", " - ", ","))


def _headings(page: Path) -> list[str]:
    """The headings of a Markdown page, outside fenced code."""
    found, inside = [], False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
        elif not inside and (m := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)):
            found.append(m.group(1))
    return found


def _cited_page(doc: str, cited_from: Path) -> Path | None:
    """The Markdown page a citation names: beside the citing file, in docs/, at the top of
    the repository, or (STYLE.md and the intended ARCHITECTURE.md) in the shared folder
    when the citation says ``../shared/``; None when no such page exists."""
    name = doc if doc.endswith(".md") else f"{doc}.md"
    if "/" in name:
        candidates = [cited_from.parent / name, ROOT / name]
    else:
        candidates = [cited_from.parent / name, DOCS / name, ROOT / name]
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    return None


def _where(path: Path, text: str, offset: int) -> str:
    return f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, offset) + 1}"


def heading_citations(path: Path, text: str) -> list[tuple[str, str, str]]:
    """(where, doc as written, heading as cited) for each quoted heading ``text`` cites."""
    found = []
    for m in _HEADING_CITATION.finditer(text):
        if not m.group("sep") and not m.group(0).startswith("["):
            continue  # "X.md""..." is two string literals, not a citation
        for quoted in _QUOTED.finditer(m.group("quoted")):
            found.append((_where(path, text, m.start()), m.group("doc"), quoted.group(1)))
    return found


def anchor_citations(path: Path, text: str) -> list[tuple[str, str | None, str]]:
    """(where, doc or None for the page itself, anchor) for each link to a heading of
    another page (``WATCH.md#fan-out``), and each ``](#anchor)`` of a Markdown page."""
    found: list[tuple[str, str | None, str]] = []
    for m in _ANCHOR.finditer(text):
        doc = m.group("doc")
        if doc is None and not (
            path.suffix == ".md" and text[max(0, m.start() - 2) : m.start()] == "]("
        ):
            continue  # a colour, a CSS id, a comment: only a page's own links count
        found.append((_where(path, text, m.start()), doc, m.group("anchor")))
    return found


class _Pages:
    """The headings of each page, read once."""

    def __init__(self) -> None:
        self.seen: dict[Path, list[str]] = {}

    def __call__(self, page: Path) -> list[str]:
        if page not in self.seen:
            self.seen[page] = _headings(page)
        return self.seen[page]


def broken_references_in(path: Path, text: str, headings_of: _Pages) -> list[str]:
    """What in ``text`` (the file ``path``) cites a page or a heading that does not exist."""
    broken: list[str] = []
    for where, doc, cited in heading_citations(path, text):
        if not doc.endswith(".md") and not re.match(r"[A-Z0-9§`]", cited):
            continue  # ROUTERS, "wid": a constant and a string, not a page and a heading
        page = _cited_page(doc, path)
        if page is None:
            if doc.endswith(".md"):
                broken.append(f"{where}: {doc} does not exist (cited for {cited!r})")
            continue  # a bare upper-case word that names no page: not a citation
        if not any(_names(h, cited) for h in headings_of(page)):
            broken.append(f"{where}: {doc} has no heading {cited!r}")
    for where, linked, anchor in anchor_citations(path, text):
        target = path.resolve() if linked is None else _cited_page(linked, path)
        if target is None:
            broken.append(f"{where}: {linked} does not exist (link to #{anchor})")
        elif anchor not in {_slug(h) for h in headings_of(target)}:
            broken.append(f"{where}: {linked or path.name} has no heading #{anchor}")
    return broken


def test_every_cited_heading_exists_in_the_page_it_names() -> None:
    """``docs/ARCHITECTURE.md, "Durability"`` and ``WATCH.md#fan-out`` name a heading that
    the page has, wherever the citing file sits and whatever it is (code, test, doc)."""
    pages, broken = _Pages(), []
    for path in _repo_text_files():
        text = _read(path)
        if text is not None:
            broken += broken_references_in(path, text, pages)
    assert len(pages.seen) >= 10  # (the extraction itself works)
    assert not broken, "references to headings that do not exist:\n" + "\n".join(broken)


def test_every_style_section_cited_exists_in_style_md() -> None:
    """``STYLE §n`` names a numbered section of the shared style guide, which sits at
    ../shared/STYLE.md beside the checkout (skipped where that folder is absent)."""
    if not STYLE.is_file():
        pytest.skip(f"{STYLE} is not beside this checkout")
    sections = set(re.findall(r"^## (\d+)\. ", STYLE.read_text(encoding="utf-8"), re.M))
    assert len(sections) >= 10  # (the numbering is still "## n. Title")
    cited: list[tuple[str, str]] = []
    for path in _repo_text_files():
        text = _read(path)
        if text is not None:
            cited += [
                (_where(path, text, m.start()), m.group(1)) for m in _STYLE_CITATION.finditer(text)
            ]
    assert cited  # (the extraction itself works)
    missing = [f"{where}: STYLE §{n}" for where, n in cited if n not in sections]
    assert not missing, "STYLE sections cited that STYLE.md does not have:\n" + "\n".join(missing)


def test_the_reference_check_reads_each_form_and_names_each_break() -> None:
    """The check itself, on made-up text in a made-up file: every form of citation resolves
    when it names a real heading and is reported when it does not. (Each broken sample starts
    its string literal, which the repository-wide scan leaves alone.)"""
    path, pages = ROOT / "topics" / "_made_up.py", _Pages()
    good = "\n".join([
        'see docs/WATCH.md, "Fan-out", rule 2',
        '(WATCH.md "Resume order")',
        '(ARCHITECTURE: "One thread, no locks")',
        '[CLI.md](CLI.md), "Filters"',
        '[WATCH.md](WATCH.md#fan-out) ("Prefix watch", "Backlog guard")',
        'docs/ARCHITECTURE.md, "Where a route and\n    # its documentation go"',
        '``docs/STORAGE_FORMATS.md`` ("WAL")',
        '(docs/\nSTORAGE_FORMATS.md, "Heads table")',
        '{ROUTERS, "wid": 1}',
    ])  # fmt: skip
    assert len(heading_citations(path, good)) == 10
    assert broken_references_in(path, good, pages) == []
    bad = {
        'docs/WATCH.md, "Fan out"': "docs/WATCH.md has no heading 'Fan out'",
        'ARCHITECTURE "Storage"': "ARCHITECTURE has no heading 'Storage'",
        'WATCH.md ("Prefix watch", "Backlog guards")': "WATCH.md has no heading 'Backlog guards'",
        'docs/NO_SUCH_PAGE.md, "Intro"': "docs/NO_SUCH_PAGE.md does not exist (cited for 'Intro')",
        "WATCH.md#fan-in": "WATCH.md has no heading #fan-in",
        'docs/CLIENT.md, "Retries"': "docs/CLIENT.md has no heading 'Retries'",
    }
    for text, message in bad.items():
        assert broken_references_in(path, text, pages) == [f"topics/_made_up.py:1: {message}"]
    style = "STYLE §" + "13, and STYLE.md §" + "4"
    assert [m.group(1) for m in _STYLE_CITATION.finditer(style)] == ["13", "4"]
