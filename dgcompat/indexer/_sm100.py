"""The indexer's native contract on SM100 / SM120, where it differs from the stable surface's.

sgl-deep-gemm 0.2.5 and upstream DeepGEMM 2.8 assert, on SM100 (capability ``indexer_inputs`` ``"mx-bf16"``,
or ``"mx"`` for the builds that take float32 weights too: vLLM 0.34.0's 2.8.1; host asserts ``is_mx_sf == (arch_major == 10 or (arch_major == 12 and is_fp4))`` and
``weights.scalar_type() == (arch_major == 10 ? kBFloat16 : kFloat32)``):

- q comes with MX scale factors: ``(q, q_sf)`` with ``q_sf`` int32, four packed UE8M0 exponents
  per 128 values of D (one per 32);
- the KV scales are MX too (int32 packed UE8M0 instead of one float32 per token);
- weights are bfloat16, and so are the logits.

The stable surface takes FP8 q without scale, one float32 scale per key and float32 weights, and
returns float32 logits. Per call, dgcompat either adapts or refuses with a typed error that says
what the release requires:

- **ragged** ``fp8_mqa_logits`` with **bfloat16 weights** (the caller accepts bf16-precision
  logits, as vLLM does): unit MX scales (``0x7F7F7F7F``, four exponents of 2**0) for q and the keys,
  the per-key float32 scale applied to the logits afterwards (``relu(s * x) == s * relu(x)`` for a
  scale ``s >= 0``), the result returned as float32. Exact with respect to what the release
  computes for those inputs.
- ragged with **float32 weights**: refused (:class:`~dgcompat.errors.UnsupportedFeatureError`):
  the release cannot honour float32 weights on SM100, and rounding them silently would change
  every logit.
- **paged** logits: refused. The release reads each token's four scale bytes in the KV cache as
  packed UE8M0 exponents; the stable cache layout stores a float32 there, and rewriting the cache
  per call is not an adaptation dgcompat makes.

SM120 keeps FP8 with float32 scales; its differences (``block_kv`` 32..256 in 0.2.5, 16/32/64
heads) are capability rows that the indexer checks (:func:`check_block_kv`).
"""

from __future__ import annotations

from typing import Any
from typing import Callable

from .._checks import bad
from .._checks import release_label
from ..errors import UnsupportedFeatureError

__all__ = ["UNIT_UE8M0_X4", "unit_mx_scales", "ragged_mqa", "paged_refusal", "check_block_kv"]

#: Four packed UE8M0 exponents of 2**0 (biased exponent 127 in each byte), as one int32.
UNIT_UE8M0_X4 = 0x7F7F7F7F

_REQUIRES = ("on {arch}, deep_gemm {release} computes indexer logits from MX-scaled q and keys (int32 packed "
             "UE8M0 scale factors) and bfloat16 weights, and returns bfloat16 logits (host asserts is_mx_sf and "
             "weights.scalar_type() == kBFloat16)")


def unit_mx_scales(rows: tuple[int, ...], device: Any) -> Any:
    """int32 ``(*rows)`` unit MX scales: one int32 (four UE8M0 exponents) per 128 values of a row."""
    import torch

    return torch.full(rows, UNIT_UE8M0_X4, dtype=torch.int32, device=device)


def _mx_head_dim(fn: str, d: int, release: str, arch: str) -> None:
    if d != 128:
        raise UnsupportedFeatureError(fn, f"head_dim {d} on {arch}", release,
                                      hint=_REQUIRES.format(arch=arch, release=release)
                                      + "; dgcompat supplies unit MX scales only for head_dim 128")


