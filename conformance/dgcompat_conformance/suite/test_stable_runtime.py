"""dgcompat's detection and runtime knobs: release, capabilities, SM count, PDL, compile mode, alignment."""

from __future__ import annotations

from typing import Any

import pytest

from dgcompat.errors import BadArgumentError
from dgcompat_conformance.harness.session import current
from dgcompat_conformance.releases import VENDORED_PATHS
from dgcompat_conformance.suite import _support as S

pytestmark = pytest.mark.stable


def test_release_is_detected(dg: Any) -> None:
    rel = dg.release()
    if S.tier() == "reference":
        return
    assert rel.installed

    s = current()
    if s is not None and s.installed is not None:
        # The harness put exactly this release on sys.path; dgcompat must name it from its metadata
        # (a vendored upstream copy, which has none, from its own __version__).
        p = s.installed.profile

        if p.dist in VENDORED_PATHS:
            assert rel.dist == "deep-gemm" and rel.version_source.endswith("__version__")
            assert rel.refusal is None and rel.version is not None
        else:
            assert rel.dist == p.dist
            assert str(rel.version) == p.version


def test_is_available(dg: Any) -> None:
    assert dg.is_available() is True


def test_capabilities_describe_the_release(dg: Any) -> None:
    caps = dg.capabilities()
    assert caps.release
    if S.flavor() == "sgl":
        assert caps.paged_context_lens == "2d"
    elif S.flavor() == "bundled":
        assert caps.paged_context_lens == "1d"


def test_num_sms_roundtrip(dg: Any, restore_runtime: None) -> None:
    n = dg.get_num_sms()
    assert isinstance(n, int) and n > 0
    dg.set_num_sms(n - 1)
    assert dg.get_num_sms() == n - 1
    dg.set_num_sms(n)
    assert dg.get_num_sms() == n


def test_num_sms_context_manager_restores(dg: Any, restore_runtime: None) -> None:
    n = dg.get_num_sms()
    with dg.num_sms(n - 2):
        assert dg.get_num_sms() == n - 2
    assert dg.get_num_sms() == n
    with pytest.raises(RuntimeError), dg.num_sms(n - 1):
        raise RuntimeError("boom")
    assert dg.get_num_sms() == n
    with dg.num_sms(None):
        assert dg.get_num_sms() == n


@pytest.mark.parametrize("bad", [0, -1, 1.5, "8", True])
def test_set_num_sms_rejects(dg: Any, restore_runtime: None, bad: Any) -> None:
    with pytest.raises(BadArgumentError):
        dg.set_num_sms(bad)


def test_set_pdl(dg: Any) -> None:
    before = dg.get_pdl()
    try:
        applied = dg.set_pdl(True)
        assert isinstance(applied, bool)
        has_pdl = S.flavor() == "sgl" and S.version_at_least("0.1.1")
        if S.flavor() in ("sgl", "bundled"):
            # docs/sources/wheel-matrix.md §3/§5: a PDL switch exists from sgl-deep-gemm 0.1.1 (native only until
            # 0.1.4) and never in the bundled copies.
            assert applied is has_pdl
        if applied:
            assert dg.get_pdl() is True
    finally:
        if before is not None:
            dg.set_pdl(bool(before))


def test_compile_mode(dg: Any) -> None:
    if S.flavor() == "bundled":
        # docs/sources/upstream-history.md §1.9: only the bundled copies have set/get_compile_mode.
        import deep_gemm  # noqa: PLC0415 (only the bundled copies installed as deep_gemm have it; the reference tier has none)

        before = deep_gemm.get_compile_mode()
        with dg.compile_mode(1):
            assert deep_gemm.get_compile_mode() == 1
        assert deep_gemm.get_compile_mode() == before
    else:
        with dg.compile_mode(1):
            pass


def test_mk_alignment(dg: Any) -> None:
    # docs/sources/gpu-observed.md: 128 on SM90 in every release.
    assert dg.get_mk_alignment_for_contiguous_layout() == 128
