"""Parse paper_tables.md (the transcription of the paper's Tables 6-14, not part of the
repository) and src/fedmgda/reference/qffl_tables.md (the transcription
of the q-FFL paper's Tables 2 and 11, in the repository) into the long table shipped as package
data, src/fedmgda/reference/paper_tables.csv: the FedMGDA+ rows first, then the q-FFL rows.

    python scripts/paper_reference.py path/to/paper_tables.md [--qffl QFFL_MD] [--out CSV]

The test tests/workflow/test_paper_tables.py re-parses the markdown (where FEDMGDA_PAPER_TABLES
names it) and checks the CSV against it. Row keys are made with :func:`fedmgda.runkeys.row_key`,
the same function that names the registry's rows, so tables can match paper rows to reproduced rows
(a q-FFL Table 2 row spans two datasets with different hyper-parameters: its key is the grid
entries' shared ``row:``).
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))  # works without `pip install -e .`

from fedmgda.runkeys import row_key  # noqa: E402

DEFAULT_CSV = REPO / "src/fedmgda/reference/paper_tables.csv"
DEFAULT_QFFL_MD = REPO / "src/fedmgda/reference/qffl_tables.md"

NAMES = {"FedMGDA": "fedmgda", "FedMGDA+": "fedmgda_plus", "MGDA-Prox": "mgda_prox",
         "FedAvg": "fedavg",
         "FedAvg-n": "fedavg_n", "FedProx": "fedprox", "q-FedAvg": "qfedavg", "AFL": "afl"}
COLUMNS = {
    "table6": ["Average", "Std"],
    "table7": ["Uniform", "PhD", "Non-PhD"],
    "table14": ["Avg (client)", "Avg (data)", "Std", "Worst 5", "Best 5"],
}
STATS4 = ["Average", "Std", "Worst 5%", "Best 5%"]
# Table 7 settings stated in the appendix text (paper_tables.md "Figure 2 settings"/docs/protocol.md
# §5.1)
AFL_HP = {"gamma_lambda": 0.5, "gamma_w": 0.01}
FEDMGDA_PLUS_ADULT = {"eta": 1.0, "decay": "1/3"}
FIELDS = ["table", "row", "label", "column", "mean", "std", "note"]


def _blocks(text: str):
    for m in re.finditer(r"^## Table (\d+)[^\n]*\n+```\n(.*?)```", text, re.S | re.M):
        yield f"table{m.group(1)}", m.group(2).strip().splitlines()


def _pm(tok: str) -> tuple[float, float]:
    mean, std = tok.split("±")
    return float(mean), float(std)


def parse(md_path: str | Path) -> list[dict]:
    """The paper's Tables 6-14 from their transcription: one dict per (table, row, column)."""
    out: list[dict] = []
    for table, lines in _blocks(Path(md_path).read_text()):
        cols = COLUMNS.get(table, STATS4)
        header: list[str] = []
        seen: set[str] = set()
        for line in lines[1:]:
            toks = line.split()
            if toks[0] == "Name":
                header = toks[1:]
                continue
            vals = [t for t in toks if "±" in t]
            head = [t for t in toks if "±" not in t]
            if len(vals) != len(cols):
                raise ValueError(f"{table}: cannot parse {line!r}")
            if table == "table7":
                key, label, note = _table7_row(head, line)
            elif table == "table6":
                key, label, note = NAMES[head[0]], f"{head[0]} (best row of Table 13)", ""
            else:
                key, label, note = _grid_row(table, head, header, seen, line)
            seen.add(key)
            for col, tok in zip(cols, vals, strict=True):
                mean, std = _pm(tok)
                out.append({"table": table, "row": key, "label": label, "column": col,
                            "mean": mean, "std": std, "note": note})
    return out


def _table7_row(head: list[str], line: str) -> tuple[str, str, str]:
    """(key, label, note) of a Table 7 row: an algorithm and its bias value, or Baseline_PhD."""
    name = " ".join(head)
    m = re.match(r"(AFL|q-FedAvg, q=([\d.]+)|FedMGDA\+|Baseline_PhD)\s*(\S*)$", name)
    if not m:
        raise ValueError(f"table7: cannot parse {line!r}")
    if m.group(1) == "Baseline_PhD":
        return ("baseline_phd", "Baseline_PhD (train on PhD data only)",
                "not in the authors' code (docs/protocol.md §5.1)")
    bias = m.group(3)
    if m.group(1) == "AFL":
        alg, hp = "afl", dict(AFL_HP)
    elif m.group(1).startswith("q-FedAvg"):
        alg, hp = "qfedavg", {"q": float(m.group(2)), "L": 1.0}
    else:
        alg, hp = "fedmgda_plus", dict(FEDMGDA_PLUS_ADULT)
    value = "*" if bias == "Arbitrary" else bias
    key = row_key(alg, hp, {}, {"kind": "bias", "value": 0})
    key = (key.rsplit(" bias=", 1)[0]
           + f" bias={value if value == '*' else format(float(value), 'g')}")
    return key, f"{m.group(1)} [bias {bias}]", ""


