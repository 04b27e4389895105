"""Zero compiles at serve time: after dgcompat.jit_warmup.warmup, a process making the described calls the way
engines make them (every scale form, the layout helpers, MoE, both indexers) compiles nothing; the M policy, the
scale forms, the M classes, the presets and ``dgcompat warmup --check``. Against the fake JIT of
testsupport/fake_jit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import dgcompat
from dgcompat import jit_warmup as W
from dgcompat.errors import BadArgumentError
from dgcompat.jit_warmup import classes as C
from dgcompat.jit_warmup import spec as S

from .warmup_env import (
    compiles,
    jit_env_fixture,  # noqa: F401 - the jit_env fixture
)

REPO = Path(__file__).resolve().parent.parent
#: A serving process written the way engines call deep_gemm (not with the warmup's own call code).
ENGINE = REPO / "testsupport" / "engine_serve.py"


def serve(jit: dict[str, Any], want: list[Any], *, via: str = "dgcompat") -> str:
    """Run the engine-like process on the warmed folder (DG_JIT_CACHE_DIR the only setting); its stdout."""
    env = {**jit["env"], "DG_JIT_CACHE_DIR": str(jit["cache"]), "SERVE_VIA": via}
    script = jit["cache"].parent / "engine.py"
    script.write_text(ENGINE.read_text())
    cmd = [sys.executable, str(script), json.dumps(want)]
    if via == "install":
        cmd = [sys.executable, "-m", "dgcompat", "run", "--", *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=str(REPO), check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


# ---- the description ---------------------------------------------------------------------------------------

def test_the_default_policy_is_every_m_up_to_max_tokens() -> None:
    shapes = (W.DenseGemm(256, 512),)
    assert W.WarmupSpec(shapes).policy == W.MPolicy.every(S.DEFAULT_MAX_TOKENS) == W.MPolicy.every(16384)
    assert W.WarmupSpec(shapes, max_tokens=8).policy == W.MPolicy.every(8)
    assert W.WarmupSpec(shapes, W.MPolicy.values([3])).policy == W.MPolicy.values([3])
    with pytest.raises(BadArgumentError) as info:
        W.WarmupSpec(shapes, W.MPolicy.values([3]), max_tokens=8)
    assert info.value.argument == "max_tokens"
    with pytest.raises(BadArgumentError) as info:
        W.WarmupSpec(shapes, scales=("rowmajor",))  # type: ignore[arg-type]
    assert info.value.argument == "scales"
    assert "larger M" in W.MPolicy.every(8).coverage() and "any other M" in W.MPolicy.values([3]).coverage()
    assert "can compile at serve time" in W.MPolicy.changes(64).coverage()


def test_every_scale_form_the_gpu_takes_is_planned() -> None:
    fp8, bf16 = W.DenseGemm(256, 512), W.DenseGemm(256, 512, "bf16")
    assert S.forms_for(fp8, S.SCALE_FORMS, "sm90") == ("tma", "row")
    assert S.forms_for(fp8, S.SCALE_FORMS, "sm100") == ("ue8m0", "tma", "row")  # the GEMM's own form first
    assert S.forms_for(fp8, S.SCALE_FORMS, None) == ("tma", "row")
    assert S.forms_for(bf16, S.SCALE_FORMS, "sm90") == ("",)
    assert S.forms_for(W.PagedIndexer(64), S.SCALE_FORMS, "sm90") == ("",)
    spec = W.WarmupSpec((fp8, bf16, W.PagedIndexer(64, max_batch=10)), max_tokens=20)
    calls = S.plan_calls(spec, family="sm90")
    assert len(calls) == 20 * 2 + 20 + 10  # the paged batches stop at max_batch


def test_m_classes_follow_the_release_heuristics() -> None:
    from packaging.version import Version

    dense, masked = W.DenseGemm(256, 512), W.GroupedGemm(4, 256, 512, "masked", max_m=512)
    rule = C.rule_for("sgl-deep-gemm", Version("0.1.4"), "sm90")
    assert rule is C.SM90_01 and rule.read
    groups = C.classes(rule, dense, range(1, 200))
    assert [g[-1] for g in groups.values()] == [16, 32, 64, 128, 192, 199]  # 1-16, 17-32, then 64-wide
    assert [g[-1] for g in C.classes(rule, masked, range(1, 130)).values()] == [64, 128, 129]
    assert [g[-1] for g in C.classes(rule, W.PagedIndexer(64), range(1, 70)).values()] == [32, 64, 69]
    contiguous = W.GroupedGemm(4, 256, 512)
    assert len(C.classes(rule, contiguous, [128, 256, 384])) == 3  # each total its own class
    assert len(C.classes(rule, W.RaggedIndexer(64), range(1, 1000))) == 1
    assert C.rule_for("sgl-deep-gemm", Version("0.1.4"), "sm100") is C.SM100_01
    assert C.rule_for("sgl-deep-gemm", Version("0.2.5"), "sm90") is C.GUESS  # not read: a guess
    assert C.rule_for("sglang-kernel", Version("0.4.2"), "sm90") is C.GUESS and not C.GUESS.read


def test_presets_take_the_bound_from_the_command_line() -> None:
    from dgcompat.jit_warmup.cli import _parser, build_spec
    from dgcompat.jit_warmup.presets import ENGINE_MAX_TOKENS, preset

    assert ENGINE_MAX_TOKENS == {"sglang": 16384, "vllm": 8192}
    spec = build_spec(_parser().parse_args(["--preset", "deepseek-v3.2"]))
    assert spec.policy == W.MPolicy.every(16384)
    assert build_spec(_parser().parse_args(["--preset", "deepseek-v3", "--engine", "vllm"])).policy == \
        W.MPolicy.every(8192)
    assert build_spec(_parser().parse_args(["--preset", "deepseek-v3", "--max-tokens", "4096"])).policy == \
        W.MPolicy.every(4096)
    sampled = build_spec(_parser().parse_args(["--preset", "deepseek-v3", "--policy", "changes"]))
    assert sampled.policy == W.MPolicy.changes(16384)
    kinds = [type(s).__name__ for s in spec.shapes]
    assert kinds.count("DenseGemm") == 8 and kinds.count("GroupedGemm") == 4
    assert kinds.count("PagedIndexer") == 2 and kinds.count("RaggedIndexer") == 1
    assert {s.next_n for s in spec.shapes if isinstance(s, W.PagedIndexer)} == {1, 2}
    assert preset("deepseek-v3-dense", max_tokens=4096).shapes == spec.shapes[:6]
    only = build_spec(_parser().parse_args(["--preset", "deepseek-v3", "--scales", "tma", "--max-batch", "64"]))
    assert only.scales == ("tma",)


# ---- zero compiles at serve time ---------------------------------------------------------------------------

@pytest.mark.slow
def test_every_call_form_engines_use_is_warm(jit_env: dict[str, Any]) -> None:
    shapes = (W.DenseGemm(256, 512), W.GroupedGemm(4, 256, 512), W.GroupedGemm(4, 256, 512, "masked", max_m=64))
    report = W.warmup(W.WarmupSpec(shapes, max_tokens=300), cache_dir=jit_env["cache"], workers=2,
                             progress=False)
    assert report.method == "stand-in" and report.forms == ("tma", "row")
    assert report.verified == report.calls and report.identified < report.calls // 4
    warmed = len(compiles(jit_env["log"]))
    assert warmed == report.compiled == len(set(compiles(jit_env["log"])))
    ms = list(range(1, 301))
    want = [["dense", [256, 512], ms], ["contiguous", [4, 256, 512], sorted({-(-m // 128) * 128 for m in ms})],
            ["masked", [4, 256, 512, 64], list(range(1, 65))]]
    assert "served" in serve(jit_env, want)
    assert len(compiles(jit_env["log"])) == warmed  # nothing compiled at serve time
    assert "served" in serve(jit_env, want, via="install")  # import deep_gemm under python -m dgcompat run
    assert len(compiles(jit_env["log"])) == warmed


@pytest.mark.slow
def test_the_indexer_is_warm_for_every_batch_bucket(jit_env: dict[str, Any]) -> None:
    spec = W.WarmupSpec((W.PagedIndexer(64, 128, 64, 1, 256, max_batch=100), W.PagedIndexer(64, 128, 64, 2, 256,
                                                                                               max_batch=100),
                         W.RaggedIndexer(64, 128)), max_tokens=500)
    report = W.warmup(spec, cache_dir=jit_env["cache"], workers=2, progress=False)
    # one schedule kernel per batch rounded up to 32 (32, 64, 96, 128), one paged logits kernel per next_n,
    # one ragged logits kernel
    assert report.compiled == 4 + 2 + 1 == len(compiles(jit_env["log"]))
    want = [["paged", [64, 128, 64, 1, 256], list(range(1, 101))], ["paged", [64, 128, 64, 2, 256], [1, 37, 100]],
            ["ragged", [64, 128, 256], [1, 5, 77, 500]]]
    assert "served" in serve(jit_env, want)
    assert len(compiles(jit_env["log"])) == report.compiled
    serve(jit_env, [["paged", [64, 128, 64, 1, 256], [129]]])  # beyond max_batch: a bucket nobody warmed
    assert len(compiles(jit_env["log"])) == report.compiled + 1


@pytest.mark.slow
def test_identification_is_per_m_class_and_finds_what_every_call_needs(jit_env: dict[str, Any],
                                                                      tmp_path: Path) -> None:
    spec = W.WarmupSpec((W.DenseGemm(256, 512), W.DenseGemm(384, 1024)), max_tokens=2048, scales=("tma",))
    report = W.warmup(spec, cache_dir=jit_env["cache"], workers=2, progress=False)
    # the SM90 classes of sgl-deep-gemm 0.1.x: 1-16, 17-32 and 32 classes of 64 per shape
    assert (report.calls, report.identified, report.verified) == (2 * 2048, 2 * 34, 2 * 2048)
    assert report.verify_kernels == 0 and report.compiled == 6
    serial = jit_env["cache"].parent / "serial"
    want = [["dense", [256, 512], list(range(1, 2049))], ["dense", [384, 1024], list(range(1, 2049))]]
    serve({**jit_env, "cache": serial}, want)  # every call, serially, on an empty folder: the kernels it needs
    assert sorted(os.listdir(serial / "cache")) >= sorted(os.listdir(jit_env["cache"] / "cache"))
    assert len(os.listdir(serial / "cache")) == 6 + 2  # and the transposes of its row-major scales


@pytest.mark.slow
def test_a_class_coarser_than_the_release_is_caught_by_the_verify_pass(jit_env: dict[str, Any],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from dgcompat.jit_warmup import entry

    one = C.Rule("one class (wrong on purpose)", lambda m: 0, lambda m: 0, lambda m: 0, lambda m: 0, False)
    monkeypatch.setattr(entry, "rule_for", lambda *args: one)
    spec = W.WarmupSpec((W.DenseGemm(256, 512),), max_tokens=2000, scales=("tma",))
    report = W.warmup(spec, cache_dir=jit_env["cache"], workers=2, progress=False)
    assert report.identified == 1 and report.compiled == 3  # block_m 64, 128 and 256
    assert report.verify_kernels == 2 and any("only by the verify pass" in n for n in report.notes)
    before = len(compiles(jit_env["log"]))
    serve(jit_env, [["dense", [256, 512], [1, 64, 65, 1024, 1025, 2000]]])
    assert len(compiles(jit_env["log"])) == before + 1  # the transpose of the row-major scales (not warmed here)


# ---- the check ---------------------------------------------------------------------------------------------

def _cli(jit: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dgcompat", "warmup", *args], capture_output=True, text=True,
                          env=jit["env"], timeout=600, cwd=str(REPO), check=False)


@pytest.mark.slow
def test_the_check_finds_nothing_to_compile_after_a_warmup(jit_env: dict[str, Any]) -> None:
    out = _cli(jit_env, "--dense", "256,512", "--grouped", "4,256,512,masked,64", "--indexer", "64,128,64,1,256,64",
               "--max-tokens", "300", "--cache-dir", str(jit_env["cache"]), "--check", "--json", "--no-progress")
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout)
    assert got["check"]["compiled"] == 0 and got["check"]["calls"] > 0 and not got["check"]["errors"]
    assert got["warmup"]["compiled"] == len(compiles(jit_env["log"]))


@pytest.mark.slow
def test_the_check_reports_each_miss_with_its_shape_and_m(jit_env: dict[str, Any]) -> None:
    out = _cli(jit_env, "--dense", "256,512", "--ms", "1", "--scales", "tma", "--cache-dir", str(jit_env["cache"]),
               "--no-progress")
    assert out.returncode == 0, out.stderr[-2000:]
    checked = _cli(jit_env, "--dense", "256,512", "--max-tokens", "2000", "--cache-dir", str(jit_env["cache"]),
                   "--check-only", "--check-sample", "4")
    assert checked.returncode == 1, checked.stderr[-2000:]
    # M=1 was warmed (block_m 64); the sample's larger M need block_m 128 and 256, and the row-major scales a transpose
    assert "compiled 3 kernels" in checked.stdout and "FAILED" in checked.stdout, checked.stdout
    misses = [line for line in checked.stdout.splitlines() if line.startswith("  miss: fp8 dense N=256 K=512 M=")]
    assert len(misses) == 3 and sum("scales=row" in line for line in misses) == 1, checked.stdout
    assert "Traceback" not in checked.stderr


def test_the_check_on_the_reference_backend_is_a_no_op(clean_dgcompat: None, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from dgcompat.jit_warmup.check import check

    monkeypatch.setenv("DGCOMPAT_BACKEND", "reference")
    report = check(W.WarmupSpec((W.DenseGemm(256, 512),), max_tokens=8), cache_dir=tmp_path)
    assert report.ok and report.calls == 0 and "nothing to check" in report.summary()
    with pytest.raises(BadArgumentError) as info:
        check(W.WarmupSpec((W.DenseGemm(256, 512),), max_tokens=8), cache_dir=tmp_path, sample=0)
    assert info.value.argument == "sample"


@pytest.mark.slow
def test_the_gpu_case_passes_on_the_fake_jit(jit_env: dict[str, Any]) -> None:
    env = {**jit_env["env"], "DGCOMPAT_CASES_DEVICE": "cpu", "DG_JIT_CACHE_DIR": str(jit_env["cache"])}
    out = subprocess.run([sys.executable, "-m", "dgcompat_conformance.gpu.cases", "warmup_zero_compiles"],
                         capture_output=True, text=True, env=env, timeout=600, cwd=str(REPO), check=False)
    rec = json.loads(out.stdout.strip().splitlines()[-1])
    assert rec["outcome"] == "passed", rec
    assert [c["name"] for c in rec["checks"]] == ["every call verified against the folder", "each kernel counted once",
                                                 "the check compiled nothing", "the check ran calls"]
    assert len(compiles(jit_env["log"])) > 0


@pytest.mark.slow
def test_a_layout_helper_the_release_lacks_is_skipped(jit_env: dict[str, Any]) -> None:
    from testsupport import fake_jit
    from testsupport.dists import write_dist

    site = jit_env["site"]
    files = fake_jit.files("0.1.4")
    files["deep_gemm/__init__.py"] = str(files["deep_gemm/__init__.py"]) + "\ndel transform_sf_into_required_layout\n"
    write_dist(site, "sgl-deep-gemm", "0.1.4", files)  # the same folder, rewritten
    dgcompat.reset()
    report = W.warmup(W.WarmupSpec((W.DenseGemm(256, 512),), max_tokens=100), cache_dir=jit_env["cache"],
                             workers=2, progress=False)
    assert report.method == "stand-in" and report.verified == report.calls == 200
    assert report.compiled == 3  # block_m 64 and 128, and the transpose the GEMM and get_mn_major_... need


@pytest.mark.slow
def test_the_check_loads_neither_torch_nor_deep_gemm_in_the_calling_process(jit_env: dict[str, Any]) -> None:
    code = textwrap.dedent(f"""
        import json, sys
        from dgcompat.jit_warmup import DenseGemm, WarmupSpec, warmup
        from dgcompat.jit_warmup.check import check
        if __name__ == "__main__":
            spec = WarmupSpec((DenseGemm(256, 512),), max_tokens=64)
            warmup(spec, cache_dir={str(jit_env['cache'])!r}, workers=1, progress=False)
            r = check(spec, cache_dir={str(jit_env['cache'])!r}, sample=4)
            print(json.dumps([r.ok, r.calls, "torch" in sys.modules, "deep_gemm" in sys.modules]))
    """)
    script = jit_env["cache"].parent / "checker.py"
    script.write_text(code)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=jit_env["env"],
                         timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [True, 8, False, False]
