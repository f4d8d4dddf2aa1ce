"""Every reference the code and the docs make resolves inside the repository: each cited section of
docs/protocol.md exists, and each linked or named document is a file of the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from docnumbers import visible

REPO = Path(__file__).resolve().parents[1]
PROTOCOL = REPO / "docs" / "protocol.md"
SKIP_DIRS = {".git", ".snakemake", ".venv", "results", "resources", "__pycache__", ".pytest_cache",
             ".ruff_cache", "build", "dist", "node_modules", ".ipynb_checkpoints"}
TEXT = {".py", ".md", ".yaml", ".yml", ".smk", ".csv", ".toml", ".rst", ".txt", ".ipynb", ".cfg",
        ".json"}
NUMBER = r"\d+(?:\.\d+)*"


def text_files() -> list[Path]:
    out = []
    for path in sorted(REPO.rglob("*")):
        rel = path.relative_to(REPO)
        if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in rel.parts[:-1]):
            continue
        if path.is_file() and (path.suffix in TEXT or path.name in ("Snakefile", "Makefile")):
            out.append(path)
    return out


FILES = text_files()


def protocol_sections() -> set[str]:
    """The numbers of docs/protocol.md's headings ("### 4.3 The weights λ" -> "4.3")."""
    return set(re.findall(rf"^#{{2,4}} ({NUMBER})\.? ", PROTOCOL.read_text(), re.M))


SECTIONS = protocol_sections()

# "docs/protocol.md §4.5, §8.11", "protocol.md §6.3-6.4", "protocol §5.1"; a line break may
# separate the name from its section
REFERENCE = re.compile(rf"protocol(?:\.md)?\s+(§{NUMBER}(?:-{NUMBER})?"
                       rf"(?:,\s*§{NUMBER}(?:-{NUMBER})?)*)")


def cited(sections: str) -> list[str]:
    """The section numbers of "§4.5, §8.11" or "§6.3-6.4" (both ends of a range)."""
    return re.findall(NUMBER, sections)


def test_protocol_has_the_sections_of_the_code():
    """A guard: the headings are read, and the sections of each part of the protocol are there."""
    assert {"1", "1.5", "3.4", "4.3", "6.3", "8.11", "9.1"} <= SECTIONS
    assert cited("§6.3-6.4") == ["6.3", "6.4"] and cited("§4.5, §8.11") == ["4.5", "8.11"]
    assert REFERENCE.search("(see docs/protocol.md\n    §4.2)").group(1) == "§4.2"


def test_every_protocol_reference_names_a_section():
    missing, count = [], 0
    for path in FILES:
        if path == PROTOCOL:
            continue
        text = path.read_text(errors="ignore")
        for match in REFERENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            for number in cited(match.group(1)):
                count += 1
                if number not in SECTIONS:
                    missing.append(f"{path.relative_to(REPO)}:{line}: §{number}")
    assert count > 50  # the code and docs cite the protocol throughout
    assert not missing, ("references to sections docs/protocol.md does not have:\n"
                         + "\n".join(missing))


def test_protocol_variants_cite_existing_sections():
    catalog = yaml.safe_load((REPO / "src/fedmgda/reference/protocol_variants.yaml").read_text())
    missing = [f"{name}: §{n}" for name, v in catalog.items() for n in cited(v["protocol"])
               if n not in SECTIONS]
    assert not missing, missing


def test_protocol_cross_references_resolve():
    """Inside docs/protocol.md a bare §N is one of its own sections; the paper's are
    "paper §N"."""
    text = re.sub(rf"[Pp]aper\s+§{NUMBER}", "", PROTOCOL.read_text())
    bare = re.findall(rf"§({NUMBER})", text)
    assert bare and not [n for n in bare if n not in SECTIONS], sorted(set(bare) - SECTIONS)


def test_protocol_cites_its_sources():
    """Every numbered section with text of its own names where its facts were read: the authors'
    code (a path), the paper, fair_flearn, or another section of this page."""
    text = PROTOCOL.read_text()
    parts = [part.partition("\n")
             for part in re.split(rf"^#{{2,4}} (?={NUMBER}\.? )", text, flags=re.M)[1:]]
    source = re.compile(r"`[\w/{},.*-]+\.(?:py|txt|md)\b|`(?:main|adult)/|[Pp]aper|fair_flearn"
                        r"|§\d")
    unsourced = [title for title, _, body in parts if body.strip()
                 and not source.search(title + body)]
    assert len(parts) == len(SECTIONS) and not unsourced, unsourced