def ragged_mqa(fn: str, target: Callable[..., Any], pad: Callable[[Any, Any], tuple[Any, Any]],
               arch: str, weights: tuple[str, ...] = ("bfloat16",), takes_dtype: bool = False) -> Callable[..., Any]:
    """The ragged MQA launch for a release with the MX contract (see the module docstring).

    ``target`` is the release's ``fp8_fp4_mqa_logits((q, q_sf), (k, k_sf), weights, ks, ke, max_seqlen_k)``;
    ``pad(q, weights)`` zero-pads heads to a count the kernels are built for; ``weights``: the weight dtypes the
    release takes there (capability ``indexer_weights``: bfloat16 only for 0.2.5 / vLLM 0.33.0's 2.8.1, float32
    too for vLLM 0.34.0's); ``takes_dtype``: its function takes ``logits_dtype`` (then bf16 weights are launched
    with ``logits_dtype=torch.bfloat16``, as it asserts). Returns float32 logits.
    """
    import torch

    release = release_label()
    bf16 = torch.bfloat16

    def impl(q: Any, kv: Any, w: Any, ks: Any, ke: Any, clean: bool, max_k: int | None) -> Any:
        if str(w.dtype).replace("torch.", "") not in weights:
            raise UnsupportedFeatureError(
                fn, f"{str(w.dtype).replace('torch.', '')} weights on {arch}", release,
                hint=_REQUIRES.format(arch=arch, release=release)
                + ": pass weights as bfloat16 to accept bf16-precision logits (dgcompat then supplies unit MX "
                  "scales and applies the per-key scale itself)")
        if not isinstance(kv, (tuple, list)) or len(kv) != 2:
            raise bad(fn, "kv", "a (k_fp8 (Nk, D), k_scale float32 (Nk,)) pair", kv)
        k, k_sf = kv
        _mx_head_dim(fn, int(q.shape[-1]), release, arch)
        q, w = pad(q, w)
        nq, h = int(q.shape[0]), int(q.shape[1])
        q_sf = unit_mx_scales((nq, h), q.device)
        kv_sf = unit_mx_scales((int(k.shape[0]),), k.device)
        if takes_dtype and w.dtype is bf16:
            out = target((q, q_sf), (k, kv_sf), w, ks, ke, max_k or 0, logits_dtype=bf16)
        else:
            out = target((q, q_sf), (k, kv_sf), w, ks, ke, max_k or 0)
        out = out.float()
        if max_k:
            # compressed: column j of row i is key ks[i] + j
            cols = ks.long().unsqueeze(1) + torch.arange(out.shape[1], device=out.device)
            out.mul_(k_sf[cols.clamp_(0, max(int(k_sf.shape[0]) - 1, 0))])
        else:
            out.mul_(k_sf.unsqueeze(0))
        if clean:
            c = torch.arange(out.shape[1], device=out.device).unsqueeze(0)
            if max_k:
                invalid = c >= (ke - ks).unsqueeze(1)
            else:
                invalid = (c < ks.unsqueeze(1)) | (c >= ke.unsqueeze(1))
            out.masked_fill_(invalid, float("-inf"))
        return out

    return impl


def paged_refusal(fn: str, arch: str, heads: tuple[int, ...], block_kv: tuple[int, ...],
                  weights: tuple[str, ...] = ("bfloat16",)) -> Callable[..., Any]:
    """A paged launch that always refuses, saying what the release requires there and what the call
    brings (see the module docstring). ``heads`` / ``block_kv`` / ``weights``: the release's host-assert lists on
    ``arch`` (capabilities ``paged_heads`` / ``paged_block_kv`` / ``indexer_weights``)."""
    release = release_label()
    needs = ["q as (q, q_sf) with q_sf int32 packed UE8M0 MX scale factors (one int32 per 128 values of D)",
             "a KV cache whose 4 scale bytes per token are packed UE8M0 exponents",
             "bfloat16 weights (it returns bfloat16 logits)" if weights == ("bfloat16",)
             else f"{' or '.join(weights)} weights"]
    if heads:
        needs.append(f"num_heads in {heads}")
    if block_kv:
        needs.append(f"block_kv in {block_kv}")
    requires = (f"on {arch}, deep_gemm {release}'s paged MQA logits require " + ", ".join(needs)
                + " (host asserts is_mx_sf == (arch_major == 10 or (arch_major == 12 and is_fp4)) and "
                  "weights.scalar_type() == (arch_major == 10 ? kBFloat16 : kFloat32))")

    def impl(q: Any, kv: Any, w: Any, lens: Any, bt: Any, sched: Any, max_len: int, ix: Any = None) -> Any:
        call = (f"this call: FP8 q without scale factors, {str(w.dtype).replace('torch.', '')} weights, "
                f"{int(q.shape[-2])} heads, block_kv {int(kv.shape[1])}, one float32 scale per token in the cache")
        raise UnsupportedFeatureError(
            fn, f"the float32-scaled paged KV cache on {arch}", release,
            hint=f"{requires}; {call}. Rewriting the cache's scales per call is not an adaptation dgcompat makes: "
                 "use the ragged fp8_mqa_logits with bfloat16 weights, DGCOMPAT_BACKEND=reference, or a release "
                 "without this contract")

    return impl


def check_block_kv(fn: str, block_kv: int, allowed: tuple[int, ...], arch: str | None) -> None:
    """Refuse a ``block_kv`` the release's host code asserts against on this architecture."""
    if allowed and block_kv not in allowed:
        raise bad(fn, "block_kv", f"one of {allowed} on {arch} (the release's host assert)", block_kv)
