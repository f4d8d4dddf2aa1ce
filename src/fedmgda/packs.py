"""Packed training jobs: which runs of the registry share one process ("a pack").

``fedmgda train --config a.yaml b.yaml --out A B`` trains several runs in lockstep
(:func:`fedmgda.scheduler.run_packed`); the runs must share the samples, the model and the local
training (:func:`fedmgda.scheduler.check_packable`). :func:`pack_group` is that condition as a
key computed from a run config alone, and :func:`assign_packs` cuts every group into packs of at
most ``resources.<dataset>.pack`` runs, which the workflow trains as one job each
(``workflow/rules/train.smk``). ``pack: 1`` (the default) packs nothing: one job per run.

Pack names are readable and stable: ``<experiment>/<group>/pack<k>``, e.g.
``table7/adult_shift_by_one1_k1_b10_lr0.01_m0.5/pack1``. A group's packs depend only on the runs
of that group, so adding or removing another experiment, or runs with other local training,
leaves them as they are. Nothing here imports torch, so the Snakefile parses fast.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from fedmgda.catalog import get_algorithm
from fedmgda.config import config_hash
from fedmgda.devices import job_gpu
from fedmgda.experiments import RunSpec
from fedmgda.runfolder import WAIT_ENV
from fedmgda.runkeys import RUN_DEFAULTS, fmt_num, fmt_value
from fedmgda.schema import def_defaults

# run fields that are process-wide (torch.backends flags) or the device: packed runs share them
PROCESS_FIELDS = ("device", "batched", "cuda_graphs", "deterministic", "tf32")
PROCESS_DEFAULTS = {"device": "auto", "batched": True, "cuda_graphs": True, "deterministic": True,
                    "tf32": False}


def prox_mu(cfg: Mapping[str, Any]) -> float:
    """The proximal coefficient of the run's local training (0 without a proximal term)."""
    return get_algorithm(cfg["algorithm"], cfg.get("plugin")).prox_mu(cfg.get("hparams"))


def pack_group(cfg: Mapping[str, Any]) -> str:
    """The key of the runs that may share a process with this one, readable:
    ``<dataset>[_<options>]_k<epochs>_b<batch>_lr<lr>_m<momentum>[_mu<mu>][_<process fields>]``.

    Same key = same samples (dataset, its options, raw folder), same model (``model``), same
    local training (epochs, batch size, local lr, momentum, proximal mu) and the same device and
    process-wide settings. Algorithms, their other hyper-parameters, attacks, seeds, partitions,
    participation and rounds may differ within a group.
    """
    def get(name: str) -> Any:
        return cfg.get(name, RUN_DEFAULTS.get(name, PROCESS_DEFAULTS.get(name)))

    parts = [cfg["dataset"]]
    for key, value in sorted((cfg.get("dataset_options") or {}).items()):
        parts.append(f"{key}{fmt_value(value)}")
    if get("model") is not None:
        parts.append(f"model{fmt_value(get('model'))}")
    if get("conv") != RUN_DEFAULTS["conv"]:  # another forward: not in one vmap-ed step
        parts.append(f"conv{fmt_value(get('conv'))}")
    parts += [f"k{get('local_epochs')}", f"b{get('batch_size')}", f"lr{fmt_num(get('local_lr'))}",
              f"m{fmt_num(get('momentum'))}"]
    mu = prox_mu(cfg)
    if mu:
        parts.append(f"mu{fmt_num(mu)}")
    for name in PROCESS_FIELDS:
        value = cfg.get(name, PROCESS_DEFAULTS[name])
        if value != PROCESS_DEFAULTS[name]:
            parts.append(f"{name}{fmt_value(value)}")
    raw_dir = cfg.get("raw_dir", "resources/raw")
    if raw_dir != "resources/raw":
        parts.append(f"raw{fmt_value(raw_dir)}")
    return "_".join(parts)


def run_yaml_text(spec: RunSpec, partitions_dir: str) -> str:
    """A run's run.yaml as the workflow writes it: the registry's run config and, for a run on a
    saved partition, its file ``<partitions_dir>/<partition>.npz`` (``fedmgda partition``'s
    output)."""
    cfg = dict(spec.config)
    if spec.partition is not None:
        cfg["partition_file"] = f"{partitions_dir}/{spec.partition}.npz"
    return yaml_text(cfg)


