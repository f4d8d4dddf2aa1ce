"""Numbers in the docs rendered from committed result files, not typed.

A page writes a number as an inline marker around its value::

    <!-- n benchmarks/measurements/performance_numbers.csv batched_01 value -->1.8e-3<!-- /n -->

The marker (an HTML comment: invisible on GitHub, in tables too) names a file under the repository,
a row key, a column and an optional format; ``render`` rewrites the value between the markers
from the file, ``check`` lists every marker whose value differs from it. Fields are split as a
shell does (quote a key with spaces: ``"FedMGDA ε=0.1"``); no field may hold ``|`` or ``--``, and
no line may start with a marker (Markdown would read an HTML block there).

Files and their cells:

- ``.csv``: the row whose first column is the key (``@last``: the last row, the newest entry of a
  log such as test_runs.csv), the column by its header.
- ``.md`` (and ``.txt``): Markdown tables; the row whose first cell (backquotes stripped) is the
  key, in a table whose header has the column (``a::b``: first cell a, second b). The key and
  column must name exactly one cell.
- ``.json``: the key a dotted path into the object (``a.b.0``), the column ``-``.
- any text file, the column ``#k``: the key a phrase on exactly one line, the k-th number after it
  on that line (``"package - authors =" #1``).
- a claims csv (fedmgda.claims), also ``ci95_low``, ``ci95_high``, ``ci95_half``: the 95 % t
  interval of the row's mean paired difference, as its verdict table shows it.

A whole ``.csv`` file is shown as a Markdown table between two lines of their own::

    <!-- table: benchmarks/measurements/test_runs.csv commit,date,passed -->
    (the table, rewritten from the file: the named columns, or every column)
    <!-- /table -->

A log that grows a row at a time (such as test_runs.csv) then never needs its page edited. A
``.md`` file in a table block (no columns) is shown by its Markdown tables, each as written there.

The format: none, the cell as written; a Python format spec (``.2f``, ``+.1f``, ``d``), the cell's
first number formatted (``neg`` before it: its negative, for a difference stated the other way
round); a column ``name#k`` picks the cell's k-th number (1-based): ``mean_acc#2`` of
``79.63 ± 1.22`` is 1.22.

``python tools/docnumbers.py [--check] [PAGES]`` (``make docs``) re-renders the numbers and the
verdict tables (:func:`render_verdict_blocks`) of the pages, by default ``PAGES`` below.
A page with a marker or table block that does not parse (a marker that lost its ``<!-- /n -->``, a
block without its ``<!-- /table -->``, a closing tag without its opening) is left as it is, and
each such block is one line ``PAGE: line N: ...``; the exit status is then 1, ``--check`` or not.
tests/test_docnumbers.py fails where a value differs from its file, and where a covered section
types a result-like number outside a marker.
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import json
import re
import shlex
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

PAGES = ("README.md", "docs/results.md", "docs/fmnist-fairness.md", "docs/performance.md",
         "docs/running.md",
         "docs/workflow.md", "docs/protocol-variants.md", "profiles/README.md",
         "docs/protocol-choices.md")
# a value holds no comment: a marker that lost its <!-- /n --> never borrows the next marker's
MARKER_RE = re.compile(r"<!-- n (?P<spec>(?:(?!-->)[^|\n])+?) -->"
                       r"(?P<value>(?:(?!<!--)[^\n])*?)<!-- /n -->")
NUMBER_RE = re.compile(r"[-+−]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
# a claims csv's columns computed from its row (:func:`_interval`)
INTERVAL_COLUMNS = ("ci95_low", "ci95_high", "ci95_half")
LAST_ROW = "@last"  # a .csv's last row: the newest entry of a log that grows a row at a time
# the body's lines: none opens or closes a block (one that lost its end never runs into the next)
TABLE_BLOCK_RE = re.compile(r"^<!-- table: (?P<path>\S+)(?: (?P<cols>\S+))? -->\n"
                            r"(?P<body>(?:(?!<!-- /?table\b).*\n)*)<!-- /table -->$", re.M)
TABLE_LINE_RE = re.compile(r"\s*<!-- (?P<end>/)?table\b")  # a line that opens or closes a block

# A page states verdicts in blocks generated from a committed claims.csv:
#   <!-- verdicts: docs/results/fmnist/claims_fedmdfg.csv fmnist_fedmdfg_* -->
#   (the table verdict_table writes)
#   <!-- /verdicts -->
# the path relative to the repository root, then an optional fnmatch pattern on the claim ids.
VERDICT_BLOCK_RE = re.compile(r"<!-- verdicts: (?P<path>\S+)(?: (?P<pattern>\S+))? -->\n"
                              r"(?P<body>.*?)<!-- /verdicts -->", re.S)


class DocNumberError(ValueError):
    """A marker names a file, row or column that does not exist, or a cell that is not a number."""


@dataclass(frozen=True)
class Spec:
    path: str
    row: str
    col: str
    fmt: str | None

    @classmethod
    def parse(cls, spec: str) -> Spec:
        if "--" in spec:  # CommonMark ends an HTML comment's text at "--"
            raise DocNumberError(f"marker '{spec}': '--' cannot stand in an HTML comment")
        fields = shlex.split(spec)
        if len(fields) not in (3, 4):
            raise DocNumberError(f"marker '{spec}': write 'PATH ROW COL [FORMAT]'")
        return cls(fields[0], fields[1], fields[2], fields[3] if len(fields) == 4 else None)


def _md_tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every Markdown table of ``text``: (header cells, body rows' cells)."""
    tables, lines = [], text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and re.match(r"\|\s*:?-", lines[i + 1]):
            cells = [_split_row(lines[i])]
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                cells.append(_split_row(lines[i]))
                i += 1
            tables.append((cells[0], cells[1:]))
        else:
            i += 1
    return tables


