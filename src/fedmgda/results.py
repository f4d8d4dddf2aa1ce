"""A run folder's format: the one home of what a run writes there and of what tables, figures
and claims read from it.

A run folder (``results/<profile>/runs/<run key>/``) holds ``summary.json`` (``status``, the run
config, the statistics known when it trained and the ``environment`` stamp of
``fedmgda.provenance``; written last, its presence marks a finished run), ``per_user.csv`` (every
user's test accuracy and loss at the stored rounds), ``per_user_final.csv`` (the same of the final
model, which is the average of the iterates for AFL) and ``metrics.csv`` (one row per round); a run
assembles them (``run_result``) and writes them (``write_result``), summary.json last with their
manifest (``seal``: each file's sha256 and rows, the config hash). Readers take a folder only
through ``open_run``, which verifies it (complete, unchanged, of its row's config) and reads each
file once (``RunFolder``; ``RunFolders``: a table's folders). Beside them: ``checkpoint.pt``
while the run trains (``fedmgda.checkpoints``), ``train.lock`` while a trainer holds the folder
(``fedmgda.runfolder``, which also writes every file atomically), ``run.yaml`` and ``train.log``
(the workflow's), ``summary.copy.json`` (``restore_summary``). A *source* names one number of a run:

- ``final.<stat>`` / ``protocol.<stat>`` with ``<stat>`` a statistic of
  ``fedmgda.metrics.STATISTICS``: computed here from a stored per-user vector -- the final
  model's, or the last one stored at a round t (0-based) with t % per_user_every == 0 (round
  T-9, the vector the paper's tables were computed from, docs/protocol.md §6.3). A statistic added
  to ``STATISTICS`` is therefore filled in for runs trained before it existed. The one vector
  older runs lack is an averaged final model's (runs trained before ``per_user_final.csv`` was
  written): there the statistics summary.json has are read from it, others are NaN.
- ``final.<other>`` / ``protocol.<other>`` (``test_acc_<set>`` of a global test set, ``round``):
  summary.json.
- ``final_user.<k>`` / ``final_others.<k>``: user k's accuracy, and the mean accuracy of every
  other user, at the last stored round of per_user.csv (e.g. an attacker vs the rest).

Over a row's seeds the statistics are the paper's ±: mean and population std (ddof 0), NaN left
out.

Nothing here imports torch.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from fedmgda.config import config_hash
from fedmgda.errors import RunFolderError
from fedmgda.metrics import STATISTICS, accuracy_stats
from fedmgda.runfolder import writing

if TYPE_CHECKING:
    import torch

SUMMARY = "summary.json"
# summary.json's copy, no rule's output: a failed job's cleanup leaves it (``restore_summary``)
SUMMARY_COPY = "summary.copy.json"
METRICS = "metrics.csv"
PER_USER = "per_user.csv"
PER_USER_FINAL = "per_user_final.csv"
RESULT_FILES = (METRICS, PER_USER, PER_USER_FINAL)
RUN_YAML = "run.yaml"  # the workflow's copy of the run config
MANIFEST = "manifest"  # summary.json's record of what the run wrote (``seal``)
RETRAIN = "delete the folder, the workflow retrains it"
# metrics.csv: the columns of a round's non-finite reports (``fedmgda.screening.Screened.columns``),
# and every column a run has even when it failed in round 1
NONFINITE_COLUMNS = ("nonfinite_updates", "nonfinite_losses", "nonfinite_users", "dropped")
METRICS_COLUMNS = ("round", "eta", "train_loss", *NONFINITE_COLUMNS, "improved_loss",
                   "improved_acc", *STATISTICS)
PER_USER_COLUMNS = ["round", "user", "n_test", "accuracy", "loss"]


# ---------------------------------------------------------------------------------- writing
@dataclass
class RunResult:
    """A run's outputs, as its folder holds them (``write_result``)."""

    metrics: pd.DataFrame
    per_user: pd.DataFrame
    summary: dict[str, Any]
    final_weights: torch.Tensor  # the final model as a flat vector (average iterate for AFL)
    # every user's test accuracy and loss under it (None: diverged)
    final_users: pd.DataFrame | None = None


