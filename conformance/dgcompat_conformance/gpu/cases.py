"""The GPU-tier cases: real kernels through dgcompat, compared with :mod:`dgcompat.reference`.

Each case is one function, run alone in its own process::

    python -m dgcompat_conformance.gpu.cases CASE_ID      # prints one JSON line (the result)
    python -m dgcompat_conformance.gpu.cases --list       # one line per case: id, metric, tolerance, deadline

The installed deep_gemm is whatever ``import deep_gemm`` finds (the runner puts one release's
folder first on ``PYTHONPATH``). Inputs are random (seeded, never all zeros); outputs are compared
with the reference backend run on the same GPU tensors, over valid positions only (rows past a
masked count, padding rows tagged -1, and logits past a row's length are unspecified in the
kernels), with ``diff = 1 - 2*sum(x*y) / sum(x*x + y*y)`` in float64.

Outcomes: ``passed``, ``failed`` (a check did not hold), ``error`` (an unexpected exception),
``xfail`` (the release lacks the feature, dgcompat raised its typed
:class:`~dgcompat.errors.UnsupportedFeatureError`, and the capability table names the upstream
cause). The runner adds ``hang`` when a case prints nothing before its deadline.

The runner's own process imports this module for :data:`CASES` and never loads torch: torch, and
:mod:`dgcompat.reference` and :mod:`.graphsim` which import it, are imported inside the cases, which run in
their child (``# noqa: PLC0415 (torch only in the case's child)``).

Shapes are shared between cases where possible (N = 512, K = 1024 for the GEMMs; H = 64, D = 128,
block_kv = 64 for the indexer) because deep_gemm JIT-compiles every new kernel shape on first use.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import dgcompat
from dgcompat import _tooling
from dgcompat.errors import ScheduleMismatchError, UnsupportedFeatureError
from dgcompat.jit_warmup import DenseGemm, WarmupSpec, warmup
from dgcompat.jit_warmup.check import check as warmup_check
from dgcompat.table import arch_family, rows_for

__all__ = ["Case", "CASES", "run_case", "main", "calc_diff", "expected_signal"]

# Numerics tolerances. The reference computes in float32 from the very FP8/BF16 inputs the kernel
# gets, so what remains is accumulation order and the BF16 rounding of the output.
# Seen on an H200: ~1.5e-6 for the GEMMs (the BF16 rounding of d) and ~1e-8 for the logits; the
# tolerances leave a wide margin over that and stay far below what a wrong scale, row or block gives.
TOL_FP8_GEMM = 1e-4
TOL_BF16_GEMM = 1e-4
TOL_LOGITS = 1e-6

DIFF_METRIC = "diff = 1 - 2*sum(x*y)/sum(x*x+y*y) over valid positions, worst sub-check"
EXACT_METRIC = "exact: every sub-check must hold (value = failed sub-checks)"

GEMM_N, GEMM_K = 512, 1024
HEADS, HEAD_DIM, BLOCK_KV = 64, 128, 64

#: Where the tensors live. Always the GPU in a certification run; ``DGCOMPAT_CASES_DEVICE=cpu`` with
#: ``DGCOMPAT_BACKEND=reference`` dry-runs the cases' own logic on a machine without one.
DEVICE = os.environ.get("DGCOMPAT_CASES_DEVICE", "cuda")


def calc_diff(x: Any, y: Any) -> float:
    """``1 - 2*sum(x*y) / sum(x*x + y*y)`` in float64 (0 for two all-zero inputs)."""
    x64, y64 = x.double(), y.double()
    denom = float((x64 * x64 + y64 * y64).sum())
    if denom == 0.0:
        return 0.0
    return float(1.0 - 2.0 * float((x64 * y64).sum()) / denom)


class ExpectedFailure(Exception):
    """The release lacks what the case needs, and dgcompat said so with its typed error."""


@dataclass
class Checks:
    """Sub-checks of one case: numeric ones (a diff against a tolerance) and exact ones."""

    tolerance: float | None
    items: list[dict[str, Any]] = field(default_factory=list)

    def diff(self, name: str, got: Any, want: Any, tolerance: float | None = None) -> float:
        tol = self.tolerance if tolerance is None else tolerance
        value = calc_diff(got, want)
        ok = math.isfinite(value) and tol is not None and value <= tol
        self.items.append({"name": name, "ok": ok, "value": value, "tolerance": tol})
        return value

    def exact(self, name: str, ok: bool, note: str = "") -> bool:
        rec: dict[str, Any] = {"name": name, "ok": bool(ok)}
        if note:
            rec["note"] = note
        self.items.append(rec)
        return bool(ok)

    def worst(self) -> float | None:
        values = [c["value"] for c in self.items if "value" in c]
        if not values:
            return None
        return float(max(values, key=lambda v: v if math.isfinite(v) else math.inf))

    def failed(self) -> list[dict[str, Any]]:
        return [c for c in self.items if not c["ok"]]


@dataclass(frozen=True)
class Case:
    """One conformance case."""

    id: str
    summary: str
    metric: str
    tolerance: float | None
    timeout: float  # seconds the runner's watchdog allows (JIT of this case's shapes included)
    body: Callable[[Checks], None]


CASES: dict[str, Case] = {}


def _case(case_id: str, summary: str, *, metric: str = DIFF_METRIC, tolerance: float | None = None,
          timeout: float = 150.0) -> Callable[[Callable[[Checks], None]], Callable[[Checks], None]]:
    def register(fn: Callable[[Checks], None]) -> Callable[[Checks], None]:
        CASES[case_id] = Case(case_id, summary, metric, tolerance, timeout, fn)
        return fn
    return register


# --- helpers -------------------------------------------------------------------------------------

def _gen(seed: int) -> Any:
    import torch  # noqa: PLC0415 (torch only in the case's child)

    return torch.Generator(device=DEVICE).manual_seed(seed)


def _sync() -> None:
    import torch  # noqa: PLC0415 (torch only in the case's child)

    if DEVICE == "cuda":
        torch.cuda.synchronize()


def _randn(shape: tuple[int, ...], gen: Any, dtype: Any = None) -> Any:
    import torch  # noqa: PLC0415 (torch only in the case's child)

    return torch.randn(shape, device=DEVICE, dtype=dtype or torch.bfloat16, generator=gen)


def _capability_cause(capability: str) -> str:
    """The upstream change the capability table gives for the installed release's row."""

    rel = dgcompat.release()
    dist = rel.dist if (rel.source in ("sgl-deep-gemm", "bundled") or rel.dist == "deep-gemm") and rel.dist else "*"
    for row in rows_for(capability):
        if row.matches(dist, rel.version):
            return f"{row.since} (capability {capability}={row.value!r} for {rel.label})"
    return f"capability {capability} is absent for {rel.label}"


def _call_or_xfail(capability: str, fn: Callable[[], Any]) -> Any:
    """Run ``fn``; an UnsupportedFeatureError where the table says the feature is absent is an xfail."""

    try:
        return fn()
    except UnsupportedFeatureError as exc:
        if not getattr(dgcompat.capabilities(), capability):
            raise ExpectedFailure(f"{_capability_cause(capability)}; dgcompat raised "
                                  f"UnsupportedFeatureError: {exc}") from exc
        raise


def _fp8_grouped_b(b: Any) -> tuple[Any, Any]:
    """Per-group 128x128 block casts of a ``(G, N, K)`` tensor."""
    import torch  # noqa: PLC0415 (torch only in the case's child)

    from dgcompat import reference  # noqa: PLC0415 (torch only in the case's child)

    parts = [reference.per_block_cast_to_fp8(b[g]) for g in range(b.shape[0])]
    return torch.stack([p[0] for p in parts]), torch.stack([p[1] for p in parts])


def _fp8_rows(a: Any) -> tuple[Any, Any]:
    """Per-token (1x128) casts of a ``(..., K)`` tensor, keeping its leading shape."""
    from dgcompat import reference  # noqa: PLC0415 (torch only in the case's child)

    lead, k = a.shape[:-1], a.shape[-1]
    q, sf = reference.per_token_cast_to_fp8(a.reshape(-1, k))
    return q.view(*lead, k), sf.view(*lead, sf.shape[-1])


# --- runtime knobs -------------------------------------------------------------------------------

@_case("runtime_knobs", "get_num_sms / num_sms() restore / set_pdl / contiguous-layout alignment",
       metric=EXACT_METRIC, tolerance=0, timeout=90.0)
def _runtime_knobs(c: Checks) -> None:
    import torch  # noqa: PLC0415 (torch only in the case's child)

    n = dgcompat.get_num_sms()
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count if DEVICE == "cuda" else n
    c.exact("get_num_sms == device SMs", n == sms, f"{n} vs {sms}")
    with dgcompat.num_sms(n - 4):
        inside = dgcompat.get_num_sms()
    c.exact("num_sms(n-4) applies inside", inside == n - 4, f"{inside}")
    c.exact("num_sms() restores on exit", dgcompat.get_num_sms() == n, f"{dgcompat.get_num_sms()}")
    pdl_cap = dgcompat.capabilities().pdl
    switched = dgcompat.set_pdl(True)
    c.exact("set_pdl(True) returns a bool matching the table", isinstance(switched, bool) and switched == (pdl_cap is not None),
            f"returned {switched!r}, capability pdl={pdl_cap!r}")
    if switched:
        c.exact("get_pdl() after set_pdl(True)", dgcompat.get_pdl() is True, f"{dgcompat.get_pdl()!r}")
        dgcompat.set_pdl(False)
        c.exact("get_pdl() after set_pdl(False)", dgcompat.get_pdl() is False, f"{dgcompat.get_pdl()!r}")
    else:
        c.exact("get_pdl() is None without a switch", dgcompat.get_pdl() is None, f"{dgcompat.get_pdl()!r}")
    align = dgcompat.get_mk_alignment_for_contiguous_layout()
    c.exact("get_mk_alignment_for_contiguous_layout() is int 128", type(align) is int and align == 128, f"{align!r}")


