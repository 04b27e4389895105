"""The hot calls an engine makes, each as a direct deep_gemm call and as the dgcompat call.

A :class:`Case` is one row of the per-call table: the statement timed for the direct call (what an
engine writes against the installed deep_gemm by hand, including any layout work that launch
needs, such as the ``q.view`` of the split paged layout) and the statement timed through dgcompat,
over the same pre-built inputs. Inputs are small tensors on :data:`DEVICE` (``cuda`` where the host has a
GPU: an engine's tensors live there and it has a CUDA context, which some of torch's queries cost more
without); the no-op stand-in never reads them, and dgcompat's steady state reads only their metadata.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from dgcompat import _tooling

__all__ = ["DEVICE", "Case", "build_cases", "calibration_cases", "paged_floor", "passthrough", "GEMM_GOAL_NS", "PAGED_GOAL_NS", "LAYERS"]

#: Added host time per call the performance targets allow (ns).
GEMM_GOAL_NS = 300.0
PAGED_GOAL_NS = 1000.0

#: Where the inputs are made (:mod:`bench.overhead` sets it from ``--device``).
DEVICE = ["cpu"]

#: Layers sharing one step's lengths, schedule and block table (DeepSeek V3 has 61).
LAYERS = 61

# Decode-like sizes for the indexer (the stand-in ignores them; dgcompat checks shapes once per plan).
_B, _H, _D, _BKV, _MAX_LEN = 8, 64, 128, 64, 1024


@dataclass
class Case:
    """One timed call: ``direct`` and ``stable`` are statements over the names in ``env``."""

    name: str
    function: str  # the stable name (what dgcompat.resolve is asked for)
    per: str  # "call" (every layer), "batch" (once per step) or "calibration" (a yardstick)
    goal_ns: float | None
    env: dict[str, Any]
    direct: str
    stable: str
    note: str = ""
    # Runs once at the start of each timed round, before its loop (e.g. starting the cycle of
    # per-layer q tensors), so its cost stays out of the per-call figure.
    setup: str = ""
    # Upstream object the direct statement calls (for the resolve identity check).
    upstream: Callable[..., Any] | None = None
    # The least a sound dgcompat call could cost (a statement over ``f_floor``, see :func:`paged_floor`),
    # timed in the same rounds as the other columns; "" where the case has none.
    floor: str = ""
    # A statement run once (outside the steady-state loop) that starts a new batch, for counting
    # what dgcompat builds per batch; None where nothing is built per batch.
    new_batch: str | None = None
    # The engine's own step before ``new_batch`` (writing the new lengths), not counted.
    batch_refresh: str = ""
    # Attributes set on the stand-in module before the case runs: what its logits and metadata
    # calls return (each case its own schedule, as each real metadata call returns a new tensor).
    state: dict[str, Any] = field(default_factory=dict)


def _fp8(*shape: int) -> Any:
    import torch

    return torch.empty(shape, dtype=torch.float8_e4m3fn, device=DEVICE[0])


def _f32(*shape: int) -> Any:
    import torch

    return torch.empty(shape, dtype=torch.float32, device=DEVICE[0])


def _bf16(*shape: int) -> Any:
    import torch

    return torch.empty(shape, dtype=torch.bfloat16, device=DEVICE[0])


def _i32(*shape: int, fill: int = 0) -> Any:
    import torch

    return torch.full(shape, fill, dtype=torch.int32, device=DEVICE[0])


def _paged_inputs(next_n: int, lens_dims: str = "2d") -> dict[str, Any]:
    """Paged-MQA inputs for ``_B`` sequences of ``next_n`` query rows; ``lens`` ``(B, next_n)``, or ``(B,)``
    where ``lens_dims`` is ``"1d"`` (the form the bundled copies launch as given)."""
    import torch

    blocks = _MAX_LEN // _BKV
    rows = _B * next_n
    return {
        "q": _fp8(_B, next_n, _H, _D),
        "kv": torch.empty((_B * blocks, _BKV, 1, _D + 4), dtype=torch.uint8, device=DEVICE[0]),
        "w": _f32(rows, _H),
        "lens": _i32(_B, fill=_MAX_LEN - 24) if lens_dims == "1d" else _i32(_B, next_n, fill=_MAX_LEN - 24),
        "bt": torch.arange(_B * blocks, dtype=torch.int32, device=DEVICE[0]).view(_B, blocks),
        "L": _MAX_LEN,
        # Each layer has its own q (a fresh tensor every call), as in a real forward pass.
        "qs": [_fp8(_B, next_n, _H, _D) for _ in range(LAYERS)],
    }


def passthrough(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The cheapest possible wrapper: what "a bare Python pass-through wrapper" costs on this machine."""
    def wrapper(a: Any, b: Any, d: Any) -> Any:
        return fn(a, b, d)
    return wrapper


