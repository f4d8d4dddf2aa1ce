"""Checkpoint files: tensors and plain data, read back as data only.

A checkpoint (``Simulation._save_checkpoint``) holds tensors, numbers, strings and lists / dicts
of them; a per-user table is kept as one tensor per column (``frame_columns``). It is read with
``torch.load(weights_only=True)``, whose unpickler builds nothing else, so a crafted file cannot
run code when a run resumes. A file that cannot be read as a checkpoint (empty, truncated,
random bytes, another torch file, other objects) is refused with one line naming it, what is
wrong and how to start afresh (``UnusableCheckpoint``, a ``RunFolderError``): a run never silently
restarts or resumes into something else. Only by the explicit option ``--fresh-if-unreadable``
(``FRESH_ENV`` under Snakemake) is such a file set aside (``set_aside``) and the run restarted
from round 0, which its log says.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from fedmgda.errors import RunFolderError
from fedmgda.runfolder import FRESH_ENV, FRESH_OPTION

# what a checkpoint holds, and the type of each entry
FIELDS: dict[str, type | tuple[type, ...]] = {
    "config": dict, "next_round": int, "w": torch.Tensor, "iterate_sum": torch.Tensor, "algorithm": dict,
    "client_states": dict, "rows": list, "per_user_rows": list, "elapsed": (int, float),
}


class UnusableCheckpoint(RunFolderError):
    """A checkpoint the run cannot resume from: ``path``, and ``why`` (what is wrong with it)."""

    def __init__(self, path: Path, why: str):
        self.path, self.why = Path(path), why
        super().__init__(f"{path} {why}; delete it to start this run afresh (rm {shlex.quote(str(path))}), or rerun with "
                         f"{FRESH_OPTION} ({FRESH_ENV}=1 under Snakemake) to set it aside and restart from round 0")


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
        raise RunFolderError(f"{refused.path}: cannot set it aside as {aside.name} ({err.strerror or err}); delete it "
                             "and rerun") from err
    return aside


def _numpy_scalars() -> list:
    """What unpickling a numpy scalar needs (a plug-in's client state may hold one, ``is_state``):
    numpy's scalar constructor and dtypes, data only."""
    core = getattr(np, "_core", None) or np.core
    dtypes = getattr(np, "dtypes", None)  # numpy >= 1.25
    return [core.multiarray.scalar, np.dtype, *(getattr(dtypes, n) for n in dir(dtypes) if n.endswith("DType"))]


def allowing(types: list):
    """``torch.serialization.safe_globals`` (torch >= 2.5; before, numpy scalars stay refused)."""
    safe_globals = getattr(torch.serialization, "safe_globals", None)
    return safe_globals(types) if safe_globals else contextlib.nullcontext()


def read(path: Path, device: torch.device) -> dict[str, Any]:
    """The checkpoint at ``path``, its tensors on ``device``; ``RunFolderError`` if it is not one."""
    if path.stat().st_size == 0:
        raise refuse(path, "is empty (the run was stopped while writing it?)")
    try:
        with allowing(_numpy_scalars()):
            payload = torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError as err:
        # torch's restricted unpickler says why after "WeightsUnpickler error:": a global (a class or
        # function) it will not build, or an operand it does not know (bytes that are no pickle)
        why = str(err).partition("WeightsUnpickler error:")[2].strip() or str(err)
        if "global" in why or "reduce" in why:
            raise refuse(path, "holds objects other than tensors and plain data (a crafted file, or one written before "
                         "checkpoints held data only): not loaded, as loading them could run code") from err
        raise refuse(path, f"is not a readable checkpoint (corrupt: {_first_line(why)})") from err
    except Exception as err:  # truncated zip, random bytes, end of file: torch raises many kinds
        raise refuse(path, f"is not a readable checkpoint (truncated or corrupt: {type(err).__name__}: {_first_line(err)})") from err
    if isinstance(payload, dict) and "aggregator" in payload and "algorithm" not in payload:
        payload["algorithm"] = payload.pop("aggregator")  # its old name, in checkpoints written before: resumed alike
    if not isinstance(payload, dict) or not set(FIELDS) <= set(payload):
        found = f"keys {', '.join(map(str, payload))}"[:200] if isinstance(payload, dict) else f"a {type(payload).__name__}"
        raise refuse(path, f"is a torch file but not a fedmgda checkpoint (it holds {found})")
    wrong = [key for key, kind in FIELDS.items() if not isinstance(payload[key], kind)]
    if wrong:
        raise refuse(path, f"is not a fedmgda checkpoint: wrong type of {', '.join(wrong)}")
    return payload


def _first_line(err: Exception | str) -> str:
    lines = str(err).strip().splitlines()
    return (lines[0] if lines else repr(err)).split(". ")[0][:200]  # torch's first sentence says it


def frame_columns(frame: pd.DataFrame) -> dict[str, torch.Tensor]:
    """A numeric table as one tensor per column (its dtypes kept, so ``frame`` restores it exactly)."""
    return {str(column): torch.tensor(frame[column].to_numpy()) for column in frame.columns}


def frame(columns: dict[str, torch.Tensor]) -> pd.DataFrame:
    """The table ``frame_columns`` stored."""
    return pd.DataFrame({name: values.cpu().numpy() for name, values in columns.items()})
