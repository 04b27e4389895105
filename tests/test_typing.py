"""The public API type-checks (mypy, configured in pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_mypy_clean() -> None:
    if shutil.which("mypy") is None and subprocess.run([sys.executable, "-m", "mypy", "--version"],
                                                       capture_output=True, check=False).returncode != 0:
        pytest.skip("mypy is not installed (pip install -e '.[test]')")
    root = Path(__file__).parent.parent
    out = subprocess.run([sys.executable, "-m", "mypy"], cwd=root, capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
