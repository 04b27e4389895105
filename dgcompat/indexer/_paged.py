"""Paged MQA logits (decode / MTP verify): the schedule builder and the logits call, with the repeat call's fast path."""

from __future__ import annotations

from typing import TYPE_CHECKING
from typing import Any

from .. import env
from .._calls import UpstreamCall
from .._checks import bad
from .._checks import tensor
from .._checks import translate
from ..knobs import get_num_sms
from ..table import capabilities
from ._args import check_indices
from ._args import check_lens
from ._bind import native_metadata
from ._bind import no_diagnosis
from ._capture import capture_state
from ._layout import hint_key
from ._layout import launch_layout
from ._layout import lens_only
from ._layout import lens_recipe
from ._layout import make_launch_lens
from ._plan import lookup_plan
from ._positions import paged_positions
from ._schedules import register
from ._state import STATE

if TYPE_CHECKING:
    import torch

__all__ = ["get_paged_mqa_logits_metadata", "fp8_paged_mqa_logits", "fp8_fp4_paged_mqa_logits", "CALLS"]


def get_paged_mqa_logits_metadata(context_lens: torch.Tensor, block_kv: int, num_sms: int | None = None,
                                  indices: torch.Tensor | None = None, *,
                                  out: torch.Tensor | None = None) -> torch.Tensor:
    """Build the paged-MQA schedule: int32 ``(num_sms + 1, 2)``.

    - ``context_lens``: int32, contiguous, ``(B,)``, ``(B, next_n)`` or ``(B*next_n, 1)`` (see
      :func:`fp8_paged_mqa_logits`); pass the very tensor you will launch with.
    - ``block_kv``: KV tokens per cache block (64 for DeepSeek V3.2's index cache).
    - ``num_sms``: defaults to :func:`dgcompat.get_num_sms`.
    - ``out``: an existing contiguous int32 ``(num_sms + 1, 2)`` buffer to refresh in place (keeps its
      address for CUDA graphs).
    - ``indices``: int32 ``(B*next_n,)``, the sequence of each query row, for the varlen layout
      (flat ``(rows, 1)`` lengths); only where the release has it.

    The schedule is built for the launch layout dgcompat will use (see the module documentation).
    """
    fn = "get_paged_mqa_logits_metadata"
    check_lens(fn, context_lens)
    if isinstance(block_kv, bool) or not isinstance(block_kv, int) or block_kv <= 0:
        raise bad(fn, "block_kv", "a positive int", block_kv)
    if num_sms is None:
        num_sms = get_num_sms()
    elif isinstance(num_sms, bool) or not isinstance(num_sms, int) or num_sms <= 0:
        raise bad(fn, "num_sms", "None or a positive int", num_sms)
    if out is not None:
        tensor(fn, "out", out, dims=(2,), dtypes=("int32",))
        if tuple(out.shape) != (num_sms + 1, 2) or not out.is_contiguous() or out.device != context_lens.device:
            raise bad(fn, "out", f"a contiguous int32 ({num_sms + 1}, 2) buffer on {context_lens.device}", out)
    b, n, form = lens_only(context_lens)
    if indices is not None:
        if form == "rows":
            raise bad(fn, "context_lens", "(rows,) or (rows, 1) lengths with indices=", context_lens)
        check_indices(fn, indices, context_lens.shape[0], context_lens.device)
        n = 1
    if env.debug() and context_lens.numel():
        low = int(context_lens.min())
        if low < 1:
            raise bad(fn, "context_lens", "lengths >= 1 (the kernels require it)", f"a minimum of {low}")
    caps = capabilities()
    dims = caps.paged_context_lens
    per_row = STATE.hints.get(hint_key(context_lens), (n, False))[1]
    layout = launch_layout(dims, caps.paged_native_next_n, form, n, per_row, indices is not None)
    recipe = lens_recipe(layout, form, b, n, dims)
    launch_lens = make_launch_lens(context_lens, recipe)
    schedule = native_metadata(fn, launch_lens, block_kv, num_sms, indices)
    if out is not None:
        out.copy_(schedule)
        schedule = out
    register(schedule, context_lens, recipe, launch_lens, block_kv, num_sms, indices)
    return schedule


