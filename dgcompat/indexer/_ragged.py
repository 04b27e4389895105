"""MQA logits over ragged keys (the indexer's prefill): :func:`fp8_mqa_logits`, its binders and emulations."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from .. import _binding
from .._backend import load
from .._calls import UpstreamCall
from .._checks import FP8_DTYPE_NAMES, as_torch, bad, release_label, spelled, tensor, translate
from ..errors import UnsupportedFeatureError
from ..table import capabilities
from . import _sm100

if TYPE_CHECKING:
    import torch

__all__ = ["fp8_mqa_logits", "is_float32", "CALLS", "B"]


def bind_mqa() -> Callable[..., Any]:
    """The upstream call as ``f(q, kv, w, ks, ke, clean, max_k)``; clean_logits is emulated where the
    release cannot take it together with the compressed layout (or at all), and the uncompressed
    layout where the release has only the compressed one (``mqa_uncompressed == "emulated"``)."""
    mod = load()
    caps = capabilities()
    fn = "fp8_mqa_logits"
    name = caps.mqa_logits
    target = getattr(mod, name) if name else None
    if target is None:
        raise UnsupportedFeatureError(fn, "MQA logits", release_label())
    native_clean = caps.mqa_clean_logits == "native"
    seqlen = caps.mqa_max_seqlen_k
    as_tensor = caps.raw_ffi_returns
    heads = caps.paged_heads
    pair = caps.mqa_q_form == "pair"  # 2.8.1 indexes q[0], q[1] unchecked: never pass a bare q
    if caps.indexer_inputs == "mx-bf16":  # SM100 MX/bf16 contract of 0.2.5 / 2.8.x: dgcompat.indexer._sm100
        mx = _sm100.ragged_mqa(fn, target, lambda q, w: pad_heads(fn, q, w, heads), str(caps.arch))
        return spreading(mx, ("float32", "bfloat16")) if caps.mqa_uncompressed == "emulated" else mx

    def impl(q: Any, kv: Any, w: Any, ks: Any, ke: Any, clean: bool, max_k: int | None) -> Any:
        q, w = pad_heads(fn, q, w, heads)
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
    return spreading(impl, ("float32",)) if caps.mqa_uncompressed == "emulated" else impl


def spreading(launch: Callable[..., Any], weights_dtypes: tuple[str, ...]) -> Callable[..., Any]:
    """``launch`` for a release that has only the compressed layout (``mqa_uncompressed == "emulated"``):
    compressed calls go straight through; an uncompressed one is launched compressed with
    ``max_seqlen_k = Nk`` and spread out by :func:`spread_ragged`. ``weights_dtypes``: what ``launch``
    takes (checked when there are no keys and nothing is launched)."""
    def impl(q: Any, kv: Any, w: Any, ks: Any, ke: Any, clean: bool, max_k: int | None) -> Any:
        if max_k:
            return launch(q, kv, w, ks, ke, clean, max_k)
        nk = int(kv[0].shape[0])
        if nk == 0:
            return no_keys(q, kv, w, ks, ke, weights_dtypes)
        # Nk bounds every ke[i] - ks[i] of keys within [0, Nk) without reading ks/ke on the host.
        return spread_ragged(launch(q, kv, w, ks, ke, False, nk), ks, ke, clean)
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


def no_keys(q: Any, kv: Any, w: Any, ks: Any, ke: Any, weights_dtypes: tuple[str, ...]) -> Any:
    """The ``(Nq, 0)`` result of a call without keys (the compressed launch would need max_seqlen_k > 0)."""
    import torch

    diagnose_mqa(q, kv, w, ks, ke, None, weights_dtypes)
    return torch.empty((int(q.shape[0]), 0), dtype=torch.float32, device=q.device)


def pad_heads(fn: str, q: Any, w: Any, heads: tuple[int, ...]) -> tuple[Any, Any]:
    """Zero-pad heads up to a count the kernels are built for (zero q rows and weights add nothing)."""
    if not heads or q.dim() != 3 or q.shape[1] in heads:
        return q, w
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
    return qp, wp


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


def diagnose_mqa(q: Any, kv: Any, weights: Any, ks: Any, ke: Any, max_seqlen_k: Any,
                  weights_dtypes: tuple[str, ...] = ("float32",)) -> None:
    fn = "fp8_mqa_logits"
    tensor(fn, "q", q, dims=(3,), dtypes=FP8_DTYPE_NAMES, what="an FP8 (Nq, H, D) tensor")
    if not isinstance(kv, (tuple, list)) or len(kv) != 2:
        raise bad(fn, "kv", "a (k_fp8 (Nk, D), k_scale float32 (Nk,)) pair", kv)
    k, k_sf = kv
    tensor(fn, "kv[0]", k, dims=(2,), dtypes=FP8_DTYPE_NAMES, what="an FP8 (Nk, D) tensor")
    tensor(fn, "kv[1]", k_sf, dims=(1,), dtypes=("float32",), what="a float32 (Nk,) scale")
    nq, h, d = q.shape
    if k.shape[1] != d:
        raise bad(fn, "kv[0]", f"(Nk, D={d}) like q", k)
    if k_sf.shape[0] != k.shape[0]:
        raise bad(fn, "kv[1]", f"one scale per key: ({k.shape[0]},)", k_sf)
    tensor(fn, "weights", weights, dims=(2,), dtypes=weights_dtypes)
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
      ``weights``: float32 ``(Nq, H)``; ``ks``/``ke``: int32 ``(Nq,)``, query ``i`` sees keys ``[ks[i], ke[i])``
      with ``0 <= ks[i]`` and ``ke[i] <= Nk`` (required; ``cu_seq_len_k_start`` / ``cu_seq_len_k_end``, their
      names in the bundled copies and ``fp8_fp4_mqa_logits``, are the same parameters). The parameters sit in
      the releases' positions (``clean_logits`` sixth, ``max_seqlen_k`` seventh).
    - Returns float32 ``(Nq, Nk)`` (or ``(Nq, max_seqlen_k)`` compressed, column ``j`` = key ``ks[i] + j``,
      when ``max_seqlen_k`` is given). Entries outside a query's range are ``-inf`` with ``clean_logits=True``
      (emulated where the release cannot do it, e.g. together with ``max_seqlen_k``), unspecified otherwise.
    - ``max_seqlen_k``: None or an int >= 0 (0 = uncompressed); the sglang-kernel copies have no
      compressed layout (:class:`~dgcompat.errors.UnsupportedFeatureError`). Releases with only the
      compressed layout (sgl-deep-gemm 0.2.5, upstream 2.8) get the uncompressed one emulated, without a
      host sync (capability ``mqa_uncompressed``).
    - ``logits_dtype``: None (float32) or a torch dtype, the parameter of the releases'
      ``fp8_fp4_mqa_logits``: forwarded where the release has it (capability ``mqa_logits_dtype``),
      float32 everywhere, anything else an :class:`~dgcompat.errors.UnsupportedFeatureError`.
    - Head counts the kernels are not built for are zero-padded internally.
    """
    if ks is None or ke is None or cu_seq_len_k_start is not None or cu_seq_len_k_end is not None:
        ks, ke = key_ranges(ks, ke, cu_seq_len_k_start, cu_seq_len_k_end)
    if max_seqlen_k is not None:
        check_max_seqlen_k("fp8_mqa_logits", max_seqlen_k)
    if logits_dtype is not None:
        return mqa_logits_as(q, kv, weights, ks, ke, clean_logits, max_seqlen_k, logits_dtype)
    try:
        return B.mqa(q, kv, weights, ks, ke, clean_logits, max_seqlen_k)
    except Exception as exc:
        translate("fp8_mqa_logits", exc, diagnose_mqa, q, kv, weights, ks, ke, max_seqlen_k)


