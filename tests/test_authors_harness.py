"""scripts/run_authors_fmnist.py: the paired comparison of the authors' per-user accuracies with the package's."""

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "run_authors_fmnist.py"
WINDOW = range(101, 201)


@pytest.fixture(scope="module")
def harness():
    spec = importlib.util.spec_from_file_location("run_authors_fmnist", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def per_user(accuracy_of_round, rounds=WINDOW) -> pd.DataFrame:
    rows = [(r, u, accuracy_of_round(r, u)) for r in rounds for u in range(4)]
    return pd.DataFrame(rows, columns=["round", "user", "accuracy"])


def write_pair(authors: Path, package: Path, seed: int, theirs, ours) -> None:
    authors.mkdir(exist_ok=True)
    per_user(theirs).to_csv(authors / f"seed{seed}.csv", index=False)
    (package / f"seed{seed}").mkdir(parents=True)
    per_user(ours).assign(n_test=60).to_csv(package / f"seed{seed}" / "per_user.csv", index=False)


def test_mean_accuracy_reads_only_the_window(harness):
    table = per_user(lambda r, u: 1.0 if r in (151, 191) else 0.0, rounds=(141, 151, 161, 171, 181, 191, 200))
    assert harness.mean_accuracy(table, 191, 191) == pytest.approx(100.0)
    assert harness.mean_accuracy(table, 151, 191) == pytest.approx(100 * 2 / 5)  # 151..191: 5 stored rounds


def test_window_standard_error_widens_with_autocorrelation(harness):
    rng = np.random.default_rng(0)
    white = pd.Series(rng.normal(size=2000))
    assert harness.window_standard_error(white) == pytest.approx(1 / np.sqrt(2000), rel=0.1)
    ar = np.zeros(2000)  # AR(1) with r = 0.6: the mean's standard error is sqrt(1.6 / 0.4) = 2 times the naive one
    for t in range(1, 2000):
        ar[t] = 0.6 * ar[t - 1] + rng.normal()
    naive = ar.std(ddof=1) / np.sqrt(2000)
    assert harness.window_standard_error(pd.Series(ar)) == pytest.approx(2 * naive, rel=0.15)


def test_compare_pairs_seeds_and_states_the_interval(harness, tmp_path, capsys):
    authors, package = tmp_path / "authors", tmp_path / "package"
    wobble = lambda r: 0.01 * np.sin(r)  # noqa: E731  (a per-round swing shared by both codes)
    for seed, gap in ((1, 0.02), (5000, 0.04), (6000, 0.03)):
        write_pair(authors, package, seed, lambda r, u: 0.7 + wobble(r), lambda r, u, g=gap: 0.7 - g + wobble(r))
    per_user(lambda r, u: 0.5).to_csv(authors / "seed9000.csv", index=False)  # no package run: skipped
    markdown = tmp_path / "paired.md"
    harness.compare(authors, package, 101, 200, markdown)
    out = capsys.readouterr().out
    assert "seed9000: no package run" in out
    # differences -2, -4, -3 points: mean -3, sd 1, t(0.975, 2) = 4.303 -> half-width 2.48
    assert "package - authors = -3.00 pp" in out and "[-5.48, -0.52]" in out
    assert "the interval excludes 0: the package is below the authors' code" in out
    text = markdown.read_text()
    assert "-3.00 pp" in text and "scripts/run_authors_fmnist.py compare" in text


def test_compare_adds_the_training_loss_over_the_window(harness, tmp_path, capsys):
    authors, package = tmp_path / "authors", tmp_path / "package"
    write_pair(authors, package, 1, lambda r, u: 0.7, lambda r, u: 0.7)
    # the authors' loss is 0.5 in rounds 1-100 (outside the window) and 0.3 after; the package's 0.28
    harness.write_train_loss([0.5] * 100 + [0.3] * 100, authors / "seed1_train_loss.csv")
    pd.DataFrame({"round": range(1, 201), "train_loss": 0.28}).to_csv(package / "seed1" / "metrics.csv", index=False)
    table = harness.paired_rows(authors, package, 101, 200)
    assert table.loc[0, "authors_loss"] == pytest.approx(0.3) and table.loc[0, "diff_loss"] == pytest.approx(-0.02)
    assert table.loc[0, "rounds"] == "100/100"


def test_transformed_dataset_gives_the_same_samples(harness):
    class Counting:
        targets = [3, 1]

        def __init__(self):
            self.calls = 0

        def __len__(self):
            return 2

        def __getitem__(self, i):
            self.calls += 1
            return np.full(3, float(i)), self.targets[i]

    source = Counting()
    once = harness.Transformed(source)
    assert [(x.tolist(), y) for x, y in (once[0], once[1], once[1])] == [([0.0] * 3, 3), ([1.0] * 3, 1), ([1.0] * 3, 1)]
    assert source.calls == 2 and once.targets == [3, 1]


def test_the_authors_code_runs_only_where_numpy_sorts_as_theirs_did(harness, monkeypatch):
    """Their sampling.py builds the shards with numpy's default argsort: on a numpy that leaves
    equal labels in another order than numpy 1.17 the harness stops and names the switch."""
    from fedmgda.data.legacy_sort import numpy_1_17_argsort

    def another_machines_order(keys, *args, **kwargs):  # sorted, each class in descending id order
        return np.lexsort((-np.arange(len(keys)), np.asarray(keys)))

    monkeypatch.setattr(np, "argsort", another_machines_order)
    with pytest.raises(SystemExit, match="NPY_DISABLE_CPU_FEATURES"):
        harness.require_authors_sort()
    with pytest.raises(SystemExit), harness.authors_modules(Path("/nonexistent")):
        pass
    monkeypatch.setattr(np, "argsort", lambda keys, *a, **k: numpy_1_17_argsort(keys))
    harness.require_authors_sort()
