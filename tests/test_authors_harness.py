"""scripts/authors_code.py, the one harness around the authors' code (run, lockstep and item-by-item
scripts), on a stand-in of their ``main/`` folder; and scripts/run_authors_fmnist.py's ``compare``,
whose output must stay what it was (its statistics: scripts/paired.py, tests/test_paired.py)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def harness():
    return load("authors_code")


@pytest.fixture(scope="module")
def script():
    return load("run_authors_fmnist")


# ----------------------------------------------------------------- a stand-in of the authors' main/
# their modules' names and the calls the harness relies on: get_dataset draws the partition with
# np.random.choice, the round loop draws its participants with it, LocalUpdate.update_weights
# trains on self.trainloader, LocalUpdate.inference evaluates, CNNMnist with conv2_drop and
# F.dropout
STAND_IN = {
    "options.py": """
import argparse

def args_parser():
    p = argparse.ArgumentParser()
    for name in ("epochs", "seed", "num_users"):
        p.add_argument(f"--{name}", type=int, default=4)
    return p.parse_known_args()[0]
""",
    "utils.py": """
import numpy as np
import torch

class Samples:
    def __init__(self, n):
        self.n, self.targets = n, [i % 2 for i in range(n)]
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        return torch.full((1,), float(i)), self.targets[i]

def get_dataset(args):
    n = 10 * args.num_users
    order = np.random.choice(range(n), n, replace=False)
    groups = {u: order[10 * u: 10 * (u + 1)].tolist() for u in range(args.num_users)}
    return Samples(n), Samples(n), groups
""",
    "models.py": """
import torch.nn.functional as F
from torch import nn