def key_ranges(ks: Any, ke: Any, start: Any, end: Any) -> tuple[Any, Any]:
    """``(ks, ke)`` given under their names or as ``cu_seq_len_k_start`` / ``cu_seq_len_k_end``; both required."""
    fn = "fp8_mqa_logits"
    ks = spelled(fn, "ks", ks, "cu_seq_len_k_start", start)
    ke = spelled(fn, "ke", ke, "cu_seq_len_k_end", end)
    for name, value in (("ks", ks), ("ke", ke)):
        if value is None:
            raise bad(fn, name, "an int32 (Nq,) tensor of key bounds", "nothing")
    return ks, ke


def mqa_logits_as(q: Any, kv: Any, weights: Any, ks: Any, ke: Any, clean: bool, max_k: int | None,
                   dtype: Any) -> Any:
    """:func:`fp8_mqa_logits` with an explicit ``logits_dtype`` (off the default call's path)."""
    fn = "fp8_mqa_logits"
    float32 = is_float32(fn, dtype)
    try:
        if float32:  # the float32 logits every release returns
            return B.mqa(q, kv, weights, ks, ke, clean, max_k)
        return B.mqa_as(q, kv, weights, ks, ke, clean, max_k, dtype)
    except Exception as exc:
        translate(fn, exc, diagnose_mqa, q, kv, weights, ks, ke, max_k)


