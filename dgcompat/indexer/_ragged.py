"""MQA logits over ragged keys (the indexer's prefill): :func:`fp8_mqa_logits`, its binders and emulations."""

from __future__ import annotations

from typing import TYPE_CHECKING
from typing import Any
from typing import Callable

from .. import _binding
from .. import _pysurface
from .._backend import load
from .._calls import UpstreamCall
from .._checks import FP8_DTYPE_NAMES
from .._checks import as_torch
from .._checks import bad
from .._checks import release_label
from .._checks import spelled
from .._checks import tensor
from .._checks import translate
from ..errors import UnsupportedFeatureError
from ..table import capabilities
from . import _sm100
from ._args import check_logits_dtype
from ._args import check_q_scales
from ._args import check_weights
from ._args import weights_plan
from ._positions import ragged_positions

if TYPE_CHECKING:
    import torch

__all__ = ["fp8_mqa_logits", "fp8_fp4_mqa_logits", "CALLS", "B"]


def bind_mqa() -> Callable[..., Any]:
    """The upstream call as ``f(q, q_sf, kv, w, ks, ke, clean, max_k, dtype)`` returning logits of ``dtype``
    (None: float32).

    FP8 queries without scales (``q_sf`` None) go to the function the table selects (``mqa_logits``), with
    clean_logits emulated where the release cannot take it together with the compressed layout (or at all);
    scaled queries (MX FP8, FP4: ``q_sf`` int32), and logits in another dtype where the build computes them
    (``mqa_logits_dtype``), go to its ``fp8_fp4_mqa_logits`` with q as a pair and ``logits_dtype`` by keyword.
    The uncompressed layout is emulated where the release has only the compressed one (``mqa_uncompressed ==
    "emulated"``); logits the kernel returns in another dtype than asked are converted on the device.
    """
    mod = load()
    caps = capabilities()
    fn = "fp8_mqa_logits"
    name = caps.mqa_logits
    target = getattr(mod, name) if name else None
    if target is None:
        raise UnsupportedFeatureError(fn, "MQA logits", release_label())
    scaled_target = getattr(mod, "fp8_fp4_mqa_logits", None)
    takes_dtype = caps.mqa_logits_dtype is not None
    # The fp8_fp4 function's own layout (it may differ from the legacy function's: the reference backend and
    # vLLM 0.34.0's 2.8.1 put max_seqlen_k where sgl-deep-gemm's puts clean_logits): passed by keyword.
    scaled_clean = scaled_target is not None and "clean_logits" in (_pysurface.live_parameters(scaled_target) or ())
    native_clean = caps.mqa_clean_logits == "native"
    seqlen = caps.mqa_max_seqlen_k
    as_tensor = caps.raw_ffi_returns
    heads = caps.paged_heads
    pair = caps.mqa_q_form == "pair"  # 2.8.1 indexes q[0], q[1] unchecked: never pass a bare q
    # SM100 MX/bf16 contract of 0.2.5 / 2.8.x for FP8 q without scales: dgcompat.indexer._sm100
    adapt = (_sm100.ragged_mqa(fn, target, lambda q, w: pad_heads(fn, q, None, w, heads)[::2], str(caps.arch),
                               caps.indexer_weights, takes_dtype)
             if caps.indexer_inputs.startswith("mx") else None)
    import torch

    float32 = torch.float32

    def plain(q: Any, kv: Any, w: Any, ks: Any, ke: Any, clean: bool, max_k: int | None) -> Any:
        q, _, w = pad_heads(fn, q, None, w, heads)
        compressed = bool(max_k)
        if seqlen == "absent":
            if compressed:
                raise UnsupportedFeatureError(fn, "max_seqlen_k", release_label())
            out = target(q, kv, w, ks, ke, clean)
            return as_torch(out) if as_tensor else out
        # Every release asserts clean_logits=False with max_seqlen_k > 0: mask that case here.
        masked_here = clean and (compressed or not native_clean)
        if native_clean:
            out = target(q, kv, w, ks, ke, clean and not compressed, max_k or 0)
        else:
            out = target((q, None) if pair else q, kv, w, ks, ke, max_k or 0)
        if as_tensor or masked_here:
            out = as_torch(out)
        if masked_here:
            mask_ragged(out, ks, ke, compressed=compressed)
        return out

    def scaled(q: Any, q_sf: Any, kv: Any, w: Any, ks: Any, ke: Any, clean: bool, max_k: int | None,
               dtype: Any) -> Any:
        if scaled_target is None:
            raise UnsupportedFeatureError("fp8_fp4_mqa_logits", "fp8_fp4_mqa_logits", release_label())
        q, q_sf, w = pad_heads(fn, q, q_sf, w, heads)
        compressed = bool(max_k)
        if scaled_clean:  # sgl-deep-gemm <= 0.2.3.post2: (..., clean_logits, max_seqlen_k, logits_dtype)
            if dtype is not None and takes_dtype:
                out = scaled_target((q, q_sf), kv, w, ks, ke, clean_logits=clean and not compressed,
                                    max_seqlen_k=max_k or 0, logits_dtype=dtype)
            else:
                out = scaled_target((q, q_sf), kv, w, ks, ke, clean_logits=clean and not compressed,
                                    max_seqlen_k=max_k or 0)
        elif dtype is not None and takes_dtype:  # (..., max_seqlen_k, logits_dtype, schedule_meta)
            out = scaled_target((q, q_sf), kv, w, ks, ke, max_seqlen_k=max_k or 0, logits_dtype=dtype)
        else:  # (..., max_seqlen_k, schedule_meta)
            out = scaled_target((q, q_sf), kv, w, ks, ke, max_seqlen_k=max_k or 0)
        out = as_torch(out)
        if clean and (compressed or not scaled_clean):
            mask_ragged(out, ks, ke, compressed=compressed)
        return out

    def impl(q: Any, q_sf: Any, kv: Any, w: Any, ks: Any, ke: Any, clean: bool, max_k: int | None,
             dtype: Any) -> Any:
        if q_sf is None and dtype is None and w.dtype is float32:
            return adapt(q, kv, w, ks, ke, clean, max_k) if adapt is not None else plain(q, kv, w, ks, ke, clean, max_k)
        upcast, kernel_dtype = weights_plan(fn, w, dtype)
        if upcast or (q_sf is None and adapt is None and kernel_dtype is not None and not takes_dtype
                      and w.dtype is not float32):
            # bf16 weights where the build takes only float32 ones, or where no function it has would reduce them
            # in bf16: float32 weights (exact)
            w = w.float()
        if q_sf is None and adapt is not None:
            out = adapt(q, kv, w, ks, ke, clean, max_k)
        elif q_sf is None and (kernel_dtype is None or not takes_dtype):
            out = plain(q, kv, w, ks, ke, clean, max_k)
        else:
            out = scaled(q, q_sf, kv, w, ks, ke, clean, max_k, kernel_dtype)
        want = float32 if dtype is None else dtype
        return out if out.dtype is want else out.to(want)
    return spreading(impl) if caps.mqa_uncompressed == "emulated" else impl


