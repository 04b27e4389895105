"""A no-op stand-in for ``deep_gemm``: the real Python signatures of one release, and nothing else.

The per-call benchmarks time dgcompat's Python layer against calling deep_gemm directly. With the
native layer present, the kernel launch (tens of microseconds of host time on a real wheel, see
docs/performance.md) would drown a sub-microsecond difference, so the native layer is replaced by
functions that take the release's exact parameters and return at once (or return a preallocated
tensor where the release returns one). What remains is the cost of the Python calls themselves.

:func:`write_site` lays the stand-in out the way pip would: ``deep_gemm/__init__.py`` plus a
``sgl_deep_gemm-<version>.dist-info`` whose RECORD carries real hashes, so dgcompat's detection
(which reads distribution metadata, never the module) sees that sgl-deep-gemm release.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

__all__ = ["RELEASES", "source", "owner", "write_site"]

# Functions every emulated release has with the same signature. ``_LOGITS`` / ``_SCHEDULE`` are
# what the logits and metadata calls hand back; the benchmark sets them before timing (a real
# release allocates them on the device, which is upstream's cost in both columns).
_COMMON = '''
import torch

_LOGITS = None
_SCHEDULE = None
_STATE = {"num_sms": 132, "pdl": False, "tc_util": 100}


def get_num_sms():
    return _STATE["num_sms"]


def set_num_sms(new_num_sms):
    _STATE["num_sms"] = new_num_sms


def set_tc_util(new_tc_util):
    _STATE["tc_util"] = new_tc_util


def get_tc_util():
    return _STATE["tc_util"]


def set_pdl(enable):
    _STATE["pdl"] = enable


def get_pdl():
    return _STATE["pdl"]


def get_mk_alignment_for_contiguous_layout():
    return 128


def get_m_alignment_for_contiguous_layout():
    return 128


def get_tma_aligned_size(mn, element_size):
    alignment = 16 // element_size
    return (mn + alignment - 1) // alignment * alignment


def get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms, indices=None):
    return _SCHEDULE


def fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                         clean_logits=False, indices=None):
    return _LOGITS


def fp8_fp4_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                             clean_logits=False, logits_dtype=torch.float, indices=None):
    return _LOGITS


def fp8_mqa_logits(q, kv, weights, ks, ke, clean_logits=False, max_seqlen_k=0):
    return _LOGITS


def m_grouped_fp8_fp4_gemm_nt_contiguous(a, b, d, grouped_layout, recipe=None, recipe_a=None, recipe_b=None,
                                         compiled_dims='nk', disable_ue8m0_cast=False, use_psum_layout=False,
                                         ensure_zero_padding=True, expected_m_for_psum_layout=None):
    return None


m_grouped_fp8_gemm_nt_contiguous = m_grouped_fp8_fp4_gemm_nt_contiguous


def m_grouped_bf16_gemm_nt_contiguous(a, b, d, grouped_layout, compiled_dims='nk', use_psum_layout=False,
                                      ensure_zero_padding=True, expected_m_for_psum_layout=None):
    return None


def m_grouped_fp8_fp4_gemm_nt_masked(a, b, d, masked_m, expected_m, recipe=None, recipe_a=None, recipe_b=None,
                                     compiled_dims='nk', disable_ue8m0_cast=False):
    return None


fp8_m_grouped_gemm_nt_masked = m_grouped_fp8_fp4_gemm_nt_masked


def m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m, compiled_dims='nk'):
    return None


bf16_m_grouped_gemm_nt_masked = m_grouped_bf16_gemm_nt_masked
'''

# sgl-deep-gemm 0.1.4: tvm-ffi binding (returned tensors cross DLPack; dgcompat's collapsed-strides
# and raw-return rows are active), no alpha=, masked GEMM only under the fp8_m_grouped_* alias.
_V014 = '''"""No-op stand-in for sgl-deep-gemm 0.1.4.

The real package's __init__ does ``import tvm_ffi`` and forwards every call to ``_C`` (a tvm-ffi
module); here each function has the release's signature and returns at once.
"""
''' + _COMMON + '''

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
'''

# sgl-deep-gemm 0.2.3: TORCH_LIBRARY binding (genuine torch.Tensor returns), alpha= on the dense
# GEMMs, m_grouped_fp8_gemm_nt_masked under its own name.
_V023 = '''"""No-op stand-in for sgl-deep-gemm 0.2.3.

The real package's __init__ calls ``torch.ops.load_library`` on ``_C.so`` (TORCH_LIBRARY ops) and
forwards every call to ``torch.ops.deep_gemm``; here each function has the release's signature and
returns at once.
"""
''' + _COMMON + '''

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
'''

# sglang-kernel 0.4.2's bundled copy: every function is a lazy-init wrapper ``f(*args, **kwargs)`` around a
# TORCH_LIBRARY op of the bundled schema (dgcompat reads the parameters from the op's schema, as on the
# real bundle); the masked GEMM returns (None, None) without overlap.
_BUNDLED_042 = '''"""No-op stand-in for the deep_gemm copy bundled in sglang-kernel 0.4.2.

