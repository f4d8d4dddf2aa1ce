"""UCI Adult, pre-processed as in q-FFL (fair_flearn ``data/adult/create_dataset.py``;
docs/protocol.md §1.5).

Rows of ``adult.data`` (train) and ``adult.test`` (its first line "|1x3 Cross validator" dropped),
comma separated, whitespace stripped, blank lines skipped. The 6 continuous columns are dropped;
the 8 categorical ones are one-hot encoded in the fixed column and vocabulary order below, giving
99 binary features; a value outside the vocabulary ("?") gives an all-zero block. Label 1 iff the
income is ">50K" or ">50K.". Column 21 (= 8 + 13) is education == Doctorate: the PhD domain.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedmgda.data.base import DataError
from fedmgda.data.download import RawFile
from fedmgda.data.partition import RawData

UCI = "https://archive.ics.uci.edu/ml/machine-learning-databases/adult/"
_NOTE = ("UCI publishes no checksum; this sha256 is the one pinned by the Julia package "
         "PreprocessData.jl for the same UCI URL")
RAW_FILES = (
    RawFile("adult", "adult.data", UCI + "adult.data",
            "sha256:5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d", _NOTE),
    RawFile("adult", "adult.test", UCI + "adult.test",
            "sha256:a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05", _NOTE),
)

COLUMNS = ("age", "workclass", "fnlwgt", "education", "education-num", "marital-status",
           "occupation", "relationship", "race", "sex", "capital-gain", "capital-loss",
           "hours-per-week", "native-country", "income")
VOCAB: dict[str, tuple[str, ...]] = {
    "workclass": ("Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov",
                  "State-gov", "Without-pay", "Never-worked"),
    "education": ("Bachelors", "Some-college", "11th", "HS-grad", "Prof-school", "Assoc-acdm",
                  "Assoc-voc", "9th", "7th-8th", "12th", "Masters", "1st-4th", "10th",
                  "Doctorate", "5th-6th", "Preschool"),
    "marital-status": ("Married-civ-spouse", "Divorced", "Never-married", "Separated", "Widowed",
                       "Married-spouse-absent", "Married-AF-spouse"),
    "occupation": ("Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial",
                   "Prof-specialty", "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical",
                   "Farming-fishing", "Transport-moving", "Priv-house-serv", "Protective-serv",
                   "Armed-Forces"),
    "relationship": ("Wife", "Own-child", "Husband", "Not-in-family", "Other-relative",
                     "Unmarried"),
    "race": ("White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"),
    "sex": ("Female", "Male"),
    "native-country": ("United-States", "Cambodia", "England", "Puerto-Rico", "Canada", "Germany",
                       "Outlying-US(Guam-USVI-etc)", "India", "Japan", "Greece", "South", "China",
                       "Cuba", "Iran", "Honduras", "Philippines", "Italy", "Poland", "Jamaica",
                       "Vietnam", "Mexico", "Portugal", "Ireland", "France", "Dominican-Republic",
                       "Laos", "Ecuador", "Taiwan", "Haiti", "Columbia", "Hungary", "Guatemala",
                       "Nicaragua", "Scotland", "Thailand", "Yugoslavia", "El-Salvador",
                       "Trinadad&Tobago", "Peru", "Hong", "Holand-Netherlands"),
}
FEATURE_NAMES = tuple(f"{col}={v}" for col, vocab in VOCAB.items() for v in vocab)
NUM_FEATURES = len(FEATURE_NAMES)  # 99
PHD_COLUMN = FEATURE_NAMES.index("education=Doctorate")  # 21
assert NUM_FEATURES == 99 and PHD_COLUMN == 21


def read_rows(path: Path, skip_first: bool) -> list[list[str]]:
    rows = []
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    if skip_first:
        lines = lines[1:]
    for lineno, line in enumerate(lines, start=2 if skip_first else 1):
        if not line.strip():
            continue
        fields = [v.strip() for v in line.split(",")]
        if len(fields) != len(COLUMNS):
            raise DataError(f"{path}:{lineno}: expected {len(COLUMNS)} fields, got {len(fields)}")
        rows.append(fields)
    return rows


def encode(rows: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
    """(float32 (N, 99) one-hot features, int64 (N,) labels)."""
    x = np.zeros((len(rows), NUM_FEATURES), dtype=np.float32)
    offset = 0
    for col, vocab in VOCAB.items():
        j = COLUMNS.index(col)
        lookup = {v: offset + k for k, v in enumerate(vocab)}
        for i, row in enumerate(rows):
            k = lookup.get(row[j])
            if k is not None:
                x[i, k] = 1.0
        offset += len(vocab)
    y = np.fromiter((r[-1] in (">50K", ">50K.") for r in rows), dtype=np.int64, count=len(rows))
    return x, y


def load_split(path: Path, test: bool) -> tuple[np.ndarray, np.ndarray]:
    return encode(read_rows(path, skip_first=test))


def load(raw_dir: Path, options: dict[str, Any]) -> RawData:
    """The pool is ``adult.data`` (option ``split: 80_10_10``, the default: the domain partition
    cuts each domain's rows 80/10/10), or ``adult.data`` followed by ``adult.test`` (``split:
    source``, q-FFL's protocol: a domain trains on all its ``adult.data`` rows and is tested on its
    ``adult.test`` rows: fair_flearn ``data/adult/create_dataset.py`` ``main`` from line 153)."""
    x_tr, y_tr = load_split(RAW_FILES[0].path(raw_dir), test=False)
    x_te, y_te = load_split(RAW_FILES[1].path(raw_dir), test=True)
    phd_tr = x_tr[:, PHD_COLUMN] == 1
    phd_te = x_te[:, PHD_COLUMN] == 1
    t = torch.from_numpy
    global_test = {"uniform": (t(x_te), t(y_te)),
                   "phd": (t(x_te[phd_te]), t(y_te[phd_te])),
                   "non_phd": (t(x_te[~phd_te]), t(y_te[~phd_te]))}
    domains_tr = [np.flatnonzero(phd_tr), np.flatnonzero(~phd_tr)]
    if options.get("split", "80_10_10") != "source":
        return RawData(name="adult", x=t(x_tr), y=t(y_tr), global_test=global_test,
                       users=["phd", "non_phd"], user_idx=domains_tr)
    n = len(y_tr)  # adult.test row i is pool row n + i
    source = [(rows, n + np.flatnonzero(mask))
              for rows, mask in zip(domains_tr, (phd_te, ~phd_te), strict=True)]
    return RawData(name="adult", x=t(np.concatenate([x_tr, x_te])),
                   y=t(np.concatenate([y_tr, y_te])),
                   global_test=global_test, users=["phd", "non_phd"],
                   user_idx=[np.concatenate(pair) for pair in source], source_split=source)
