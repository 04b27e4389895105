"""The CPU-tier stand-ins of the MQA logits: schema defaults and names, bf16 logits, FP4 / MX inputs per
architecture as each binary asserts them, and vLLM 0.34.0's SM90 next_n 4 KV-multicast launch.

The binaries are stood in for by tiny ELF files (``tests.elfmaker``) holding the schema and host-assert
strings copied from vLLM 0.34.0's ``vllm/third_party/deep_gemm/_C_extension.abi3.so`` (and, where said,
from sgl-deep-gemm wheels), read through the same readers as a real wheel.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from dgcompat import reference as R
from dgcompat_conformance.harness import standins
from dgcompat_conformance.harness.emulation import NativeState, Profile, StandInNotEmulated, emulate
from dgcompat_conformance.harness.indexer_rules import rules_from_asserts
from dgcompat_conformance.harness.signatures import NO_DEFAULT, OpSig, read_ops
from testsupport import elfmaker

FP8 = torch.float8_e4m3fn

# vLLM 0.34.0's vendored DeepGEMM 2.8.1 (strings of _C_extension.abi3.so).
VLLM34_SCHEMAS = (
    "fp8_fp4_mqa_logits(Tensor q, Tensor? q_sf, Tensor kv, Tensor kv_sf, Tensor weights, Tensor cu_seq_len_k_start, "
    "Tensor cu_seq_len_k_end, int max_seqlen_k, ScalarType logits_dtype=float, Tensor? schedule_meta=None) -> Tensor",
    "fp8_fp4_paged_mqa_logits(Tensor q, Tensor? q_sf, Tensor kv_cache, Tensor weights, Tensor context_lens, "
    "Tensor block_table, Tensor schedule_meta, int max_context_len, ScalarType logits_dtype=float, "
    "Tensor? indices=None) -> Tensor",
    "get_paged_mqa_logits_metadata(Tensor context_lens, int block_kv, int num_sms, Tensor? indices=None) -> Tensor",
    "init(str library_root_path, str python_package_name='deep_gemm') -> ()",
)
VLLM34_ASSERTS = (
    "(arch_major == 10 and (block_kv == 32 or block_kv == 64 or block_kv == 128)) or (arch_major == 9 and "
    "(block_kv == 32 or block_kv == 64)) or (arch_major == 12 and (block_kv == 32 or block_kv == 64))",
    "(not is_fp4 and head_dim == 32) or head_dim == 64 or head_dim == 128",
    "is_mx_sf == (arch_major == 10 or (arch_major == 12 and is_fp4))",
    "not is_fp4 or is_mx_sf",
    "weights.scalar_type() == torch::headeronly::ScalarType::Float or (arch_major == 10 and "
    "weights.scalar_type() == torch::headeronly::ScalarType::BFloat16)",
    "weights.scalar_type() != torch::headeronly::ScalarType::BFloat16 or logits_dtype == "
    "torch::headeronly::ScalarType::BFloat16",
    "logits_dtype == torch::headeronly::ScalarType::Float or logits_dtype == torch::headeronly::ScalarType::BFloat16",
    "next_n == 1 or next_n == 2 or next_n == 4",
    "arch_major == 12 or is_varlen == (arch_major == 10)",
    "_schedule_meta_size == num_sms / num_kv_multicast + 1 and _meta_info_size == 2",
    "num_heads == 16 or num_heads == 32 or num_heads == 64",
    "num_heads == 32 or num_heads == 64",
    "max_seqlen_k > 0",
)
# sgl-deep-gemm 0.1.6 - 0.2.3.post2: MX scale factors without the `is_mx_sf == (...)` condition.
SGL_023_ASSERTS = ("not is_fp4 or is_mx_sf", "not is_mx_sf", "next_n == 1 or next_n == 2",
                   "kv_sf.scalar_type() == (is_mx_sf ? torch::kInt32 : torch::kFloat)",
                   "logits_dtype == torch::kFloat32 or logits_dtype == torch::kBFloat16")
# sgl-deep-gemm 0.1.4 - 0.1.5.post3: before MX scale factors (a q_sf meant FP4).
SGL_014_ASSERTS = ("q_fp.scalar_type() == kPackedFP4", "next_n == 1 or next_n == 2",
                   "logits_dtype == torch::kFloat32 or logits_dtype == torch::kBFloat16")

_NAMESPACES = itertools.count()


def _library(tmp_path: Path, schemas: tuple[str, ...], asserts: tuple[str, ...]) -> Path:
    rodata = b"\x00" + b"".join(s.encode() + b"\x00" for s in schemas + asserts)
    lib = tmp_path / "_C_extension.abi3.so"
    lib.write_bytes(elfmaker.make_so(rodata=rodata, **elfmaker.STABLE_ABI))
    return lib


def _profile(arch: str = "sm90", asserts: tuple[str, ...] = VLLM34_ASSERTS, version: str = "0.34.0") -> Profile:
    return Profile(dist="vllm", version=version, flavor="sgl", binding="torch-library", arch=arch,
                   device_sms=132 if arch == "sm90" else 148, rules=rules_from_asserts(asserts))


def _names(op: str) -> tuple[str, ...]:
    text = next(s for s in VLLM34_SCHEMAS if s.startswith(op + "("))
    return tuple(p.split("=")[0].split()[-1] for p in text[len(op) + 1:text.index(") ->")].split(", "))


def _ragged(fmt: str, *, heads: int = 32, nq: int = 4, nk: int = 40, seed: int = 0) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(nq, heads, 128, generator=g), torch.randn(nk, 128, generator=g)
    if fmt == "fp4":
        (qv, qs), (kv, ks) = R.cast_to_fp4(q), R.cast_to_fp4(k)
    elif fmt == "mxfp8":
        (qv, qs), (kv, ks) = R.cast_to_mxfp8(q), R.cast_to_mxfp8(k)
    else:
        qv, qs = q.to(FP8), None
        kv, ksf = R.per_token_cast_to_fp8(k)
        ks = ksf.view(-1).contiguous()
    return {"q": qv, "q_sf": qs, "kv": kv, "kv_sf": ks, "w": torch.rand(nq, heads, generator=g),
            "ks": torch.tensor([0, 3, 10, 20][:nq], dtype=torch.int32),
            "ke": torch.tensor([40, 30, 11, 35][:nq], dtype=torch.int32)}


def _ragged_args(i: dict[str, Any], max_seqlen_k: int, logits_dtype: Any = torch.float32, w: Any = None) -> tuple[Any, ...]:
    return (i["q"], i["q_sf"], i["kv"], i["kv_sf"], i["w"] if w is None else w, i["ks"], i["ke"], max_seqlen_k,
            logits_dtype, None)


def _reference_ragged(i: dict[str, Any], max_seqlen_k: int, logits_dtype: Any = torch.float32, w: Any = None) -> Any:
    return R.fp8_fp4_mqa_logits((i["q"], i["q_sf"]), (i["kv"], i["kv_sf"]), i["w"] if w is None else w, i["ks"],
                                i["ke"], max_seqlen_k, logits_dtype)


def _valid(i: dict[str, Any], cols: int) -> torch.Tensor:
    valid: torch.Tensor = torch.arange(cols).unsqueeze(0) < (i["ke"] - i["ks"]).unsqueeze(1)
    return valid


# --------------------------------------------------------------------------- schema defaults and names


def test_schema_defaults_are_typed_values(tmp_path: Path) -> None:
    _, ops = read_ops(_library(tmp_path, VLLM34_SCHEMAS, ()))
    ragged = ops["fp8_fp4_mqa_logits"]
    assert [p.default for p in ragged.params[-2:]] == [torch.float32, None]  # not the string 'float'
    assert ragged.params[7].default is NO_DEFAULT
    assert ops["init"].params[1].default == "deep_gemm"
    assert ops["get_paged_mqa_logits_metadata"].params[3].default is None


def _define(ops: dict[str, OpSig], installed: Any) -> Any:
    """Register ``ops`` as the stand-ins do, in a namespace of this test's own (one DEF per namespace)."""
    ns = f"dgcompat_standin_test_{next(_NAMESPACES)}"
    lib = torch.library.Library(ns, "DEF")
    standins._LIBRARIES.append(lib)
    for name, sig in ops.items():
        assert sig.schema is not None
        lib.define(sig.schema)
        lib.impl(name, standins._torch_impl(sig, installed), "CompositeExplicitAutograd")
    return getattr(torch.ops, ns)