The real package registers TORCH_LIBRARY ops from deep_gemm_cpp and wraps each in a Python function that
initializes the library on first use and forwards ``*args, **kwargs`` to the op; here each op has the
bundled schema's parameters and returns at once.
"""
import torch

_LOGITS = None
_SCHEDULE = None
_STATE = {"num_sms": 132, "mode": 0, "init": False}


class _Argument:
    def __init__(self, name, default_value):
        self.name = name
        self.default_value = default_value


class _Schema:
    def __init__(self, params):
        self.arguments = [_Argument(n, d) for n, d in params]


class _Op:
    """A torch op as the wrappers see it: a callable with a ``_schema``."""

    def __init__(self, params, result=None):
        self._schema = _Schema(params)
        self._result = result

    def __call__(self, *args, **kwargs):
        return self._result(*args, **kwargs) if callable(self._result) else self._result


def _wrap(op):
    def wrapper(*args, **kwargs):
        if not _STATE["init"]:
            _STATE["init"] = True
        return op(*args, **kwargs)
    return wrapper


def _logits(*args, **kwargs):
    return _LOGITS


def _schedule(*args, **kwargs):
    return _SCHEDULE


_GEMM = [("a", None), ("b", None), ("d", None), ("c", None), ("recipe", None), ("compiled_dims", "nk"),
         ("disable_ue8m0_cast", False)]
fp8_gemm_nt = _wrap(_Op(_GEMM))
bf16_gemm_nt = _wrap(_Op([("a", None), ("b", None), ("d", None), ("c", None), ("compiled_dims", "")]))
m_grouped_fp8_gemm_nt_contiguous = _wrap(_Op([("a", None), ("b", None), ("d", None), ("m_indices", None),
                                              ("recipe", None), ("compiled_dims", "nk"),
                                              ("disable_ue8m0_cast", False)]))
m_grouped_bf16_gemm_nt_contiguous = _wrap(_Op([("a", None), ("b", None), ("d", None), ("m_indices", None),
                                               ("compiled_dims", "")]))
m_grouped_fp8_gemm_nt_masked = _wrap(_Op([("a", None), ("b", None), ("d", None), ("masked_m", None),
                                          ("expected_m", None), ("recipe", None), ("compiled_dims", "nk"),
                                          ("disable_ue8m0_cast", False), ("max_block_n", 256),
                                          ("enable_overlap", False), ("signal", None)], lambda *a, **k: (None, None)))
fp8_m_grouped_gemm_nt_masked = m_grouped_fp8_gemm_nt_masked
m_grouped_bf16_gemm_nt_masked = _wrap(_Op([("a", None), ("b", None), ("d", None), ("masked_m", None),
                                           ("expected_m", None), ("compiled_dims", "")]))
fp8_mqa_logits = _wrap(_Op([("q", None), ("kv", None), ("weights", None), ("cu_seq_len_k_start", None),
                            ("cu_seq_len_k_end", None), ("clean_logits", True)], _logits))
fp8_paged_mqa_logits = _wrap(_Op([("q", None), ("fused_kv_cache", None), ("weights", None), ("context_lens", None),
                                  ("block_table", None), ("schedule_meta", None), ("max_context_len", None),
                                  ("clean_logits", None)], _logits))
get_paged_mqa_logits_metadata = _wrap(_Op([("context_lens", None), ("block_kv", None), ("num_sms", None)], _schedule))
get_num_sms = _wrap(_Op([], lambda: _STATE["num_sms"]))
set_num_sms = _wrap(_Op([("new_num_sms", None)], lambda n: _STATE.update(num_sms=n)))
get_compile_mode = _wrap(_Op([], lambda: _STATE["mode"]))
set_compile_mode = _wrap(_Op([("mode", None)], lambda m: _STATE.update(mode=m)))
get_mk_alignment_for_contiguous_layout = _wrap(_Op([], lambda: 128))
get_tma_aligned_size = _wrap(_Op([("size", None), ("element_size", None)],
                                 lambda x, e: (x + 16 // e - 1) // (16 // e) * (16 // e)))
get_mn_major_tma_aligned_tensor = _wrap(_Op([("a", None)], lambda sf: sf))
get_mn_major_tma_aligned_packed_ue8m0_tensor = _wrap(_Op([("a", None)], lambda sf: sf))
transform_sf_into_required_layout = _wrap(_Op([("sf", None), ("mn", None), ("k", None), ("recipe", None),
                                               ("num_groups", None), ("is_sfa", False),
                                               ("disable_ue8m0_cast", False)], lambda sf, *a, **k: sf))
'''

#: release -> (binding era, the stand-in's ``deep_gemm/__init__.py``, owning distribution, its version).
RELEASES: dict[str, tuple[str, str, str, str]] = {
    "0.1.4": ("tvm-ffi", _V014, "sgl-deep-gemm", "0.1.4"),
    "0.2.3": ("torch-library", _V023, "sgl-deep-gemm", "0.2.3"),
    "sglang-kernel-0.4.2": ("torch-library", _BUNDLED_042, "sglang-kernel", "0.4.2"),
}


def source(version: str) -> str:
    """The stand-in ``deep_gemm/__init__.py`` for an emulated release (a key of :data:`RELEASES`)."""
    try:
        return RELEASES[version][1]
    except KeyError:
        raise ValueError(f"no stand-in for {version}; known: {', '.join(RELEASES)}") from None


def owner(version: str) -> tuple[str, str]:
    """(distribution, version) of the emulated release ``version``."""
    return RELEASES[version][2], RELEASES[version][3]


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def write_site(root: Path, version: str) -> Path:
    """Write the stand-in for ``version`` and its dist-info into the folder ``root``; return ``root``.

    Put ``root`` first on ``sys.path`` (``PYTHONPATH``) of a fresh interpreter to make it the
    installed deep_gemm.
    """
    root.mkdir(parents=True, exist_ok=True)
    data = source(version).encode()
    pkg = root / "deep_gemm"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_bytes(data)
    dist, dist_version = owner(version)
    info = root / f"{dist.replace('-', '_')}-{dist_version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {dist_version}\n")
    (info / "RECORD").write_text(
        f"deep_gemm/__init__.py,{_digest(data)},{len(data)}\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n")
    return root