# a path to a file of the repository named in the docs and the code: docs/workflow.md,
# src/fedmgda/...
REPO_PATH = re.compile(r"(?<![\w/.-])((?:docs|config|profiles|workflow|src|scripts|benchmarks"
                       r"|examples|notebooks)"
                       r"/[\w./-]*\w\.(?:md|yaml|py|smk|csv|ipynb|rst|txt))(?![\w/*{<-])")
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("path", [p for p in FILES if p.suffix == ".md"],
                         ids=lambda p: str(p.relative_to(REPO)))
def test_markdown_links_and_paths_resolve(path):
    """Relative links of a Markdown file resolve from its folder; repository paths it names
    (docs/..., src/..., config/...) exist."""
    text = path.read_text()
    broken = []
    for target in MD_LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a URL or an anchor
        file = target.split("#", 1)[0]
        if not (path.parent / file).exists():
            broken.append(f"link {target}")
    if not path.relative_to(REPO).as_posix().startswith("benchmarks/measurements/"):
        # a measurement file names the command that made it, which the repository need not ship
        broken += [f"path {p}" for p in REPO_PATH.findall(text) if not (REPO / p).exists()]
    assert not broken, broken


def test_code_names_existing_docs():
    """docs/*.md named anywhere (docstrings, comments, configs, messages) exist."""
    missing = set()
    for path in FILES:
        for name in re.findall(r"(?<![\w/.-])docs/[\w.-]+\.md", path.read_text(errors="ignore")):
            if not (REPO / name).is_file():
                missing.add(f"{path.relative_to(REPO)}: {name}")
    assert not missing, sorted(missing)


README = REPO / "README.md"
VERDICT = re.compile(r"\|\s*\*\*(holds|fails|inconclusive|not run)\*\*")


def paragraphs(text: str) -> list[str]:
    """The prose paragraphs of a Markdown text: runs of lines apart from code blocks, tables,
    headings and blank lines; each list item starts a paragraph of its own."""
    found, current, in_code = [], [], False
    for line in text.splitlines() + [""]:
        if line.startswith("```"):
            in_code = not in_code
        item = re.match(r"\s*(?:[-*]|\d+\.) ", line)
        if in_code or line.startswith(("```", "|", "#")) or not line.strip() or item:
            if current:
                found.append(" ".join(current))
            current = [line] if item and not in_code else []
        else:
            current.append(line.strip())
    return found


def test_paragraphs_are_read_as_a_reader_sees_them():
    text = "# T\n\none two\nthree\n\n- a b\n  c\n- d\n\n```\nnot prose\n```\n| a | b |\nlast"
    assert [len(p.split()) for p in paragraphs(text)] == [3, 4, 2, 1]


@pytest.mark.parametrize("name", ["README.md", "docs/results.md", "docs/running.md"])
def test_no_paragraph_over_150_words(name):
    long = [f"{len(p.split())} words: {p[:80]}..."
            for p in paragraphs(visible((REPO / name).read_text()))
            if len(p.split()) > 150]
    assert not long, long


# each page has one job; its length says whether it kept to it
LINE_LIMITS = {"README.md": 150, "docs/fmnist-fairness.md": 250, "docs/performance.md": 250,
               "docs/results.md": 250}
DOC_PAGES = ["README.md",
             *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))]
COMMENT = re.compile(r"<!--.*?-->", re.S)


@pytest.mark.parametrize(("name", "limit"), LINE_LIMITS.items())
def test_pages_keep_to_their_length(name, limit):
    lines = len((REPO / name).read_text().splitlines())
    assert lines <= limit, f"{name}: {lines} lines, at most {limit}"


def test_the_readme_has_no_inline_number_marker():
    """The README's numbers are in its linked files; an inline marker is markup around a value."""
    assert not re.search(r"<!-- n ", README.read_text())


