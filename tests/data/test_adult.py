"""Adult: 99 features, column 21 = Doctorate, domain sizes, the opt-in off-by-one."""

from __future__ import annotations

import numpy as np
import pytest

from fedmgda.data import adult as adult_mod
from fedmgda.data import load_federated, make_partition


def test_99_features_and_column_21_is_doctorate():
    assert adult_mod.NUM_FEATURES == 99
    assert adult_mod.FEATURE_NAMES[21] == "education=Doctorate"
    line = ("39, State-gov, 1, Doctorate, 16, Divorced, Sales, Wife, Other, Female, 0, 0, 40, ?, "
            ">50K.")
    x, y = adult_mod.encode([[v.strip() for v in line.split(",")]])
    assert x.shape == (1, 99) and x.dtype == np.float32
    assert x[0, 21] == 1 and x[0].sum() == 7  # 8 blocks, native-country "?" is all zero
    assert y.tolist() == [1]


@pytest.fixture(scope="module")
def paper_sized(tmp_path_factory):
    """A generated adult.data with the real size: 413 Doctorate rows among 32 561."""
    rng = np.random.RandomState(0)
    n, n_phd = 32_561, 413
    edu = np.array(["HS-grad"] * n, dtype=object)
    edu[rng.choice(n, n_phd, replace=False)] = "Doctorate"
    edu[-1] = "Masters"  # last row non-PhD, as docs/protocol.md §1.5 assumes for the shift
    test_edu = ["Doctorate"] * 181 + ["Bachelors"] * 300
    return tmp_path_factory.mktemp("adult"), list(edu), test_edu


def test_domain_sizes_match_the_paper_on_a_file_with_the_real_schema(paper_sized, fmt, pin):
    raw_dir, edu, test_edu = paper_sized
    fmt.write_adult(raw_dir, edu, test_edu)
    pin("adult", raw_dir)
    fd = load_federated("adult", raw_dir)
    assert fd.x.shape == (32_561, 99) and fd.y.dtype.is_floating_point is False
    assert fd.train_sizes() == [330, 25_718] and fd.test_sizes() == [42, 3_215]
    assert bool((fd.x[fd.train_idx[0], 21] == 1).all())
    assert bool((fd.x[fd.train_idx[1], 21] == 0).all())
    assert {k: len(v[1]) for k, v in fd.global_test.items()} == {
        "uniform": 481, "phd": 181, "non_phd": 300}
    assert bool((fd.global_test["phd"][0][:, 21] == 1).all())


def test_shift_by_one_moves_every_client_id_by_one_row(tmp_path, fmt, pin):
    edu = ["Bachelors", "Doctorate", "HS-grad", "Doctorate", "Doctorate", "HS-grad"] * 5
    fmt.write_adult(tmp_path, edu, ["Doctorate", "HS-grad"])
    pin("adult", tmp_path)
    right = make_partition("adult", tmp_path, "domain", 1)
    shifted = make_partition("adult", tmp_path, "domain", 1, {"shift_by_one": True})
    phd_rows = np.flatnonzero(np.array(edu) == "Doctorate")
    assert sorted(right.user_indices(0).tolist()) == phd_rows.tolist()
    assert sorted(shifted.user_indices(0).tolist()) == (phd_rows + 1).tolist()
    # the last row is non-PhD, so the non-PhD client's id N (past the end) is dropped
    non_phd = np.flatnonzero(np.array(edu) != "Doctorate")
    assert sorted(shifted.user_indices(1).tolist()) == [i + 1 for i in non_phd if i + 1 < len(edu)]
    assert shifted.options["shift_by_one"] is True and right.options["shift_by_one"] is False


def test_labels_and_missing_values_in_the_uci_format(tmp_path, fmt, pin):
    fmt.write_adult(tmp_path, ["Doctorate", "Bachelors", "Masters", "HS-grad"] * 3,
                    ["Doctorate", "Masters", "HS-grad"])
    pin("adult", tmp_path)
    fd = load_federated("adult", tmp_path)
    assert fd.y.tolist() == [1 if i % 4 == 0 else 0 for i in range(12)]
    assert fd.global_test["uniform"][1].tolist() == [1, 0, 0]  # ">50K." counts as >50K
    row_sums = fd.x.sum(1)
    assert row_sums[3].item() == 7 and row_sums[0].item() == 8  # row 3 has country "?"


def test_clients_phd_keeps_the_phd_client_alone(tmp_path, fmt, pin):
    """Table 7's Baseline_PhD trains on client 0 only, whichever rows that client is built from."""
    edu = ["Bachelors", "Doctorate", "HS-grad", "Doctorate", "Doctorate", "HS-grad"] * 5
    fmt.write_adult(tmp_path, edu, ["Doctorate", "HS-grad"])
    pin("adult", tmp_path)
    for shift in (False, True):
        both = make_partition("adult", tmp_path, "domain", 1, {"shift_by_one": shift})
        alone = make_partition("adult", tmp_path, "domain", 1, {"shift_by_one": shift, "clients": "phd"})
        assert alone.num_users == 1 and alone.users == ["phd"]
        assert alone.user_indices(0).tolist() == both.user_indices(0).tolist()
        assert alone.train[0].tolist() == both.train[0].tolist()
