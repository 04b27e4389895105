"""No-op stand-in for sgl-deep-gemm 0.1.4.

The real package's __init__ does ``import tvm_ffi`` and forwards every call to ``_C`` (a tvm-ffi
module); here each function has the release's signature and returns at once.

A part of a stand-in (:mod:`testsupport.stand_in`), placed after the common part.
"""


def fp8_fp4_gemm_nt(a, b, d, c=None, recipe=None, recipe_a=None, recipe_b=None, compiled_dims='',
                    disable_ue8m0_cast=False):
    return None


fp8_gemm_nt = fp8_fp4_gemm_nt


def bf16_gemm_nt(a, b, d, c=None, compiled_dims=''):
    return None


def get_mn_major_tma_aligned_tensor(sf):
    return sf


def get_mn_major_tma_aligned_packed_ue8m0_tensor(sf):
    return sf


def transform_sf_into_required_layout(sf, mn, k, recipe, num_groups=None, is_sfa=None, disable_ue8m0_cast=False):
    return sf
