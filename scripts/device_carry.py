"""The raw data files a GPU session carries, small enough to travel (docs/performance.md, "Device check").

A GPU call takes the working tree and the paths it carries, at most 64 MiB together. The F-MNIST
files (30 MB of gzip), cvxopt's wheel (21 MB) and the tracked files (16 MB) were over it on
2026-11-27. xz keeps the same bytes in less room (F-MNIST: 26 MB), so the raw files travel as xz
of their content and are unpacked there into what the package reads (``.gz`` names gzipped again:
the package checks the content's sha256, not the gzip header's bytes).

    python scripts/device_carry.py pack               # here: resources/raw/{fmnist,adult} -> .raw-xz/
    python scripts/device_carry.py unpack             # there: .raw-xz/ -> resources/raw/ (files absent only)
"""

from __future__ import annotations

import argparse
import gzip
import lzma
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ("fmnist", "adult")  # what the device check reads (parts 1 and 4)
LIMIT = 64 * 2**20  # bytes a call may carry with the working tree


def opener(path: Path):
    return gzip.open if path.suffix == ".gz" else open


def pack(raw: Path, out: Path) -> list[Path]:
    """Each file of ``raw``/<dataset>/ as ``out``/<dataset>/<name>.xz of its content (decompressed
    where gzipped); files already packed are kept."""
    written = []
    for dataset in DATASETS:
        for path in sorted((raw / dataset).glob("*")) if (raw / dataset).is_dir() else []:
            target = out / dataset / f"{path.name}.xz"
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                with opener(path)(path, "rb") as src, lzma.open(target.with_suffix(".tmp"), "wb", preset=9) as dst:
                    shutil.copyfileobj(src, dst)
                target.with_suffix(".tmp").rename(target)
            written.append(target)
    return written


def unpack(packed: Path, raw: Path) -> list[Path]:
    """Each ``packed``/<dataset>/<name>.xz into ``raw``/<dataset>/<name> (gzipped again for a
    ``.gz`` name) where that file is absent."""
    written = []
    for source in sorted(packed.glob("*/*.xz")):
        target = raw / source.parent.name / source.name[: -len(".xz")]
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".tmp")
        with lzma.open(source, "rb") as src, (gzip.open(partial, "wb", compresslevel=1) if target.suffix == ".gz" else open(partial, "wb")) as dst:
            shutil.copyfileobj(src, dst)
        partial.rename(target)
        written.append(target)
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
    parser.add_argument("--packed", default=".raw-xz", type=Path)
    parser.add_argument("--wheels", default=".whl", type=Path, help="also carried (pack: counted in the size)")
    args = parser.parse_args(argv)
    if args.action == "unpack":
        for path in unpack(args.packed, args.raw_dir):
            print(f"device_carry: {path}")
        return 0
    pack(args.raw_dir, args.packed)
    size = travel_bytes([args.packed, args.wheels])
    print(f"device_carry: carry {args.packed} and {args.wheels}: {size / 2**20:.1f} MiB with the tracked files (limit {LIMIT / 2**20:.0f})")
    if size > LIMIT:
        print("device_carry: over the limit: carry less", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
