"""Raw files: where they come from, how they are checked, how they are fetched.

Every raw file a dataset needs is a :class:`RawFile` with a pinned checksum. ``ensure_raw_files``
uses a file that is already in place with the right checksum without touching the network (so
files copied by hand onto an air-gapped node just work), refuses a file with the wrong checksum,
and otherwise downloads it with retries into a temporary file in the same folder, verifies it and
moves it into place with ``os.replace`` (atomic: no half file is ever left under the real name).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

UNPINNED = "unpinned"
HASH_ALGORITHMS = ("md5", "sha256")
DOWNLOAD_TRIES = 3
RETRY_BACKOFF_S = 2.0  # waits 2 s, then 4 s between tries; tests set it to 0
TIMEOUT_S = 60.0
OFFLINE_ENV = "FEDMGDA_OFFLINE"


class DataError(Exception):
    """A raw file is missing, corrupt or cannot be downloaded, or a dataset option is invalid."""


@dataclass(frozen=True)
class RawFile:
    """One raw file of a dataset, as published at ``url``.

    checksum: ``"md5:<hex>"`` or ``"sha256:<hex>"`` (the algorithm the source publishes; a bare
    64-hex string is read as sha256), or ``"unpinned"`` where no published checksum exists: such a
    file is never downloaded automatically, is accepted when placed by hand, and its sha256 is
    printed so that it can be pinned.
    """

    dataset: str
    filename: str
    url: str
    checksum: str
    note: str = ""

    def __post_init__(self) -> None:
        if self.checksum == UNPINNED:
            return
        algo, _, digest = self.checksum.partition(":")
        if not digest and len(algo) == 64:
            object.__setattr__(self, "checksum", f"sha256:{algo}")
        elif algo not in HASH_ALGORITHMS or not digest:
            raise ValueError(f"bad checksum {self.checksum!r}: use md5:<hex>, sha256:<hex> or unpinned")

    def path(self, raw_dir: str | Path) -> Path:
        return Path(raw_dir) / self.dataset / self.filename

    @property
    def pinned(self) -> bool:
        return self.checksum != UNPINNED

    @property
    def algorithm(self) -> str:
        return "sha256" if not self.pinned else self.checksum.split(":", 1)[0]

    @property
    def digest(self) -> str | None:
        return self.checksum.split(":", 1)[1].lower() if self.pinned else None

    @property
    def sha256(self) -> str | None:
        """The pinned sha256 hex digest, or None when the source publishes another hash."""
        return self.digest if self.algorithm == "sha256" and self.pinned else None


def file_digest(path: str | Path, algorithm: str = "sha256") -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _describe(rf: RawFile, raw_dir: str | Path, problem: str) -> str:
    lines = [
        f"{rf.dataset}: raw file {rf.filename!r}: {problem}",
        f"  expected checksum: {rf.checksum}",
        f"  source URL:        {rf.url}",
        f"  place a good copy by hand at: {rf.path(raw_dir).resolve()}",
    ]
    if rf.note:
        lines.append(f"  note: {rf.note}")
    lines.append("  (docs/datasets.md lists every raw file, its URL, checksum and target path.)")
    return "\n".join(lines)


def fetch_url(url: str, dest: str | Path, timeout: float = TIMEOUT_S) -> None:
    """One download attempt of ``url`` into the already opened-for-writing path ``dest``.

    Module-level so tests (and users behind a proxy) can replace it.
    """
    req = urllib.request.Request(url, headers={"User-Agent": "fedmgda-repro"})
    with urllib.request.urlopen(req, timeout=timeout) as resp, open(dest, "wb") as out:
        shutil.copyfileobj(resp, out, length=1 << 20)


def _download(rf: RawFile, raw_dir: str | Path) -> Path:
    target = rf.path(raw_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{rf.filename}.", suffix=".part", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    errors: list[str] = []
    try:
        for attempt in range(1, DOWNLOAD_TRIES + 1):
            try:
                fetch_url(rf.url, tmp)
                break
            except Exception as exc:  # network errors come in many types
                errors.append(f"try {attempt}: {type(exc).__name__}: {exc}")
                if attempt < DOWNLOAD_TRIES:
                    time.sleep(RETRY_BACKOFF_S * 2 ** (attempt - 1))
        else:
            raise DataError(_describe(rf, raw_dir, "download failed (" + "; ".join(errors) + ")"))
        got = file_digest(tmp, rf.algorithm)
        if got != rf.digest:
            raise DataError(
                _describe(rf, raw_dir, f"downloaded file has {rf.algorithm} {got} (mismatch); "
                                       "the server copy differs from the pinned one")
            )
        os.replace(tmp, target)
        return target
    finally:
        if tmp.exists():
            tmp.unlink()


def ensure_files(raw_files: Iterable[RawFile], raw_dir: str | Path,
                 allow_download: bool = True) -> list[Path]:
    """Check (and if allowed, fetch) each raw file; return their paths. See ensure_raw_files."""
    if os.environ.get(OFFLINE_ENV, "").strip() not in ("", "0"):
        allow_download = False
    paths = []
    for rf in raw_files:
        path = rf.path(raw_dir)
        if path.is_file():
            if not rf.pinned:
                print(f"[fedmgda] {rf.dataset}/{rf.filename} has no pinned checksum; its sha256 is "
                      f"{file_digest(path, 'sha256')} (pin it in the registry to protect later runs)",
                      file=sys.stderr)
            else:
                got = file_digest(path, rf.algorithm)
                if got != rf.digest:
                    raise DataError(_describe(
                        rf, raw_dir,
                        f"the file at {path} has {rf.algorithm} {got}, which is not the pinned "
                        "checksum (corrupt or a different release). It was left untouched: delete "
                        "or replace it with a good copy"))
        elif not rf.pinned:
            raise DataError(_describe(rf, raw_dir, "missing; it has no published checksum, so it is "
                                                   "never downloaded automatically"))
        elif not allow_download:
            why = f"{OFFLINE_ENV} is set" if os.environ.get(OFFLINE_ENV) else "downloads are off"
            raise DataError(_describe(rf, raw_dir, f"missing and {why}"))
        else:
            _download(rf, raw_dir)
        paths.append(path)
    return paths


def ensure_raw_files(name: str, raw_dir: str | Path, allow_download: bool = True) -> list[Path]:
    """Make sure every raw file of dataset ``name`` is in ``raw_dir/<name>/`` with the right checksum.

    Present and matching: used as is, no network. Present with a wrong checksum: DataError (the
    file is not deleted). Missing: downloaded (3 tries with backoff, temp file + atomic rename,
    checksum verified before the rename) when ``allow_download`` and ``FEDMGDA_OFFLINE`` is not
    set, else DataError. Every DataError names the file, its checksum, its URL and the path.
    """
    from fedmgda.data.registry import get_spec

    return ensure_files(get_spec(name).raw_files, raw_dir, allow_download)
