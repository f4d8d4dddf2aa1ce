"""The experiment registry: the paper as data, expanded into training runs, tables and figures.

``config/config.yaml`` (the paper) and ``config/quick.yaml`` (offline) describe *settings*
(dataset, partition, batch size, local lr, participation, rounds), *grids* (lists of algorithm
entries with hyper-parameters), *experiments* (setting x grid x attacks x seeds), *tables* and
*figures* (which experiments' rows they show, and how). :func:`expand` turns that into

- ``runs``: one :class:`RunSpec` per distinct training run, keyed by its canonical, readable path
  ``<setting>/<algorithm>/<hparams>/<attack>/seed<k>`` (under ``results/<profile>/runs/``; made
  by ``fedmgda.runkeys.run_key``, as are the rows' keys and labels). Two
  experiments asking for the same run (e.g. Table 8's FedAvg, Figure 3 left, Figure 4 left) get
  the same key, so Snakemake trains it once; two *different* configs mapping to one path is an
  error.
- ``rows``: per experiment, one :class:`Row` per (grid entry, attack) with its runs over seeds.
- ``tables`` / ``figures``: :class:`~fedmgda.specs.TableSpec` / :class:`~fedmgda.specs.FigureSpec`
  per name; :func:`item_spec` attaches the rows the rule's job receives (as JSON:
  :func:`fedmgda.specs.spec_to_json`).

Nothing here imports torch, so the Snakefile parses fast.
"""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from fedmgda.catalog import load_plugins
from fedmgda.config import RECORDED_ONLY_WITH, RunConfig, config_hash  # no torch import
from fedmgda.errors import ConfigError, RegistryError
from fedmgda.runkeys import (
    RUN_DEFAULTS,
    RUN_FIELDS,
    algorithm_info,
    hparam_values,
    partition_key,
    row_key,
    row_label,
    run_key,
    to_number,
)
from fedmgda.schema import def_defaults, with_defaults
from fedmgda.specs import FigureSpec, Row, TableSpec
from fedmgda.variants import VariantError, apply_readings, check_readings, get_variant


# --------------------------------------------------------------------------- expansion
@dataclass
class RunSpec:
    key: str
    config: dict[str, Any]  # the run config written to run.yaml (without partition_file)
    partition: str | None  # partition key, or None when the library builds it itself
    resources: dict[str, Any]
    experiments: list[str] = field(default_factory=list)

    @property
    def dataset(self) -> str:
        return self.config["dataset"]


@dataclass
class Registry:
    profile: str
    runs: dict[str, RunSpec]
    rows: dict[str, list[Row]]
    tables: dict[str, TableSpec]  # without their rows (item_spec attaches them)
    figures: dict[str, FigureSpec]
    partitions: dict[str, dict[str, Any]]
    datasets: list[str]
    experiments: dict[str, dict[str, Any]]

    def rows_of(self, experiments: list[str], select: list[str] | None = None) -> list[Row]:
        out = []
        for name in experiments:
            if name not in self.rows:
                raise RegistryError(f"unknown experiment {name!r}; known: {', '.join(self.rows)}")
            for row in self.rows[name]:
                if select is None or any(fnmatch.fnmatchcase(row.key, pat) for pat in select):
                    out.append(row)
        return out

    def runs_of(self, experiments: list[str], select: list[str] | None = None) -> list[str]:
        seen: dict[str, None] = {}
        for row in self.rows_of(experiments, select):
            for r in row.runs:
                seen[r] = None
        return list(seen)


def _resolve_named(value: Any, pool: dict[str, Any], what: str, owner: str) -> Any:
    if isinstance(value, str):
        if value not in pool:
            raise RegistryError(f"{owner}: unknown {what} {value!r}; "
                                f"defined: {', '.join(pool) or 'none'}")
        return copy.deepcopy(pool[value])
    return copy.deepcopy(value)


def _resources(config: dict[str, Any], dataset: str) -> dict[str, Any]:
    """The schema's defaults, then ``resources.default``, then ``resources.<dataset>``."""
    res = def_defaults("resources")
    res.update(config["resources"].get("default") or {})
    res.update(config["resources"].get(dataset) or {})
    return res