# --- dense GEMMs ---------------------------------------------------------------------------------

_DENSE_M = (1, 96, 333)


@_case("gemm_fp8_dense", f"fp8_gemm_nt, per-token A / 128x128-block B scales, M in {_DENSE_M}, N={GEMM_N}, K={GEMM_K}",
       tolerance=TOL_FP8_GEMM)
def _gemm_fp8_dense(c: Checks) -> None:
    import torch  # noqa: PLC0415 (torch only in the case's child)

    from dgcompat import reference  # noqa: PLC0415 (torch only in the case's child)

    gen = _gen(1)
    b = reference.per_block_cast_to_fp8(_randn((GEMM_N, GEMM_K), gen))
    for m in _DENSE_M:
        a = reference.per_token_cast_to_fp8(_randn((m, GEMM_K), gen))
        d = torch.empty((m, GEMM_N), device=DEVICE, dtype=torch.bfloat16)
        dgcompat.fp8_gemm_nt(a, b, d)
        ref = torch.empty((m, GEMM_N), device=DEVICE, dtype=torch.float32)
        reference.fp8_gemm_nt(a, b, ref)
        c.diff(f"m={m}", d, ref)


@_case("gemm_bf16_dense", f"bf16_gemm_nt, M in {_DENSE_M}, N={GEMM_N}, K={GEMM_K}", tolerance=TOL_BF16_GEMM)
def _gemm_bf16_dense(c: Checks) -> None:
    import torch  # noqa: PLC0415 (torch only in the case's child)

    from dgcompat import reference  # noqa: PLC0415 (torch only in the case's child)

    gen = _gen(2)
    b = _randn((GEMM_N, GEMM_K), gen)
    for m in _DENSE_M:
        a = _randn((m, GEMM_K), gen)
        d = torch.empty((m, GEMM_N), device=DEVICE, dtype=torch.bfloat16)
        dgcompat.bf16_gemm_nt(a, b, d)
        ref = torch.empty((m, GEMM_N), device=DEVICE, dtype=torch.float32)
        reference.bf16_gemm_nt(a, b, ref)
        c.diff(f"m={m}", d, ref)


# --- grouped GEMMs (MoE) -------------------------------------------------------------------------

_GROUP_ROWS = (0, 1, 200, 128)  # valid rows per expert: an empty group and a one-row group included


def _contiguous_layout() -> tuple[Any, list[tuple[int, int, int]]]:
    """``m_indices`` for :data:`_GROUP_ROWS` (each group padded to the alignment, padding -1) and
    ``(group, first row, valid rows)`` per group."""
    import torch  # noqa: PLC0415 (torch only in the case's child)

    align = dgcompat.get_mk_alignment_for_contiguous_layout()
    spans, start, ids = [], 0, []
    for g, rows in enumerate(_GROUP_ROWS):
        padded = -(-rows // align) * align
        ids += [g] * rows + [-1] * (padded - rows)
        spans.append((g, start, rows))
        start += padded
    return torch.tensor(ids, dtype=torch.int32, device=DEVICE), spans


def _check_contiguous(c: Checks, d: Any, ref: Any, m_indices: Any, spans: list[tuple[int, int, int]]) -> None:
    valid = m_indices >= 0
    c.diff("all valid rows", d[valid], ref[valid])
    for g, start, rows in spans:
        if rows == 1:
            c.diff(f"group {g} (1 valid row)", d[start:start + 1], ref[start:start + 1])


@_case("grouped_contiguous_fp8", f"m_grouped_fp8_gemm_nt_contiguous, rows per group {_GROUP_ROWS} padded with -1, "
       f"N={GEMM_N}, K={GEMM_K}; an empty A is a no-op", tolerance=TOL_FP8_GEMM)
def _grouped_contiguous_fp8(c: Checks) -> None:
    import torch  # noqa: PLC0415 (torch only in the case's child)

    from dgcompat import reference  # noqa: PLC0415 (torch only in the case's child)

    gen = _gen(3)
    m_indices, spans = _contiguous_layout()
    m = m_indices.shape[0]
    a = _fp8_rows(_randn((m, GEMM_K), gen))
    b = _fp8_grouped_b(_randn((len(_GROUP_ROWS), GEMM_N, GEMM_K), gen))
    d = torch.zeros((m, GEMM_N), device=DEVICE, dtype=torch.bfloat16)
    dgcompat.m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices)
    ref = torch.zeros((m, GEMM_N), device=DEVICE, dtype=torch.bfloat16)
    reference.m_grouped_fp8_gemm_nt_contiguous(a, b, ref, m_indices)
    _check_contiguous(c, d, ref, m_indices, spans)
    empty_a = (a[0][:0], a[1][:0])
    empty_d = torch.empty((0, GEMM_N), device=DEVICE, dtype=torch.bfloat16)
    dgcompat.m_grouped_fp8_gemm_nt_contiguous(empty_a, b, empty_d, m_indices[:0])
    c.exact("M_total == 0 is a no-op", True)


@_case("grouped_contiguous_bf16", f"m_grouped_bf16_gemm_nt_contiguous, rows per group {_GROUP_ROWS} padded with -1",
       tolerance=TOL_BF16_GEMM)
def _grouped_contiguous_bf16(c: Checks) -> None:
    import torch  # noqa: PLC0415 (torch only in the case's child)

    from dgcompat import reference  # noqa: PLC0415 (torch only in the case's child)

    gen = _gen(4)
    m_indices, spans = _contiguous_layout()
    m = m_indices.shape[0]
    a = _randn((m, GEMM_K), gen)
    b = _randn((len(_GROUP_ROWS), GEMM_N, GEMM_K), gen)
    d = torch.zeros((m, GEMM_N), device=DEVICE, dtype=torch.bfloat16)
    _call_or_xfail("bf16_grouped_contiguous", lambda: dgcompat.m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices))
    ref = torch.zeros((m, GEMM_N), device=DEVICE, dtype=torch.bfloat16)
    reference.m_grouped_bf16_gemm_nt_contiguous(a, b, ref, m_indices)
    _check_contiguous(c, d, ref, m_indices, spans)


@_case("grouped_contiguous_psum_bf16", f"m_grouped_bf16_gemm_nt_contiguous(use_psum_layout=True), group rows "
       f"{_GROUP_ROWS}, each group from the aligned end of the one before", tolerance=TOL_BF16_GEMM)
def _grouped_contiguous_psum_bf16(c: Checks) -> None:
    import torch  # noqa: PLC0415 (torch only in the case's child)

    gen = _gen(9)
    align = dgcompat.get_mk_alignment_for_contiguous_layout()
    spans, start = [], 0
    for rows in _GROUP_ROWS:
        spans.append((start, start + rows))
        start = -(-(start + rows) // align) * align
    m = max(start, align)
    a = _randn((m, GEMM_K), gen)
    b = _randn((len(_GROUP_ROWS), GEMM_N, GEMM_K), gen)
    d = torch.zeros((m, GEMM_N), device=DEVICE, dtype=torch.bfloat16)
    ends = torch.tensor([e for _, e in spans], device=DEVICE, dtype=torch.int32)
    try:
        _call_or_xfail("bf16_grouped_contiguous", lambda: dgcompat.m_grouped_bf16_gemm_nt_contiguous(
            a, b, d, ends, use_psum_layout=True, expected_m_for_psum_layout=max(_GROUP_ROWS)))
    except UnsupportedFeatureError as exc:
        if "use_psum_layout" in str(exc):
            raise ExpectedFailure(f"this release has no psum layout; dgcompat raised UnsupportedFeatureError: {exc}") \
                from exc
        raise
    _sync()
    for g, (s0, e0) in enumerate(spans):
        if e0 > s0:
            c.diff(f"group {g} rows [{s0}, {e0})", d[s0:e0], (a[s0:e0].float() @ b[g].float().T).to(torch.bfloat16))


_MASKED_M = (0, 1, 200, 256)
_M_MAX = 256
_EXPECTED_M = 128


def _masked_inputs(seed: int, *, fp8: bool) -> tuple[Any, Any, Any]:
    """``masked_m`` (G,) int32 and the operands ``a`` (G, M_max, K), ``b`` (G, N, K) of the masked cases: FP8 with
    per-token / per-block scales, or bfloat16."""
    import torch  # noqa: PLC0415 (torch only in the case's child)

    gen = _gen(seed)
    g = len(_MASKED_M)
    masked_m = torch.tensor(_MASKED_M, dtype=torch.int32, device=DEVICE)
    a = _randn((g, _M_MAX, GEMM_K), gen)
    b = _randn((g, GEMM_N, GEMM_K), gen)
    return (masked_m, _fp8_rows(a), _fp8_grouped_b(b)) if fp8 else (masked_m, a, b)


def _masked_out() -> Any:
    """A zeroed bfloat16 ``d`` (G, M_max, N) of the masked cases."""
    import torch  # noqa: PLC0415 (torch only in the case's child)

    return torch.zeros((len(_MASKED_M), _M_MAX, GEMM_N), device=DEVICE, dtype=torch.bfloat16)


def _check_masked(c: Checks, d: Any, ref: Any, masked_m: Any) -> None:
    import torch  # noqa: PLC0415 (torch only in the case's child)

    valid = torch.arange(_M_MAX, device=DEVICE).unsqueeze(0) < masked_m.unsqueeze(1)
    c.diff("all valid rows", d[valid], ref[valid])
    for g, rows in enumerate(_MASKED_M):
        if rows == 1:
            c.diff(f"group {g} (1 valid row)", d[g, :1], ref[g, :1])


@_case("grouped_masked_fp8", f"m_grouped_fp8_gemm_nt_masked, masked_m={_MASKED_M}, M_max={_M_MAX}, "
       f"N={GEMM_N}, K={GEMM_K}; returns None", tolerance=TOL_FP8_GEMM)
def _grouped_masked_fp8(c: Checks) -> None:
    from dgcompat import reference  # noqa: PLC0415 (torch only in the case's child)

    masked_m, a, b = _masked_inputs(5, fp8=True)
    d = _masked_out()
    ret = dgcompat.m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, _EXPECTED_M)
    c.exact("returns None without overlap", ret is None, repr(ret)[:80])
    ref = _masked_out()
    reference.m_grouped_fp8_gemm_nt_masked(a, b, ref, masked_m, _EXPECTED_M)
    _check_masked(c, d, ref, masked_m)


