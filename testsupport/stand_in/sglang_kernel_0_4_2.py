"""No-op stand-in for the deep_gemm copy bundled in sglang-kernel 0.4.2.

The real package registers TORCH_LIBRARY ops from deep_gemm_cpp and wraps each in a Python function that
initializes the library on first use and forwards ``*args, **kwargs`` to the op; here each op has the
bundled schema's parameters and returns at once.

A whole stand-in by itself (:mod:`testsupport.stand_in`).
"""

import torch  # noqa: F401 - the real package imports torch before registering its ops

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
