"""`import dgcompat` has no side effects; binding is lazy, once, and thread-safe."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import dgcompat
from testsupport.dists import torch_metadata


def _run(code: str, env_extra: dict[str, str] | None = None, path: str | None = None) -> dict[str, Any]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("DGCOMPAT_")}
    env.update(env_extra or {})
    if path:
        env["PYTHONPATH"] = path + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


_PROBE = """
import json, os, sys
before = dict(os.environ)
import dgcompat
{extra}
print(json.dumps({{
    "deep_gemm": any(m == "deep_gemm" or m.startswith("deep_gemm.") for m in sys.modules),
    "torch": "torch" in sys.modules,
    "cuda_init": bool(sys.modules["torch"].cuda.is_initialized()) if "torch" in sys.modules else False,
    "env_changed": sorted(k for k in set(os.environ) | set(before) if os.environ.get(k) != before.get(k)),
}}))
"""


def test_import_has_no_side_effects() -> None:
    result = _run(_PROBE.format(extra=""))
    assert result == {"deep_gemm": False, "torch": False, "cuda_init": False, "env_changed": []}


def test_release_imports_nothing(fake_site: Callable[..., Path]) -> None:
    site = fake_site("sgl-deep-gemm", "0.1.4", "raise RuntimeError('imported!')\n")
    result = _run(_PROBE.format(extra="r = dgcompat.release(); assert r.dist == 'sgl-deep-gemm', r"), path=str(site))
    assert result == {"deep_gemm": False, "torch": False, "cuda_init": False, "env_changed": []}


def test_capabilities_before_binding_imports_no_deep_gemm(fake_site: Callable[..., Path]) -> None:
    site = fake_site("sgl-deep-gemm", "0.1.4", "raise RuntimeError('imported!')\n")
    result = _run(_PROBE.format(extra="c = dgcompat.capabilities(); assert c.pdl == 'top-level', c"),
                  path=str(site))
    assert not result["deep_gemm"] and not result["cuda_init"] and result["env_changed"] == []


def test_stable_names_match_all() -> None:
    public = {n for n in dgcompat.__all__ if not n.startswith("__")}
    for name in public:
        assert getattr(dgcompat, name) is not None, name
    assert set(dir(dgcompat)) >= public


def test_missing_deep_gemm_is_a_clear_error(clean_dgcompat: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    dgcompat.reset()
    assert dgcompat.is_available() is False
    with pytest.raises(dgcompat.DeepGemmUnavailableError, match="DGCOMPAT_BACKEND=reference"):
        dgcompat.get_num_sms()
    with pytest.raises(AttributeError, match="no deep_gemm to pass it through"):
        dgcompat.set_tc_util  # noqa: B018


def test_broken_native_library_is_incompatible_build(fake_site: Callable[..., Path],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DGCOMPAT_ALLOW_TORCH_MISMATCH", "1")
    fake_site("sgl-deep-gemm", "0.2.3.post2", "raise OSError('_C.so: undefined symbol: _ZN3c104cuda19CUDAErrorLogCaptureC1Ev')\n")
    assert dgcompat.is_available() is False
    with pytest.raises(dgcompat.IncompatibleBuildError, match="undefined symbol"):
        dgcompat.fp8_gemm_nt(None, None, None)  # type: ignore[arg-type]


def test_torch_mismatch_refused_before_import(fake_site: Callable[..., Path]) -> None:
    # sgl-deep-gemm 0.2.5 needs torch 2.14; the test machine has another torch.
    site = fake_site("sgl-deep-gemm", "0.2.5", "raise RuntimeError('must not be imported')\n")
    torch_metadata(site, "2.12.0")  # what detection reads, whatever torch is installed
    dgcompat.reset()
    rel = dgcompat.release()
    assert rel.torch_ok is False, rel
    with pytest.raises(dgcompat.IncompatibleBuildError, match=r"built for torch==2\.14"):
        dgcompat.get_num_sms()


def test_thirty_two_threads_bind_once(fake_release: Callable[[str], Any], monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    fake_release("sgl-0.1.3")
    dgcompat.reset()  # unbind again; the module stays importable
    imports: list[str] = []
    real = importlib.import_module

    def counting(name: str, *a: Any) -> Any:
        if name == "deep_gemm":
            imports.append(name)
        return real(name, *a)

    monkeypatch.setattr(importlib, "import_module", counting)
    barrier = threading.Barrier(32)
    results: list[Any] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            barrier.wait()
            results.append(dgcompat.get_num_sms())
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert results == [132] * 32
    assert len(imports) == 1, f"deep_gemm bound {len(imports)} times"


def test_resolve_hands_back_upstream_objects(fake_release: Callable[[str], Any]) -> None:
    mod = fake_release("sgl-0.2.5")  # its dense GEMMs take every stable parameter, in the stable order
    assert dgcompat.resolve("fp8_gemm_nt") is mod.fp8_gemm_nt
    assert dgcompat.resolve("bf16_gemm_nt") is mod.bf16_gemm_nt
    assert dgcompat.resolve("m_grouped_bf16_gemm_nt_masked") is mod.m_grouped_bf16_gemm_nt_masked
    assert dgcompat.resolve("fp8_paged_mqa_logits") is dgcompat.fp8_paged_mqa_logits


def test_resolve_keeps_adapter_where_parameters_differ(fake_release: Callable[[str], Any]) -> None:
    fake_release("bundled")  # fp8_gemm_nt(a, b, d, c, recipe, compiled_dims, ...): no recipe_a at #5
    assert dgcompat.resolve("fp8_gemm_nt") is dgcompat.fp8_gemm_nt
    assert dgcompat.resolve("m_grouped_fp8_gemm_nt_contiguous") is dgcompat.m_grouped_fp8_gemm_nt_contiguous


def test_resolve_keeps_adapter_where_upstream_differs(fake_release: Callable[[str], Any]) -> None:
    fake_release("sgl-0.1.3")
    assert dgcompat.resolve("m_grouped_fp8_gemm_nt_contiguous") is dgcompat.m_grouped_fp8_gemm_nt_contiguous
    assert dgcompat.resolve("get_mn_major_tma_aligned_tensor") is dgcompat.get_mn_major_tma_aligned_tensor


def test_passthrough(fake_release: Callable[[str], Any]) -> None:
    mod = fake_release("sgl-0.1.3")
    assert dgcompat.get_tma_aligned_size(5, 4) == 8
    assert dgcompat.LENS_DIMS == 2  # a non-stable name comes from the installed deep_gemm
    assert "LENS_DIMS" in dgcompat.passthrough_names()
    assert mod is not None
    from dgcompat.utils.layout import get_mn_major_tma_aligned_tensor

    assert get_mn_major_tma_aligned_tensor is dgcompat.get_mn_major_tma_aligned_tensor
