"""Release detection from distribution metadata, without importing deep_gemm."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

import dgcompat
from dgcompat import detection

from .conftest import write_dist

TVM_INIT = "import tvm_ffi\nraise RuntimeError('deep_gemm must not be imported by detection')\n"
TORCH_LIB_INIT = "import torch\ntorch.ops.load_library('x')\nraise RuntimeError('must not import')\n"
BUNDLED_INIT = "import deep_gemm_cpp\nraise RuntimeError('must not import')\n"


def test_nothing_installed(clean_dgcompat: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(detection.importlib.util, "find_spec", lambda name: None)
    rel = dgcompat.release()
    assert rel.source == "none" and rel.dist is None and rel.binding == "none"
    assert not rel.installed and rel.label == "none"


@pytest.mark.parametrize("version, spec", [("0.1.4", "==2.11.*"), ("0.1.5.post1", "==2.11.*"),
                                           ("0.1.5.post2", "==2.13.*"), ("0.2.1", "==2.13.*"),
                                           ("0.2.1.post1", "==2.14.*"), ("0.2.5", "==2.14.*")])
def test_sgl_deep_gemm(fake_site: Callable[..., Path], version: str, spec: str) -> None:
    fake_site("sgl-deep-gemm", version, TVM_INIT)
    rel = dgcompat.release()
    assert rel.dist == "sgl-deep-gemm" and rel.version == Version(version) and rel.source == "sgl-deep-gemm"
    assert rel.binding == "tvm-ffi" and rel.known
    assert rel.expected_torch == SpecifierSet(spec)
    torch_ok = Version(rel.torch.base_version) in SpecifierSet(spec) if rel.torch else False
    assert rel.torch_ok is torch_ok
    assert any("built for torch" in p for p in rel.problems) is (not torch_ok)
    assert "deep_gemm" not in sys.modules


def test_binding_eras(fake_site: Callable[..., Path]) -> None:
    fake_site("sgl-deep-gemm", "0.2.3", TORCH_LIB_INIT)
    assert dgcompat.release().binding == "torch-library"


def test_bundled_copy(fake_site: Callable[..., Path]) -> None:
    fake_site("sglang-kernel", "0.4.1.post1", BUNDLED_INIT)
    rel = dgcompat.release()
    assert rel.source == "bundled" and rel.dist == "sglang-kernel" and rel.binding == "bundled-torch-ops"
    assert rel.expected_torch == SpecifierSet("==2.9.1") and rel.label == "sglang-kernel 0.4.1.post1 (bundled)"
    assert rel.kernel_wheel is not None and rel.kernel_wheel.bundles_deep_gemm


def test_unknown_newer_release(fake_site: Callable[..., Path]) -> None:
    fake_site("sgl-deep-gemm", "0.3.0", TORCH_LIB_INIT)
    rel = dgcompat.release()
    assert not rel.known and rel.expected_torch is None
    assert any("newer than" in p and "probes" in p for p in rel.problems)


def test_two_distributions_claim_the_files(fake_site: Callable[..., Path], tmp_path: Path) -> None:
    site = tmp_path / "shared-site"
    # sglang-kernel 0.4.2 installed first, then sgl-deep-gemm over it: the files on disk are the latter's.
    write_dist(site, "sglang-kernel", "0.4.2", {"deep_gemm/__init__.py": BUNDLED_INIT})
    fake_site("sgl-deep-gemm", "0.1.4", TVM_INIT, site=site)
    rel = dgcompat.release()
    assert rel.dist == "sgl-deep-gemm"
    assert any("2 distributions claim deep_gemm/" in p and "sgl-deep-gemm 0.1.4's" in p for p in rel.problems)
    assert rel.kernel_wheel is not None and rel.kernel_wheel.meets_floor is False


def test_overwritten_files_are_reported(fake_site: Callable[..., Path]) -> None:
    fake_site("sgl-deep-gemm", "0.1.4", TVM_INIT, record_overrides={"deep_gemm/__init__.py": "sha256=AAAA"})
    rel = dgcompat.release()
    assert any("do not match" in p for p in rel.problems)


def test_kernel_floor(fake_site: Callable[..., Path], tmp_path: Path) -> None:
    site = tmp_path / "k"
    write_dist(site, "sglang-kernel", "0.4.5", {"sgl_kernel/__init__.py": ""})
    fake_site("sgl-deep-gemm", "0.1.4", TVM_INIT, site=site)
    kw = dgcompat.release().kernel_wheel
    assert kw is not None and kw.name == "sglang-kernel" and kw.meets_floor is True and not kw.bundles_deep_gemm


def test_unowned_files(clean_dgcompat: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "deep_gemm").mkdir()
    (tmp_path / "deep_gemm" / "__init__.py").write_text(TVM_INIT)
    monkeypatch.syspath_prepend(str(tmp_path))
    dgcompat.reset()
    rel = dgcompat.release()
    assert rel.source == "unowned" and rel.binding == "tvm-ffi"
    assert any("belongs to no installed distribution" in p for p in rel.problems)


def test_cached_and_resettable(fake_site: Callable[..., Path]) -> None:
    fake_site("sgl-deep-gemm", "0.1.2", TVM_INIT)
    first = dgcompat.release()
    assert dgcompat.release() is first
    fake_site("sgl-deep-gemm", "0.2.0", TVM_INIT)  # resets
    assert dgcompat.release().version == Version("0.2.0")


def test_release_is_printable(fake_site: Callable[..., Path]) -> None:
    fake_site("sgl-deep-gemm", "0.1.4", TVM_INIT)
    text = str(dgcompat.release())
    assert "sgl-deep-gemm 0.1.4" in text and "tvm-ffi" in text