def test_vllm_0_34_calls_keep_their_schema_defaults(tmp_path: Path) -> None:
    """vLLM 0.34.0's own calls leave logits_dtype / schedule_meta to the schema defaults (the dispatcher drops an
    argument equal to its default): the stand-in must fill torch.float32, not the text 'float'."""
    lib = _library(tmp_path, VLLM34_SCHEMAS, VLLM34_ASSERTS)
    _, ops = read_ops(lib)
    installed = standins.Installed(_profile(), NativeState(), lib, ops, tmp_path)
    dg = _define({k: v for k, v in ops.items() if k != "init"}, installed)
    i = _ragged("fp8")
    want = _reference_ragged(i, 48)
    calls: tuple[Callable[[], Any], ...] = (
        lambda: dg.fp8_fp4_mqa_logits(i["q"], None, i["kv"], i["kv_sf"], i["w"], i["ks"], i["ke"], 48),
        lambda: dg.fp8_fp4_mqa_logits(*_ragged_args(i, 48)),
        lambda: dg.fp8_fp4_mqa_logits(i["q"], None, i["kv"], i["kv_sf"], i["w"], i["ks"], i["ke"], 48,
                                      logits_dtype=torch.float32),
    )
    for call in calls:
        out = call()
        assert out.dtype == torch.float32 and tuple(out.shape) == (4, 48)
        torch.testing.assert_close(out[_valid(i, 48)], want[_valid(i, 48)])
    b16 = dg.fp8_fp4_mqa_logits(i["q"], None, i["kv"], i["kv_sf"], i["w"], i["ks"], i["ke"], 48,
                                logits_dtype=torch.bfloat16)
    assert b16.dtype == torch.bfloat16
    assert torch.equal(b16[_valid(i, 48)], want.to(torch.bfloat16)[_valid(i, 48)])


