"""The Snakemake workflow itself: the paper DAG resolves (>= 1000 training jobs), and the tiny
config runs end to end (train -> table -> figure -> report), its `snakemake --report` holds every
table, figure and the claims with their captions; one deleted figure reruns alone."""

from __future__ import annotations

import html
import json
import re
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from fedmgda.experiments import expand, rows_selected
from fedmgda.packs import assign_packs, pack_rule_name

from .conftest import REPO, copy_workflow, unactivated_env


def _job_counts(output: str) -> dict[str, int]:
    counts = {}
    for line in output.splitlines():
        m = re.match(r"^(\w+)\s+(\d+)\s*$", line.strip())
        if m:
            counts[m.group(1)] = int(m.group(2))
    return counts


def _paper_packs():
    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    reg = expand(cfg)
    return reg, assign_packs(reg.runs)


def test_paper_dag_resolves_with_at_least_1000_training_runs_in_packs(tmp_path):
    # in a copy of the workflow without results/: the checkout's trained runs get no job
    # (fedmgda.packs.trained_runs), so there the DAG depends on what was trained; --forceall:
    # every job of the DAG
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--forceall", "--quiet",
                           "rules"], cwd=copy_workflow(tmp_path / "wf"),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = _job_counts(proc.stdout)
    reg, packs = _paper_packs()
    pack_jobs = {k: v for k, v in counts.items() if k.startswith("train_pack_")}
    assert pack_jobs == {pack_rule_name(p): 1 for p in packs}  # one job per pack, every pack
    packed = sum(len(keys) for keys in packs.values())
    print(f"paper DAG: {len(pack_jobs)} pack jobs ({packed} runs) + {counts.get('train', 0)} "
          f"single-run jobs, {counts.get('total')} jobs in all")
    assert packed + counts.get("train", 0) == len(reg.runs) >= 1000
    for n in range(6, 15):
        assert counts[f"table_table{n}"] == 1
    assert sum(v for k, v in counts.items() if k.startswith("figure_fig")) >= 9
    assert counts["report_html"] == 1
    assert counts["check_claims"] == 1
    # docs/workflow.md "The paper registry" states the DAG's counts
    page = " ".join((REPO / "docs" / "workflow.md").read_text().split())
    m = re.search(r"resolves (\d+) training runs in (\d+) pack jobs, plus (\d+) partitions, (\d+) "
                  r"downloads, (\d+) tables, (\d+) figure panels, the claims and the report's "
                  r"(\d+) jobs: (\d+) jobs", page)
    assert m, "docs/workflow.md no longer states the paper DAG's counts; update this test"
    report = sum(counts.get(k, 0)
                 for k in ("registry_json", "runs_index", "report_notebook", "report_html"))
    actual = [len(reg.runs), len(pack_jobs), counts["partition"], counts["download"],
              sum(v for k, v in counts.items() if k.startswith("table_")),
              sum(v for k, v in counts.items() if k.startswith("figure_")), report, counts["total"]]
    assert [int(x) for x in m.groups()] == actual, "docs/workflow.md's paper DAG counts are stale"