def markup_share(text: str) -> float:
    """The share of a page's characters inside HTML comments (markers and block lines)."""
    return sum(len(m) for m in COMMENT.findall(text)) / max(len(text), 1)


@pytest.mark.parametrize("name", DOC_PAGES)
def test_no_page_is_over_5_percent_markup(name):
    share = markup_share((REPO / name).read_text())
    assert share <= 0.05, (f"{name}: {share:.0%} of its characters are markup; "
                           "link or tabulate the file")


def long_prose_lines(text: str, limit: int = 100) -> list[str]:
    """Lines over ``limit`` characters outside code blocks (fenced, or indented after a blank
    line), tables and generated blocks."""
    long, in_code, in_block, indented, previous = [], False, False, False, ""
    for line in text.splitlines():
        indented = line.startswith("    ") and (not previous.strip() or indented)
        previous = line
        if line.startswith(("```", "    ```")):
            in_code = not in_code
            continue
        if re.match(r"<!-- (table|verdicts): ", line):
            in_block = True
        elif re.match(r"<!-- /(table|verdicts) -->", line):
            in_block = False
        elif len(line) > limit and not (in_code or in_block or indented
                                        or line.lstrip().startswith("|")):
            long.append(line[:60] + "...")
    return long


def test_long_prose_lines_are_found():
    text = ("a " * 60 + "\n```\n" + "b" * 120 + "\n```\n| " + "c" * 120 + " |\n\n    " + "d" * 120
            + "\nshort\n")
    assert long_prose_lines(text) == ["a " * 30 + "..."]


@pytest.mark.parametrize("name", DOC_PAGES)
def test_prose_lines_are_at_most_100_characters(name):
    long = long_prose_lines((REPO / name).read_text())
    assert not long, f"{name}: {len(long)} prose lines over 100 characters: {long[:5]}"


def claims_file_verdicts(path: Path) -> dict[str, int]:
    """How many claims of a committed claims table (fedmgda.claims' Markdown) hold, fail, ..."""
    verdicts = VERDICT.findall(path.read_text())
    return {v: verdicts.count(v) for v in ("holds", "fails", "inconclusive", "not run")}


def expected_results() -> list[tuple[str, str, list[str]]]:
    """The README's Expected-results table: (study, verdicts cell, the links of its files cell)."""
    section = README.read_text().split("## Expected results", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] not in ("study", "---"):
            rows.append((cells[0], cells[2], MD_LINK.findall(cells[3])))
    return rows


def test_expected_results_verdicts_are_those_of_their_claims_files():
    """Each study's held / failed / inconclusive in the README are counted from the claims file it
    links, so the table cannot drift from the committed results."""
    rows = expected_results()
    assert len(rows) >= 10
    wrong, counted = [], 0
    for study, stated, links in rows:
        claims = [link for link in links if "claims" in Path(link).name]
        if stated == "no claims":
            assert not claims, f"{study}: links a claims file but states no verdicts"
            continue
        assert len(claims) == 1, f"{study}: link exactly one claims file"
        numbers = re.fullmatch(r"(\d+) / (\d+) / (\d+)", stated)
        assert numbers, f"{study}: verdicts {stated!r} are not 'held / failed / inconclusive'"
        found = claims_file_verdicts(REPO / claims[0])
        counted += 1
        if (found["not run"]
            or tuple(map(int, numbers.groups())) != (found["holds"], found["fails"],
                                                     found["inconclusive"])):
            wrong.append(f"{study}: README {stated}, {claims[0]} {found}")
    assert counted >= 8 and not wrong, wrong


def test_the_figure_kinds_and_target_rules_the_docs_list_are_the_codes():
    from fedmgda.figures import KINDS

    workflow = (REPO / "docs" / "workflow.md").read_text()
    listed = re.search(r"`\{kind: ([\w|]+),", workflow)
    assert listed and set(listed[1].split("|")) == set(KINDS)
    assert f"figure kinds ({', '.join(KINDS)})" in workflow
    rules = re.findall(r"^rule (\w+):", (REPO / "Snakefile").read_text(), re.M)
    assert f"target rules: {', '.join(rules)}" in workflow
    readme = (REPO / "README.md").read_text()
    assert f"target rules ({', '.join(rules)}, one per table/figure)" in readme