def paged_floor(up_paged: Callable[..., Any], inputs: dict[str, Any], sched: Any) -> Callable[..., Any]:
    """The least a sound paged fast path can do before launching, as a function of the engine's call
    (planned for ``inputs`` of :func:`_paged_inputs` and their schedule ``sched``).

    What no repeat call may skip (see :mod:`dgcompat.indexer`): that lengths, block table and schedule are
    the planned tensors (three weak references) and unwritten (two version counters), that q, weights and
    kv_cache have the planned metadata (dgcompat's tensor guard, one C call) and that no CUDA-graph capture
    is underway (torch's capture-status query). Nothing else: no plan lookup, no layouts, no error mapping.
    """
    import weakref

    lens, bt = inputs["lens"], inputs["bt"]
    same_meta = _tooling.same_metadata(inputs["q"], inputs["w"], inputs["kv"])
    capturing = _tooling.capture_probe(inputs["q"].device)
    lr: Callable[[], Any] = weakref.ref(lens)
    br: Callable[[], Any] = weakref.ref(bt)
    sr: Callable[[], Any] = weakref.ref(sched)
    lv, sv = lens._version, sched._version
    tensor = type(lens)

    def floor(q: Any, kv_cache: Any, weights: Any, context_lens: Any, block_table: Any, schedule_meta: Any,
              max_context_len: int) -> Any:
        if (lr() is context_lens and context_lens._version == lv and sr() is schedule_meta
                and schedule_meta._version == sv and br() is block_table and same_meta(q, weights, kv_cache)
                and not capturing()):
            out = up_paged(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, False)
            return out if type(out) is tensor else None
        raise AssertionError("the floor's checks failed on the very inputs they were made for")
    return floor


def calibration_cases(up: ModuleType) -> list[Case]:
    """The targets' yardsticks measured on this machine: a pass-through wrapper and one tensor attribute read.

    The goals are stated for a machine where the wrapper costs ~0.1 us; dividing by these makes the
    results comparable across hosts (the H200 machine's host ran Python ~3x slower than a dev box).
    """
    gemm = {"a": (_fp8(64, 512), _f32(64, 4)), "b": (_fp8(1024, 512), _f32(8, 4)), "d": _bf16(64, 1024)}
    wrapped = passthrough(up.fp8_gemm_nt)
    q = _fp8(_B, 2, _H, _D)
    return [
        Case("calibration: pass-through wrapper", "-", "calibration", None,
             {**gemm, "f_up": up.fp8_gemm_nt, "f_dg": wrapped}, "f_up(a, b, d)", "f_dg(a, b, d)",
             note="def wrapper(a, b, d): return fp8_gemm_nt(a, b, d)"),
        Case("calibration: tensor attribute read", "-", "calibration", None, {"q": q, "f_up": None, "f_dg": None},
             "q", "q.shape", note="q.shape"),
    ]


