"""Raw files: where they come from, how they are checked, how they are fetched.

Every raw file a dataset needs is a :class:`RawFile` with a pinned checksum (and, for a gzip
file, optionally a pinned checksum of its decompressed content). ``ensure_files`` uses a file that
is already in place with a matching checksum without touching the network (so files copied by
hand onto an air-gapped node just work), refuses a file with neither checksum matching, and
otherwise downloads it with retries into a temporary file in the same folder, verifies it and
moves it into place with ``os.replace`` (atomic: no half file is ever left under the real name).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import sys
import time
import urllib.request
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from fedmgda.data.base import DataError
from fedmgda.runfolder import temporary_file

UNPINNED = "unpinned"
HASH_ALGORITHMS = ("md5", "sha256")
DOWNLOAD_TRIES = 3
RETRY_BACKOFF_S = 2.0  # waits 2 s, then 4 s between tries; tests set it to 0
TIMEOUT_S = 60.0
OFFLINE_ENV = "FEDMGDA_OFFLINE"


@dataclass(frozen=True)
class RawFile:
    """One raw file of a dataset, as published at ``url``.

    checksum: ``"md5:<hex>"`` or ``"sha256:<hex>"`` (the algorithm the source publishes; a bare
    64-hex string is read as sha256), or ``"unpinned"`` where no published checksum exists: such a
    file is never downloaded automatically, is accepted when placed by hand, and its sha256 is
    printed so that it can be pinned.
    content_checksum: ``"sha256:<hex>"`` of the decompressed bytes of a ``.gz`` file, or ``""``.
    A copy whose gzip header differs (file name, time stamp: e.g. Debian's
    ``dataset-fashion-mnist``) but whose content is the same is accepted through it.
    """

    dataset: str
    filename: str
    url: str
    checksum: str
    note: str = ""
    content_checksum: str = ""

    def __post_init__(self) -> None:
        if self.content_checksum:
            if not self.filename.endswith(".gz"):
                raise ValueError(f"{self.filename}: a content checksum needs a .gz file")
            if (not self.content_checksum.startswith("sha256:")
                or len(self.content_checksum) != 7 + 64):
                raise ValueError(f"bad content checksum {self.content_checksum!r}: "
                                 f"use sha256:<hex>")
        if self.checksum == UNPINNED:
            return
        algo, _, digest = self.checksum.partition(":")
        if not digest and len(algo) == 64:
            object.__setattr__(self, "checksum", f"sha256:{algo}")
        elif algo not in HASH_ALGORITHMS or not digest:
            raise ValueError(f"bad checksum {self.checksum!r}: use md5:<hex>, sha256:<hex> or "
                             "unpinned")

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

    def problem(self, path: str | Path) -> str | None:
        """None when the file at ``path`` matches the archive checksum or the content checksum,
        else what its checksums are (a DataError's reason)."""
        got = file_digest(path, self.algorithm)
        if got == self.digest:
            return None
        reason = f"{self.algorithm} {got}"
        if self.content_checksum:
            try:
                content = "sha256:" + file_digest(path, "sha256", decompress=True)
            except (OSError, EOFError, zlib.error) as exc:  # not a readable gzip file
                content = f"unreadable ({type(exc).__name__}: {exc})"
            if content == self.content_checksum:
                return None
            reason += f" and decompressed content {content}"
        return reason


def file_digest(path: str | Path, algorithm: str = "sha256", decompress: bool = False) -> str:
    """The hex digest of the file's bytes (``decompress``: of its gunzipped bytes)."""
    h = hashlib.new(algorithm)
    with (gzip.open if decompress else open)(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _describe(rf: RawFile, raw_dir: str | Path, problem: str) -> str:
    """One line: the file, what is wrong, where to put a good copy and how to recognise one."""
    checksum = rf.checksum + (f" (or decompressed content {rf.content_checksum})"
                              if rf.content_checksum else "")
    note = f"; note: {rf.note}" if rf.note else ""
    return (f"{rf.dataset}: raw file {rf.filename!r}: {problem}; place a good copy by hand at "
            f"{rf.path(raw_dir).resolve()} "
            f"(expected checksum {checksum}; source URL {rf.url}{note}; docs/datasets.md lists "
            "every raw file)")


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
    tmp = temporary_file(target.parent, prefix=f".{rf.filename}.", suffix=".part")
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
        problem = rf.problem(tmp)
        if problem is not None:
            raise DataError(
                _describe(rf, raw_dir, f"downloaded file has {problem} (mismatch); "
                                       "the server copy differs from the pinned one")
            )
        os.replace(tmp, target)
        return target
    finally:
        if tmp.exists():
            tmp.unlink()


def ensure_files(raw_files: Iterable[RawFile], raw_dir: str | Path,
                 allow_download: bool = True) -> list[Path]:
    """Check (and if allowed, fetch) each raw file; return their paths (registry.ensure_raw_files
    looks them up by dataset)."""
    if os.environ.get(OFFLINE_ENV, "").strip() not in ("", "0"):
        allow_download = False
    paths = []
    for rf in raw_files:
        path = rf.path(raw_dir)
        if path.is_file():
            if not rf.pinned:
                print(f"[fedmgda] {rf.dataset}/{rf.filename} has no pinned checksum; its sha256 is "
                      f"{file_digest(path, 'sha256')} (pin it in the registry to protect later "
                      "runs)",
                      file=sys.stderr)
            else:
                problem = rf.problem(path)
                if problem is not None:
                    raise DataError(_describe(
                        rf, raw_dir,
                        f"the file at {path} has {problem}, which is not the pinned "
                        "checksum (corrupt or a different release). It was left untouched: delete "
                        "or replace it with a good copy"))
        elif not rf.pinned:
            raise DataError(_describe(rf, raw_dir,
                                      "missing; it has no published checksum, so it is "
                                                   "never downloaded automatically"))
        elif not allow_download:
            why = f"{OFFLINE_ENV} is set" if os.environ.get(OFFLINE_ENV) else "downloads are off"
            raise DataError(_describe(rf, raw_dir, f"missing and {why}"))
        else:
            _download(rf, raw_dir)
        paths.append(path)
    return paths

