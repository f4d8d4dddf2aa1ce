"""Checksums, the already-present path, downloads with retries and atomic writes."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import os

import pytest

from fedmgda import catalog
from fedmgda.data import DATASET_SPECS, DataError, ensure_raw_files
from fedmgda.data import download as dl


def _listing(folder):
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_present_file_with_right_checksum_is_used_without_network(tmp_path, fmt, pin):
    fmt.write_adult(tmp_path, ["Bachelors"] * 3, ["Doctorate"] * 2)
    pin("adult", tmp_path)  # the autouse guard makes any fetch fail the test
    paths = ensure_raw_files("adult", tmp_path, allow_download=True)
    assert [p.name for p in paths] == ["adult.data", "adult.test"]


def test_wrong_checksum_names_file_checksum_url_and_path_and_keeps_the_file(tmp_path, fmt):
    folder = fmt.write_adult(tmp_path, ["Bachelors"] * 3, ["Doctorate"] * 2)
    before = (folder / "adult.data").read_bytes()
    with pytest.raises(DataError) as err:
        ensure_raw_files("adult", tmp_path)
    msg = str(err.value)
    rf = DATASET_SPECS["adult"].raw_files[0]
    assert "adult.data" in msg and rf.checksum in msg and rf.url in msg
    assert str(rf.path(tmp_path).resolve()) in msg and "\n" not in msg  # one line
    assert (folder / "adult.data").read_bytes() == before


def test_md5_checksums_are_checked_too(tmp_path):
    content = b"abc"
    rf = dl.RawFile("toy", "t.bin", "https://example.invalid/t.bin",
                    "md5:" + hashlib.md5(content).hexdigest())
    rf.path(tmp_path).parent.mkdir(parents=True)
    rf.path(tmp_path).write_bytes(content)
    assert dl.ensure_files([rf], tmp_path) == [rf.path(tmp_path)]
    rf.path(tmp_path).write_bytes(b"abd")
    with pytest.raises(DataError, match="md5"):
        dl.ensure_files([rf], tmp_path)


def test_missing_file_is_downloaded_verified_and_moved_into_place(tmp_path, fmt, monkeypatch):
    rf, content = fmt.tiny_rawfile(tmp_path)
    calls = []

    def fake_fetch(url, dest, timeout=None):
        calls.append(url)
        if len(calls) == 1:
            raise OSError("connection reset")  # the first try fails, the retry succeeds
        with open(dest, "wb") as f:
            f.write(content)

    monkeypatch.setattr(dl, "fetch_url", fake_fetch)
    old_umask = os.umask(0o022)
    try:
        (path,) = dl.ensure_files([rf], tmp_path, allow_download=True)
    finally:
        os.umask(old_umask)
    assert path.read_bytes() == content and len(calls) == 2
    assert _listing(path.parent) == ["toy.bin"]  # no temp file left behind
    assert path.stat().st_mode & 0o777 == 0o644  # the umask's mode, as a file a download writes


def test_failed_download_raises_and_leaves_no_partial_file(tmp_path, fmt, monkeypatch):
    rf, _ = fmt.tiny_rawfile(tmp_path)
    calls = []

    def half_then_fail(url, dest, timeout=None):
        calls.append(url)
        with open(dest, "wb") as f:
            f.write(b"half a fi")
        raise TimeoutError("timed out")

    monkeypatch.setattr(dl, "fetch_url", half_then_fail)
    with pytest.raises(DataError) as err:
        dl.ensure_files([rf], tmp_path, allow_download=True)
    assert len(calls) == dl.DOWNLOAD_TRIES
    assert "toy.bin" in str(err.value) and rf.checksum in str(err.value)
    assert str(rf.path(tmp_path).resolve()) in str(err.value)
    assert _listing(rf.path(tmp_path).parent) == []


def test_download_with_wrong_checksum_is_rejected_and_removed(tmp_path, fmt, monkeypatch):
    rf, _ = fmt.tiny_rawfile(tmp_path)

    def wrong(url, dest, timeout=None):
        with open(dest, "wb") as f:
            f.write(b"not the file")

    monkeypatch.setattr(dl, "fetch_url", wrong)
    with pytest.raises(DataError, match="mismatch"):
        dl.ensure_files([rf], tmp_path, allow_download=True)
    assert _listing(rf.path(tmp_path).parent) == []


def test_missing_file_without_download_permission_raises(tmp_path, fmt):
    rf, _ = fmt.tiny_rawfile(tmp_path)
    with pytest.raises(DataError, match="missing"):
        dl.ensure_files([rf], tmp_path, allow_download=False)


def test_offline_environment_variable_forbids_downloads(tmp_path, fmt, monkeypatch):
    rf, _ = fmt.tiny_rawfile(tmp_path)
    monkeypatch.setenv("FEDMGDA_OFFLINE", "1")
    with pytest.raises(DataError, match="FEDMGDA_OFFLINE"):
        dl.ensure_files([rf], tmp_path, allow_download=True)


def test_unpinned_file_is_accepted_when_present_and_its_sha256_printed(tmp_path, capsys):
    rf = dl.RawFile("toy", "t.json", "https://example.invalid/", dl.UNPINNED)
    with pytest.raises(DataError, match="never downloaded automatically"):
        dl.ensure_files([rf], tmp_path, allow_download=True)
    rf.path(tmp_path).parent.mkdir(parents=True)
    rf.path(tmp_path).write_bytes(b"{}")
    dl.ensure_files([rf], tmp_path)
    assert hashlib.sha256(b"{}").hexdigest() in capsys.readouterr().err


def test_every_registered_raw_file_has_a_checksum_or_says_it_is_unpinned():
    for spec in DATASET_SPECS.values():
        for rf in spec.raw_files:
            assert rf.dataset == catalog.DATASETS[spec.name].raw_folder
            assert rf.url.startswith("http")
            if rf.pinned:
                assert len(rf.digest) == {"md5": 32, "sha256": 64}[rf.algorithm]
            else:
                assert "checksum" in rf.note


def test_bare_sha256_is_accepted_and_bad_checksums_rejected():
    rf = dl.RawFile("d", "f", "u", "a" * 64)
    assert rf.checksum == "sha256:" + "a" * 64 and rf.sha256 == "a" * 64
    with pytest.raises(ValueError):
        dl.RawFile("d", "f", "u", "crc32:1234")
    assert dataclasses.is_dataclass(rf)


def _gz(path, content: bytes, mtime: int, filename: str = "") -> None:
    with open(path, "wb") as raw, gzip.GzipFile(filename=filename, mode="wb", fileobj=raw,
                                                mtime=mtime) as f:
        f.write(content)


def _gz_rawfile(content: bytes, archive: bytes) -> dl.RawFile:
    return dl.RawFile("toy", "t.gz", "https://example.invalid/t.gz",
                      "md5:" + hashlib.md5(archive).hexdigest(), "",
                      "sha256:" + hashlib.sha256(content).hexdigest())


def test_gz_with_another_header_but_the_same_content_is_accepted(tmp_path):
    """A re-packed copy (Debian's, another time stamp and file name) passes the content pin."""
    content = bytes(range(256)) * 40
    path = tmp_path / "toy" / "t.gz"
    path.parent.mkdir()
    _gz(path, content, mtime=1_500_000_000, filename="t")
    rf = _gz_rawfile(content, path.read_bytes())
    assert dl.ensure_files([rf], tmp_path) == [path]  # the archive checksum itself
    _gz(path, content, mtime=1_591_347_949, filename="")
    assert hashlib.md5(path.read_bytes()).hexdigest() != rf.digest
    assert dl.ensure_files([rf], tmp_path) == [path]  # accepted through the content checksum


def test_gz_with_one_changed_content_byte_is_refused_with_both_checksums(tmp_path):
    content = bytes(range(256)) * 40
    path = tmp_path / "toy" / "t.gz"
    path.parent.mkdir()
    _gz(path, content, mtime=0)
    rf = _gz_rawfile(content, path.read_bytes())
    changed = bytearray(content)
    changed[1000] ^= 1
    _gz(path, bytes(changed), mtime=0)
    with pytest.raises(DataError) as err:
        dl.ensure_files([rf], tmp_path)
    msg = str(err.value)
    assert "t.gz" in msg and rf.checksum in msg and rf.content_checksum in msg and rf.url in msg
    assert "decompressed content sha256:" + hashlib.sha256(bytes(changed)).hexdigest() in msg
    assert str(rf.path(tmp_path).resolve()) in msg
    path.write_bytes(b"not gzip at all")
    with pytest.raises(DataError, match="unreadable"):
        dl.ensure_files([rf], tmp_path)


def test_content_checksum_only_for_gz_and_sha256():
    with pytest.raises(ValueError, match=".gz"):
        dl.RawFile("d", "f.json", "u", "a" * 64, "", "sha256:" + "b" * 64)
    with pytest.raises(ValueError, match="content checksum"):
        dl.RawFile("d", "f.gz", "u", "a" * 64, "", "md5:" + "b" * 32)