def spreading(launch: Callable[..., Any]) -> Callable[..., Any]:
    """``launch`` for a release that has only the compressed layout (``mqa_uncompressed == "emulated"``):
    compressed calls go straight through; an uncompressed one is launched compressed with
    ``max_seqlen_k = Nk`` and spread out by :func:`spread_ragged`."""
    def impl(q: Any, q_sf: Any, kv: Any, w: Any, ks: Any, ke: Any, clean: bool, max_k: int | None,
             dtype: Any) -> Any:
        if max_k:
            return launch(q, q_sf, kv, w, ks, ke, clean, max_k, dtype)
        nk = int(kv[0].shape[0])
        if nk == 0:
            return no_keys(q, q_sf, kv, w, ks, ke, dtype)
        # Nk bounds every ke[i] - ks[i] of keys within [0, Nk) without reading ks/ke on the host.
        return spread_ragged(launch(q, q_sf, kv, w, ks, ke, False, nk, dtype), ks, ke, clean)
    return impl


#: Elements of the int64 index built per chunk of rows by :func:`spread_ragged` (bounds its temporaries).
SPREAD_ELEMENTS = 1 << 24


def spread_ragged(comp: Any, ks: Any, ke: Any, clean: bool) -> Any:
    """The uncompressed ``(Nq, Nk)`` logits from compressed ones ``comp (Nq, Nk)``: column ``c`` of row
    ``i`` is ``comp[i, c - ks[i]]`` for ``ks[i] <= c < ke[i]``; ``-inf`` elsewhere with ``clean``
    (unspecified otherwise, like the native layout). On the device, in stream order, no host sync
    (capturable). Rows are 8-element aligned, like the native layout's."""
    import torch

    nq, nk = int(comp.shape[0]), int(comp.shape[1])
    out = torch.empty((nq, -(-nk // 8) * 8), dtype=comp.dtype, device=comp.device)[:, :nk]
    cols = torch.arange(nk, device=comp.device)
    step = max(1, SPREAD_ELEMENTS // max(nk, 1))
    for lo in range(0, nq, step):
        hi = min(nq, lo + step)
        start = ks[lo:hi].unsqueeze(1).long()
        idx = cols - start  # the compressed column holding key c
        invalid = ((idx < 0) | (idx >= ke[lo:hi].unsqueeze(1).long() - start)) if clean else None
        idx.clamp_(0, nk - 1)
        torch.gather(comp[lo:hi], 1, idx, out=out[lo:hi])
        if invalid is not None:
            out[lo:hi].masked_fill_(invalid, float("-inf"))
    return out


def no_keys(q: Any, q_sf: Any, kv: Any, w: Any, ks: Any, ke: Any, dtype: Any) -> Any:
    """The ``(Nq, 0)`` result of a call without keys (the compressed launch would need max_seqlen_k > 0)."""
    import torch

    diagnose_mqa(q, q_sf, kv, w, ks, ke, None, dtype)
    return torch.empty((int(q.shape[0]), 0), dtype=torch.float32 if dtype is None else dtype, device=q.device)


def pad_heads(fn: str, q: Any, q_sf: Any, w: Any, heads: tuple[int, ...]) -> tuple[Any, Any, Any]:
    """Zero-pad heads up to a count the kernels are built for (zero q rows and weights add nothing); ``q_sf``
    (None or ``(Nq, H)`` scales) is padded with them."""
    if not heads or q.dim() != 3 or q.shape[1] in heads:
        return q, q_sf, w
    nq, h = q.shape[0], q.shape[1]
    if w.dim() != 2 or tuple(w.shape) != (nq, h):
        # Padding would broadcast a (Nq, 1) weights tensor over every head: refuse it like the kernel.
        raise bad(fn, "weights", f"shape (Nq, H) = ({nq}, {h})", w)
    bigger = [n for n in heads if n > h]
    if not bigger:
        raise bad(fn, "q", f"a head count in {heads} (or fewer, padded)", q)
    import torch

    target = min(bigger)
    qp = torch.zeros((nq, target, q.shape[2]), dtype=q.dtype, device=q.device)
    qp[:, :h].copy_(q)
    wp = torch.zeros((nq, target), dtype=w.dtype, device=w.device)
    wp[:, :h].copy_(w)
    sfp = None
    if q_sf is not None:
        sfp = torch.zeros((nq, target), dtype=q_sf.dtype, device=q_sf.device)
        sfp[:, :h].copy_(q_sf)
    return qp, sfp, wp


def mask_ragged(out: Any, ks: Any, ke: Any, *, compressed: bool) -> None:
    import torch

    cols = torch.arange(out.shape[1], device=out.device)
    if compressed:
        invalid = cols.unsqueeze(0) >= (ke - ks).unsqueeze(1)
    else:
        invalid = (cols.unsqueeze(0) < ks.unsqueeze(1)) | (cols.unsqueeze(0) >= ke.unsqueeze(1))
    out.masked_fill_(invalid, float("-inf"))


def check_max_seqlen_k(fn: str, max_seqlen_k: Any) -> None:
    if max_seqlen_k is not None and (isinstance(max_seqlen_k, bool) or not isinstance(max_seqlen_k, int)
                                     or max_seqlen_k < 0):
        raise bad(fn, "max_seqlen_k", "None or a non-negative int", max_seqlen_k)


def diagnose_mqa(q: Any, q_sf: Any, kv: Any, weights: Any, ks: Any, ke: Any, max_seqlen_k: Any, dtype: Any) -> None:
    """Every argument check of a ragged call (on its failure path, and up front for scaled queries)."""
    fn = "fp8_mqa_logits" if q_sf is None else "fp8_fp4_mqa_logits"
    check_logits_dtype(fn, dtype)
    key_dtypes: tuple[str, ...]
    if q_sf is None:
        tensor(fn, "q", q, dims=(3,), dtypes=FP8_DTYPE_NAMES, what="an FP8 (Nq, H, D) tensor")
        key_dtypes, key_what, scale_dtype = FP8_DTYPE_NAMES, "an FP8 (Nk, D) tensor", "float32"
    else:
        form = check_q_scales(fn, q, q_sf)
        tensor(fn, "q", q, dims=(3,), what="an (Nq, H, D) tensor (D/2 bytes for FP4)")
        key_dtypes = ("int8",) if form == "fp4" else FP8_DTYPE_NAMES
        key_what = "packed FP4 (Nk, D/2) int8 keys" if form == "fp4" else "MX FP8 (Nk, D) keys"
        scale_dtype = "int32"
    if not isinstance(kv, (tuple, list)) or len(kv) != 2:
        raise bad(fn, "kv", f"a (keys (Nk, D), {scale_dtype} scales (Nk,)) pair", kv)
    k, k_sf = kv
    tensor(fn, "kv[0]", k, dims=(2,), dtypes=key_dtypes, what=key_what)
    tensor(fn, "kv[1]", k_sf, dims=(1,), dtypes=(scale_dtype,), what=f"a {scale_dtype} (Nk,) scale")
    nq, h, d = q.shape
    if k.shape[1] != d:
        raise bad(fn, "kv[0]", f"(Nk, {d}) like q", k)
    if k_sf.shape[0] != k.shape[0]:
        raise bad(fn, "kv[1]", f"one scale per key: ({k.shape[0]},)", k_sf)
    check_weights(fn, weights)
    if tuple(weights.shape) != (nq, h):
        raise bad(fn, "weights", f"shape (Nq, H) = ({nq}, {h})", weights)
    for name, t in (("ks", ks), ("ke", ke)):
        tensor(fn, name, t, dims=(1,), dtypes=("int32",))
        if t.shape[0] != nq:
            raise bad(fn, name, f"one int32 bound per query: shape ({nq},)", t)
    for name, t in (("kv[0]", k), ("kv[1]", k_sf), ("weights", weights), ("ks", ks), ("ke", ke)):
        if t.device != q.device:
            raise bad(fn, name, f"on {q.device} like q", t)
    # The kernels read these densely (host asserts is_contiguous() on q, the keys, their scales and the
    # bounds, weights.stride(1) == 1).
    for name, t in (("q", q), ("kv[0]", k), ("kv[1]", k_sf), ("ks", ks), ("ke", ke)):
        if not t.is_contiguous():
            raise bad(fn, name, "a contiguous tensor (the kernels assert it)", t, hint=f"pass {name}.contiguous()")
    if weights.stride(1) != 1 and weights.shape[1] != 1:
        raise bad(fn, "weights", "rows with stride(1) == 1", weights, hint="pass weights.contiguous()")
    check_max_seqlen_k(fn, max_seqlen_k)


def fp8_mqa_logits(q: torch.Tensor, kv: tuple[torch.Tensor, torch.Tensor], weights: torch.Tensor,
                   ks: torch.Tensor | None = None, ke: torch.Tensor | None = None, clean_logits: bool = False,
                   max_seqlen_k: int | None = None, logits_dtype: torch.dtype | None = None, *,
                   cu_seq_len_k_start: torch.Tensor | None = None,
                   cu_seq_len_k_end: torch.Tensor | None = None) -> torch.Tensor:
    """Indexer logits over ragged keys: ``out[i, j] = sum_h weights[i, h] * relu(q[i, h] . k[j] * k_scale[j])``.

    - ``q``: float8_e4m3fn ``(Nq, H, D)``; ``kv``: ``(k float8_e4m3fn (Nk, D), k_scale float32 (Nk,))``;
      ``weights``: float32 ``(Nq, H)`` (or bfloat16: see ``logits_dtype``); ``ks``/``ke``: int32 ``(Nq,)``, query
      ``i`` sees keys ``[ks[i], ke[i])`` with ``0 <= ks[i]`` and ``ke[i] <= Nk`` (required; ``cu_seq_len_k_start`` /
      ``cu_seq_len_k_end``, their names in the bundled copies and ``fp8_fp4_mqa_logits``, are the same
      parameters). The parameters sit in the releases' positions (``clean_logits`` sixth, ``max_seqlen_k``
      seventh).
    - Returns ``(Nq, Nk)`` logits of ``logits_dtype`` (or ``(Nq, max_seqlen_k)`` compressed, column ``j`` = key
      ``ks[i] + j``, when ``max_seqlen_k`` is given). Entries outside a query's range are ``-inf`` with
      ``clean_logits=True`` (emulated where the release cannot do it, e.g. together with ``max_seqlen_k``),
      unspecified otherwise.
    - ``max_seqlen_k``: None or an int >= 0 (0 = uncompressed); the sglang-kernel copies have no
      compressed layout (:class:`~dgcompat.errors.UnsupportedFeatureError`). Releases with only the
      compressed layout (sgl-deep-gemm 0.2.5, upstream 2.8) get the uncompressed one emulated, without a
      host sync (capability ``mqa_uncompressed``).
    - ``logits_dtype``: None / ``torch.float32`` (float32 logits) or ``torch.bfloat16``: computed by the build
      where its ``fp8_fp4_mqa_logits`` takes ``logits_dtype`` (capability ``mqa_logits_dtype``), converted from
      float32 elsewhere. bfloat16 weights reduce in bf16 where the build takes them and are upcast to float32
      (exactly) where it takes only float32 (capability ``indexer_weights``).
    - Head counts the kernels are not built for are zero-padded internally.
    """
    if ks is None or ke is None or cu_seq_len_k_start is not None or cu_seq_len_k_end is not None:
        ks, ke = key_ranges(ks, ke, cu_seq_len_k_start, cu_seq_len_k_end)
    if max_seqlen_k is not None:
        check_max_seqlen_k("fp8_mqa_logits", max_seqlen_k)
    if logits_dtype is not None:
        check_logits_dtype("fp8_mqa_logits", logits_dtype)
    try:
        return B.mqa(q, None, kv, weights, ks, ke, clean_logits, max_seqlen_k, logits_dtype)
    except Exception as exc:
        translate("fp8_mqa_logits", exc, diagnose_mqa, q, None, kv, weights, ks, ke, max_seqlen_k, logits_dtype)


def fp8_fp4_mqa_logits(q: torch.Tensor | tuple[torch.Tensor, torch.Tensor | None],
                       kv: tuple[torch.Tensor, torch.Tensor], weights: torch.Tensor,
                       cu_seq_len_k_start: torch.Tensor, cu_seq_len_k_end: torch.Tensor,
                       clean_logits: bool | int | None = False,
                       max_seqlen_k: int | torch.dtype | torch.Tensor | None = None,
                       logits_dtype: torch.dtype | torch.Tensor | None = None,
                       schedule_meta: torch.Tensor | None = None) -> torch.Tensor:
    """Indexer logits over ragged FP8 or FP4 keys: :func:`fp8_mqa_logits` with upstream's ``fp8_fp4`` spelling, in
    every build's argument layout.

    - ``q``: the pair ``(values, scales)``, or ``values`` alone (= ``(values, None)``): float8_e4m3fn
      ``(Nq, H, D)`` with ``scales`` None (FP8); with int32 ``(Nq, H)`` scales, four packed UE8M0 exponents per
      128 values (MX FP8); or int8 ``(Nq, H, D/2)`` packed FP4 e2m1 values with such scales (FP4). Scaled forms
      are computed where the build computes them on the architecture (capability ``indexer_q_formats``: SM100
      builds, the reference backend), refused with an :class:`~dgcompat.errors.UnsupportedFeatureError` naming
      the architecture elsewhere (SM90).
    - ``kv``: ``(keys, scales)``: FP8 ``(Nk, D)`` with float32 ``(Nk,)`` scales for FP8 queries; MX FP8 ``(Nk, D)``
      or packed FP4 int8 ``(Nk, D/2)`` keys with int32 ``(Nk,)`` UE8M0 scales for scaled queries.
    - ``weights``, ``cu_seq_len_k_start`` / ``cu_seq_len_k_end`` (``ks`` / ``ke``), ``clean_logits``,
      ``max_seqlen_k``, ``logits_dtype``: as :func:`fp8_mqa_logits`.
    - The arguments after ``cu_seq_len_k_end`` are read by their types, since the builds put different parameters
      there: at position 5 a ``bool`` is ``clean_logits`` (sgl-deep-gemm <= 0.2.3.post2; SGLang 0.5.23 passes
      ``False``) and an ``int`` is ``max_seqlen_k`` (sgl-deep-gemm 0.2.5 and DeepGEMM 2.8.1, as vLLM calls it);
      after such an int, a ``torch.dtype`` is ``logits_dtype`` (vLLM 0.34.0's 2.8.1) and a tensor is
      ``schedule_meta`` (0.2.5 / vLLM 0.33.0's 2.8.1). See :mod:`dgcompat.indexer._positions`.
    - ``schedule_meta``: None or the int32 schedule of ``get_mqa_logits_metadata``; accepted and not passed on
      (the kernel then builds the one that belongs to this launch).
    - Returns a torch tensor ``(Nq, Nk)`` or ``(Nq, max_seqlen_k)`` of ``logits_dtype``.
    """
    fn = "fp8_fp4_mqa_logits"
    values, q_sf = q if isinstance(q, (tuple, list)) and len(q) == 2 else (q, None)
    clean, max_k, dtype, schedule = ragged_positions(clean_logits, max_seqlen_k, logits_dtype, schedule_meta)
    if schedule is not None:
        tensor(fn, "schedule_meta", schedule, dtypes=("int32",), what="None or the int32 MQA-logits schedule")
    ks, ke = cu_seq_len_k_start, cu_seq_len_k_end
    if max_k is not None:
        check_max_seqlen_k(fn, max_k)
    if q_sf is not None or dtype is not None:
        # Scaled queries are checked before the launch: the native checks differ per architecture.
        diagnose_mqa(values, q_sf, kv, weights, ks, ke, max_k, dtype)
    try:
        return B.mqa(values, q_sf, kv, weights, ks, ke, clean, max_k, dtype)
    except Exception as exc:
        translate(fn, exc, diagnose_mqa, values, q_sf, kv, weights, ks, ke, max_k, dtype)


def key_ranges(ks: Any, ke: Any, start: Any, end: Any) -> tuple[Any, Any]:
    """``(ks, ke)`` given under their names or as ``cu_seq_len_k_start`` / ``cu_seq_len_k_end``; both required."""
    fn = "fp8_mqa_logits"
    ks = spelled(fn, "ks", ks, "cu_seq_len_k_start", start)
    ke = spelled(fn, "ke", ke, "cu_seq_len_k_end", end)
    for name, value in (("ks", ks), ("ke", ke)):
        if value is None:
            raise bad(fn, name, "an int32 (Nq,) tensor of key bounds", "nothing")
    return ks, ke


#: The bound upstream calls of the ragged path.
B = _binding.Slots(mqa=bind_mqa)


_MQA_ROW_POSITIONAL: tuple[tuple[str, str, tuple[Any, ...]], ...] = (
    # bind_mqa: (.., clean) without max_seqlen_k, (.., clean, max_k) natively, (.., max_k) emulated.
    ("clean_logits", "mqa_clean_logits", ("native",)),
    ("max_seqlen_k", "mqa_max_seqlen_k", ("required", "positive", "optional")),
)
_MQA_POSITIONAL = ("q", "kv", "weights", "ks|cu_seq_len_k_start", "ke|cu_seq_len_k_end")


#: The upstream calls of the ragged path (see :mod:`dgcompat._calls`).
CALLS: tuple[UpstreamCall, ...] = (
    UpstreamCall("deep_gemm.fp8_mqa_logits", "dgcompat.fp8_mqa_logits", _MQA_POSITIONAL,
                 row_positional=_MQA_ROW_POSITIONAL, uses_result=True, selected_by=("mqa_logits", "fp8_mqa_logits")),
    UpstreamCall("deep_gemm.fp8_fp4_mqa_logits", "dgcompat.fp8_mqa_logits", _MQA_POSITIONAL,
                 row_positional=_MQA_ROW_POSITIONAL, uses_result=True,
                 selected_by=("mqa_logits", "fp8_fp4_mqa_logits")),
    # Scaled (MX / FP4) queries, and logits in another dtype where the build computes them: the fp8_fp4 name with
    # (q, q_sf) and logits_dtype by keyword (the builds put it at 7 or at 6). dgcompat.fp8_fp4_mqa_logits calls
    # through this adapter.
    UpstreamCall("deep_gemm.fp8_fp4_mqa_logits", "dgcompat.fp8_mqa_logits", _MQA_POSITIONAL,
                 uses_result=True, forwarded=("clean_logits", "max_seqlen_k", "logits_dtype"),
                 selected_by=("mqa_logits_dtype", "fp8_fp4_mqa_logits")),
    # Scaled queries on the SM100 builds without logits_dtype (sgl-deep-gemm 0.2.5, vLLM 0.33.0's 2.8.1).
    UpstreamCall("deep_gemm.fp8_fp4_mqa_logits", "dgcompat.fp8_mqa_logits", _MQA_POSITIONAL,
                 uses_result=True, optional=True, forwarded=("max_seqlen_k",),
                 selected_by=("indexer_inputs", "mx-bf16")),
)
