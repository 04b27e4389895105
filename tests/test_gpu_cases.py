"""The GPU tier's overlapped masked GEMM case, dry-run on the CPU.

``grouped_masked_fp8_overlap`` runs against stand-ins of a bundled copy that follow the DeepGEMM
fork's signal protocol (one add per finished ``block_n`` tile of a block row, only for the block
rows ``masked_m`` makes run) and against ones that break it, and against releases without the
overlapped launch, where the typed refusal is its expected failure.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dgcompat import _backend
from dgcompat_conformance.gpu import cases
from dgcompat_conformance.gpu.certify import run_case_child
from dgcompat_conformance.gpu.install import release_env
from testsupport import fakes

CASE = "grouped_masked_fp8_overlap"

def _sbo(blocks: str = "-(-valid // block_m)", spoil: str = "pass") -> str:
    """A bundled masked GEMM following the fork's protocol on SM90 (sgl-project/DeepGEMM, enable_overlap):
    block_m 64, block_n 128 here; ``blocks`` is how many block rows of a group run, ``spoil`` what is done
    to ``d`` afterwards."""
    return f"""
def m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, expected_m, recipe=None, compiled_dims="nk",
        disable_ue8m0_cast=False, max_block_n=256, enable_overlap=False, signal=None):
    _masked(a, b, d, masked_m, expected_m)
    if not enable_overlap:
        return (None, None)
    block_m, block_n = 64, min(128, max_block_n)
    threshold = -(-d.shape[2] // block_n)
    rows = -(-d.shape[1] // block_m)
    for g, valid in enumerate(masked_m.tolist()):
        for block in range({blocks}):
            for _tile in range(threshold):
                signal[g * rows + block] += 1
    {spoil}
    return (block_m, threshold)
fp8_m_grouped_gemm_nt_masked = m_grouped_fp8_gemm_nt_masked
"""


VARIANTS = {
    "the fork's protocol": (_sbo(), "passed", None),
    "every block row signalled": (_sbo(blocks="rows"), "failed", "signal"),
    "another result with overlap": (_sbo(spoil="d.mul_(2)"), "failed", "valid rows"),
}


@pytest.fixture
def bundled(fake_site: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Install a stand-in of sglang-kernel's bundled copy whose masked GEMM body is ``fakes.BUNDLED`` + ``extra``."""

    def install(extra: str) -> None:
        monkeypatch.setenv("DGCOMPAT_ALLOW_TORCH_MISMATCH", "1")
        monkeypatch.setenv("DGCOMPAT_ARCH", "sm90")
        fake_site("sglang-kernel", "0.4.1.post1", fakes.BUNDLED + extra)
        _backend.load()

    return install


def _failed(rec: dict[str, Any]) -> list[str]:
    return [c["name"] for c in rec["checks"] if not c["ok"]]


@pytest.mark.parametrize("variant", VARIANTS)
def test_overlap_case_on_a_bundled_copy(bundled: Callable[[str], None], monkeypatch: pytest.MonkeyPatch,
                                        variant: str) -> None:
    body, outcome, failing = VARIANTS[variant]
    monkeypatch.setattr(cases, "DEVICE", "cpu")
    bundled(body)
    rec = cases.run_case(CASE)
    assert rec["outcome"] == outcome, rec
    names = [c["name"] for c in rec["checks"]]
    assert "returns (block_m, threshold), two positive ints" in names and "get_num_sms() afterwards equals before" in names
    if failing is None:
        assert _failed(rec) == [] and rec["value"] is not None and rec["value"] <= cases.TOL_FP8_GEMM
        assert any(n.startswith("signal = 4 for each of the 9 block rows that ran") for n in names), names
    else:
        assert _failed(rec) and all(failing in n for n in _failed(rec)), rec["checks"]


def test_the_stand_in_that_fills_the_whole_signal_fails(bundled: Callable[[str], None],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """testsupport.fakes.BUNDLED sets every entry to 1: the signal check says so."""
    monkeypatch.setattr(cases, "DEVICE", "cpu")
    bundled("")
    rec = cases.run_case(CASE)
    assert rec["outcome"] == "failed" and len(_failed(rec)) == 1 and _failed(rec)[0].startswith("signal = 3")


def test_expected_signal_follows_masked_m() -> None:
    # 4 groups of 256 rows in block rows of 64: 0, 1, 4 and 4 block rows run (indices g * 4 + i).
    want = cases.expected_signal((0, 1, 200, 256), 256, 64, 4, 20)
    assert want == [0, 0, 0, 0, 4, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4, 0, 0, 0, 0]
    assert cases.expected_signal((200,), 256, 128, 2, 4) == [2, 2, 0, 0]


def test_overlap_case_where_the_release_has_no_overlap(fake_release: Callable[[str], Any],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cases, "DEVICE", "cpu")
    fake_release("sgl-0.2.5")
    rec = cases.run_case(CASE)
    assert rec["outcome"] == "xfail", rec
    assert "masked_overlap" in rec["message"] and "UnsupportedFeatureError" in rec["message"]
    assert _failed(rec) == [] and [c["name"] for c in rec["checks"]] == [
        "refused with UnsupportedFeatureError", "the refusal names overlap", "d untouched", "signal untouched",
        "get_num_sms() unchanged"]


def _refusing(write: bool, words: str) -> Callable[..., Any]:
    """A masked GEMM that refuses overlap like dgcompat does, but (``write``) after writing d and the signal."""
    import dgcompat
    from dgcompat.errors import UnsupportedFeatureError

    real = dgcompat.m_grouped_fp8_gemm_nt_masked

    def call(a: Any, b: Any, d: Any, masked_m: Any, expected_m: int, *args: Any, overlap: Any = None,
             **kw: Any) -> Any:
        if overlap is None:
            return real(a, b, d, masked_m, expected_m, *args, **kw)
        if write:
            d.zero_()
            overlap.signal.fill_(1)
        raise UnsupportedFeatureError("m_grouped_fp8_gemm_nt_masked", words, "sgl-deep-gemm 0.2.5")

    return call


@pytest.mark.parametrize(("write", "words", "failing"), [
    (True, "overlap (enable_overlap/max_block_n/signal)", {"d untouched", "signal untouched"}),
    (False, "this launch", {"the refusal names overlap"}),
], ids=["writes before refusing", "names something else"])
def test_a_refusal_that_is_not_clean_fails(fake_release: Callable[[str], Any], monkeypatch: pytest.MonkeyPatch,
                                           write: bool, words: str, failing: set[str]) -> None:
    import dgcompat

    monkeypatch.setattr(cases, "DEVICE", "cpu")
    fake_release("sgl-0.2.5")
    monkeypatch.setattr(dgcompat, "m_grouped_fp8_gemm_nt_masked", _refusing(write, words))
    rec = cases.run_case(CASE)
    assert rec["outcome"] == "failed" and set(_failed(rec)) == failing, rec["checks"]


@pytest.mark.slow
def test_overlap_case_in_its_own_child_on_the_reference_backend(tmp_path: Path) -> None:
    """The runner's own path (a case child under its watchdog), CPU dry run on the reference backend."""
    env = release_env(tmp_path / "site", tmp_path / "jit")
    env.update(DGCOMPAT_CASES_DEVICE="cpu", DGCOMPAT_BACKEND="reference")
    rec = run_case_child(CASE, env, 240.0, tmp_path)
    assert rec["outcome"] == "xfail", rec.get("message")
    assert "overlap" in rec["message"] and not [c for c in rec["checks"] if not c["ok"]]
