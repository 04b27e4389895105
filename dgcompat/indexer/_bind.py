"""The upstream paged-MQA calls, bound once per release: the schedule builder and the logits kernel (:data:`B`)."""

from __future__ import annotations

from typing import Any
from typing import Callable

from .. import _binding
from .._backend import load
from .._checks import as_torch
from .._checks import release_label
from .._checks import translate
from ..errors import UnsupportedFeatureError
from ..table import capabilities
from . import _sm100
from ._state import STATE

__all__ = ["B", "bind_metadata", "bind_paged", "bind_paged_varlen", "bind_paged_fp8_fp4", "native_metadata",
           "no_diagnosis"]


def bind_metadata() -> Callable[..., Any]:
    """The upstream metadata call as ``f(lens, block_kv, num_sms, indices)``."""
    mod = load()
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


def no_diagnosis(*_args: Any) -> None:
    """Arguments were checked up front; whatever deep_gemm rejects is reported as a KernelError."""


def bind_paged_common() -> tuple[Any, str, Any]:
    """The paged-logits function the table selects, its name and the capabilities; records torch's tensor type."""
    import torch

    STATE.tensor_type, STATE.dtype_type, STATE.from_dlpack = torch.Tensor, torch.dtype, torch.utils.dlpack.from_dlpack
    mod = load()
    caps = capabilities()
    name = caps.paged_mqa_logits
    target = getattr(mod, name) if name else None
    if target is None:
        raise UnsupportedFeatureError("fp8_paged_mqa_logits", "paged MQA logits", release_label())
    return target, name or "", caps


def bind_paged() -> Callable[..., Any]:
    """The upstream paged-logits call as ``f(q, kv, weights, lens, block_table, schedule, max_len)``.

    The upstream function itself where it takes exactly that (clean_logits defaults to False, and
    dgcompat masks clean_logits itself); a small adapter elsewhere. The caller converts a tvm-ffi
    result to a torch tensor.
    """
    target, name, caps = bind_paged_common()
    if caps.indexer_inputs.startswith("mx"):  # SM100 MX contract of 0.2.5 / 2.8.x: dgcompat.indexer._sm100
        return _sm100.paged_refusal("fp8_paged_mqa_logits", str(caps.arch), caps.paged_heads, caps.paged_block_kv,
                                    caps.indexer_weights)
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


def bind_paged_varlen() -> Callable[..., Any]:
    """``f(q, kv, weights, lens, block_table, schedule, max_len, indices)`` (releases with ``indices=``)."""
    target, name, caps = bind_paged_common()
    if caps.indexer_inputs.startswith("mx"):
        return _sm100.paged_refusal("fp8_paged_mqa_logits", str(caps.arch), caps.paged_heads, caps.paged_block_kv,
                                    caps.indexer_weights)
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


def bind_paged_fp8_fp4() -> Callable[..., Any]:
    """``f(q, q_sf, kv, weights, lens, block_table, schedule, max_len, logits_dtype, indices)``: the build's
    ``fp8_fp4_paged_mqa_logits`` with q as the pair ``(q, q_sf)``, ``logits_dtype`` by keyword where the build
    takes it (capability ``paged_logits_dtype``; None: not passed) and ``indices`` by keyword when given (keywords:
    the builds put these parameters in different positions). For scaled (MX / FP4) queries and logits the build
    computes in another dtype; the caller converts a tvm-ffi result to a torch tensor."""
    bind_paged_common()  # records torch's tensor type
    mod = load()
    caps = capabilities()
    target = getattr(mod, "fp8_fp4_paged_mqa_logits", None)
    if target is None:
        def refuse(*_args: Any) -> Any:
            raise UnsupportedFeatureError("fp8_fp4_paged_mqa_logits", "fp8_fp4_paged_mqa_logits", release_label())
        return refuse
    takes_dtype = caps.paged_logits_dtype is not None

    def impl(q: Any, q_sf: Any, kv: Any, w: Any, lens: Any, bt: Any, sched: Any, max_len: int, dtype: Any,
             ix: Any) -> Any:
        if dtype is not None and takes_dtype:
            if ix is None:
                return target((q, q_sf), kv, w, lens, bt, sched, max_len, logits_dtype=dtype)
            return target((q, q_sf), kv, w, lens, bt, sched, max_len, logits_dtype=dtype, indices=ix)
        if ix is None:
            return target((q, q_sf), kv, w, lens, bt, sched, max_len)
        return target((q, q_sf), kv, w, lens, bt, sched, max_len, indices=ix)
    return impl


#: The bound upstream calls of the paged path.
B = _binding.Slots(metadata=bind_metadata, paged=bind_paged, paged_varlen=bind_paged_varlen,
                   paged_fp8_fp4=bind_paged_fp8_fp4)


def native_metadata(fn: str, launch_lens: Any, block_kv: int, num_sms: int, indices: Any) -> Any:
    try:
        return B.metadata(launch_lens, block_kv, num_sms, indices)
    except Exception as exc:
        translate(fn, exc, no_diagnosis)