def _dump(data: Any) -> str:
    """``data`` as yaml.safe_dump writes it (keys sorted, unicode as is), with libyaml's emitter
    where PyYAML has it (the same text)."""
    import yaml

    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump(data, Dumper=dumper, sort_keys=True, allow_unicode=True)


class _NotPlain(Exception):
    """A value :func:`_frozen` does not make a key of."""


def _frozen(value: Any, containers: set[int]) -> Any:
    """A hashable key of a plain YAML value (dicts, lists, str, int, float, bool, None; exactly
    these types) that two values share only if they are written alike (a float by its repr: 0.0
    and -0.0 differ). A container met twice (``containers``: the ids seen) would be written
    with an anchor: :class:`_NotPlain`, as for any other type."""
    kind = type(value)
    if kind is dict or kind is list:
        if id(value) in containers:
            raise _NotPlain
        containers.add(id(value))
        if kind is list:
            return (list, tuple(_frozen(v, containers) for v in value))
        return (dict, tuple((_frozen(k, containers), _frozen(v, containers))
                            for k, v in value.items()))
    if kind is float:
        return (float, repr(value))
    if kind is str or kind is int or kind is bool or value is None:
        return (kind, value)
    raise _NotPlain


_FRAGMENTS: dict[tuple[str, Any], str] = {}


def yaml_text(cfg: Mapping[str, Any]) -> str:
    """``cfg`` as yaml.safe_dump writes it (keys sorted, unicode as is: :func:`_dump`), made of
    one remembered fragment per top-level key and value: a top-level block mapping is its
    entries' texts one after the other, and a registry's runs share most of their fields, so a
    large registry's run.yaml texts cost one dump per distinct field. A mapping with a key that
    is no string, a value of another type or a container met twice (an anchor): dumped whole."""
    if not cfg or type(cfg) is not dict or any(type(k) is not str for k in cfg):
        return _dump(cfg)
    containers: set[int] = set()
    try:
        keys = [(k, _frozen(cfg[k], containers)) for k in sorted(cfg)]
    except _NotPlain:
        return _dump(cfg)
    parts = []
    for key in keys:
        text = _FRAGMENTS.get(key)
        if text is None:
            text = _FRAGMENTS[key] = _dump({key[0]: cfg[key[0]]})
        parts.append(text)
    return "".join(parts)


def pack_size(spec: RunSpec) -> int:
    """``resources.<dataset>.pack`` (or ``resources.default.pack``; the schema's default 1);
    ``auto``: the size measured best for the run's dataset on the device it trains on where a GPU
    is present (``fedmgda.devices.measured_pack``; the device as ``job_gpu`` takes it)."""
    size = {**def_defaults("resources"), **spec.resources}["pack"]
    if size == "auto":
        from fedmgda.devices import measured_pack, run_device

        return measured_pack(spec.config["dataset"], run_device(spec.config, cuda_available=True),
                             spec.config.get("model"))
    return int(size)


# the files of a trained run (its train.log aside); of these a training job declares to Snakemake
# only summary.json, which the trainer writes last (workflow/rules/train.smk)
RUN_FILES = ("run.yaml", "metrics.csv", "per_user.csv", "summary.json")


def trained_runs(runs_dir: str | Path, configs: Mapping[str, str]) -> set[str]:
    """The runs of ``configs`` ({run key: its run.yaml text}) already trained with that config: all
    of :data:`RUN_FILES` are in ``<runs_dir>/<key>/`` and its run.yaml is the config given, up to
    the fields that are no part of a run's identity (``fedmgda.config.config_hash``: the device, the
    partition file's path, ...). The workflow leaves them to no rule, so no job retrains them: a
    pack job would retrain its finished members (Snakemake deletes a job's outputs before running
    it), and changing ``pack`` or ``device`` would retrain everything. A run whose config changed is
    not trained (its identity differs); the readers check the same identity
    (``fedmgda.results``)."""
    trained = set()
    for key, text in configs.items():
        run_dir = Path(runs_dir) / key
        if not all((run_dir / f).is_file() for f in RUN_FILES):
            continue
        written = (run_dir / "run.yaml").read_text()
        if written == text or _identity(written) == _identity(text):
            trained.add(key)
    return trained


