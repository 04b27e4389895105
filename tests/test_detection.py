"""Release detection from distribution metadata, without importing deep_gemm."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

import dgcompat
from dgcompat import detection
from testsupport.dists import write_dist

TVM_INIT = "import tvm_ffi\nraise RuntimeError('deep_gemm must not be imported by detection')\n"
TORCH_LIB_INIT = "import torch\ntorch.ops.load_library('x')\nraise RuntimeError('must not import')\n"
BUNDLED_INIT = "import deep_gemm_cpp\nraise RuntimeError('must not import')\n"


def test_nothing_installed(clean_dgcompat: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    rel = dgcompat.release()
    assert rel.source == "none" and rel.dist is None and rel.binding == "none"
    assert not rel.installed and rel.label == "none"


@pytest.mark.parametrize(("version", "spec"), [("0.1.4", "==2.11.*"), ("0.1.5.post1", "==2.11.*"),
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


# --- every owner: vendored copies, upstream builds, unrelated distributions ---------------------

from dgcompat import errors  # noqa: E402
from testsupport import elfmaker  # noqa: E402

UPSTREAM_281_INIT = ("import torch\nfrom . import _C\nfrom ._C import fp8_gemm_nt, fp8_fp4_mqa_logits\n"
                     "raise RuntimeError('must not import')\n__version__ = '2.8.1'\n")
UPSTREAM_261_INIT = "import tvm_ffi\nfrom ._C import fp8_gemm_nt\nraise RuntimeError('no')\n__version__ = '2.6.1'\n"
V1_INIT = "import torch\nfrom .jit_kernels import gemm_fp8_fp8_bf16_nt\n"
AMD_INIT = "import torch\n# ROCm port of DeepGEMM\nfrom .hip_kernels import fp8_gemm_nt\n"


def _vllm_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, metadata: bool = True,
               so: bytes | None = None) -> Path:
    site = tmp_path / "vllm-site"
    files: dict[str, str | bytes] = {
        "vllm/__init__.py": "raise RuntimeError('detection must not import vllm')\n",
        "vllm/_version.py": "__version__ = version = '0.33.0'\n",
        "vllm/third_party/__init__.py": "",
        "vllm/third_party/deep_gemm/__init__.py": UPSTREAM_281_INIT,
        "vllm/third_party/deep_gemm/_C.py": "import torch\ntorch.ops.load_library('x')\n",
        "vllm/third_party/deep_gemm/_C_extension.abi3.so": so if so is not None else elfmaker.make_so(**elfmaker.STABLE_ABI),
    }
    info = write_dist(site, "vllm", "0.33.0", files)
    if not metadata:
        import shutil

        shutil.rmtree(info)
    monkeypatch.syspath_prepend(str(site))
    dgcompat.reset()
    return site


def test_vllm_vendored_copy(clean_dgcompat: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _vllm_site(tmp_path, monkeypatch)
    rel = dgcompat.release()
    assert (rel.dist, rel.version, rel.source) == ("deep-gemm", Version("2.8.1"), "vendored")
    assert rel.module == "vllm.third_party.deep_gemm" and rel.owner == "vllm 0.33.0"
    assert rel.version_source == "vllm/third_party/deep_gemm/__init__.py __version__"
    assert rel.binding == "stable-abi" and rel.torch_rule == "minimum"
    assert rel.expected_torch == SpecifierSet(">=2.10") and rel.refusal is None and rel.known
    assert rel.label == "deep-gemm 2.8.1 (vendored in vllm 0.33.0)"
    assert rel.torch_ok is (rel.torch is not None and Version(rel.torch.base_version) >= Version("2.10"))
    assert "vllm" not in sys.modules and "deep_gemm" not in sys.modules
    text = str(rel)
    assert "vllm.third_party.deep_gemm" in text and "torch>=2.10: the stable-ABI minimum" in text


def test_vendored_owner_version_from_its_version_file(clean_dgcompat: None, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _vllm_site(tmp_path, monkeypatch, metadata=False)
    rel = dgcompat.release()
    assert rel.owner == "vllm 0.33.0 (from vllm/_version.py)" and rel.version == Version("2.8.1")


def test_importable_deep_gemm_is_preferred_unless_a_vendored_copy_is_selected(
        fake_site: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _vllm_site(tmp_path, monkeypatch)
    fake_site("sgl-deep-gemm", "0.2.3.post2", TORCH_LIB_INIT)
    rel = dgcompat.release()
    assert rel.dist == "sgl-deep-gemm" and rel.module == "deep_gemm"
    assert any("also installed: vllm.third_party.deep_gemm" in p for p in rel.problems)
    monkeypatch.setenv("DGCOMPAT_BACKEND", "vllm")
    dgcompat.reset()
    rel = dgcompat.release()
    assert rel.module == "vllm.third_party.deep_gemm" and rel.source == "vendored"
    assert detection.backend_name() == "deep_gemm"


def test_tensorrt_llm_vendored_copy(clean_dgcompat: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "trt"
    write_dist(site, "tensorrt-llm", "1.2.0", {
        "tensorrt_llm/__init__.py": "raise RuntimeError('must not import')\n",
        "tensorrt_llm/deep_gemm/__init__.py": UPSTREAM_261_INIT,
        "tensorrt_llm/deep_gemm/_C.so": elfmaker.make_so(**elfmaker.TVM_FFI),
    })
    monkeypatch.syspath_prepend(str(site))
    dgcompat.reset()
    rel = dgcompat.release()
    assert (rel.dist, rel.version, rel.source, rel.module) == ("deep-gemm", Version("2.6.1"), "vendored",
                                                               "tensorrt_llm.deep_gemm")
    assert rel.owner == "tensorrt-llm 1.2.0" and rel.binding == "tvm-ffi" and rel.torch_rule == "exact"
    # built against torch's C++ API, and no pairing is known for it: said, not guessed
    assert rel.expected_torch is None and any("does not know which torch" in p for p in rel.problems)


def test_upstream_source_build(fake_site: Callable[..., Path]) -> None:
    fake_site("deep_gemm", "2.8.1+8b1392b", UPSTREAM_281_INIT,
              extra={"deep_gemm/_C.cpython-312-x86_64-linux-gnu.so": elfmaker.make_so(
                  defined=("PyInit__C",), undefined=elfmaker.UNSTABLE["undefined"])})
    rel = dgcompat.release()
    assert (rel.dist, rel.version, rel.source, rel.owner) == ("deep-gemm", Version("2.8.1"), "upstream",
                                                              "deep-gemm 2.8.1+8b1392b")
    assert rel.binding == "pybind" and rel.torch_rule == "exact" and rel.refusal is None


@pytest.mark.parametrize(("init_py", "version", "why"), [(V1_INIT, "1.0.0", "v1 API"), (AMD_INIT, "2.0.0", "AMD")])
def test_unrelated_deep_gemm_distributions_are_refused(fake_site: Callable[..., Path], init_py: str, version: str,
                                                       why: str) -> None:
    fake_site("deep_gemm", version, init_py)
    rel = dgcompat.release()
    assert rel.source == "unrelated" and rel.refusal is not None and why in rel.refusal
    assert rel.label == f"deep-gemm {version} (unrelated)" and any(why in p for p in rel.problems)
    from dgcompat import _backend

    with pytest.raises(errors.UnidentifiedBuildError, match=why):
        _backend.load()


def test_stable_abi_binding_and_minimum(fake_site: Callable[..., Path]) -> None:
    fake_site("deep_gemm", "2.8.1", UPSTREAM_281_INIT,
              extra={"deep_gemm/_C_extension.abi3.so": elfmaker.make_so(**elfmaker.STABLE_ABI)})
    rel = dgcompat.release()
    assert rel.binding == "stable-abi" and rel.expected_torch == SpecifierSet(">=2.10")
    assert "10" in rel.torch_evidence and "stable C shim" in rel.torch_evidence


def test_undated_shim_symbol_is_reported(fake_site: Callable[..., Path]) -> None:
    so = elfmaker.make_so(undefined=("aoti_torch_get_dim", "torch_something_from_the_future"))
    fake_site("deep_gemm", "2.9.0", UPSTREAM_281_INIT, extra={"deep_gemm/_C_extension.abi3.so": so})
    rel = dgcompat.release()
    assert rel.torch_rule == "minimum" and any("torch_something_from_the_future" in p for p in rel.problems)


def test_unowned_sgl_layer_is_refused_not_planned_as_newest(clean_dgcompat: None, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # a 0.1.4 Python layer copied without its dist-info (its __version__ does not carry .postN)
    (tmp_path / "deep_gemm").mkdir()
    (tmp_path / "deep_gemm" / "__init__.py").write_text(TVM_INIT + "__version__ = '0.1.4'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    dgcompat.reset()
    rel = dgcompat.release()
    assert rel.source == "unowned" and rel.version is None and rel.refusal is not None and "0.1.4" in rel.refusal
    from dgcompat import _backend, table

    with pytest.raises(errors.UnidentifiedBuildError, match=r"0\.1\.4"):
        _backend.load()
    caps = table.compute(rel, backend="deep_gemm", arch="sm90")
    assert caps.mqa_max_seqlen_k != "required"  # not planned as 0.2.5


def test_unowned_upstream_tree_is_identified_by_its_version(clean_dgcompat: None, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "deep_gemm").mkdir()
    (tmp_path / "deep_gemm" / "__init__.py").write_text(UPSTREAM_281_INIT)
    (tmp_path / "deep_gemm" / "_C_extension.abi3.so").write_bytes(elfmaker.make_so(**elfmaker.STABLE_ABI))
    monkeypatch.syspath_prepend(str(tmp_path))
    dgcompat.reset()
    rel = dgcompat.release()
    assert (rel.dist, rel.version, rel.source, rel.refusal) == ("deep-gemm", Version("2.8.1"), "unowned", None)
    assert rel.version_source == "deep_gemm/__init__.py __version__" and rel.label == "deep-gemm 2.8.1 (unowned)"


def test_two_sgl_dist_infos_in_one_site(fake_site: Callable[..., Path], tmp_path: Path) -> None:
    site = tmp_path / "twice"
    write_dist(site, "sgl-deep-gemm", "0.2.5", {"deep_gemm/__init__.py": "stale"})
    fake_site("sgl-deep-gemm", "0.1.4", TVM_INIT, site=site)  # overwrites the files; 0.2.5's dist-info stays
    rel = dgcompat.release()
    assert rel.version == Version("0.1.4")  # the RECORD whose hashes match, not the first found
    assert any("2 dist-info folders of sgl-deep-gemm" in p and "stale dist-info" in p for p in rel.problems)


def test_two_sgl_dist_infos_that_both_fail_to_match(fake_site: Callable[..., Path], tmp_path: Path) -> None:
    site = tmp_path / "mixed"
    write_dist(site, "sgl-deep-gemm", "0.2.5", {"deep_gemm/__init__.py": "a"})
    fake_site("sgl-deep-gemm", "0.1.4", TVM_INIT, site=site, record_overrides={"deep_gemm/__init__.py": "sha256=AAAA"})
    rel = dgcompat.release()
    assert rel.refusal is not None and rel.version is None
    assert any("owner cannot be established" in p for p in rel.problems)


# --- malformed metadata (each must give a problem, never an exception) ------------------------


def test_dist_info_without_metadata(fake_site: Callable[..., Path]) -> None:
    site = fake_site("sgl-deep-gemm", "0.1.4", TVM_INIT)
    (site / "sgl_deep_gemm-0.1.4.dist-info" / "METADATA").unlink()
    dgcompat.reset()
    rel = dgcompat.release()
    assert rel.version == Version("0.1.4") and any("no METADATA" in p for p in rel.problems)


def test_dist_info_without_name(fake_site: Callable[..., Path]) -> None:
    site = fake_site("sgl-deep-gemm", "0.1.4", TVM_INIT)
    (site / "sgl_deep_gemm-0.1.4.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nVersion: 0.1.4\n")
    dgcompat.reset()
    rel = dgcompat.release()
    assert rel.dist == "sgl-deep-gemm" and any("without Name" in p for p in rel.problems)
    assert isinstance(str(dgcompat.capabilities()), str)


def test_record_that_is_not_utf8(fake_site: Callable[..., Path]) -> None:
    site = fake_site("sgl-deep-gemm", "0.1.4", TVM_INIT)
    (site / "sgl_deep_gemm-0.1.4.dist-info" / "RECORD").write_bytes(b"deep_gemm/__init__.py,\xff\xfe,1\n")
    dgcompat.reset()
    rel = dgcompat.release()
    assert any("unreadable RECORD" in p for p in rel.problems)


def test_version_that_is_not_a_version(fake_site: Callable[..., Path]) -> None:
    site = fake_site("sgl-deep-gemm", "0.1.4", TVM_INIT)
    meta = site / "sgl_deep_gemm-0.1.4.dist-info" / "METADATA"
    meta.write_text(meta.read_text().replace("Version: 0.1.4", "Version: banana"))
    dgcompat.reset()
    rel = dgcompat.release()
    assert rel.version is None and rel.refusal is not None and "banana" in rel.refusal
    assert any("'banana' is not a PEP 440 version" in p for p in rel.problems)
    assert "None" not in rel.label


def test_elf_reader_is_bounded_and_total() -> None:
    from dgcompat.detection import _elf

    good = elfmaker.make_so(**elfmaker.STABLE_ABI)
    assert _elf.read_dynamic_bytes(good) is not None
    for bad in (b"", b"\x7fELF", good[:80], good[:-40], b"\x7fELF\x02\x01" + b"\xff" * 200):
        assert _elf.read_dynamic_bytes(bad) is None or isinstance(_elf.read_dynamic_bytes(bad), _elf.DynamicSymbols)
