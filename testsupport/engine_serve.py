"""A serving process written the way engines call deep_gemm (not with the warmup's own call code), for the
warmup coverage tests: row-major float32 activation scales passed as they are or through the layout helpers,
MN-major TMA-aligned ones, MoE contiguous and masked, the paged indexer eagerly at every batch, the ragged
indexer. ``deep_gemm`` is dgcompat (``SERVE_VIA=install``: run under ``python -m dgcompat run``) or the
module dgcompat's tests import as ``dg``.

Run as a script: ``python engine_serve.py '<json list of [kind, args, ms]>'``; prints ``served <calls>``.
"""

import json
import os
import sys

import torch

if os.environ.get("SERVE_VIA") == "install":
    import deep_gemm as dg  # dgcompat, installed as deep_gemm by python -m dgcompat run
    from deep_gemm.utils.layout import get_col_major_tma_aligned_tensor
else:
    import dgcompat as dg
    from dgcompat.utils.layout import get_col_major_tma_aligned_tensor
want = json.loads(sys.argv[1])
f8 = torch.float8_e4m3fn

def tma(sf: torch.Tensor) -> torch.Tensor:
    mn, k = sf.shape[-2:]
    al = -(-mn // 4) * 4
    out = torch.empty((*sf.shape[:-2], k, al)).transpose(-1, -2)[..., :mn, :]
    out.copy_(sf)
    return out

def dense(n: int, k: int, m: int) -> None:
    a, sf = torch.empty(m, k, dtype=f8), torch.ones(m, k // 128)       # a per-token cast: row-major scales
    b = (torch.empty(n, k, dtype=f8), torch.ones(-(-n // 128), k // 128))
    d = torch.empty(m, n, dtype=torch.bfloat16)
    dg.fp8_gemm_nt((a, sf), b, d)
    dg.fp8_gemm_nt((a, dg.get_mn_major_tma_aligned_tensor(sf)), b, d)
    dg.fp8_gemm_nt((a, get_col_major_tma_aligned_tensor(sf)), b, d)
    dg.fp8_gemm_nt((a, dg.transform_sf_into_required_layout(sf, m, k, (1, 128, 128), is_sfa=True)), b, d)
    dg.fp8_gemm_nt((a, tma(sf)), b, d)

def contiguous(e: int, n: int, k: int, m: int) -> None:
    a, sf = torch.empty(m, k, dtype=f8), torch.ones(m, k // 128)
    b = (torch.empty(e, n, k, dtype=f8), torch.ones(e, -(-n // 128), k // 128))
    d, ids = torch.empty(m, n, dtype=torch.bfloat16), torch.zeros(m, dtype=torch.int32)
    dg.m_grouped_fp8_gemm_nt_contiguous((a, sf), b, d, ids)
    dg.m_grouped_fp8_gemm_nt_contiguous((a, dg.get_mn_major_tma_aligned_tensor(sf)), b, d, ids)

def masked(e: int, n: int, k: int, max_m: int, m: int) -> None:
    a, sf = torch.empty(e, max_m, k, dtype=f8), torch.ones(e, max_m, k // 128)
    b = (torch.empty(e, n, k, dtype=f8), torch.ones(e, -(-n // 128), k // 128))
    d, mm = torch.empty(e, max_m, n, dtype=torch.bfloat16), torch.full((e,), m, dtype=torch.int32)
    dg.fp8_m_grouped_gemm_nt_masked((a, sf), b, d, mm, m)
    dg.fp8_m_grouped_gemm_nt_masked((a, dg.get_mn_major_tma_aligned_tensor(sf)), b, d, mm, m)

def paged(h: int, dim: int, block_kv: int, next_n: int, ctx: int, batch: int) -> None:
    blocks = -(-ctx // block_kv)
    q = torch.empty(batch, next_n, h, dim, dtype=f8)
    kv = torch.zeros(blocks, block_kv, 1, dim + 4, dtype=torch.uint8)
    w = torch.empty(batch * next_n, h)
    lens = torch.full((batch, next_n), ctx, dtype=torch.int32)
    table = torch.arange(blocks, dtype=torch.int32).repeat(batch, 1)
    sched = dg.get_paged_mqa_logits_metadata(lens, block_kv, dg.get_num_sms())
    dg.fp8_paged_mqa_logits(q, kv, w, lens, table, sched, ctx, clean_logits=False)

def ragged(h: int, dim: int, nk: int, m: int) -> None:
    q = torch.empty(m, h, dim, dtype=f8)
    kv = (torch.empty(nk, dim, dtype=f8), torch.ones(nk))
    ks, ke = torch.zeros(m, dtype=torch.int32), torch.full((m,), nk, dtype=torch.int32)
    dg.fp8_mqa_logits(q, kv, torch.empty(m, h), ks, ke, clean_logits=False)

for kind, args, ms in want:
    for m in ms:
        globals()[kind](*args, m)
print("served", sum(len(ms) for _k, _a, ms in want))
