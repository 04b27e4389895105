"""No-op stand-in for sgl-deep-gemm 0.2.3.

The real package's __init__ calls ``torch.ops.load_library`` on ``_C.so`` (TORCH_LIBRARY ops) and
forwards every call to ``torch.ops.deep_gemm``; here each function has the release's signature and
returns at once.

A part of a stand-in (:mod:`testsupport.stand_in`), placed after the common part.
"""

import typing as _typing

if _typing.TYPE_CHECKING:  # defined by the common part, before this one in the joined module
    from ._common import m_grouped_fp8_fp4_gemm_nt_masked


def fp8_fp4_gemm_nt(a, b, d, c=None, recipe=None, recipe_a=None, recipe_b=None, compiled_dims='',
                    disable_ue8m0_cast=False, alpha=None):
    return None


fp8_gemm_nt = fp8_fp4_gemm_nt


def bf16_gemm_nt(a, b, d, c=None, compiled_dims='', alpha=None):
    return None


m_grouped_fp8_gemm_nt_masked = m_grouped_fp8_fp4_gemm_nt_masked


def get_mn_major_tma_aligned_tensor(sf):
    return sf


def get_mn_major_tma_aligned_packed_ue8m0_tensor(sf, psum_layout=None):
    return sf


def transform_sf_into_required_layout(sf, mn, k, recipe, num_groups=None, is_sfa=None, disable_ue8m0_cast=False,
                                      psum_layout=None):
    return sf
