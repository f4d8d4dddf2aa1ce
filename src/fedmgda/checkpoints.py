"""A run's checkpoint file (``checkpoint.pt`` in its run folder): written, read back as data only,
resumed from.

A run's progress is a ``RunState``; a checkpoint (``save``) holds the part of it a resumed run
needs, with the run config, the algorithm's state, the clients' states and the environment stamp:
tensors, numbers, strings and lists / dicts of them; a per-user table is kept as one tensor per
column (``frame_columns``). It is read (``load``, ``resume``) with
``torch.load(weights_only=True)``, whose unpickler builds nothing else, so a crafted file cannot run
code when a run resumes. A file that cannot be read as a checkpoint (empty, truncated, random bytes,
another torch file, other objects) is refused with one line naming it, what is wrong and how to
start afresh (``UnusableCheckpoint``, a ``RunFolderError``): a run never silently restarts or
resumes into something else. Only by the explicit option ``--fresh-if-unreadable`` (``FRESH_ENV``
under Snakemake) is such a file set aside (``set_aside``) and the run restarted from round 0, which
its log says.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from fedmgda import provenance
from fedmgda.errors import RunFolderError
from fedmgda.runfolder import FRESH_ENV, FRESH_OPTION, writing

CHECKPOINT = "checkpoint.pt"  # its name in the run folder

# what a checkpoint holds, and the type of each entry
FIELDS: dict[str, type | tuple[type, ...]] = {
    "config": dict, "next_round": int, "w": torch.Tensor, "iterate_sum": torch.Tensor,
    "algorithm": dict,
    "client_states": dict, "rows": list, "per_user_rows": list, "elapsed": (int, float),
}


@dataclass
class RunState:
    """A run's progress: the rounds done, the global model and the outputs so far. A checkpoint
    keeps what a resumed run needs (``save``); the rest is rebuilt from the config."""

    next_round: int = 0
    w: torch.Tensor | None = None
    iterate_sum: torch.Tensor | None = None
    rows: list[dict[str, float]] = field(default_factory=list)
    per_user_rows: list[pd.DataFrame] = field(default_factory=list)
    elapsed: float = 0.0
    diverged_round: int | None = None
    failure: tuple[int, str] | None = None  # (round, message) of a hook that broke its contract
    diverged_because: str | None = None  # why: weights or test loss not finite, or no finite report
    made_under: dict[str, Any] | None = None  # the environment stamp of the checkpoint resumed from


@dataclass
class Resumed:
    """What a checkpoint gives back to its run: its progress, its algorithm's and clients'
    states."""

    state: RunState
    algorithm: dict[str, Any]
    client_states: dict[int, Any]


def save(out: Path, state: RunState, config: dict, algorithm: dict, client_states: dict,
         environment: dict) -> None:
    """Write the checkpoint of a run of ``config`` (``RunConfig.to_dict``) into its folder ``out``:
    ``state``'s rounds, models and outputs, the algorithm's ``state_dict``, the clients' states."""
    out.mkdir(parents=True, exist_ok=True)
    payload = {
        "config": config,
        "next_round": state.next_round,
        "w": state.w.cpu(),
        "iterate_sum": state.iterate_sum.cpu(),
        "algorithm": algorithm,
        "client_states": client_states,
        "rows": state.rows,
        "per_user_rows": [frame_columns(table) for table in state.per_user_rows],
        "elapsed": state.elapsed,
        "environment": environment,
    }
    # atomic: a kill leaves the previous checkpoint intact
    with writing(out / CHECKPOINT) as tmp, open(tmp, "wb") as file:
        # to a Python file: a full disk is an OSError (torch's own writer says "iostream error")
        torch.save(payload, file)


def load(path: Path, device: torch.device, config: dict, num_params: int) -> Resumed:
    """The checkpoint at ``path`` of a run of ``config`` whose model has ``num_params`` weights,
    its tensors on ``device``; ``UnusableCheckpoint`` if it is not one of this run."""
    payload = read(path, device)  # data only; refused if it is not a checkpoint
    if payload["config"] != config:
        raise refuse(path, "belongs to a different run config")
    size = (num_params,)
    if payload["w"].shape != size or payload["iterate_sum"].shape != size:
        raise refuse(path,
                     f"holds a model of {payload['w'].numel()} weights; this run's has {size[0]}")
    state = RunState(
        next_round=payload["next_round"],
        w=payload["w"].to(device),
        iterate_sum=payload["iterate_sum"].to(device),
        rows=payload["rows"],
        per_user_rows=[frame(columns) for columns in payload["per_user_rows"]],
        elapsed=payload["elapsed"],
        made_under=payload.get("environment") if isinstance(payload.get("environment"), dict)
        else None,
    )
    return Resumed(state, payload["algorithm"], payload["client_states"])