def run_result(config: dict[str, Any], state, final_weights: torch.Tensor,
               final: tuple[str, dict[str, float], pd.DataFrame] | None,
               **header: Any) -> RunResult:
    """A run's outputs from its progress ``state`` (a ``fedmgda.checkpoints.RunState``): its metrics
    and per-user rows, and summary.json's fields: the run ``config``, its status, what ``header``
    gives (``device``, ``participants_per_round``, ``environment``), and, when ``final`` is given
    (None: the run diverged or failed), the final model (which iterate, in words), its statistics
    and per-user vector, and the statistics of the protocol round (``protocol_stats``)."""
    metrics, per_user = metrics_table(state.rows), per_user_rounds(state.per_user_rows)
    failure = state.failure
    diverged = state.diverged_round is not None or failure is not None
    summary: dict[str, Any] = {
        "config": config,
        "status": "failed" if failure else "diverged" if diverged else "ok",
        "diverged_round": state.diverged_round,
        "diverged_because": state.diverged_because,
        **({"failed_round": failure[0], "error": failure[1]} if failure else {}),
        "rounds_completed": len([r for r in state.rows if state.diverged_round != r["round"]]),
        "runtime_s": round(state.elapsed, 3),
        "device": header["device"],
        "participants_per_round": header["participants_per_round"],
        "final": None,
        "protocol": None,
        "environment": header["environment"],
    }
    final_users = None
    if final is not None:
        summary["final_model"], summary["final"], final_users = final
        summary["protocol"] = protocol_stats(per_user, metrics, config["per_user_every"])
    return RunResult(metrics, per_user, summary, final_weights, final_users)


def metrics_table(rows: list[dict[str, float]]) -> pd.DataFrame:
    """metrics.csv: one row per round, with every column of ``METRICS_COLUMNS`` (NaN where
    absent)."""
    metrics = pd.DataFrame(rows)
    for column in METRICS_COLUMNS:  # a run failed in round 1 has none
        if column not in metrics:
            metrics[column] = np.nan
    return metrics


def per_user_table(test_sizes: np.ndarray, accuracy: np.ndarray, loss: np.ndarray,
                   round_: int | None = None) -> pd.DataFrame:
    """Every user's test size, accuracy and loss under one model: per_user.csv's rows of round
    ``round_`` (1-based), or without it per_user_final.csv."""
    columns = {"user": np.arange(len(test_sizes)), "n_test": test_sizes, "accuracy": accuracy,
               "loss": loss}
    return pd.DataFrame(columns if round_ is None else {"round": round_, **columns})


