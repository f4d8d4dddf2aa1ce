"""What the registry hands the table, figure and claims jobs: typed specs, and their one JSON form.

The registry (:func:`fedmgda.experiments.expand`) turns the config's ``tables:``, ``figures:`` and
``claims:`` entries into :class:`TableSpec`, :class:`FigureSpec` and :class:`ClaimSpec` and each
experiment's grid into :class:`Row` objects; ``fedmgda.experiments.item_spec`` attaches a table's or
figure's rows. A Snakemake rule passes a spec to its job as JSON text (:func:`spec_to_json`; keys
sorted, so the rule's params change only when the spec's content does) and the job reads it back
(:func:`spec_from_json`): the one place specs are serialised. The YAML config keeps its own format
(``config.schema.yaml``); these classes are what the code reads after the registry resolved it.

Nothing here imports anything beyond the standard library.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any, TypeVar


@dataclass
class Row:
    """One table / figure row: a grid entry under one attack (and, for a sensitivity experiment,
    one protocol reading), with its runs over seeds."""
    experiment: str
    key: str  # what ``select`` patterns and the paper's rows match
    label: str  # paper notation, e.g. "FedMGDA+ η=1.5, decay=1/10"
    algorithm: str
    hparams: dict[str, float]
    attack: dict[str, Any]  # {"kind": "none"} or {"kind", "user", "value"}
    seeds: list[int]
    runs: list[str]  # run keys, in seed order
    variant: str | None = None  # a sensitivity experiment's row: the variant varied and its reading
    reading: str | None = None
    # per run, the registry's config hash (``fedmgda.results.config_hash``): what the readers check
    # each folder against (empty: not checked)
    config_hashes: list[str] = field(default_factory=list)

    @property
    def attacked(self) -> bool:
        return self.attack.get("kind", "none") != "none"


@dataclass(frozen=True)
class TableSpec:
    """A table (``tables:`` of the config, ``fedmgda.tables``)."""
    name: str
    experiments: list[str]  # the experiments whose rows it shows
    columns: dict[str, str]  # column -> source (``final.<stat>``, ``protocol.<stat>``, ...)
    kind: str = "stats"  # stats | best_of | variants
    title: str | None = None
    paper: str | None = None  # the paper's table it is compared with (paper_tables.csv), or None
    rank_by: str | None = None  # best_of: the column ranking the rows
    # per column: the verdict band's floor
    tolerance: dict[str, float] = field(default_factory=dict)
    scale: float | None = None  # None: each source's display scale
    # column -> the experiment it shows
    column_experiment: dict[str, str] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)  # item_spec: the rows it shows
    chosen: dict[str, str] = field(default_factory=dict)  # variants: the base experiment's readings

    @property
    def heading(self) -> str:
        return self.name if self.title is None else self.title


@dataclass(frozen=True)
class FigureSpec:
    """A figure (``figures:`` of the config, ``fedmgda.figures``); a config's ``experiment`` is a
    one-element ``experiments``."""
    name: str
    kind: str  # curves | violin | bars | tradeoff | reading_window | gaps
    experiments: list[str]
    select: list[str] | None = None  # glob patterns on row keys; None: every row
    # curves: the metrics.csv column; tradeoff: the y axis (default std_acc)
    metric: str | None = None
    ewm: int | None = None  # curves: span of the exponential moving average; None: raw
    logy: bool = False
    style_by: str | None = None  # "attack": attacked rows dashed
    title: str | None = None
    ylabel: str | None = None
    columns: dict[str, str] = field(default_factory=dict)  # bars: column -> source
    inset_last: int | None = None  # curves: an inset of the last N rounds
    # reading_window: metrics.csv columns, a panel each
    metrics: list[str] = field(default_factory=list)
    window_last: int | None = None  # reading_window: the late window shaded (its last N rounds)
    xlabels: list[str] = field(default_factory=list)  # gaps: one label per experiment, in order
    rows: list[Row] = field(default_factory=list)  # item_spec: the rows it shows


@dataclass(frozen=True)
class ClaimSpec:
    """A claim of the paper resolved to rows (``claims:`` of the config, ``fedmgda.claims``):
    a pair (``a`` against row ``b`` or the number ``threshold``) or a series (``rows``, ordered by
    ``by`` with their ``params``)."""
    id: str
    source: str
    paper: str
    quantity: str
    compare: str  # identical | at_least | close | monotone
    seeds: str  # paired | mean
    scale: float
    tolerance: float
    # {last: N} or {first: N}; empty: all rounds
    window: dict[str, int] = field(default_factory=dict)
    agg: str = "mean"
    margin: float | None = None
    a: Row | None = None
    b: Row | None = None
    threshold: float | None = None  # b given as a number
    rows: list[Row] = field(default_factory=list)  # a series' rows, in order
    params: list[float] = field(default_factory=list)  # their values of ``by`` (empty without by)
    by: str | None = None
    direction: str | None = None  # monotone: increasing | decreasing
    # a | b: that row's seed std widens the tolerance (close) or the margin (at_least)
    spread_of: str | None = None
    minus: list[Row] = field(default_factory=list)  # a gap series: rows[i] - minus[i] per seed

    @property
    def is_series(self) -> bool:
        return bool(self.rows)

    @property
    def compared_rows(self) -> list[Row]:
        """The rows whose runs it reads: a series' rows (and a gap series' ``minus`` rows), or a
        and b (when b is a row)."""
        if self.is_series:
            return self.rows + self.minus
        return [r for r in (self.a, self.b) if r is not None]


Spec = TypeVar("Spec", TableSpec, FigureSpec, ClaimSpec)


class SpecError(ValueError):
    """Spec JSON that does not fit its class (an unknown or missing key)."""


def spec_to_json(spec: Spec | list[Spec]) -> str:
    """A spec (or a list of specs) as JSON text, equal specs giving equal text: a spec's fields are
    written with their keys sorted, and a mapping as ``[key, value]`` pairs in its order, since
    that order is content (a table's columns, the tolerances its band text lists)."""
    return json.dumps(_plain(spec), sort_keys=True, ensure_ascii=False)


def spec_from_json(text: str, cls: type[Spec]) -> Spec | list[Spec]:
    """The spec (or list of specs) of class ``cls`` that :func:`spec_to_json` wrote."""
    data = json.loads(text)
    return [_build(cls, d) for d in data] if isinstance(data, list) else _build(cls, data)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return [[k, _plain(v)] for k, v in value.items()]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _build(cls: type, data: dict[str, Any]):
    """``cls`` from the JSON object of :func:`_plain`, each field decoded by its type."""
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(data) - set(hints))
    if unknown:
        raise SpecError(f"{cls.__name__}: unknown key(s) {', '.join(unknown)}")
    try:
        return cls(**{key: _decode(hints[key], value) for key, value in data.items()})
    except TypeError as err:  # a missing key
        raise SpecError(f"{cls.__name__}: {err}") from None


def _decode(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):  # X | None
        return _decode(next(a for a in args if a is not type(None)), value)
    if origin is dict:
        return {k: _decode(args[1], v) for k, v in value}
    if origin is list:
        return [_decode(args[0], v) for v in value]
    if dataclasses.is_dataclass(hint):
        return _build(hint, value)
    return value