def resume(out: Path, device: torch.device, config: dict, num_params: int, environment: dict,
           fresh_if_unreadable: bool) -> Resumed | None:
    """The checkpoint in the run folder ``out`` (``load``), or None when there is none. One the run
    cannot resume from stops it (``UnusableCheckpoint``), or with ``fresh_if_unreadable`` is set
    aside (``set_aside``) and None returned; each printed in one line, as is a resume made under
    another environment (``provenance.resume_note``)."""
    path = out / CHECKPOINT
    if not path.exists():
        return None
    try:
        resumed = load(path, device, config, num_params)
    except UnusableCheckpoint as refused:
        if not fresh_if_unreadable:
            raise
        aside = set_aside(refused)
        print(f"{out}: {path.name} {refused.why}: set aside as {aside.name} ({FRESH_OPTION}); "
              "this run restarts from round 0", flush=True)
        return None
    print(f"{out}: resuming from its checkpoint (round {resumed.state.next_round} of "
          f"{config['rounds']} done)", flush=True)
    note = provenance.resume_note(resumed.state.made_under, environment)
    if note:
        print(f"{out}: {note}", flush=True)
    return resumed


class UnusableCheckpoint(RunFolderError):
    """A checkpoint the run cannot resume from: ``path``, and ``why`` (what is wrong with it)."""

    def __init__(self, path: Path, why: str):
        self.path, self.why = Path(path), why
        super().__init__(f"{path} {why}; delete it to start this run afresh (rm "
                         f"{shlex.quote(str(path))}), or rerun with "
                         f"{FRESH_OPTION} ({FRESH_ENV}=1 under Snakemake) to set it aside and "
                         "restart from round 0")


def refuse(path: Path, what: str) -> UnusableCheckpoint:
    """The one-line error of a checkpoint the run cannot resume from."""
    return UnusableCheckpoint(path, what)


def set_aside(refused: UnusableCheckpoint) -> Path:
    """Rename the refused checkpoint to ``<file>.unreadable`` (kept to be looked at, never read
    again) so that its run starts from round 0; the new name."""
    aside = refused.path.with_name(refused.path.name + ".unreadable")
    try:
        os.replace(refused.path, aside)
    except OSError as err:
        raise RunFolderError(f"{refused.path}: cannot set it aside as {aside.name} "
                             f"({err.strerror or err}); delete it "
                             "and rerun") from err
    return aside


def _numpy_scalars() -> list:
    """What unpickling a numpy scalar needs (a plug-in's client state may hold one, ``is_state``):
    numpy's scalar constructor and dtypes, data only."""
    core = getattr(np, "_core", None) or np.core
    dtypes = getattr(np, "dtypes", None)  # numpy >= 1.25
    return [core.multiarray.scalar, np.dtype, *(getattr(dtypes, n) for n in dir(dtypes)
                                                if n.endswith("DType"))]


def allowing(types: list):
    """``torch.serialization.safe_globals`` (torch >= 2.5; before, numpy scalars stay refused)."""
    safe_globals = getattr(torch.serialization, "safe_globals", None)
    return safe_globals(types) if safe_globals else contextlib.nullcontext()


def read(path: Path, device: torch.device) -> dict[str, Any]:
    """The checkpoint at ``path``, its tensors on ``device``; ``RunFolderError`` if it is not
    one."""
    if path.stat().st_size == 0:
        raise refuse(path, "is empty (the run was stopped while writing it?)")
    try:
        with allowing(_numpy_scalars()):
            payload = torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError as err:
        # torch's restricted unpickler says why after "WeightsUnpickler error:": a global (a class
        # or function) it will not build, or an operand it does not know (bytes that are no pickle)
        why = str(err).partition("WeightsUnpickler error:")[2].strip() or str(err)
        if "global" in why or "reduce" in why:
            raise refuse(path,
                         "holds objects other than tensors and plain data (a crafted file, or one "
                         "written before checkpoints held data only): not loaded, as loading them "
                         "could run code") from err
        raise refuse(path, f"is not a readable checkpoint (corrupt: {_first_line(why)})") from err
    except Exception as err:  # truncated zip, random bytes, end of file: torch raises many kinds
        raise refuse(path,
                     f"is not a readable checkpoint (truncated or corrupt: {type(err).__name__}: "
                     f"{_first_line(err)})") from err
    if isinstance(payload, dict) and "aggregator" in payload and "algorithm" not in payload:
        # its old name, in checkpoints written before: resumed alike
        payload["algorithm"] = payload.pop("aggregator")
    if not isinstance(payload, dict) or not set(FIELDS) <= set(payload):
        found = (f"keys {', '.join(map(str, payload))}"[:200] if isinstance(payload, dict)
                 else f"a {type(payload).__name__}")
        raise refuse(path, f"is a torch file but not a fedmgda checkpoint (it holds {found})")
    wrong = [key for key, kind in FIELDS.items() if not isinstance(payload[key], kind)]
    if wrong:
        raise refuse(path, f"is not a fedmgda checkpoint: wrong type of {', '.join(wrong)}")
    return payload


def _first_line(err: Exception | str) -> str:
    lines = str(err).strip().splitlines()
    return (lines[0] if lines else repr(err)).split(". ")[0][:200]  # torch's first sentence says it


def frame_columns(frame: pd.DataFrame) -> dict[str, torch.Tensor]:
    """A numeric table as one tensor per column (its dtypes kept, so ``frame`` restores it
    exactly)."""
    return {str(column): torch.tensor(frame[column].to_numpy()) for column in frame.columns}


def frame(columns: dict[str, torch.Tensor]) -> pd.DataFrame:
    """The table ``frame_columns`` stored."""
    return pd.DataFrame({name: values.cpu().numpy() for name, values in columns.items()})