def build_cases(dg: ModuleType, up: ModuleType) -> list[Case]:
    """The cases for the installed (stand-in) release; ``dg`` is dgcompat, ``up`` the bound deep_gemm."""
    cases: list[Case] = []
    gemm = {"a": (_fp8(64, 512), _f32(64, 4)), "b": (_fp8(1024, 512), _f32(8, 4)), "d": _bf16(64, 1024)}
    cases.append(Case("fp8_gemm_nt", "fp8_gemm_nt", "call", GEMM_GOAL_NS, {**gemm, "f_up": up.fp8_gemm_nt,
                      "f_dg": dg.fp8_gemm_nt}, "f_up(a, b, d)", "f_dg(a, b, d)", upstream=up.fp8_gemm_nt))
    bf = {"a": _bf16(64, 512), "b": _bf16(1024, 512), "d": _bf16(64, 1024)}
    cases.append(Case("bf16_gemm_nt", "bf16_gemm_nt", "call", GEMM_GOAL_NS, {**bf, "f_up": up.bf16_gemm_nt,
                      "f_dg": dg.bf16_gemm_nt}, "f_up(a, b, d)", "f_dg(a, b, d)", upstream=up.bf16_gemm_nt))

    contig = {"a": (_fp8(256, 512), _f32(256, 4)), "b": (_fp8(4, 1024, 512), _f32(4, 8, 4)), "d": _bf16(256, 1024),
              "m": _i32(256)}
    up_contig = up.m_grouped_fp8_gemm_nt_contiguous
    cases.append(Case("m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nt_contiguous", "call", GEMM_GOAL_NS,
                      {**contig, "f_up": up_contig, "f_dg": dg.m_grouped_fp8_gemm_nt_contiguous},
                      "f_up(a, b, d, m)", "f_dg(a, b, d, m)", upstream=up_contig))
    bcontig = {"a": _bf16(256, 512), "b": _bf16(4, 1024, 512), "d": _bf16(256, 1024), "m": _i32(256)}
    up_bcontig = up.m_grouped_bf16_gemm_nt_contiguous
    cases.append(Case("m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_nt_contiguous", "call",
                      GEMM_GOAL_NS, {**bcontig, "f_up": up_bcontig, "f_dg": dg.m_grouped_bf16_gemm_nt_contiguous},
                      "f_up(a, b, d, m)", "f_dg(a, b, d, m)", upstream=up_bcontig))

    masked = {"a": (_fp8(4, 64, 512), _f32(4, 64, 4)), "b": (_fp8(4, 1024, 512), _f32(4, 8, 4)),
              "d": _bf16(4, 64, 1024), "mm": _i32(4, fill=16), "em": 16}
    # 0.1.x has the masked GEMM only under its fp8_m_grouped_* alias; an engine calls what exists.
    up_masked = getattr(up, "m_grouped_fp8_gemm_nt_masked", None) or up.fp8_m_grouped_gemm_nt_masked
    cases.append(Case("m_grouped_fp8_gemm_nt_masked", "m_grouped_fp8_gemm_nt_masked", "call", GEMM_GOAL_NS,
                      {**masked, "f_up": up_masked, "f_dg": dg.m_grouped_fp8_gemm_nt_masked},
                      "f_up(a, b, d, mm, em)", "f_dg(a, b, d, mm, em)",
                      upstream=getattr(up, "m_grouped_fp8_gemm_nt_masked", None)))
    bmasked = {"a": _bf16(4, 64, 512), "b": _bf16(4, 1024, 512), "d": _bf16(4, 64, 1024), "mm": _i32(4, fill=16),
               "em": 16}
    cases.append(Case("m_grouped_bf16_gemm_nt_masked", "m_grouped_bf16_gemm_nt_masked", "call", GEMM_GOAL_NS,
                      {**bmasked, "f_up": up.m_grouped_bf16_gemm_nt_masked,
                       "f_dg": dg.m_grouped_bf16_gemm_nt_masked},
                      "f_up(a, b, d, mm, em)", "f_dg(a, b, d, mm, em)", upstream=up.m_grouped_bf16_gemm_nt_masked))

    # --- the indexer ---------------------------------------------------------------------------
    paged_name = "fp8_paged_mqa_logits" if hasattr(up, "fp8_paged_mqa_logits") else "fp8_fp4_paged_mqa_logits"
    up_paged = getattr(up, paged_name)

    # Lengths in the form the release launches next_n=2 with as given: (B, 2), or (B,) on the bundled
    # copies, whose kernels assert 1-D lengths (there dgcompat launches (B, 2) lengths split, as the
    # fallback rows below time).
    lens_dims = "1d" if dg.capabilities().paged_context_lens == "1d" else "2d"
    meta_env = {"lens": _paged_inputs(2, lens_dims)["lens"], "f_up": up.get_paged_mqa_logits_metadata,
                "f_dg": dg.get_paged_mqa_logits_metadata}
    cases.append(Case("get_paged_mqa_logits_metadata", "get_paged_mqa_logits_metadata", "batch", None, meta_env,
                      "f_up(lens, 64, 132)", "f_dg(lens, 64, 132)", upstream=up.get_paged_mqa_logits_metadata,
                      note=f"{'(B,)' if lens_dims == '1d' else '(B, 2)'} lengths; dgcompat also records what the "
                      "schedule belongs to",
                      state={"_SCHEDULE": _i32(132 + 1, 2)}))
    cases.append(Case("get_num_sms", "get_num_sms", "batch", None, {"f_up": up.get_num_sms, "f_dg": dg.get_num_sms},
                      "f_up()", "f_dg()", upstream=up.get_num_sms))

    # Native launch: q (B, 2, H, D) and the release's own lengths form on SM90 go to the kernel as given.
    native = _paged_inputs(2, lens_dims)
    native_state = {"_SCHEDULE": _i32(132 + 1, 2), "_LOGITS": _f32(2 * _B, _MAX_LEN)}
    setattr(up, "_SCHEDULE", native_state["_SCHEDULE"])  # noqa: B010 - a name of the stand-in module, not of its type
    sched_native = dg.get_paged_mqa_logits_metadata(native["lens"], _BKV, 132)
    penv = {**native, "s": sched_native, "f_up": up_paged, "f_dg": dg.fp8_paged_mqa_logits, "F": False,
            "f_dg_meta": dg.get_paged_mqa_logits_metadata,
            "f_up_meta": up.get_paged_mqa_logits_metadata, "f_floor": paged_floor(up_paged, native, sched_native)}
    cases.append(Case("fp8_paged_mqa_logits [native next_n=2]", "fp8_paged_mqa_logits", "call", PAGED_GOAL_NS, penv,
                      "f_up(q, kv, w, lens, bt, s, L, F)", "f_dg(q, kv, w, lens, bt, s, L)", upstream=up_paged,
                      note="same q every call", floor="f_floor(q, kv, w, lens, bt, s, L)"))
    cases.append(Case("fp8_paged_mqa_logits [native next_n=2, layers]", "fp8_paged_mqa_logits", "call",
                      PAGED_GOAL_NS, penv, "f_up(next(qs), kv, w, lens, bt, s, L, F)",
                      "f_dg(next(qs), kv, w, lens, bt, s, L)", setup="qs = _cycle(qs)", upstream=up_paged,
                      floor="f_floor(next(qs), kv, w, lens, bt, s, L)",
                      note=f"a fresh q per call ({LAYERS} layers), lens/schedule/block table shared",
                      batch_refresh="lens.fill_(1000)",
                      new_batch="s = f_dg_meta(lens, 64, 132); f_dg(q, kv, w, lens, bt, s, L)"))

    # vLLM 0.34's form of the same call: the fp8_fp4 name, q as a (q, None) pair, logits_dtype=torch.float32.
    import torch

    v34 = {**penv, "f_dg": dg.fp8_fp4_paged_mqa_logits, "f32": torch.float32}
    cases.append(Case("fp8_fp4_paged_mqa_logits [vLLM 0.34 form, native next_n=2]", "fp8_fp4_paged_mqa_logits",
                      "call", PAGED_GOAL_NS, v34, "f_up(q, kv, w, lens, bt, s, L, F)",
                      "f_dg((q, None), kv, w, lens, bt, s, L, logits_dtype=f32)", upstream=up_paged,
                      note="same q every call; the pair and the dtype read, then fp8_paged_mqa_logits' plan",
                      floor="f_floor(q, kv, w, lens, bt, s, L)"))

    # A new step: fresh lengths written into the same buffer, the schedule rebuilt, the first
    # layer's launch (dgcompat plans here: guard records, launch layout). Timed per batch.
    cases.append(Case("fp8_paged_mqa_logits [native next_n=2, new batch]", "fp8_paged_mqa_logits", "batch", None,
                      penv, "lens.fill_(1000); s2 = f_up_meta(lens, 64, 132); f_up(q, kv, w, lens, bt, s2, L, F)",
                      "lens.fill_(1000); s2 = f_dg_meta(lens, 64, 132); f_dg(q, kv, w, lens, bt, s2, L)",
                      upstream=up_paged, note="lens.fill_ + metadata + first launch of the step"))

    # Fallback: next_n = 4 is not native on SM90, so dgcompat launches one query row per token:
    # q viewed (B*4, 1, H, D), per-row lengths (B*4, 1), block table repeated per row, and its own
    # schedule for those lengths, built once per batch. The direct column is the same launch
    # written by hand with that layout precomputed (the engine still views each layer's q).
    fb = _paged_inputs(4)
    fb_state = {"_SCHEDULE": _i32(132 + 1, 2), "_LOGITS": _f32(4 * _B, _MAX_LEN)}
    setattr(up, "_SCHEDULE", fb_state["_SCHEDULE"])  # noqa: B010 - as above
    sched_fb = dg.get_paged_mqa_logits_metadata(fb["lens"], _BKV, 132)
    flat_lens = fb["lens"].reshape(-1, 1).clone()
    flat_bt = fb["bt"].repeat_interleave(4, dim=0).contiguous()
    fenv = {**fb, "s": sched_fb, "f_up": up_paged, "f_dg": dg.fp8_paged_mqa_logits, "F": False,
            "flat_lens": flat_lens, "flat_bt": flat_bt, "f_dg_meta": dg.get_paged_mqa_logits_metadata,
            "f_up_meta": up.get_paged_mqa_logits_metadata, "shp": (4 * _B, 1, _H, _D)}
    cases.append(Case("fp8_paged_mqa_logits [fallback next_n=4]", "fp8_paged_mqa_logits", "call", PAGED_GOAL_NS,
                      fenv, "f_up(q.view(shp), kv, w, flat_lens, flat_bt, s, L, F)",
                      "f_dg(q, kv, w, lens, bt, s, L)", upstream=up_paged,
                      note="split layout: q viewed (B*4, 1, H, D); same q every call"))
    cases.append(Case("fp8_paged_mqa_logits [fallback next_n=4, layers]", "fp8_paged_mqa_logits", "call",
                      PAGED_GOAL_NS, fenv, "f_up(next(qs).view(shp), kv, w, flat_lens, flat_bt, s, L, F)",
                      "f_dg(next(qs), kv, w, lens, bt, s, L)", setup="qs = _cycle(qs)", upstream=up_paged,
                      note=f"split layout, a fresh q per call ({LAYERS} layers)",
                      batch_refresh="lens.fill_(1000)",
                      new_batch="s = f_dg_meta(lens, 64, 132); f_dg(q, kv, w, lens, bt, s, L)"))
    cases.append(Case("fp8_paged_mqa_logits [fallback next_n=4, new batch]", "fp8_paged_mqa_logits", "batch",
                      None, fenv,
                      "lens.fill_(1000); s2 = f_up_meta(flat_lens, 64, 132); "
                      "f_up(q.view(shp), kv, w, flat_lens, flat_bt, s2, L, F)",
                      "lens.fill_(1000); s2 = f_dg_meta(lens, 64, 132); f_dg(q, kv, w, lens, bt, s2, L)",
                      upstream=up_paged, note="dgcompat builds the split layout and its schedule here; the direct "
                      "column reuses a precomputed layout (an engine builds its own)"))
    for case in cases:
        if case.function in ("fp8_paged_mqa_logits", "fp8_fp4_paged_mqa_logits"):
            case.state = native_state if case.env in (penv, v34) else fb_state
    return cases


def cycle(items: list[Any]) -> Any:
    """``itertools.cycle`` (named here so timed statements see one global for it)."""
    return itertools.cycle(items)