def check_hparams(owner: str, algorithm: str, hparams: dict[str, Any] | None) -> None:
    """Names and ranges of a grid entry's hyper-parameters (fractions like 1/10 allowed)."""
    try:
        algorithm_info(algorithm).resolve({k: to_number(v) for k, v in (hparams or {}).items()})
    except (ConfigError, RegistryError) as err:
        raise RegistryError(f"{owner}: {err}") from None


def normalise_attack(attack: dict[str, Any] | None) -> dict[str, Any]:
    """An attack of the registry as a run has it: ``{"kind": "none"}``, or its kind with the
    malicious user and the value, defaults filled in."""
    attack = dict(attack or {"kind": "none"})
    kind = attack.get("kind", "none")
    if kind == "none":
        return {"kind": "none"}
    return {"kind": kind, "user": int(attack.get("user", 0)),
            "value": to_number(attack.get("value", 0))}


def _readings_to_run(name: str, exp: dict[str, Any], experiments: dict[str, dict[str, Any]]):
    """The experiment to expand and the protocol readings to expand it under, as
    (varied variant or None, its reading or None, every chosen reading) triples.

    A plain experiment: its own ``variants`` choices, once. A sensitivity experiment
    (``variants_of: <experiment>``, ``vary: [variant, ...]``): the named experiment (its own
    ``seeds``/``rounds`` may replace the base's) once per reading of each varied variant, the
    base's other choices kept; the base must choose a reading of every varied variant, so that
    its rows are the sensitivity experiment's rows under the base's reading (the same runs)."""
    owner = f"experiment {name}"
    base_name = exp.get("variants_of")
    try:
        if base_name is None:
            check_readings(exp.get("variants") or {})
            return exp, [(None, None, dict(exp.get("variants") or {}))]
        base = experiments.get(base_name)
        if base is None or base.get("variants_of") is not None:
            raise RegistryError(f"{owner}: variants_of names {base_name!r}, which is not a plain "
                                f"experiment")
        chosen = dict(base.get("variants") or {})
        check_readings(chosen)
        vary = exp.get("vary") or []
        if not vary:
            raise RegistryError(f"{owner}: vary lists no variant")
        combos = []
        for variant in vary:
            if variant not in chosen:
                get_variant(variant)  # unknown -> VariantError
                raise RegistryError(f"{owner}: varies {variant}, but {base_name} chooses no "
                                    f"reading of it (add it to {base_name}'s variants)")
            combos += [(variant, reading, {**chosen, variant: reading})
                       for reading in get_variant(variant).readings]
    except VariantError as err:
        raise RegistryError(f"{owner}: {err}") from None
    merged = copy.deepcopy(base)
    merged.update({k: v for k, v in exp.items() if k not in ("variants_of", "vary", "description")})
    merged["variants_of"] = base_name
    return merged, combos


@dataclass
class _Expansion:
    """What the run stages of :func:`expand` share: the config (with defaults) and the distinct
    runs and partitions found so far, keyed by their canonical keys."""
    config: dict[str, Any]
    runs: dict[str, RunSpec] = field(default_factory=dict)
    partitions: dict[str, dict[str, Any]] = field(default_factory=dict)


