"""The sparse-attention indexer: MQA logits (ragged prefill) and paged MQA logits (decode / verify).

Paged MQA logits is where releases disagree most, and where a mistake hangs the GPU:

- ``context_lens`` is 2-D in every sgl-deep-gemm release (1-D asserts) and 1-D in the bundled copies
  (row ``j`` of a sequence then sees ``ctx - next_n + 1 + j`` keys);
- SM90 launches ``next_n`` 1 or 2 natively; more query rows per sequence are launched as one row per
  token ("flat": q viewed ``(B*next_n, 1, H, D)``, one length and one block-table row per query row);
- the schedule (``get_paged_mqa_logits_metadata``) drives a persistent kernel: launched with lengths
  other than the ones it was built from, the kernel can wait forever.

One function (:func:`_layout`) decides how a call is launched (native ``(B, next_n)`` or flat) and
one (:func:`_launch_lens`) which lengths tensor the kernel gets; both the schedule builder and the
launch use them, so the schedule is always built from the very tensor the kernel reads.

**The launch rule.** dgcompat owns the schedule the kernel gets:

1. The schedule you pass is launched as is only when it provably belongs to the launch: it was
   returned by :func:`get_paged_mqa_logits_metadata` for this ``context_lens`` (the same memory),
   neither was written since (torch version counters), and the call is not being captured into a
   CUDA graph.
2. Otherwise dgcompat builds the schedule itself, with the release's own metadata kernel, from the
   launch lengths, on the device and in stream order, as part of the call: under CUDA-graph
   capture that kernel is recorded, so every replay recomputes the schedule from whatever lengths
   are in the buffer at that replay. Whatever else dgcompat derives from your tensors (per-row
   lengths, a block table repeated per row) is computed the same way.
3. A schedule dgcompat built for this ``context_lens`` that is still untouched while the lengths
   were written (or that was built for another lengths tensor) is an engine bug: that call raises
   :class:`~dgcompat.errors.ScheduleMismatchError` and launches nothing.

Derived tensors are cached per batch (identity and version counter of lengths, schedule and block
table), so all layers of a step share one metadata call. Entries made outside a capture are never
used inside one, and entries made inside a capture only within that same capture (a kernel
recorded earlier in it recomputes them at every replay).

Every call is checked like the first: a repeat call skips the checks and the planning only when
lengths, schedule and block table are the same tensors at the same versions and q, weights and
kv_cache have exactly the planned type, dtype, device, sizes and strides (:func:`_same_metadata`);
any other call is checked in full, so a malformed tensor never reaches the kernel.

What an engine must do before a replay: write the next batch into the captured buffers (q, weights,
lengths, block table). What it need not do: refresh the schedule buffer (dgcompat recomputes the
schedule inside the graph; refreshing it does no harm). In eager mode, writes torch does not see
(a raw kernel writing into the lengths or block-table buffer, ``tensor.data = other``) do not bump
a version counter: refresh the schedule after them
(``get_paged_mqa_logits_metadata(lens, block_kv, out=schedule)``), which invalidates every cached
derivation. ``DGCOMPAT_DEBUG=1`` derives everything afresh on every call (no cache; for hunting such
writes).
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from . import _binding, _device, _env, _sm100
from ._checks import FP8_DTYPE_NAMES, as_torch, bad, release_label, tensor, translate
from .errors import ScheduleMismatchError, UnsupportedFeatureError
from .runtime import get_num_sms
from .table import capabilities

if TYPE_CHECKING:
    import torch

__all__ = ["fp8_mqa_logits", "get_paged_mqa_logits_metadata", "fp8_paged_mqa_logits"]


# --- the non-paged (ragged) MQA logits ----------------------------------------------------------

def _bind_mqa() -> Callable[..., Any]:
    """The upstream call as ``f(q, kv, w, ks, ke, clean, max_k)``; clean_logits is emulated where the
    release cannot take it together with the compressed layout (or at all), and the uncompressed
    layout where the release has only the compressed one (``mqa_uncompressed == "emulated"``)."""
    mod = _binding.load()
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
    if caps.indexer_inputs == "mx-bf16":  # SM100 MX/bf16 contract of 0.2.5 / 2.8.x: dgcompat._sm100
        mx = _sm100.ragged_mqa(fn, target, lambda q, w: _pad_heads(fn, q, w, heads), str(caps.arch))
        return _spreading(mx, ("float32", "bfloat16")) if caps.mqa_uncompressed == "emulated" else mx

    def impl(q: Any, kv: Any, w: Any, ks: Any, ke: Any, clean: bool, max_k: int | None) -> Any:
        q, w = _pad_heads(fn, q, w, heads)
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
            _mask_ragged(out, ks, ke, compressed=compressed)
        return out
    return _spreading(impl, ("float32",)) if caps.mqa_uncompressed == "emulated" else impl


def _spreading(launch: Callable[..., Any], weights_dtypes: tuple[str, ...]) -> Callable[..., Any]:
    """``launch`` for a release that has only the compressed layout (``mqa_uncompressed == "emulated"``):
    compressed calls go straight through; an uncompressed one is launched compressed with
    ``max_seqlen_k = Nk`` and spread out by :func:`_spread_ragged`. ``weights_dtypes``: what ``launch``
    takes (checked when there are no keys and nothing is launched)."""
    def impl(q: Any, kv: Any, w: Any, ks: Any, ke: Any, clean: bool, max_k: int | None) -> Any:
        if max_k:
            return launch(q, kv, w, ks, ke, clean, max_k)
        nk = int(kv[0].shape[0])
        if nk == 0:
            return _no_keys(q, kv, w, ks, ke, weights_dtypes)
        # Nk bounds every ke[i] - ks[i] of keys within [0, Nk) without reading ks/ke on the host.
        return _spread_ragged(launch(q, kv, w, ks, ke, False, nk), ks, ke, clean)
    return impl


#: Elements of the int64 index built per chunk of rows by :func:`_spread_ragged` (bounds its temporaries).
_SPREAD_ELEMENTS = 1 << 24


def _spread_ragged(comp: Any, ks: Any, ke: Any, clean: bool) -> Any:
    """The uncompressed ``(Nq, Nk)`` logits from compressed ones ``comp (Nq, Nk)``: column ``c`` of row
    ``i`` is ``comp[i, c - ks[i]]`` for ``ks[i] <= c < ke[i]``; ``-inf`` elsewhere with ``clean``
    (unspecified otherwise, like the native layout). On the device, in stream order, no host sync
    (capturable). Rows are 8-element aligned, like the native layout's."""
    import torch

    nq, nk = int(comp.shape[0]), int(comp.shape[1])
    out = torch.empty((nq, -(-nk // 8) * 8), dtype=comp.dtype, device=comp.device)[:, :nk]
    cols = torch.arange(nk, device=comp.device)
    step = max(1, _SPREAD_ELEMENTS // max(nk, 1))
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


def _no_keys(q: Any, kv: Any, w: Any, ks: Any, ke: Any, weights_dtypes: tuple[str, ...]) -> Any:
    """The ``(Nq, 0)`` result of a call without keys (the compressed launch would need max_seqlen_k > 0)."""
    import torch

    _diagnose_mqa(q, kv, w, ks, ke, None, weights_dtypes)
    return torch.empty((int(q.shape[0]), 0), dtype=torch.float32, device=q.device)


def _pad_heads(fn: str, q: Any, w: Any, heads: tuple[int, ...]) -> tuple[Any, Any]:
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


def _mask_ragged(out: Any, ks: Any, ke: Any, *, compressed: bool) -> None:
    import torch

    cols = torch.arange(out.shape[1], device=out.device)
    if compressed:
        invalid = cols.unsqueeze(0) >= (ke - ks).unsqueeze(1)
    else:
        invalid = (cols.unsqueeze(0) < ks.unsqueeze(1)) | (cols.unsqueeze(0) >= ke.unsqueeze(1))
    out.masked_fill_(invalid, float("-inf"))


def _check_max_seqlen_k(fn: str, max_seqlen_k: Any) -> None:
    if max_seqlen_k is not None and (isinstance(max_seqlen_k, bool) or not isinstance(max_seqlen_k, int)
                                     or max_seqlen_k < 0):
        raise bad(fn, "max_seqlen_k", "None or a non-negative int", max_seqlen_k)


def _diagnose_mqa(q: Any, kv: Any, weights: Any, ks: Any, ke: Any, max_seqlen_k: Any,
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
    _check_max_seqlen_k(fn, max_seqlen_k)


def fp8_mqa_logits(q: torch.Tensor, kv: tuple[torch.Tensor, torch.Tensor], weights: torch.Tensor,
                   ks: torch.Tensor, ke: torch.Tensor, *, clean_logits: bool = False,
                   max_seqlen_k: int | None = None, logits_dtype: torch.dtype | None = None) -> torch.Tensor:
    """Indexer logits over ragged keys: ``out[i, j] = sum_h weights[i, h] * relu(q[i, h] . k[j] * k_scale[j])``.

    - ``q``: float8_e4m3fn ``(Nq, H, D)``; ``kv``: ``(k float8_e4m3fn (Nk, D), k_scale float32 (Nk,))``;
      ``weights``: float32 ``(Nq, H)``; ``ks``/``ke``: int32 ``(Nq,)``, query ``i`` sees keys ``[ks[i], ke[i])``
      with ``0 <= ks[i]`` and ``ke[i] <= Nk``.
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
    if max_seqlen_k is not None:
        _check_max_seqlen_k("fp8_mqa_logits", max_seqlen_k)
    if logits_dtype is not None:
        return _mqa_logits_as(q, kv, weights, ks, ke, clean_logits, max_seqlen_k, logits_dtype)
    try:
        return _B.mqa(q, kv, weights, ks, ke, clean_logits, max_seqlen_k)
    except Exception as exc:
        translate("fp8_mqa_logits", exc, _diagnose_mqa, q, kv, weights, ks, ke, max_seqlen_k)


def _mqa_logits_as(q: Any, kv: Any, weights: Any, ks: Any, ke: Any, clean: bool, max_k: int | None,
                   dtype: Any) -> Any:
    """:func:`fp8_mqa_logits` with an explicit ``logits_dtype`` (off the default call's path)."""
    fn = "fp8_mqa_logits"
    float32 = _is_float32(fn, dtype)
    try:
        if float32:  # the float32 logits every release returns
            return _B.mqa(q, kv, weights, ks, ke, clean, max_k)
        return _B.mqa_as(q, kv, weights, ks, ke, clean, max_k, dtype)
    except Exception as exc:
        translate(fn, exc, _diagnose_mqa, q, kv, weights, ks, ke, max_k)


def _is_float32(fn: str, dtype: Any) -> bool:
    """Whether an explicit ``logits_dtype`` is ``torch.float32``; anything but a torch.dtype is a BadArgumentError."""
    import torch

    if not isinstance(dtype, torch.dtype):
        raise bad(fn, "logits_dtype", "None or a torch.dtype", dtype)
    return dtype is torch.float32


def _bind_mqa_as() -> Callable[..., Any]:
    """``f(q, kv, w, ks, ke, clean, max_k, logits_dtype)`` for a dtype other than float32: the release's
    function with ``logits_dtype`` (capability ``mqa_logits_dtype``), or a typed refusal naming it."""
    fn = "fp8_mqa_logits"
    mod = _binding.load()
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
        q, w = _pad_heads(fn, q, w, heads)
        compressed = bool(max_k)
        # (q, None): the fp8_fp4 name wants a pair; clean_logits with max_seqlen_k > 0 asserts: masked here.
        out = target((q, None), kv, w, ks, ke, clean and not compressed, max_k or 0, dtype)
        if as_tensor or (clean and compressed):
            out = as_torch(out)
        if clean and compressed:
            _mask_ragged(out, ks, ke, compressed=True)
        return out
    return impl


# --- one decision: how a paged call is launched -------------------------------------------------

def _layout(dims: str, native_n: tuple[int, ...], form: str, n: int, per_row_table: bool, varlen: bool) -> str:
    """``"native"`` (q ``(B, next_n, H, D)``) or ``"flat"`` (one query row per token).

    ``dims``: the release's ``paged_context_lens`` (``"1d"``, ``"2d"``; ``"any"`` = ``"2d"``); ``form``:
    the caller's lengths, ``"seq"`` ``(B,)``, ``"rows"`` ``(B, next_n)`` or ``"flat"`` ``(B*next_n, 1)``.
    Native needs one block-table row per sequence (a per-row table is launched flat, as is), a
    ``next_n`` the architecture launches, and lengths the release's form expresses exactly (the
    1-D form cannot carry arbitrary per-row lengths, so ``(B, next_n)`` goes flat there).
    """
    if n == 1 or form == "flat" or per_row_table or varlen or n not in native_n:
        return "flat"
    if dims == "1d" and form == "rows":
        return "flat"
    return "native"


def _recipe(layout: str, form: str, b: int, n: int, dims: str) -> tuple[Any, ...]:
    """How the launch lengths are made from the caller's (a hashable key; see :func:`_launch_lens`)."""
    if layout == "native":
        if form == "seq":
            return ("as-is",) if dims == "1d" else ("row-lens", b, n, "2d")
        return ("row-max", b, n)
    if form == "seq" and n > 1:
        return ("row-lens", b, n, "1d" if dims == "1d" else "flat")
    return ("view", "1d" if dims == "1d" else "2d")


def _launch_lens(lens: Any, recipe: tuple[Any, ...]) -> Any:
    """The lengths tensor the kernel (and its schedule) gets, made by ``recipe``:

    - ``as-is``: native launch on a 1-D release, ``(B,)`` as given;
    - ``row-lens``: each query row's causal length ``ctx - next_n + 1 + j`` of ``(B,)`` lengths, as
      ``(B, next_n)`` (native, 2-D release), ``(B*next_n,)`` (flat, 1-D release) or ``(B*next_n, 1)``;
    - ``row-max``: native ``(B, next_n)`` on a 2-D release with every column the row's longest length
      (the kernels size every row of a sequence by its last column; the positions computed past a
      row's own length are unspecified, like every position past it);
    - ``view``: one length per query row, a view of the caller's tensor (no copy).
    Derived lengths are clamped to >= 1 (the kernels need every row to see a position).
    """
    kind = recipe[0]
    if kind == "as-is":
        return lens
    if kind == "view":
        return lens.view(-1) if recipe[1] == "1d" else lens.view(-1, 1)
    b, n = recipe[1], recipe[2]
    if kind == "row-max":
        return lens.amax(dim=1, keepdim=True).expand(b, n).contiguous()
    per_row = _clamp1(_row_lens(lens, b, n, "seq"))
    return per_row.view(b, n) if recipe[3] == "2d" else per_row if recipe[3] == "1d" else per_row.view(-1, 1)


def _row_lens(lens: Any, b: int, n: int, form: str) -> Any:
    """int32 ``(b*n,)`` visible length of each query row, in query-row order (may be <= 0)."""
    if form == "seq" and n > 1:
        import torch

        offs = torch.arange(1 - n, 1, device=lens.device, dtype=lens.dtype)
        return (lens.view(-1, 1) + offs).view(-1)
    return lens.view(-1)


def _clamp1(t: Any) -> Any:
    return t.clamp_min(1)


def _shape_of_rows(fn: str, q: Any, lens: Any) -> tuple[int, int, str]:
    """(B, next_n, form) from q and the lengths; form is "seq" (B,), "rows" (B, next_n) or "flat" (B*n, 1)."""
    rows = q.shape[0] * q.shape[1] if q.dim() == 4 else q.shape[0]
    if lens.dim() == 1:
        b = lens.shape[0]
        if q.dim() == 4:
            if q.shape[0] != b:
                raise bad(fn, "context_lens", f"1-D lengths with one entry per sequence: ({q.shape[0]},)", lens)
            return b, q.shape[1], "seq"
        if b == 0 or rows % b:
            raise bad(fn, "context_lens", f"1-D lengths whose count divides the {rows} query rows", lens)
        return b, rows // b, "seq"
    n0, n1 = lens.shape
    if n1 == 1 and n0 == rows:
        b = q.shape[0] if q.dim() == 4 else rows
        return b, (rows // b if b else 1), "flat"
    if n0 * n1 != rows or (q.dim() == 4 and (q.shape[0], q.shape[1]) != (n0, n1)):
        want = f"({q.shape[0]}, {q.shape[1]}) or ({rows}, 1)" if q.dim() == 4 else f"(B, next_n) with B*next_n = {rows}"
        raise bad(fn, "context_lens", f"2-D lengths of shape {want} matching q", lens)
    return n0, n1, "rows"


def _lens_only(lens: Any) -> tuple[int, int, str]:
    """(B, next_n, form) from the lengths alone (what the schedule builder knows); next_n of 1-D
    lengths is what the last launch with such lengths had."""
    if lens.dim() == 1:
        return lens.shape[0], _HINTS.get((1, 0), (1, False))[0], "seq"
    n0, n1 = lens.shape
    if n1 == 1:
        return n0, 1, "flat"
    return n0, n1, "rows"


# What the last launch with lengths of a given signature ((dim, next_n of 2-D lengths)) looked like:
# (next_n, per-row table). The schedule builder does not see q or the block table; it builds for
# the layout the last such launch had, so an engine's steady state makes one metadata call per batch.
_HINTS: dict[tuple[int, int], tuple[int, bool]] = {}


def _hint_key(lens: Any) -> tuple[int, int]:
    return (1, 0) if lens.dim() == 1 else (2, lens.shape[1])


# --- capture awareness ---------------------------------------------------------------------------

def _capture_state(device: Any) -> Any:
    """None outside CUDA-graph capture, else a token naming the capture underway on the current stream.

    Only a call on CUDA tensors asks CUDA anything (a CPU tensor cannot be under capture), so a CUDA build
    of torch without a usable driver or device is never queried; the question itself creates no context.
    """
    if not _capturing(device)():
        _WAS_CAPTURING[0] = False
        return None
    if not _WAS_CAPTURING[0]:
        # A new capture began since the last call dgcompat saw outside one (the token's fallback when the
        # driver's capture id is unavailable; back-to-back captures without an eager call share it).
        _EPOCH[0] += 1
        _WAS_CAPTURING[0] = True
    cid = _capture_id()
    return ("capture", cid if cid is not None else _EPOCH[0])


_capturing = _device.capture_probe
_capture_id = _device.capture_id


# Counts transitions into capture: the token of a capture when the driver's id is unavailable.
_EPOCH = [0]
_WAS_CAPTURING = [False]


# --- schedules you hold --------------------------------------------------------------------------

@dataclass
class _Schedule:
    """What a schedule returned by :func:`get_paged_mqa_logits_metadata` belongs to."""

    version: int
    lens_root: Any  # weakref to the lengths' base tensor (keeps the memory identity honest)
    lens_key: tuple[Any, ...]
    lens_version: int
    recipe: tuple[Any, ...]  # how launch_lens was made from the lengths (see _recipe)
    launch_lens: Any
    block_kv: int
    num_sms: int
    indices_key: Any


_SCHEDULES: dict[int, _Schedule] = {}


def _root(t: Any) -> Any:
    base = t._base
    return t if base is None else base


def _mem_key(t: Any) -> tuple[Any, ...]:
    """Identity of a tensor's memory and layout (views of one buffer compare equal)."""
    return (id(_root(t)), t.data_ptr(), tuple(t.shape), tuple(t.stride()))


def _bind_metadata() -> Callable[..., Any]:
    """The upstream metadata call as ``f(lens, block_kv, num_sms, indices)``."""
    mod = _binding.load()
    target = mod.get_paged_mqa_logits_metadata
    caps = capabilities()
    raw = caps.raw_ffi_returns
    allowed_bkv, arch = caps.paged_block_kv, caps.arch  # the release's per-architecture host assert

    def impl(lens: Any, block_kv: int, n_sms: int, indices: Any) -> Any:
        if allowed_bkv and block_kv not in allowed_bkv:
            _sm100.check_block_kv("get_paged_mqa_logits_metadata", block_kv, allowed_bkv, arch)
        out = target(lens, block_kv, n_sms) if indices is None else target(lens, block_kv, n_sms, indices=indices)
        return as_torch(out) if raw else out
    return impl


def _check_lens(fn: str, lens: Any) -> None:
    tensor(fn, "context_lens", lens, dims=(1, 2), dtypes=("int32",), what="an int32 lengths tensor")
    if not lens.is_contiguous():
        raise bad(fn, "context_lens", "a contiguous tensor (the kernels assert it)", lens,
                  hint="pass context_lens.contiguous() and build the schedule from that same tensor")


def _check_indices(fn: str, indices: Any, rows: int, device: Any) -> None:
    if not capabilities().paged_indices:
        raise UnsupportedFeatureError(fn, "indices= (varlen paged MQA)", release_label())
    tensor(fn, "indices", indices, dims=(1,), dtypes=("int32",), what="an int32 (rows,) tensor")
    if indices.shape[0] != rows or not indices.is_contiguous() or indices.device != device:
        raise bad(fn, "indices", f"a contiguous int32 ({rows},) tensor on {device}", indices)


def _native_metadata(fn: str, launch_lens: Any, block_kv: int, num_sms: int, indices: Any) -> Any:
    try:
        return _B.metadata(launch_lens, block_kv, num_sms, indices)
    except Exception as exc:
        translate(fn, exc, _no_diagnosis)


def get_paged_mqa_logits_metadata(context_lens: torch.Tensor, block_kv: int, num_sms: int | None = None, *,
                                  out: torch.Tensor | None = None,
                                  indices: torch.Tensor | None = None) -> torch.Tensor:
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
    _check_lens(fn, context_lens)
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
    b, n, form = _lens_only(context_lens)
    if indices is not None:
        if form == "rows":
            raise bad(fn, "context_lens", "(rows,) or (rows, 1) lengths with indices=", context_lens)
        _check_indices(fn, indices, context_lens.shape[0], context_lens.device)
        n = 1
    if _env.debug() and context_lens.numel():
        low = int(context_lens.min())
        if low < 1:
            raise bad(fn, "context_lens", "lengths >= 1 (the kernels require it)", f"a minimum of {low}")
    caps = capabilities()
    dims = caps.paged_context_lens
    per_row = _HINTS.get(_hint_key(context_lens), (n, False))[1]
    layout = _layout(dims, caps.paged_native_next_n, form, n, per_row, indices is not None)
    recipe = _recipe(layout, form, b, n, dims)
    launch_lens = _launch_lens(context_lens, recipe)
    schedule = _native_metadata(fn, launch_lens, block_kv, num_sms, indices)
    if out is not None:
        out.copy_(schedule)
        schedule = out
    _register(schedule, context_lens, recipe, launch_lens, block_kv, num_sms, indices)
    return schedule


def _forget(key: int) -> None:
    _SCHEDULES.pop(key, None)


def _register(schedule: Any, lens: Any, recipe: tuple[Any, ...], launch_lens: Any, block_kv: int,
              num_sms: int, indices: Any) -> None:
    key = id(schedule)
    if key not in _SCHEDULES:
        # The record lives exactly as long as the schedule tensor (one finalizer per tensor, not per refresh).
        weakref.finalize(schedule, _forget, key)
    _SCHEDULES[key] = _Schedule(schedule._version, weakref.ref(_root(lens)), _mem_key(lens), lens._version,
                                recipe, launch_lens, block_kv, num_sms, _version_key(indices))


def _version_key(t: Any) -> Any:
    return None if t is None else (_mem_key(t), t._version)


# --- per-batch derivations ----------------------------------------------------------------------

#: Upper bound on the bytes of derived tensors kept across calls (lengths, block tables, schedules).
CACHE_BYTES = 64 << 20
_DERIVED: dict[tuple[Any, ...], tuple[Any, Any, int]] = {}  # key -> (source weakrefs, tensors, bytes); LRU order
_DERIVED_BYTES = [0]


def _nbytes(*ts: Any) -> int:
    return sum(t.numel() * t.element_size() for t in ts if t is not None)


def _cached(key: tuple[Any, ...], roots: tuple[Any, ...], make: Callable[[], tuple[Any, ...]]) -> tuple[Any, ...]:
    """``make()``'s tensors for ``key``, cached while every tensor in ``roots`` is alive."""
    hit = _DERIVED.get(key)
    if hit is not None and all(r() is t for r, t in zip(hit[0], roots)):
        _DERIVED[key] = _DERIVED.pop(key)  # most recently used last
        return tuple(hit[1])
    value = make()
    if _env.debug():
        return value
    _drop(key)
    size = _nbytes(*value)
    # Each source's death drops this entry (a plain dict pop: safe from a garbage-collector callback).
    refs = tuple(weakref.ref(r, _dropper(key)) for r in roots)
    _DERIVED[key] = (refs, value, size)
    _DERIVED_BYTES[0] += size
    while _DERIVED and (_DERIVED_BYTES[0] > CACHE_BYTES or len(_DERIVED) > 256):
        _drop(next(iter(_DERIVED)))
    return value


def _dropper(key: tuple[Any, ...]) -> Callable[[Any], None]:
    def drop(_ref: Any) -> None:
        _drop(key)
    return drop


def _drop(key: tuple[Any, ...]) -> None:
    entry = _DERIVED.pop(key, None)
    if entry is not None:
        _DERIVED_BYTES[0] -= entry[2]


# --- paged logits: planning ----------------------------------------------------------------------

# The most recent plan, as one tuple (read by the hot path with a single unpacking):
# (lens_ref, lens_version, sched_ref, sched_version, bt_ref, bt_version (-1: not read), same_meta (see
#  _same_metadata), max_len, clean, the capture-status query of q's device, capture token, (indices_ref, version) (None: no indices), launch, plain).
# Exactly one of the last two is set: plain, for the common launch that passes the launch tensors straight
# on, is (upstream, lens, block_table, schedule), called by fp8_paged_mqa_logits itself (one Python frame less
# per call); launch, for every other plan, is a closure (see _launcher: the launch tensors, the q view, the
# emulated clean_logits mask and the stride repair that plan needs).
# The shared per-batch tensors (lengths, schedule, block table, indices) are matched by identity and
# version counter (an in-place resize_, set_ or as_strided_ bumps it); the per-call tensors (q, weights,
# kv_cache) by type, dtype, device, sizes and strides, which covers everything the checks read: a call
# that matches passes every check of the first call and launches the same layout; any other is checked in full.
_LAST: tuple[Any, ...] | None = None


def _reset() -> None:
    global _LAST
    _SCHEDULES.clear()
    _DERIVED.clear()
    _DERIVED_BYTES[0] = 0
    _HINTS.clear()
    _LAST = None
    _TG.clear()


_binding.register_reset(_reset)


def _check_paged(fn: str, q: Any, kv_cache: Any, weights: Any, lens: Any, block_table: Any, schedule: Any,
                 max_len: Any, clean: Any, indices: Any) -> tuple[int, int, str]:
    """Every argument check (the same on every call); returns (B, next_n, form)."""
    caps = capabilities()
    tensor(fn, "q", q, dims=(3, 4), dtypes=FP8_DTYPE_NAMES, what="an FP8 (B, next_n, H, D) or (N, H, D) tensor")
    _check_lens(fn, lens)
    tensor(fn, "block_table", block_table, dims=(2,), dtypes=("int32",), what="an int32 (rows, max_blocks) tensor")
    tensor(fn, "schedule_meta", schedule, dims=(2,), dtypes=("int32",), what="the int32 schedule")
    tensor(fn, "kv_cache", kv_cache, dims=(4,), dtypes=("uint8", "int8") + FP8_DTYPE_NAMES,
           what="a uint8 (num_blocks, block_kv, 1, D + 4) cache")
    tensor(fn, "weights", weights, dims=(2,), dtypes=("float32",))
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len <= 0:
        raise bad(fn, "max_context_len", "a positive int", max_len)
    if not isinstance(clean, bool):
        raise bad(fn, "clean_logits", "a bool", clean)
    b, n, form = _shape_of_rows(fn, q, lens)
    rows = b * n
    h, d = q.shape[-2], q.shape[-1]
    if kv_cache.shape[2] != 1 or kv_cache.shape[3] != d + 4:
        raise bad(fn, "kv_cache", f"(num_blocks, block_kv, 1, D + 4 = {d + 4}) packed FP8 values + float32 scale",
                  kv_cache)
    if tuple(weights.shape) != (rows, h):
        raise bad(fn, "weights", f"shape (B*next_n, H) = ({rows}, {h})", weights)
    if caps.paged_heads and h not in caps.paged_heads:
        raise bad(fn, "q", f"a head count in {caps.paged_heads} on {caps.arch}", q)
    if block_table.shape[0] not in (b, rows):
        raise bad(fn, "block_table", f"one row per sequence ({b}) or per query row ({rows})", block_table)
    block_kv = kv_cache.shape[1]
    if max_len > block_table.shape[1] * block_kv:
        raise bad(fn, "max_context_len", f"<= block_table.shape[1] * block_kv = {block_table.shape[1] * block_kv}",
                  max_len)
    if schedule.shape[1] != 2 or schedule.shape[0] < 2:
        raise bad(fn, "schedule_meta", "an int32 (num_sms + 1, 2) schedule", schedule)
    for name, t in (("kv_cache", kv_cache), ("weights", weights), ("context_lens", lens),
                    ("block_table", block_table), ("schedule_meta", schedule)):
        if t.device != q.device:
            raise bad(fn, name, f"on {q.device} like q", t)
    if indices is not None:
        if n != 1 or form == "rows":
            raise bad(fn, "indices", "varlen indices with one query row per token ((rows, 1, H, D) q, (rows, 1) "
                      "lengths)", indices)
        _check_indices(fn, indices, rows, q.device)
    return b, n, form


def _plan(q: Any, kv_cache: Any, weights: Any, lens: Any, block_table: Any, schedule: Any, max_len: Any,
          clean: Any, indices: Any) -> tuple[Any, ...]:
    fn = "fp8_paged_mqa_logits"
    b, n, form = _check_paged(fn, q, kv_cache, weights, lens, block_table, schedule, max_len, clean, indices)
    caps = capabilities()
    dims = caps.paged_context_lens
    rows = b * n
    per_row = block_table.shape[0] == rows and n > 1
    varlen = indices is not None
    layout = _layout(dims, caps.paged_native_next_n, form, n, per_row, varlen)
    block_kv = kv_cache.shape[1]
    num_sms = schedule.shape[0] - 1
    token = _capture_state(q.device)
    debug = _env.debug()
    if lens.dim() == 1 or lens.shape[1] > 1:
        _HINTS[_hint_key(lens)] = (n, per_row)

    lens_key = (_mem_key(lens), lens._version)
    ix_key = _version_key(indices)
    recipe = _recipe(layout, form, b, n, dims)
    rec = _SCHEDULES.get(id(schedule))
    trusted = False
    if rec is not None and rec.version == schedule._version and rec.lens_root() is _root(lens) \
            and rec.lens_key == lens_key[0]:
        # A schedule dgcompat built for these lengths, untouched since: the lengths must be too.
        if rec.lens_version != lens._version:
            raise ScheduleMismatchError(
                f"{fn}(): context_lens was modified after schedule_meta was built from it "
                f"[deep_gemm {release_label()}]; launching the stale schedule could hang the GPU. Refresh it with "
                f"get_paged_mqa_logits_metadata(context_lens, block_kv, out=schedule_meta)")
        trusted = (not debug and token is None and rec.recipe == recipe and rec.block_kv == block_kv
                   and rec.num_sms == num_sms and rec.indices_key == ix_key)

    if trusted:
        launch_lens, launch_schedule = rec.launch_lens, schedule  # type: ignore[union-attr]
    else:
        roots = (_root(lens),) if indices is None else (_root(lens), _root(indices))
        # The schedule (and its registration) is part of the key: refreshing it invalidates derivations.
        sched_key = (id(schedule), schedule._version)

        def derive() -> tuple[Any, ...]:
            ll = _launch_lens(lens, recipe)
            return ll, _native_metadata(fn, ll, block_kv, num_sms, indices)
        launch_lens, launch_schedule = _cached(
            ("lens", lens_key, sched_key, recipe, block_kv, num_sms, ix_key, token), roots, derive)

    launch_bt, bt_read = _launch_table(block_table, layout, b, n, token)
    q_shape: tuple[int, ...] | None = None
    h, d = q.shape[-2], q.shape[-1]
    want = (b, n, h, d) if layout == "native" else (rows, 1, h, d)
    if tuple(q.shape) != want:
        q_shape = want
    row_len = None
    if clean and caps.paged_clean_logits == "emulated":
        row_len = _cached(("rows", lens_key, form, b, n, token), (_root(lens),),
                          lambda: (_row_lens(lens, b, n, form).view(-1, 1),))[0]
    launch, plain = None, None
    if q_shape is None and row_len is None and rows > 1 and not varlen:
        plain = (_B.bound("paged"), launch_lens, launch_bt, launch_schedule)
    else:
        launch = _launcher(q_shape, launch_lens, launch_bt, launch_schedule, row_len, rows <= 1, varlen)
    return (weakref.ref(lens), lens._version, weakref.ref(schedule), schedule._version, weakref.ref(block_table),
            block_table._version if bt_read else -1, _same_metadata(q, weights, kv_cache), max_len, clean, _capturing(q.device), token,
            None if indices is None else (weakref.ref(indices), indices._version), launch, plain)


def _launcher(q_shape: tuple[int, ...] | None, lens: Any, bt: Any, sched: Any, row_len: Any, one_row: bool,
              varlen: bool) -> Callable[[Any, Any, Any, int, Any], Any]:
    """The launch of a plan that is not plain, as ``f(q, kv_cache, weights, max_len, indices)``: the bound
    upstream call on the planned launch tensors with the steps this plan needs around it."""
    paged = _B.bound("paged_varlen" if varlen else "paged")  # binding sets _TENSOR / _FROM_DLPACK
    tensor_type, from_dlpack = _TENSOR, _FROM_DLPACK

    def general(q: Any, kv: Any, w: Any, max_len: int, indices: Any) -> Any:
        if q_shape is not None:
            q = q.view(q_shape)
        if varlen:
            out = paged(q, kv, w, lens, bt, sched, max_len, indices)
        else:
            out = paged(q, kv, w, lens, bt, sched, max_len)
        if type(out) is not tensor_type:
            out = from_dlpack(out)
        if row_len is not None:
            out = _mask_rows(out, row_len)
        if one_row and out.stride(0) % 4:
            # A one-row result that crossed DLPack may come back with row stride 1; consumers (fused top-k)
            # need a 4-aligned row stride. With one row any stride addresses the same elements.
            out = out.as_strided(tuple(out.shape), (-(-out.shape[1] // 4) * 4, 1))
        return out
    return general


def _same_metadata(*ts: Any) -> Callable[..., bool]:
    """``f(*xs)``: whether ``xs`` have exactly the type, dtype, device, sizes and strides of ``ts``.

    torch's C++ tensor guard where it is present and behaves as checked (:func:`_tensor_guards`): one call
    for every tensor, about the cost of two attribute reads; the same comparison in Python otherwise.
    Neither keeps ``ts`` alive.
    """
    guards = _tensor_guards()
    if guards is not None:
        check: Callable[..., bool] = guards(*ts, dynamic_dims_sizes=[list(t.shape) for t in ts],
                                            dynamic_dims_strides=[list(t.stride()) for t in ts]).check
        return check
    metas = tuple((type(t), t.shape, t.stride(), t.dtype, t.device) for t in ts)

    def same(*xs: Any) -> bool:
        return len(xs) == len(metas) and all(
            type(x) is m[0] and x.shape == m[1] and x.stride() == m[2] and x.dtype is m[3] and x.device == m[4]
            for x, m in zip(xs, metas))
    return same


_TG: list[Any] = []  # [torch's TensorGuards class, or None where absent or not as expected]


def _tensor_guards() -> Any:
    if not _TG:
        _TG.append(_probe_tensor_guards())
    return _TG[0]


def _probe_tensor_guards() -> Any:
    """``torch._C._dynamo.guards.TensorGuards`` if it checks exactly what dgcompat relies on (tried on CPU
    tensors: same metadata passes; another dtype, size, stride, device type or a non-tensor fails)."""
    torch = sys.modules["torch"]
    try:
        cls = torch._C._dynamo.guards.TensorGuards
        a = torch.empty(2, 3)
        check = cls(a, dynamic_dims_sizes=[[2, 3]], dynamic_dims_strides=[[3, 1]]).check
        ok = (check(torch.empty(2, 3)) is True and check(torch.empty(3, 2).t()) is False
              and check(torch.empty(2, 4)[:, :3]) is False and check(torch.empty(2, 2)) is False
              and check(torch.empty(2, 3, dtype=torch.float64)) is False
              and check(torch.empty(2, 3, device="meta")) is False and check(None) is False)
    except Exception:  # noqa: BLE001 - absent or changed: the Python comparison
        return None
    return cls if ok else None


def _launch_table(bt: Any, layout: str, b: int, n: int, token: Any) -> tuple[Any, bool]:
    """The block table the kernel gets, and whether it is a copy (so writes to ``bt`` must be re-read)."""
    rows = b * n
    if layout == "native" or bt.shape[0] == rows:
        if bt.stride(-1) == 1 and (bt.shape[0] <= 1 or bt.stride(0) == bt.shape[1]):
            return bt, False
        # Dense rows: the kernels assert only stride(1) == 1 (a transposed (B, 1) view passes is_contiguous()
        # but not that), and not every release honours another row stride.
        make = lambda: (bt.clone(memory_format=_contiguous()),)  # noqa: E731
    else:
        # expand + reshape: one copy kernel, no host synchronization (capturable).
        # (contiguous: for one sequence reshape returns a zero-stride view, and kernels read rows densely)
        make = lambda: (bt.unsqueeze(1).expand(b, n, bt.shape[1]).reshape(rows, bt.shape[1]).contiguous(),)  # noqa: E731
    key = ("table", _mem_key(bt), bt._version, layout, n, token)
    return _cached(key, (_root(bt),), make)[0], True


def _contiguous() -> Any:
    import torch

    return torch.contiguous_format


def _no_diagnosis(*_args: Any) -> None:
    """Arguments were checked up front; whatever deep_gemm rejects is reported as a KernelError."""


_TENSOR: Any = None  # torch.Tensor, set when the paged call is bound (nothing imports torch at import dgcompat)
_FROM_DLPACK: Any = None


def _bind_paged_common() -> tuple[Any, str, Any]:
    global _TENSOR, _FROM_DLPACK
    import torch

    _TENSOR, _FROM_DLPACK = torch.Tensor, torch.utils.dlpack.from_dlpack
    mod = _binding.load()
    caps = capabilities()
    name = caps.paged_mqa_logits
    target = getattr(mod, name) if name else None
    if target is None:
        raise UnsupportedFeatureError("fp8_paged_mqa_logits", "paged MQA logits", release_label())
    return target, name or "", caps


def _bind_paged() -> Callable[..., Any]:
    """The upstream paged-logits call as ``f(q, kv, weights, lens, block_table, schedule, max_len)``.

    The upstream function itself where it takes exactly that (clean_logits defaults to False, and
    dgcompat masks clean_logits itself); a small adapter elsewhere. The caller converts a tvm-ffi
    result to a torch tensor.
    """
    target, name, caps = _bind_paged_common()
    if caps.indexer_inputs == "mx-bf16":  # SM100 MX/bf16 contract of 0.2.5 / 2.8.x: dgcompat._sm100
        return _sm100.paged_refusal("fp8_paged_mqa_logits", str(caps.arch), caps.paged_heads, caps.paged_block_kv)
    if name == "fp8_fp4_paged_mqa_logits":
        # (q, q_sf) pair: a bare q hits the torch.Tensor(...) TypeError in releases before 0.2.0.
        def pair(q: Any, kv: Any, w: Any, lens: Any, bt: Any, sched: Any, max_len: int) -> Any:
            return target((q, None), kv, w, lens, bt, sched, max_len)
        return pair
    if caps.paged_clean_logits_arg == "required":
        def required(q: Any, kv: Any, w: Any, lens: Any, bt: Any, sched: Any, max_len: int) -> Any:
            return target(q, kv, w, lens, bt, sched, max_len, False)
        return required
    return target


def _bind_paged_varlen() -> Callable[..., Any]:
    """``f(q, kv, weights, lens, block_table, schedule, max_len, indices)`` (releases with ``indices=``)."""
    target, name, caps = _bind_paged_common()
    if caps.indexer_inputs == "mx-bf16":
        return _sm100.paged_refusal("fp8_paged_mqa_logits", str(caps.arch), caps.paged_heads, caps.paged_block_kv)
    if not caps.paged_indices:
        def refuse(*_args: Any) -> Any:
            raise UnsupportedFeatureError("fp8_paged_mqa_logits", "indices= (varlen paged MQA)", release_label())
        return refuse
    if name == "fp8_fp4_paged_mqa_logits":
        def pair(q: Any, kv: Any, w: Any, lens: Any, bt: Any, sched: Any, max_len: int, ix: Any) -> Any:
            return target((q, None), kv, w, lens, bt, sched, max_len, indices=ix)
        return pair

    def keyword(q: Any, kv: Any, w: Any, lens: Any, bt: Any, sched: Any, max_len: int, ix: Any) -> Any:
        return target(q, kv, w, lens, bt, sched, max_len, indices=ix)
    return keyword


_B = _binding.Slots(mqa=_bind_mqa, mqa_as=_bind_mqa_as, metadata=_bind_metadata, paged=_bind_paged,
                    paged_varlen=_bind_paged_varlen)


def fp8_paged_mqa_logits(q: torch.Tensor, kv_cache: torch.Tensor, weights: torch.Tensor,
                         context_lens: torch.Tensor, block_table: torch.Tensor, schedule_meta: torch.Tensor,
                         max_context_len: int, *, clean_logits: bool = False,
                         indices: torch.Tensor | None = None, logits_dtype: torch.dtype | None = None) -> torch.Tensor:
    """Indexer logits over a paged FP8 KV cache, for ``next_n`` query rows per sequence.

    - ``q``: float8_e4m3fn ``(B, next_n, H, D)`` or ``(N, H, D)``.
    - ``kv_cache``: uint8 ``(num_blocks, block_kv, 1, D + 4)``: per block the FP8 values of its tokens,
      then one float32 scale per token.
    - ``weights``: float32 ``(B*next_n, H)``.
    - ``context_lens``: int32, contiguous: ``(B,)`` (row ``j`` sees the sequence's first
      ``ctx - next_n + j + 1`` positions), ``(B, next_n)`` (per-row lengths) or ``(B*next_n, 1)``.
    - ``block_table``: int32 ``(B, max_blocks)`` (one row per sequence) or ``(B*next_n, max_blocks)``
      (one row per query row; rows may differ); last stride 1 or a copy is made once per batch.
    - ``schedule_meta``: int32 ``(num_sms + 1, 2)``, ideally from :func:`get_paged_mqa_logits_metadata`
      on this ``context_lens``; any other schedule buffer of that shape is replaced by one dgcompat builds
      from these lengths (see the module documentation).
    - ``indices``: int32 ``(rows,)`` varlen row-to-sequence map (flat layout only), where the release has it.
    - ``logits_dtype``: None or ``torch.float32`` (what every release returns); another dtype raises
      :class:`~dgcompat.errors.UnsupportedFeatureError` (no paged function dgcompat launches takes one).
    - Returns float32 ``(B*next_n, max_context_len)`` in query-row order. Positions at or past a row's
      length are ``-inf`` with ``clean_logits=True``, unspecified otherwise. One-row results keep a
      4-aligned row stride.

    Raises :class:`~dgcompat.errors.ScheduleMismatchError` instead of launching a schedule dgcompat built
    for other (or since rewritten) lengths.
    """
    p = _LAST
    if p is not None:
        lr, lv, sr, sv, br, bv, same_meta, ml, cl, capturing, token, ix, launch, plain = p
        if not (lr() is context_lens and context_lens._version == lv
                and sr() is schedule_meta and schedule_meta._version == sv
                and br() is block_table and (bv < 0 or block_table._version == bv)
                and max_context_len == ml and clean_logits is cl and logits_dtype is None
                and (indices is None if ix is None else ix[0]() is indices and indices._version == ix[1])
                and same_meta(q, weights, kv_cache)
                and (not capturing() if token is None else _capture_state(q.device) == token)):
            p = None
    try:
        if p is None:
            if logits_dtype is not None:
                return _paged_logits_dtype(q, kv_cache, weights, context_lens, block_table, schedule_meta,
                                           max_context_len, clean_logits, indices, logits_dtype)
            launch, plain = _lookup_plan(q, kv_cache, weights, context_lens, block_table, schedule_meta,
                                         max_context_len, clean_logits, indices)[-2:]
        if plain is not None:
            paged, lens, table, sched = plain
            out = paged(q, kv_cache, weights, lens, table, sched, max_context_len)
            return out if type(out) is _TENSOR else _FROM_DLPACK(out)
        return launch(q, kv_cache, weights, max_context_len, indices)
    except Exception as exc:
        translate("fp8_paged_mqa_logits", exc, _no_diagnosis)


def _paged_logits_dtype(q: Any, kv_cache: Any, weights: Any, lens: Any, block_table: Any, schedule: Any,
                        max_len: Any, clean: Any, indices: Any, logits_dtype: Any) -> Any:
    """A call that names ``logits_dtype`` (off the hot path): float32 is the default result, others are refused.

    sgl-deep-gemm 0.0.1-0.2.3 have the parameter only on ``fp8_fp4_paged_mqa_logits``, not on the function
    dgcompat launches there; 0.2.5, upstream 2.8 and the bundled copies have none.
    """
    fn = "fp8_paged_mqa_logits"
    if not _is_float32(fn, logits_dtype):
        raise UnsupportedFeatureError(fn, f"logits_dtype={logits_dtype} (paged MQA logits are float32)",
                                      release_label())
    return fp8_paged_mqa_logits(q, kv_cache, weights, lens, block_table, schedule, max_len, clean_logits=clean,
                                indices=indices)


def _mask_rows(out: Any, row_len: Any) -> Any:
    """-inf at and past each row's length (emulated clean_logits; the mask lives for this call only)."""
    import torch

    cols = torch.arange(out.shape[1], device=out.device, dtype=row_len.dtype)
    return out.masked_fill_(cols.unsqueeze(0) >= row_len, float("-inf"))


def _lookup_plan(q: Any, kv_cache: Any, weights: Any, lens: Any, block_table: Any, schedule: Any, max_len: Any,
                 clean: Any, indices: Any) -> tuple[Any, ...]:
    """A cached plan for these objects (validated again in full), else a new one."""
    global _LAST
    p = _plan(q, kv_cache, weights, lens, block_table, schedule, max_len, clean, indices)
    if not _env.debug():
        _LAST = p
    return p


# --- the upstream calls of this module (see dgcompat._calls) -------------------------------------

from ._calls import UpstreamCall  # noqa: E402  (kept with the declarations it builds)

_MQA_ROW_POSITIONAL: tuple[tuple[str, str, tuple[Any, ...]], ...] = (
    # _bind_mqa: (.., clean) without max_seqlen_k, (.., clean, max_k) natively, (.., max_k) emulated.
    ("clean_logits", "mqa_clean_logits", ("native",)),
    ("max_seqlen_k", "mqa_max_seqlen_k", ("required", "positive", "optional")),
)
_MQA_POSITIONAL = ("q", "kv", "weights", "ks|cu_seq_len_k_start", "ke|cu_seq_len_k_end")
_PAGED_POSITIONAL = ("q", "kv_cache|fused_kv_cache", "weights", "context_lens", "block_table", "schedule_meta",
                     "max_context_len")

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
    # The fp8 name gets clean_logits=False at #7 only where it has no default (dgcompat masks itself);
    # the fp8_fp4 name gets a (q, None) pair.
    UpstreamCall("deep_gemm.fp8_paged_mqa_logits", "dgcompat.fp8_paged_mqa_logits", _PAGED_POSITIONAL,
                 row_positional=(("clean_logits", "paged_clean_logits_arg", ("required",)),),
                 uses_result=True, selected_by=("paged_mqa_logits", "fp8_paged_mqa_logits")),
    UpstreamCall("deep_gemm.fp8_fp4_paged_mqa_logits", "dgcompat.fp8_paged_mqa_logits", _PAGED_POSITIONAL,
                 uses_result=True, selected_by=("paged_mqa_logits", "fp8_fp4_paged_mqa_logits")),
    UpstreamCall("deep_gemm.get_paged_mqa_logits_metadata", "dgcompat.get_paged_mqa_logits_metadata",
                 ("context_lens", "block_kv", "num_sms"), uses_result=True),
    # indices= (varlen) by keyword, only when the caller passes it and the release has it. The paged
    # logits call passes it the same way (to whichever name paged_mqa_logits selects); the paged_indices
    # row's surface claim checks both functions for the parameter.
    UpstreamCall("deep_gemm.get_paged_mqa_logits_metadata", "dgcompat.get_paged_mqa_logits_metadata",
                 ("context_lens", "block_kv", "num_sms"), ("indices",), uses_result=True,
                 selected_by=("paged_indices", True)),
)