def test_arguments_are_named_by_the_schema_not_the_arity() -> None:
    # vLLM 0.34.0's (..., max_seqlen_k, logits_dtype, schedule_meta) and sgl-deep-gemm 0.0.1's
    # (..., clean_logits, max_seqlen_k, logits_dtype_str) both have 10 arguments.
    i = _ragged("fp8")
    args = _ragged_args(i, 48)
    out = emulate(_profile(), NativeState(), "fp8_fp4_mqa_logits", args, _names("fp8_fp4_mqa_logits"))
    assert tuple(out.shape) == (4, 48)  # compressed: max_seqlen_k read as max_seqlen_k
    with pytest.raises(RuntimeError):
        emulate(_profile(), NativeState(), "fp8_fp4_mqa_logits", args)  # by arity: 48 lands in clean_logits
    with pytest.raises(StandInNotEmulated, match="schema argument"):
        emulate(_profile(), NativeState(), "fp8_fp4_mqa_logits", args, _names("fp8_fp4_mqa_logits")[:-1] + ("x",))


# --------------------------------------------------------------------------- logits dtype, FP4 and MX


def test_bf16_logits_on_sm90() -> None:
    i = _ragged("fp8")
    names = _names("fp8_fp4_mqa_logits")
    out = emulate(_profile(), NativeState(), "fp8_fp4_mqa_logits", _ragged_args(i, 48, torch.bfloat16), names)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out[_valid(i, 48)], _reference_ragged(i, 48).to(torch.bfloat16)[_valid(i, 48)])
    # bf16 weights: SM100 only ("arch_major == 10 and weights.scalar_type() == BFloat16")
    with pytest.raises(RuntimeError, match=r"weights\.scalar_type"):
        emulate(_profile(), NativeState(), "fp8_fp4_mqa_logits",
                _ragged_args(i, 48, torch.bfloat16, i["w"].bfloat16()), names)
    with pytest.raises(RuntimeError, match="logits_dtype == torch::kFloat32 or"):
        emulate(_profile(), NativeState(), "fp8_fp4_mqa_logits", _ragged_args(i, 48, torch.float16), names)


