"""What a GPU session carries, small enough to travel (docs/performance.md, "Device check").

A GPU call takes the working tree and the paths it carries, at most 64 MiB together. The F-MNIST
files (30 MB of gzip), cvxopt's wheel (21 MB) and the tracked files (16 MB) were over it on
2026-11-27. xz keeps the same bytes in less room, so they travel as xz in one folder (``.carry/``)
and are unpacked there into what the package and pip read:

- ``raw/<dataset>/<name>.xz``: each raw file's content (decompressed where gzipped), unpacked to
  ``resources/raw/<dataset>/<name>`` (``.gz`` names gzipped again: the package checks the
  content's sha256, not the gzip header's bytes);
- ``wheels/<name>.whl.tar.xz``: a wheel's members (21 MB of zip, 12 MB as xz), unpacked to
  ``<wheels>/<name>.whl``, zipped again (pip checks each member's hash in its RECORD).

    python scripts/device_carry.py pack       # here: resources/raw/{fmnist,adult} and .whl/ -> .carry/
    python scripts/device_carry.py unpack     # there: .carry/ -> resources/raw/ and .whl/ (files absent only)
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import lzma
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ("fmnist", "adult")  # what the device check reads (parts 1 and 4)
LIMIT = 64 * 2**20  # bytes a call may carry with the working tree


def _write(target: Path, fill) -> Path:
    """``fill(binary file)`` into ``target`` through a temporary name (nothing half-written stays)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".tmp")
    with open(partial, "wb") as fh:
        fill(fh)
    partial.rename(target)
    return target


def pack(raw: Path, wheels: Path, out: Path) -> list[Path]:
    """Each file of ``raw``/<dataset>/ and each wheel of ``wheels`` into ``out`` (see the module's
    docstring); what is already packed is kept."""
    written = []
    for dataset in DATASETS:
        for path in sorted((raw / dataset).glob("*")) if (raw / dataset).is_dir() else []:
            target = out / "raw" / dataset / f"{path.name}.xz"
            if not target.exists():
                _write(target, lambda fh, path=path: _compress(path, fh))
            written.append(target)
    for wheel in sorted(wheels.glob("*.whl")) if wheels.is_dir() else []:
        target = out / "wheels" / f"{wheel.name}.tar.xz"
        if not target.exists():
            _write(target, lambda fh, wheel=wheel: _wheel_to_tar(wheel, fh))
        written.append(target)
    return written


def _compress(path: Path, fh) -> None:
    """A raw file's content (gunzipped for a ``.gz`` name) as xz into ``fh``."""
    with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as src, lzma.LZMAFile(fh, "wb", preset=9) as dst:
        shutil.copyfileobj(src, dst)


def _decompress(source: Path, fh, gz: bool) -> None:
    """An xz file's content into ``fh``, gzipped where ``gz``."""
    with lzma.open(source, "rb") as src, (gzip.GzipFile(fileobj=fh, mode="wb", compresslevel=1) if gz else contextlib.nullcontext(fh)) as dst:
        shutil.copyfileobj(src, dst)


def _wheel_to_tar(wheel: Path, fh) -> None:
    with zipfile.ZipFile(wheel) as zf, lzma.LZMAFile(fh, "wb", preset=9) as xz, tarfile.open(fileobj=xz, mode="w") as tar:
        for info in zf.infolist():
            data = zf.read(info)
            member = tarfile.TarInfo(info.filename)
            member.size, member.mode = len(data), (info.external_attr >> 16) or 0o644
            tar.addfile(member, io.BytesIO(data))


def _tar_to_wheel(source: Path, fh) -> None:
    with lzma.open(source) as xz, tarfile.open(fileobj=xz, mode="r|") as tar, zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED) as zf:
        for member in tar:
            info = zipfile.ZipInfo(member.name)
            info.external_attr, info.compress_type = member.mode << 16, zipfile.ZIP_DEFLATED
            zf.writestr(info, tar.extractfile(member).read())


def unpack(packed: Path, raw: Path, wheels: Path) -> list[Path]:
    """``packed``'s raw files into ``raw``/<dataset>/ and its wheels into ``wheels``, where absent."""
    written = []
    for source in sorted(packed.glob("raw/*/*.xz")):
        target = raw / source.parent.name / source.name[: -len(".xz")]
        if not target.exists():
            written.append(_write(target, lambda fh, source=source, gz=target.suffix == ".gz": _decompress(source, fh, gz)))
    for source in sorted(packed.glob("wheels/*.whl.tar.xz")):
        target = wheels / source.name[: -len(".tar.xz")]
        if not target.exists():
            written.append(_write(target, lambda fh, source=source: _tar_to_wheel(source, fh)))
    return written


def travel_bytes(carried: list[Path]) -> int:
    """The bytes a GPU call would take: the tracked files and those carried."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    files = [ROOT / name.decode() for name in tracked if name] + [p for c in carried for p in ([c] if c.is_file() else c.rglob("*"))]
    return sum(p.stat().st_size for p in files if p.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("pack", "unpack"))
    parser.add_argument("--raw-dir", default="resources/raw", type=Path)
    parser.add_argument("--wheels", default=".whl", type=Path)
    parser.add_argument("--packed", default=".carry", type=Path)
    args = parser.parse_args(argv)
    if args.action == "unpack":
        for path in unpack(args.packed, args.raw_dir, args.wheels):
            print(f"device_carry: {path}")
        return 0
    pack(args.raw_dir, args.wheels, args.packed)
    size = travel_bytes([args.packed])
    print(f"device_carry: carry {args.packed}: {size / 2**20:.1f} MiB with the tracked files (limit {LIMIT / 2**20:.0f})")
    if size > LIMIT:
        print("device_carry: over the limit: carry less", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
