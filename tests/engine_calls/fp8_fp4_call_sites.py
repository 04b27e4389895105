"""The DeepGEMM call sites of vLLM 0.34.0 and SGLang 0.5.23 (issue 29), run as those engines run them.

Each test drives one call sequence of the engine code copied from the wheels
(``third_party/vllm_0_34.py``, ``third_party/sglang_0_5_23.py``; :mod:`engine_binding` says how they reach
deep_gemm: installed or aliased) and holds it to one contract: the call computes right (values checked against the plain-torch oracle below) or raises a
typed dgcompat error (:class:`dgcompat.errors.DgcompatError`) naming what the build lacks; never a
TypeError, AttributeError, ImportError, raw assert, other untyped error or wrong value. Which calls must
compute where is explicit (:func:`expectation`):

- plain FP8 inputs (float32 per-token scales) with float32 or bfloat16 logits compute on every family
  (bf16 converted where not native), except on an SM100 build that asserts MX-scaled inputs (sgl-deep-gemm
  0.2.5, upstream 2.8), which may refuse them with a typed error;
- MX-scaled FP8 (the form vLLM uses on SM100) and FP4 inputs compute on the reference backend and on the
  SM100 builds with DeepGEMM's ``fp8_fp4`` kernels (float32 head weights may be refused where the build
  asserts bfloat16 ones); they are refused on SM90 with a typed error naming the architecture; the bundled
  copies (no FP4 kernels) refuse FP4, and may compute or refuse MX FP8.

On the CPU tier a stand-in that does not emulate a native path (``does not emulate``) makes the test skip
with that reason: nothing was checked. A call site the engine itself never takes on the family's
architecture (vLLM's MXFP4 indexer cache below SM100) is skipped as not applicable.

This module is run by the conformance harness child (``tests/test_engine_call_sites.py``, and
``python -m tests.call_sites``, which sets ``ENGINE_CALLS_RECORD`` to collect one JSON line per
call site). Its file name does not start with ``test_`` so that the unit-test run does not collect it on
its own.

The oracle's FP4 e2m1 / UE8M0 arithmetic follows DeepGEMM's ``deep_gemm/utils/math.py``
(``per_token_cast_to_fp4``, ``cast_back_from_fp4``, ``pack_ue8m0_to_int``, ``ceil_to_ue8m0``; as vendored in
vLLM 0.34.0's ``third_party/deep_gemm``) and the cache layouts DeepGEMM's ``tests/test_attention.py``
builds (``kv_cache_cast_to_fp8`` / ``kv_cache_cast_to_fp4``: per block the tokens' value bytes, then one
4-byte scale per token).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import pytest
import torch
from engine_binding import binding, load
from engine_platform import DEVICE, device_capability_major

import dgcompat.errors as dg_errors

VLLM = load("vllm_0_34")
SGLANG = load("sglang_0_5_23")

FP8 = torch.float8_e4m3fn
H, D, BLOCK = 64, 128, 64  # DeepSeek V3.2 / V4 indexer: 64 heads of 128, 64-token index pages

# --------------------------------------------------------------------------- families and expectations


@dataclass(frozen=True)
class Family:
    """The deep_gemm build under test: its release id, kind, the architecture the run emulates, and the
    indexer input rules the build asserts on that architecture (SM100 builds of sgl-deep-gemm >= 0.2.5 and
    upstream 2.8 take only MX-scaled q and keys, and some only bfloat16 weights)."""

    name: str
    kind: str  # "reference", "sgl" (sgl-deep-gemm), "bundled" (sgl-kernel / sglang-kernel), "upstream" (2.x)
    arch: str  # "sm90" or "sm100"
    mx_only: bool = False
    bf16_weights_only: bool = False

    def __str__(self) -> str:
        return f"{self.name}@{self.arch}"


def family() -> Family:
    """The family of this process: from the harness session when the harness runs us, else from detection.

    On the CPU tier the input rules are the ones the stand-ins read from the build's own host asserts
    (``dgcompat_conformance.harness.indexer_rules``), not dgcompat's table; on a GPU without the harness they
    are assumed from the release (sgl-deep-gemm >= 0.2.5 and upstream builds: MX-only and bf16-weights-only on
    SM100), which only ever relaxes an expectation to "compute or a typed refusal".
    """
    arch = "sm100" if device_capability_major() == 10 else "sm90"
    try:
        from dgcompat_conformance.harness.session import current
    except ImportError:  # pragma: no cover - the tooling is always importable from a checkout
        current = None
    session = current() if current is not None else None
    if session is not None and session.tier == "reference":
        return Family("reference", "reference", arch)
    if session is not None and session.installed is not None:
        profile = session.installed.profile
        kind = "bundled" if profile.flavor == "bundled" else "sgl" if profile.dist == "sgl-deep-gemm" else "upstream"
        rules = profile.rules
        mx = bool(rules is not None and rules.mx_sf.get(arch))
        bf16 = bool(rules is not None and rules.bf16_weights.get(arch))
        return Family(session.release_id, kind, arch, mx, bf16)
    if os.environ.get("DGCOMPAT_BACKEND") == "reference":
        return Family("reference", "reference", arch)
    from packaging.version import Version

    import dgcompat

    rel = dgcompat.release()
    kind = {"sgl-deep-gemm": "sgl", "bundled": "bundled"}.get(rel.source, "upstream")
    newer = kind == "upstream" or (kind == "sgl" and rel.version is not None and rel.version >= Version("0.2.5"))
    strict = arch == "sm100" and newer
    return Family(rel.label, kind, arch, strict, strict)


#: What a call site needs of the build (see :func:`expectation`): plain FP8 (float32 per-token scales),
#: bfloat16 logits, MX-scaled FP8, FP4, float32 head weights next to MX / FP4 inputs.
FP8_INPUTS, BF16_LOGITS, MX_INPUTS, FP4_INPUTS, F32_WEIGHTS = "fp8", "bf16", "mx", "fp4", "f32-weights"

_ARCH_NAMED = re.compile(r"sm_?90|hopper", re.IGNORECASE)


def expectation(needs: Iterable[str], fam: Family) -> str:
    """``"compute"``, ``"refuse-arch"`` (a typed error naming SM90), ``"refuse"`` (a typed error) or
    ``"either"`` (compute or a typed error), for a call site that needs ``needs`` on ``fam``.

    - MX / FP4 inputs: computed by the reference backend; refused (FP4) or either (MX FP8) by the bundled
      copies, which have no ``fp8_fp4`` kernels; refused by the other builds on SM90, naming the architecture;
      computed by them on SM100, except that float32 weights where the build asserts bfloat16 ones, and MX FP8
      where the build asserts no MX contract (its FP8 kernels take float32 KV scales), may also be refused.
    - Plain FP8 (with float32 or bfloat16 logits): computed everywhere, except by an SM100 build that takes
      only MX-scaled inputs, which may refuse it (the float32-scaled cache cannot be converted exactly).
    """
    needs = set(needs)
    if fam.kind == "reference":
        return "compute"
    if needs & {MX_INPUTS, FP4_INPUTS}:
        if fam.kind == "bundled":  # no FP4 kernels on any architecture: the refusal may name what it lacks
            return "refuse" if FP4_INPUTS in needs else "either"
        if fam.arch == "sm90":
            return "refuse-arch"
        if F32_WEIGHTS in needs and fam.bf16_weights_only:
            return "either"
        if MX_INPUTS in needs and FP4_INPUTS not in needs and not fam.mx_only:
            # MX-scaled FP8 where the binary asserts no MX contract (sgl-deep-gemm <= 0.2.3.post2: FP8 with float32
            # KV scales, or FP4): nothing in it says MX FP8 computes, so a typed refusal is right too
            return "either"
        return "compute"
    if fam.mx_only:
        return "either"
    return "compute"


def _chain(exc: BaseException) -> str:
    parts, seen = [], set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        parts.append(f"{type(e).__name__}: {e}")
        e = e.__cause__ or e.__context__
    return " <- ".join(parts)


def _record(site: str, needs: Iterable[str], expect: str, outcome: str, verdict: str, message: str) -> None:
    path = os.environ.get("ENGINE_CALLS_RECORD")
    if not path:
        return
    fam = family()
    line = {"site": site, "family": fam.name, "kind": fam.kind, "arch": fam.arch, "binding": binding(),
            "needs": sorted(needs), "expected": expect, "outcome": outcome, "verdict": verdict,
            "message": message[:400]}
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")


def not_applicable(site: str, needs: Iterable[str], why: str) -> None:
    """The engine never takes this call site on this architecture: record it and skip."""
    _record(site, needs, "n/a", "n/a", "skip", why)
    pytest.skip(f"not applicable: {why}")


def _classify(exc: BaseException) -> str:
    """``refused`` (a typed dgcompat refusal), ``kernel-error`` (dgcompat let the call through and the build's
    own host code rejected it: a wrapped raw assert), ``hang`` (a stand-in stood for a GPU hang) or ``error``
    (anything untyped: TypeError, AttributeError, ImportError, RuntimeError, an engine assert, ...)."""
    if isinstance(exc, dg_errors.KernelError):
        return "kernel-error"
    if isinstance(exc, dg_errors.DgcompatError):
        return "refused"
    if type(exc).__name__ == "StandInHang":
        return "hang"
    return "error"


def _verdict(expect: str, outcome: str, exc: BaseException | None) -> str | None:
    """None when ``outcome`` meets ``expect``, else why not."""
    if outcome == "ok":
        return None if expect in ("compute", "either") else "computed, but the build has no such kernels: must be refused"
    if outcome == "refused":
        if expect == "compute":
            return "refused, but must compute"
        if expect == "refuse-arch" and not _ARCH_NAMED.search(str(exc)):
            return "the refusal must name the architecture (SM90)"
        return None
    return {"kernel-error": "the build's own host code rejected what dgcompat let through",
            "hang": "a GPU hang", "wrong": "wrong value", "error": "an untyped error"}[outcome]


def run_site(site: str, needs: Iterable[str], call: Callable[[], Any], check: Callable[[Any], None]) -> None:
    """Run ``call`` (the engine's call sequence), check its result with ``check`` (the oracle), classify
    the outcome and hold it to :func:`expectation`."""
    needs = frozenset(needs)
    fam = family()
    expect = expectation(needs, fam)
    error: BaseException | None = None
    try:
        result = call()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - every outcome is classified below
        error = exc
        text = _chain(exc)
        # A stand-in's StandInNotEmulated, raw or as dgcompat's KernelError quoting it (not a typed refusal
        # that merely happened while an earlier probe's stand-in error was being handled).
        if "does not emulate" in str(exc) or type(exc).__name__ == "StandInNotEmulated":
            if expect in ("refuse", "refuse-arch"):
                _record(site, needs, expect, "not-emulated", "fail", text)
                pytest.fail(f"{site} on {fam}: expected a typed refusal before the native call, but it reached "
                            f"a stand-in that does not emulate it: {text}")
            _record(site, needs, expect, "not-emulated", "skip", text)
            pytest.skip(f"not emulated by the CPU tier's stand-ins: {text}")
        outcome = _classify(exc)
    else:
        try:
            check(result)
        except AssertionError as exc:
            outcome, text = "wrong", f"wrong value: {exc}"
        else:
            outcome, text = "ok", ""
    why = _verdict(expect, outcome, error)
    _record(site, needs, expect, outcome, "pass" if why is None else "fail", text)
    if why is not None:
        pytest.fail(f"{site} on {fam} (expected {expect}): {why}: {text}")


# --------------------------------------------------------------------------- the oracle (plain torch)


def _gen(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def _randn(*shape: int, g: torch.Generator) -> torch.Tensor:
    return torch.randn(shape, generator=g)


def ue8m0_exponent(x: torch.Tensor) -> torch.Tensor:
    """uint8 biased exponent of ``ceil_to_ue8m0(x)`` (DeepGEMM: round up to a power of two, clamp [1, 254])."""
    bits = x.abs().float().view(torch.int32)
    exp = ((bits >> 23) & 0xFF) + (bits & 0x7FFFFF).bool().int()
    return exp.clamp(1, 254).to(torch.uint8)


def exponent_value(exp: torch.Tensor) -> torch.Tensor:
    """float32 ``2 ** (exp - 127)`` of uint8 UE8M0 exponents."""
    return torch.pow(2.0, exp.float() - 127.0)


def pack_exponents(exp: torch.Tensor) -> torch.Tensor:
    """uint8 ``(..., 4k)`` exponents -> int32 ``(..., k)``, byte ``i`` of each int32 scaling block ``i``."""
    return exp.contiguous().view(torch.int32)


def unpack_exponents(sf: torch.Tensor) -> torch.Tensor:
    """int32 ``(...)`` packed UE8M0 -> uint8 ``(..., 4)``."""
    return sf.contiguous().view(torch.uint8).reshape(*sf.shape, 4)


_E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def quantize_e2m1(x: torch.Tensor) -> torch.Tensor:
    """float -> uint8 e2m1 codes (sign bit 3), rounding as DeepGEMM's ``_quantize_to_fp4_e2m1``."""
    ax = x.abs()
    code = torch.zeros_like(x, dtype=torch.uint8)
    for boundary, round_up in zip((0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0), (False, True, False, True, False, True, False)):
        code += (ax >= boundary if round_up else ax > boundary).to(torch.uint8)
    sign = (x < 0) & (code != 0)
    return code | (sign.to(torch.uint8) << 3)


def decode_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """uint8 e2m1 codes -> float32."""
    value = _E2M1[(codes & 0x07).long()]
    return torch.where((codes & 0x08) != 0, -value, value)


def cast_to_fp4(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """float ``(R, K)`` -> (uint8 ``(R, K/2)`` two e2m1 codes per byte, element ``2i`` in the low nibble;
    uint8 ``(R, K/32)`` UE8M0 exponents of ``amax / 6`` per 32 values): ``per_token_cast_to_fp4(x,
    use_ue8m0=True, gran_k=32)``."""
    r, k = x.shape
    view = x.float().view(r, k // 32, 32)
    exp = ue8m0_exponent(view.abs().amax(dim=2).clamp_min(1e-4) / 6.0)
    codes = quantize_e2m1(view / exponent_value(exp).unsqueeze(2)).view(r, k)
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).contiguous(), exp


def dequant_fp4(packed: torch.Tensor, exp: torch.Tensor) -> torch.Tensor:
    """uint8/int8 ``(..., K/2)`` packed e2m1 and uint8 ``(..., K/32)`` exponents -> float32 ``(..., K)``."""
    p = packed.view(torch.uint8)
    codes = torch.stack((p & 0x0F, p >> 4), dim=-1).reshape(*p.shape[:-1], p.shape[-1] * 2)
    return decode_e2m1(codes) * exponent_value(exp).repeat_interleave(32, dim=-1)


def dequant_mx_fp8(x: torch.Tensor, sf: torch.Tensor) -> torch.Tensor:
    """FP8 ``(..., 128)`` with int32 packed UE8M0 ``(...)`` (byte ``i`` scales values ``32i..32i+31``)."""
    return x.float() * exponent_value(unpack_exponents(sf)).repeat_interleave(32, dim=-1)


def fp8_cache(k: torch.Tensor, scales: str) -> tuple[torch.Tensor, torch.Tensor]:
    """float ``(blocks, 64, 128)`` -> (uint8 ``(blocks, 64, 132)``: per block the tokens' FP8 bytes, then one
    4-byte scale per token; the dequantized keys). ``scales``: ``"fp32"`` (``amax / 448``), ``"pow2"``
    (its UE8M0 rounding, as float32) or ``"mx"`` (that power of two as four equal UE8M0 bytes)."""
    blocks, bs, d = k.shape
    sf = k.abs().amax(-1).clamp(min=1e-4) / 448.0
    if scales in ("pow2", "mx"):
        sf = exponent_value(ue8m0_exponent(sf))
    values = (k / sf.unsqueeze(-1)).to(FP8)
    if scales == "mx":
        scale_bytes = ue8m0_exponent(sf).unsqueeze(-1).expand(blocks, bs, 4).contiguous()
    else:
        scale_bytes = sf.contiguous().view(torch.uint8).view(blocks, bs, 4)
    cache = torch.empty((blocks, bs * (d + 4)), dtype=torch.uint8)
    cache[:, : bs * d] = values.view(torch.uint8).reshape(blocks, bs * d)
    cache[:, bs * d :] = scale_bytes.reshape(blocks, bs * 4)
    return cache.view(blocks, bs, d + 4), values.float() * sf.unsqueeze(-1)


def fp4_cache(k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """float ``(blocks, 64, 128)`` -> (uint8 ``(blocks, 64, 68)``: per block the tokens' 64 packed FP4 bytes,
    then one int32 of 4 UE8M0 exponents per token; the dequantized keys)."""
    blocks, bs, d = k.shape
    packed, exp = cast_to_fp4(k.reshape(-1, d))
    cache = torch.empty((blocks, bs * (d // 2 + 4)), dtype=torch.uint8)
    cache[:, : bs * d // 2] = packed.reshape(blocks, bs * d // 2)
    cache[:, bs * d // 2 :] = exp.reshape(blocks, bs * 4)
    return cache.view(blocks, bs, d // 2 + 4), dequant_fp4(packed, exp).view(blocks, bs, d)


def fp4_query(q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """float ``(..., H, 128)`` -> (uint8 ``(..., H, 64)``, int32 ``(..., H)`` packed UE8M0, dequantized)."""
    lead = q.shape[:-1]
    packed, exp = cast_to_fp4(q.reshape(-1, q.shape[-1]))
    return (packed.view(*lead, q.shape[-1] // 2), pack_exponents(exp).view(lead),
            dequant_fp4(packed, exp).view(q.shape))


def index_logits(q: torch.Tensor, keys: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``sum_h w[h] * relu(q[h] . k)`` for one query row: q ``(H, D)``, keys ``(L, D)``, w ``(H,)`` -> ``(L,)``."""
    return (torch.einsum("hd,ld->hl", q.float(), keys.float()).relu() * w.float().unsqueeze(-1)).sum(0)


def check_logits(out: Any, refs: list[tuple[int, int, torch.Tensor]], *, dtype: torch.dtype,
                 shape: tuple[int, int] | None = None, precision: torch.dtype | None = None) -> None:
    """``out[row, start:start + len(ref)]`` against each ``(row, start, ref)``; ``out`` must be a torch tensor
    of ``dtype`` (and ``shape``). Tolerances follow ``precision`` (default ``dtype``): the dtype the logits
    were computed in (an fp32 copy of bf16 logits has bf16 precision)."""
    assert isinstance(out, torch.Tensor), f"the result is a {type(out).__name__}, not a torch.Tensor"
    assert out.dtype == dtype, f"logits dtype {out.dtype}, expected {dtype}"
    if shape is not None:
        assert tuple(out.shape) == shape, f"logits shape {tuple(out.shape)}, expected {shape}"
    tol = 1e-3 if (precision or dtype) == torch.float32 else 2e-2
    for row, start, ref in refs:
        got = out[row, start : start + ref.numel()].float().cpu()
        scale = max(1.0, float(ref.abs().max())) if ref.numel() else 1.0
        try:
            torch.testing.assert_close(got, ref, rtol=tol, atol=tol * scale)
        except AssertionError as exc:
            raise AssertionError(f"row {row}: {exc}") from None


def _logits_dtype_id(dt: torch.dtype) -> str:
    return "fp32" if dt == torch.float32 else "bf16"


LOGITS_DTYPES = [pytest.param(torch.float32, id="fp32"), pytest.param(torch.bfloat16, id="bf16")]


def _needs(base: str, logits_dtype: torch.dtype, weights_dtype: torch.dtype = torch.float32) -> set[str]:
    """``base`` inputs with ``logits_dtype`` logits, and ``weights_dtype`` head weights reaching deep_gemm."""
    needs = {base} | ({BF16_LOGITS} if logits_dtype == torch.bfloat16 else set())
    if base in (MX_INPUTS, FP4_INPUTS) and weights_dtype == torch.float32:
        needs.add(F32_WEIGHTS)
    return needs


def _vllm_weights_dtype(logits_dtype: torch.dtype) -> torch.dtype:
    # mqa_logits_mx_inputs casts the weights to logits_dtype on SM100 and leaves them float32 elsewhere.
    return logits_dtype if VLLM.mqa_logits_use_mx_scales() else torch.float32


def _paged_setup(g: torch.Generator, lens: list[int], *, width: int, extra_blocks: int = 2
                 ) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(random keys ``(blocks, 64, 128)``, a block table ``(len(lens), width)`` of distinct random blocks, blocks)."""
    num_blocks = len(lens) * width + extra_blocks
    k = _randn(num_blocks, BLOCK, D, g=g)
    table = torch.randperm(num_blocks, generator=g)[: len(lens) * width].view(len(lens), width).to(torch.int32)
    return k, table, num_blocks


def _row_keys(k_deq: torch.Tensor, table_row: torch.Tensor, n: int) -> torch.Tensor:
    return k_deq[table_row.long()].reshape(-1, k_deq.shape[-1])[:n]


# --------------------------------------------------------------------------- vLLM 0.34.0


def test_vllm_symbol_resolution() -> None:
    # vllm/utils/deep_gemm.py _lazy_init: getattr(_dg, name, None) for the indexer's three names; a name
    # resolved to None makes vLLM's wrapper call _missing() ("DeepGEMM backend is unavailable").
    def call() -> dict[str, Any]:
        VLLM._lazy_init()
        impls = {"fp8_fp4_mqa_logits": VLLM._fp8_fp4_mqa_logits_impl,
                 "fp8_fp4_paged_mqa_logits": VLLM._fp8_fp4_paged_mqa_logits_impl,
                 "get_paged_mqa_logits_metadata": VLLM._get_paged_mqa_logits_metadata_impl}
        for name, impl in impls.items():
            if impl is None:
                raise RuntimeError(f"getattr(deep_gemm, {name!r}, None) is None") from _raises(VLLM._missing)
        return impls

    def check(impls: dict[str, Any]) -> None:
        assert all(callable(fn) for fn in impls.values()), impls

    run_site("vllm.lazy_init", {FP8_INPUTS}, call, check)


def _raises(fn: Callable[[], Any]) -> BaseException:
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 - returned for chaining
        return exc
    raise AssertionError(f"{fn} did not raise")


def _vllm_decode_inputs(g: torch.Generator, next_n: int, lens: list[int], fp4: bool) -> dict[str, Any]:
    mx = VLLM.mqa_logits_use_mx_scales()
    width = 8  # max_model_len 512 / 64-token blocks
    k, table, num_blocks = _paged_setup(g, lens, width=width)
    if fp4:
        cache, k_deq = fp4_cache(k)
    else:
        cache, k_deq = fp8_cache(k, "mx" if mx else "pow2")
    rows = len(lens) * next_n
    if fp4:
        q_values, q_scale, q_deq = fp4_query(_randn(rows, H, D, g=g))
        weights = torch.rand((rows, H), generator=g) * H ** -0.5
    else:
        # fused_indexer_q_rope_quant: FP8 q with its power-of-two scale folded into the fp32 weights
        q_values = _randn(rows, H, D, g=g).to(FP8)
        q_scale, q_deq = None, q_values.float()
        weights = torch.rand((rows, H), generator=g) * H ** -0.5
    return {"cache": cache.to(DEVICE), "k_deq": k_deq, "table": table, "q": q_values.to(DEVICE),
            "q_scale": None if q_scale is None else q_scale.to(DEVICE), "q_deq": q_deq,
            "weights": weights.to(DEVICE), "max_model_len": width * BLOCK}


def _vllm_decode_refs(inp: dict[str, Any], lens: list[int], next_n: int, weights: torch.Tensor
                      ) -> list[tuple[int, int, torch.Tensor]]:
    refs = []
    for b, total in enumerate(lens):
        for j in range(next_n):
            r = b * next_n + j
            n = max(total - next_n + j + 1, 0)
            keys = _row_keys(inp["k_deq"], inp["table"][b], n)
            refs.append((r, 0, index_logits(inp["q_deq"][r], keys, weights[r].cpu())))
    return refs


@dataclass(frozen=True)
class _VllmDecode:
    """One vLLM decode batch: its inputs, the metadata builder and CommonAttentionMetadata's persistent buffers
    (``query_start_loc`` (9,), ``seq_lens_all`` (8,), ``block_table_tensor`` (8, width), int32 on the device)."""

    inp: dict[str, Any]
    lens: list[int]
    batch: int
    rows: int
    builder: Any
    query_start_loc: torch.Tensor
    seq_lens_all: torch.Tensor
    block_table_tensor: torch.Tensor


def _vllm_decode_batch(seed: int, next_n: int, fp4: bool) -> _VllmDecode:
    g = _gen(seed)
    lens = [70, next_n + 1, 300]
    inp = _vllm_decode_inputs(g, next_n, lens, fp4)
    batch, width = len(lens), inp["table"].shape[1]
    builder = VLLM.DeepseekV32IndexerMetadataBuilder(
        max_num_batched_tokens=64, max_num_seqs=8, num_speculative_tokens=next_n - 1, block_table_width=width,
        block_size=BLOCK, device=DEVICE)
    # CommonAttentionMetadata's persistent buffers: query_start_loc, seq_lens, block_table_tensor.
    query_start_loc = torch.arange(0, 9, dtype=torch.int32, device=DEVICE) * next_n
    seq_lens_all = torch.zeros(8, dtype=torch.int32, device=DEVICE)
    block_table_tensor = torch.zeros((8, width), dtype=torch.int32, device=DEVICE)
    seq_lens_all[:batch] = torch.tensor(lens, dtype=torch.int32)
    block_table_tensor[:batch] = inp["table"].to(DEVICE)
    return _VllmDecode(inp, lens, batch, batch * next_n, builder, query_start_loc, seq_lens_all, block_table_tensor)


def _vllm_decode_step(next_n: int, logits_dtype: torch.dtype, fp4: bool, *, refresh: bool) -> None:
    use_fp4 = VLLM.dsa_indexer_uses_fp4("mxfp4" if fp4 else "fp8")
    d = _vllm_decode_batch(100 + next_n, next_n, fp4)
    inp, lens, batch, rows, builder = d.inp, d.lens, d.batch, d.rows, d.builder
    query_start_loc, seq_lens_all, block_table_tensor = d.query_start_loc, d.seq_lens_all, d.block_table_tensor
    query_start_loc_cpu = query_start_loc.cpu()
    q_buffer, w_buffer = inp["q"].clone(), inp["weights"].clone()
    kv_3d = inp["cache"]

    def one_step(decode: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return VLLM.indexer_decode_logits(q_buffer, inp["q_scale"], w_buffer, kv_3d, decode, rows, D,
                                          inp["max_model_len"], use_fp4, logits_dtype)

    def build() -> Any:
        return builder.build_decode(query_start_loc, query_start_loc_cpu, seq_lens_all, block_table_tensor, batch,
                                    rows)

    site = f"vllm.decode[next_n={next_n},{'fp4' if fp4 else 'fp8'},{_logits_dtype_id(logits_dtype)}]"
    if refresh:
        site = f"vllm.decode_refresh[next_n={next_n}]"
    needs = _needs(FP4_INPUTS if fp4 else MX_INPUTS if VLLM.mqa_logits_use_mx_scales() else FP8_INPUTS,
                   logits_dtype, _vllm_weights_dtype(logits_dtype))
    new_lens = [n + next_n for n in lens]

    def call() -> Any:
        decode = build()
        first = one_step(decode)
        if not refresh:
            return first, None
        # The next step, as a CUDA-graph replay sees it: build() refreshes the persistent buffers in place
        # (seq_lens, the schedule buffer via `schedule_metadata[:] = metadata`), the captured call runs again
        # with the tensors of the first step.
        seq_lens_all[:batch] = torch.tensor(new_lens, dtype=torch.int32)
        build()
        second = one_step(decode)
        draft = None
        if next_n == 1:
            # update_draft_decode_metadata: the drafter's step, refreshed through decode.schedule_metadata.copy_
            builder.update_draft_decode_metadata(decode, seq_lens_all[:batch] + 1, block_table_tensor, rows)
            draft = one_step(decode)
        return first, (second, draft)

    def check(result: Any) -> None:
        (raw, fp32), later = result
        shape = (rows, inp["max_model_len"])
        check_logits(raw, _vllm_decode_refs(inp, lens, next_n, inp["weights"]), dtype=logits_dtype, shape=shape)
        check_logits(fp32, _vllm_decode_refs(inp, lens, next_n, inp["weights"]), dtype=torch.float32, shape=shape,
                     precision=logits_dtype)
        if later is not None:
            (raw2, _), draft = later
            check_logits(raw2, _vllm_decode_refs(inp, new_lens, next_n, inp["weights"]), dtype=logits_dtype,
                         shape=shape)
            if draft is not None:
                raw3, _ = draft
                check_logits(raw3, _vllm_decode_refs(inp, [n + 1 for n in new_lens], 1, inp["weights"]),
                             dtype=logits_dtype, shape=shape)

    run_site(site, needs, call, check)


@pytest.mark.parametrize("logits_dtype", LOGITS_DTYPES)
@pytest.mark.parametrize("next_n", [1, 2, 4])
def test_vllm_decode_fp8(next_n: int, logits_dtype: torch.dtype) -> None:
    # sparse_attn_indexer decode: fp8_fp4_paged_mqa_logits((q, None or unit MX scales), kv, w, seq_lens,
    # block_table, schedule, max_model_len=..., logits_dtype=..., indices=...); next_n 4 on SM90 with a
    # schedule of num_sms // 2 slots.
    _vllm_decode_step(next_n, logits_dtype, fp4=False, refresh=False)


@pytest.mark.parametrize("next_n", [1, 2, 4])
def test_vllm_decode_buffer_refresh(next_n: int) -> None:
    # DeepseekV32IndexerMetadataBuilder's persistent buffers, refreshed in place between steps.
    _vllm_decode_step(next_n, torch.float32, fp4=False, refresh=True)


def _vllm_fp4_applies(site: str, logits_dtype: torch.dtype) -> None:
    """vLLM takes its MXFP4 indexer cache on SM100 only: elsewhere ``site`` is not applicable (skipped)."""
    if device_capability_major() != 10:
        not_applicable(site, _needs(FP4_INPUTS, logits_dtype),
                       "vLLM 0.34 refuses indexer_kv_dtype='mxfp4' below SM100 itself (dsa_indexer_uses_fp4)")


@pytest.mark.parametrize("logits_dtype", LOGITS_DTYPES)
def test_vllm_decode_fp4(logits_dtype: torch.dtype) -> None:
    _vllm_fp4_applies(f"vllm.decode[next_n=1,fp4,{_logits_dtype_id(logits_dtype)}]", logits_dtype)
    _vllm_decode_step(1, logits_dtype, fp4=True, refresh=False)


def _vllm_prefill(logits_dtype: torch.dtype, fp4: bool) -> None:
    use_fp4 = VLLM.dsa_indexer_uses_fp4("mxfp4" if fp4 else "fp8")
    mx = VLLM.mqa_logits_use_mx_scales()
    g = _gen(7 if fp4 else 6)
    # Two requests: a fresh 150-token prefill and a 50-token chunk continuing a 200-token sequence.
    seq_lens, query_lens = [150, 200], [150, 50]
    width = 4
    k, table, _ = _paged_setup(g, seq_lens, width=width)
    cache, k_deq = fp4_cache(k) if fp4 else fp8_cache(k, "mx" if mx else "pow2")
    tokens = sum(query_lens)
    if fp4:
        q_values, q_scale, q_deq = fp4_query(_randn(tokens, H, D, g=g))
    else:
        q_values = _randn(tokens, H, D, g=g).to(FP8)
        q_scale, q_deq = None, q_values.float()
    weights = torch.rand((tokens, H), generator=g) * H ** -0.5
    cu = [0]
    for n in seq_lens:
        cu.append(cu[-1] + n)
    ks, ke = [], []
    for r, (n, qn) in enumerate(zip(seq_lens, query_lens)):
        for p in range(qn):
            ks.append(cu[r])
            ke.append(cu[r] + n - qn + p + 1)
    chunk = VLLM.DeepseekV32IndexerPrefillChunkMetadata(
        cu_seqlen_ks=torch.tensor(ks, dtype=torch.int32, device=DEVICE),
        cu_seqlen_ke=torch.tensor(ke, dtype=torch.int32, device=DEVICE),
        cu_seq_lens=torch.tensor(cu, dtype=torch.int32, device=DEVICE), total_seq_lens=cu[-1],
        max_seqlen_k=max(seq_lens), block_table=table.to(DEVICE), token_start=0, token_end=tokens,
        local_cu_seq_lens=torch.tensor(cu, dtype=torch.int32, device=DEVICE), local_total_seq_lens=cu[-1],
        max_local_total_seq_lens=cu[-1])
    gathered = torch.cat([_row_keys(k_deq, table[r], n) for r, n in enumerate(seq_lens)])
    site = f"vllm.prefill[{'fp4' if fp4 else 'fp8'},{_logits_dtype_id(logits_dtype)}]"
    needs = _needs(FP4_INPUTS if fp4 else MX_INPUTS if mx else FP8_INPUTS, logits_dtype,
                   _vllm_weights_dtype(logits_dtype))

    def call() -> Any:
        return VLLM.indexer_prefill_logits(q_values.to(DEVICE), None if q_scale is None else q_scale.to(DEVICE),
                                           weights.to(DEVICE), cache.to(DEVICE), [chunk], D, use_fp4, logits_dtype)

    def check(parts: Any) -> None:
        assert len(parts) == 1, f"{len(parts)} dense calls, expected 1"
        rows, raw, fp32 = parts[0]
        refs = [(i, 0, index_logits(q_deq[i], gathered[ks[i]: ke[i]], weights[i])) for i in range(tokens)]
        check_logits(raw, refs, dtype=logits_dtype, shape=(tokens, max(seq_lens)))
        check_logits(fp32, refs, dtype=torch.float32, precision=logits_dtype)

    run_site(site, needs, call, check)


@pytest.mark.parametrize("logits_dtype", LOGITS_DTYPES)
def test_vllm_prefill_fp8(logits_dtype: torch.dtype) -> None:
    # fp8_fp4_mqa_logits((q, None or unit MX scales), (k, k_scale), w, ks, ke, max_seqlen_k, logits_dtype=...)
    _vllm_prefill(logits_dtype, fp4=False)


@pytest.mark.parametrize("logits_dtype", LOGITS_DTYPES)
def test_vllm_prefill_fp4(logits_dtype: torch.dtype) -> None:
    _vllm_fp4_applies(f"vllm.prefill[fp4,{_logits_dtype_id(logits_dtype)}]", logits_dtype)
    _vllm_prefill(logits_dtype, fp4=True)


@pytest.mark.parametrize("next_n", [1, 2, 4])
def test_vllm_decode_cuda_graph_replay(next_n: int) -> None:
    # The FULL CUDA-graph decode: build() outside the graph refreshes the persistent buffers, the captured
    # indexer call replays on them.
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device (CUDA-graph capture)")
    d = _vllm_decode_batch(300 + next_n, next_n, False)
    inp, lens, batch, rows, builder = d.inp, d.lens, d.batch, d.rows, d.builder
    query_start_loc, seq_lens_all, block_table_tensor = d.query_start_loc, d.seq_lens_all, d.block_table_tensor
    mx = VLLM.mqa_logits_use_mx_scales()
    needs = _needs(MX_INPUTS if mx else FP8_INPUTS, torch.float32)
    new_lens = [n + 3 for n in lens]

    def call() -> Any:
        decode = builder.build_decode(query_start_loc, query_start_loc.cpu(), seq_lens_all, block_table_tensor,
                                      batch, rows)
        step = lambda: VLLM.indexer_decode_logits(inp["q"], None, inp["weights"], inp["cache"], decode, rows, D,  # noqa: E731
                                                  inp["max_model_len"], False, torch.float32)[0]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            step()  # warm-up (JIT compile) outside the capture
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = step()
        graph.replay()
        torch.cuda.synchronize()
        first = out.clone()
        seq_lens_all[:batch] = torch.tensor(new_lens, dtype=torch.int32)
        builder.build_decode(query_start_loc, query_start_loc.cpu(), seq_lens_all, block_table_tensor, batch, rows)
        graph.replay()
        torch.cuda.synchronize()
        return first, out.clone()

    def check(result: Any) -> None:
        first, second = result
        shape = (rows, inp["max_model_len"])
        check_logits(first, _vllm_decode_refs(inp, lens, next_n, inp["weights"]), dtype=torch.float32, shape=shape)
        check_logits(second, _vllm_decode_refs(inp, new_lens, next_n, inp["weights"]), dtype=torch.float32,
                     shape=shape)

    run_site(f"vllm.decode_cuda_graph[next_n={next_n}]", needs, call, check)


# --------------------------------------------------------------------------- SGLang 0.5.23: DeepSeek-V3.2 (DSA)


def _dsa_inputs(g: torch.Generator, lens: list[int], next_n: int, width: int) -> dict[str, Any]:
    k, table, _ = _paged_setup(g, lens, width=width)
    cache, k_deq = fp8_cache(k, "fp32")
    rows = len(lens) * next_n
    q = _randn(rows, H, D, g=g).to(FP8)
    weights = torch.rand((rows, H, 1), generator=g) * H ** -0.5
    return {"cache2d": cache.view(cache.shape[0], -1).to(DEVICE), "k_deq": k_deq, "table": table, "q": q.to(DEVICE),
            "weights": weights.to(DEVICE)}


def _dsa_paged(lens: list[int], next_n: int, *, site: str, refresh: bool) -> None:
    g = _gen(40 + next_n + len(lens))
    width = -(-max(lens) // BLOCK) + 1
    inp = _dsa_inputs(g, lens, next_n, width)
    batch = len(lens)
    verify = next_n > 1
    expanded = torch.tensor([max(n - next_n + j + 1, 1) for n in lens for j in range(next_n)], dtype=torch.int32)
    table = inp["table"].repeat_interleave(next_n, dim=0) if verify else inp["table"]
    metadata = SGLANG.DSAMetadata(cache_seqlens_int32=torch.tensor(lens, dtype=torch.int32, device=DEVICE),
                                  seqlens_expanded=expanded.to(DEVICE), page_table_64=table.contiguous().to(DEVICE))
    backend = SGLANG.DSABackendSchedule(speculative_num_draft_tokens=next_n if verify else None)
    new_lens = [n + 5 for n in lens]

    def logits() -> torch.Tensor:
        indexer = SGLANG.DSAIndexer(n_heads=H)
        return indexer._get_topk_paged_logits(verify, inp["q"], inp["weights"], metadata, inp["cache2d"],
                                              q_offset=batch * next_n, B=batch)

    def call() -> Any:
        backend.init_forward_metadata(metadata, verify, batch)
        lens_used = metadata.paged_mqa_ctx_lens_2d.reshape(-1).tolist()
        first = logits()
        if not refresh:
            return (first, lens_used), None
        # replay: the base buffers are refreshed in place, then the schedule (copy_ into the kept buffer)
        metadata.cache_seqlens_int32.copy_(torch.tensor(new_lens, dtype=torch.int32))
        backend.init_forward_metadata_replay_cuda_graph(metadata, verify, batch)
        return (first, lens_used), (logits(), metadata.paged_mqa_ctx_lens_2d.reshape(-1).tolist())

    def refs(lens_used: list[int]) -> list[tuple[int, int, torch.Tensor]]:
        out = []
        for r, n in enumerate(lens_used):
            keys = _row_keys(inp["k_deq"], table[r], n)
            out.append((r, 0, index_logits(inp["q"][r].cpu(), keys, inp["weights"][r, :, 0].cpu())))
        return out

    def check(result: Any) -> None:
        (first, lens_used), later = result
        assert len(lens_used) == batch * next_n
        check_logits(first, refs(lens_used), dtype=torch.float32, shape=(batch * next_n, width * BLOCK))
        if later is not None:
            second, lens2 = later
            assert lens2 == new_lens, f"the refreshed lengths are {lens2}, expected {new_lens}"
            check_logits(second, refs(lens2), dtype=torch.float32, shape=(batch * next_n, width * BLOCK))

    run_site(site, {FP8_INPUTS}, call, check)


@pytest.mark.parametrize("next_n", [1, 2])
def test_sglang_dsa_paged(next_n: int) -> None:
    # dsa_indexer._get_topk_paged: decode (next_n 1) and target verify (next_n 2: split (N, 1) rows on SM90,
    # DG-native (B, next_n) on SM100), the schedule from init_forward_metadata, clean_logits=False.
    _dsa_paged([70, 2, 300], next_n, site=f"sglang.dsa_paged[next_n={next_n}]", refresh=False)


def test_sglang_dsa_paged_replay_refresh() -> None:
    # dsa_backend._refresh_paged_mqa_schedule_metadata: paged_mqa_schedule_metadata.copy_(new_schedule).
    _dsa_paged([70, 2, 300], 1, site="sglang.dsa_paged_replay_refresh", refresh=True)


def test_sglang_dsa_paged_chunked_beyond_sm_count() -> None:
    # _chunked_fp8_paged_mqa_logits: a batch larger than the SM count is launched in chunks of sm_count
    # requests, each with its own get_paged_mqa_logits_metadata.
    g = _gen(50)
    batch = 134  # > the emulated 132 SMs
    lens = (torch.randint(1, 100, (batch,), generator=g)).tolist()
    _dsa_paged(lens, 1, site="sglang.dsa_paged_chunked", refresh=False)


def test_sglang_dsa_ragged() -> None:
    # dsa_indexer._get_topk_ragged: fp8_mqa_logits(q, (k, k_scale), w, ks, ke, clean_logits=False).
    g = _gen(60)
    nq, nk = 24, 300
    q = _randn(nq, H, D, g=g).to(FP8)
    k = _randn(nk, D, g=g)
    sf = k.abs().amax(-1).clamp(min=1e-4) / 448.0
    k_fp8 = (k / sf.unsqueeze(-1)).to(FP8)
    weights = torch.rand((nq, H, 1), generator=g) * H ** -0.5
    ks = torch.randint(0, nk // 2, (nq,), generator=g, dtype=torch.int32)
    ke = torch.minimum(ks + torch.randint(1, nk, (nq,), generator=g, dtype=torch.int32), torch.tensor(nk))
    ke = ke.to(torch.int32)
    k_deq = k_fp8.float() * sf.unsqueeze(-1)

    def call() -> Any:
        indexer = SGLANG.DSAIndexer(n_heads=H)
        return indexer._get_topk_ragged_logits(q.to(DEVICE), weights.to(DEVICE), (k_fp8.to(DEVICE), sf.to(DEVICE)),
                                               ks.to(DEVICE), ke.to(DEVICE))

    def check(out: Any) -> None:
        refs = [(i, int(ks[i]), index_logits(q[i], k_deq[int(ks[i]): int(ke[i])], weights[i, :, 0]))
                for i in range(nq)]
        check_logits(out, refs, dtype=torch.float32, shape=(nq, nk))

    run_site("sglang.dsa_ragged", {FP8_INPUTS}, call, check)


# --------------------------------------------------------------------------- SGLang 0.5.23: DeepSeek-V4 / V4.1


def _c4_inputs(g: torch.Generator, lens: list[int], fp4: bool, width: int) -> dict[str, Any]:
    k, table, _ = _paged_setup(g, lens, width=width)
    cache, k_deq = fp4_cache(k) if fp4 else fp8_cache(k, "fp32")
    n = len(lens)
    if fp4:
        q_fp4, q_sf, q_deq = fp4_query(_randn(n, H, D, g=g))
        q: Any = (q_fp4.view(torch.int8).to(DEVICE), q_sf.to(DEVICE))
    else:
        q8 = _randn(n, H, D, g=g).to(FP8)
        q, q_deq = q8.to(DEVICE), q8.float()
    weights = torch.rand((n, H, 1), generator=g) * H ** -0.5
    return {"cache2d": cache.view(cache.shape[0], -1).to(DEVICE), "k_deq": k_deq, "table": table, "q": q,
            "q_deq": q_deq, "weights": weights.to(DEVICE)}


@pytest.mark.parametrize("fp4", [pytest.param(False, id="fp8"), pytest.param(True, id="fp4")])
def test_sglang_v4_c4_paged(fp4: bool) -> None:
    # dsv4/indexer.py forward_c4_indexer: fn(q, kv, w, lens, page_table, meta, max_len, False) with fn
    # fp8_paged_mqa_logits (FP8) or fp8_fp4_paged_mqa_logits (FP4: q (q_fp4, q_sf), 68-byte cache); the
    # schedule from PagedIndexerMetadata, refreshed by copy_ for a CUDA-graph replay.
    g = _gen(70 + fp4)
    lens, width = [5, 70, 130], 3
    inp = _c4_inputs(g, lens, fp4, width)
    new_lens = [9, 64, 150]

    def metadata_for(lens_: list[int]) -> Any:
        return SGLANG.PagedIndexerMetadata(page_size=256, compressed_page_size=BLOCK,
                                           page_table=inp["table"].to(DEVICE),
                                           compressed_seq_lens=torch.tensor(lens_, dtype=torch.int32, device=DEVICE),
                                           use_topk_v2=False)

    def call() -> Any:
        metadata = metadata_for(lens)
        first = SGLANG.c4_indexer_logits(inp["q"], inp["weights"], inp["cache2d"], metadata, fp4)
        metadata.copy_(metadata_for(new_lens))
        second = SGLANG.c4_indexer_logits(inp["q"], inp["weights"], inp["cache2d"], metadata, fp4)
        return first, second

    def refs(lens_: list[int]) -> list[tuple[int, int, torch.Tensor]]:
        return [(r, 0, index_logits(inp["q_deq"][r], _row_keys(inp["k_deq"], inp["table"][r], n),
                                    inp["weights"][r, :, 0].cpu())) for r, n in enumerate(lens_)]

    def check(result: Any) -> None:
        for parts, lens_ in zip(result, (lens, new_lens)):
            assert len(parts) == 1
            check_logits(parts[0][1], refs(lens_), dtype=torch.float32, shape=(len(lens_), width * BLOCK))

    # forward_c4_indexer passes float32 weights (weights.float()) with FP4 inputs
    run_site(f"sglang.v4_c4_paged[{'fp4' if fp4 else 'fp8'}]", _needs(FP4_INPUTS if fp4 else FP8_INPUTS, torch.float32),
             call, check)


def test_sglang_v4_nonpaged_prefill() -> None:
    # dsv4/indexer.py _nonpaged_mqa_logits: fp8_mqa_logits(q, kv, w, ks, ke, clean_logits=False, max_seqlen_k=...)
    g = _gen(80)
    seq_len, rows = 520, 40
    final = seq_len // 4
    k = _randn(final, D, g=g)
    sf = k.abs().amax(-1).clamp(min=1e-4) / 448.0
    k_fp8 = (k / sf.unsqueeze(-1)).to(FP8)
    k_deq = k_fp8.float() * sf.unsqueeze(-1)
    c4_lens = torch.tensor([max((p + 1) // 4, 1) for p in range(seq_len - rows, seq_len)], dtype=torch.int32)
    q = _randn(rows, H, D, g=g).to(FP8)
    weights = torch.rand((rows, H), generator=g) * H ** -0.5
    page_table = torch.zeros((rows, 3), dtype=torch.int32)

    def call() -> Any:
        plan = SGLANG.nonpaged_indexer_plan(c4_lens.to(DEVICE), page_table.to(DEVICE), seq_len, rows, BLOCK)
        assert plan is not None
        out = [SGLANG.nonpaged_mqa_logits(q_indexer=q.to(DEVICE), weights=weights.to(DEVICE),
                                          kv=(k_fp8.to(DEVICE), sf.to(DEVICE)), plan=plan, rows=r)
               for r in SGLANG.iter_row_chunks(num_rows=plan.query_rows, rows_per_chunk=plan.rows_per_chunk)]
        return out, plan.max_seqlen_k

    def check(result: Any) -> None:
        parts, max_k = result
        assert len(parts) == 1 and max_k == 192
        refs = [(i, 0, index_logits(q[i], k_deq[: int(c4_lens[i])], weights[i])) for i in range(rows)]
        check_logits(parts[0], refs, dtype=torch.float32, shape=(rows, max_k))

    run_site("sglang.v4_nonpaged_prefill", {FP8_INPUTS}, call, check)


def _set_v41_logits(bf16: bool) -> torch.dtype:
    SGLANG.envs.SGLANG_OPT_DSV41_BF16_INDEX_LOGITS.value = bf16
    SGLANG.index_logits_dtype.cache_clear()
    SGLANG.index_weights_dtype.cache_clear()
    return SGLANG.index_logits_dtype()


@pytest.mark.parametrize("logits_dtype", LOGITS_DTYPES)
def test_sglang_v41_flat_index_logits(logits_dtype: torch.dtype) -> None:
    # index_logits.py flat_index_logits_tiles: fp8_fp4_mqa_logits((q, q_sf), kv, w, ks, ke, False, width,
    # logits_dtype=dt) over FP4 queries and keys.
    dt = _set_v41_logits(logits_dtype == torch.bfloat16)
    assert dt == logits_dtype
    g = _gen(90)
    lens_per_request, rows_per_request = [70, 150], [3, 5]
    k_float = _randn(sum(lens_per_request), D, g=g)
    k_packed, k_exp = cast_to_fp4(k_float)
    k_deq = dequant_fp4(k_packed, k_exp)
    starts, lengths = [], []
    col = 0
    for n, r in zip(lens_per_request, rows_per_request):
        for j in range(r):
            starts.append(col)
            lengths.append(n - r + j + 1)
        col += n
    rows = len(starts)
    q_fp4, q_sf, q_deq = fp4_query(_randn(rows, H, D, g=g))
    weights = torch.rand((rows, H), generator=g) * H ** -0.5

    def call() -> Any:
        return list(SGLANG.flat_index_logits_tiles(
            q=(q_fp4.view(torch.int8).to(DEVICE), q_sf.to(DEVICE)),
            kv=(k_packed.view(torch.int8).to(DEVICE), pack_exponents(k_exp).view(-1).to(DEVICE)),
            weights=weights.to(DEVICE), starts=torch.tensor(starts, dtype=torch.int32, device=DEVICE),
            lengths=torch.tensor(lengths, dtype=torch.int32, device=DEVICE), context_lengths=lens_per_request,
            budget_bytes=2 << 30))

    def check(tiles: Any) -> None:
        assert len(tiles) == 1, f"{len(tiles)} tiles, expected 1"
        _, out = tiles[0]
        refs = [(i, 0, index_logits(q_deq[i], k_deq[starts[i]: starts[i] + lengths[i]], weights[i]))
                for i in range(rows)]
        check_logits(out, refs, dtype=logits_dtype, shape=(rows, 192))

    run_site(f"sglang.v41_flat_index_logits[{_logits_dtype_id(logits_dtype)}]",
             _needs(FP4_INPUTS, logits_dtype, SGLANG.index_weights_dtype()), call, check)


@pytest.mark.parametrize("logits_dtype", LOGITS_DTYPES)
@pytest.mark.parametrize("rows_per_request", [1, 2])
def test_sglang_v41_paged_decode(rows_per_request: int, logits_dtype: torch.dtype) -> None:
    # index_logits.py deep_gemm_fp4_paged_mqa_logits: fp8_fp4_paged_mqa_logits(q_fp4, kv, w, lens, table, meta,
    # max_len, False, logits_dtype=dt); MTP rows grouped (B, n) with table[::n].
    dt = _set_v41_logits(logits_dtype == torch.bfloat16)
    assert dt == logits_dtype
    g = _gen(95 + rows_per_request)
    request_lens, width = [40, 130, 7], 3
    n = rows_per_request
    lens = [max(total - n + j + 1, 1) for total in request_lens for j in range(n)]
    k, table, _ = _paged_setup(g, request_lens, width=width)
    cache, k_deq = fp4_cache(k)
    rows = len(lens)
    q_fp4, q_sf, q_deq = fp4_query(_randn(rows, 1, H, D, g=g))
    weights = torch.rand((rows, H), generator=g) * H ** -0.5
    row_table = table.repeat_interleave(n, dim=0)

    def call() -> Any:
        metadata = SGLANG.PagedIndexerMetadata(page_size=256, compressed_page_size=BLOCK,
                                               page_table=row_table.to(DEVICE),
                                               compressed_seq_lens=torch.tensor(lens, dtype=torch.int32,
                                                                                device=DEVICE),
                                               use_topk_v2=False, compress_ratio=1, rows_per_request=n)
        data = SGLANG.DeepGEMMDecodeData(q_fp4=q_fp4.view(torch.int8).to(DEVICE), q_sf=q_sf.to(DEVICE),
                                         weights=weights.to(DEVICE), k_cache=cache.unsqueeze(2).to(DEVICE))
        return SGLANG.v41_deep_gemm_decode_logits(data, metadata)

    def check(out: Any) -> None:
        refs = [(r, 0, index_logits(q_deq[r, 0], _row_keys(k_deq, row_table[r], ln), weights[r]))
                for r, ln in enumerate(lens)]
        check_logits(out, refs, dtype=logits_dtype, shape=(rows, width * BLOCK))

    run_site(f"sglang.v41_paged_decode[n={n},{_logits_dtype_id(logits_dtype)}]",
             _needs(FP4_INPUTS, logits_dtype, SGLANG.index_weights_dtype()), call, check)


# --------------------------------------------------------------------------- SGLang 0.5.23: FP4-experts MoE


def test_sglang_moe_fp4_experts() -> None:
    # DeepGemmRunnerCore._run_contiguous_gemm with DeepGemmMoeQuantInfo(is_fp4_experts=True):
    # m_grouped_fp8_gemm_nt_contiguous((x, x_sf), (w_fp4, w_sf), out, m_indices, recipe_a=(1, 128), recipe_b=(1, 32)),
    # the weights prepared by mxfp4.py (int8 view, transform_sf_into_required_layout(..., recipe=(1, 32))).
    g = _gen(120)
    experts, n, k = 2, 128, 256
    sizes = [100, 60]

    def call() -> Any:
        align = int(_deep_gemm().get_mk_alignment_for_contiguous_layout())
        parts = []
        for e, size in enumerate(sizes):
            part = torch.full((-(-size // align) * align,), -1, dtype=torch.int32)
            part[:size] = e
            parts.append(part)
        m_indices = torch.cat(parts)
        m = m_indices.numel()
        x = _randn(m, k, g=g)
        x_exp = ue8m0_exponent(x.view(m, k // 128, 128).abs().amax(-1).clamp(min=1e-4) / 448.0)
        x_fp8 = (x.view(m, k // 128, 128) / exponent_value(x_exp).unsqueeze(-1)).to(FP8).view(m, k)
        if SGLANG.DEEPGEMM_SCALE_UE8M0:
            # SM100: the activation quant emits packed UE8M0, MN-major and TMA-aligned (4 exponents per int32)
            padded = torch.nn.functional.pad(x_exp, (0, -(-x_exp.shape[1] // 4) * 4 - x_exp.shape[1]))
            packed = pack_exponents(padded)
            x_sf = torch.empty_strided(packed.shape, (1, -(-m // 4) * 4), dtype=torch.int32)
            x_sf.copy_(packed)
        else:
            x_sf = exponent_value(x_exp)
        w = _randn(experts, n, k, g=g)
        w_packed, w_exp = cast_to_fp4(w.view(experts * n, k))
        weight, scale = SGLANG.process_mxfp4_weights_for_deep_gemm(
            w_packed.view(experts, n, k // 2).to(DEVICE), w_exp.view(experts, n, k // 32).to(DEVICE))
        info = SGLANG.DeepGemmMoeQuantInfo(w13_weight=weight, w2_weight=weight, use_fp8=True, w13_scale=scale,
                                           w2_scale=scale, block_shape=[128, 128], is_fp4_experts=True)
        out = SGLANG.run_contiguous_gemm_gate_up(x_fp8.to(DEVICE), x_sf.to(DEVICE), m_indices.to(DEVICE), info)
        a_deq = x_fp8.float().view(m, k // 128, 128) * exponent_value(x_exp).unsqueeze(-1)
        w_deq = dequant_fp4(w_packed, w_exp).view(experts, n, k)
        return out, m_indices, a_deq.view(m, k), w_deq

    def check(result: Any) -> None:
        out, m_indices, a_deq, w_deq = result
        assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
        for e in range(experts):
            rows = (m_indices == e).nonzero().flatten()
            ref = a_deq[rows] @ w_deq[e].t()
            got = out.cpu()[rows].float()
            scale = float(ref.abs().max())
            torch.testing.assert_close(got, ref, rtol=2e-2, atol=2e-2 * scale)

    run_site("sglang.moe_fp4_experts", {FP4_INPUTS}, call, check)


def _deep_gemm() -> Any:
    """The deep_gemm module the engine modules see (the facade, or dgcompat itself when aliased)."""
    if binding() != "alias":
        import deep_gemm

        return deep_gemm
    import dgcompat

    return dgcompat