@pytest.mark.parametrize("fmt", ["fp4", "mxfp8"])
def test_mx_inputs_are_computed_on_sm100(fmt: str) -> None:
    i = _ragged(fmt)
    names = _names("fp8_fp4_mqa_logits")
    sm100 = _profile("sm100")
    out = emulate(sm100, NativeState(num_sms=148), "fp8_fp4_mqa_logits", _ragged_args(i, 48), names)
    assert torch.equal(out[_valid(i, 48)], _reference_ragged(i, 48)[_valid(i, 48)])
    w16 = i["w"].bfloat16()
    out16 = emulate(sm100, NativeState(num_sms=148), "fp8_fp4_mqa_logits", _ragged_args(i, 48, torch.bfloat16, w16),
                    names)
    assert out16.dtype == torch.bfloat16
    assert torch.equal(out16[_valid(i, 48)], _reference_ragged(i, 48, torch.bfloat16, w16)[_valid(i, 48)])
    with pytest.raises(RuntimeError, match=r"weights\.scalar_type\(\) != "):
        emulate(sm100, NativeState(num_sms=148), "fp8_fp4_mqa_logits", _ragged_args(i, 48, torch.float32, w16), names)
    with pytest.raises(RuntimeError, match="num_heads"):
        emulate(sm100, NativeState(num_sms=148), "fp8_fp4_mqa_logits", _ragged_args(_ragged(fmt, heads=8), 48), names)


@pytest.mark.parametrize(("asserts", "fmt", "match"), [
    (VLLM34_ASSERTS, "fp4", "is_mx_sf == "),         # upstream 2.8: is_mx_sf must equal (arch_major == 10 or ...)
    (VLLM34_ASSERTS, "mxfp8", "is_mx_sf == "),
    (SGL_023_ASSERTS, "fp4", "not is_mx_sf"),        # the bare assert, taken to be the SM90 path's
    (SGL_023_ASSERTS, "mxfp8", "not is_mx_sf"),
    (SGL_014_ASSERTS, "fp4", "arch_major == 10"),    # before MX: q_sf means FP4, an SM100 branch
])
def test_fp4_and_mx_inputs_are_refused_on_sm90_as_the_binary_asserts(asserts: tuple[str, ...], fmt: str,
                                                                     match: str) -> None:
    i = _ragged(fmt)
    names = _names("fp8_fp4_mqa_logits")
    with pytest.raises(RuntimeError, match=match):
        emulate(_profile("sm90", asserts), NativeState(), "fp8_fp4_mqa_logits", _ragged_args(i, 48), names)


def test_fp8_without_mx_scales_is_refused_on_sm100_of_2_8() -> None:
    i = _ragged("fp8")
    with pytest.raises(RuntimeError, match="is_mx_sf == "):
        emulate(_profile("sm100"), NativeState(num_sms=148), "fp8_fp4_mqa_logits", _ragged_args(i, 48),
                _names("fp8_fp4_mqa_logits"))
    # sgl-deep-gemm 0.2.3.post2 computes both forms there
    out = emulate(_profile("sm100", SGL_023_ASSERTS, "0.2.3.post2"), NativeState(num_sms=148), "fp8_fp4_mqa_logits",
                  _ragged_args(i, 48), _names("fp8_fp4_mqa_logits"))
    assert tuple(out.shape) == (4, 48)


# --------------------------------------------------------------------------- paged: varlen, FP4 cache, next_n 4


def _paged(fmt: str, next_n: int = 1, lens: tuple[int, ...] = (70, 130), seed: int = 1) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    b, heads, bkv = len(lens), 32, 64
    keys = torch.randn(b * 3, bkv, 128, generator=g)
    q = torch.randn(b, next_n, heads, 128, generator=g)
    if fmt == "fp4":
        cache, (qv, qs) = R.pack_fp4_kv_cache(keys), R.cast_to_fp4(q)
    elif fmt == "mxfp8":
        cache, (qv, qs) = R.pack_kv_cache(keys, mx=True), R.cast_to_mxfp8(q)
    else:
        cache, qv, qs = R.pack_kv_cache(keys), q.to(FP8), None
    ctx = torch.tensor([[max(n - next_n + j + 1, 1) for j in range(next_n)] for n in lens], dtype=torch.int32)
    return {"q": qv, "q_sf": qs, "cache": cache, "w": torch.rand(b * next_n, heads, generator=g), "ctx": ctx,
            "table": torch.arange(b * 3, dtype=torch.int32).view(b, 3), "max_len": 192}


