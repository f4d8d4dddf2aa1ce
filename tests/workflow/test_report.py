"""The HTML report shows results, not code: `rule report_html`'s own command exports an executed
notebook without its code cells, and the notebook's first output is the claims summary."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys

import nbformat

from .conftest import REPO

RULES = REPO / "workflow/rules/report.smk"
NOTEBOOK = REPO / "notebooks/report.ipynb"


def report_html_command() -> str:
    """The shell command of `rule report_html`, as written in workflow/rules/report.smk."""
    rule = RULES.read_text().split("rule report_html:", 1)[1]
    literals = rule.split("shell:", 1)[1].split("\nrule ", 1)[0]
    return ast.literal_eval("(" + literals.strip() + ")")


def test_the_report_rule_exports_outputs_without_code(tmp_path):
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("## A heading"),
        nbformat.v4.new_code_cell("secret_source_line = 6 * 7\nsecret_source_line",
                                  execution_count=1,
                                  outputs=[nbformat.v4.new_output("execute_result", {"text/plain": "OUTPUT-42"},
                                                                  execution_count=1)]),
    ])
    executed = tmp_path / "report.ipynb"
    nbformat.write(notebook, executed)
    html_path, log = tmp_path / "out" / "report.html", tmp_path / "nbconvert.log"
    html_path.parent.mkdir()
    command = report_html_command().format(input=executed, output=html_path, log=log)
    done = subprocess.run(["bash", "-c", command], env={**os.environ, "FEDMGDA_PYTHON": sys.executable},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, log.read_text()[-2000:] if log.exists() else done.stderr
    page = html_path.read_text()
    assert "OUTPUT-42" in page and "A heading" in page
    assert "secret_source_line" not in page and 'class="jp-CodeMirrorEditor' not in page and "In&nbsp;[" not in page


def test_the_claims_summary_is_the_reports_first_output():
    """Before the cell that shows claims.md, no code cell displays anything (a call to display or a
    bare expression as its last line would), and no markdown cell says more than the title."""
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    first = next(i for i, c in enumerate(cells) if '"claims.md"' in "".join(c["source"]))
    for cell in cells[:first]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            assert re.fullmatch(r"# [^\n]+", source.strip()), f"text before the claims: {source[:80]!r}"
            continue
        tree = ast.parse(source)
        assert "display(" not in source and "print(" not in source, source[:80]
        assert not (tree.body and isinstance(tree.body[-1], ast.Expr)), f"a cell before the claims shows a value: {source[:80]!r}"


def test_the_report_says_where_its_runs_were_made(tmp_path):
    """runs_index.csv carries each run's environment stamp, and the report's section "Where these
    results were made" shows the footer of them (``fedmgda.provenance.footer``)."""
    import pandas as pd

    from fedmgda.workflow_cli import main

    from .conftest import write_run

    stamp = {"fedmgda": "0.1.0", "commit": None, "dirty": None, "python": "3.11.7", "torch": "2.14.1",
             "numpy": "2.4.6", "cvxopt": None, "device": "cpu", "cuda": None, "gpu": None, "cpu": "AMD EPYC",
             "isa": "x86-64-v4", "torch_isa": "AVX512", "threads": 2, "partition_hash": None}
    runs = tmp_path / "runs"
    for key in ("new", "old"):
        folder = write_run(runs, key, [0.5])
        if key == "new":
            summary = json.loads((folder / "summary.json").read_text())
            (folder / "summary.json").write_text(json.dumps({**summary, "environment": stamp}))
    registry = {key: {"experiments": ["e"], "dataset": "d", "algorithm": "fedavg", "seed": 1} for key in ("new", "old")}
    (tmp_path / "registry.json").write_text(json.dumps(registry))
    assert main(["runs-index", "--runs-dir", str(runs), "--registry", str(tmp_path / "registry.json"),
                 "--out", str(tmp_path / "runs_index.csv")]) == 0

    cells = json.loads(NOTEBOOK.read_text())["cells"]
    heading = next(i for i, c in enumerate(cells) if "".join(c["source"]).startswith("## Where these results were made"))
    shown = []
    namespace = {"index": pd.read_csv(tmp_path / "runs_index.csv"), "json": json, "pd": pd,
                 "display": shown.append, "Markdown": str}
    exec("".join(cells[heading + 1]["source"]), namespace)
    assert shown == ["Made with fedmgda 0.1.0, Python 3.11.7, torch 2.14.1, numpy 2.4.6, cvxopt None on cpu, AMD EPYC "
                     "(x86-64-v4), 2 threads.\n\n1 runs carry no environment stamp (trained before stamping)."]
