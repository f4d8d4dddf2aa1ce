"""Writers of tiny files in each real raw format, and a guard that no test reaches the network."""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import os
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest

from fedmgda.data import DATASET_SPECS, RawFile
from fedmgda.data import download as dl
from fedmgda.data.download import file_digest


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Any download attempt in a test that did not ask for one fails loudly."""

    def refuse(url, dest, timeout=None):
        raise AssertionError(f"test tried to download {url}")

    monkeypatch.setattr(dl, "fetch_url", refuse)
    monkeypatch.setattr(dl, "RETRY_BACKOFF_S", 0.0)
    monkeypatch.delenv(dl.OFFLINE_ENV, raising=False)


def pin_to_present(monkeypatch, name: str, raw_dir: Path) -> None:
    """Point the registry's checksums of ``name`` at the tiny files now in ``raw_dir``."""
    spec = DATASET_SPECS[name]
    files = tuple(
        dataclasses.replace(rf, checksum="sha256:" + file_digest(rf.path(raw_dir), "sha256"))
        for rf in spec.raw_files
    )
    monkeypatch.setitem(DATASET_SPECS, name, dataclasses.replace(spec, raw_files=files))


# ---------------------------------------------------------------- CIFAR-10 python tarball
def write_cifar(raw_dir: Path, per_batch: int = 20, test_n: int = 30, seed: int = 0,
                compresslevel: int = 9) -> Path:
    rng = np.random.RandomState(seed)
    path = raw_dir / "cifar10" / "cifar-10-python.tar.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    batches = {f"data_batch_{i}": per_batch for i in range(1, 6)} | {"test_batch": test_n}
    with tarfile.open(path, "w:gz", compresslevel=compresslevel) as tar:
        for name, n in batches.items():
            d = {"batch_label": name, "labels": [int(v) for v in np.arange(n) % 10],
                 "data": rng.randint(0, 256, size=(n, 3072)).astype(np.uint8),
                 "filenames": [f"img{i}.png" for i in range(n)]}
            blob = pickle.dumps(d, protocol=2)
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
        meta = pickle.dumps({"label_names": [str(i) for i in range(10)]})
        info = tarfile.TarInfo("cifar-10-batches-py/batches.meta")
        info.size = len(meta)
        tar.addfile(info, io.BytesIO(meta))
    return path