def expand(config: dict[str, Any]) -> Registry:
    """Expand a (schema-validated) registry config into runs, rows, tables and figures.
    Absent top-level keys take the schema's defaults (:func:`fedmgda.schema.with_defaults`).

    The stages, in order: plug-ins loaded; experiments layered with their overrides
    (:func:`_layered_experiments`); each experiment expanded under its protocol readings into rows
    and distinct runs (:func:`_expand_experiment`); the table and figure specs
    (:func:`_item_specs`); the ``only`` selection (:func:`_select_only`); the specs checked against
    the rows (:func:`_check_items`); each table's columns bound to experiments
    (:func:`_bind_columns`)."""
    config = with_defaults(config)
    try:
        load_plugins(config["plugins"])
    except ConfigError as err:
        raise RegistryError(str(err)) from None
    experiments = _layered_experiments(config)
    expansion = _Expansion(config)
    rows = {name: _expand_experiment(name, exp, experiments, expansion)
            for name, exp in experiments.items()}
    runs, partitions = expansion.runs, expansion.partitions
    tables, figures = _item_specs(config)
    if config["only"]:
        tables, figures, rows, runs, partitions = _select_only(config["only"], tables, figures,
                                                               rows, runs, partitions)
    _check_items(tables, figures, rows, experiments)
    tables = {name: _bind_columns(name, spec, experiments) for name, spec in tables.items()}

    datasets = sorted({r.dataset for r in runs.values()})
    return Registry(str(config.get("profile", "paper")), runs, rows, tables, figures, partitions,
                    datasets, experiments)


