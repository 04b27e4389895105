"""The native-contract intake: host asserts read from the binary, diffed, mapped onto the table."""

from __future__ import annotations

from pathlib import Path

import pytest

from dgcompat_conformance import intake
from dgcompat_conformance.intake import host_asserts as contract
from dgcompat_conformance.surface import SurfaceError
from dgcompat_conformance.surface.native import host_assert_texts
from testsupport import elfmaker
from testsupport.wheels import published_wheel


def _so(*conditions: str) -> bytes:
    junk = ("fp8_gemm_nt(Any a, Any b, Tensor d) -> ()", "Assertion error (%s:%d): %s", "_ZN3c106detail4fooEv",
            "not a condition at all")
    return elfmaker.make_so(rodata=b"\x00" + b"\x00".join(s.encode() for s in (*junk, *conditions)) + b"\x00")


def test_host_assert_texts_keep_conditions_only() -> None:
    found = host_assert_texts(_so("num_heads == 32 or num_heads == 64", "q.is_contiguous()", "not clean_logits"))
    assert found == ("not clean_logits", "num_heads == 32 or num_heads == 64", "q.is_contiguous()")


def _contract(folder: Path, *conditions: str) -> contract.NativeContract:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "_C.so").write_bytes(_so(*conditions))
    return contract.contract_of(folder)


def test_changes_are_covered_outside_or_need_review(tmp_path: Path) -> None:
    before = _contract(tmp_path / "a", "num_heads == 8 or num_heads == 16 or num_heads == 32 or num_heads == 64",
                       "weights.scalar_type() == torch::kFloat", "head_dim == 128", "next_n == 1 or next_n == 2")
    after = _contract(tmp_path / "b", "num_heads == 16 or num_heads == 32 or num_heads == 64",
                      "weights.scalar_type() == (arch_major == 10 ? torch::kBFloat16 : torch::kFloat32)",
                      "l1_weights.dim() == 2", "next_n == 1 or next_n == 2")
    changes = contract.compare(before, after, contract.release_for("0.2.3.post2"), contract.release_for("0.2.5"))
    by_text = {c.text: c for c in changes}
    assert by_text["num_heads == 16 or num_heads == 32 or num_heads == 64"].status == "covered"
    assert by_text["num_heads == 16 or num_heads == 32 or num_heads == 64"].capability == "paged_heads"
    assert by_text["weights.scalar_type() == (arch_major == 10 ? torch::kBFloat16 : torch::kFloat32)"].capability \
        == "indexer_inputs"
    assert by_text["l1_weights.dim() == 2"].status == "outside"
    assert by_text["head_dim == 128"].status == "needs review"
    assert "next_n == 1 or next_n == 2" not in by_text  # unchanged
    # the same change between two releases the table answers alike is not covered
    same = contract.compare(before, after, contract.release_for("0.2.3"), contract.release_for("0.2.3.post2"))
    assert {c.text: c.status for c in same}["num_heads == 16 or num_heads == 32 or num_heads == 64"] == "needs review"


@pytest.mark.wheels
def test_0_2_3_post2_to_0_2_5_is_flagged(capsys: pytest.CaptureFixture[str]) -> None:
    published_wheel("0.2.3.post2")
    published_wheel("0.2.5")
    found = contract.latest_findings("0.2.3.post2", "0.2.5")
    covered = {c.capability for c in found.changes if c.status == "covered"}
    assert {"indexer_inputs", "paged_heads", "paged_block_kv", "mqa_uncompressed", "mqa_clean_logits"} <= covered
    texts = {c.text for c in found.changes}
    assert "is_mx_sf == (arch_major == 10 or (arch_major == 12 and is_fp4))" in texts
    assert found.breaking, "0.2.5 changed host asserts nothing covers: the intake must not call it safe"
    assert contract.main(["0.2.3.post2", "0.2.5"]) == 1
    assert "needs review" in capsys.readouterr().out


def test_latest_is_never_safe_with_an_unmapped_assert_change(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    change = contract.AssertChange("added", "head_dim == 64", None, "needs review", "no capability row maps this")
    monkeypatch.setattr(contract, "latest_findings", lambda base, newest: contract.Findings(
        [change], [f"native contract: needs review: added `{change.text}`"], []))
    surface = {"schema": 1, "release": {"name": "sgl-deep-gemm", "version": "0.2.5"}, "python": {}, "native": {}}
    monkeypatch.setattr(intake.newest, "extract", lambda source, **kw: surface)
    monkeypatch.setattr(intake.newest, "check_table", lambda s, arch="sm90": [])
    monkeypatch.setattr(intake.newest, "check_calls", lambda s, arch="sm90": [])
    monkeypatch.setattr(intake.newest, "check_torch", lambda s: [])
    result = intake.latest(version="0.2.5", baseline="0.2.3.post2", cpu_tier=False, out_dir=tmp_path)
    assert result.verdict == "breaking" and any("head_dim == 64" in w for w in result.where)


def test_unreadable_contract_is_never_safe(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(source: object, download: bool = False) -> contract.NativeContract:
        raise SurfaceError(f"{source} is not cached")

    monkeypatch.setattr(contract, "contract_of", missing)
    found = contract.latest_findings("0.2.5", "0.2.6")
    assert found.notes and "not compared" in found.notes[0] and not found.breaking
