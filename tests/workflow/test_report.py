"""The HTML report shows results, not code: `rule report_html`'s own command exports an executed
notebook without its code cells, and the notebook's first output is the claims summary."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from .conftest import REPO

RULES = REPO / "workflow/rules/report.smk"
NOTEBOOK = REPO / "notebooks/report.ipynb"


class ShellPath(str):
    """A path as Snakemake formats it into a shell command: ``{x:q}`` shell-quoted."""

    def __format__(self, spec: str) -> str:
        return shlex.quote(self) if spec == "q" else format(str(self), spec)


def report_html_command(**paths) -> str:
    """The shell command of `rule report_html`, as written in workflow/rules/report.smk, with
    ``paths`` filled in as Snakemake fills them."""
    rule = RULES.read_text().split("rule report_html:", 1)[1]
    literals = rule.split("shell:", 1)[1].split("\nrule ", 1)[0]
    template = ast.literal_eval("(" + literals.strip() + ")")
    return template.format(**{k: ShellPath(v) for k, v in paths.items()})


def test_the_report_rule_exports_outputs_without_code(tmp_path):
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("## A heading"),
        nbformat.v4.new_code_cell("secret_source_line = 6 * 7\nsecret_source_line",
                                  execution_count=1,
                                  outputs=[nbformat.v4.new_output("execute_result",
                                                                  {"text/plain": "OUTPUT-42"},
                                                                  execution_count=1)]),
    ])
    executed = tmp_path / "report.ipynb"
    nbformat.write(notebook, executed)
    html_path, log = tmp_path / "out" / "report.html", tmp_path / "nbconvert.log"
    html_path.parent.mkdir()
    command = report_html_command(input=executed, output=html_path, log=log)
    done = subprocess.run(["bash", "-c", command],
                          env={**os.environ, "FEDMGDA_PYTHON": sys.executable},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, log.read_text()[-2000:] if log.exists() else done.stderr
    page = html_path.read_text()
    assert "OUTPUT-42" in page and "A heading" in page
    assert ("secret_source_line" not in page and 'class="jp-CodeMirrorEditor' not in page
            and "In&nbsp;[" not in page)


def test_the_claims_summary_is_the_reports_first_output():
    """Before the cell that shows claims.md, no code cell displays anything (a call to display or a
    bare expression as its last line would), and no markdown cell says more than the title."""
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    first = next(i for i, c in enumerate(cells) if '"claims.md"' in "".join(c["source"]))
    for cell in cells[:first]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            assert re.fullmatch(r"# [^\n]+",
                                source.strip()), f"text before the claims: {source[:80]!r}"
            continue
        tree = ast.parse(source)
        assert "display(" not in source and "print(" not in source, source[:80]
        assert not (tree.body and isinstance(tree.body[-1], ast.Expr)), \
            f"a cell before the claims shows a value: {source[:80]!r}"


def test_the_report_says_where_its_runs_were_made(tmp_path):
    """runs_index.csv carries each run's environment stamp, and the report's section "Where these
    results were made" shows the footer of them (``fedmgda.provenance.footer``)."""
    import pandas as pd

    from fedmgda.workflow_cli import main

    from .conftest import write_run

    stamp = {"fedmgda": "0.1.0", "commit": None, "dirty": None, "python": "3.11.7",
             "torch": "2.14.1",
             "numpy": "2.4.6", "cvxopt": None, "device": "cpu", "cuda": None, "gpu": None,
             "cpu": "AMD EPYC",
             "isa": "x86-64-v4", "torch_isa": "AVX512", "threads": 2, "partition_hash": None}
    runs = tmp_path / "runs"
    for key in ("new", "old"):
        folder = write_run(runs, key, [0.5])
        if key == "new":
            summary = json.loads((folder / "summary.json").read_text())
            (folder / "summary.json").write_text(json.dumps({**summary, "environment": stamp}))
    registry = {key: {"experiments": ["e"], "dataset": "d", "algorithm": "fedavg", "seed": 1}
                for key in ("new", "old")}
    (tmp_path / "registry.json").write_text(json.dumps(registry))
    assert main(["runs-index", "--runs-dir", str(runs), "--registry",
                 str(tmp_path / "registry.json"),
                 "--out", str(tmp_path / "runs_index.csv")]) == 0

    cells = json.loads(NOTEBOOK.read_text())["cells"]
    heading = next(i for i, c in enumerate(cells)
                   if "".join(c["source"]).startswith("## Where these results were made"))
    shown = []
    namespace = {"index": pd.read_csv(tmp_path / "runs_index.csv"), "json": json, "pd": pd,
                 "display": shown.append, "Markdown": str}
    exec("".join(cells[heading + 1]["source"]), namespace)
    assert shown == ["Made with fedmgda 0.1.0, Python 3.11.7, torch 2.14.1, numpy 2.4.6, cvxopt "
                     "None on cpu, AMD EPYC (x86-64-v4), 2 torch threads.\n\n1 run carries no "
                     "environment stamp (trained before stamping)."]


