"""The README and docs/*.md stay true: links, quoted figures and code blocks.

* Every relative link points to an existing file, and every ``#anchor`` to a heading
  of that file (GitHub's heading slugs).
* Every figure the README quotes (a number with a decimal point, or a timing such as
  ``12 s``) is held verbatim by a ``docs/results/`` file linked from the same
  paragraph, list item or table. Numbers in code spans and code blocks are settings
  and commands, not figures, and are not checked.
* Every fenced ``python``, ``bash``, ``sh`` or ``console`` block either runs here, or
  is marked right before it with ``<!-- not-run: reason -->`` (install commands, real
  Flower simulations, deployments, full-size benchmarks) or with
  ``<!-- tested-by: tests/<file>.py -->`` when another test runs it as written. Blocks
  without a language, ``text`` and ``mermaid`` are not code. The blocks of one page
  run in order in one temporary directory (a Python block may write the file a shell
  block reads). A shell block may hold only ``python -m fedkmeans.experiment`` commands.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]
RESULTS = ROOT / "docs" / "results"

#: Fence languages that are code: each such block runs or carries a marker.
CODE = {"python", "bash", "sh", "shell", "console"}
MARKER = re.compile(r"<!--\s*(not-run|tested-by):\s*(.+?)\s*-->")


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


# ---- parsing ---------------------------------------------------------------------------

@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    language: str
    text: str
    marker: tuple[str, str] | None  # (kind, reason)

    @property
    def name(self) -> str:
        return f"{_rel(self.page)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of ``page``, with the marker comment right before each."""
    lines = page.read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        fence = re.match(r"^(\s*)(```+|~~~+)\s*([\w+-]*)", lines[i])
        if not fence:
            i += 1
            continue
        start, ticks, language = i, fence.group(2), fence.group(3).lower()
        i += 1
        body = []
        while i < len(lines) and not lines[i].strip().startswith(ticks):
            body.append(lines[i])
            i += 1
        j = start - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        found = MARKER.search(lines[j]) if j >= 0 else None
        marker = (found.group(1), found.group(2)) if found else None
        out.append(Block(page, start + 1, language, "\n".join(body) + "\n", marker))
        i += 1
    return out


def prose(text: str) -> str:
    """``text`` without fenced code blocks and HTML comments (lines kept for counting)."""
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    return re.sub(r"^(```+|~~~+).*?^\1", lambda m: "\n" * m.group(0).count("\n"), text,
                  flags=re.S | re.M)


LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def links(text: str) -> list[str]:
    """Link targets in markdown prose (code spans are not links)."""
    return LINK.findall(re.sub(r"`[^`\n]*`", "", prose(text)))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose(page.read_text()).splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            base = slug(heading.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            out.add(base if count == 0 else f"{base}-{count}")
    return out


def broken_links(page: Path) -> list[str]:
    problems = []
    for target in links(page.read_text()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, flags=re.I):  # http:, mailto:, ...
            continue
        path_part, _, anchor = target.partition("#")
        path = (page.parent / path_part).resolve() if path_part else page
        if not path.exists():
            problems.append(f"{_rel(page)}: link {target!r}: no file {path_part}")
        elif not path.is_relative_to(ROOT):
            problems.append(f"{_rel(page)}: link {target!r} leaves the repository")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            problems.append(f"{_rel(page)}: link {target!r}: no heading #{anchor} in "
                            f"{_rel(path)}")
    return problems


# ---- links -----------------------------------------------------------------------------

@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_relative_link_points_to_an_existing_file_and_heading(page):
    assert broken_links(page) == []


def test_the_link_check_catches_a_missing_file_and_a_missing_heading(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "a.md").write_text("# Title\n\n## Some `code`: here\n")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#some-code-here) [no file](c.md) [no heading](a.md#nope)\n"
                    "`[in code](d.md)`\n```\n[in a block](e.md)\n```\n")
    problems = broken_links(page)
    assert len(problems) == 2
    assert "c.md" in problems[0] and "#nope" in problems[1]


