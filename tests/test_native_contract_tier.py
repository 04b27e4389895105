"""The SM100 / SM120 indexer contract on the CPU tier: real wheel Python layers, stand-ins that
enforce the conditions read from each binary's host asserts, under DGCOMPAT_ARCH=sm100 and sm120."""

from __future__ import annotations

from pathlib import Path

import pytest

from dgcompat_conformance.harness.indexer_rules import rules_from_asserts
from dgcompat_conformance.releases import parse_release
from testsupport.wheels import published_wheel

_SM100_025 = (
    "(arch_major == 10 and (block_kv == 32 or block_kv == 64 or block_kv == 128)) or (arch_major == 9 and "
    "block_kv == 64) or (arch_major == 12 and (block_kv == 32 or block_kv == 64 or block_kv == 128 or block_kv == 256))",
    "is_mx_sf == (arch_major == 10 or (arch_major == 12 and is_fp4))",
    "weights.scalar_type() == (arch_major == 10 ? torch::kBFloat16 : torch::kFloat32)",
    "num_heads == 16 or num_heads == 32 or num_heads == 64",
    "num_heads == 32 or num_heads == 64",
    "__import__('os').system('x') == 1",  # never evaluated: not in the condition grammar
)


def test_rules_are_evaluated_from_the_assert_texts() -> None:
    rules = rules_from_asserts(_SM100_025)
    assert rules.block_kv == {"sm90": (64,), "sm100": (32, 64, 128), "sm120": (32, 64, 128, 256)}
    assert rules.mx_contract("sm100") and not rules.mx_contract("sm120") and not rules.mx_contract("sm90")
    assert rules.heads == {"sm90": (32, 64), "sm100": (16, 32, 64), "sm120": (16, 32, 64)}
    assert rules_from_asserts(["block_kv == 64 or (arch_major == 10 and block_kv == 32)"]).block_kv == {
        "sm90": (64,), "sm100": (32, 64), "sm120": (64,)}


def _run(release: str, arch: str, tmp_path: Path) -> dict[str, str]:
    from dgcompat_conformance.harness.child import SUITE_DIR
    from dgcompat_conformance.harness.runner import RunOptions, run_release

    opts = RunOptions(out_dir=tmp_path / arch, arch=arch, tests=[SUITE_DIR / "test_native_contract.py"],
                      no_xfails=True, timeout=600, write_certificates=False)
    cert = run_release(parse_release(release), opts)
    assert not cert.harness_error, cert.harness_error
    return {t["id"].rsplit("::", 1)[1]: t["outcome"] for t in cert.tests}


_MX = "test_raw_release_enforces_the_mx_contract"
_POSITIVE = "test_raw_release_enforces_positive_max_seqlen_k"
_PAGED_BLOCKS = "test_every_block_kv_of_the_contract_computes"  # paged refused under MX


@pytest.mark.wheels
@pytest.mark.parametrize(("release", "arch", "skipped"), [
    ("0.2.5", "sm100", {_PAGED_BLOCKS}),
    ("0.2.5", "sm120", {_MX}),
    ("0.2.3.post2", "sm100", {_MX, _POSITIVE}),
])
def test_contract_on_the_cpu_tier(release: str, arch: str, skipped: set[str], tmp_path: Path) -> None:
    published_wheel(release)
    outcomes = _run(release, arch, tmp_path)
    assert {t for t, o in outcomes.items() if o == "skipped"} == skipped, outcomes
    assert outcomes and set(outcomes.values()) <= {"passed", "skipped"}, outcomes


@pytest.mark.wheels
@pytest.mark.parametrize(("arch", "skipped"), [("sm100", {_PAGED_BLOCKS}), ("sm120", {_MX})])
def test_contract_of_vllm_2_8_1_on_the_cpu_tier(arch: str, skipped: set[str], tmp_path: Path) -> None:
    published_wheel("vllm-0.33.0")  # ~340 MB: $DGCOMPAT_CACHE/vllm/ or the wheel cache, downloaded once
    outcomes = _run("vllm-0.33.0", arch, tmp_path)
    assert {t for t, o in outcomes.items() if o == "skipped"} == skipped, outcomes
    assert outcomes and set(outcomes.values()) <= {"passed", "skipped"}, outcomes
