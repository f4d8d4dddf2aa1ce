"""Partitioners: which pooled samples belong to which user, and each user's train/val/test cut.

``PARTITIONERS`` holds one :class:`Partitioner` per partition a run config can name, as
``fedmgda.metrics.STATISTICS`` holds one entry per statistic. An entry declares its name, whether
the run seed drives it (``seeded``), the dataset options it reads (``reads``) and the option values
that only it honours (``owns``), and it builds the users' index lists (``build``); ``check`` and
``size_error`` say, before any job, what makes options unusable. Everything else asks the registry:
the partition names of the catalog (``fedmgda.catalog.PARTITIONS``, which the config schema's
``partition`` enum must equal), the run config's checks (``fedmgda.catalog.Dataset.size_error``),
the seed a partition file is stored under (``Dataset.is_seeded``) and
``fedmgda.data.partition.build_partition``, a short dispatch. A dataset offers partitions by name
and declares the options they read, with its defaults (``fedmgda.catalog.DATASETS``); an option
whose value names a set of other options (F-MNIST's ``shard_setting``) is one of its ``presets``,
expanded before a partitioner sees the options. This module needs numpy only, no torch.

The shard and iid partitioners follow the authors' code (docs/protocol.md §1.3) call for call: the
legacy numpy RNG seeded once with ``seed`` (``np.random.RandomState(seed)`` draws the same stream
as ``np.random.seed(seed)`` + the global functions), the same ``choice`` calls in the same order,
and real Python ``set`` objects wherever the code iterates one (the remaining pool is rebuilt
from a set difference; a user's shards are concatenated in set-iteration order). The per-user
split is positional (docs/protocol.md §1.4): first ⌊0.8n⌋ train, next up to ⌊0.9n⌋ validation, rest
test, so under shards the test split is the tail of the user's last shard. The option
``local_test: global_shards`` (F-MNIST) replaces that cut by FedMDFG's (:func:`global_test_shards`).
The domain partitioner's ``shift_by_one`` is the FedMGDA+ code's Adult clients (1-based row ids in
set order, docs/protocol.md §1.5).

Adding a partitioner (docs/datasets.md §6; tests/data/test_recipes.py follows these steps):

1. Here, a subclass of :class:`Partitioner`: ``name``, ``seeded``, ``reads`` and
   ``build(raw, seed, options) -> Split`` (:func:`split_users` cuts each user 80/10/10); ``owns``,
   ``check`` and ``size_error`` where it has them. Its instance goes into ``PARTITIONERS``.
2. Its name in the ``partition`` enum of src/fedmgda/config.schema.yaml, in the order of
   ``PARTITIONERS`` (tests/test_catalog.py checks), then ``make config-docs``.
3. Its name in the ``partitions`` of each dataset that offers it (``fedmgda.catalog.DATASETS``),
   the options it reads, with their defaults, in that dataset's ``options``; a line in
   docs/datasets.md §3.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol

import numpy as np

from fedmgda.errors import DataError
from fedmgda.legacy_sort import numpy_1_17_argsort

# the values of options that the partitioners read, the default first
SORTS = ("stable", "quicksort")  # numpy's argsort of the labels; quicksort: the authors' call
# a user's test samples under shards (docs/datasets.md)
LOCAL_TESTS = ("own_shard", "global_shards")
SPLITS = ("80_10_10", "source")  # natural users' cut: positional, or the source's own train/test

# a user's samples are cut 80/10/10 by position (split_user): from 2 samples on, it has one to
# train on and one to test on
MIN_USER_SAMPLES = 2


class Pool(Protocol):
    """What a partitioner reads of a dataset's pooled samples
    (``fedmgda.data.partition.RawData``)."""

    name: str
    users: list[str] | None  # natural users (writers, roles, devices, domains)
    user_idx: list[np.ndarray] | None  # per natural user, its indices into the pool
    # per natural user, the source's (train, test)
    source_split: list[tuple[np.ndarray, np.ndarray]] | None
    test_pool: np.ndarray | None  # indices of a global test set pooled after the users' samples

    @property
    def labels(self) -> np.ndarray: ...


class Split(NamedTuple):
    """Per user, its indices into the pool: train, validation, test; and the users' names (None:
    numbered)."""

    train: list[np.ndarray]
    val: list[np.ndarray]
    test: list[np.ndarray]
    users: list[str] | None = None


class Partitioner:
    """One partition a run config can name (``partition:``); subclasses declare the facts.

    name:      the name runs, datasets and partition files use.
    seeded:    True: the partition depends on the run seed; False: it does not (its file is stored
               with seed 0 and shared by every seed); an option's name: it does when that option is
               true (natural's ``shuffle``).
    reads:     the dataset options it reads: ``build``, ``check`` and ``size_error`` see these
               (those the dataset has, defaults filled in, presets expanded), and no others.
    owns:      option values that only the partitioners owning them honour, e.g. shards'
               ``local_test: global_shards``: under another partitioner they are an error before
               any job.
    """

    name: str = ""
    seeded: bool | str = False
    reads: tuple[str, ...] = ()
    owns: Mapping[str, tuple[Any, ...]] = MappingProxyType({})

    def build(self, raw: Pool, seed: int, options: Mapping[str, Any]) -> Split:
        """The users' index lists; ``seed`` is the run seed where ``seeded`` says it matters, else
        0. Raises DataError (naming ``raw.name``) where the pool cannot serve the options."""
        raise NotImplementedError

    def check(self, options: Mapping[str, Any]) -> str | None:
        """What makes ``options`` unusable whatever the data (a value or a combination it cannot
        take), without the dataset's name, or None. Run before any job and before ``build``."""
        return None

    def size_error(self, dataset: str, samples: int, options: Mapping[str, Any]) -> str | None:
        """What leaves a user of ``dataset`` (``samples`` samples to deal out, from the catalog)
        fewer than MIN_USER_SAMPLES, or None. Run before any job."""
        return None

    def is_seeded(self, options: Mapping[str, Any]) -> bool:
        return (self.seeded is True
                or (isinstance(self.seeded, str) and bool(options.get(self.seeded))))

    def select(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """The options it reads, of ``options``."""
        return {key: options[key] for key in self.reads if key in options}


def options_error(scheme: str, options: Mapping[str, Any],
                  defaults: Mapping[str, Any] | None = None) -> str | None:
    """What makes ``options`` (a dataset's, presets expanded) unusable under the partition
    ``scheme``, without the dataset's name, or None: an option value only other partitioners honour
    (``owns``; the dataset's default, from ``defaults``, is named as the value to use), or what the
    partitioner's ``check`` refuses."""
    partitioner = get_partitioner(scheme)

    def owners(key: str, value: Any) -> list[str]:
        return [p.name for p in PARTITIONERS.values() if value in p.owns.get(key, ())]

    for key, value in options.items():
        if owners(key, value) and scheme not in owners(key, value):
            default = (defaults or {}).get(key, value)  # named where the partition can take it
            takes = (default != value
                     and (not owners(key, default) or scheme in owners(key, default)))
            instead = (f"; the {scheme} partition needs {key} {default!r}" if takes
                       else f", not {scheme!r}")
            return f"{key} {value!r} needs the {' or '.join(owners(key, value))} partition{instead}"
    return partitioner.check(partitioner.select(options))


def get_partitioner(name: str) -> Partitioner:
    if name not in PARTITIONERS:
        raise DataError(f"unknown partition scheme {name!r}; known: {', '.join(PARTITIONERS)}")
    return PARTITIONERS[name]


# --------------------------------------------------------------------------- per-user split
def split_user(idxs, train_frac: float = 0.8, val_frac: float = 0.1):
    """Positional split of one user's index list (docs/protocol.md §1.4, ``main/update.py``)."""
    idxs = np.asarray(idxs, dtype=np.int64)
    n = len(idxs)
    a, b = int(train_frac * n), int((train_frac + val_frac) * n)
    return idxs[:a], idxs[a:b], idxs[b:]


def split_users(groups: Iterable, users: list[str] | None = None) -> Split:
    """Each user's index list (in ``groups``) cut 80/10/10 by position (:func:`split_user`)."""
    cuts = [split_user(idxs) for idxs in groups]
    return Split([c[0] for c in cuts], [c[1] for c in cuts], [c[2] for c in cuts], users)


def source_cut(pairs: Iterable[tuple[Any, Any]], users: list[str] | None) -> Split:
    """The source's own (train, test) of each user; no validation samples."""
    pairs = [(np.asarray(tr, dtype=np.int64), np.asarray(te, dtype=np.int64)) for tr, te in pairs]
    return Split([tr for tr, _ in pairs], [np.zeros(0, dtype=np.int64) for _ in pairs],
                 [te for _, te in pairs], users)


# --------------------------------------------------------------------------- the authors'
# partitions
def iid_partition(num_items: int, num_users: int, seed: int) -> list[np.ndarray]:
    """``main/sampling.py`` iid: ⌊N/users⌋ items per user drawn without replacement, in set
    order."""
    drawn = _draw_without_replacement(np.random.RandomState(seed), num_items,
                                      num_items // num_users, num_users)
    return [np.fromiter(items, dtype=np.int64, count=len(items)) for items in drawn]


def _draw_without_replacement(rng: np.random.RandomState, pool_size: int, per_user: int,
                              num_users: int) -> list[set[int]]:
    """The authors' dealing loop of both samplers (``main/sampling.py``): each user in turn draws
    ``per_user`` of the remaining ids 0..pool_size-1 (``rng.choice``, no replacement) as a Python
    ``set``, and the pool becomes the set difference, rebuilt as a list in set-iteration order."""
    pool = list(range(pool_size))
    out = []
    for _ in range(num_users):
        drawn = set(rng.choice(pool, per_user, replace=False).tolist())
        pool = list(set(pool) - drawn)
        out.append(drawn)
    return out


def sort_by_label(labels: np.ndarray, n: int, sort: str = "stable") -> np.ndarray:
    """Image ids 0..n-1 in label order, the same on every machine. ``stable`` keeps ascending ids
    within a class; ``quicksort`` is the authors' call, ``np.argsort`` with numpy's default kind,
    in the order their numpy (1.17) gave it (:func:`numpy_1_17_argsort`; today's numpy orders a
    class differently on each CPU family, docs/protocol.md §1.3)."""
    if sort not in SORTS:
        raise DataError(f"sort must be {' or '.join(map(repr, SORTS))}, not {sort!r}")
    labels = np.asarray(labels, dtype=np.int64)[:n]
    if sort == "quicksort":
        return numpy_1_17_argsort(labels)
    return np.argsort(labels, kind="stable")


def shard_partition(labels, num_users: int, num_shards: int, shard_size: int, seed: int,
                    sort: str = "stable") -> list[np.ndarray]:
    """``main/sampling.py`` shard non-iid: sort by label, cut ``num_shards`` shards of
    ``shard_size``, give each user ⌊num_shards/num_users⌋ random shards (legacy RNG, set order)."""
    labels = np.asarray(labels)
    if num_shards * shard_size > len(labels):
        raise DataError(f"{num_shards} shards x {shard_size} > {len(labels)} samples")
    if num_shards < num_users:
        raise DataError(f"{num_shards} shards cannot serve {num_users} users")
    return _deal_shards(np.random.RandomState(seed),
                        sort_by_label(labels, num_shards * shard_size, sort),
                        num_users, num_shards, shard_size)


def _deal_shards(rng: np.random.RandomState, idxs: np.ndarray, num_users: int, num_shards: int,
                 shard_size: int) -> list[np.ndarray]:
    """Cut the label-sorted ``idxs`` into ``num_shards`` shards of ``shard_size`` and give each user
    ⌊num_shards/num_users⌋ of them, drawn without replacement with ``rng`` (set order)."""
    dealt = _draw_without_replacement(rng, num_shards, num_shards // num_users, num_users)
    return [np.concatenate([idxs[s * shard_size:(s + 1) * shard_size] for s in chosen])
            for chosen in dealt]


def global_test_shards(labels, num_users: int, num_shards: int, shard_size: int, seed: int,
                       sort: str = "stable") -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(train, test) per user under FedMDFG's F-MNIST split (zibinpan/FedMDFG,
    ``fedplat/dataloaders/DataLoader_fashion.py``), ``labels`` = the pool's labels, users' samples
    first, then the global test set at positions ``len(labels) - n_test ..``, n_test = the rest.

    train: the user's shards exactly as :func:`shard_partition` deals them, all of them (no
    validation or test cut): their client trains on its whole local training data
    (``fedplat/Client.py`` L264-271, ``for step, (batch_x, batch_y) in
    enumerate(self.local_training_data)``).
    test: the same ``create_data_pool`` applied to the global test set (DataLoader_fashion.py
    L119-121): sorted by label (L78), cut into as many shards as the training set
    (``amount = input_data.shape[0] // split_num``, L83: 10 000 / 200 = 50 images), and each user
    draws ⌊num_shards/num_users⌋ of them (``pick_num``, L97-100) without replacement across users
    (``split_data_indices_list.remove``, L100). The test draws continue the RNG stream of the
    training draws (as theirs continue Python's ``random`` stream after the training pool,
    L119 then L121), so they are deterministic per seed and independent of the user's training
    classes. Not replicated: their last shard of each set is one image short (L89-90 cut at
    ``shape[0] - 1``), and their stream is Python's ``random``, not numpy's.
    """
    labels = np.asarray(labels)
    n_train = num_shards * shard_size
    test_labels = labels[n_train:]
    n_test = len(test_labels)
    if n_test < num_shards:
        raise DataError(f"local_test global_shards: {n_test} global test images cannot make "
                        f"{num_shards} shards")
    rng = np.random.RandomState(seed)
    train = _deal_shards(rng, sort_by_label(labels, n_train, sort), num_users, num_shards,
                         shard_size)
    test = _deal_shards(rng, n_train + sort_by_label(test_labels, n_test, sort), num_users,
                        num_shards,
                        n_test // num_shards)
    return train, test


def shifted_ids(rows) -> np.ndarray:
    """The FedMGDA+ code's Adult client of the rows ``rows`` (``adult/sampling.py``,
    docs/protocol.md §1.5): their 1-based row numbers used as 0-based ids, i.e. every id one row too
    far, iterated in CPython set order. An id equal to the pool's size (past the last row) can only
    land in the test tail of a client; :class:`Domain` drops it there (the authors never read
    it)."""
    return np.asarray(list(set((np.asarray(rows, dtype=np.int64) + 1).tolist())), dtype=np.int64)


def shard_geometry(options: Mapping[str, Any], n: int) -> tuple[int, int]:
    """(number of shards, samples a shard) of the shards partition of ``n`` samples: ``num_shards``
    x ``shard_size`` where given, else ``num_users`` x ``shards_per_user`` shards of as many samples
    as fit."""
    if "num_shards" in options and "shard_size" in options:
        return int(options["num_shards"]), int(options["shard_size"])
    num_shards = int(options["num_users"]) * int(options["shards_per_user"])
    return num_shards, n // num_shards


def dirichlet_partition(labels, num_users: int, alpha: float, min_samples: int, seed: int,
                        max_draws: int = 1000) -> tuple[list[np.ndarray], np.ndarray]:
    """Dirichlet label skew (Hsu et al. 2019), NIID-Bench's ``noniid-labeldir`` reading (Li et al.
    2021, ``experiments.py`` ``partition_data``), as flwr-datasets' ``DirichletPartitioner``
    implements it: for each class in label order, its samples (shuffled) are cut among the users in
    proportions drawn from Dir(alpha, ..., alpha), a user already holding N / num_users samples or
    more getting no further share (the balancing of both codes); the whole draw is repeated until
    every user holds at least ``min_samples``. Each user's samples are then shuffled.

    The legacy RNG ``RandomState(seed)`` as the package's other partitions. Returns the users'
    index lists and the proportions used, one row per class (after balancing, summing to 1), so
    that a user's count of class c is the difference of ``floor(cumsum(p[c]) * n_c)`` there."""
    labels = np.asarray(labels, dtype=np.int64)
    classes, n = np.unique(labels), len(labels)
    rng = np.random.RandomState(seed)
    for _ in range(max_draws):
        users: list[list[int]] = [[] for _ in range(num_users)]
        proportions = np.zeros((len(classes), num_users))
        for row, c in enumerate(classes):
            members = np.flatnonzero(labels == c)
            rng.shuffle(members)
            p = rng.dirichlet(np.full(num_users, float(alpha)))
            kept = p * np.array([len(u) < n / num_users for u in users])
            p = kept if kept.sum() > 0 else p  # every eligible share underflowed to 0 (tiny alpha)
            proportions[row] = p = p / p.sum()
            cuts = (np.cumsum(p) * len(members)).astype(int)[:-1]
            for user, part in zip(users, np.split(members, cuts), strict=True):
                user.extend(part.tolist())
        if min(len(u) for u in users) >= min_samples:
            out = [np.asarray(u, dtype=np.int64) for u in users]
            for u in out:
                rng.shuffle(u)
            return out, proportions
    raise DataError(f"dirichlet: {max_draws} draws of Dir({alpha}) left a user with fewer than "
                    f"{min_samples} of {n} samples among {num_users} users; raise dirichlet_alpha "
                    "or lower dirichlet_min_samples")


def apportion(counts: np.ndarray, total: int) -> np.ndarray:
    """``total`` split in proportion to ``counts`` by largest remainders (Hamilton's method): each
    share within 1 of its exact quota ``counts * total / counts.sum()``, ties to the first."""
    counts = np.asarray(counts, dtype=np.int64)
    quota = counts * total / max(int(counts.sum()), 1)
    share = np.floor(quota).astype(np.int64)
    order = np.argsort(-(quota - share), kind="stable")
    share[order[:total - int(share.sum())]] += 1
    return share


def stratified_cut(idxs: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, ...]:
    """One user's samples cut into train / validation / test of the sizes of :func:`split_user`
    (⌊0.8n⌋, up to ⌊0.9n⌋, the rest), class by class: the test and validation shares of each class
    apportioned to its count (:func:`apportion`), so that each part keeps the user's label
    proportions as closely as whole samples can. Within a class, the samples go in their order in
    ``idxs`` to train, then validation, then test; each part keeps the order of ``idxs``."""
    idxs = np.asarray(idxs, dtype=np.int64)
    n = len(idxs)
    n_val, n_test = int(0.9 * n) - int(0.8 * n), n - int(0.9 * n)
    own = np.asarray(labels)[idxs]
    classes, counts = np.unique(own, return_counts=True)
    test = apportion(counts, n_test)
    val = apportion(counts - test, n_val)
    part = np.zeros(n, dtype=np.int64)  # 0 train, 1 validation, 2 test
    for c, n_c, v, t in zip(classes, counts, val, test, strict=True):
        where = np.flatnonzero(own == c)
        part[where[n_c - v - t:n_c - t]] = 1
        part[where[n_c - t:]] = 2
    return idxs[part == 0], idxs[part == 1], idxs[part == 2]


# --------------------------------------------------------------------------- the partitioners
_NEEDS = f"a user needs at least {MIN_USER_SAMPLES} (one to train on, one to test on)"


class Shards(Partitioner):
    """The authors' non-iid shards: label-sorted shards, ⌊shards/users⌋ random ones a user."""

    name = "shards"
    seeded = True
    reads = ("num_users", "num_shards", "shard_size", "shards_per_user", "sort", "local_test")
    owns = MappingProxyType({"local_test": LOCAL_TESTS[1:]})

    def check(self, options):
        for key, values in (("sort", SORTS), ("local_test", LOCAL_TESTS)):
            if options.get(key, values[0]) not in values:
                return f"{key} must be {' or '.join(map(repr, values))}, not {options[key]!r}"
        return None

    def build(self, raw, seed, options):
        labels = raw.labels
        num_users, sort = int(options["num_users"]), options.get("sort", SORTS[0])
        num_shards, shard_size = shard_geometry(options, len(labels))
        if options.get("local_test", LOCAL_TESTS[0]) == "own_shard":
            return split_users(shard_partition(labels, num_users, num_shards, shard_size, seed,
                                               sort))
        if raw.test_pool is None or len(raw.test_pool) != len(labels) - num_shards * shard_size:
            raise DataError(f"{raw.name}: local_test 'global_shards' needs the global test set "
                            f"pooled right after the {num_shards} x {shard_size} training images")
        train, test = global_test_shards(labels, num_users, num_shards, shard_size, seed, sort)
        return Split(train, [np.zeros(0, dtype=np.int64) for _ in train], test)

    def size_error(self, dataset, samples, options):
        users, shards, size = options["num_users"], *shard_geometry(options, samples)
        # shards cut to fit: each user gets shards_per_user x (n // shards)
        if "shards_per_user" in options:
            per_user = options["shards_per_user"] * size
            if per_user < MIN_USER_SAMPLES:
                return (f"{dataset}: num_users x shards_per_user = {users} x "
                        f"{options['shards_per_user']} shards of its {samples} samples "
                        f"give each user {per_user}; {_NEEDS}: lower num_users or shards_per_user "
                        f"so that num_users x max(shards_per_user, {MIN_USER_SAMPLES}) "
                        f"<= {samples}")
            return None
        if shards * size > samples:
            return (f"{dataset}: num_shards x shard_size = {shards} x {size} needs "
                    f"{shards * size} samples, it has {samples}: lower them")
        per_user = shards // users * size
        if per_user < MIN_USER_SAMPLES:
            return (f"{dataset}: num_users = {users} with {shards} shards of {size} samples gives "
                    f"each user {per_user}; "
                    f"{_NEEDS}: use num_users <= {shards // -(-MIN_USER_SAMPLES // size)}")
        return None


class IID(Partitioner):
    """The authors' iid: ⌊N/users⌋ samples a user, drawn without replacement."""

    name = "iid"
    seeded = True
    reads = ("num_users",)

    def build(self, raw, seed, options):
        return split_users(iid_partition(len(raw.labels), int(options.get("num_users", 100)), seed))

    def size_error(self, dataset, samples, options):
        users = options["num_users"]
        if samples // users < MIN_USER_SAMPLES:
            return (f"{dataset}: num_users = {users} gives each user {samples // users} of its "
                    f"{samples} samples (iid); "
                    f"{_NEEDS}: use num_users <= {samples // MIN_USER_SAMPLES}")
        return None


class Natural(Partitioner):
    """One user per natural user of the source (writer, role, device, class), in the loader's
    order."""

    name = "natural"
    seeded = "shuffle"  # a user's samples shuffled with the run seed before the cut
    reads = ("split", "shuffle")
    owns = MappingProxyType({"split": ("source",)})

    def check(self, options):
        split = options.get("split", SPLITS[0])
        return None if split in SPLITS else f"split must be 'source' or '80_10_10', not {split!r}"

    def build(self, raw, seed, options):
        users = list(raw.users or [])
        if options.get("split", SPLITS[0]) == "source" and raw.source_split is not None:
            return source_cut(raw.source_split, users)
        # split source without one: 80/10/10
        groups = [np.asarray(idxs, dtype=np.int64) for idxs in raw.user_idx]
        if options.get("shuffle", False):
            rng = np.random.RandomState(seed)
            groups = [idxs[rng.permutation(len(idxs))] for idxs in groups]
        return split_users(groups, users)


class Domain(Partitioner):
    """One user per domain of the pool (Adult: PhD, non-PhD), each domain's rows in file order."""

    name = "domain"
    seeded = False
    reads = ("clients", "split", "shift_by_one")
    owns = MappingProxyType({"split": ("source",)})

    def check(self, options):
        split = options.get("split", SPLITS[0])
        if split not in SPLITS:
            return f"split must be 'source' or '80_10_10', not {split!r}"
        if split == "source" and options.get("shift_by_one", False):
            return ("shift_by_one (the FedMGDA+ code's 1-based row ids) only applies to split "
                    "'80_10_10', not to split 'source'")
        return None

    def build(self, raw, seed, options):
        # both, or one domain alone
        users, clients = list(raw.users or []), options.get("clients", "both")
        keep = [k for k, user in enumerate(users) if clients in ("both", user)]
        if not keep:
            raise DataError(f"{raw.name}: clients must be 'both' or one of {users}, "
                            f"not {clients!r}")
        names = [users[k] for k in keep]
        # q-FFL's: the domain's train rows, its test rows
        if options.get("split", SPLITS[0]) == "source":
            return source_cut([raw.source_split[k] for k in keep], names)
        if not options.get("shift_by_one", False):
            return split_users([np.asarray(raw.user_idx[k], dtype=np.int64) for k in keep], names)
        n = len(raw.labels)
        cut = split_users([shifted_ids(raw.user_idx[k]) for k in keep], names)
        return Split(*([p[p < n] for p in part] for part in cut[:3]), names)


class Dirichlet(Partitioner):
    """Dirichlet label skew: each class dealt among the users in Dir(alpha) proportions
    (:func:`dirichlet_partition`); each user's own samples cut 80/10/10 per class
    (:func:`stratified_cut`), so that a user's test samples follow its own label distribution."""

    name = "dirichlet"
    seeded = True
    reads = ("num_users", "dirichlet_alpha", "dirichlet_min_samples")

    def check(self, options):
        alpha = options.get("dirichlet_alpha", 1.0)
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha > 0:
            return f"dirichlet_alpha must be a number > 0, got {alpha!r}"
        least = options.get("dirichlet_min_samples", MIN_USER_SAMPLES)
        if least < MIN_USER_SAMPLES:
            return f"dirichlet_min_samples must be >= {MIN_USER_SAMPLES} ({_NEEDS}), got {least!r}"
        return None

    def build(self, raw, seed, options):
        groups, _ = dirichlet_partition(
            raw.labels, int(options["num_users"]), float(options["dirichlet_alpha"]),
            int(options["dirichlet_min_samples"]), seed)
        cuts = [stratified_cut(idxs, raw.labels) for idxs in groups]
        return Split(*(list(part) for part in zip(*cuts, strict=True)))

    def size_error(self, dataset, samples, options):
        users, least = options["num_users"], options["dirichlet_min_samples"]
        if users * least > samples:
            return (f"{dataset}: num_users x dirichlet_min_samples = {users} x {least} needs "
                    f"{users * least} samples, it has {samples}: lower them")
        return None


# Every partition a run config can name, in the order of the config schema's enum. Add one here
# (module docstring, "Adding a partitioner").
PARTITIONERS: dict[str, Partitioner] = {
    p.name: p for p in (Shards(), IID(), Natural(), Domain(), Dirichlet())}
