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