def test_docs_index_lists_every_page():
    index = ROOT / "docs" / "index.md"
    listed = {(index.parent / t.partition("#")[0]).resolve()
              for t in links(index.read_text())}
    missing = [_rel(p) for p in DOCS if p != index and p.resolve() not in listed]
    assert missing == [], f"docs/index.md does not list {missing}"


def test_readme_stays_under_200_lines_and_links_the_index():
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    assert "docs/index.md" in links(text)


# ---- the README's figures --------------------------------------------------------------

#: A number with a decimal point, or an integer followed by a unit of time.
FIGURE = re.compile(
    r"(?<![\w.])(\d+\.\d+)(?!\.?\d)"
    r"|(?<![\w.])(\d+)(?=\s?(?:s|ms|min|minutes?|seconds?|h|hours?)\b)")


def figures(block: str) -> list[str]:
    text = re.sub(r"`[^`\n]*`", "", block)          # code spans are settings, not figures
    text = re.sub(r"\]\([^)]*\)", "]", text)         # link targets are paths
    return [a or b for a, b in FIGURE.findall(text)]


def unsupported_figures(text: str, base: Path) -> list[str]:
    """Figures of ``text`` that no docs/results/ file linked from their block holds.

    A block is a paragraph, a list item or a table (one Markdown block between blank
    lines, or one top-level list item).
    """
    problems = []
    chunks = re.split(r"\n\s*\n|\n(?=- |\* |\d+\. )", prose(text))
    for chunk in chunks:
        found = figures(chunk)
        if not found:
            continue
        sources = []
        for target in links(chunk):
            path = (base / target.partition("#")[0]).resolve()
            if path.is_file() and path.is_relative_to(RESULTS.resolve()):
                sources.append(path)
        texts = [p.read_text(errors="replace") for p in sources]
        for figure in found:
            if not any(figure in t for t in texts):
                where = ", ".join(_rel(p) for p in sources) or "no docs/results/ file linked"
                problems.append(f"{figure!r} in {chunk.strip()[:80]!r} is not in {where}")
    return problems


def test_every_figure_the_readme_quotes_is_in_the_results_file_it_links():
    assert unsupported_figures(README.read_text(), ROOT) == []


def test_the_figure_check_catches_a_changed_figure_and_an_unsourced_one():
    text = README.read_text()
    quoted = [f for f in figures(prose(text)) if "." in f]
    assert quoted, "the README quotes no figure: the check would pass vacuously"
    changed = text.replace(quoted[0], quoted[0] + "7", 1)
    assert unsupported_figures(changed, ROOT)
    assert unsupported_figures(text + "\nThe suite takes 9 min.\n", ROOT)
    assert unsupported_figures(text + "\nIt reaches 1.0001 x optimal.\n", ROOT)
    assert not unsupported_figures(text + "\nRun with `privacy.epsilon=0.5`.\n", ROOT)


# ---- code blocks -----------------------------------------------------------------------

def _code_blocks() -> list[Block]:
    return [b for page in PAGES for b in blocks(page) if b.language in CODE]


def test_every_code_block_runs_or_says_why_not():
    problems = []
    for block in _code_blocks():
        if block.marker is None:
            if block.language != "python" and _commands(block) is None:
                problems.append(f"{block.name}: a {block.language} block that runs "
                                "something other than `python -m fedkmeans.experiment`; "
                                "mark it <!-- not-run: reason -->")
            continue
        kind, reason = block.marker
        if kind == "tested-by":
            test = ROOT / reason.split()[0]
            if not (test.is_file() and block.page.name in test.read_text()):
                problems.append(f"{block.name}: tested-by {reason!r}, which does not "
                                f"read {block.page.name}")
        elif len(reason) < 10:
            problems.append(f"{block.name}: not-run needs a reason")
    assert problems == []