def fp8_paged_mqa_logits(q: torch.Tensor, kv_cache: torch.Tensor, weights: torch.Tensor,
                         context_lens: torch.Tensor, block_table: torch.Tensor, schedule_meta: torch.Tensor,
                         max_context_len: int, clean_logits: bool = False, indices: torch.Tensor | None = None,
                         logits_dtype: torch.dtype | None = None) -> torch.Tensor:
    """Indexer logits over a paged FP8 KV cache, for ``next_n`` query rows per sequence.

    - ``q``: float8_e4m3fn ``(B, next_n, H, D)`` or ``(N, H, D)``.
    - ``kv_cache``: uint8 ``(num_blocks, block_kv, 1, D + 4)``: per block the FP8 values of its tokens,
      then one float32 scale per token.
    - ``weights``: float32 ``(B*next_n, H)`` (bfloat16 with ``logits_dtype=torch.bfloat16``).
    - ``context_lens``: int32, contiguous: ``(B,)`` (row ``j`` sees the sequence's first
      ``ctx - next_n + j + 1`` positions), ``(B, next_n)`` (per-row lengths) or ``(B*next_n, 1)``.
    - ``block_table``: int32 ``(B, max_blocks)`` (one row per sequence) or ``(B*next_n, max_blocks)``
      (one row per query row; rows may differ); last stride 1 or a copy is made once per batch.
    - ``schedule_meta``: int32 ``(num_sms + 1, 2)``, ideally from :func:`get_paged_mqa_logits_metadata`
      on this ``context_lens``; any other schedule buffer (another slot count included) is replaced by one
      dgcompat builds from these lengths for the launch (see the module documentation).
    - ``indices``: int32 ``(rows,)`` varlen row-to-sequence map (flat layout only), where the release has it.
    - ``logits_dtype``: None or ``torch.float32`` (float32 logits), or ``torch.bfloat16``: computed by the build
      where its ``fp8_fp4_paged_mqa_logits`` takes ``logits_dtype`` (capability ``paged_logits_dtype``),
      converted from float32 elsewhere.
    - Returns ``(B*next_n, max_context_len)`` logits of ``logits_dtype`` in query-row order. Positions at or
      past a row's length are ``-inf`` with ``clean_logits=True``, unspecified otherwise. One-row results keep
      a 4-aligned row stride.

    Raises :class:`~dgcompat.errors.ScheduleMismatchError` instead of launching a schedule dgcompat built
    for these lengths that was not refreshed after they were rewritten (where ``context_lens`` is a view of
    a larger buffer, the schedule is derived from the launch lengths instead: see :mod:`dgcompat.indexer`).
    """
    p = STATE.last
    if p is not None:
        lr, lv, sr, sv, br, bv, same_meta, ml, cl, capturing, token, ix, dt, launch, plain = p
        if not (lr() is context_lens and context_lens._version == lv
                and sr() is schedule_meta and schedule_meta._version == sv
                and br() is block_table and (bv < 0 or block_table._version == bv)
                and max_context_len == ml and clean_logits is cl and logits_dtype is dt
                and (indices is None if ix is None else ix[0]() is indices and indices._version == ix[1])
                and same_meta(q, weights, kv_cache)
                and (not capturing() if token is None else capture_state(q.device) == token)):
            p = None
    try:
        if p is None:
            launch, plain = lookup_plan(q, None, kv_cache, weights, context_lens, block_table, schedule_meta,
                                        max_context_len, clean_logits, indices, logits_dtype)[-2:]
        if plain is not None:
            paged, lens, table, sched, tensor_type, from_dlpack = plain
            out = paged(q, kv_cache, weights, lens, table, sched, max_context_len)
            return out if type(out) is tensor_type else from_dlpack(out)
        return launch(q, None, kv_cache, weights, max_context_len, indices)
    except Exception as exc:
        translate("fp8_paged_mqa_logits", exc, no_diagnosis)


