"""The runner of DeepGEMM's own test files (conformance/dgcompat_conformance/gpu/upstream_tests.py),
exercised on the CPU with a fake deep_gemm and a fake test folder: discovery, seeds, both modes,
routing checks, the table and the exit status."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dgcompat_conformance.gpu.upstream_tests import discover
from dgcompat_conformance.harness.runner import child_env
from testsupport.dists import write_dist

from .test_dropin import FAKE_FILES

TEST_FILE = """
import random
import torch
import deep_gemm
from deep_gemm.utils.layout import get_mn_major_tma_aligned_tensor
from deep_gemm.testing import calc_diff
from helpers import value

def test_stable_layout():
    from deep_gemm.utils import get_tma_aligned_size
    assert get_tma_aligned_size(5, 4) == 8 and value() == 3
    assert type(deep_gemm).__name__ == "module" or float(calc_diff(torch.ones(3), torch.ones(3))) < 1e-12

def test_seeded():
    assert random.random() == random.Random(3).random()

def test_raises():
    raise RuntimeError("expected failure")

def test_only_raw():
    from deep_gemm.utils import align
    assert align(130, 128) == "real align"  # the fake's own value; dgcompat's align gives 256

def helper_not_a_test():
    raise AssertionError

if __name__ == "__main__":
    torch.manual_seed(3)
    random.seed(3)
    test_stable_layout()
"""


@pytest.mark.slow
def test_discover_and_run_both_modes(tmp_path: Path) -> None:
    site = tmp_path / "site"
    write_dist(site, "sgl-deep-gemm", "9.9.9", FAKE_FILES)
    tests = tmp_path / "upstream"
    tests.mkdir()
    (tests / "test_fake.py").write_text(TEST_FILE)
    (tests / "helpers.py").write_text("def value():\n    return 3\n")
    found = discover(tests, ["test_fake.py", "test_missing.py"])
    assert [(t.function, t.seed) for t in found] == [
        ("test_stable_layout", 3), ("test_seeded", 3), ("test_raises", 3), ("test_only_raw", 3)]
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, "-m", "dgcompat_conformance.gpu.upstream_tests", "--tests", str(tests),
                           "--site", str(site), "--files", "test_fake.py", "--timeout", "300", "--out", str(out),
                           "--work", str(tmp_path / "work"), "--jobs", "2"],
                          capture_output=True, text=True, env=child_env(), timeout=900, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # test_only_raw regresses through dgcompat
    data = json.loads(out.read_text())
    assert data["complete"] is True and data["functions"] == 4
    table = {r["id"].split("::")[1]: (r["raw"]["outcome"], r["dgcompat"]["outcome"]) for r in data["results"]}
    assert table == {"test_stable_layout": ("pass", "pass"), "test_seeded": ("pass", "pass"),
                     "test_raises": ("fail", "fail"), "test_only_raw": ("pass", "fail")}, table
    assert data["regressions"] == ["test_fake.py::test_only_raw"]
    by_id = {r["id"].split("::")[1]: r for r in data["results"]}
    assert by_id["test_seeded"]["dgcompat"]["deep_gemm"] == "dgcompat._install._Facade"
    assert by_id["test_seeded"]["raw"]["deep_gemm"] == "builtins.module"
    assert "| `test_fake.py::test_only_raw` | pass | fail |" in proc.stdout
    merged = subprocess.run([sys.executable, "-m", "dgcompat_conformance.gpu.upstream_tests", "--table-from", str(out),
                             str(out)], capture_output=True, text=True, env=child_env(), timeout=300, check=False)
    assert merged.returncode == 1 and merged.stdout.count("| `test_fake.py::test_only_raw` | pass | fail |") == 2
    assert "8 functions" in merged.stdout
