"""The positional layouts of the ``fp8_fp4`` MQA-logits names, read by the arguments' types.

The builds put different parameters at the same positions after the required ones, and engines call them
positionally in their own build's layout:

========================  =============================  ==============================  ========================
paged position            7                              8                               9
========================  =============================  ==============================  ========================
sgl-deep-gemm <= 0.2.3.x  ``clean_logits`` (bool)        ``logits_dtype`` (dtype)        ``indices`` (Tensor)
sgl-deep-gemm 0.2.5,      ``indices`` (Tensor)           -                               -
vLLM 0.33.0's 2.8.1
vLLM 0.34.0's 2.8.1       ``logits_dtype`` (dtype)       ``indices`` (Tensor)            -
========================  =============================  ==============================  ========================

========================  =============================  ==============================  ========================
ragged position           5                              6                               7
========================  =============================  ==============================  ========================
sgl-deep-gemm <= 0.2.3.x  ``clean_logits`` (bool)        ``max_seqlen_k`` (int)          ``logits_dtype`` (dtype)
sgl-deep-gemm 0.2.5,      ``max_seqlen_k`` (int)         ``schedule_meta`` (Tensor)      -
vLLM 0.33.0's 2.8.1
vLLM 0.34.0's 2.8.1       ``max_seqlen_k`` (int)         ``logits_dtype`` (dtype)        ``schedule_meta`` (Tensor)
========================  =============================  ==============================  ========================

The kinds never collide at one position (a ``bool`` is told from an ``int`` first), so each position is read
by what it holds; the stable functions name their parameters after the first layout. A parameter given twice
(by position in one layout and by keyword) is a :class:`~dgcompat.errors.BadArgumentError`.
"""

from __future__ import annotations

from typing import Any

from .._checks import bad
from .._checks import is_tensor

__all__ = ["paged_positions", "ragged_positions"]


def _is_dtype(x: Any) -> bool:
    import torch

    return isinstance(x, torch.dtype)


def _twice(fn: str, name: str, where: str) -> Any:
    return bad(fn, name, f"given once (position {where} already holds it in this call's layout)", f"{name} twice")


def paged_positions(at7: Any, at8: Any, at9: Any) -> tuple[bool, Any, Any]:
    """``(clean_logits, logits_dtype, indices)`` from what ``fp8_fp4_paged_mqa_logits`` received at positions (or
    under the keywords) 7, 8 and 9: ``clean_logits``, ``logits_dtype``, ``indices``."""
    fn = "fp8_fp4_paged_mqa_logits"
    clean, dtype, indices = False, None, at9
    if at7 is None or isinstance(at7, bool):
        clean = bool(at7)
        if at8 is None or _is_dtype(at8):
            dtype = at8
        else:
            raise bad(fn, "logits_dtype", "None or a torch.dtype (position 8 holds logits_dtype after a bool "
                      "clean_logits at position 7)", at8)
    elif _is_dtype(at7):  # vLLM 0.34.0's layout: (..., max_context_len, logits_dtype, indices)
        dtype = at7
        if _is_dtype(at8):
            raise _twice(fn, "logits_dtype", "7")
        if at8 is not None:
            if not is_tensor(at8):
                raise bad(fn, "indices", "None or an int32 tensor (position 8 after logits_dtype at position 7)", at8)
            if at9 is not None:
                raise _twice(fn, "indices", "8")
            indices = at8
    elif is_tensor(at7):  # sgl-deep-gemm 0.2.5 / vLLM 0.33.0's layout: (..., max_context_len, indices)
        if at9 is not None:
            raise _twice(fn, "indices", "7")
        if at8 is not None and not _is_dtype(at8):
            raise bad(fn, "logits_dtype", "None or a torch.dtype", at8)
        indices, dtype = at7, at8
    else:
        raise bad(fn, "clean_logits", "a bool at position 7 (or the logits_dtype / indices other builds put there)",
                  at7)
    return clean, dtype, indices


def ragged_positions(at5: Any, at6: Any, at7: Any, at8: Any) -> tuple[bool, Any, Any, Any]:
    """``(clean_logits, max_seqlen_k, logits_dtype, schedule_meta)`` from what ``fp8_fp4_mqa_logits`` received at
    positions (or under the keywords) 5 to 8: ``clean_logits``, ``max_seqlen_k``, ``logits_dtype``,
    ``schedule_meta``."""
    fn = "fp8_fp4_mqa_logits"
    schedule = at8
    if at5 is None or isinstance(at5, bool):  # sgl layout: (..., clean_logits, max_seqlen_k, logits_dtype)
        if at6 is not None and (isinstance(at6, bool) or not isinstance(at6, int)):
            raise bad(fn, "max_seqlen_k", "None or an int (position 6 after a bool clean_logits at position 5)", at6)
        if at7 is not None and not _is_dtype(at7):
            raise bad(fn, "logits_dtype", "None or a torch.dtype (position 7 in this layout)", at7)
        return bool(at5), at6, at7, schedule
    if not isinstance(at5, int):
        raise bad(fn, "clean_logits", "a bool at position 5 (or the int max_seqlen_k other builds put there)", at5)
    # upstream layout: (..., max_seqlen_k, [logits_dtype,] schedule_meta)
    max_k, dtype = at5, None
    if isinstance(at6, int):
        raise _twice(fn, "max_seqlen_k", "5")
    if _is_dtype(at6):  # vLLM 0.34.0: (..., max_seqlen_k, logits_dtype, schedule_meta)
        dtype = at6
        if at7 is not None:
            if _is_dtype(at7):
                raise _twice(fn, "logits_dtype", "6")
            if not is_tensor(at7):
                raise bad(fn, "schedule_meta", "None or an int32 tensor (position 7 in this layout)", at7)
            if schedule is not None:
                raise _twice(fn, "schedule_meta", "7")
            schedule = at7
    else:
        if at6 is not None:  # sgl-deep-gemm 0.2.5 / vLLM 0.33.0: (..., max_seqlen_k, schedule_meta)
            if not is_tensor(at6):
                raise bad(fn, "schedule_meta",
                          "None or an int32 tensor (position 6 after max_seqlen_k at position 5)", at6)
            if schedule is not None:
                raise _twice(fn, "schedule_meta", "6")
            schedule = at6
        if at7 is not None and not _is_dtype(at7):
            raise bad(fn, "logits_dtype", "None or a torch.dtype", at7)
        dtype = at7
    return False, max_k, dtype, schedule