# ---- a report that shows any experiment

def _toy_results(root, *, packed: bool = True):
    """results/<toy>/ of one experiment, ``toy_exp``, that no table or figure shows: FedAvg and
    FedMGDA (epsilon 0) over two seeds each, the two FedMGDA runs trained in one pack."""
    from .conftest import write_run

    runs, registry = root / "runs", {}
    for algorithm, hparams in (("fedavg", {}), ("fedmgda", {"epsilon": 0})):
        for seed in (1, 2):
            key = f"toy/{algorithm}/seed{seed}"
            accs = [0.4 + 0.1 * seed, 0.6, 0.8 if algorithm == "fedavg" else 0.5]
            folder = write_run(runs, key, accs, rounds=12, seed=seed)
            summary = json.loads((folder / "summary.json").read_text())
            config = {"dataset": "toy", "algorithm": algorithm, "hparams": hparams, "seed": seed,
                      "partition_file": f"p/seed{seed}.npz", "rounds": 12}
            (folder / "summary.json").write_text(json.dumps({**summary, "config": config,
                                                             "runtime_s": 100.0 + seed}))
            registry[key] = {"experiments": ["toy_exp"], "dataset": "toy", "algorithm": algorithm,
                             "seed": seed}
    if packed:
        members = [f"results/toy/runs/toy/fedmgda/seed{s}" for s in (1, 2)]
        for member in members:
            (runs / member.removeprefix("results/toy/runs/") / "train.log").write_text(
                "pack of 2 runs: python -m fedmgda train --config a.yaml b.yaml --out "
                f"{' '.join(members)}\nround 1\n")
    (root / "registry.json").write_text(json.dumps(registry))
    return runs


def test_a_pack_counts_once_in_the_training_time(tmp_path):
    import pandas as pd

    from fedmgda.report import run_pack, training_time
    from fedmgda.workflow_cli import main

    runs = _toy_results(tmp_path)
    assert run_pack(runs / "toy/fedavg/seed1") == ""
    assert run_pack(runs / "toy/fedmgda/seed1") == run_pack(runs / "toy/fedmgda/seed2") != ""
    assert main(["runs-index", "--runs-dir", str(runs), "--registry",
                 str(tmp_path / "registry.json"),
                 "--out", str(tmp_path / "runs_index.csv")]) == 0
    index = pd.read_csv(tmp_path / "runs_index.csv")
    assert training_time(index) == (101.0 + 102.0 + 102.0, 1)  # the pack: its longest member, once
    # an index written before packs were read
    assert training_time(index.drop(columns="pack")) == (406.0, 0)


def test_an_experiment_without_a_table_shows_its_rows(tmp_path):
    from types import SimpleNamespace

    from fedmgda import report

    runs = _toy_results(tmp_path)
    assert report.bare_experiments(["a", "b", "c"],
                                   [SimpleNamespace(experiments=["a"]),
                                    SimpleNamespace(experiments=["c"])]) == ["b"]
    keys = [f"toy/{a}/seed{s}" for a in ("fedavg", "fedmgda") for s in (1, 2)]
    rows = report.experiment_rows(runs, keys)
    assert rows == {"fedavg": keys[:2], "fedmgda epsilon=0": keys[2:]}
    # one row: its hparams
    assert report.experiment_rows(runs, keys[2:]) == {"fedmgda epsilon=0": keys[2:]}
    stats = report.statistics_table(runs, rows)
    assert (list(stats.index) == list(rows) and set(stats["seeds"]) == {2}
            and set(stats["status"]) == {"2 ok"})
    assert stats.loc["fedavg", "final mean_acc"] == "65.00 ± 1.67"  # user means 63.33 %, 66.67 %
    figure = report.curves_figure(runs, rows)
    assert [len(ax.lines) for ax in figure.axes] == [2, 2]
    assert report.curves_png(runs, rows).startswith(b"\x89PNG")


def _headings_without_content(page: str) -> list[str]:
    """The h1-h4 headings of an HTML page under which nothing (text, image, table) comes before
    the next heading of the same or a higher level."""
    from html.parser import HTMLParser

    events: list[tuple[int, str]] = []  # (level, heading text) or (0, "content")

    class Walk(HTMLParser):
        heading, skip = None, 0

        def handle_starttag(self, tag, attrs):
            if tag in ("style", "script"):
                self.skip += 1
            elif re.fullmatch(r"h[1-4]", tag):
                self.heading = [int(tag[1]), ""]
            elif tag in ("img", "table", "svg") and not self.skip:
                events.append((0, tag))

        def handle_endtag(self, tag):
            if tag in ("style", "script"):
                self.skip -= 1
            elif re.fullmatch(r"h[1-4]", tag) and self.heading:
                events.append((self.heading[0], self.heading[1].strip(" ¶")))
                self.heading = None

        def handle_data(self, data):
            if self.heading is not None:
                self.heading[1] += data
            elif data.strip() and not self.skip:
                events.append((0, "text"))

    Walk().feed(page)
    empty = []
    for i, (level, text) in enumerate(events):
        following = next((lv for lv, _ in events[i + 1:]), None) if level else None
        if level and (following is None or 0 < following <= level):
            empty.append(text)
    return empty


