"""The documentation site cannot drift from the code: the generated pages (CLI and config
references, deployments, the home page, the DAG) equal what docs/gen_reference.py writes now,
`mkdocs build --strict` passes (no broken link or anchor, no page missing from the nav), every
"SPEC section N" the code cites is a heading of docs/algorithms/spec.md, and every repository
path the README and the pages name exists."""
from __future__ import annotations

import argparse
import os
import re
import runpy
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, Field

from mars_core.run import layout
from tests.conftest import REPO

GEN = runpy.run_path(str(REPO / "docs" / "gen_reference.py"))
SPEC_PAGE = REPO / "docs" / "algorithms" / "spec.md"
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


@pytest.mark.parametrize("page", sorted(GEN["PAGES"]))
def test_the_generated_pages_are_what_the_code_gives_now(page):
    assert (REPO / page).read_text() == GEN["PAGES"][page](), \
        f"{page} is stale: run `make docs-gen` (.venv/bin/python docs/gen_reference.py)"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site as `make docs` builds it (`mkdocs build --strict`), once for this module."""
    out = tmp_path_factory.mktemp("docs") / "site"
    env = os.environ | {"NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(out)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def test_mkdocs_builds_the_site_strictly(site):
    assert (site / "reference" / "config.html").exists()


class _Loads(HTMLParser):
    """What a page loads: every <script src> and every <link href> that is a stylesheet (or
    preloads one)."""

    def __init__(self):
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        rel = set((a.get("rel") or "").lower().split())
        if tag == "script" and a.get("src"):
            self.urls.append(a["src"])
        elif tag == "link" and a.get("href") and rel & {"stylesheet", "preload", "modulepreload"}:
            self.urls.append(a["href"])


def test_the_built_site_loads_no_script_or_stylesheet_from_the_network(site):
    """The site works offline: its scripts and stylesheets are its own files (Mermaid vendored
    under docs/assets/vendor/mermaid/, so the theme does not fetch it from a CDN)."""
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 20
    remote = []
    for page in pages:
        loads = _Loads()
        loads.feed(page.read_text())
        remote += [f"{page.relative_to(site)}: {u}" for u in loads.urls
                   if re.match(r"(?i)(https?:)?//", u)]
        for u in loads.urls:  # and each one is in the site (404.html: from the site's root)
            if not re.match(r"(?i)(https?:)?//", u):
                path = u.split("?")[0].split("#")[0]
                found = site / path[1:] if path.startswith("/") else page.parent / path
                assert found.is_file(), (page, u)
    assert not remote, "pages load from the network:\n" + "\n".join(remote[:20])
    loads = _Loads()
    loads.feed((site / "dag.html").read_text())  # a page with a diagram
    assert any(u.endswith("assets/vendor/mermaid/mermaid.min.js") for u in loads.urls)


def test_a_new_flag_is_missing_from_the_committed_cli_page(monkeypatch):
    import cli.commands

    build = cli.commands.parser

    def with_new_flag() -> argparse.ArgumentParser:
        p = build()
        train = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
        train.choices["train"].add_argument("--brand-new", choices=["x", "y"], default="x",
                                            help="a flag nobody documented")
        return p

    monkeypatch.setattr(cli.commands, "parser", with_new_flag)
    page = GEN["cli_page"]()
    assert "| `--brand-new {x,y}` | `x` | `x`, `y` | a flag nobody documented |" in page
    assert page != (REPO / "docs" / "reference" / "cli.md").read_text()


class _Toy(BaseModel):
    """A toy section."""

    # the comment above
    plain: int = Field(3, ge=1, lt=10)  # and the one beside
    described: Literal["a", "b"] = Field("a", description="the description wins")  # not this
    nested: list[_Leaf] = Field(default_factory=list)


class _Leaf(BaseModel):
    x: float | None = None  # a leaf


_Toy.model_rebuild()


def test_a_field_is_documented_by_its_description_else_its_comments():
    text = "\n".join(GEN["_model_tables"](_Toy, "toy", {}))
    assert "A toy section." in text
    assert ("| `plain` | `int` | `3` | >= 1, < 10 | the comment above and the one beside |"
            in text)
    assert '| `described` | `"a" or "b"` | `"a"` |  | the description wins |' in text
    assert "### `toy.nested[i]`" in text and "| `x` | `float or null` | `null` |  | a leaf |" in text


_CITE = re.compile(r"SPEC\s+(?:sections?\s+)?(\d+)(?:\.(\d+)|,?\s+(?:item|step)\s+(\d+))?"
                   r"(?:\s+(and|to)\s+(\d+))?")


def _cited() -> set[str]:
    """Every SPEC section the code, configs and tests cite: "5", "5.7", ..."""
    found = set()
    for pkg in ("mars_core", "tasks", "flows", "cli", "eval", "bench", "tests", "configs"):
        for path in sorted((REPO / pkg).rglob("*")):
            if path.suffix not in (".py", ".yaml") or path == Path(__file__):
                continue
            text = re.sub(r"\s*\n\s*#?\s*", " ", path.read_text())
            for m in _CITE.finditer(text):
                first, sub, item, join, last = m.groups()
                found.add(f"{first}.{sub or item}" if sub or item else first)
                if join:
                    found |= {str(n) for n in range(int(first) + 1, int(last) + 1)} if join == "to" \
                        else {last}
    return found


def test_every_spec_section_the_code_cites_is_a_heading_of_the_spec_page():
    text = SPEC_PAGE.read_text()
    headings = set(re.findall(r"^## (\d+)\. ", text, re.M))
    headings |= set(re.findall(r"^### (\d+\.\d+) ", text, re.M))
    cited = _cited()
    assert {"1", "2", "3", "4", "5", "6", "5.1", "5.5", "5.6", "5.7"} <= cited
    assert cited - headings == set(), "cited in the code, no heading in docs/algorithms/spec.md"


def test_the_readme_is_short_and_draws_the_layouts_dag():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    block = re.search(r"```mermaid\n(.*?)```", text, re.S).group(1)
    assert block == layout.dag_mermaid(), "README's DAG differs from the layout's (docs/dag.md)"


def test_the_generator_redraws_a_stale_readme_dag():
    """README.md's Mermaid block is written by docs/gen_reference.py (`make docs-gen`), from the
    layout; a README holding an old picture is stale, and only the block is rewritten."""
    readme = (REPO / "README.md").read_text()
    old = re.sub(r"(```mermaid\n).*?```", r"\1flowchart TD\n  a --> b\n```", readme, flags=re.S)
    assert old != readme and GEN["readme_page"](old) == readme
    with pytest.raises(SystemExit, match="exactly one ```mermaid block"):
        GEN["readme_page"](readme + "\n```mermaid\nflowchart TD\n```\n")


_PATH = re.compile(r"`((?:mars_core|tasks|flows|cli|reasoning|bench|configs|tests|docs"
                   r"|requirements)/[\w./-]*)`")


_MODULE = re.compile(r"`([\w-]+\.py)`")  # a bare module name, such as `reference.py`


def test_every_repository_path_the_docs_name_exists():
    """A path from the repository root exists; so does a module named bare (some file of
    that name: the run outputs the docs name bare, .json or .md, are not checked)."""
    missing = []
    modules = {p.name for d in ("mars_core", "tasks", "flows", "cli", "eval", "bench",
                                "tests", "docs", ".ci") for p in (REPO / d).rglob("*.py")}
    for page in PAGES:
        text = page.read_text()
        for path in _PATH.findall(text):
            if not (REPO / path.rstrip("/")).exists():
                missing.append(f"{page.relative_to(REPO)}: {path}")
        missing += [f"{page.relative_to(REPO)}: {name}" for name in _MODULE.findall(text)
                    if name not in modules]
    assert not missing, "paths named in the docs that do not exist:\n" + "\n".join(missing)


def test_the_annotated_tree_names_every_module():
    """docs/architecture.md's tree names every module and package of the pipeline's code."""
    text = (REPO / "docs" / "architecture.md").read_text()
    words = set(re.findall(r"\w+", re.search(r"## The annotated tree\n\n```\n(.*?)```", text,
                                               re.S).group(1)))
    missing = []
    for pkg in ("cli", "flows", "tasks", "eval", "mars_core"):
        for path in sorted((REPO / pkg).rglob("*.py")):
            name = path.parent.name if path.name == "__init__.py" else path.stem
            if "vllm_ext" not in path.parts and name not in words:
                missing.append(str(path.relative_to(REPO)))
    assert not missing, "not in docs/architecture.md's annotated tree: " + ", ".join(missing)
