"""dgcompat's pure-torch reference presented as a deep_gemm module: exactly deep_gemm's names, nothing else.

``DGCOMPAT_BACKEND=reference`` binds the stable surface to this module as if it were ``deep_gemm``
(what :func:`dgcompat.passthrough_names` lists there, and what ``deep_gemm.<name>`` forwards to under
the install). Its process state is deep_gemm's: the SM count set by :func:`set_num_sms` and the PDL
switch. Every name below that does not start with an underscore is one of deep_gemm's; the module
deliberately has no ``from __future__`` import (which would add a name) and imports under
underscore names.
"""

from typing import Any

from dgcompat import _device
from dgcompat import _math
from dgcompat.errors import BadArgumentError as _BadArgumentError

from . import _attention
from . import _common
from . import _gemm
from . import _scales

__all__ = [
    "align", "ceil_div", "ceil_to_ue8m0", "per_token_cast_to_fp8", "per_block_cast_to_fp8", "get_tma_aligned_size",
    "get_mn_major_tma_aligned_tensor", "get_mn_major_tma_aligned_packed_ue8m0_tensor",
    "transform_sf_into_required_layout", "get_num_sms", "set_num_sms", "set_pdl", "get_pdl",
    "get_mk_alignment_for_contiguous_layout", "fp8_gemm_nt", "bf16_gemm_nt", "m_grouped_fp8_gemm_nt_contiguous",
    "m_grouped_fp8_gemm_nt_masked", "m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_nt_masked",
    "fp8_mqa_logits", "fp8_paged_mqa_logits", "get_paged_mqa_logits_metadata", "fp8_fp4_mqa_logits",
    "fp8_fp4_paged_mqa_logits",
]

align = _math.align
ceil_div = _math.ceil_div
ceil_to_ue8m0 = _scales.ceil_to_ue8m0
per_token_cast_to_fp8 = _scales.per_token_cast_to_fp8
per_block_cast_to_fp8 = _scales.per_block_cast_to_fp8
get_tma_aligned_size = _scales.get_tma_aligned_size
get_mn_major_tma_aligned_tensor = _scales.get_mn_major_tma_aligned_tensor
get_mn_major_tma_aligned_packed_ue8m0_tensor = _scales.get_mn_major_tma_aligned_packed_ue8m0_tensor
transform_sf_into_required_layout = _scales.transform_sf_into_required_layout
fp8_gemm_nt = _gemm.fp8_gemm_nt
bf16_gemm_nt = _gemm.bf16_gemm_nt
m_grouped_fp8_gemm_nt_contiguous = _gemm.m_grouped_fp8_gemm_nt_contiguous
m_grouped_fp8_gemm_nt_masked = _gemm.m_grouped_fp8_gemm_nt_masked
m_grouped_bf16_gemm_nt_contiguous = _gemm.m_grouped_bf16_gemm_nt_contiguous
m_grouped_bf16_gemm_nt_masked = _gemm.m_grouped_bf16_gemm_nt_masked
fp8_mqa_logits = _attention.fp8_mqa_logits
fp8_paged_mqa_logits = _attention.fp8_paged_mqa_logits
get_paged_mqa_logits_metadata = _attention.get_paged_mqa_logits_metadata
# upstream DeepGEMM 2.8.1's signatures (vLLM 0.34.0's vendored copy): q as a (values, scales or None) pair,
# FP8 / MX FP8 / FP4 inputs, logits_dtype float32 or bfloat16.
fp8_fp4_mqa_logits = _attention.fp8_fp4_mqa_logits
fp8_fp4_paged_mqa_logits = _attention.fp8_fp4_paged_mqa_logits

# The process state deep_gemm's native library keeps: the SM count (None: the device's) and the PDL switch.
_state: dict[str, Any] = {"num_sms": None, "pdl": False}


def get_num_sms() -> int:
    """SMs a launch would use (int): the device's (:func:`dgcompat._device.sm_count`) unless :func:`set_num_sms`
    set fewer."""
    n = _state["num_sms"]
    return _device.sm_count() if n is None else int(n)


def set_num_sms(new_num_sms: int) -> None:
    """Limit launches to ``new_num_sms`` SMs (int): ``1 <= new_num_sms <=`` the device's count, as deep_gemm
    asserts."""
    n = _common.need_int("set_num_sms", "new_num_sms", new_num_sms, minimum=1)
    limit = _device.sm_count()
    if n > limit:
        raise _BadArgumentError("set_num_sms", "new_num_sms", f"at most the device's {limit} SMs", repr(n))
    _state["num_sms"] = n


def set_pdl(enable: bool) -> None:
    """Turn programmatic dependent launch on or off (bool; the reference only keeps the flag)."""
    _state["pdl"] = bool(enable)


def get_pdl() -> bool:
    """The PDL flag (bool)."""
    return bool(_state["pdl"])


def get_mk_alignment_for_contiguous_layout() -> int:
    """Row alignment of the contiguous grouped layout (int): :data:`dgcompat.reference.MK_ALIGNMENT`."""
    return _common.MK_ALIGNMENT


def _reset_state() -> None:
    """Forget :func:`set_num_sms` / :func:`set_pdl` (the state a fresh deep_gemm starts with)."""
    _state.update(num_sms=None, pdl=False)