def test_claims_target_builds_only_the_runs_the_claims_need():
    proc = subprocess.run([sys.executable, "-m", "snakemake", "results/paper/claims.md", "-n",
                           "--quiet", "rules"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = _job_counts(proc.stdout)
    assert counts["check_claims"] == 1 and "report_html" not in counts
    assert not any(k.startswith(("table_", "figure_")) for k in counts)
    training_jobs = sum(v for k, v in counts.items() if k == "train" or k.startswith("train_pack_"))
    assert 0 < training_jobs < 100, counts  # the whole paper: ~200 training jobs


def test_one_figure_builds_only_the_packs_of_its_runs():
    # the target goes before options that take several values
    proc = subprocess.run([sys.executable, "-m", "snakemake", "results/paper/figures/fig3a.pdf",
                           "-n", "--quiet", "rules"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = _job_counts(proc.stdout)
    reg, packs = _paper_packs()
    runs = {r for row in rows_selected(reg.rows, reg.figures["fig3a"]) for r in row.runs}
    needed = {pack_rule_name(p) for p, keys in packs.items() if runs & set(keys)}
    if runs - {k for keys in packs.values() for k in keys}:
        needed.add("train")  # runs outside packs: one job each
    assert {k for k in counts if k.startswith("train")} == needed, counts
    assert counts["figure_fig3a"] == 1 and not any(k.startswith(("table_", "report"))
                                                   for k in counts)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A copy of the workflow (Snakefile, workflow/, config/, notebooks/) in a scratch folder."""
    return copy_workflow(tmp_path_factory.mktemp("wf"))


@pytest.mark.slow
def test_tiny_config_end_to_end(workdir, tmp_path):
    # from a shell without the environment activated: every rule (papermill's kernel included)
    # runs with this interpreter, none with the decoys first on PATH
    env, decoys_called = unactivated_env(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", "--configfile",
                           "config/test.yaml"], cwd=workdir,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    assert not decoys_called.exists(), decoys_called.read_text()
    out = workdir / "results/test"
    runs = list((out / "runs").rglob("summary.json"))
    assert len(runs) == 4
    for run in runs:
        for f in ("run.yaml", "metrics.csv", "per_user.csv", "train.log"):
            assert (run.parent / f).is_file()
    assert (out / "tables/table8.csv").is_file() and (out / "tables/table8.md").is_file()
    for fig in ("fig1a", "fig3a"):
        assert (out / f"figures/{fig}.pdf").is_file() and (out / f"figures/{fig}.png").is_file()
    claims = (out / "claims.csv").read_text()
    assert "fairness_worst5" in claims and "improved_participants" in claims
    html = (out / "report/report.html").read_text()
    assert "Tiny table" in html and "Run time" in html and "claims, checked" in html
    # results, not code: no code cell's source, and the claims summary comes first
    assert 'class="jp-CodeMirrorEditor' not in html and "import pandas" not in html
    assert html.index("claims, checked") < html.index("What was run")


def _report_json(page: str, name: str):
    """One of the JSON objects the Snakemake report page embeds (`var <name> = {...};`)."""
    m = re.search(rf'<script id="{name}">\s*var \w+ = (.*?);\s*</script>', page, re.S)
    assert m, f"no {name} in the report page"
    return json.loads(m.group(1))


@pytest.mark.slow
def test_snakemake_report_holds_every_table_figure_and_the_claims_with_captions(workdir, tmp_path):
    # runs after the end-to-end test, on its outputs (before the next test deletes a figure)
    out = workdir / "results/test"
    if not (out / "claims.md").exists():
        pytest.skip("needs the end-to-end run")
    cfg = yaml.safe_load((workdir / "config/test.yaml").read_text())
    reg = expand(cfg)
    archive = tmp_path / "report.zip"
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--configfile", "config/test.yaml",
                           "--report", str(archive)],
                          cwd=workdir, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    with zipfile.ZipFile(archive) as zf:
        names = zf.namelist()
        # the report's own page (the notebook's report.html is stored deeper, under data/raw/)
        page = zf.read(min((n for n in names if n.endswith("/report.html")),
                           key=lambda n: n.count("/"))).decode()
    categories = _report_json(page, "categories")
    tables = {t: [f"results/test/tables/{t}.{ext}" for ext in ("csv", "md")] for t in reg.tables}
    figures = {f: [f"results/test/figures/{f}.{ext}" for ext in ("pdf", "png")]
               for f in reg.figures}
    assert set(categories) == {"Tables", "Figures", "Claims", "Report"}
    assert {t: sorted(v) for t, v in categories["Tables"].items()} == tables  # one subcategory each
    assert {f: sorted(v) for f, v in categories["Figures"].items()} == figures
    assert sorted(f for v in categories["Claims"].values()
                  for f in v) == [f"results/test/claims.{e}" for e in ("csv", "md")]
    results = _report_json(page, "results")
    # the files themselves, beside the page
    stored = {Path(n).name for n in names if "/data/raw/" in n}
    for specs, files in ((reg.tables, tables), (reg.figures, figures)):
        for name, spec in specs.items():
            for f in files[name]:
                assert Path(f).name in stored
                assert html.escape(spec.title, quote=False) in results[f]["caption"], f
    assert ("report.html" in stored
            and "reproduction report" in results["results/test/report/report.html"]["caption"])
    for f in ("claims.csv", "claims.md"):
        assert (f in stored
                and "claims, checked on the runs" in results[f"results/test/{f}"]["caption"])
    # the profile
    assert '<tt class="docutils literal">test</tt>' in _report_json(page, "workflow-desc")


@pytest.mark.slow
def test_deleting_one_figure_reruns_only_its_rule(workdir):
    fig = workdir / "results/test/figures/fig1a.png"
    if not fig.exists():
        pytest.skip("needs the end-to-end run")
    fig.unlink()
    # the target goes before --configfile (which takes several values)
    proc = subprocess.run([sys.executable, "-m", "snakemake", "results/test/figures/fig1a.png",
                           "-n", "--quiet", "rules",
                           "--configfile", "config/test.yaml"], cwd=workdir, capture_output=True,
                          text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = _job_counts(proc.stdout)
    assert counts.get("figure_fig1a") == 1 and counts.get("total") == 1, counts


SPACED_RAW_DIR = "raw dätä dir"  # a space and non-ASCII letters


@pytest.mark.slow
def test_a_raw_dir_with_a_space_reaches_every_job_as_one_argument(tmp_path):
    """The tiny config and an F-MNIST experiment (a download job) with such a raw_dir: each path
    of the download and partition commands is one word, and a partition job runs."""
    wd = copy_workflow(tmp_path / "wf")
    cfg = yaml.safe_load((wd / "config/test.yaml").read_text())
    cfg["raw_dir"] = SPACED_RAW_DIR
    cfg["settings"]["fmnist_b10"] = {"dataset": "fmnist", "partition": "shards", "batch_size": 10,
                                     "local_lr": 0.05, "participation": 0.1, "rounds": 2}
    cfg["experiments"]["fm"] = {"setting": "fmnist_b10", "grid": "tiny", "seeds": [1]}
    (wd / "config/spaced.yaml").write_text(yaml.safe_dump(cfg, allow_unicode=True),
                                           encoding="utf-8")
    snakemake = [sys.executable, "-m", "snakemake", "--cores", "1", "--configfile",
                 "config/spaced.yaml"]

    proc = subprocess.run([*snakemake, "-n", "-p"], cwd=wd, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    commands = [shlex.split(line.removeprefix("Shell command: "))
                for line in proc.stdout.splitlines()
                if line.startswith("Shell command: ") and " fedmgda.workflow_cli " in line]
    kinds = {words[3] for words in commands}
    assert {"download", "partition"} <= kinds, proc.stdout[-3000:]
    for words in commands:
        if "--raw-dir" in words:
            assert words[words.index("--raw-dir") + 1] == SPACED_RAW_DIR, words
        if "--done" in words:
            assert (words[words.index("--done") + 1]
                    == f"{SPACED_RAW_DIR}/fmnist/.fedmgda-download.done")

    target = "results/test/partitions/digits-shards/seed1.npz"
    # the target before --configfile
    proc = subprocess.run([*snakemake[:3], target, *snakemake[3:]],
                          cwd=wd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert (wd / target).is_file()