class CNNMnist(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.fc = nn.Linear(1, 2)
        self.conv2_drop = nn.Dropout(0.5)
    def forward(self, x):
        x = F.dropout(self.conv2_drop(self.fc(x / 100)), training=self.training)
        return F.log_softmax(x, dim=1)
""",
    "update.py": """
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Subset

class LocalUpdate:
    def __init__(self, args, dataset, idxs, logger):
        self.trainloader = DataLoader(Subset(dataset, list(idxs)[:8]), batch_size=2, shuffle=True)
        self.testloader = DataLoader(Subset(dataset, list(idxs)[8:]), batch_size=2)
    def update_weights(self, model, global_round):
        model.train()
        opt, losses, batches = torch.optim.SGD(model.parameters(), lr=0.1), [], []
        for x, y in self.trainloader:
            batches.append([int(v) for v in x.flatten()])
            opt.zero_grad()
            loss = F.nll_loss(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        with open("trained.txt", "a") as f:
            f.write(f"{global_round} {type(model.conv2_drop).__name__} {batches}\\n")
        return model.state_dict(), sum(losses) / len(losses)
    def inference(self, model):
        model.eval()
        correct = sum(int((model(x).argmax(1) == y).sum()) for x, y in self.testloader)
        return correct / len(self.testloader.dataset), 0.0
""",
    "tensorboardX.py": """
class SummaryWriter:
    def __init__(self, *args, **kwargs):
        open("events.txt", "w").close()
    def add_scalar(self, *args, **kwargs):
        pass
""",
    "tqdm.py": """
def tqdm(iterable, *args, **kwargs):
    return iterable
""",
    "federated_main.py": """
import copy
import numpy as np
import torch
from tensorboardX import SummaryWriter
from tqdm import tqdm
from models import CNNMnist
from options import args_parser
from update import LocalUpdate
from utils import get_dataset

if __name__ == "__main__":
    logger = SummaryWriter("../logs")
    args = args_parser()
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    train_dataset, test_dataset, user_groups = get_dataset(args)
    global_model = CNNMnist(args)
    train_loss = []
    for epoch in tqdm(range(args.epochs)):
        states, losses = [], []
        for idx in np.random.choice(range(args.num_users), 2, replace=False):
            local = LocalUpdate(args, train_dataset, user_groups[idx], logger)
            w, loss = local.update_weights(copy.deepcopy(global_model), epoch)
            states.append(w)
            losses.append(loss)
        global_model.load_state_dict({k: sum(s[k] for s in states) / len(states)
                                      for k in states[0]})
        train_loss.append(sum(losses) / len(losses))
        for idx in range(args.num_users):
            LocalUpdate(args, train_dataset, user_groups[idx], logger).inference(global_model)
""",
}


@pytest.fixture
def stand_in(tmp_path, harness, monkeypatch):
    """A stand-in of the authors' main/ folder, with numpy's label sort taken as theirs (the
    harness checks it first) and the stand-in tensorboardX forgotten afterwards."""
    main = tmp_path / "Fed-MGDA" / "main"
    main.mkdir(parents=True)
    for name, text in STAND_IN.items():
        (main / name).write_text(text.lstrip())
    monkeypatch.setattr(harness, "require_authors_sort", lambda: None)
    threads = torch.get_num_threads()  # record_run runs their code on one thread
    yield main
    sys.modules.pop("tensorboardX", None)
    sys.modules.pop("tqdm", None)
    torch.set_num_threads(threads)


def test_record_run_writes_every_rounds_per_user_accuracies(harness, stand_in, tmp_path):
    """``run``: per-user accuracies of every round and the training loss; ``speed_up`` changes no
    number (``exact`` gives the same files) and leaves out the event files."""
    harness.record_run(stand_in, 3, tmp_path / "fast", ["--epochs=2"])
    # their modules forgotten
    assert not (stand_in / "events.txt").exists() and "utils" not in sys.modules
    # speed_up's writer stays on the module, as in a script's one run
    sys.modules.pop("tensorboardX")
    harness.record_run(stand_in, 3, tmp_path / "exact", ["--epochs=2"], exact=True)
    assert (stand_in / "events.txt").exists()
    accuracies = pd.read_csv(tmp_path / "fast" / "seed3.csv")
    assert (accuracies["round"].tolist() == [1] * 100 + [2] * 100
            and accuracies["user"].tolist() == list(range(100)) * 2)
    assert len(pd.read_csv(tmp_path / "fast" / "seed3_train_loss.csv")) == 2
    for name in ("seed3.csv", "seed3_train_loss.csv"):
        assert (tmp_path / "fast" / name).read_bytes() == (tmp_path / "exact" / name).read_bytes()


def test_authors_rounds_trains_the_given_participants_on_the_given_minibatches(harness, stand_in):
    participants = [[7, 2], [3, 90], [2, 5]]
    positions = [[1, 0], [2, 3, 4], [7, 6, 5]]
    choice = np.random.choice
    models, accuracies = harness.authors_rounds(stand_in, participants,
                                                lambda t, user: positions, seed=5,
                                                dropout=False, dtype=torch.float64)
    assert np.random.choice is choice  # restored
    assert len(models) == 3 and all(w.dtype == torch.float64 and w.shape == (4,) for w in models)
    assert not torch.equal(models[0], models[1]) and accuracies.shape == (100,)
    np.random.seed(5)  # the stand-in's partition, as their code draws it after their seed
    order = np.random.choice(range(1000), 1000, replace=False)
    lines = (stand_in / "trained.txt").read_text().splitlines()
    expected = [f"{t} Identity {[[int(order[10 * u + p]) for p in batch] for batch in positions]}"
                for t, users in enumerate(participants) for u in users]
    # the participants in order, each on the given minibatches, dropout off
    assert lines == expected

    (stand_in / "trained.txt").unlink()
    again, _ = harness.authors_rounds(stand_in, participants,
                                      lambda t, user: positions, seed=5, dropout=True)
    assert "Dropout" in (stand_in / "trained.txt").read_text() and again[0].dtype == torch.float32


def test_authors_rounds_from_a_later_round_run_those_rounds_only(harness, stand_in):
    """``start``: their loop begins at that round (its index as their code reads it) from their
    initial model, with the given participants; their rule's flags are passed on."""
    participants = [[4, 1], [0, 9]]
    models, _ = harness.authors_rounds(stand_in, participants, lambda t, user: [[0, 1]], seed=5,
                                       dropout=False, dtype=torch.float64,
                                       flags=["--epsilon=1"], start=98)
    assert len(models) == 2
    rounds = [line.split()[0] for line in (stand_in / "trained.txt").read_text().splitlines()]
    assert rounds == ["98", "98", "99", "99"]


def test_authors_rounds_fed_takes_their_arguments_and_a_further_patch(harness, stand_in):
    """``authors_rounds_fed``: their script with the arguments given, the model class named, the
    samples transformed at each access, users 0-2 evaluated after the last round, and a patch of
    their ``update`` module applied after the harness's own."""
    participants = [[7, 2], [3, 90]]
    fed = harness.FedFromOutside(participants, lambda t, user: [[0, 1]], dropout=False,
                                 dtype=torch.float64, model="CNNMnist", once=False, evaluated=3)
    patched = []
    fed = harness.authors_rounds_fed(stand_in, fed, ["--seed=5", "--num_users=100"],
                                     also=patched.append)
    assert [module.__name__ for module in patched] == ["update"]
    assert len(fed.global_models) == 2 and fed.global_models[0].dtype == torch.float64
    assert len(fed.accuracies) == 3 and sorted(fed.groups) == list(range(100))
    lines = (stand_in / "trained.txt").read_text().splitlines()
    assert len(lines) == 4 and all(" Identity " in line for line in lines)


def test_authors_client_gives_every_users_local_update(harness, stand_in):
    clients, cnn = harness.authors_client(stand_in, 1)
    assert sorted(clients) == list(range(100)) and len(clients[0].trainloader.dataset) == 8
    assert isinstance(cnn(), torch.nn.Module)


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
    assert ([(x.tolist(), y) for x, y in (once[0], once[1], once[1])]
            == [([0.0] * 3, 3), ([1.0] * 3, 1), ([1.0] * 3, 1)])
    assert source.calls == 2 and once.targets == [3, 1]
    cast = harness.Cast(once, torch.float64)
    assert len(cast) == 2 and cast.targets == [3, 1]


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


def test_the_scripts_use_the_one_harness():
    """No script beside the harness imports the authors' modules or runs their code itself."""
    for name in ("run_authors_fmnist", "lockstep_authors_fmnist", "compare_authors_fmnist",
                 "lockstep_authors_cifar"):
        text = (SCRIPTS / f"{name}.py").read_text()
        assert "from authors_code import" in text or "import authors_code" in text, name
        assert ("import runpy" not in text and "os.chdir" not in text
                and "def require_authors_sort" not in text), name


# ----------------------------------------------------------------- compare: the published
# comparison
def per_user(accuracy_of_round, rounds=range(101, 201)) -> pd.DataFrame:
    rows = [(r, u, accuracy_of_round(r, u)) for r in rounds for u in range(4)]
    return pd.DataFrame(rows, columns=["round", "user", "accuracy"])


def test_compare_pairs_seeds_and_states_the_interval(script, tmp_path, capsys):
    authors, package = tmp_path / "authors", tmp_path / "package"
    authors.mkdir()
    wobble = lambda r: 0.01 * np.sin(r)  # noqa: E731  (a per-round swing shared by both codes)
    for seed, gap in ((1, 0.02), (5000, 0.04), (6000, 0.03)):
        per_user(lambda r, u: 0.7 + wobble(r)).to_csv(authors / f"seed{seed}.csv", index=False)
        (package / f"seed{seed}").mkdir(parents=True)
        per_user(lambda r, u,
                 g=gap: 0.7 - g + wobble(r)).to_csv(package / f"seed{seed}" / "per_user.csv",
                                                    index=False)
    # no package run: skipped
    per_user(lambda r, u: 0.5).to_csv(authors / "seed9000.csv", index=False)
    markdown = tmp_path / "paired.md"
    script.compare(authors, package, 101, 200, markdown)
    out = capsys.readouterr().out
    assert "seed9000: no package run" in out
    # differences -2, -4, -3 points: mean -3, sd 1, t(0.975, 2) = 4.303 -> half-width 2.48
    assert "package - authors = -3.00 pp" in out and "[-5.48, -0.52]" in out
    assert "the interval excludes 0: the package is below the authors' code" in out
    text = markdown.read_text()
    assert "-3.00 pp" in text and "scripts/run_authors_fmnist.py compare" in text
    with pytest.raises(SystemExit, match="no seed has both codes' results"):
        script.compare(authors, tmp_path / "none", 101, 200)


def synthetic_runs(root: Path) -> None:
    """Four authors' runs (seed 4: no package run) and three package runs, per-user accuracies of
    4 users in rounds 90-200 (the package's seed 3 misses every 7th round), losses for seeds 1 and
    2."""
    rng = np.random.default_rng(44)
    authors, package = root / "authors", root / "package"
    authors.mkdir()
    for seed in (1, 2, 3, 4):
        base = 0.7 + 0.01 * seed
        rounds = np.arange(90, 201)
        rows = [(r, u, round(float(base + 0.05 * np.sin(r / 5) + rng.normal(0, 0.02)), 4))
                for r in rounds for u in range(4)]
        pd.DataFrame(rows,
                     columns=["round", "user",
                              "accuracy"]).to_csv(authors / f"seed{seed}.csv", index=False)
        if seed == 4:
            continue
        kept = rounds[rounds % 7 != 0] if seed == 3 else rounds
        rows = [(r, u,
                 round(float(base - 0.004 * seed + 0.05 * np.sin(r / 5) + rng.normal(0, 0.02)), 4),
                 60)
                for r in kept for u in range(4)]
        (package / f"seed{seed}").mkdir(parents=True)
        pd.DataFrame(rows,
                     columns=["round", "user", "accuracy",
                              "n_test"]).to_csv(package / f"seed{seed}" / "per_user.csv",
                                                index=False)
        if seed < 3:
            loss = [round(float(0.3 + 0.1 * np.exp(-r / 50) + rng.normal(0, 0.01)), 5)
                    for r in range(1, 201)]
            pd.DataFrame({"round": range(1, 201),
                          "train_loss": loss}).to_csv(authors / f"seed{seed}_train_loss.csv",
                                                      index=False)
            loss = [round(v + float(rng.normal(0, 0.005)), 5) for v in loss]
            pd.DataFrame({"round": range(1, 201),
                          "train_loss": loss}).to_csv(package / f"seed{seed}" / "metrics.csv",
                                                      index=False)


# what the script wrote when it computed its statistics itself (now scripts/paired.py's), on
# synthetic_runs
BEFORE_STDOUT = """\
seed4: no package run at package/seed4/per_user.csv; skipped
 seed  rounds authors se_authors package se_package  diff se_diff authors_loss package_loss\
 diff_loss
    1 100/100   71.36       1.67   71.01       1.84 -0.35    2.48        0.306        0.306\
     0.000
    2 100/100   72.21       1.74   71.56       1.92 -0.65    2.59        0.307        0.306\
    -0.001
    3  100/86   73.32       1.65   72.17       1.75 -1.15    2.41          nan          nan\
       nan
Rounds 101-200, 3 seeds: package - authors = -0.72 pp, 95 % interval from the seeds' spread\
 [-1.72, +0.29] \
(the interval contains 0); from the runs' own window standard errors [-3.54, +2.11].
"""
BEFORE_MARKDOWN = """\
# The package beside the authors' code: FedAvg on F-MNIST, every round evaluated

Mean user test accuracy (%) averaged over rounds 101-200 per run; `se_*`: the window mean's\
 standard error \
from the run's own rounds (lag-1 autocorrelation included); `diff` = package - authors, paired by\
 seed (the \
same partition and initial model; the random streams differ); losses: the participants' mean\
 minibatch loss \
over the same rounds.

|   seed | rounds   |   authors |   se_authors |   package |   se_package |   diff |   se_diff |\
   authors_loss |   package_loss |   diff_loss |
|-------:|:---------|----------:|-------------:|----------:|-------------:|-------:|----------:|\
---------------:|---------------:|------------:|
|      1 | 100/100  |     71.36 |         1.67 |     71.01 |         1.84 |  -0.35 |      2.48 |\
          0.306 |          0.306 |       0     |
|      2 | 100/100  |     72.21 |         1.74 |     71.56 |         1.92 |  -0.65 |      2.59 |\
          0.307 |          0.306 |      -0.001 |
|      3 | 100/86   |     73.32 |         1.65 |     72.17 |         1.75 |  -1.15 |      2.41 |\
        nan     |        nan     |     nan     |

Rounds 101-200, 3 seeds: package - authors = -0.72 pp, 95 % interval from the seeds' spread\
 [-1.72, +0.29] \
(the interval contains 0); from the runs' own window standard errors [-3.54, +2.11].

Made by `python scripts/run_authors_fmnist.py compare --authors-runs authors --package-runs\
 package --first 101 \
--last 200 --markdown paired.md`.
"""
BEFORE_NARROW = """\
|   seed | rounds   |   authors |   se_authors |   package |   se_package |   diff |   se_diff |\
   authors_loss |   package_loss |   diff_loss |
|-------:|:---------|----------:|-------------:|----------:|-------------:|-------:|----------:|\
---------------:|---------------:|------------:|
|      1 | 41/41    |     70.45 |         2    |     70.14 |         2.37 |  -0.31 |      3.1  |\
          0.303 |          0.304 |       0.001 |
|      2 | 41/41    |     71.26 |         2.38 |     70.59 |         2.48 |  -0.67 |      3.43 |\
          0.304 |          0.303 |      -0.001 |
|      3 | 41/35    |     72.56 |         2.13 |     71.21 |         2.44 |  -1.35 |      3.24 |\
        nan     |        nan     |     nan     |

Rounds 150-190, 3 seeds: package - authors = -0.78 pp, 95 % interval from the seeds' spread\
 [-2.08, +0.53] \
(the interval contains 0); from the runs' own window standard errors [-4.47, +2.91].
"""


def test_compare_writes_what_it_wrote_before_its_statistics_moved(tmp_path):
    """``compare`` end to end on synthetic run folders (a seed without a package run, one with
    rounds missing, seeds without losses): stdout and markdown byte for byte as before."""
    synthetic_runs(tmp_path)

    def compare(first: int, last: int, markdown: str) -> str:
        return subprocess.run([sys.executable, str(SCRIPTS / "run_authors_fmnist.py"), "compare",
                               "--authors-runs", "authors",
                               "--package-runs", "package", "--first", str(first), "--last",
                               str(last), "--markdown", markdown],
                              cwd=tmp_path, capture_output=True, text=True, check=True).stdout

    assert compare(101, 200, "paired.md") == BEFORE_STDOUT
    assert (tmp_path / "paired.md").read_text() == BEFORE_MARKDOWN
    compare(150, 190, "narrow.md")
    assert BEFORE_NARROW in (tmp_path / "narrow.md").read_text()
