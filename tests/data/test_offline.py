"""The two offline datasets (Synthetic(α, β), scikit-learn digits) and the registry."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedmgda.data import DATASET_SPECS, DataError, DatasetSpec, load_federated, make_partition


def _label_hist(fd, u, k):
    idx = torch.cat([fd.train_idx[u], fd.test_idx[u]])
    return np.bincount(fd.y[idx].numpy(), minlength=k) / len(idx)


def test_synthetic_is_deterministic_given_data_seed_and_independent_of_run_seed(tmp_path):
    a = load_federated("synthetic", tmp_path, seed=1)
    b = load_federated("synthetic", tmp_path, seed=9)
    c = load_federated("synthetic", tmp_path, options={"data_seed": 1})
    assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
    assert all(torch.equal(x, y) for x, y in zip(a.test_idx, b.test_idx, strict=True))
    assert not torch.equal(a.y[:50], c.y[:50]) or a.x.shape != c.x.shape


def test_synthetic_sizes_and_heterogeneity(tmp_path):
    fd = load_federated("synthetic", tmp_path)
    part = make_partition("synthetic", tmp_path, None, 1)
    sizes = [len(part.user_indices(u)) for u in range(part.num_users)]
    assert sum(sizes) == len(fd.y)
    assert fd.num_users == 30 and fd.x.shape[1] == 60 and fd.x.dtype == torch.float32
    assert min(sizes) >= 50 and max(sizes) <= 500 and len(set(sizes)) > 5  # power-law sizes
    hists = np.stack([_label_hist(fd, u, 10) for u in range(fd.num_users)])
    # users' label distributions differ: mean total-variation distance to the pooled one
    pooled = np.bincount(fd.y.numpy(), minlength=10) / len(fd.y)
    assert np.mean(0.5 * np.abs(hists - pooled).sum(1)) > 0.3
    assert max(int(y) for y in fd.y) < 10


def test_synthetic_matches_the_q_ffl_generator_shape_options(tmp_path):
    fd = load_federated("synthetic", tmp_path, options={"num_users": 5, "alpha": 0.0,
                                                        "beta": 0.0, "max_samples": 80})
    assert fd.num_users == 5 and len(fd.y) <= 5 * 80
    assert all(int(0.8 * 50) <= t <= int(0.8 * 80) for t in fd.train_sizes())


def test_digits_shards_are_non_iid_and_iid_is_not(tmp_path):
    shards = load_federated("digits", tmp_path, seed=1)
    iid = load_federated("digits", tmp_path, partition="iid", seed=1)
    assert shards.x.shape == (1797, 64) and float(shards.x.max()) <= 1.0
    assert shards.num_users == 20 and shards.train_sizes() == [70] * 20
    classes = [len(torch.unique(shards.y[torch.cat([t, s])]))
               for t, s in zip(shards.train_idx, shards.test_idx, strict=True)]
    assert max(classes) <= 4 and np.mean(classes) < 3.5
    iid_classes = [len(torch.unique(iid.y[t])) for t in iid.train_idx]
    assert min(iid_classes) >= 8
    assert all(len(torch.unique(shards.y[s])) == 1 for s in shards.test_idx)


def test_digits_partition_depends_on_the_seed(tmp_path):
    a = make_partition("digits", tmp_path, None, 1)
    b = make_partition("digits", tmp_path, None, 1)
    c = make_partition("digits", tmp_path, None, 2)
    assert all(np.array_equal(x, y) for x, y in zip(a.train, b.train, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a.train, c.train, strict=True))


def test_registry_entries_are_complete():
    models = {"cifar10": "cnn_cifar", "fmnist": "cnn_fmnist", "fmnist3": "logreg",
              "femnist": "cnn_femnist",
              "shakespeare": "lstm_shakespeare", "adult": "logreg", "synthetic": "logreg",
              "digits": "mlp_digits"}
    assert {k: s.model for k, s in DATASET_SPECS.items()} == models
    for name, spec in DATASET_SPECS.items():
        assert isinstance(spec, DatasetSpec) and spec.name == name
        assert spec.default_partition in spec.partitions
        assert bool(spec.raw_files) == (name not in ("synthetic", "digits"))
    assert (DATASET_SPECS["adult"].input_shape == (99,)
            and DATASET_SPECS["digits"].input_shape == (64,))
    assert DATASET_SPECS["shakespeare"].input_shape == (80,)


@pytest.mark.parametrize("name", ["synthetic", "digits"])
def test_offline_input_shape_matches_the_registry(tmp_path, name):
    fd = load_federated(name, tmp_path)
    assert tuple(fd.x.shape[1:]) == DATASET_SPECS[name].input_shape
    assert fd.num_classes == DATASET_SPECS[name].num_classes


def test_unknown_names_list_the_valid_ones(tmp_path):
    with pytest.raises(DataError, match="cifar10"):
        load_federated("mnist", tmp_path)
    with pytest.raises(DataError, match="shards"):
        load_federated("digits", tmp_path, partition="natural")
    with pytest.raises(DataError, match="num_users"):
        load_federated("digits", tmp_path, options={"users": 3})
    with pytest.raises(DataError, match="quicksort"):
        load_federated("digits", tmp_path, options={"sort": "merge"})


def test_real_datasets_never_download_by_default(tmp_path):
    with pytest.raises(DataError, match="cifar-10-python.tar.gz"):
        load_federated("cifar10", tmp_path)


def test_synthetic_sizes_table4_draws_the_papers_size_statistics_and_changes_no_other_draw():
    from fedmgda.data.synthetic import TABLE4_SIZES, generate, size_lognormal

    mu, sigma = size_lognormal("table4")
    mean, std = TABLE4_SIZES[0] - 50, TABLE4_SIZES[1]  # the lognormal part's moments
    assert math.isclose(math.exp(mu + sigma**2 / 2),
                        mean) and math.isclose(mean * math.sqrt(math.exp(sigma**2) - 1), std)
    script_x, script_y = generate(1.0, 1.0, 100, 0)
    table4_x, table4_y = generate(1.0, 1.0, 100, 0, sizes="table4")
    sizes = np.array([len(y) for y in table4_y])
    assert abs(sizes.mean() - 127) < 15 and abs(sizes.std() - 73) < 15 and sizes.min() >= 50
    assert sum(len(y) for y in script_y) > 3 * sizes.sum()  # the script's heavy tail
    # the same devices otherwise (their means v_k are drawn before any sample): their samples' means
    # agree
    assert np.corrcoef([x.mean() for x in script_x], [x.mean() for x in table4_x])[0, 1] > 0.95
    with pytest.raises(ValueError, match="script"):
        size_lognormal("paper")


# --------------------------------------------------------------------------- users the samples can
# serve
@pytest.mark.parametrize("partition, options, bound", [
    ("iid", {"num_users": 898}, {"num_users": 899}),
    ("shards", {"num_users": 898}, {"num_users": 899}),  # 2 shards a user: 1 796 shards of 1 sample
    # 1 shard of 2
    ("shards", {"num_users": 898, "shards_per_user": 1}, {"num_users": 899, "shards_per_user": 1}),
    ("shards", {"num_users": 599, "shards_per_user": 3}, {"num_users": 600, "shards_per_user": 3}),
])
def test_the_largest_number_of_users_the_size_check_allows_is_the_partitioners(tmp_path, partition,
                                                                               options, bound):
    """``Dataset.size_error`` (run before any job, from the catalog's ``samples``) lets through
    exactly the partitions whose every user has a sample to train on and one to test on."""
    from fedmgda.catalog import DATASETS

    digits = DATASETS["digits"]
    assert digits.size_error(partition, options) is None
    fd = load_federated("digits", tmp_path, partition=partition, options=options)
    assert min(fd.train_sizes()) >= 1 and min(fd.test_sizes()) >= 1
    assert ("a user needs at least 2 (one to train on, one to test on)"
            in digits.size_error(partition, bound))
    try:
        fd = load_federated("digits", tmp_path, partition=partition, options=bound)
    except DataError:
        return
    assert min(fd.train_sizes()) == 0 or min(fd.test_sizes()) == 0


def test_catalog_sizes_are_the_loaded_sizes(tmp_path):
    """``samples`` of each dataset whose partitions deal out a fixed pool: the size of that pool as
    loaded (digits here; the downloaded datasets where their raw files are in resources/raw)."""
    from pathlib import Path

    from fedmgda.catalog import DATASETS
    from fedmgda.data.registry import load_raw

    raw = Path(__file__).resolve().parents[2] / "resources/raw"
    checked = []
    for name, dataset in DATASETS.items():
        if dataset.samples and (dataset.offline or (raw / dataset.raw_folder).is_dir()):
            assert len(load_raw(name,
                                raw if not dataset.offline
                                else tmp_path).y) == dataset.samples, name
            checked.append(name)
    assert "digits" in checked
