"""The grouped GEMMs of the 'nk' releases (sgl-deep-gemm 0.2.5, upstream 2.8.1), with their full signatures.

A part of a fake release (see :mod:`testsupport.fakes`), placed after the common part.
"""

import typing as _typing

if _typing.TYPE_CHECKING:  # defined by the part before this one in the joined module
    from ._common import _R, _grouped_contig, _masked


def m_grouped_fp8_fp4_gemm_nt_contiguous(a, b, d, grouped_layout, recipe=None, recipe_a=None, recipe_b=None,
        compiled_dims="nk", disable_ue8m0_cast=False, use_psum_layout=False, ensure_zero_padding=True,
        expected_m_for_psum_layout=None, epilogue=None):
    _grouped_contig(a, b, d, grouped_layout)
m_grouped_fp8_gemm_nt_contiguous = m_grouped_fp8_fp4_gemm_nt_contiguous

def m_grouped_fp8_fp4_gemm_nt_masked(a, b, d, masked_m, expected_m, recipe=None, recipe_a=None, recipe_b=None,
        compiled_dims="nk", disable_ue8m0_cast=False, epilogue=None):
    _masked(a, b, d, masked_m, expected_m)
m_grouped_fp8_gemm_nt_masked = m_grouped_fp8_fp4_gemm_nt_masked


def m_grouped_bf16_gemm_nt_contiguous(a, b, d, grouped_layout, compiled_dims="nk", use_psum_layout=False,
        ensure_zero_padding=True, expected_m_for_psum_layout=None, epilogue=None):
    _R.m_grouped_bf16_gemm_nt_contiguous(a, b, d, grouped_layout)

def m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m, compiled_dims="nk", epilogue=None):
    _R.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m)