def _grid_hparams(table: str, alg: str, header: list[str], args: list[str],
                  line: str) -> tuple[dict, dict]:
    """(hyper-parameters, run settings) a row of Tables 8-14 names under its header."""
    if len(args) != len(header):
        raise ValueError(f"{table}: {line!r} does not match header {header}")
    named = dict(zip(header, args, strict=True))
    if header == ["η", "decay"]:
        return {"eta": float(named["η"]), "decay": named["decay"]}, {}
    if header == ["μ"]:
        return {"mu": float(named["μ"])}, {}
    if header == ["q", "L"]:
        return {"q": float(named["q"]), "L": float(named["L"])}, {}
    if header == ["η", "momentum"]:
        run = {"local_lr": float(named["η"]), "momentum": float(named["momentum"])}
        return ({"mu": 0.001} if alg == "fedprox" else {}), run
    raise ValueError(f"{table}: unknown header {header}")


def _grid_row(table: str, head: list[str], header: list[str], seen: set[str],
              line: str) -> tuple[str, str, str]:
    """(key, label, note) of a row of Tables 8-14: an algorithm with the values of its header."""
    alg, args = NAMES[head[0]], head[1:]
    hp, run = _grid_hparams(table, alg, header, args, line) if args else ({}, {})
    key, note = row_key(alg, hp, run, None), ""
    if table == "table12" and key in seen and key == "fedmgda_plus decay=0.5 eta=1":
        # docs/protocol.md §8.16: printed twice; the 5th FedMGDA+ row is 1.0, 1/5
        key = row_key(alg, {"eta": 1.0, "decay": "1/5"}, run, None)
        note = "printed as '1.0 1/2' (twice); read as decay 1/5 (docs/protocol.md §8.16)"
    if table == "table9" and alg == "mgda_prox" and not args:
        note = ("printed without hyper-parameters; equals FedProx mu=0.1 (docs/protocol.md "
                "§8.16); not matched")
    label = " ".join([head[0]] + [f"{h}={a}" for h, a in zip(header, args, strict=False)] if args
                     else [head[0]])
    return key, label, note


def parse_qffl(md_path: str | Path) -> list[dict]:
    """The q-FFL transcription's blocks (``## qffl_tableN ...`` then a fenced ``text`` block of
    ``|``-separated cells: row, label, one ``mean±std`` per column)."""
    out: list[dict] = []
    text = Path(md_path).read_text()
    for m in re.finditer(r"^## (qffl_table\d+)[^\n]*\n.*?```text\n(.*?)```", text, re.S | re.M):
        table, lines = m.group(1), m.group(2).strip().splitlines()
        header = [c.strip() for c in lines[0].split("|")]
        if header[:2] != ["row", "label"]:
            raise ValueError(f"{table}: the header must start with row | label, got {lines[0]!r}")
        for line in lines[1:]:
            cells = [c.strip() for c in line.split("|")]
            if len(cells) != len(header):
                raise ValueError(f"{table}: {len(cells)} cells, header has {len(header)}: {line!r}")
            row, label = cells[:2]
            if " " in row:  # "algorithm k=v ...": the key the registry gives that grid entry
                alg, *args = row.split()
                row = row_key(alg, {k: float(v) for k, v in (a.split("=") for a in args)}, None,
                              None)
            for col, tok in zip(header[2:], cells[2:], strict=True):
                mean, std = _pm(tok)
                out.append({"table": table, "row": row, "label": label, "column": col,
                            "mean": mean, "std": std, "note": ""})
    if not out:
        raise ValueError(f"{md_path}: no '## qffl_tableN' block found")
    return out


def _fmt(x: float) -> str:
    """Two decimals, as the paper tables print them; more where the paper has more (KL 0.083)."""
    return f"{x:.2f}" if abs(x * 100 - round(x * 100)) < 1e-9 else format(x, "g")


def write_csv(rows: list[dict], path: str | Path) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({**r, "mean": _fmt(r["mean"]), "std": _fmt(r["std"])})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("markdown", type=Path, help="the transcription of the paper's Tables 6-14")
    ap.add_argument("--qffl", type=Path, default=DEFAULT_QFFL_MD,
                    help="the transcription of the q-FFL paper's Tables 2 and 11 (default: "
                    f"{DEFAULT_QFFL_MD})")
    ap.add_argument("--out", type=Path, default=DEFAULT_CSV,
                    help=f"the CSV to write (default: {DEFAULT_CSV})")
    args = ap.parse_args(argv)
    if not args.markdown.is_file():
        print(f"paper_reference: {args.markdown} not found. It is the transcription of the paper's "
              "Tables 6-14 (not part of this repository); pass its path", file=sys.stderr)
        return 2
    rows = parse(args.markdown) + parse_qffl(args.qffl)
    write_csv(rows, args.out)
    print(f"wrote {len(rows)} values to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
