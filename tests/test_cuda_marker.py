"""Every test that skips without a CUDA device carries the ``cuda`` marker (pyproject.toml), so
that ``make test-cuda`` (``pytest -m cuda``) runs each of them on a GPU machine."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
CUDA_SKIP = re.compile(r"skipif\(not torch\.cuda\.is_available\(\)")


def unmarked_cuda_skips(root: Path) -> list[str]:
    """``file:line`` of each CUDA skip without ``mark.cuda`` on its line or the lines beside it."""
    found = []
    for path in sorted(root.rglob("*.py")):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if CUDA_SKIP.search(line) and "mark.cuda" not in " ".join(lines[max(0, i - 1):i + 2]):
                found.append(f"{path.relative_to(root)}:{i + 1}")
    return found


def test_every_cuda_only_test_is_marked_cuda():
    assert unmarked_cuda_skips(TESTS) == []


def test_an_unmarked_cuda_skip_is_found(tmp_path):
    skip = "@pytest.mark.skipif(not torch.cuda." + "is_available(), reason='no CUDA device')"
    (tmp_path / "test_x.py").write_text(f"import pytest\n\n\n{skip}\ndef test_x():\n    pass\n")
    assert unmarked_cuda_skips(tmp_path) == ["test_x.py:4"]
    (tmp_path / "test_x.py").write_text(f"import pytest\n\n\n@pytest.mark.cuda\n{skip}\ndef "
                                        "test_x():\n    pass\n")
    assert unmarked_cuda_skips(tmp_path) == []