@pytest.fixture(scope="module")
def toy_report(tmp_path_factory) -> Path:
    """The HTML report of a one-experiment profile (no table, figure or claim): papermill and
    nbconvert run as the rules run them, on ``_toy_results`` and three training jobs' benchmarks."""
    import pandas as pd

    from fedmgda.workflow_cli import main

    tmp_path = tmp_path_factory.mktemp("toy_report")
    results = tmp_path / "results/toy"
    results.mkdir(parents=True)
    runs = _toy_results(results)
    assert main(["runs-index", "--runs-dir", str(runs), "--registry",
                 str(results / "registry.json"),
                 "--out", str(results / "runs_index.csv")]) == 0
    assert len(pd.read_csv(results / "runs_index.csv")) == 4
    for job, seconds in (("train/toy/fedavg/seed1", 110.0), ("train/toy/fedavg/seed2", 120.0),
                         ("packs/toy_exp/g/pack1", 130.5)):
        (results / "benchmarks" / f"{job}.tsv").parent.mkdir(parents=True, exist_ok=True)
        (results / "benchmarks" / f"{job}.tsv").write_text(f"s\th:m:s\tmax_rss\n"
                                                           f"{seconds}\t0:02:00\t800\n")
    executed, page = results / "report/report.ipynb", results / "report/report.html"
    executed.parent.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "MPLBACKEND": "Agg"}
    done = subprocess.run([sys.executable, "-m", "papermill", str(NOTEBOOK), str(executed), "-k",
                           "python3",
                           "--cwd", str(tmp_path), "-p", "results_dir", "results/toy", "-p",
                           "profile", "toy",
                           "-p", "tables", "", "-p", "figures", "", "-p", "bare", "toy_exp"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    command = report_html_command(input=executed, output=page, log=tmp_path / "nbconvert.log")
    done = subprocess.run(["bash", "-c", command], env={**env, "FEDMGDA_PYTHON": sys.executable},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (tmp_path / "nbconvert.log").read_text()[-2000:]
    return page


def test_the_report_of_one_experiment_shows_its_results(toy_report):
    """It shows the experiment's curves and statistics, the training time with the pack counted
    once, and no empty section."""
    html = toy_report.read_text()
    assert _headings_without_content(html) == []
    assert "Results of the experiments without a table or figure" in html and "toy_exp" in html
    # the curves, an image (a figure displayed under MPLBACKEND=Agg would be its text, "<Figure size
    # ...>")
    assert html.count('src="data:image/png;base64') == 1 and "Figure size" not in html
    assert (html.index('id="toy_exp"') < html.index('src="data:image/png;base64')
            < html.index('id="Run-time"'))
    assert "fedmgda epsilon=0" in html and "final mean_acc" in html  # the statistics table
    assert re.findall(r"<h[1-4][^>]*>([^<]*)", html) == [
        "FedMGDA+ reproduction report", "What was run",
        "Results of the experiments without a table or figure",
        "toy_exp", "Run time", "Where these results were made", "About this report"]
    assert "Paper vs reproduced" not in html  # no table
    assert "305 s" in html and "1 pack of runs counted once" in html
    assert "Wall clock of the 3 training jobs" in html and "360 s" in html


CHROMIUM = (shutil.which("chromium") or shutil.which("chromium-browser")
            or shutil.which("google-chrome"))


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium (Debian: apt-get install chromium)")
def test_a_browser_shows_the_curves_of_the_one_experiment_report(toy_report, tmp_path):
    """Headless Chromium renders the report (docs/workflow.md, "The report", has the command): the
    screenshot has the curves' colours (tab10 blue and orange), which nothing else on the page
    has."""
    from PIL import Image

    shot = tmp_path / "report.png"
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                           "--disable-quic", "--no-first-run",
                           "--disable-background-networking", "--disable-component-update",
                           "--disable-sync",
                           f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
                           "--window-size=1280,2000",
                           toy_report.as_uri()], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    colours = Image.open(shot).convert("RGB").getcolors(maxcolors=1 << 24)

    def pixels_near(ref: tuple[int, int, int]) -> int:
        return sum(n for n, rgb in colours if sum(abs(a - b) for a, b in zip(rgb, ref)) < 60)

    assert pixels_near((31, 119, 180)) > 200  # tab10 blue: fedavg's lines
    assert pixels_near((255, 127, 14)) > 200  # tab10 orange: fedmgda's lines