def _split_row(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


@cache
def _read(path: Path, mtime: float) -> object:
    text = path.read_text()
    if path.suffix == ".csv":
        rows = list(csv.reader(text.splitlines()))
        return [(rows[0], rows[1:])]
    if path.suffix == ".json":
        return json.loads(text)
    return _md_tables(text)


def cell(spec: Spec, root: str | Path) -> str:
    """The cell a marker names, as written in its file."""
    path = Path(root) / spec.path
    if not path.is_file():
        raise DocNumberError(f"{spec.path}: no such file, named by a number marker")
    col = spec.col.split("#")[0]
    if not col:  # ROW is a phrase: the rest of the one line that holds it
        lines = [line.split(spec.row, 1)[1] for line in path.read_text().splitlines()
                 if spec.row in line]
        if len(lines) != 1:
            raise DocNumberError(f"{spec.path}: {len(lines)} lines hold {spec.row!r}; a marker "
                                 "must name one")
        return lines[0]
    data = _read(path, path.stat().st_mtime)
    if path.suffix == ".json":
        node = data
        for key in spec.row.split("."):
            try:
                node = node[int(key)] if isinstance(node, list) else node[key]
            except (KeyError, IndexError, ValueError, TypeError):
                raise DocNumberError(f"{spec.path}: no key {spec.row!r}") from None
        return str(node)
    if path.suffix == ".csv" and col in INTERVAL_COLUMNS:
        return _interval(spec, data[0])
    found = []
    for header, rows in data:
        if col not in header:
            continue
        j = header.index(col)
        if spec.row == LAST_ROW and path.suffix == ".csv":
            found += [rows[-1][j]] if rows and j < len(rows[-1]) else []
            continue
        keys = spec.row.split("::")
        found += [r[j] for r in rows if [c.strip("`") for c in r[:len(keys)]] == keys
                  and j < len(r)]
    if len(found) != 1:
        raise DocNumberError(f"{spec.path}: {len(found)} cells in row {spec.row!r}, column "
                             f"{col!r}; "
                             "a marker must name exactly one")
    return found[0]


def _interval(spec: Spec, table: tuple[list[str], list[list[str]]]) -> str:
    """A claims csv row's 95 % t interval of the mean paired difference, as the verdict tables show
    it (fedmgda.metrics.paired_interval of diff_mean, diff_std, n_seeds): its low or high end, or
    its half-width (the smallest mean difference those seeds resolve)."""
    from fedmgda.metrics import paired_interval

    header, rows = table
    hits = [dict(zip(header, r, strict=False)) for r in rows if r and r[0] == spec.row]
    if len(hits) != 1 or not {"diff_mean", "diff_std", "n_seeds"} <= set(header):
        raise DocNumberError(f"{spec.path}: {len(hits)} claims rows {spec.row!r} with diff_mean, "
                             "diff_std, n_seeds")
    row = hits[0]
    low, high = paired_interval(float(row["diff_mean"]), float(row["diff_std"]),
                                int(float(row["n_seeds"])))
    return repr({"ci95_low": low, "ci95_high": high,
                 "ci95_half": (high - low) / 2}[spec.col.split("#")[0]])


def value(spec: Spec, root: str | Path) -> str:
    """What a marker's value should read: its cell, formatted."""
    text = cell(spec, root)
    _, _, k = spec.col.partition("#")
    if spec.fmt is None and not k:
        return text
    numbers = NUMBER_RE.findall(text)
    index = int(k) - 1 if k else 0
    if index >= len(numbers):
        raise DocNumberError(f"{spec.path}: row {spec.row!r}, column {spec.col!r}: no number "
                             f"{index + 1} "
                             f"in {text!r}")
    number = numbers[index].replace("−", "-")
    if spec.fmt is None:
        return number
    x, fmt = float(number), spec.fmt
    if fmt.startswith("neg"):
        x, fmt = -x, fmt[3:]
    return format(int(round(x)) if fmt.endswith("d") else x, fmt)


def csv_table(path: str, columns: str | None, root: str | Path) -> str:
    """A table block's body: the csv file ``path`` (under ``root``) as a Markdown table of the
    comma-separated ``columns`` (None: every column), one row per line of the file."""
    file = Path(root) / path
    if not file.is_file():
        raise DocNumberError(f"{path}: no such file, named by a table block")
    if file.suffix == ".md":
        return _md_table_lines(file, path, columns)
    header, rows = _read(file, file.stat().st_mtime)[0]
    names = columns.split(",") if columns else header
    missing = [c for c in names if c not in header]
    if missing:
        raise DocNumberError(f"{path}: no column {', '.join(missing)} (it has {', '.join(header)})")
    picked = [[row[header.index(c)] if header.index(c) < len(row) else "" for c in names]
              for row in rows]
    lines = [names, ["---"] * len(names)] + picked
    return "".join("| " + " | ".join(c.replace("|", "\\|") for c in line) + " |\n"
                   for line in lines)


def _md_table_lines(file: Path, path: str, columns: str | None) -> str:
    """A table block's body for a Markdown file: its tables' lines as written, a blank line
    between two tables."""
    if columns:
        raise DocNumberError(f"{path}: a table block of a .md file shows its tables whole; "
                             "name no columns")
    tables, current = [], []
    for line in file.read_text().splitlines() + [""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append("".join(f"{row}\n" for row in current))
            current = []
    if not tables:
        raise DocNumberError(f"{path}: no Markdown table, named by a table block")
    return "\n".join(tables)


def render(text: str, root: str | Path) -> str:
    """``text`` with every marker's value and every table block rewritten from its file."""
    def one(m: re.Match) -> str:
        return f"<!-- n {m['spec']} -->{value(Spec.parse(m['spec']), root)}<!-- /n -->"

    def table(m: re.Match) -> str:
        cols = f" {m['cols']}" if m["cols"] else ""
        return (f"<!-- table: {m['path']}{cols} -->\n"
                f"{csv_table(m['path'], m['cols'], root)}<!-- /table -->")
    return MARKER_RE.sub(one, TABLE_BLOCK_RE.sub(table, text))


def malformed(text: str) -> list[str]:
    """One line ``line N: ...`` per marker or table block that does not parse (render would leave
    it as typed, or a closing tag without its opening), and per line that starts with a marker."""
    def line_of(at: int) -> int:
        return text.count("\n", 0, at) + 1

    lines = text.splitlines()
    wrong = [f"line {n}: starts with a marker, which Markdown reads as an HTML block; put a word "
             "before it"
             for n, line in enumerate(lines, 1) if re.match(r"\s*<!-- n ", line)]
    markers = list(MARKER_RE.finditer(text))
    starts, ends = {m.start() for m in markers}, {m.end() for m in markers}
    openings = re.finditer(r"<!-- n ", text)
    unparsed = {line_of(m.start()) for m in openings if m.start() not in starts}
    wrong += [f"line {n}: a marker that does not parse (no '|' in its spec, a value on its line, "
              "then <!-- /n -->); it would never be rendered" for n in sorted(unparsed)]
    orphans = {line_of(m.start()) for m in re.finditer(r"<!-- /n -->", text) if m.end() not in ends}
    wrong += [f"line {n}: a '<!-- /n -->' that closes no marker (its opening "
              "'<!-- n PATH ROW COL [FORMAT] -->' is missing)" for n in sorted(orphans - unparsed)]
    blocks = list(TABLE_BLOCK_RE.finditer(text))
    opened, closed = {line_of(m.start()) for m in blocks}, {line_of(m.end()) for m in blocks}
    for n, line in enumerate(lines, 1):
        tag = TABLE_LINE_RE.match(line)
        if tag and not tag["end"] and n not in opened:
            wrong.append(f"line {n}: a table block that does not parse (a line '<!-- table: PATH "
                         "[COLUMNS] -->', then one '<!-- /table -->'); it would never be rendered")
        elif tag and tag["end"] and n not in closed:
            wrong.append(f"line {n}: a '<!-- /table -->' that closes no table block (its opening "
                         "line is missing or does not parse)")
    return sorted(wrong, key=lambda problem: int(problem.split(":")[0].split()[1]))


def check(text: str, root: str | Path) -> list[str]:
    """One line per marker or table block that does not parse (:func:`malformed`), per marker
    whose value differs from its file (or names no cell), and per table block that differs from
    its file."""
    wrong = malformed(text)
    for m in TABLE_BLOCK_RE.finditer(text):
        try:
            if m["body"] != csv_table(m["path"], m["cols"], root):
                wrong.append(f"table block of {m['path']}: differs from the file")
        except DocNumberError as e:
            wrong.append(str(e))
    for m in MARKER_RE.finditer(text):
        try:
            want = value(Spec.parse(m["spec"]), root)
        except DocNumberError as e:
            wrong.append(f"{m['spec']}: {e}")
            continue
        if m["value"] != want:
            wrong.append(f"{m['spec']}: the page says {m['value']!r}, the file {want!r}")
    return wrong


def strip_markers(text: str) -> str:
    """``text`` without its markers and their values (what is left is typed)."""
    return MARKER_RE.sub("", text)


def visible(text: str) -> str:
    """``text`` as rendered: each marker replaced by its value."""
    return MARKER_RE.sub(lambda m: m["value"], text)


# --------------------------------------------------------------------------- verdicts stated in
# docs
def verdict_table(df: pd.DataFrame, pattern: str | None = None) -> str:
    """The claims of a claims.csv (those matching ``pattern``) as a short markdown table: the claim,
    what it expects, the paired A - B over seeds (mean ± sd, min to max, and its 95 % t interval,
    :func:`fedmgda.metrics.paired_interval`; the measured values for a series) and the verdict
    with its note."""
    from fedmgda.errors import ClaimError
    from fedmgda.metrics import paired_interval

    rows = (df if pattern is None
            else df[[fnmatch.fnmatchcase(str(c), pattern) for c in df["claim"]]])
    if not len(rows):
        raise ClaimError(f"no claim matches {pattern!r}")
    lines = ["| claim | expected | measured: A − B per seed, mean ± sd (min to max); "
             "95 % interval of the mean | verdict |",
             "|---|---|---|---|"]
    for _, r in rows.iterrows():
        if r["diff_mean"] != "":
            mean, sd, n = float(r["diff_mean"]), float(r["diff_std"]), int(r["n_seeds"])
            low_seed, high_seed = float(r["diff_min"]), float(r["diff_max"])
            # a loss gap of 0.006 stays visible
            d = 2 if max(abs(mean), sd, abs(low_seed), abs(high_seed)) >= 0.1 else 4
            measured = (f"{mean:+.{d}f} ± {sd:.{d}f} ({low_seed:+.{d}f} to {high_seed:+.{d}f}), "
                        f"n = {n}")
            if n > 1:
                low, high = paired_interval(mean, sd, n)
                measured += f"; [{low:+.{d}f}, {high:+.{d}f}]"
        else:
            measured = str(r["measured"])
        verdict = f"*{r['verdict']}*" + (f" ({r['note']})" if r["note"] else "")
        cells = [f"`{r['claim']}`", str(r["expected"]), measured, verdict]
        lines.append("| " + " | ".join(c.replace("|", "/").replace("\n", " ")
                                       for c in cells) + " |")
    return "\n".join(lines) + "\n"


def render_verdict_blocks(text: str, root: str | Path) -> str:
    """``text`` with every verdicts block's table regenerated from its claims.csv (under
    ``root``)."""
    from fedmgda.claims import read_claims
    from fedmgda.errors import ClaimError

    def table(m: re.Match) -> str:
        path = Path(root) / m["path"]
        if not path.exists():
            raise ClaimError(f"{m['path']}: no such claims file, named by a verdicts block; "
                             "fix the path")
        pattern = f" {m['pattern']}" if m["pattern"] else ""
        return (f"<!-- verdicts: {m['path']}{pattern} -->\n"
                f"{verdict_table(read_claims(path), m['pattern'])}<!-- /verdicts -->")
    return VERDICT_BLOCK_RE.sub(table, text)


def main(argv: list[str] | None = None) -> int:
    from fedmgda.errors import ClaimError

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", nargs="*", type=Path)
    parser.add_argument("--root", type=Path, default=Path("."))
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if a page differs")
    args = parser.parse_args(argv)
    pages = args.pages or [args.root / p for p in PAGES]
    status = 0
    for page in pages:
        text = page.read_text()
        problems = malformed(text)  # rendering would leave them, or eat what follows them
        if problems:
            for problem in problems:
                print(f"{page}: {problem}", file=sys.stderr)
            status = 1
            continue
        try:
            new = render(render_verdict_blocks(text, args.root), args.root)
        except (ClaimError, DocNumberError) as e:
            print(f"{page}: {e}", file=sys.stderr)
            status = 1
            continue
        if new != text:
            if args.check:
                print(f"{page}: differs from its files; run make docs", file=sys.stderr)
                status = 1
            else:
                page.write_text(new)
                print(f"{page}: numbers, verdict tables and table blocks rewritten")
    return status


if __name__ == "__main__":
    sys.exit(main())