def _commands(block: Block) -> list[list[str]] | None:
    """The commands of a shell block, or None if one is not a fedkmeans experiment."""
    text = re.sub(r"\\\n", " ", block.text)
    commands = []
    for line in text.splitlines():
        line = line.strip().removeprefix("$ ")
        if not line or line.startswith("#"):
            continue
        args = shlex.split(line, comments=True)
        if args[:3] != ["python", "-m", "fedkmeans.experiment"]:
            return None
        commands.append(args)
    return commands


def _environment(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ, FLWR_TELEMETRY_ENABLED="0", FLWR_DISABLE_UPDATE_CHECK="1",
               FEDKMEANS_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("FEDKMEANS_TRACEBACK", None)
    return env


def run_blocks(page: Path, cwd: Path, extra: list[str] = ()) -> list[dict]:
    """Run the runnable blocks of ``page`` in order in ``cwd``; the results of the runs.

    ``extra`` overrides are appended to every experiment command on the mixture (small
    settings; a run on another data set would refuse them as keys that do nothing).
    """
    results = []
    for block in blocks(page):
        if block.language not in CODE or block.marker is not None:
            continue
        if block.language == "python":
            proc = subprocess.run([sys.executable, "-c", block.text], cwd=cwd,
                                  env=_environment(cwd), capture_output=True, text=True,
                                  timeout=600)
            assert proc.returncode == 0, f"{block.name}:\n{proc.stderr[-3000:]}"
            continue
        commands = _commands(block)
        assert commands is not None, block.name
        for args in commands:
            mixture = not any(a.startswith("dataset=") and a != "dataset=mixture" for a in args)
            proc = subprocess.run([sys.executable, *args[1:], *(extra if mixture else ())],
                                  cwd=cwd,
                                  env=_environment(cwd), capture_output=True, text=True,
                                  timeout=600)
            assert proc.returncode == 0, f"{block.name}: {args}\n{proc.stderr[-3000:]}"
            path = Path(proc.stdout.strip().splitlines()[-1])
            results.append(json.loads(path.read_text()))
    return results


#: A small federation for the README's default-run command in the fast tier.
SMALL = ["data.num-clients=10", "data.points-per-client=100", "data.dim=10",
         "data.components=3", "k=3", "data.server-points-per-component=10",
         "data.server-uniform-points=10"]


@pytest.mark.slow
def test_the_readme_blocks_run_as_written_your_own_data_and_a_small_default_run(tmp_path):
    """The README's Python block and shell commands, in order, on a small federation.

    The own-data command reads the CSV its Python block writes; the overrides added
    here only shrink the generated mixture (they are not given to the file's run).
    """
    results = run_blocks(README, tmp_path, extra=SMALL)
    by_data = {r["config"]["data.name"]: r for r in results}
    assert set(by_data) == {"mixture", "file"}
    own = by_data["file"]
    assert own["federation"]["num_clients"] == 20 and len(own["centers"]) == 3
    assert own["metrics"]["num_points"] == 540  # 600 rows less the server's 10%
    for result in results:
        assert result["tuning"] is not None and "estimates" in result["tuning"]
        release = Path(result["artefacts"]["release"])
        assert release.is_file() and json.loads(release.read_text())["publishable"]
    published = json.loads(Path(own["artefacts"]["release"]).read_text())["config"]
    assert published["data.path"] == "mine.csv" and "data.dim" not in published


@pytest.mark.slow
def test_the_readme_default_run_runs_as_written(tmp_path):
    """``python -m fedkmeans.experiment`` with nothing changed: the paper's mixture."""
    (default,) = [r for r in run_blocks(README, tmp_path) if r["config"]["data.name"] == "mixture"]
    assert default["federation"]["num_clients"] == 100
    assert default["metrics"]["cost_ratio"] < 1.1


@pytest.mark.slow
@pytest.mark.parametrize("page", DOCS, ids=_rel)
def test_the_docs_blocks_run_as_written(page, tmp_path):
    """Every unmarked block of every docs page (the Python API's block in running.md)."""
    run_blocks(page, tmp_path)