def is_float32(fn: str, dtype: Any) -> bool:
    """Whether an explicit ``logits_dtype`` is ``torch.float32``; anything but a torch.dtype is a BadArgumentError."""
    import torch

    if not isinstance(dtype, torch.dtype):
        raise bad(fn, "logits_dtype", "None or a torch.dtype", dtype)
    return dtype is torch.float32


def bind_mqa_as() -> Callable[..., Any]:
    """``f(q, kv, w, ks, ke, clean, max_k, logits_dtype)`` for a dtype other than float32: the release's
    function with ``logits_dtype`` (capability ``mqa_logits_dtype``), or a typed refusal naming it."""
    fn = "fp8_mqa_logits"
    mod = load()
    caps = capabilities()
    name = caps.mqa_logits_dtype
    target = getattr(mod, name, None) if name else None
    if target is None:
        release = release_label()

        def refuse(q: Any, kv: Any, w: Any, ks: Any, ke: Any, clean: bool, max_k: int | None, dtype: Any) -> Any:
            raise UnsupportedFeatureError(fn, f"logits_dtype={dtype}", release,
                                          hint="its MQA logits are float32 only (pass logits_dtype=None or "
                                               "torch.float32)")
        return refuse
    as_tensor, heads = caps.raw_ffi_returns, caps.paged_heads

    def impl(q: Any, kv: Any, w: Any, ks: Any, ke: Any, clean: bool, max_k: int | None, dtype: Any) -> Any:
        q, w = pad_heads(fn, q, w, heads)
        compressed = bool(max_k)
        # (q, None): the fp8_fp4 name wants a pair; clean_logits with max_seqlen_k > 0 asserts: masked here.
        out = target((q, None), kv, w, ks, ke, clean and not compressed, max_k or 0, dtype)
        if as_tensor or (clean and compressed):
            out = as_torch(out)
        if clean and compressed:
            mask_ragged(out, ks, ke, compressed=True)
        return out
    return impl


#: The bound upstream calls of the ragged path.
B = _binding.Slots(mqa=bind_mqa, mqa_as=bind_mqa_as)


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
    # logits_dtype other than float32, where the release's fp8_fp4 name takes it (q as a (q, None) pair).
    UpstreamCall("deep_gemm.fp8_fp4_mqa_logits", "dgcompat.fp8_mqa_logits",
                 _MQA_POSITIONAL + ("clean_logits", "max_seqlen_k", "logits_dtype"), uses_result=True,
                 selected_by=("mqa_logits_dtype", "fp8_fp4_mqa_logits")),
)
