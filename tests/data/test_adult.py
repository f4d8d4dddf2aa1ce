"""Adult: 99 features, column 21 = Doctorate, domain sizes, the opt-in off-by-one."""

from __future__ import annotations

import numpy as np
import pytest

from fedmgda.data import DataError, load_federated, make_partition
from fedmgda.data import adult as adult_mod


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
        alone = make_partition("adult", tmp_path, "domain", 1,
                               {"shift_by_one": shift, "clients": "phd"})
        assert alone.num_users == 1 and alone.users == ["phd"]
        assert alone.user_indices(0).tolist() == both.user_indices(0).tolist()
        assert alone.train[0].tolist() == both.train[0].tolist()


def _rows_of(fd, idx):
    return [tuple(r) for r in fd.x[idx].int().tolist()], fd.y[idx].tolist()


def test_split_source_trains_on_all_adult_data_rows_and_tests_on_adult_test(tmp_path, fmt, pin):
    """q-FFL's protocol: a domain's train set is every adult.data row of it, its test set its
    adult.test rows (no 80/10/10 cut, nothing held out)."""
    edu = ["Bachelors", "Doctorate", "HS-grad", "Doctorate", "Masters", "HS-grad", "Doctorate"] * 4
    test_edu = ["Doctorate", "HS-grad", "Bachelors", "Doctorate", "HS-grad"]
    fmt.write_adult(tmp_path, edu, test_edu)
    pin("adult", tmp_path)
    data_x, data_y = adult_mod.load_split(tmp_path / "adult" / "adult.data", test=False)
    test_x, test_y = adult_mod.load_split(tmp_path / "adult" / "adult.test", test=True)
    fd = load_federated("adult", tmp_path, options={"split": "source"})
    part = make_partition("adult", tmp_path, "domain", 1, {"split": "source"})
    assert part.users == ["phd", "non_phd"] and [len(v) for v in part.val] == [0, 0]
    for user, is_phd in enumerate((True, False)):
        data_rows = [i for i, e in enumerate(edu) if (e == "Doctorate") == is_phd]
        test_rows = [i for i, e in enumerate(test_edu) if (e == "Doctorate") == is_phd]
        assert _rows_of(fd, fd.train_idx[user]) == (
            [tuple(r) for r in data_x[data_rows].astype(int).tolist()], data_y[data_rows].tolist())
        assert _rows_of(fd, fd.test_idx[user]) == (
            [tuple(r) for r in test_x[test_rows].astype(int).tolist()], test_y[test_rows].tolist())
    assert fd.train_sizes() == [12, 16] and fd.test_sizes() == [2, 3]
    assert fd.global_test["phd"][1].tolist() == fd.y[fd.test_idx[0]].tolist()
    alone = make_partition("adult", tmp_path, "domain", 1, {"split": "source", "clients": "phd"})
    assert alone.users == ["phd"] and alone.train[0].tolist() == part.train[0].tolist()
    assert alone.test[0].tolist() == part.test[0].tolist()


def test_default_split_is_todays_partition(tmp_path, fmt, pin):
    """The new option's default (80_10_10) changes neither the pool, the fingerprint nor an
    index."""
    edu = ["Bachelors", "Doctorate", "HS-grad", "Doctorate", "Doctorate", "HS-grad"] * 5
    fmt.write_adult(tmp_path, edu, ["Doctorate", "HS-grad"])
    pin("adult", tmp_path)
    default = make_partition("adult", tmp_path, "domain", 1)
    explicit = make_partition("adult", tmp_path, "domain", 1, {"split": "80_10_10"})
    source = make_partition("adult", tmp_path, "domain", 1, {"split": "source"})
    phd = np.flatnonzero(np.array(edu) == "Doctorate")
    non_phd = np.flatnonzero(np.array(edu) != "Doctorate")
    for user, rows in enumerate((phd, non_phd)):  # today's cut: positional 80/10/10 of the rows
        n = len(rows)
        assert default.train[user].tolist() == rows[:int(0.8 * n)].tolist()
        assert default.val[user].tolist() == rows[int(0.8 * n):int(0.9 * n)].tolist()
        assert default.test[user].tolist() == rows[int(0.9 * n):].tolist()
    assert default.fingerprint == explicit.fingerprint != source.fingerprint
    assert all(np.array_equal(a, b)
               for a, b in zip(default.train + default.test, explicit.train + explicit.test,
                               strict=True))
    # the pool is adult.data only
    assert load_federated("adult", tmp_path).x.shape == (len(edu), 99)


def test_split_source_refuses_shift_by_one_and_the_iid_partition(tmp_path, fmt, pin):
    fmt.write_adult(tmp_path, ["Bachelors", "Doctorate"] * 5, ["Doctorate", "HS-grad"])
    pin("adult", tmp_path)
    with pytest.raises(DataError, match="shift_by_one.*split '80_10_10'"):
        make_partition("adult", tmp_path, "domain", 1, {"split": "source", "shift_by_one": True})
    with pytest.raises(DataError, match="iid partition needs split '80_10_10'"):
        make_partition("adult", tmp_path, "iid", 1, {"split": "source"})
    with pytest.raises(DataError, match="split='paper' not in"):
        make_partition("adult", tmp_path, "domain", 1, {"split": "paper"})


@pytest.mark.realdata
def test_split_source_on_the_real_uci_files(real_adult):
    """q-FFL's Adult: PhD 413 / non-PhD 32 148 training rows (all of adult.data), 181 / 16 100 test
    rows."""
    fd = load_federated("adult", real_adult, options={"split": "source"})
    assert fd.train_sizes() == [413, 32_148] and fd.test_sizes() == [181, 16_100]
    assert fd.x.shape == (32_561 + 16_281, 99)