@_case("grouped_masked_bf16", f"m_grouped_bf16_gemm_nt_masked, masked_m={_MASKED_M}, M_max={_M_MAX}",
       tolerance=TOL_BF16_GEMM)
def _grouped_masked_bf16(c: Checks) -> None:
    from dgcompat import reference  # noqa: PLC0415 (torch only in the case's child)

    masked_m, a, b = _masked_inputs(6, fp8=False)
    d = _masked_out()
    _call_or_xfail("bf16_grouped_masked", lambda: dgcompat.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, _EXPECTED_M))
    ref = _masked_out()
    reference.m_grouped_bf16_gemm_nt_masked(a, b, ref, masked_m, _EXPECTED_M)
    _check_masked(c, d, ref, masked_m)


def expected_signal(masked_m: Any, m_max: int, block_m: int, threshold: int, size: int) -> list[int]:
    """The signal the bundled DeepGEMM fork leaves after an overlapped masked GEMM (zeros before).

    Each finished ``(block_m x block_n)`` output tile of group ``g`` adds 1, after its store, to
    ``signal[g * ceil(M_max / block_m) + m_block]``; ``threshold = ceil(N / block_n)`` tiles make one
    block row. Only the block rows ``m_block < ceil(masked_m[g] / block_m)`` run, so those read
    ``threshold`` and every other entry stays 0 (sgl-project/DeepGEMM ``sm90_fp8_gemm_1d2d.cuh``,
    ``enable_overlap``; its tests' ``check_signal``).
    """
    rows = -(-m_max // block_m)
    out = [0] * size
    for g, valid in enumerate(int(v) for v in masked_m):
        for block in range(-(-valid // block_m)):
            out[g * rows + block] = threshold
    return out


def _first_differences(got: list[int], want: list[int], limit: int = 6) -> str:
    bad = [(i, g, w) for i, (g, w) in enumerate(zip(got, want, strict=False)) if g != w]
    return ", ".join(f"[{i}] {g} (want {w})" for i, g, w in bad[:limit]) + (f", ... {len(bad)} in all" if bad else "")


@_case("grouped_masked_fp8_overlap", f"m_grouped_fp8_gemm_nt_masked(overlap=MaskedOverlap(signal, num_sms=n-4)), "
       f"masked_m={_MASKED_M}, M_max={_M_MAX}, N={GEMM_N}, K={GEMM_K}, int32 zero signal of G*M_max entries. Where "
       "capability masked_overlap (the bundled copies): d equals the call without overlap and the reference over "
       "valid rows; it returns (block_m, threshold), two positive ints; the signal reads threshold = ceil(N/block_n) "
       "at g*ceil(M_max/block_m)+i for every block row i < ceil(masked_m[g]/block_m) that ran (one add per finished "
       "block_n tile) and 0 everywhere else; get_num_sms() afterwards equals before. Elsewhere: "
       "UnsupportedFeatureError naming overlap, d and the signal untouched, the SM count unchanged (xfail)",
       tolerance=TOL_FP8_GEMM, timeout=240.0)
def _grouped_masked_fp8_overlap(c: Checks) -> None:
    import torch  # noqa: PLC0415 (torch only in the case's child)

    from dgcompat import reference  # noqa: PLC0415 (torch only in the case's child)

    g = len(_MASKED_M)
    masked_m, a, b = _masked_inputs(7, fp8=True)
    signal = torch.zeros(g * _M_MAX, dtype=torch.int32, device=DEVICE)  # enough for any block_m
    before = dgcompat.get_num_sms()
    overlap = dgcompat.MaskedOverlap(signal, num_sms=max(1, before - 4))
    if not dgcompat.capabilities().masked_overlap:
        d = torch.full((g, _M_MAX, GEMM_N), 7.0, device=DEVICE, dtype=torch.bfloat16)
        untouched = d.clone()
        refusal: Exception | None = None
        try:
            dgcompat.m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, _EXPECTED_M, overlap=overlap)
        except UnsupportedFeatureError as exc:
            refusal = exc
        _sync()
        c.exact("refused with UnsupportedFeatureError", refusal is not None,
                "" if refusal is not None else "the overlapped call returned")
        c.exact("the refusal names overlap", "overlap" in str(refusal), str(refusal)[:200])
        c.exact("d untouched", bool(torch.equal(d, untouched)))
        c.exact("signal untouched", int(torch.count_nonzero(signal)) == 0)
        c.exact("get_num_sms() unchanged", dgcompat.get_num_sms() == before, f"{dgcompat.get_num_sms()} vs {before}")
        if refusal is not None and not c.failed():
            raise ExpectedFailure(f"{_capability_cause('masked_overlap')}; dgcompat raised UnsupportedFeatureError: "
                                  f"{refusal}")
        return
    plain = _masked_out()
    dgcompat.m_grouped_fp8_gemm_nt_masked(a, b, plain, masked_m, _EXPECTED_M)
    d = _masked_out()
    ret = dgcompat.m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, _EXPECTED_M, overlap=overlap)
    _sync()
    after = dgcompat.get_num_sms()
    pair_ok = (isinstance(ret, tuple) and len(ret) == 2 and all(type(x) is int and x > 0 for x in ret))
    c.exact("returns (block_m, threshold), two positive ints", pair_ok, repr(ret)[:80])
    c.exact("get_num_sms() afterwards equals before", after == before, f"{after} vs {before}")
    valid = torch.arange(_M_MAX, device=DEVICE).unsqueeze(0) < masked_m.unsqueeze(1)
    c.diff("valid rows equal the call without overlap", d[valid], plain[valid])
    ref = _masked_out()
    reference.m_grouped_fp8_gemm_nt_masked(a, b, ref, masked_m, _EXPECTED_M)
    c.diff("valid rows against the reference", d[valid], ref[valid])
    if pair_ok and ret is not None:
        block_m, threshold = ret
        rows = -(-_M_MAX // block_m)
        c.exact("the signal holds every block row", g * rows <= signal.numel(), f"{g} x {rows} > {signal.numel()}")
        got = [int(v) for v in signal.cpu().tolist()]
        want = expected_signal(_MASKED_M, _M_MAX, block_m, threshold, signal.numel())
        c.exact(f"signal = {threshold} for each of the {sum(1 for v in want if v)} block rows that ran, 0 elsewhere",
                got == want, _first_differences(got, want))


# --- MQA logits (ragged, prefill) ----------------------------------------------------------------

@_case("mqa_logits", f"fp8_mqa_logits, 96 queries over 2 ragged sequences of 4096 keys, H={HEADS}, D={HEAD_DIM}; "
       "uncompressed (max_seqlen_k None and 0; emulated from the compressed launch where the release asserts "
       "max_seqlen_k > 0), clean_logits=True (-inf outside) and compressed (max_seqlen_k)", tolerance=TOL_LOGITS)
def _mqa_logits(c: Checks) -> None:
    import torch  # noqa: PLC0415 (torch only in the case's child)

    from dgcompat import reference  # noqa: PLC0415 (torch only in the case's child)

    q, kv, w, ks, ke = _mqa_inputs()
    nk, valid, ref = _mqa_expected(q, kv, w, ks, ke)
    layout = dgcompat.capabilities().mqa_uncompressed

    out = dgcompat.fp8_mqa_logits(q, kv, w, ks, ke)
    c.exact("shape (Nq, Nk) float32", tuple(out.shape) == (q.shape[0], nk) and out.dtype == torch.float32,
            f"{tuple(out.shape)} {out.dtype}; uncompressed layout {layout}")
    c.diff("plain", out[valid], ref[valid])
    zero = dgcompat.fp8_mqa_logits(q, kv, w, ks, ke, max_seqlen_k=0)
    c.exact("max_seqlen_k=0: shape (Nq, Nk)", tuple(zero.shape) == (q.shape[0], nk), f"{tuple(zero.shape)}")
    c.diff("max_seqlen_k=0 (uncompressed)", zero[valid], ref[valid])

    clean = dgcompat.fp8_mqa_logits(q, kv, w, ks, ke, clean_logits=True)
    c.diff("clean_logits=True, valid", clean[valid], ref[valid])
    c.exact("clean_logits=True: -inf outside [ks, ke)", bool(torch.isneginf(clean[~valid]).all()))

    width = int((ke - ks).max())
    try:
        comp = dgcompat.fp8_mqa_logits(q, kv, w, ks, ke, max_seqlen_k=width)
    except dgcompat.UnsupportedFeatureError as exc:
        # The sglang-kernel copies have no compressed layout; a typed refusal is the contract there.
        c.exact("compressed layout refused typed where the release has none (mqa_max_seqlen_k absent)",
                dgcompat.capabilities().mqa_max_seqlen_k == "absent", str(exc))
        return
    ref_comp = reference.fp8_mqa_logits(q, kv, w, ks, ke, max_seqlen_k=width)
    cvalid = torch.arange(width, device=DEVICE).unsqueeze(0) < (ke - ks).unsqueeze(1)
    c.exact("compressed shape (Nq, max_seqlen_k)", tuple(comp.shape) == (q.shape[0], width), f"{tuple(comp.shape)}")
    c.diff("compressed (max_seqlen_k)", comp[cvalid], ref_comp[cvalid])


def _mqa_expected(q: Any, kv: Any, w: Any, ks: Any, ke: Any) -> tuple[int, Any, Any]:
    """(Nk, the (Nq, Nk) mask of each query's keys [ks, ke), the reference's uncompressed logits)."""
    import torch  # noqa: PLC0415 (torch only in the case's child)

    from dgcompat import reference  # noqa: PLC0415 (torch only in the case's child)

    nk = kv[0].shape[0]
    cols = torch.arange(nk, device=DEVICE).unsqueeze(0)
    return nk, (cols >= ks.unsqueeze(1)) & (cols < ke.unsqueeze(1)), reference.fp8_mqa_logits(q, kv, w, ks, ke)


def _mqa_inputs() -> tuple[Any, Any, Any, Any, Any]:
    """(q, kv, weights, ks, ke): 96 causal prefill queries over two sequences of 4096 keys (the last query of
    the second sees up to key Nk - 1, the first sequence starts at key 0)."""
    import torch  # noqa: PLC0415 (torch only in the case's child)

    from dgcompat import reference  # noqa: PLC0415 (torch only in the case's child)

    gen = _gen(7)
    nk, seqs = 4096, ((0, 1536, 40), (1536, 4096, 56))  # (first key, end key, queries)
    q = _randn((sum(s[2] for s in seqs), HEADS, HEAD_DIM), gen).to(torch.float8_e4m3fn)
    k, k_sf = reference.per_token_cast_to_fp8(_randn((nk, HEAD_DIM), gen))
    kv = (k, k_sf.view(-1).contiguous())
    w = _randn((q.shape[0], HEADS), gen, torch.float32)
    ks_list, ke_list = [], []
    for start, end, nq in seqs:  # causal prefill: query i of a sequence sees its first len - nq + i + 1 keys
        for i in range(nq):
            ks_list.append(start)
            ke_list.append(end - nq + i + 1)
    ks = torch.tensor(ks_list, dtype=torch.int32, device=DEVICE)
    ke = torch.tensor(ke_list, dtype=torch.int32, device=DEVICE)
    return q, kv, w, ks, ke


#: bf16 logits round each value to 8 bits of mantissa: diff ~1e-5; far below what a wrong row or scale gives.
TOL_BF16_LOGITS = 1e-4


@_case("mqa_logits_dtype", "fp8_mqa_logits(logits_dtype=...): float32 as the default call; bfloat16 computed by "
       "the build where its fp8_fp4_mqa_logits takes logits_dtype, converted from float32 elsewhere; bfloat16 "
       "weights", tolerance=TOL_LOGITS)
def _mqa_logits_dtype(c: Checks) -> None:
    import torch  # noqa: PLC0415 (torch only in the case's child)

    q, kv, w, ks, ke = _mqa_inputs()
    nk, valid, ref = _mqa_expected(q, kv, w, ks, ke)
    f32 = dgcompat.fp8_mqa_logits(q, kv, w, ks, ke, clean_logits=True, logits_dtype=torch.float32)
    c.exact("logits_dtype=float32: float32 (Nq, Nk)",
            f32.dtype == torch.float32 and tuple(f32.shape) == (q.shape[0], nk))
    c.diff("logits_dtype=float32", f32[valid], ref[valid])
    c.exact("logits_dtype=float32: -inf outside [ks, ke)", bool(torch.isneginf(f32[~valid]).all()))
    how = "computed by the build" if dgcompat.capabilities().mqa_logits_dtype else "converted from float32"
    bf16 = dgcompat.fp8_mqa_logits(q, kv, w, ks, ke, logits_dtype=torch.bfloat16)
    c.exact(f"logits_dtype=bfloat16 ({how}): bfloat16 (Nq, Nk)",
            bf16.dtype == torch.bfloat16 and tuple(bf16.shape) == (q.shape[0], nk), f"{bf16.dtype} {tuple(bf16.shape)}")
    c.diff(f"logits_dtype=bfloat16 ({how})", bf16[valid].float(), ref[valid], tolerance=TOL_BF16_LOGITS)
    wb = w.to(torch.bfloat16)
    ref_wb = dgcompat.reference.fp8_mqa_logits(q, kv, wb.float(), ks, ke)
    for dtype in (torch.float32, torch.bfloat16):
        out = dgcompat.fp8_mqa_logits(q, kv, wb, ks, ke, logits_dtype=dtype)
        c.exact(f"bfloat16 weights, logits_dtype={dtype}: {dtype}", out.dtype == dtype, str(out.dtype))
        c.diff(f"bfloat16 weights, logits_dtype={dtype}", out[valid].float(), ref_wb[valid], tolerance=TOL_BF16_LOGITS)


# --- paged MQA logits (decode / MTP verify) ------------------------------------------------------

# (batch, longest context, whether every sequence has the longest context)
_PAGED_CONFIGS = ((1, 65536, True), (300, 2048, False), (24, 65536, False))


@dataclass
class _Paged:
    q: Any
    kv: Any
    w: Any
    ctx: Any  # int32 (B,): total length of each sequence, the next_n new tokens included
    row_lens: Any  # int32 (B, next_n): causal visible length of each query row
    block_table: Any  # int32 (B, max_blocks)
    max_len: int


def _paged_inputs(seed: int, batch: int, longest: int, uniform: bool, next_n: int) -> _Paged:
    import torch  # noqa: PLC0415 (torch only in the case's child)

    from dgcompat import reference  # noqa: PLC0415 (torch only in the case's child)

    gen = _gen(seed)
    if uniform:
        ctx = torch.full((batch,), longest, dtype=torch.int64, device=DEVICE)
    else:
        ctx = torch.randint(next_n, longest + 1, (batch,), device=DEVICE, generator=gen)
        ctx[0] = longest
    blocks = (ctx + BLOCK_KV - 1) // BLOCK_KV
    num_blocks = int(blocks.sum()) + 3
    max_blocks = -(-longest // BLOCK_KV)
    # Physical blocks are a random permutation, so a wrong block-table row reads the wrong data.
    perm = torch.randperm(num_blocks, device=DEVICE, generator=gen).to(torch.int32)
    table = torch.zeros((batch, max_blocks), dtype=torch.int32, device=DEVICE)
    offset = 0
    for bi, nb in enumerate(blocks.tolist()):
        table[bi, :nb] = perm[offset:offset + nb]
        offset += nb
    kv = reference.pack_kv_cache(_randn((num_blocks, BLOCK_KV, HEAD_DIM), gen))
    q = _randn((batch, next_n, HEADS, HEAD_DIM), gen).to(torch.float8_e4m3fn)
    w = _randn((batch * next_n, HEADS), gen, torch.float32)
    j = torch.arange(next_n, device=DEVICE)
    row_lens = (ctx.unsqueeze(1) - next_n + j + 1).to(torch.int32).contiguous()
    return _Paged(q, kv, w, ctx.to(torch.int32).contiguous(), row_lens, table, longest)


def _lens_form(p: _Paged, form: str) -> Any:
    if form == "seq":
        return p.ctx.clone()
    if form == "rows":
        return p.row_lens.clone()
    return p.row_lens.reshape(-1, 1).clone()  # "flat": (B*next_n, 1)


def _paged_case(c: Checks, next_n: int, form: str) -> None:
    import torch  # noqa: PLC0415 (torch only in the case's child)

    from dgcompat import reference  # noqa: PLC0415 (torch only in the case's child)

    for i, (batch, longest, uniform) in enumerate(_PAGED_CONFIGS):
        p = _paged_inputs(100 + 10 * next_n + i, batch, longest, uniform, next_n)
        lens = _lens_form(p, form)
        ref = reference.fp8_paged_mqa_logits(p.q, p.kv, p.w, lens, p.block_table, None, p.max_len)
        valid = torch.arange(p.max_len, device=DEVICE).unsqueeze(0) < p.row_lens.reshape(-1, 1)
        schedule = dgcompat.get_paged_mqa_logits_metadata(lens, BLOCK_KV)
        tables = {"per-sequence table": p.block_table,
                  "per-row table": p.block_table.repeat_interleave(next_n, dim=0).contiguous()}
        for tname, table in tables.items():
            out = dgcompat.fp8_paged_mqa_logits(p.q, p.kv, p.w, lens, table, schedule, p.max_len)
            name = f"B={batch} ctx<={longest} {tname}"
            shape_ok = tuple(out.shape) == (batch * next_n, p.max_len) and out.dtype == torch.float32
            if not c.exact(f"{name}: shape (B*next_n, max_context_len) float32", shape_ok,
                           f"{tuple(out.shape)} {out.dtype}"):
                continue
            c.diff(name, out[valid], ref[valid])
        if i == 0:
            clean = dgcompat.fp8_paged_mqa_logits(p.q, p.kv, p.w, lens, p.block_table, schedule, p.max_len,
                                                  clean_logits=True)
            c.diff(f"B={batch} clean_logits=True, valid", clean[valid], ref[valid])
            c.exact(f"B={batch} clean_logits=True: -inf past each row's length",
                    bool(torch.isneginf(clean[~valid]).all()))
        del p, ref, valid
        if DEVICE == "cuda":
            torch.cuda.empty_cache()


_FORMS = {"seq": "(B,)", "rows": "(B, next_n)", "flat": "(B*next_n, 1)"}

for _n in (1, 2, 3, 4):
    for _form, _shape in _FORMS.items():
        def _make(next_n: int = _n, form: str = _form) -> Callable[[Checks], None]:
            def body(c: Checks) -> None:
                _paged_case(c, next_n, form)
            return body
        _case(f"paged_mqa_n{_n}_{_form}",
              f"fp8_paged_mqa_logits next_n={_n}, context_lens {_shape}, per-sequence and per-row block tables, "
              f"(batch, longest context) in {[(b, ctx) for b, ctx, _ in _PAGED_CONFIGS]}, H={HEADS}, D={HEAD_DIM}, "
              f"block_kv={BLOCK_KV}", tolerance=TOL_LOGITS, timeout=180.0)(_make())


def _sm90() -> bool:
    import torch  # noqa: PLC0415 (torch only in the case's child)

    return DEVICE != "cuda" or torch.cuda.get_device_capability()[0] == 9


def _vllm_slots(num_sms: int, next_n: int) -> int:
    """vLLM 0.34.0's ``_paged_mqa_logits_schedule_slots``: one task per 2-CTA cluster for next_n 4 on SM90."""
    return num_sms // 2 if next_n == 4 and _sm90() else num_sms


def _check_logits(c: Checks, name: str, out: Any, p: _Paged, dtype: Any) -> None:
    import torch  # noqa: PLC0415 (torch only in the case's child)

    ok = isinstance(out, torch.Tensor) and out.dtype == dtype and tuple(out.shape) == (p.row_lens.numel(), p.max_len)
    if c.exact(f"{name}: a {dtype} (B*next_n, max_context_len) tensor", ok,
               f"{type(out).__name__} {getattr(out, 'dtype', '')} {tuple(getattr(out, 'shape', ()))}"):
        tol = TOL_LOGITS if dtype == torch.float32 else TOL_BF16_LOGITS
        c.diff(name, out[_valid(p)].float(), _paged_ref(p)[_valid(p)], tolerance=tol)


@_case("fp8_fp4_vllm_decode", "vLLM 0.34.0's decode calls, unchanged: get_paged_mqa_logits_metadata((B, next_n) "
       "lengths, 64, slots) with vLLM's slot count (num_sms // 2 for next_n 4 on SM90) and "
       "fp8_fp4_paged_mqa_logits((q, None), ..., logits_dtype=float32 / bfloat16), next_n 1, 2, 4, eagerly and "
       "under CUDA-graph replay with vLLM's refresh (lengths written, schedule_buffer[:] = metadata)",
       tolerance=TOL_LOGITS, timeout=240.0)
def _fp8_fp4_vllm_decode(c: Checks) -> None:
    import torch  # noqa: PLC0415 (torch only in the case's child)

    sms = dgcompat.get_num_sms()
    for next_n in (1, 2, 4):
        slots = _vllm_slots(sms, next_n)
        first, second = _replay_pair(5000 + next_n, 8, next_n)
        lens = first.row_lens.clone()
        sched = dgcompat.get_paged_mqa_logits_metadata(lens, BLOCK_KV, slots)
        c.exact(f"next_n={next_n}: schedule of the engine's {slots} slots", tuple(sched.shape) == (slots + 1, 2),
                str(tuple(sched.shape)))
        for dtype in (torch.float32, torch.bfloat16):
            for call in range(2):  # the second call takes the repeat path
                out = dgcompat.fp8_fp4_paged_mqa_logits((first.q, None), first.kv, first.w, lens, first.block_table,
                                                        sched, first.max_len, logits_dtype=dtype)
                _check_logits(c, f"next_n={next_n} eager {dtype} call {call}", out, first, dtype)
        q, w, bt = first.q.clone(), first.w.clone(), first.block_table.clone()
        buf_lens, buf_sched = lens.clone(), sched.clone()

        def launch(q: Any = q, w: Any = w, kv: Any = first.kv, lens_: Any = buf_lens, bt: Any = bt,
                   sched_: Any = buf_sched, max_len: int = first.max_len) -> Any:
            return dgcompat.fp8_fp4_paged_mqa_logits((q, None), kv, w, lens_, bt, sched_, max_len,
                                                     logits_dtype=torch.bfloat16)
        graph = _Graph()
        out = graph.capture(launch)
        graph.replay()
        _sync()
        _check_logits(c, f"next_n={next_n} replay, captured batch", out, first, torch.bfloat16)
        q.copy_(second.q)
        w.copy_(second.w)
        bt.copy_(second.block_table)
        buf_lens.copy_(second.row_lens)
        buf_sched[:] = dgcompat.get_paged_mqa_logits_metadata(buf_lens, BLOCK_KV, slots)
        graph.replay()
        _sync()
        _check_logits(c, f"next_n={next_n} replay, next batch", out, second, torch.bfloat16)
        del first, second, graph, out
        if DEVICE == "cuda":
            torch.cuda.empty_cache()


@_case("fp8_fp4_engine_forms", "the other fp8_fp4 call forms of vLLM 0.34.0 and SGLang 0.5.23, unchanged: "
       "SGLang's DeepSeek-V4 paged call ((q, None), ..., (N, 1) lengths, per-row table, meta, max_len, False, "
       "logits_dtype=...), vLLM's prefill fp8_fp4_mqa_logits((q, None), (k, k_sf), w, ks, ke, max_seqlen_k, "
       "logits_dtype=...), SGLang's V4.1 tiles fp8_fp4_mqa_logits((q, None), kv, w, ks, ke, False, width, "
       "logits_dtype=...) and the 0.2.5 / vLLM 0.33 layout (..., max_seqlen_k, None)", tolerance=TOL_LOGITS,
       timeout=180.0)
def _fp8_fp4_engine_forms(c: Checks) -> None:
    import torch  # noqa: PLC0415 (torch only in the case's child)

    from dgcompat import reference  # noqa: PLC0415 (torch only in the case's child)

    p = _paged_inputs(61, 16, 3000, False, 1)
    flat = p.row_lens.reshape(-1, 1).contiguous()
    meta = dgcompat.get_paged_mqa_logits_metadata(flat, BLOCK_KV, dgcompat.get_num_sms())
    for dtype in (torch.float32, torch.bfloat16):
        out = dgcompat.fp8_fp4_paged_mqa_logits((p.q.view(-1, 1, HEADS, HEAD_DIM), None), p.kv, p.w, flat,
                                                p.block_table, meta, p.max_len, False, logits_dtype=dtype)
        _check_logits(c, f"SGLang V4 paged, {dtype}", out, p, dtype)
    q, kv, w, ks, ke = _mqa_inputs()
    width = int((ke - ks).max())
    want = reference.fp8_mqa_logits(q, kv, w, ks, ke, max_seqlen_k=width)
    valid = torch.arange(width, device=DEVICE).unsqueeze(0) < (ke - ks).unsqueeze(1)
    forms: dict[str, Callable[[Any], Any]] = {
        "vLLM prefill": lambda dt: dgcompat.fp8_fp4_mqa_logits((q, None), kv, w, ks, ke, width, logits_dtype=dt),
        "SGLang V4.1 tile": lambda dt: dgcompat.fp8_fp4_mqa_logits((q, None), kv, w, ks, ke, False, width,
                                                                   logits_dtype=dt),
        "0.2.5 / vLLM 0.33 positional": lambda dt: dgcompat.fp8_fp4_mqa_logits((q, None), kv, w, ks, ke, width, None),
    }
    for name, call in forms.items():
        for dtype in (torch.float32, torch.bfloat16):
            if name.startswith("0.2.5") and dtype == torch.bfloat16:
                continue
            try:
                out = call(dtype)
            except dgcompat.UnsupportedFeatureError as exc:
                c.exact(f"{name}: compressed layout refused typed where the release has none",
                        dgcompat.capabilities().mqa_max_seqlen_k == "absent", str(exc))
                break
            ok = isinstance(out, torch.Tensor) and out.dtype == dtype and tuple(out.shape) == (q.shape[0], width)
            if c.exact(f"{name} {dtype}: a {dtype} (Nq, max_seqlen_k) tensor", ok, f"{getattr(out, 'dtype', '')}"):
                tol = TOL_LOGITS if dtype == torch.float32 else TOL_BF16_LOGITS
                c.diff(f"{name} {dtype}", out[valid].float(), want[valid], tolerance=tol)


@_case("paged_logits_dtype", "fp8_paged_mqa_logits(logits_dtype=bfloat16), next_n 1, 2, 4, (B, next_n) lengths: "
       "computed by the build where its fp8_fp4_paged_mqa_logits takes logits_dtype, converted from float32 "
       "elsewhere; bfloat16 weights", tolerance=TOL_BF16_LOGITS, timeout=180.0)
def _paged_logits_dtype(c: Checks) -> None:
    import torch  # noqa: PLC0415 (torch only in the case's child)

    how = "computed by the build" if dgcompat.capabilities().paged_logits_dtype else "converted from float32"
    for next_n in (1, 2, 4):
        p = _paged_inputs(70 + next_n, 24, 8192, False, next_n)
        sched = dgcompat.get_paged_mqa_logits_metadata(p.row_lens, BLOCK_KV)
        out = dgcompat.fp8_paged_mqa_logits(p.q, p.kv, p.w, p.row_lens, p.block_table, sched, p.max_len,
                                            logits_dtype=torch.bfloat16)
        _check_logits(c, f"next_n={next_n} bfloat16 ({how})", out, p, torch.bfloat16)
        p.w = p.w.to(torch.bfloat16)
        out = dgcompat.fp8_paged_mqa_logits(p.q, p.kv, p.w, p.row_lens, p.block_table, sched, p.max_len,
                                            logits_dtype=torch.bfloat16)
        p.w = p.w.float()  # the reference's weights: the bf16 values, exactly
        _check_logits(c, f"next_n={next_n} bfloat16 weights", out, p, torch.bfloat16)


@_case("paged_mqa_stale_schedule", "a schedule dgcompat built whose context_lens were rewritten in place "
       "afterwards raises ScheduleMismatchError before any launch; a schedule of another lengths tensor, a foreign or "
       "an overwritten one is replaced by one derived from the lengths (correct result, no hang); refreshing it "
       "in place (out=) then launches correctly", tolerance=TOL_LOGITS, timeout=90.0)
def _paged_stale(c: Checks) -> None:
    import torch  # noqa: PLC0415 (torch only in the case's child)

    from dgcompat import reference  # noqa: PLC0415 (torch only in the case's child)

    p = _paged_inputs(7, 8, 8192, False, 1)
    lens = p.ctx.clone().view(-1, 1)
    short = torch.clamp(lens // 16, min=1).to(torch.int32)
    work = short.clone()
    schedule = dgcompat.get_paged_mqa_logits_metadata(work, BLOCK_KV)
    # Launched with the longer lengths, this schedule is the one seen to hang the kernel.
    work.copy_(lens)

    def expect_mismatch(name: str, launch: Callable[[], Any]) -> None:
        try:
            launch()
            _sync()
        except ScheduleMismatchError as exc:
            c.exact(f"{name}: ScheduleMismatchError", True, str(exc)[:160])
            return
        except Exception as exc:  # noqa: BLE001 - any other error is the failure this case reports
            c.exact(f"{name}: ScheduleMismatchError", False, f"raised {type(exc).__name__}: {str(exc)[:200]}")
            return
        c.exact(f"{name}: ScheduleMismatchError", False, "launched without an error")

    def launch(lens_t: Any, sched: Any) -> Any:
        return dgcompat.fp8_paged_mqa_logits(p.q, p.kv, p.w, lens_t, p.block_table, sched, p.max_len)

    def expect_correct(name: str, lens_t: Any, sched: Any) -> None:
        out = launch(lens_t, sched)
        ref = reference.fp8_paged_mqa_logits(p.q, p.kv, p.w, lens_t, p.block_table, None, p.max_len)
        valid = torch.arange(p.max_len, device=DEVICE).unsqueeze(0) < lens_t
        c.diff(name, out[valid], ref[valid])

    expect_mismatch("lengths rewritten after the schedule", lambda: launch(work, schedule))
    other = lens.clone()
    expect_correct("schedule of another lengths tensor (replaced)", other, schedule)
    expect_correct("schedule not built by dgcompat (replaced)", work, schedule.clone())

    dgcompat.get_paged_mqa_logits_metadata(work, BLOCK_KV, out=schedule)
    address = schedule.data_ptr()
    schedule.zero_()
    expect_correct("schedule overwritten after it was built (replaced)", work, schedule)

    dgcompat.get_paged_mqa_logits_metadata(work, BLOCK_KV, out=schedule)
    c.exact("out= keeps the schedule's address", schedule.data_ptr() == address)
    expect_correct("refreshed schedule", work, schedule)


# --- paged MQA logits under CUDA-graph replay -----------------------------------------------------

#: Batch sizes of the replay cases (a graph is captured per batch size, as engines do).
REPLAY_BATCHES = (1, 8, 64, 256)
#: How an engine refreshes its buffers before a replay (docs/sources/engine-usage.md): "sglang" copies a schedule
#: built from fresh lengths into its buffer and then the lengths; "vllm" writes the lengths and assigns
#: ``buffer[:] = get_paged_mqa_logits_metadata(lengths)``; "out" refreshes in place with ``out=``;
#: "nothing" writes the lengths only (the stale-schedule pattern: must neither hang nor go wrong).
REPLAY_PATTERNS = ("sglang", "vllm", "out", "nothing")
REPLAY_MAX_CTX = 3000


class _Graph:
    """``torch.cuda.CUDAGraph`` on the GPU; the CPU analogue (:mod:`.graphsim`) in a dry run."""

    def __init__(self) -> None:
        import torch  # noqa: PLC0415 (torch only in the case's child)

        if DEVICE == "cuda":
            self.g: Any = torch.cuda.CUDAGraph()
        else:
            from .graphsim import Graph  # noqa: PLC0415 (torch only in the case's child)

            self.g = Graph()

    def capture(self, fn: Callable[[], Any]) -> Any:
        import torch  # noqa: PLC0415 (torch only in the case's child)

        if DEVICE == "cuda":
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                fn()  # warm-up on the capture stream (JIT, allocator), as torch.cuda.graph advises
            torch.cuda.current_stream().wait_stream(side)
            with torch.cuda.graph(self.g):
                out = fn()
            return out

        with self.g.capture(_tooling.load_backend()):
            return fn()

    def replay(self) -> None:
        self.g.replay()


class _ReplayBuffers:
    """One engine's persistent buffers for a captured batch size."""

    def __init__(self, p: _Paged, next_n: int, form: str, per_row: bool) -> None:
        self.n, self.form, self.per_row = next_n, form, per_row
        self.q, self.w, self.kv = p.q.clone(), p.w.clone(), p.kv
        self.lens = _lens_form(p, form)
        self.bt = self._table(p).clone()
        self.max_len = p.max_len
        self.sched = dgcompat.get_paged_mqa_logits_metadata(self.lens, BLOCK_KV)

    def _table(self, p: _Paged) -> Any:
        return p.block_table.repeat_interleave(self.n, dim=0).contiguous() if self.per_row else p.block_table

    def write(self, p: _Paged, pattern: str) -> None:
        self.q.copy_(p.q)
        self.w.copy_(p.w)
        self.bt.copy_(self._table(p))
        fresh = _lens_form(p, self.form)
        if pattern == "sglang":
            self.sched.copy_(dgcompat.get_paged_mqa_logits_metadata(fresh, BLOCK_KV))
            self.lens.copy_(fresh)
        elif pattern == "vllm":
            self.lens.copy_(fresh)
            self.sched[:] = dgcompat.get_paged_mqa_logits_metadata(self.lens, BLOCK_KV)
        elif pattern == "out":
            self.lens.copy_(fresh)
            dgcompat.get_paged_mqa_logits_metadata(self.lens, BLOCK_KV, out=self.sched)
        elif pattern == "nothing":
            self.lens.copy_(fresh)
        else:
            raise ValueError(pattern)

    def launch(self) -> Any:
        return dgcompat.fp8_paged_mqa_logits(self.q, self.kv, self.w, self.lens, self.bt, self.sched, self.max_len)


def _replay_pair(seed: int, batch: int, next_n: int) -> tuple[_Paged, _Paged]:
    """Two batches of one batch size over one KV cache and one table width (what a graph's buffers hold)."""
    first = _paged_inputs(seed, batch, REPLAY_MAX_CTX, False, next_n)
    second = _paged_inputs(seed + 1, batch, REPLAY_MAX_CTX, False, next_n)
    if second.kv.shape[0] > first.kv.shape[0]:
        first.kv = second.kv  # tables of both index into the larger cache
    else:
        second.kv = first.kv
    return first, second


def _paged_ref(p: _Paged) -> Any:
    from dgcompat import reference  # noqa: PLC0415 (torch only in the case's child)

    return reference.fp8_paged_mqa_logits(p.q, p.kv, p.w, p.row_lens, p.block_table, None, p.max_len)


def _valid(p: _Paged) -> Any:
    import torch  # noqa: PLC0415 (torch only in the case's child)

    return torch.arange(p.max_len, device=DEVICE).unsqueeze(0) < p.row_lens.reshape(-1, 1)


def _replay_case(c: Checks, next_n: int, form: str, per_row: bool, batches: tuple[int, ...] = REPLAY_BATCHES,
                 patterns: tuple[str, ...] = REPLAY_PATTERNS) -> None:
    import torch  # noqa: PLC0415 (torch only in the case's child)

    for bi, batch in enumerate(batches):
        for pi, pattern in enumerate(patterns):
            first, second = _replay_pair(1000 + 97 * bi + 13 * pi + next_n, batch, next_n)
            buf = _ReplayBuffers(first, next_n, form, per_row)
            graph = _Graph()
            out = graph.capture(buf.launch)
            _sync()
            graph.replay()  # replay of the captured batch itself
            _sync()
            name = f"B={batch} {pattern}"
            c.diff(f"{name}: replay, captured batch", out[_valid(first)], _paged_ref(first)[_valid(first)])
            buf.write(second, pattern)
            graph.replay()
            _sync()
            c.diff(f"{name}: replay, next batch", out[_valid(second)], _paged_ref(second)[_valid(second)])
            if pattern == "nothing":
                # Eagerly the same pattern is the engine bug dgcompat refuses before any launch.

                try:
                    buf.launch()
                    c.exact(f"{name}: eager launch after a stale write refused", False, "launched")
                except ScheduleMismatchError:
                    c.exact(f"{name}: eager launch after a stale write refused", True)
                continue
            eager = buf.launch()
            c.diff(f"{name}: eager, next batch", eager[_valid(second)], _paged_ref(second)[_valid(second)])
            del first, second, buf, graph, out
            if DEVICE == "cuda":
                torch.cuda.empty_cache()


for _n in (1, 2, 4):
    for _form, _shape in _FORMS.items():
        for _table in ("per_seq", "per_row"):
            def _make_replay(next_n: int = _n, form: str = _form, per_row: bool = _table == "per_row"
                             ) -> Callable[[Checks], None]:
                def body(c: Checks) -> None:
                    _replay_case(c, next_n, form, per_row)
                return body
            _case(f"paged_replay_n{_n}_{_form}_{_table}",
                  f"CUDA-graph capture of fp8_paged_mqa_logits (next_n={_n}, context_lens {_shape}, "
                  f"{_table.replace('_', '-')} block table), then the next batch written into the captured buffers "
                  f"as SGLang, vLLM, out= and no refresh at all do, then replay: the replayed (and eager) output "
                  f"for the new batch against the reference; B in {list(REPLAY_BATCHES)}, contexts <= "
                  f"{REPLAY_MAX_CTX}", tolerance=TOL_LOGITS, timeout=240.0)(_make_replay())


#: Batch sizes captured over views of one persistent buffer sized for the largest (buffer[:B]).
VIEW_BATCHES = (1, 8, 32)


def _views_case(c: Checks, next_n: int) -> None:
    """Every lengths form: one lengths buffer and one table buffer sized for the largest batch, each batch size
    launching views ``buffer[:B]`` of them, eagerly and under graphs captured per batch size."""
    import torch  # noqa: PLC0415 (torch only in the case's child)

    for form in _FORMS:
        pairs = {b: _replay_pair(3000 + 31 * b + next_n, b, next_n) for b in VIEW_BATCHES}
        top = max(VIEW_BATCHES)
        lens_buf = torch.ones({"seq": (top,), "rows": (top, next_n), "flat": (top * next_n, 1)}[form],
                              dtype=torch.int32, device=DEVICE)
        width = pairs[top][0].block_table.shape[1]
        bt_buf = torch.zeros((top, width), dtype=torch.int32, device=DEVICE)

        def rows(b: int) -> Any:  # this form's buffers: used only in this iteration
            return lens_buf[: b * next_n] if form == "flat" else lens_buf[:b]  # noqa: B023

        def write(b: int, p: _Paged) -> None:
            rows(b).copy_(_lens_form(p, form))  # noqa: B023 - as rows()
            bt_buf[:b].copy_(p.block_table)  # noqa: B023 - as rows()

        # Eager: the schedule built from buffer[:B], then the buffer's other rows written (another batch size).
        b, (first, _second) = 8, pairs[8]
        write(b, first)
        sched = dgcompat.get_paged_mqa_logits_metadata(rows(b), BLOCK_KV)
        other = pairs[top][0]
        tail = lens_buf.view(-1)[rows(b).numel():]
        tail.copy_(_lens_form(other, form).reshape(-1)[rows(b).numel():])
        try:
            out = dgcompat.fp8_paged_mqa_logits(first.q, first.kv, first.w, rows(b), bt_buf[:b], sched, first.max_len)
            _sync()
            c.diff(f"{form}: eager after other rows were written", out[_valid(first)], _paged_ref(first)[_valid(first)])
        except Exception as exc:  # noqa: BLE001 - recorded as the failure it is
            c.exact(f"{form}: eager after other rows were written launches", False,
                    f"raised {type(exc).__name__}: {str(exc)[:200]}")
        # Under replay: a graph per batch size over views of the same buffers, replayed with new inputs.
        graphs: dict[int, tuple[Any, Any, Any, Any]] = {}
        schedules: dict[int, Any] = {}
        for b, (first, _second) in pairs.items():
            write(b, first)
            sched = torch.zeros((dgcompat.get_num_sms() + 1, 2), dtype=torch.int32, device=DEVICE)
            dgcompat.get_paged_mqa_logits_metadata(rows(b), BLOCK_KV, out=sched)
            q, w = first.q.clone(), first.w.clone()
            view, table = rows(b), bt_buf[:b]

            def launch(q: Any = q, w: Any = w, kv: Any = first.kv, view: Any = view, table: Any = table,
                       sched: Any = sched, max_len: int = first.max_len) -> Any:
                return dgcompat.fp8_paged_mqa_logits(q, kv, w, view, table, sched, max_len)
            graph = _Graph()
            graphs[b] = (graph, graph.capture(launch), q, w)
            schedules[b] = sched
        _sync()
        for step, pick in enumerate((1, 0)):  # the second batch of each size, then the first again
            for b, pair in pairs.items():
                p = pair[pick]
                graph, out, q, w = graphs[b]
                q.copy_(p.q)
                w.copy_(p.w)
                write(b, p)  # this batch size's rows only; the schedule buffers are not refreshed
                graph.replay()
                _sync()
                c.diff(f"{form}: replay B={b} step {step}", out[_valid(p)], _paged_ref(p)[_valid(p)])
        # Eager again on the most recently written rows, with the schedule built long before (many writes since).
        b = VIEW_BATCHES[0]
        p = pairs[b][0]
        write(b, p)
        out = dgcompat.fp8_paged_mqa_logits(p.q, p.kv, p.w, rows(b), bt_buf[:b], schedules[b], p.max_len)
        _sync()
        c.diff(f"{form}: eager B={b} after the replays", out[_valid(p)], _paged_ref(p)[_valid(p)])
        del graphs, pairs
        if DEVICE == "cuda":
            torch.cuda.empty_cache()


for _n in (1, 2, 4):
    def _make_views(next_n: int = _n) -> Callable[[Checks], None]:
        def body(c: Checks) -> None:
            _views_case(c, next_n)
        return body
    _case(f"paged_views_n{_n}",
          f"context_lens and block table as views buffer[:B] of one persistent buffer sized for the largest batch "
          f"(next_n={_n}, every lengths form): a schedule built from buffer[:8] still launches (correctly) after the "
          f"buffer's other rows are written; graphs captured per batch size B in {list(VIEW_BATCHES)} over views "
          f"of the same buffers, replayed with new inputs written into each size's rows (schedules not refreshed): "
          f"every replay against the reference", tolerance=TOL_LOGITS, timeout=240.0)(_make_views())


@_case("paged_replay_stale", "lengths rewritten with much longer ones and no schedule refreshed, then replay "
       "(the pattern seen to hang the kernel): the replay must finish (watchdog) and be correct, since the "
       "schedule is recomputed inside the graph", tolerance=TOL_LOGITS, timeout=120.0)
def _paged_replay_stale(c: Checks) -> None:
    import torch  # noqa: PLC0415 (torch only in the case's child)

    p = _paged_inputs(11, 8, 8192, False, 1)
    short = _paged_inputs(11, 8, 8192, False, 1)
    short.ctx = torch.clamp(p.ctx // 16, min=1).to(torch.int32)
    short.row_lens = short.ctx.view(-1, 1).contiguous()
    buf = _ReplayBuffers(short, 1, "rows", False)
    graph = _Graph()
    out = graph.capture(buf.launch)
    buf.write(p, "nothing")  # much longer lengths under a schedule built for the short ones
    graph.replay()
    _sync()
    c.diff("replay after a stale write", out[_valid(p)], _paged_ref(p)[_valid(p)])


@_case("paged_replay_two_graphs", "two graphs captured back to back on the same buffers (no eager call in "
       "between), several layers each: each replays correctly for the next batch (a schedule derived in one "
       "capture is never reused by another)", tolerance=TOL_LOGITS, timeout=150.0)
def _paged_replay_two_graphs(c: Checks) -> None:
    first, second = _replay_pair(21, 8, 4)
    buf = _ReplayBuffers(first, 4, "seq", False)
    graphs = [_Graph(), _Graph()]
    outs = [g.capture(lambda: [buf.launch() for _ in range(3)]) for g in graphs]
    buf.write(second, "nothing")
    for gi, (graph, layer_outs) in enumerate(zip(graphs, outs, strict=True)):
        graph.replay()
        _sync()
        for li, out in enumerate(layer_outs):
            c.diff(f"graph {gi} layer {li}: next batch", out[_valid(second)], _paged_ref(second)[_valid(second)])


# --- scale layouts -------------------------------------------------------------------------------

def _aligned(mn: int) -> int:
    return -(-mn // 4) * 4  # float32 / int32: 16 bytes = 4 elements


def _mn_major(t: Any) -> tuple[int, ...]:
    """The strides dgcompat promises for a scale it returns: MN-major, TMA-aligned (also for size-1 dims)."""
    mn, k = t.shape[-2], t.shape[-1]
    al = _aligned(mn)
    return (1, al) if t.dim() == 2 else (al * k, 1, al)


def _layout_check(c: Checks, name: str, got: Any, want: Any, rule: str = "tma") -> None:
    """Values (and shape, dtype) equal the reference's, and the strides follow ``rule``.

    ``"tma"``: MN-major and TMA-aligned, the stride of a size-1 dimension included (the GEMMs
    assert it). ``"contiguous"``: contiguous by explicit strides, K-major or MN-major: what the SM90
    GEMMs assert for an FP32 block-scaled SFB (``csrc/utils/layout.hpp``, which checks the stride of a
    size-1 dimension too). Strides are checked against these rules rather than copied from the
    reference, whose choice for a size-1 dimension need not be the kernels'.
    """
    import torch  # noqa: PLC0415 (torch only in the case's child)

    same = (tuple(got.shape) == tuple(want.shape) and got.dtype == want.dtype
            and bool(torch.equal(got.contiguous(), want.contiguous())))
    c.exact(f"{name}: values equal the reference", same,
            f"got {tuple(got.shape)} {got.dtype}, reference {tuple(want.shape)} {want.dtype}")
    s = tuple(got.stride())
    note = f"got strides {s}, reference backend {tuple(want.stride())}"
    if rule == "tma":
        strides = _mn_major(got)
        c.exact(f"{name}: strides {strides}", s == strides, note)
    else:
        ok = (s[-1] == 1 and s[-2] == got.shape[-1]) or (s[-1] == got.shape[-2] and s[-2] == 1)
        c.exact(f"{name}: contiguous by explicit strides (SM90 SFB rule)", ok, note)


def _sfb_rule() -> str:
    """SM90 keeps FP32 128x128 block scales as they are (contiguous); newer GEMMs read MN-major TMA ones."""

    family = arch_family(dgcompat.capabilities().arch)
    return "contiguous" if family in (None, "sm90") else "tma"


def _scales_case(c: Checks, k: int) -> None:
    import torch  # noqa: PLC0415 (torch only in the case's child)

    from dgcompat import reference  # noqa: PLC0415 (torch only in the case's child)

    gen = _gen(11 + k)
    mn, n, kb = 99, 256, k // 128
    sf = torch.rand((mn, kb), device=DEVICE, generator=gen) * 0.01 + 1e-3

    tma = dgcompat.get_mn_major_tma_aligned_tensor(sf)
    _layout_check(c, f"get_mn_major_tma_aligned_tensor ({mn}, {kb})", tma,
                  reference.get_mn_major_tma_aligned_tensor(sf))

    pow2 = dgcompat.ceil_to_ue8m0(sf)
    packed = dgcompat.get_mn_major_tma_aligned_packed_ue8m0_tensor(pow2)
    _layout_check(c, f"get_mn_major_tma_aligned_packed_ue8m0_tensor ({mn}, {kb})", packed,
                  reference.get_mn_major_tma_aligned_packed_ue8m0_tensor(pow2))
    pow2_g = dgcompat.ceil_to_ue8m0(torch.rand((2, mn, kb), device=DEVICE, generator=gen) + 0.1)
    packed_g = dgcompat.get_mn_major_tma_aligned_packed_ue8m0_tensor(pow2_g)
    _layout_check(c, f"get_mn_major_tma_aligned_packed_ue8m0_tensor (2, {mn}, {kb})", packed_g,
                  reference.get_mn_major_tma_aligned_packed_ue8m0_tensor(pow2_g))

    sfa = dgcompat.transform_sf_into_required_layout(sf, mn, k, (1, 128, 128), is_sfa=True)
    want_sfa = reference.transform_sf_into_required_layout(sf, mn, k, (1, 128, 128), is_sfa=True)
    _layout_check(c, f"transform_sf_into_required_layout sfa ({mn}, {kb})", sfa, want_sfa)

    block = torch.rand((-(-n // 128), kb), device=DEVICE, generator=gen) * 0.01 + 1e-3
    sfb = dgcompat.transform_sf_into_required_layout(block, n, k, (1, 128, 128), is_sfa=False)
    want_sfb = reference.transform_sf_into_required_layout(block, n, k, (1, 128, 128), is_sfa=False)
    _layout_check(c, f"transform_sf_into_required_layout sfb {tuple(block.shape)}", sfb, want_sfb, _sfb_rule())

    ue = dgcompat.transform_scale_ue8m0(block, n)
    _layout_check(c, f"transform_scale_ue8m0 {tuple(block.shape)} -> ({n}, {ue.shape[-1]})", ue,
                  reference.transform_scale_ue8m0(block, n))

    # Scales that went through dgcompat's layout functions must be accepted by the next GEMM as they
    # are; with K <= 512 the scale's K dimension has size 1, where a rewritten stride makes it assert.
    a_fp8, a_sf = reference.per_token_cast_to_fp8(_randn((mn, k), gen))
    b = reference.per_block_cast_to_fp8(_randn((n, k), gen))
    ref = torch.empty((mn, n), device=DEVICE, dtype=torch.float32)
    reference.fp8_gemm_nt((a_fp8, a_sf), b, ref)
    operands = {
        "TMA-aligned sfa, sfb as cast": ((a_fp8, dgcompat.get_mn_major_tma_aligned_tensor(a_sf)), b),
        "sfa and sfb from transform_sf_into_required_layout": (
            (a_fp8, dgcompat.transform_sf_into_required_layout(a_sf, mn, k, (1, 128, 128), is_sfa=True)),
            (b[0], dgcompat.transform_sf_into_required_layout(b[1], n, k, (1, 128, 128), is_sfa=False))),
    }
    for what, (a_op, b_op) in operands.items():
        name = f"fp8_gemm_nt with {what} (m={mn}, n={n}, k={k})"
        d = torch.empty((mn, n), device=DEVICE, dtype=torch.bfloat16)
        try:
            dgcompat.fp8_gemm_nt(a_op, b_op, d)
            _sync()
        except Exception as exc:  # noqa: BLE001 - any error is the failure this case reports
            c.exact(f"{name}: accepted", False, f"{type(exc).__name__}: {exc}"[:700])
            continue
        c.diff(name, d, ref)


for _k in (128, 512):
    def _make_scales(k: int = _k) -> Callable[[Checks], None]:
        def body(c: Checks) -> None:
            _scales_case(c, k)
        return body
    _case(f"scales_k{_k}", f"TMA-aligned and packed UE8M0 scale layouts with K={_k} (a size-1 trailing "
          f"{'scale' if _k == 128 else 'packed'} dimension): values against the reference, strides as the GEMMs "
          f"assert them, then fp8_gemm_nt with the scales those functions returned", metric=f"exact layouts + {DIFF_METRIC}",
          tolerance=TOL_FP8_GEMM)(_make_scales())


# --- warmup --------------------------------------------------------------------------------------

_WARMUP_MAX_TOKENS = 256


@_case("warmup_zero_compiles", f"dgcompat.warmup of fp8_gemm_nt N={GEMM_N}, K={GEMM_K} at every M <= "
       f"{_WARMUP_MAX_TOKENS} in every scale form the GPU takes, into this release's JIT cache; then the check "
       "(sampled calls in a fresh process against that folder) compiles nothing", metric=EXACT_METRIC, tolerance=0,
       timeout=300.0)
def _warmup_zero_compiles(c: Checks) -> None:
    spec = WarmupSpec((DenseGemm(GEMM_N, GEMM_K),), max_tokens=_WARMUP_MAX_TOKENS)
    report = warmup(spec, workers=4, processes=2, progress=False)  # the folder DG_JIT_CACHE_DIR names
    if report.method == "none":  # the reference backend (the cases' CPU dry run)
        c.exact("reference backend: nothing to compile", report.kernels == 0, report.summary())
        return
    c.exact("every call verified against the folder", report.method != "stand-in" or report.verified == report.calls,
            report.summary())
    if report.method == "stand-in":
        c.exact("each kernel counted once", report.compiled + report.cached == report.kernels > 0, report.summary())
    found = warmup_check(spec, sample=8, seed=1)
    c.exact("the check compiled nothing", found.compiled == 0 and not found.errors, found.summary()[:1500])
    c.exact("the check ran calls", found.calls > 0, f"{found.calls} calls")


# --- running one case ----------------------------------------------------------------------------

def run_case(case_id: str) -> dict[str, Any]:
    """Run one case in this process and return its result record."""
    t0 = time.perf_counter()
    case = CASES.get(case_id)
    if case is None:
        return {"id": case_id, "outcome": "error", "metric": None, "tolerance": None, "value": None,
                "message": f"unknown case {case_id!r}", "duration": 0.0}
    rec: dict[str, Any] = {"id": case.id, "summary": case.summary, "metric": case.metric, "tolerance": case.tolerance}
    checks = Checks(case.tolerance)
    try:
        import torch  # noqa: PLC0415 (torch only in the case's child)

        if DEVICE == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("no CUDA device")
        case.body(checks)
        _sync()
        failed = checks.failed()
        rec["outcome"] = "failed" if failed or not checks.items else "passed"
        rec["message"] = "; ".join(_check_text(f) for f in failed) if failed else ""
        if not checks.items:
            rec["message"] = "the case checked nothing"
    except ExpectedFailure as exc:
        rec["outcome"] = "xfail"
        rec["message"] = str(exc)
    except Exception as exc:  # noqa: BLE001 - recorded as the case's error, the run goes on
        rec["outcome"] = "error"
        rec["message"] = f"{type(exc).__name__}: {exc}"[:1500]
        rec["traceback"] = traceback.format_exc()[-2500:]
    worst = checks.worst()
    if case.metric == EXACT_METRIC:
        rec["value"] = len(checks.failed())
    else:
        rec["value"] = worst
    rec["checks"] = checks.items
    rec["duration"] = round(time.perf_counter() - t0, 3)
    return rec


def _check_text(c: dict[str, Any]) -> str:
    if "value" in c:
        return f"{c['name']}: diff {c['value']:.3g} > {c['tolerance']:g}"
    return f"{c['name']}: {c.get('note') or 'does not hold'}"


def main(argv: list[str] | None = None) -> int:
    """``python -m dgcompat_conformance.gpu.cases CASE_ID`` prints the result as one JSON line; ``--list`` lists."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if args[0] == "--list":
        for case in CASES.values():
            print(json.dumps({"id": case.id, "metric": case.metric, "tolerance": case.tolerance,
                              "timeout": case.timeout, "summary": case.summary}))
        return 0
    rec = run_case(args[0])
    print(json.dumps(rec, default=str), flush=True)
    if os.environ.get("DGCOMPAT_CASES_FAST_EXIT") == "1":
        # The result is out; the interpreter's and CUDA's teardown only cost the runner time.
        sys.stderr.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
