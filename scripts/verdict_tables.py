"""Regenerate the verdict tables of docs pages from their committed claims.csv files.

    python scripts/verdict_tables.py docs/fmnist-fairness.md [more pages ...]

A page marks each table with ``<!-- verdicts: <claims.csv> [claim-id pattern] -->`` ...
``<!-- /verdicts -->``; this rewrites what is between the markers
(tools/docnumbers.py, render_verdict_blocks).
tests/test_stated_verdicts.py fails when a page's tables differ from what this writes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fedmgda.errors import ClaimError

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
from docnumbers import render_verdict_blocks  # noqa: E402  (a maintainer tool, tools/)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", nargs="+", type=Path)
    args = parser.parse_args()
    for page in args.pages:
        text = page.read_text()
        try:
            new = render_verdict_blocks(text, REPO)
        except ClaimError as e:
            print(f"{page}: {e}", file=sys.stderr)
            return 1
        if new != text:
            page.write_text(new)
            print(f"{page}: verdict tables rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