def _layered_experiments(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Layering of the experiments: each experiment with its ``experiment_overrides`` entry laid
    over it (copies; an override of an unknown experiment is an error)."""
    exp_over = config["experiment_overrides"]
    unknown = sorted(set(exp_over) - set(config["experiments"]))
    if unknown:
        raise RegistryError(f"experiment_overrides names unknown experiment(s): "
                            f"{', '.join(unknown)}")
    return {name: {**copy.deepcopy(exp), **copy.deepcopy(exp_over.get(name) or {})}
            for name, exp in config["experiments"].items()}


def _run_layers(name: str, exp: dict[str, Any], config: dict[str, Any]):
    """Layering of one experiment's run fields: its grid, its seeds (the top-level ``seeds``
    first) and the run fields every run of it shares, from the lowest layer up: ``run_defaults``,
    the setting, the experiment's ``run``, its ``rounds``, the top-level ``rounds``,
    ``run_overrides``. Returns (grid, seeds, base)."""
    setting = _resolve_named(exp.get("setting"), config["settings"], "setting",
                             f"experiment {name}")
    if not isinstance(setting, dict) or "dataset" not in setting:
        raise RegistryError(f"experiment {name}: its setting must give at least a dataset")
    grid = _resolve_named(exp.get("grid"), config["grids"], "grid", f"experiment {name}")
    if not grid:
        raise RegistryError(f"experiment {name}: empty grid")
    seeds = config["seeds"] or exp.get("seeds") or [1]
    repeated = sorted(s for s, n in Counter(seeds).items() if n > 1)
    # a repeated seed is the same run twice: a row's "n seeds" and its std would count it twice
    if repeated:
        raise RegistryError(f"experiment {name}: seeds {seeds} repeat "
                            f"{', '.join(map(str, repeated))}; give each seed once")
    base = dict(config["run_defaults"])
    base.update(setting)
    base.update(exp.get("run") or {})
    if exp.get("rounds") is not None:
        base["rounds"] = exp["rounds"]
    if config["rounds"] is not None:
        base["rounds"] = config["rounds"]
    base.update(config["run_overrides"])
    return grid, seeds, base


def _expand_experiment(name: str, exp: dict[str, Any], experiments: dict[str, dict[str, Any]],
                       expansion: _Expansion) -> list[Row]:
    """One experiment's rows: per protocol reading to run (:func:`_readings_to_run`), grid entry
    and attack, one :class:`Row` whose runs (one per seed) join ``expansion``. A sensitivity
    experiment whose varied variant changes none of its runs is an error."""
    exp, readings = _readings_to_run(name, exp, experiments)
    grid, seeds, base = _run_layers(name, exp, expansion.config)
    exp_rows: list[Row] = []
    changed: dict[str, bool] = {}  # per varied variant: whether it changed any run
    for variant, reading, chosen in readings:
        for entry in grid:
            check_hparams(f"experiment {name}", entry["algorithm"], entry.get("hparams"))
            attacks = entry.get("attacks", exp.get("attacks")) or [{"kind": "none"}]
            for attack in attacks:
                attack = normalise_attack(attack)
                row = _row(name, entry, attack, seeds, variant, reading)
                for seed in seeds:
                    cfg, before = _run_config(name, entry, attack, seed, base, chosen,
                                              expansion.config)
                    if variant is not None:
                        changed[variant] = (changed.get(variant, False)
                                            or get_variant(variant).concerns(before))
                    row.runs.append(_register_run(name, cfg, expansion))
                    row.config_hashes.append(config_hash(cfg))
                exp_rows.append(row)
    idle = [v for v, hit in changed.items() if not hit]
    if idle:
        raise RegistryError(f"experiment {name}: variant(s) {', '.join(idle)} change no run of "
                            f"{exp['variants_of']}")
    return exp_rows


def _row(name: str, entry: dict[str, Any], attack: dict[str, Any], seeds: list[Any],
         variant: str | None, reading: str | None) -> Row:
    """The row of a grid entry under one attack, its runs still to come (one per seed): its key
    and label (the entry's own, or made from algorithm, hyper-parameters, the entry's run fields
    and the attack)."""
    algorithm = entry["algorithm"]
    entry_run = dict(entry.get("run") or {})
    key = entry.get("row") or row_key(algorithm, entry.get("hparams"), entry_run, attack)
    label = entry.get("label") or row_label(algorithm, entry.get("hparams"), entry_run, attack)
    return Row(name, key, label, algorithm, hparam_values(algorithm, entry.get("hparams")), attack,
               [int(s) for s in seeds], [], variant, reading)


def _run_config(name: str, entry: dict[str, Any], attack: dict[str, Any], seed: Any,
                base: dict[str, Any], chosen: dict[str, str],
                config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """One run's config: the experiment's run fields, the entry's over them (dataset options
    merged), the algorithm (and its plug-in), the chosen protocol readings, ``run_overrides``, then
    hyper-parameters (implied defaults dropped), attack, seed, device and raw_dir. Returns it and
    the config before the readings (what a variant's ``concerns`` is asked about)."""
    algorithm = entry["algorithm"]
    entry_run = dict(entry.get("run") or {})
    cfg = dict(base)
    cfg.update(entry_run)
    cfg["dataset_options"] = {**(base.get("dataset_options") or {}),
                              **(entry_run.get("dataset_options") or {})}
    if not cfg["dataset_options"]:
        del cfg["dataset_options"]
    cfg["algorithm"] = algorithm
    plugin = algorithm_info(algorithm).plugin
    if plugin:  # the training job loads the plug-in from there
        cfg["plugin"] = plugin
    before = dict(cfg)
    cfg = apply_readings(cfg, chosen)
    cfg.update(config["run_overrides"])
    bad = sorted(set(cfg) - RUN_FIELDS)
    if bad:
        raise RegistryError(f"experiment {name}: unknown run field(s) {', '.join(bad)}")
    # implied defaults dropped: "fedmgda, epsilon 1" and "fedmgda" are one run
    cfg["hparams"] = hparam_values(algorithm, entry.get("hparams"))
    cfg["attack"] = attack
    cfg["seed"] = int(seed)
    if config.get("device"):
        cfg["device"] = config["device"]
    cfg.setdefault("raw_dir", config["raw_dir"])
    return cfg, before


def _register_run(name: str, cfg: dict[str, Any], expansion: _Expansion) -> str:
    """Run identity and de-duplication: the run's canonical key (and its partition's, with
    ``partition_jobs``); a run another experiment already asked for is shared (the experiment
    joins its list), two different configs on one key are an error. Returns the key."""
    runs, config = expansion.runs, expansion.config
    rk = run_key(cfg)
    pk = None
    if config["partition_jobs"]:
        pk = partition_key(cfg)
        expansion.partitions[pk] = {"dataset": cfg["dataset"], "partition": cfg.get("partition"),
                                    "seed": cfg["seed"],
                                    "options": cfg.get("dataset_options") or {},
                                    "raw_dir": cfg["raw_dir"]}
    if rk in runs:
        if runs[rk].config != cfg:
            diff = sorted(k for k in set(cfg) | set(runs[rk].config)
                          if cfg.get(k) != runs[rk].config.get(k))
            raise RegistryError(
                f"run {rk} is requested by {runs[rk].experiments} and {name} with different "
                f"configs (fields {', '.join(diff)}); make the setting name them")
        if name not in runs[rk].experiments:
            runs[rk].experiments.append(name)
    else:
        runs[rk] = RunSpec(rk, cfg, pk, _resources(config, cfg["dataset"]), [name])
    return rk


# keys of a spec the registry fills in: never the config's
_RESOLVED_KEYS = {"name", "rows", "chosen", "column_experiment", "experiment"}


def _typed_spec(cls: type, what: str, name: str, raw: dict[str, Any]):
    """A table or figure spec of the config as ``cls``; a key it does not know, or a required one
    it lacks, is an error."""
    fields = {f.name for f in dataclasses.fields(cls)} - _RESOLVED_KEYS
    unknown = sorted(set(raw) - fields)
    if unknown:
        raise RegistryError(f"{what} {name}: unknown key(s) {', '.join(unknown)}; "
                            f"known: {', '.join(sorted(fields))}")
    required = {f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    missing = sorted(required - set(raw) - {"name"})
    if missing:
        raise RegistryError(f"{what} {name}: missing key(s) {', '.join(missing)}")
    return cls(name=name, **raw)


def _item_specs(config: dict[str, Any]) -> tuple[dict[str, TableSpec], dict[str, FigureSpec]]:
    """The table and figure specs of the config, each with its ``name`` and its ``experiments``
    (a table's default: the experiment of its own name; a figure's ``experiment`` becomes a
    one-element list). A table's columns written ``{source, experiment}`` give their source to
    ``columns`` and their experiment to ``column_experiment`` (checked by :func:`_bind_columns`)."""
    tables = {}
    for name, spec in config["tables"].items():
        spec = copy.deepcopy(spec)
        spec.setdefault("experiments", [name])
        columns = spec.get("columns") or {}
        if "columns" in spec:
            spec["columns"] = {c: s["source"] if isinstance(s, dict) else s
                               for c, s in columns.items()}
        table = _typed_spec(TableSpec, "table", name, spec)
        bound = {c: s["experiment"] for c, s in columns.items() if isinstance(s, dict)}
        tables[name] = dataclasses.replace(table, column_experiment=bound)
    figures = {}
    for name, spec in config["figures"].items():
        spec = copy.deepcopy(spec)
        if "experiment" in spec:
            spec["experiments"] = [spec.pop("experiment")]
        figures[name] = _typed_spec(FigureSpec, "figure", name, spec)
    return tables, figures


def _select_only(only: list[str], tables, figures, rows, runs, partitions):
    """The ``only`` selection: the listed tables, figures and experiments, the experiments those
    tables and figures show, and exactly the runs and partitions these need (unknown names are an
    error). Returns (tables, figures, rows, runs, partitions)."""
    wanted = set(only)
    unknown = sorted(wanted - set(tables) - set(figures) - set(rows))
    if unknown:
        raise RegistryError(f"only: unknown name(s) {', '.join(unknown)}")
    tables = {k: v for k, v in tables.items() if k in wanted}
    figures = {k: v for k, v in figures.items() if k in wanted}
    keep_exps = {e for e in wanted if e in rows}
    for spec in list(tables.values()) + list(figures.values()):
        keep_exps.update(spec.experiments)
    rows = {k: v for k, v in rows.items() if k in keep_exps}
    keep_runs = {r for rs in rows.values() for row in rs for r in row.runs}
    runs = {k: v for k, v in runs.items() if k in keep_runs}
    keep_parts = {r.partition for r in runs.values()}
    partitions = {k: v for k, v in partitions.items() if k in keep_parts}
    return tables, figures, rows, runs, partitions


def _check_items(tables: dict[str, TableSpec], figures: dict[str, FigureSpec],
                 rows: dict[str, list[Row]], experiments: dict[str, dict[str, Any]]) -> None:
    """Validation of the table and figure specs: every experiment they show exists (and was kept
    by ``only``), a figure's ``select`` matches some row, and a sensitivity experiment is shown by a
    table of kind ``variants`` only, which shows nothing else."""
    for kind, specs in (("table", tables), ("figure", figures)):
        for name, spec in specs.items():
            missing = [e for e in spec.experiments if e not in rows]
            if missing:
                raise RegistryError(f"{kind} {name}: unknown experiment(s) {', '.join(missing)}")
            if isinstance(spec, FigureSpec) and spec.select and not rows_selected(rows, spec):
                raise RegistryError(f"{kind} {name}: select {spec.select} matches no row")
            if isinstance(spec, FigureSpec) and spec.kind == "gaps":
                _check_gaps(name, spec, rows)
            plain = [e for e in spec.experiments if not experiments[e].get("variants_of")]
            if spec.kind == "variants" and plain:
                raise RegistryError(f"{kind} {name}: kind variants shows a sensitivity experiment "
                                    f"(variants_of), but {', '.join(plain)} is a plain one")
            if spec.kind != "variants" and len(plain) < len(spec.experiments):
                raise RegistryError(f"{kind} {name}: a sensitivity experiment repeats its rows "
                                    f"once per reading; show it with a table of kind variants")


def _check_gaps(name: str, spec: FigureSpec, rows: dict[str, list[Row]]) -> None:
    """A ``gaps`` figure: columns, an x label per experiment, and in each experiment exactly one
    row per ``select`` pattern (the row, then the rows subtracted from it)."""
    if len(spec.select or []) < 2 or not spec.columns:
        raise RegistryError(f"figure {name}: gaps needs select (the row, then the rows subtracted "
                            "from it) and columns (the statistics, one panel each)")
    if spec.xlabels and len(spec.xlabels) != len(spec.experiments):
        raise RegistryError(f"figure {name}: {len(spec.xlabels)} xlabels for "
                            f"{len(spec.experiments)} experiments")
    for e in spec.experiments:
        for pattern in spec.select:
            hits = [r.key for r in rows[e] if fnmatch.fnmatchcase(r.key, pattern)]
            if len(hits) != 1:
                raise RegistryError(f"figure {name}: select {pattern!r} matches {len(hits)} rows "
                                    f"of {e}; it must match one")


def _bind_columns(name: str, spec: TableSpec, experiments: dict[str, dict[str, Any]]) -> TableSpec:
    """A table's ``column_experiment`` (the columns the config wrote ``{source, experiment}``),
    checked and resolved.

    A column bound to an experiment shows that experiment's rows only; the table joins its
    experiments' rows by row key (a table spanning two datasets, e.g. q-FFL's Table 2: grid
    entries with a shared ``row:`` name). Either every column is bound or none. In a table of
    kind ``variants`` a column may name the base experiment (``variants_of``) of one of the
    table's sensitivity experiments, so that it reuses the base table's columns."""
    owner = f"table {name}"
    bound = dict(spec.column_experiment)
    if not bound:
        return spec
    unbound = [c for c in spec.columns if c not in bound]
    if unbound:
        raise RegistryError(f"{owner}: columns {', '.join(map(repr, bound))} name an experiment, "
                            f"{', '.join(map(repr, unbound))} do not; bind every column or none")
    by_base = {experiments[e].get("variants_of"): e for e in spec.experiments
               if experiments[e].get("variants_of")}
    for column, exp in bound.items():
        if exp not in spec.experiments and exp in by_base:
            bound[column] = by_base[exp]
        elif exp not in spec.experiments:
            raise RegistryError(f"{owner}: column {column!r} names experiment {exp!r}, which the "
                                f"table does not show; its experiments: "
                                f"{', '.join(spec.experiments)}")
    idle = [e for e in spec.experiments if e not in bound.values()]
    if idle:
        raise RegistryError(f"{owner}: no column shows experiment(s) {', '.join(idle)}")
    return dataclasses.replace(spec, column_experiment=bound)


def validate_runs(reg: Registry) -> None:
    """Every run config through the library's own validation (RunConfig), before any job starts,
    and every figure's columns recorded by its runs (:func:`check_figures_recorded`).

    Skipped (silently) when a plug-in's module cannot be imported here.
    """
    for key, spec in reg.runs.items():
        try:
            RunConfig.from_dict(dict(spec.config))
        except ImportError:  # pragma: no cover
            return
        except ConfigError as err:
            raise RegistryError(f"run {key} (experiments {', '.join(spec.experiments)}): "
                                f"{err}") from err
    check_figures_recorded(reg)


def unrecorded(reg: Registry, runs: list[str], column: str) -> str | None:
    """None when every run of ``runs`` records metrics.csv ``column``; else what is wrong, for an
    error that names its figure or claim: how many do not (``fedmgda.config.RECORDED_ONLY_WITH``:
    the config flag the column needs) and the experiments to set the flag in."""
    flag = RECORDED_ONLY_WITH.get(column)
    missing = [key for key in runs
               if flag and not reg.runs[key].config.get(flag, RUN_DEFAULTS[flag])]
    if not missing:
        return None
    experiments = sorted({e for key in missing for e in reg.runs[key].experiments})
    return (f"reads {column}, which {len(missing)} of its runs do not record ({flag}: false); "
            f"set run: {{{flag}: true}} in experiment(s) {', '.join(experiments)}")


def check_figures_recorded(reg: Registry) -> None:
    """Every metrics.csv column a figure plots is recorded by the runs it shows (a figure of runs
    without ``track_improvement`` would plot nothing)."""
    for name, spec in reg.figures.items():
        runs = [key for row in rows_selected(reg.rows, spec) for key in row.runs]
        columns = [spec.metric, *spec.metrics, *(src.partition(".")[2]
                                                 for src in spec.columns.values()
                                                 if src.startswith("metrics."))]
        for problem in filter(None, (unrecorded(reg, runs, column)
                                     for column in filter(None, columns))):
            raise RegistryError(f"figure {name}: {problem}")


def rows_selected(rows: dict[str, list[Row]], spec: TableSpec | FigureSpec) -> list[Row]:
    """The rows a table or figure shows: its experiments' rows (a figure's: those its ``select``
    patterns match)."""
    sel = spec.select if isinstance(spec, FigureSpec) else None
    out = []
    for e in spec.experiments:
        for row in rows.get(e, []):
            if sel is None or any(fnmatch.fnmatchcase(row.key, p) for p in sel):
                out.append(row)
    return out


def item_spec(reg: Registry, spec: TableSpec | FigureSpec) -> TableSpec | FigureSpec:
    """What a table or figure rule hands its job: the spec with its rows (with run keys) and, for a
    table of kind variants, the readings the varied experiment itself uses (``chosen``)."""
    rows = rows_selected(reg.rows, spec)
    if spec.kind != "variants":
        return dataclasses.replace(spec, rows=rows)
    chosen: dict[str, str] = {}
    for name in spec.experiments:
        base = reg.experiments[name]["variants_of"]
        chosen.update(reg.experiments[base].get("variants") or {})
    return dataclasses.replace(spec, rows=rows, chosen=chosen)


OVERRIDE_KEYS = ("profile", "device", "seeds", "rounds", "only", "run_overrides",
                 "experiment_overrides", "partition_jobs", "allow_download")


def _coerce(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _coerce(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_coerce(v) for v in value]
    if isinstance(value, str):
        import yaml

        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            return value
        if parsed is None or isinstance(parsed, (bool, int, float)):
            return parsed
    return value


def coerce_overrides(config: dict[str, Any]) -> dict[str, Any]:
    """Typed values for the override keys: ``snakemake --config seeds=[1]`` parses nested values
    as strings (YAML BaseLoader), so ``['1']`` becomes ``[1]`` here. Only the override keys are
    touched; strings such as ``"1/10"`` or ``"full"`` stay strings."""
    for key in OVERRIDE_KEYS:
        if key in config:
            config[key] = _coerce(config[key])
    return config


def load_config(path: str) -> dict[str, Any]:
    import yaml

    with open(path) as fh:
        return yaml.safe_load(fh)
