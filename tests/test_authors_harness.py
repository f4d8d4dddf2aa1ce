"""scripts/run_authors_fmnist.py: the comparison of the authors' per-user accuracies with the package's."""

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "run_authors_fmnist.py"


@pytest.fixture(scope="module")
def harness():
    spec = importlib.util.spec_from_file_location("run_authors_fmnist", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def per_user(accuracy_of_round) -> pd.DataFrame:
    rows = [(r, u, accuracy_of_round(r, u)) for r in (1, 141, 151, 161, 171, 181, 191, 200) for u in range(4)]
    return pd.DataFrame(rows, columns=["round", "user", "accuracy"])


def test_mean_accuracy_reads_only_the_window(harness):
    table = per_user(lambda r, u: 1.0 if r in (151, 191) else 0.0)
    assert harness.mean_accuracy(table, 191, 191) == pytest.approx(100.0)
    assert harness.mean_accuracy(table, 151, 191) == pytest.approx(100 * 2 / 5)  # 151..191: 5 stored rounds


def test_compare_pairs_seeds_and_prints_differences(harness, tmp_path, capsys):
    authors, package = tmp_path / "authors", tmp_path / "package"
    authors.mkdir()
    for seed, gap in ((1, 0.02), (5000, 0.04)):
        per_user(lambda r, u: 0.7).to_csv(authors / f"seed{seed}.csv", index=False)
        (package / f"seed{seed}").mkdir(parents=True)
        per_user(lambda r, u, g=gap: 0.7 - g).assign(n_test=60).to_csv(package / f"seed{seed}" / "per_user.csv", index=False)
    per_user(lambda r, u: 0.5).to_csv(authors / "seed6000.csv", index=False)  # no package run: skipped
    harness.compare(authors, package)
    out = capsys.readouterr().out
    assert "seed6000: no package run" in out
    assert "diff@191 -3.00" in out  # mean over seeds of -2 and -4 points


def test_compare_adds_the_training_loss_when_the_authors_run_wrote_it(harness, tmp_path, capsys):
    authors, package = tmp_path / "authors", tmp_path / "package"
    authors.mkdir()
    (package / "seed1").mkdir(parents=True)
    per_user(lambda r, u: 0.7).to_csv(authors / "seed1.csv", index=False)
    per_user(lambda r, u: 0.7).assign(n_test=60).to_csv(package / "seed1" / "per_user.csv", index=False)
    # the authors' loss is 0.5 in rounds 1-100 (outside the window) and 0.3 after; the package's 0.28
    harness.write_train_loss([0.5] * 100 + [0.3] * 100, authors / "seed1_train_loss.csv")
    pd.DataFrame({"round": range(1, 201), "train_loss": 0.28}).to_csv(package / "seed1" / "metrics.csv", index=False)
    harness.compare(authors, package)
    out = capsys.readouterr().out
    assert "authors loss 101-200 0.300" in out and "package loss 101-200 0.280" in out
    assert "diff loss -0.020" in out