def fp8_fp4_paged_mqa_logits(q: torch.Tensor | tuple[torch.Tensor, torch.Tensor | None], kv_cache: torch.Tensor,
                             weights: torch.Tensor, context_lens: torch.Tensor, block_table: torch.Tensor,
                             schedule_meta: torch.Tensor, max_context_len: int,
                             clean_logits: bool | torch.dtype | torch.Tensor | None = False,
                             logits_dtype: torch.dtype | torch.Tensor | None = None,
                             indices: torch.Tensor | None = None) -> torch.Tensor:
    """Indexer logits over a paged FP8 or FP4 KV cache: :func:`fp8_paged_mqa_logits` with upstream's ``fp8_fp4``
    spelling, in every build's argument layout.

    - ``q``: the pair ``(values, scales)``, or ``values`` alone (= ``(values, None)``): float8_e4m3fn
      ``(B, next_n, H, D)`` / ``(N, H, D)`` with ``scales`` None (FP8; the per-token scale folded into the
      weights); the same with int32 ``scales`` of shape ``values.shape[:-1]``, four packed UE8M0 exponents
      per 128 values (MX FP8); or int8 ``(..., H, D/2)`` packed FP4 e2m1 values with such scales (FP4).
      Scaled forms are computed where the build computes them on the architecture (capability
      ``indexer_q_formats``: SM100 builds, the reference backend) and refused with an
      :class:`~dgcompat.errors.UnsupportedFeatureError` naming the architecture elsewhere (SM90).
    - ``kv_cache``: uint8 ``(num_blocks, block_kv, 1, bytes + 4)``: per block the values of its tokens
      (``bytes`` = D for FP8, D/2 for FP4: 68-byte tokens at D = 128), then one 4-byte scale per token
      (float32, or int32 packed UE8M0 with scaled queries).
    - ``weights``, ``context_lens``, ``block_table``, ``schedule_meta``, ``max_context_len``: as
      :func:`fp8_paged_mqa_logits` (the schedule with whatever slot count the engine built it with).
    - The argument at position 7 is read by its type, since the builds put different parameters there:
      a ``bool`` is ``clean_logits`` (sgl-deep-gemm <= 0.2.3.post2; SGLang 0.5.23 passes ``False``), a
      ``torch.dtype`` is ``logits_dtype`` (vLLM 0.34.0's DeepGEMM 2.8.1), a tensor is ``indices``
      (sgl-deep-gemm 0.2.5, vLLM 0.33.0's 2.8.1), None is the default. At position 8 a ``torch.dtype`` is
      ``logits_dtype`` and a tensor ``indices`` (vLLM 0.34.0). Keywords mean what they say; one parameter
      given twice is a :class:`~dgcompat.errors.BadArgumentError`.
    - ``logits_dtype``: None / ``torch.float32`` or ``torch.bfloat16`` (as :func:`fp8_paged_mqa_logits`).
    - Returns a torch tensor ``(B*next_n, max_context_len)`` of ``logits_dtype``.
    """
    values: Any
    q_sf: Any
    dtype: Any = logits_dtype
    if q.__class__ is tuple or q.__class__ is list:  # type: ignore[comparison-overlap]  # a list is accepted too
        values, q_sf = q
    else:
        values, q_sf = q, None
    # The common calls (a bool or nothing at 7, a dtype or nothing at 8) skip reading the layout.
    if clean_logits.__class__ is not bool or (logits_dtype is not None and logits_dtype.__class__ is not STATE.dtype_type):
        clean_logits, dtype, indices = paged_positions(clean_logits, logits_dtype, indices)
    if q_sf is None:
        # fp8_paged_mqa_logits' repeat-call check, written out here rather than called: vLLM makes this call on
        # every layer of every step, and the extra frame of ten arguments cost about 300 ns there (python -m bench).
        p = STATE.last
        if p is not None:
            lr, lv, sr, sv, br, bv, same_meta, ml, cl, capturing, token, ix, dt, launch, plain = p
            if (lr() is context_lens and context_lens._version == lv
                    and sr() is schedule_meta and schedule_meta._version == sv
                    and br() is block_table and (bv < 0 or block_table._version == bv)
                    and max_context_len == ml and clean_logits is cl and dtype is dt
                    and (indices is None if ix is None else ix[0]() is indices and indices._version == ix[1])
                    and same_meta(values, weights, kv_cache)
                    and (not capturing() if token is None else capture_state(values.device) == token)):
                try:
                    if plain is not None:
                        paged, lens, table, sched, tensor_type, from_dlpack = plain
                        out = paged(values, kv_cache, weights, lens, table, sched, max_context_len)
                        return out if type(out) is tensor_type else from_dlpack(out)
                    return launch(values, None, kv_cache, weights, max_context_len, indices)
                except Exception as exc:
                    translate("fp8_fp4_paged_mqa_logits", exc, no_diagnosis)
        return fp8_paged_mqa_logits(values, kv_cache, weights, context_lens, block_table, schedule_meta,
                                    max_context_len, clean_logits, indices, dtype)
    try:
        launch = lookup_plan(values, q_sf, kv_cache, weights, context_lens, block_table, schedule_meta,
                             max_context_len, clean_logits, indices, dtype)[-2]
        assert launch is not None  # scaled queries never take the plain launch
        return launch(values, q_sf, kv_cache, weights, max_context_len, indices)
    except Exception as exc:
        translate("fp8_fp4_paged_mqa_logits", exc, no_diagnosis)