def _paged_call(profile: Profile, state: NativeState, p: dict[str, Any], meta: Any, logits_dtype: Any = torch.float32,
                indices: Any = None) -> Any:
    args = (p["q"], p["q_sf"], p["cache"], p["w"], p["ctx"], p["table"], meta, p["max_len"], logits_dtype, indices)
    return emulate(profile, state, "fp8_fp4_paged_mqa_logits", args, _names("fp8_fp4_paged_mqa_logits"))


def _meta(profile: Profile, state: NativeState, ctx: Any, num_sms: int, indices: Any = None) -> Any:
    return emulate(profile, state, "get_paged_mqa_logits_metadata", (ctx, 64, num_sms, indices),
                   _names("get_paged_mqa_logits_metadata"))


@pytest.mark.parametrize("fmt", ["fp4", "mxfp8"])
def test_paged_mx_inputs_on_sm100_need_the_varlen_form(fmt: str) -> None:
    sm100, state = _profile("sm100"), NativeState(num_sms=148)
    p = _paged(fmt)
    want = R.fp8_fp4_paged_mqa_logits((p["q"], p["q_sf"]), p["cache"], p["w"], p["ctx"], p["table"], None,
                                      p["max_len"])
    indices = torch.arange(2, dtype=torch.int32)
    with pytest.raises(RuntimeError, match="is_varlen == \\(arch_major == 10\\)"):
        _paged_call(sm100, state, p, _meta(sm100, state, p["ctx"], 148))
    out = _paged_call(sm100, state, p, _meta(sm100, state, p["ctx"], 148, indices), indices=indices)
    assert torch.equal(out, want)
    out16 = _paged_call(sm100, state, p, _meta(sm100, state, p["ctx"], 148, indices), torch.bfloat16, indices)
    assert out16.dtype == torch.bfloat16 and torch.equal(out16, want.to(torch.bfloat16))
    with pytest.raises(RuntimeError, match="is_mx_sf == "):
        _paged_call(_profile("sm90"), NativeState(), p, _meta(_profile("sm90"), NativeState(), p["ctx"], 132))


def test_sm90_next_n_4_uses_the_kv_multicast_schedule() -> None:
    sm90, state = _profile("sm90"), NativeState()
    p = _paged("fp8", next_n=4)
    want = R.fp8_paged_mqa_logits(p["q"], p["cache"], p["w"], p["ctx"], p["table"], None, p["max_len"])
    out = _paged_call(sm90, state, p, _meta(sm90, state, p["ctx"], 132 // 2))  # vLLM's num_sms // 2 slots
    assert torch.equal(out[torch.isfinite(want)], want[torch.isfinite(want)])
    with pytest.raises(RuntimeError, match="num_sms / num_kv_multicast"):
        _paged_call(sm90, state, p, _meta(sm90, state, p["ctx"], 132))
    p2 = _paged("fp8", next_n=2)
    _paged_call(sm90, state, p2, _meta(sm90, state, p2["ctx"], 132))  # other next_n: one slot per SM
    with pytest.raises(RuntimeError, match="num_sms \\+ 1"):
        _paged_call(sm90, state, p2, _meta(sm90, state, p2["ctx"], 66))
    # a build without the multicast launch (sgl-deep-gemm 0.2.3.post2) has no next_n 4 on SM90
    sgl = _profile("sm90", SGL_023_ASSERTS, "0.2.3.post2")
    with pytest.raises(RuntimeError, match="next_n == 1 or next_n == 2"):
        _paged_call(sgl, NativeState(), p, _meta(sgl, NativeState(), p["ctx"], 66))