def _identity(run_yaml: str) -> str | None:
    """The config hash of a run.yaml's text; None for a text that is no mapping."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        config = yaml.load(run_yaml, Loader=loader)
    except yaml.YAMLError:
        return None
    return config_hash(config) if isinstance(config, dict) else None


def assign_packs(runs: Mapping[str, RunSpec],
                 trained: Collection[str] = ()) -> dict[str, list[str]]:
    """Packs of the registry's runs: ``{"<experiment>/<group>/pack<k>": [run keys]}``, only packs
    of two or more runs (the others keep one job per run).

    Runs are packed with the runs of the experiment that first asks for them (so building one
    table trains its own runs, not those of a sensitivity experiment beside it). Each group
    (that experiment, :func:`pack_group`) is sorted by run key and cut into ``ceil(n / pack)``
    contiguous packs whose sizes differ by at most one (9 runs with ``pack: 8``: 5 + 4, not
    8 + 1), so a group's packs finish at about the same time. Deterministic: the result depends
    only on the run keys and configs, not on the order of ``runs``.

    ``trained`` (:func:`trained_runs`): cut into packs like the others, then left out of their
    pack. A pack keeps its name and its other members whatever finishes elsewhere, so a job that
    re-reads the Snakefile on a cluster node finds the same pack rule (its own members are not
    trained yet); a run's numbers never depend on its pack (:mod:`fedmgda.scheduler`).
    """
    trained = set(trained)
    groups: dict[str, list[str]] = {}
    sizes: dict[str, int] = {}
    for key, spec in runs.items():
        group = f"{spec.experiments[0]}/{pack_group(spec.config)}"
        groups.setdefault(group, []).append(key)
        size = pack_size(spec)
        if sizes.setdefault(group, size) != size:  # a group has one dataset, hence one size
            raise ValueError(f"runs of pack group {group} ask for different pack sizes")
    packs: dict[str, list[str]] = {}
    for group in sorted(groups):
        keys = sorted(groups[group])
        size = sizes[group]
        if size < 1:
            raise ValueError(f"resources pack must be >= 1, got {size} (group {group})")
        n_packs = math.ceil(len(keys) / size)
        base, extra = divmod(len(keys), n_packs)
        start = 0
        for k in range(n_packs):
            stop = start + base + (1 if k < extra else 0)
            members = [key for key in keys[start:stop] if key not in trained]
            if len(members) >= 2:
                packs[f"{group}/pack{k + 1}"] = members
            start = stop
    return packs


def pack_rule_name(pack: str) -> str:
    """The Snakemake rule of a pack: ``train_pack_<pack with non-word characters as _>``."""
    return "train_pack_" + re.sub(r"\W", "_", pack)


def pack_resources(specs: list[RunSpec]) -> dict[str, int]:
    """What a pack job asks the scheduler for, from its runs' resources (per dataset):

    - ``threads``, ``gpu``: the largest of the runs' (one process, one device); a run's ``gpu`` is
      :func:`fedmgda.devices.job_gpu`: 0 when it would train on a CPU core on a GPU machine;
    - ``mem_mb``: the largest of the runs' plus ``pack_mem_mb`` (default 0) per further run (the
      runs share one copy of the samples; each adds its model, optimiser and metrics);
    - ``runtime``: the *sum* of the runs' runtimes times ``pack_runtime`` (default 1, i.e. no
      speed-up assumed; set it below 1 once packing has been measured on the hardware), and at
      least the longest run's runtime.

    Keys a run's resources lack take the schema's defaults (``$defs/resources``).
    """
    res = [{**def_defaults("resources"), **s.resources} for s in specs]
    factor = max(float(r["pack_runtime"]) for r in res)
    per_run_mem = max(int(r["pack_mem_mb"]) for r in res)
    longest = max(int(r["runtime"]) for r in res)
    return {
        "threads": max(int(r["threads"]) for r in res),
        "gpu": max(job_gpu(s.config, r) for s, r in zip(specs, res)),
        "mem_mb": max(int(r["mem_mb"]) for r in res) + per_run_mem * (len(res) - 1),
        "runtime": max(longest, math.ceil(factor * sum(int(r["runtime"]) for r in res))),
    }


def train_pack(command: str | None, members: list[dict[str, str]], pack_log: str | Path,
               threads: int = 1, timeout: float | None = None) -> None:
    """Train one pack (the pack rules' script): run ``<command> --config <config ...> --out
    <dir ...>`` in one process with its output in ``pack_log``, then append that log to each run's
    ``train.log`` (also when training failed), except for a run whose summary.json this job left
    as it found it (finished before, or by another trainer meanwhile, which the trainer waits
    for: ``fedmgda.runfolder.WAIT_ENV``). Each run's config is given to the trainer as a file of
    its own, out of the run folders: the trainer writes the run's ``run.yaml`` with its outputs,
    holding the folder's lock, so nothing here writes into a run folder before the trainer
    holds it. ``command`` None (the config's ``train_command: null``): ``<this Python> -m
    fedmgda train``. SIGINT and SIGTERM are passed on to the trainer, which stops every run at
    the end of its round with a checkpoint (``fedmgda.cli``), and waited for.

    ``members``: one ``{"config": YAML text, "out": folder, "log": path}`` per run.
    ``timeout`` (seconds): the trainer, in a process group of its own,
    gets SIGTERM after it (SIGKILL 10 s later), and ``subprocess.TimeoutExpired`` is raised; its
    runs keep their last checkpoints.
    """
    Path(pack_log).parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    env[WAIT_ENV] = "1"
    trainer = shlex.split(command) if command else [sys.executable, "-m", "fedmgda", "train"]
    before = {m["out"]: _summary_stamp(m["out"]) for m in members}
    with tempfile.TemporaryDirectory(prefix="fedmgda-pack-") as staging:
        configs = []
        for i, m in enumerate(members):
            configs.append(str(Path(staging) / f"run{i}.yaml"))
            Path(configs[-1]).write_text(m["config"])
        argv = trainer + ["--config", *configs, "--out", *[m["out"] for m in members]]
        # read back through its own handle: a second Snakemake may have replaced the path's file
        with open(pack_log, "w+") as log:
            log.write(f"pack of {len(members)} runs: {' '.join(shlex.quote(a) for a in argv)}\n")
            log.flush()
            try:
                rc = _run_until(argv, log, env, timeout)
            finally:
                log.seek(0)
                text = log.read()
                for m in members:
                    found = before[m["out"]]
                    if found is not None and _summary_stamp(m["out"]) == found:
                        continue
                    Path(m["log"]).parent.mkdir(parents=True, exist_ok=True)
                    with open(m["log"], "a") as fh:
                        fh.write(text)
    if rc is None:
        raise subprocess.TimeoutExpired(argv[:2] + ["...", f"(see {pack_log})"], timeout)
    if rc != 0:
        raise subprocess.CalledProcessError(rc, argv[:2] + ["...", f"(see {pack_log})"])


def _summary_stamp(folder: str | Path) -> tuple[int, int] | None:
    """(inode, mtime in ns) of a run folder's summary.json; None: it has none."""
    try:
        stat = (Path(folder) / "summary.json").stat()
    except FileNotFoundError:
        return None
    return stat.st_ino, stat.st_mtime_ns


def _run_until(argv: list[str], log, env: dict[str, str], timeout: float | None) -> int | None:
    """``argv``'s exit status, its output in ``log``; None when ``timeout`` stopped it (its process
    group: SIGTERM, then SIGKILL). SIGINT and SIGTERM received meanwhile are passed on to it."""
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=timeout is not None)

    def forward(signum: int, frame) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            return proc.wait(timeout=None if timeout is None else max(1.0, timeout))
        except subprocess.TimeoutExpired:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)
                    proc.wait(timeout=10)
                    break
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    continue
            return None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