def per_user_rounds(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """per_user.csv: the per-user tables of the stored rounds, one after another."""
    return (pd.concat(tables, ignore_index=True) if tables
            else pd.DataFrame(columns=PER_USER_COLUMNS))


def protocol_stats(per_user: pd.DataFrame, metrics: pd.DataFrame,
                   per_user_every: int) -> dict[str, float] | None:
    """Statistics of the last stored per-user vector at a round t (0-based) with t % per_user_every
    == 0: the vector the paper's tables were computed from (docs/protocol.md §6.3: round T-9 for T a
    multiple of 10, not the final model)."""
    last = protocol_round(per_user, per_user_every)
    if last is None:
        return None
    vector = per_user[per_user["round"] == last]
    stats: dict[str, float] = {"round": last,
                               **accuracy_stats(vector["accuracy"].to_numpy(),
                                                vector["n_test"].to_numpy())}
    row = metrics[metrics["round"] == last]
    for column in metrics.columns:
        if column.startswith("test_acc_") and not row.empty:
            stats[column] = float(row[column].iloc[0])
    return stats


def write_result(result: RunResult, out: Path, run_yaml: str | None = None) -> None:
    """run.yaml (``run_yaml``, the run config's text, where the folder's differs), metrics.csv,
    per_user.csv, per_user_final.csv (the final model's per-user vector, from which tables compute
    its statistics; a diverged run has none, and an older one is removed), then summary.json with
    the manifest of those files (:func:`seal`; written last: its presence marks completion); each
    written atomically (``fedmgda.runfolder.writing``)."""
    out.mkdir(parents=True, exist_ok=True)
    config_file = out / "run.yaml"
    if run_yaml is not None and not (config_file.is_file()
                                     and config_file.read_text() == run_yaml):
        with writing(config_file) as tmp:
            tmp.write_text(run_yaml)
    tables = {METRICS: result.metrics, PER_USER: result.per_user,
              PER_USER_FINAL: result.final_users}
    for name, table in tables.items():
        if table is None:
            (out / name).unlink(missing_ok=True)
            continue
        with writing(out / name) as tmp:  # a full disk: one line naming the file
            table.to_csv(tmp, index=False)
    result.summary = seal(out, result.summary)  # as written: with its manifest


def seal(out: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """Write ``summary`` as ``out``/summary.json with the folder's manifest (``MANIFEST``): the
    :func:`config_hash` of its ``config`` and, per result file present, its sha256 and row count
    (what :func:`open_run` checks). The one writer of a manifest: called once every result file
    is final (the trainer's last write, or ``fedmgda seal`` on a verified older folder)."""
    files = {}
    for name in RESULT_FILES:
        path = out / name
        if path.is_file():
            data = path.read_bytes()
            files[name] = {"sha256": hashlib.sha256(data).hexdigest(),
                           "rows": len(_parse_csv(path, data))}
    config = config_hash(summary.get("config") or {})
    sealed = {**summary, MANIFEST: {"config_sha256": config, "files": files}}
    text = json.dumps(sealed, indent=2, default=float)
    for name in (SUMMARY_COPY, SUMMARY):  # summary.json last: its presence marks completion
        with writing(out / name) as tmp:
            tmp.write_text(text)
    return sealed


def restore_summary(run_dir: str | Path, config_sha256: str) -> bool:
    """Remake a gone summary.json from its copy (``SUMMARY_COPY``) when that has a manifest and the
    folder passes :func:`open_run` through it, of config ``config_sha256``; False: nothing made."""
    copy = Path(run_dir) / SUMMARY_COPY
    if (copy.parent / SUMMARY).exists() or not copy.is_file():
        return False
    try:
        sealed = MANIFEST in open_run(copy.parent, config_sha256, SUMMARY_COPY).summary
    except RunFolderError:
        return False
    if sealed:
        with writing(copy.parent / SUMMARY) as tmp:
            tmp.write_bytes(copy.read_bytes())
    return sealed


def seal_verified(run_dir: str | Path) -> bool:
    """Give a folder written before the manifest its manifest (``fedmgda seal``), once it passes
    :func:`open_run` and its run.yaml (when present) is its summary's config; False when it has
    one already. A folder that fails is ``RunFolderError``, and left as it is."""
    run_dir = Path(run_dir)
    folder = open_run(run_dir)
    if MANIFEST in folder.summary:
        return False
    run_yaml = _run_yaml_hash(run_dir)
    if run_yaml is not None and run_yaml != config_hash(folder.summary.get("config") or {}):
        raise RunFolderError(f"{run_dir}: its run.yaml is not summary.json's config; {RETRAIN}")
    seal(run_dir, folder.summary)
    return True


# ---------------------------------------------------------------------------------- reading
@dataclass
class RunFolder:
    """A run folder read and verified (:func:`open_run`): its summary and result tables (None: a
    file the folder does not have), each file read once."""

    path: Path
    summary: dict[str, Any]
    metrics: pd.DataFrame | None = None
    per_user: pd.DataFrame | None = None
    per_user_final: pd.DataFrame | None = None

    @property
    def status(self) -> str | None:
        return self.summary.get("status")

    def table(self, name: str) -> pd.DataFrame:
        """A result table the folder must have (``METRICS``, ``PER_USER``); one line naming it
        when absent."""
        tables = {METRICS: self.metrics, PER_USER: self.per_user,
                  PER_USER_FINAL: self.per_user_final}
        table = tables[name]
        if table is None:
            raise RunFolderError(f"{self.path / name}: missing; {RETRAIN}")
        return table


def as_run(run: RunFolder | str | Path) -> RunFolder:
    """``run`` itself, or the folder at that path opened (:func:`open_run`)."""
    return run if isinstance(run, RunFolder) else open_run(run)


class RunFolders:
    """The run folders below ``root``, each read and verified once (:func:`open_run`): what one
    table, figure or claims file reads. The last ``KEEP`` folders opened stay in memory with their
    tables (a run shown in several rows is read once; a table of many runs with thousands of users
    each does not hold them all), every verified folder's summary.json for as long as this lives."""

    KEEP = 16

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self._folders: OrderedDict[tuple[str, str | None], RunFolder] = OrderedDict()
        self._summaries: dict[tuple[str, str | None], dict[str, Any]] = {}

    def open(self, key: str, config_sha256: str | None = None) -> RunFolder:
        opened = (key, config_sha256)
        if opened in self._folders:
            self._folders.move_to_end(opened)
            return self._folders[opened]
        folder = self._folders[opened] = open_run(self.root / key, config_sha256)
        self._summaries[opened] = folder.summary
        if len(self._folders) > self.KEEP:
            self._folders.popitem(last=False)
        return folder

    def summary(self, key: str, config_sha256: str | None = None) -> dict[str, Any]:
        """The summary.json of a verified folder (opened if it is not yet)."""
        if (key, config_sha256) not in self._summaries:
            self.open(key, config_sha256)
        return self._summaries[key, config_sha256]

    def finished(self, key: str) -> bool:
        """Whether the run has its summary.json (a run without it has not finished)."""
        return (self.root / key / SUMMARY).is_file()

    def row(self, row) -> list[RunFolder]:
        """A row's (``fedmgda.specs.Row``) runs in seed order, each checked against the config the
        registry gives it."""
        return [self.open(key, expected) for key, expected in row_runs(row)]


def folders_of(runs: RunFolders | str | Path) -> RunFolders:
    return runs if isinstance(runs, RunFolders) else RunFolders(runs)


def row_runs(row) -> list[tuple[str, str | None]]:
    """A row's run keys with their config hashes (None where the row has none, e.g. a row made by
    hand)."""
    hashes = list(getattr(row, "config_hashes", None) or [])
    return list(zip(row.runs, hashes + [None] * (len(row.runs) - len(hashes))))


def read_summary(run_dir: str | Path, name: str = SUMMARY) -> dict[str, Any]:
    """A run's summary.json (``name``: its copy); an unreadable one is one line naming it."""
    path = Path(run_dir) / name
    try:
        summary = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise RunFolderError(f"{path}: missing (the run has not finished); train it first") \
            from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RunFolderError(f"{path}: unreadable ({_why(err)}); {RETRAIN}") from None
    if not isinstance(summary, dict):
        raise RunFolderError(f"{path}: not a JSON object; {RETRAIN}")
    return summary


def open_run(run_dir: str | Path, config_sha256: str | None = None,
             summary_name: str = SUMMARY) -> RunFolder:
    """A run folder, read and verified: the one check every reader (tables, figures, claims, the
    report, the runs index) makes before it uses a folder. A folder that fails raises
    ``RunFolderError``, one line naming the folder or file and what differs.

    - ``config_sha256`` (the registry's :func:`config_hash` of the run; None: not checked): the
      config the folder was trained with (its manifest's, else its run.yaml's, else its summary's)
      must be that one.
    - Every result file must hold the rows of its run (:func:`_check_rows`): per_user.csv every
      user at every stored round, per_user_final.csv every user, metrics.csv every round.
    - A folder with a manifest (summary.json's ``manifest``, :func:`seal`): every file it names
      has its sha256 and its row count, and run.yaml (when present) the manifest's config. A folder
      written before the manifest (the committed result archives) is checked by the other rules
      alone; ``fedmgda seal DIR`` gives a verified one its manifest.

    ``summary_name``: the folder read through its summary's copy (:func:`restore_summary`)."""
    run_dir = Path(run_dir)
    summary = read_summary(run_dir, summary_name)
    manifest = summary.get(MANIFEST)
    if manifest is not None and not (isinstance(manifest, dict)
                                     and isinstance(manifest.get("files"), dict)):
        raise RunFolderError(f"{run_dir / SUMMARY}: its manifest is not as fedmgda writes it; "
                             f"{RETRAIN}")
    listed = (manifest or {}).get("files", {})
    data: dict[str, bytes] = {}
    tables: dict[str, pd.DataFrame] = {}
    for name in RESULT_FILES:
        path = run_dir / name
        if not path.is_file():
            if name in listed:
                raise RunFolderError(f"{path}: missing, the run wrote it; {RETRAIN}")
            continue
        try:
            data[name] = path.read_bytes()
        except OSError as err:
            raise RunFolderError(f"{path}: unreadable ({_why(err)}); {RETRAIN}") from None
        tables[name] = _parse_csv(path, data[name])
    folder = RunFolder(run_dir, summary, tables.get(METRICS), tables.get(PER_USER),
                       tables.get(PER_USER_FINAL))
    _check_config(folder, manifest, config_sha256)
    _check_rows(folder)
    for name, entry in listed.items():
        if name not in data:
            raise RunFolderError(f"{run_dir / SUMMARY}: its manifest names {name!r}, which a run "
                                 f"does not write; {RETRAIN}")
        rows = len(tables[name])
        if rows != entry.get("rows"):
            raise RunFolderError(f"{run_dir}: {name} has {rows} rows, the run wrote "
                                 f"{entry.get('rows')}; {RETRAIN}")
        if hashlib.sha256(data[name]).hexdigest() != entry.get("sha256"):
            raise RunFolderError(f"{run_dir}: {name} is not the file the run wrote (its sha256 "
                                 f"differs from summary.json's manifest); {RETRAIN}")
    return folder


def _why(err: Exception) -> str:
    if isinstance(err, json.JSONDecodeError):
        return f"truncated or not JSON: {err.msg} at line {err.lineno}"
    if isinstance(err, OSError):
        return str(err.strerror or err)
    return " ".join(str(err).split())


def _parse_csv(path: Path, data: bytes) -> pd.DataFrame:
    try:
        table = pd.read_csv(io.BytesIO(data))  # pandas reads back the floats it wrote bit for bit
    except (ValueError, UnicodeDecodeError) as err:  # pandas' ParserError, EmptyDataError
        raise RunFolderError(f"{path}: unreadable CSV ({_why(err)}); {RETRAIN}") from None
    needed = {METRICS: ("round",), PER_USER: ("round", "user", "n_test", "accuracy"),
              PER_USER_FINAL: ("user", "n_test", "accuracy")}[path.name]
    missing = [c for c in needed if c not in table.columns]
    if missing:
        raise RunFolderError(f"{path}: no column {', '.join(missing)}; {RETRAIN}")
    return table


def _check_config(folder: RunFolder, manifest: dict[str, Any] | None, expected: str | None) -> None:
    """The folder's config against the registry's (``expected``) and its run.yaml against its
    manifest (:func:`open_run`)."""
    run_dir = folder.path
    run_yaml = _run_yaml_hash(run_dir)
    if manifest is not None:
        trained = manifest.get("config_sha256")
        if run_yaml is not None and run_yaml != trained:
            raise RunFolderError(f"{run_dir}: its run.yaml is not the config the run was trained "
                                 f"with (summary.json's manifest); {RETRAIN}")
        where = "summary.json's manifest"
    elif run_yaml is not None:
        trained, where = run_yaml, "run.yaml"
    elif folder.summary.get("config"):
        trained, where = config_hash(folder.summary["config"]), "summary.json"
    else:
        return  # a folder that names no config: nothing to compare
    if expected is not None and trained != expected:
        raise RunFolderError(f"{run_dir}: trained with another run config than its run key's in "
                             f"the registry (config sha256 {trained[:12]} in {where}, the "
                             f"registry's {expected[:12]}); {RETRAIN}")


def _run_yaml_hash(run_dir: Path) -> str | None:
    """:func:`config_hash` of the folder's run.yaml; None without one."""
    import yaml

    path = run_dir / RUN_YAML
    if not path.is_file():
        return None
    try:
        config = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise RunFolderError(f"{path}: unreadable ({_why(err)}); {RETRAIN}") from None
    if not isinstance(config, dict):
        raise RunFolderError(f"{path}: not a run config (a mapping); {RETRAIN}")
    return config_hash(config)


def _check_rows(folder: RunFolder) -> None:
    """Every result file holds the rows of its run: per_user.csv the same users at every round it
    stores and per_user_final.csv all of them; where summary.json's config gives ``rounds`` and
    ``per_user_every``, per_user.csv the rounds a run stores (every t with t % per_user_every == 0
    and the last, 0-based, up to where it stopped) and metrics.csv a row per round it ran."""
    run_dir, summary = folder.path, folder.summary
    per_user, final = folder.per_user, folder.per_user_final
    counts = per_user.groupby("round").size() if per_user is not None else pd.Series(dtype=int)
    users = max(int(counts.max()) if len(counts) else 0, len(final) if final is not None else 0)
    if final is not None and len(final) < users:
        raise RunFolderError(f"{run_dir}: {PER_USER_FINAL} has {len(final)} rows, the run has "
                             f"{users} users; {RETRAIN}")
    short = counts[counts < users]
    if len(short):
        raise RunFolderError(f"{run_dir}: {PER_USER} has {int(short.iloc[0])} rows at round "
                             f"{short.index[0]}, the run has {users} users; {RETRAIN}")
    config = summary.get("config") or {}
    rounds, every = config.get("rounds"), config.get("per_user_every")
    if not (isinstance(rounds, int) and isinstance(every, int) and every > 0):
        return
    ran = rounds if summary.get("status") == "ok" else summary.get("rounds_completed")
    if not isinstance(ran, int):
        return
    if per_user is not None:
        expected = [t + 1 for t in range(ran) if t % every == 0 or t == rounds - 1]
        stored = {int(r) for r in counts.index}
        missing = [r for r in expected if r not in stored]
        extra = sorted(stored - set(expected))
        what = [f"round(s) {_some(missing)} missing"] if missing else []
        what += [f"round(s) {_some(extra)} it does not store"] if extra else []
        if what:
            raise RunFolderError(f"{run_dir}: {PER_USER} has {len(per_user)} rows, the run has "
                                 f"{users} users x {len(expected)} stored rounds "
                                 f"({', '.join(what)}); {RETRAIN}")
    if folder.metrics is not None:
        diverged = summary.get("status") != "ok" and summary.get("diverged_round") is not None
        expected_rows = ran + int(diverged)  # a diverged run's metrics.csv has that round's row
        if len(folder.metrics) != expected_rows:
            raise RunFolderError(f"{run_dir}: {METRICS} has {len(folder.metrics)} rows, the run "
                                 f"has {expected_rows} rounds; {RETRAIN}")


def _some(rounds: list[int]) -> str:
    return ", ".join(map(str, rounds[:3])) + (f" ... ({len(rounds)})" if len(rounds) > 3 else "")


def summary_value(summary: dict[str, Any], source: str) -> float:
    """``final.mean_acc`` -> summary["final"]["mean_acc"]; NaN when absent."""
    section, _, stat = source.partition(".")
    value = (summary.get(section) or {}).get(stat)
    if value is None:
        return math.nan
    return float(value)


def run_value(run: RunFolder | str | Path, source: str) -> float:
    """A source of one run (see the module docstring); NaN when the run lacks it."""
    run = as_run(run)
    section, _, arg = source.partition(".")
    if section in ("final_user", "final_others"):
        users = run.table(PER_USER)
        last = users[users["round"] == users["round"].max()]
        k = int(arg)
        pick = last[last["user"] == k] if section == "final_user" else last[last["user"] != k]
        return float(pick["accuracy"].mean()) if len(pick) else math.nan
    if arg in STATISTICS and section in ("final", "protocol"):
        vector = final_vector(run) if section == "final" else protocol_vector(run)[0]
        if vector is not None:
            return float(STATISTICS[arg].compute(vector["accuracy"].to_numpy(dtype=np.float64),
                                                 vector["n_test"].to_numpy(dtype=np.float64)))
    return summary_value(run.summary, source)


def final_vector(run: RunFolder | str | Path) -> pd.DataFrame | None:
    """Every user's test accuracy and size under the run's final model: ``per_user_final.csv``; in
    a run trained before that file, the last round of per_user.csv when the final model is the
    last iterate; None when the final model is an average whose vector was not stored."""
    run = as_run(run)
    if run.per_user_final is not None:
        return run.per_user_final
    if run.summary.get("final_model") != "last iterate":
        return None
    users = run.table(PER_USER)
    return users[users["round"] == users["round"].max()]


def protocol_vector(run: RunFolder | str | Path) -> tuple[pd.DataFrame | None, int | None]:
    """The per-user vector the paper's tables were computed from and its round (1-based, as
    per_user.csv counts): the last stored at a round t (0-based) with t % per_user_every == 0
    (the run config's; older summaries without it name the round in ``protocol.round``)."""
    run = as_run(run)
    users = run.table(PER_USER)
    every = (run.summary.get("config") or {}).get("per_user_every")
    if every:
        rnd = protocol_round(users, int(every))
    else:
        rnd = (run.summary.get("protocol") or {}).get("round")
    if rnd is None or rnd not in set(users["round"]):
        return None, None
    return users[users["round"] == rnd], int(rnd)


def protocol_round(per_user: pd.DataFrame, per_user_every: int) -> int | None:
    """The last round of ``per_user`` (1-based) stored at a round t (0-based) with
    t % per_user_every == 0; None when there is none."""
    stored = per_user[(per_user["round"] - 1) % per_user_every == 0]
    return int(stored["round"].max()) if len(stored) else None


def seed_stats(values) -> tuple[float, float]:
    """Mean and population std (ddof 0) over seeds, as the paper's ± (docs/protocol.md §6.3);
    NaN values are left out, (NaN, NaN) when none is left."""
    arr = np.asarray([v for v in values if not math.isnan(v)], dtype=float)
    if len(arr) == 0:
        return math.nan, math.nan
    return float(arr.mean()), float(arr.std(ddof=0))


def metrics_value(run: RunFolder | str | Path, column: str, window: dict[str, int] | None = None,
                  agg: str = "mean") -> float:
    """A metrics.csv column of one run aggregated (``agg``: mean | min | max | last) over the rounds
    of ``window`` (``{last: N}``, ``{first: N}``; all rounds when empty); NaN when the column is
    absent or has no value there."""
    df = as_run(run).table(METRICS)
    if column not in df.columns:
        return math.nan
    s = df.sort_values("round").set_index("round")[column].astype(float).dropna()
    window = window or {}
    if "last" in window:
        s = s[s.index > s.index.max() - int(window["last"])] if len(s) else s
    elif "first" in window:
        s = s[s.index <= s.index.min() + int(window["first"]) - 1] if len(s) else s
    if not len(s):
        return math.nan
    return float(s.iloc[-1]) if agg == "last" else float(getattr(s, agg)())


def protocol_user_accuracies(run: RunFolder | str | Path) -> tuple[np.ndarray, int]:
    """Per-user accuracies (%) at the protocol round of one run (``protocol_vector``; the last
    stored round when there is none)."""
    run = as_run(run)
    vector, rnd = protocol_vector(run)
    if vector is None:
        users = run.table(PER_USER)
        rnd = int(users["round"].max())
        vector = users[users["round"] == rnd]
    return vector["accuracy"].to_numpy(dtype=float) * 100.0, int(rnd)
