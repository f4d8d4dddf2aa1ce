"""``make`` alone prints the Makefile's targets, one line each: every phony target a user runs,
with the text after its ``##``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_make_alone_lists_every_phony_target_once():
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    out = subprocess.run(["make", "-s", "--no-print-directory"], cwd=REPO, env=env,
                         capture_output=True,
                         text=True, check=True).stdout
    listed = re.findall(r"^  make (\S+) +\S", out, re.M)
    phony = re.search(r"^\.PHONY: (.*)$", (REPO / "Makefile").read_text(), re.M).group(1).split()
    assert len(listed) == len(out.splitlines()) == len(set(listed))
    assert sorted(listed) == sorted(phony) and "test-cuda" in listed