_PAGED_POSITIONAL = ("q", "kv_cache|fused_kv_cache", "weights", "context_lens", "block_table", "schedule_meta",
                     "max_context_len")

#: The upstream calls of the paged path (see :mod:`dgcompat._calls`).
CALLS: tuple[UpstreamCall, ...] = (
    # The fp8 name gets clean_logits=False at #7 only where it has no default (dgcompat masks itself);
    # the fp8_fp4 name gets a (q, None) pair.
    UpstreamCall("deep_gemm.fp8_paged_mqa_logits", "dgcompat.fp8_paged_mqa_logits", _PAGED_POSITIONAL,
                 row_positional=(("clean_logits", "paged_clean_logits_arg", ("required",)),),
                 uses_result=True, selected_by=("paged_mqa_logits", "fp8_paged_mqa_logits")),
    UpstreamCall("deep_gemm.fp8_fp4_paged_mqa_logits", "dgcompat.fp8_paged_mqa_logits", _PAGED_POSITIONAL,
                 uses_result=True, selected_by=("paged_mqa_logits", "fp8_fp4_paged_mqa_logits")),
    # Scaled (MX / FP4) queries, and logits in another dtype where the build computes them: the fp8_fp4 name with
    # (q, q_sf), logits_dtype and indices by keyword (the builds put them in different positions).
    # dgcompat.fp8_fp4_paged_mqa_logits calls through this adapter.
    UpstreamCall("deep_gemm.fp8_fp4_paged_mqa_logits", "dgcompat.fp8_paged_mqa_logits", _PAGED_POSITIONAL,
                 uses_result=True, forwarded=("logits_dtype", "indices"),
                 selected_by=("paged_logits_dtype", "fp8_fp4_paged_mqa_logits")),
    # Scaled queries on the SM100 builds without logits_dtype (sgl-deep-gemm 0.2.5, vLLM 0.33.0's 2.8.1).
    UpstreamCall("deep_gemm.fp8_fp4_paged_mqa_logits", "dgcompat.fp8_paged_mqa_logits", _PAGED_POSITIONAL,
                 uses_result=True, forwarded=("indices",), optional=True, selected_by=("indexer_inputs", "mx-bf16")),
    # The SM count the launch's schedule must have (read when a call is planned, not on the repeat call).
    UpstreamCall("deep_gemm.get_num_sms", "dgcompat.fp8_paged_mqa_logits", uses_result=True),
    UpstreamCall("deep_gemm.get_paged_mqa_logits_metadata", "dgcompat.get_paged_mqa_logits_metadata",
                 ("context_lens", "block_kv", "num_sms"), uses_result=True),
    # indices= (varlen) by keyword, only when the caller passes it and the release has it. The paged
    # logits call passes it the same way (to whichever name paged_mqa_logits selects); the paged_indices
    # row's surface claim checks both functions for the parameter.
    UpstreamCall("deep_gemm.get_paged_mqa_logits_metadata", "dgcompat.get_paged_mqa_logits_metadata",
                 ("context_lens", "block_kv", "num_sms"), ("indices",), uses_result=True,
                 selected_by=("paged_indices", True)),
)
