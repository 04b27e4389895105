"""vLLM 0.34.0's and SGLang 0.5.23's DeepGEMM call sites (``tests/engine_calls/fp8_fp4_call_sites.py``), run
unchanged over every family, through the install and as ``import dgcompat as deep_gemm``.

Each (family, architecture, binding) is one conformance-harness child (:mod:`tests.call_sites`). A call-site
test fails when its call neither computes right nor raises a typed dgcompat error as its matrix requires;
here every call-site test must pass, or be skipped for a reason the matrix allows (the engine never takes
that path on that architecture; the CPU tier's stand-ins do not emulate that native path; a CUDA device is
needed). The plain-FP8 float32 sites, which every family computes, must have run. ``python -m
tests.call_sites`` prints the same runs as a call-site x family table.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.call_sites import ARCHS, BINDINGS, FAMILIES, Run, run

_ALLOWED_SKIPS = ("not applicable: ", "needs a CUDA device")
_CPU_TIER_SKIP = "not emulated by the CPU tier's stand-ins"


def _check(r: Run) -> None:
    if r.not_run is not None and "not in the wheel cache" in r.not_run:
        pytest.skip(r.not_run)
    assert r.not_run is None, r.not_run
    assert r.result is not None and r.result["import"]["ok"], r.result and r.result["import"]
    outcomes = r.outcomes()
    assert len(outcomes) >= 30, outcomes
    cpu_tier = r.result["tier"] == "cpu-tier"
    allowed = _ALLOWED_SKIPS + ((_CPU_TIER_SKIP,) if cpu_tier else ())
    wrong = {name: (outcome, message) for name, (outcome, message) in outcomes.items()
             if outcome != "passed" and not (outcome == "skipped" and any(a in message for a in allowed))}
    assert not wrong, wrong
    failed = [(rec["site"], rec["outcome"], rec["message"]) for rec in r.records if rec["verdict"] == "fail"]
    assert not failed, failed
    by_site: dict[str, dict[str, Any]] = {rec["site"]: rec for rec in r.records}
    assert len(by_site) == len(r.records) and len(by_site) >= 30, sorted(by_site)
    # The plain-FP8 float32 sites ran: computed where the matrix says compute, computed or refused (typed)
    # where the build takes only MX inputs; never skipped.
    fp8_sites = {site: rec for site, rec in by_site.items() if rec["needs"] == ["fp8"]}
    assert len(fp8_sites) >= 7, sorted(fp8_sites)
    did_not_run = {site: (rec["expected"], rec["outcome"]) for site, rec in fp8_sites.items()
                   if rec["outcome"] not in (("ok",) if rec["expected"] == "compute" else ("ok", "refused"))}
    assert not did_not_run, did_not_run
    standins = r.result.get("standins")
    if standins is not None:
        assert not standins["hangs"], standins["hangs"]
        assert standins["mapped_native_libraries"] == []


def _cases() -> list[Any]:
    cases = []
    for family in FAMILIES:
        for arch in ARCHS:
            for binding in BINDINGS:
                marks: list[Any] = []
                if family != "reference":
                    marks = [pytest.mark.wheels]
                elif (arch, binding) != ("sm90", "install"):
                    marks = [pytest.mark.slow]
                cases.append(pytest.param(family, arch, binding, id=f"{family}-{arch}-{binding}", marks=marks))
    return cases


@pytest.mark.parametrize(("family", "arch", "binding"), _cases())
def test_call_sites(family: str, arch: str, binding: str) -> None:
    _check(run(family, arch, binding))