# ---------------------------------------------------------------- gzipped IDX (F-MNIST)
def idx_bytes(arr: np.ndarray) -> bytes:
    arr = np.asarray(arr, dtype=np.uint8)
    header = bytes([0, 0, 0x08, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
    return header + arr.tobytes()


def write_fmnist(raw_dir: Path, n_train: int = 60, n_test: int = 20, seed: int = 0) -> dict:
    rng = np.random.RandomState(seed)
    folder = raw_dir / "fmnist"
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {
        "train-images-idx3-ubyte.gz": rng.randint(0, 256, (n_train, 28, 28)),
        "train-labels-idx1-ubyte.gz": np.arange(n_train) % 10,
        "t10k-images-idx3-ubyte.gz": rng.randint(0, 256, (n_test, 28, 28)),
        "t10k-labels-idx1-ubyte.gz": np.arange(n_test) % 10,
    }
    for name, arr in arrays.items():
        with gzip.open(folder / name, "wb") as f:
            f.write(idx_bytes(arr))
    return arrays


# ---------------------------------------------------------------- UCI Adult CSV
ADULT_ROW = ("39, State-gov, 77516, {edu}, 13, Never-married, Adm-clerical, Not-in-family, "
             "White, Male, 2174, 0, 40, {country}, {income}")


def adult_line(edu="Bachelors", income="<=50K", country="United-States") -> str:
    return ADULT_ROW.format(edu=edu, income=income, country=country)


def write_adult(raw_dir: Path, train_edu: list[str], test_edu: list[str]) -> Path:
    folder = raw_dir / "adult"
    folder.mkdir(parents=True, exist_ok=True)
    train = [adult_line(e, ">50K" if i % 4 == 0 else "<=50K",
                        "?" if i % 7 == 3 else "United-States") for i, e in enumerate(train_edu)]
    (folder / "adult.data").write_text("\n".join(train) + "\n\n")
    test = [adult_line(e, ">50K." if i % 3 == 0 else "<=50K.") for i, e in enumerate(test_edu)]
    (folder / "adult.test").write_text("|1x3 Cross validator\n" + "\n".join(test) + "\n")
    return folder


# ---------------------------------------------------------------- LEAF Shakespeare json
def leaf_json(users: dict[str, str], lo: float, hi: float) -> dict:
    """Each user's text cut into (80-char window, next char) samples; keep the [lo, hi) fraction."""
    out = {"users": [], "user_data": {}, "num_samples": []}
    for u, text in users.items():
        xs = [text[i:i + 80] for i in range(len(text) - 80)]
        ys = [text[i + 80] for i in range(len(text) - 80)]
        a, b = int(lo * len(xs)), int(hi * len(xs))
        out["users"].append(u)
        out["user_data"][u] = {"x": xs[a:b], "y": ys[a:b]}
        out["num_samples"].append(b - a)
    return out


def write_shakespeare(raw_dir: Path, users: dict[str, str]) -> Path:
    folder = raw_dir / "shakespeare"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.json").write_text(json.dumps(leaf_json(users, 0.0, 0.8)))
    (folder / "test.json").write_text(json.dumps(leaf_json(users, 0.8, 1.0)))
    return folder


# ---------------------------------------------------------------- TFF FEMNIST h5 in tar.bz2
def write_femnist(raw_dir: Path, writers: dict[str, tuple[int, int]], seed: int = 0) -> Path:
    h5py = pytest.importorskip("h5py")
    rng = np.random.RandomState(seed)
    folder = raw_dir / "femnist"
    folder.mkdir(parents=True, exist_ok=True)
    build = folder / "_build"
    build.mkdir()
    for split, col in (("train", 0), ("test", 1)):
        with h5py.File(build / f"fed_emnist_{split}.h5", "w") as f:
            for w, sizes in writers.items():
                n = sizes[col]
                g = f.create_group(f"examples/{w}")
                g["pixels"] = rng.rand(n, 28, 28).astype(np.float32)
                g["label"] = rng.randint(0, 62, n).astype(np.int32)
    archive = folder / "fed_emnist.tar.bz2"
    with tarfile.open(archive, "w:bz2") as tar:
        for split in ("train", "test"):
            tar.add(build / f"fed_emnist_{split}.h5", arcname=f"fed_emnist_{split}.h5")
    for p in build.iterdir():
        p.unlink()
    build.rmdir()
    return archive


def tiny_rawfile(tmp_path: Path, content: bytes = b"hello raw file\n") -> tuple[RawFile, bytes]:
    import hashlib

    rf = RawFile("toy", "toy.bin", "https://example.invalid/toy.bin",
                 "sha256:" + hashlib.sha256(content).hexdigest(), "a toy file")
    return rf, content


# ---------------------------------------------------------------- real Fashion-MNIST files
FMNIST_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
DEBIAN_FMNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
# where the download rules write  # apt-get install dataset-fashion-mnist
REPO_RAW = Path(__file__).resolve().parents[2] / "resources/raw"


@pytest.fixture
def real_fmnist(tmp_path) -> Path:
    """A raw-data directory whose fmnist/ links to the real Fashion-MNIST files (FEDMGDA_FMNIST_DIR,
    else Debian's /usr/share/datasets/fashion-mnist); skips where they are absent."""
    source = Path(os.environ.get("FEDMGDA_FMNIST_DIR", DEBIAN_FMNIST_DIR))
    if not all((source / name).is_file() for name in FMNIST_FILES):
        pytest.skip(f"the real Fashion-MNIST files are not in {source} (set FEDMGDA_FMNIST_DIR, or "
                    "`apt-get install dataset-fashion-mnist` on Debian/Ubuntu)")
    raw_dir = tmp_path / "real"
    (raw_dir / "fmnist").mkdir(parents=True)
    for name in FMNIST_FILES:
        (raw_dir / "fmnist" / name).symlink_to((source / name).resolve())
    return raw_dir


@pytest.fixture
def real_adult(tmp_path) -> Path:
    """A raw-data directory whose adult/ links to the real UCI Adult files (FEDMGDA_ADULT_DIR, else
    the checkout's resources/raw/adult); skips where they are absent."""
    source = Path(os.environ.get("FEDMGDA_ADULT_DIR", REPO_RAW / "adult"))
    if not all((source / name).is_file() for name in ("adult.data", "adult.test")):
        pytest.skip(f"the real UCI Adult files are not in {source} (set FEDMGDA_ADULT_DIR)")
    (tmp_path / "adult").mkdir()
    for name in ("adult.data", "adult.test"):
        (tmp_path / "adult" / name).symlink_to((source / name).resolve())
    return tmp_path


def restamp_gz(source: Path, dest: Path, mtime: int = 1_234_567_890,
               filename: str = "restamped") -> None:
    """``dest``: the same decompressed bytes as ``source`` under another gzip header."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(source, "rb") as f:
        content = f.read()
    with open(dest, "wb") as raw, gzip.GzipFile(filename=filename, mode="wb", fileobj=raw,
                                                mtime=mtime,
                                                 # fast; the content is what counts
                                                 compresslevel=1) as f:
        f.write(content)


@pytest.fixture
def fmt():
    """The tiny-file writers, as one namespace (tests do not import conftest)."""
    import types

    return types.SimpleNamespace(
        write_cifar=write_cifar, write_fmnist=write_fmnist, write_adult=write_adult,
        adult_line=adult_line, write_shakespeare=write_shakespeare, write_femnist=write_femnist,
        idx_bytes=idx_bytes, tiny_rawfile=tiny_rawfile, restamp_gz=restamp_gz,
    )


@pytest.fixture
def pin(monkeypatch):
    """pin(name, raw_dir): make the registry expect the checksums of the tiny files present."""
    return lambda name, raw_dir: pin_to_present(monkeypatch, name, raw_dir)
