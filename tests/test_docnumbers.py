"""The numbers the docs show come from committed files (tools/docnumbers.py), and none is typed.

Each page's ``<!-- n PATH ROW COL [FORMAT] -->value<!-- /n -->`` markers must read what their file
says (``make docs`` rewrites them); in the sections listed in COVERED, a number that looks like a
result (a decimal, or one with %, pp, min, s, h) must be inside a marker, or be in ALLOWED (protocol
settings, dates, counts that are not results).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from docnumbers import (
    MARKER_RE,
    PAGES,
    TABLE_BLOCK_RE,
    VERDICT_BLOCK_RE,
    DocNumberError,
    Spec,
    check,
    main,
    malformed,
    render,
    value,
)

REPO = Path(__file__).resolve().parents[1]

# (page, section heading or "" for the whole page, paragraph start or "" for the whole section)
# whose numbers are all rendered
COVERED = [
    ("README.md", "", ""),
    ("docs/results.md", "", ""),
    ("docs/performance.md", "", ""),
    ("docs/fmnist-fairness.md", "", ""),
    ("docs/running.md", "", ""),
    ("docs/workflow.md", "## Packs: several runs per training job", ""),
    ("docs/workflow.md", "## Quick profile (`config/quick.yaml`)", ""),
    ("docs/workflow.md", "## Tests (`tests/workflow/`)", ""),
    ("docs/protocol-variants.md", "", "*Baseline_PhD*"),
    ("docs/protocol-variants.md", "", "Measured on the real files"),
]
# numbers in the covered text that are not results: the protocol's settings and the rounds read
ALLOWED = {
    # versions; the experimental setup's participation, learning rates and ε
    "README.md": {"3.11", "2.14", "40 %", "0.5", "0.05", "0.01", "0.1", "0.001"},
    # η, ε of the grid, lr, momentum, μ, q, sections of the paper and of docs/protocol.md, the
    # rounds read
    "docs/fmnist-fairness.md": {"0.1", "1.5", "0.05", "0.5", "0.01", "6.1", "6.2", "1.2–1.4",
                                "4.2", "4.4", "8.4", "151–200", "1 pp", "100 %",
                                # numpy's and torch's versions; fedplat's lr grid, decay per round
                                # and its factor over 200 rounds
                                "1.17", "2.4", "2.14", "8.19", "0.01–0.1", "0.999", "0.82"},
    # η, step sizes, the bands of Table 7 and q-FFL's Table 2, p, the paper's §6.2, chance on
    # digits, a user's accuracy bound, the rounds read
    # the batched path's padding bound; a section of docs/protocol.md
    "docs/performance.md": {"25 %", "4.3"},
    # the variance statistic's 10 % tail, the versions of a provenance example, pip-tools, torch,
    # torchvision and Python; the wait on Slurm's stopped controller (tests/conftest.py)
    # sections of docs/protocol.md
    "docs/protocol-variants.md": {"5.1"},
    # the packs' 5 % tie rule; the quick profile's settings and chance on digits
    "docs/workflow.md": {"5 %", "0.1", "0.2", "0.4", "0.5", "10 %"},
    "docs/running.md": {"0.1", "2.4", "2.2", "7.6", "2.14", "0.29", "3.11", "9 s"},
    # the bands' widths; the settings table's participation, learning rates and momentum
    "docs/results.md": {"0.1", "1.5", "0.01", "0.001", "0.5", "0.6", "1.2", "0.55", "0.56", "0.4",
                        "6.2",
                        "10 %", "100 %", "151–200", "1 pp", "40 %", "0.05"},
}
RESULT_NUMBER = re.compile(r"(?<![\w.])[−+-]?\d+(?:\.\d+)?(?:[–-]\d+(?:\.\d+)?)?"
                           r"(?:\s*(?:%|pp\b|min\b|s\b|h\b))?")


def covered_text(page: str, heading: str, start: str) -> str:
    text = (REPO / page).read_text()
    assert heading in text, f"{page}: no section {heading!r}; update COVERED"
    section = text.split(heading, 1)[1].split("\n## ", 1)[0] if heading else text
    if not start:
        return section
    found = [p for p in section.split("\n\n") if p.startswith(start)]
    assert len(found) == 1, (f"{page}: no paragraph starting {start!r} in {heading!r}; "
                             "update COVERED")
    return found[0]


def typed_results(text: str, allowed: set[str]) -> list[str]:
    """The result-like numbers of ``text`` outside markers, code, link targets and ALLOWED."""
    # a marker leaves a token, so that "b = 10 <marker> s" does not read as a typed "10 s"
    text = VERDICT_BLOCK_RE.sub("", MARKER_RE.sub(" ⟨n⟩ ", text))
    # rendered whole from their csv files  # verdict tables: tests/test_stated_verdicts.py
    text = TABLE_BLOCK_RE.sub("", text)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`]*`", "", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    text = re.sub(r"\d{4}-\d{2}-\d{2}", "", text)
    # statistics' names
    text = re.sub(r"(?i)(worst|best)[\s-]+(5|10)\s*%|95\s*%\s+(t\s+)?interval", "", text)
    found = []
    for m in RESULT_NUMBER.finditer(text):
        number = m[0].strip()
        looks_like_result = "." in number or re.search(r"%|pp|min|s|h$", number)
        if (looks_like_result and number not in allowed
            and re.sub(r"\s*(%|pp|min|s|h)$", "", number) not in allowed):
            found.append(number)
    return found


@pytest.mark.parametrize("page", PAGES)
def test_rendered_numbers_are_those_of_their_files(page):
    wrong = check((REPO / page).read_text(), REPO)
    assert not wrong, f"{page}: run make docs\n" + "\n".join(wrong)


@pytest.mark.parametrize(("page", "heading", "start"), COVERED, ids=lambda x: str(x)[:40])
def test_covered_sections_type_no_result(page, heading, start):
    typed = typed_results(covered_text(page, heading, start), ALLOWED.get(page, set()))
    assert not typed, (f"{page}, {heading} {start}: numbers typed, not rendered: {typed}; write "
                       "each as a marker <!-- n PATH ROW COL FORMAT -->…<!-- /n --> "
                       "(tools/docnumbers.py)")


def test_the_quick_rows_run_count_is_the_profiles():
    """The README's quick row states the quick profile's run count (a stale count, 74 for a
    profile of 86, fails), counted here from config/quick.yaml."""
    from fedmgda.experiments import expand, load_config

    runs = len(expand(load_config(str(REPO / "config" / "quick.yaml"))).runs)
    row = next(line for line in covered_text("README.md", "## Expected results", "").splitlines()
               if line.startswith("| quick profile"))
    assert f"its {runs} runs" in row, f"the quick profile has {runs} runs; the README: {row[:160]}"


def test_no_claims_rows_have_no_claims_file():
    """No Expected-results row says 'no claims' beside a committed claims file. A row's
    table docs/results/fmnist/fmnist_X.md has its claims in claims_X.md when that file exists."""
    section = covered_text("README.md", "## Expected results", "")
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[2] != "no claims":
            continue
        for table in re.findall(r"\(docs/results/fmnist/fmnist_([a-z0-9_]+)\.md\)", cells[3]):
            claims = REPO / "docs" / "results" / "fmnist" / f"claims_{table}.md"
            assert not claims.exists(), (f"{cells[0]}: 'no claims', but "
                                         f"{claims.relative_to(REPO)} exists")


def test_a_marker_that_does_not_parse_fails_the_check():
    """A marker whose spec holds a '|' (a table row's key) matches no marker and would stay at
    whatever value was typed; the check names its line."""
    page = ('A row:\n  a value <!-- n benchmarks/measurements/paper_flops.txt "| 1 |" #1 .1f '
            '-->0<!-- /n --> here.\n')
    assert check(page, REPO) == ["line 2: a marker that does not parse (no '|' in its spec, a "
                                 "value on its line, then <!-- /n -->); it would never be rendered"]


NOT_PARSED = ("a marker that does not parse (no '|' in its spec, a value on its line, then "
              "<!-- /n -->); it would never be rendered")
NO_OPENING = ("a '<!-- /n -->' that closes no marker (its opening "
              "'<!-- n PATH ROW COL [FORMAT] -->' is missing)")
BLOCK_NOT_PARSED = ("a table block that does not parse (a line '<!-- table: PATH [COLUMNS] -->', "
                    "then one '<!-- /table -->'); it would never be rendered")
NO_BLOCK = ("a '<!-- /table -->' that closes no table block (its opening line is missing or does "
            "not parse)")


def test_a_marker_that_lost_its_closing_tag_is_named_and_never_eats_the_next():
    """Without its <!-- /n -->, a marker is reported by line; the next marker on the line is still
    one of its own, so rendering cannot swallow it into the first one's value."""
    page = ("Gap <!-- n a.csv x d .2f -->1.16 and <!-- n a.csv y d .2f -->2.00<!-- /n --> here.\n"
            "Also 3.00<!-- /n --> alone.\n")
    assert malformed(page) == [f"line 1: {NOT_PARSED}", f"line 2: {NO_OPENING}"]
    assert [m["value"] for m in MARKER_RE.finditer(page)] == ["2.00"]


def test_a_table_block_that_lost_its_end_is_named_and_the_next_block_kept(tmp_path):
    (tmp_path / "runs.csv").write_text("commit,passed\nabc,5\n")
    page = ("<!-- table: runs.csv -->\nstale\n\n<!-- table: runs.csv passed -->\nstale\n"
            "<!-- /table -->\ntext\n<!-- /table -->\n<!-- table runs.csv -->\n")
    assert malformed(page) == [f"line 1: {BLOCK_NOT_PARSED}", f"line 8: {NO_BLOCK}",
                               f"line 9: {BLOCK_NOT_PARSED}"]
    parsed = [(m["path"], m["cols"]) for m in TABLE_BLOCK_RE.finditer(page)]
    assert parsed == [("runs.csv", "passed")]  # the second block, whole


@pytest.mark.parametrize("mode", [["--check"], []])
def test_make_docs_stops_at_a_malformed_block_naming_page_and_line(tmp_path, capsys, mode):
    (tmp_path / "a.csv").write_text("claim,d\nx,1.5\n")
    page = tmp_path / "page.md"
    text = "Intro.\n\nGap <!-- n a.csv x d .2f -->1.50 and more.\n"
    page.write_text(text)
    assert main([*mode, "--root", str(tmp_path), str(page)]) == 1
    assert capsys.readouterr().err.splitlines() == [f"{page}: line 3: {NOT_PARSED}"]  # one line
    assert page.read_text() == text  # nothing rewritten
    page.write_text(text.replace("1.50 and", "1.50<!-- /n --> and"))
    assert main([*mode, "--root", str(tmp_path), str(page)]) == 0


def test_a_drift_fails_both_checks(tmp_path):
    """A rendered value edited (a gap quoted from another version of its claims file), or typed
    outside its marker, fails."""
    (tmp_path / "claims.csv").write_text("claim,diff_mean\nfedplat_average_late,6.0412\n")
    marker = "<!-- n claims.csv fedplat_average_late diff_mean .2f -->6.04<!-- /n -->"
    text = f"FedMGDA+ is {marker} pp less accurate.\n"
    assert check(text, tmp_path) == []
    edited = text.replace("-->6.04<", "-->6.4<")
    assert len(check(edited, tmp_path)) == 1
    assert render(edited, tmp_path) == text
    assert typed_results(text.replace(marker, "6.4"), set()) == ["6.4 pp"]


def test_cells_of_csv_markdown_and_json(tmp_path):
    (tmp_path / "a.csv").write_text("claim,diff_mean,verdict\nx,-1.1614,fails\ny,2,holds\n")
    (tmp_path / "b.md").write_text("intro\n\n| row | seeds | mean_acc |\n|---|---|---|\n"
                                   "| `r1` | 3 | 79.63 ± 1.22 |\n| r2 | 3 | 81.10 ± 0.33 |\n")
    (tmp_path / "c.json").write_text(json.dumps({"runs": [{"s": 120.4}]}))
    assert value(Spec("a.csv", "x", "diff_mean", ".2f"), tmp_path) == "-1.16"
    assert value(Spec("a.csv", "x", "diff_mean", "neg.2f"), tmp_path) == "1.16"
    assert value(Spec("a.csv", "y", "verdict", None), tmp_path) == "holds"
    # the newest row of a log
    assert value(Spec("a.csv", "@last", "verdict", None), tmp_path) == "holds"
    assert value(Spec("b.md", "r1", "mean_acc", None), tmp_path) == "79.63 ± 1.22"
    assert value(Spec("b.md", "r1", "mean_acc#2", ".1f"), tmp_path) == "1.2"
    assert value(Spec("b.md", "r2", "seeds", "d"), tmp_path) == "3"
    assert value(Spec("c.json", "runs.0.s", "-", ".0f"), tmp_path) == "120"
    (tmp_path / "d.txt").write_text("Rounds 101-200: package - authors = +0.20 pp, interval "
                                    "[-0.12, +0.51]\n")
    assert value(Spec("d.txt", "package - authors =", "#1", "+.2f"), tmp_path) == "+0.20"
    assert value(Spec("d.txt", "interval", "#2", None), tmp_path) == "+0.51"
    page = "gap <!-- n a.csv x diff_mean neg.2f -->0<!-- /n --> pp"
    assert render(page, tmp_path) == "gap <!-- n a.csv x diff_mean neg.2f -->1.16<!-- /n --> pp"
    assert check(page, tmp_path) == ["a.csv x diff_mean neg.2f: the page says '0', the file '1.16'"]
    starts = "ok\n<!-- n a.csv x diff_mean neg.2f -->1.16<!-- /n --> pp"  # an HTML block on GitHub
    assert check(starts, tmp_path) == ["line 2: starts with a marker, which Markdown reads as an "
                                       "HTML block; put a word before it"]
    for spec in (Spec("no.csv", "x", "diff_mean", None), Spec("a.csv", "z", "diff_mean", None),
                 Spec("a.csv", "x", "nope", None)):
        with pytest.raises(DocNumberError):
            value(spec, tmp_path)
    assert Spec.parse('b.md "FedMGDA ε=0.1" mean_acc .2f').row == "FedMGDA ε=0.1"


def test_a_claims_csv_gives_its_interval(tmp_path):
    """ci95_low / ci95_high / ci95_half: the verdict tables' 95 % t interval of a claims row."""
    from fedmgda.metrics import paired_interval

    (tmp_path / "c.csv").write_text("claim,diff_mean,diff_std,n_seeds\n"
                                    "\"c1@seeds=1,2,3\",2.78,2.72,8\n")
    low, high = paired_interval(2.78, 2.72, 8)
    spec = Spec.parse('c.csv "c1@seeds=1,2,3" ci95_low +.2f')
    assert value(spec, tmp_path) == f"{low:+.2f}" == "+0.51"
    assert value(Spec("c.csv", "c1@seeds=1,2,3", "ci95_high", "+.2f"), tmp_path) == f"{high:+.2f}"
    assert value(Spec("c.csv", "c1@seeds=1,2,3", "ci95_half", ".1f"),
                 tmp_path) == f"{(high - low) / 2:.1f}"
    with pytest.raises(DocNumberError):
        value(Spec("c.csv", "c2", "ci95_low", None), tmp_path)


def test_a_table_block_is_its_csv(tmp_path):
    """<!-- table: PATH [COLUMNS] --> ... <!-- /table -->: the csv as a Markdown table, rewritten
    by render, a drift or a block that does not parse reported by check."""
    (tmp_path / "runs.csv").write_text("commit,passed,note\nabc,5,idle\ndef,6,a|b\n")
    page = "before\n\n<!-- table: runs.csv commit,passed -->\nstale\n<!-- /table -->\n\nafter\n"
    rendered = render(page, tmp_path)
    assert rendered == ("before\n\n<!-- table: runs.csv commit,passed -->\n| commit | passed |\n| "
                        "--- | --- |\n| abc | 5 |\n| def | 6 |\n<!-- /table -->\n\nafter\n")
    assert (check(rendered, tmp_path) == []
            and check(page, tmp_path) == ["table block of runs.csv: differs from the file"])
    every = render("<!-- table: runs.csv -->\n<!-- /table -->\n", tmp_path)
    # a "|" in a cell is escaped
    assert "| commit | passed | note |" in every and "| def | 6 | a\\|b |" in every
    (tmp_path / "runs.csv").write_text("commit,passed,note\nabc,5,idle\ndef,6,x\nghi,7,y\n")
    assert check(rendered, tmp_path) == ["table block of runs.csv: differs from the file"]
    # a new row reaches the page by make docs alone
    assert "| ghi | 7 |" in render(rendered, tmp_path)
    assert "does not parse" in check("<!-- table: runs.csv -->\n| a |\n", tmp_path)[0]
    with pytest.raises(DocNumberError, match="no column nope"):
        render("<!-- table: runs.csv commit,nope -->\n<!-- /table -->\n", tmp_path)
    assert check("<!-- table: gone.csv -->\n<!-- /table -->\n", tmp_path) == [
        "gone.csv: no such file, named by a table block"]


def test_transcribed_numbers_carry_their_sentence_and_are_indexed():
    """benchmarks/measurements/performance_numbers.csv (numbers whose measurement kept no
    log file): each row's ``what`` is the sentence it was measured in, holding the value, and the
    measurements' index links the file."""
    import csv

    path = "benchmarks/measurements/performance_numbers.csv"
    with open(REPO / path, newline="") as f:
        rows = list(csv.DictReader(f))
    unsentenced = [r["key"] for r in rows if r["value"] not in r["what"] or len(r["what"]) > 200]
    assert rows and unsentenced == []
    index = (REPO / "benchmarks" / "measurements" / "README.md").read_text()
    assert "(performance_numbers.csv)" in index


def test_every_page_with_markers_is_rendered_and_checked():
    """A marker or table block on a page outside PAGES would never be rendered nor checked."""
    import subprocess

    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files", "*.md"], capture_output=True,
                             text=True,
                             check=True).stdout.split()
    with_markers = {p for p in tracked
                    if not p.startswith(("docs/results/", "benchmarks/measurements/"))
                    and re.search(r"<!-- (n |table: )",
                                  re.sub(r"`[^`\n]*`", "", (REPO / p).read_text()))}
    assert with_markers <= set(PAGES), ("add to tools/docnumbers.py's PAGES: "
                                        f"{sorted(with_markers - set(PAGES))}")


def test_a_table_block_of_a_markdown_file_is_its_tables(tmp_path):
    """<!-- table: FILE.md -->: the file's Markdown tables as written there, a blank line between
    two; its prose stays out; columns or a file without a table are one error."""
    (tmp_path / "t.md").write_text("## A title\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\nprose\n\n"
                                   "| c |\n|---|\n| 3 |\n")
    page = "<!-- table: t.md -->\nstale\n<!-- /table -->\n"
    rendered = render(page, tmp_path)
    assert rendered == ("<!-- table: t.md -->\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
                        "| c |\n|---|\n| 3 |\n<!-- /table -->\n")
    assert check(rendered, tmp_path) == []
    assert check(page, tmp_path) == ["table block of t.md: differs from the file"]
    with pytest.raises(DocNumberError, match="name no columns"):
        render("<!-- table: t.md a -->\n<!-- /table -->\n", tmp_path)
    (tmp_path / "u.md").write_text("no table\n")
    with pytest.raises(DocNumberError, match="no Markdown table"):
        render("<!-- table: u.md -->\n<!-- /table -->\n", tmp_path)
