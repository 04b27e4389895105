"""Input builders and comparisons shared by the conformance tests.

Everything is small (K a multiple of 128, N a multiple of 64, M up to a few hundred) so that the
CPU tier runs the whole suite over every release in minutes; the same tests run unchanged on a
GPU install, where ``device()`` is ``cuda``.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from packaging.version import Version

import dgcompat
from dgcompat import detection, reference
from dgcompat_conformance.harness.emulation import StandInNotEmulated
from dgcompat_conformance.harness.session import current

__all__ = [
    "tier",
    "device",
    "subject",
    "release",
    "flavor",
    "arch",
    "version_at_least",
    "gen",
    "fp8_token",
    "fp8_block",
    "contiguous_layout",
    "masked_inputs",
    "PagedCase",
    "paged_case",
    "close",
    "valid_close",
    "unless_not_emulated",
]


def tier() -> str:
    """``cpu-tier`` / ``reference`` (harness child), ``gpu`` (harness or direct run with CUDA), or ``direct``."""

    s = current()
    if s is not None:
        return str(s.tier)
    return "gpu" if torch.cuda.is_available() else "direct"


def device() -> torch.device:
    """Where test tensors live: the GPU on the GPU tier, the CPU otherwise."""
    return torch.device("cuda") if tier() == "gpu" else torch.device("cpu")


def subject() -> Any:
    """The module under test: dgcompat, or ``$DGCOMPAT_CONFORMANCE_SUBJECT`` (a deliberately wrong adapter...)."""
    return importlib.import_module(os.environ.get("DGCOMPAT_CONFORMANCE_SUBJECT", "dgcompat"))


def release() -> Any:
    """dgcompat's detection of the deep_gemm in this process (never imports it)."""

    return detection.release()


def flavor() -> str:
    """``sgl`` (sgl-deep-gemm), ``bundled`` (sgl-kernel / sglang-kernel copy), ``upstream`` (upstream
    DeepGEMM 2.x: a source build, vLLM's or TensorRT-LLM's copy), ``reference`` or ``other``."""
    if tier() == "reference":
        return "reference"
    rel = release()
    if rel.source == "sgl-deep-gemm":
        return "sgl"
    if rel.source == "bundled":
        return "bundled"
    if rel.dist == "deep-gemm" and rel.version is not None and rel.refusal is None:
        return "upstream"
    return "other"


def arch() -> str | None:
    """The architecture family under test: the stand-ins' on the CPU tier, else dgcompat's (``sm90``, ...)."""

    s = current()
    if s is not None and s.installed is not None:
        return str(s.installed.profile.arch)
    try:
        return dgcompat.capabilities().arch
    except Exception:  # noqa: BLE001 - no backend: the tests themselves report it
        return None


def version_at_least(v: str) -> bool:
    """Whether the detected release's version is >= ``v`` (False when unknown)."""

    rel = release()
    return rel.version is not None and rel.version >= Version(v)


def gen(seed: int) -> torch.Generator:
    g = torch.Generator(device="cpu")
    g.manual_seed(seed)
    return g


def _randn(shape: tuple[int, ...], g: torch.Generator, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(shape, generator=g) * scale).to(device())


def fp8_token(m: int, k: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A ``(fp8 (m, k), fp32 (m, k/128))`` per-token (1x128) operand."""

    return reference.per_token_cast_to_fp8(_randn((m, k), g))


def fp8_block(n: int, k: int, g: torch.Generator, groups: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A ``(fp8 ([G,] n, k), fp32 ([G,] ceil(n/128), k/128))`` per-block (128x128) operand."""

    if groups is None:
        return reference.per_block_cast_to_fp8(_randn((n, k), g))
    pairs = [reference.per_block_cast_to_fp8(_randn((n, k), g)) for _ in range(groups)]
    return torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])


def contiguous_layout(sizes: list[int], align: int = 128) -> torch.Tensor:
    """``m_indices`` for groups of ``sizes`` rows, each padded to ``align`` rows with -1."""
    parts = []
    for gi, size in enumerate(sizes):
        padded = -(-size // align) * align if size else 0
        part = torch.full((padded,), -1, dtype=torch.int32)
        part[:size] = gi
        parts.append(part)
    out = torch.cat(parts) if parts else torch.empty(0, dtype=torch.int32)
    return out.to(device())


def masked_inputs(groups: int, m_max: int, n: int, k: int, g: torch.Generator) -> dict[str, Any]:
    """FP8 masked-GEMM operands with random per-group row counts."""

    a = [reference.per_token_cast_to_fp8(_randn((m_max, k), g)) for _ in range(groups)]
    b = fp8_block(n, k, g, groups=groups)
    masked = torch.randint(0, m_max + 1, (groups,), generator=g, dtype=torch.int32).to(device())
    return {
        "a": (torch.stack([x[0] for x in a]), torch.stack([x[1] for x in a])),
        "b": b,
        "masked_m": masked,
        "expected_m": max(1, m_max // 2),
    }


@dataclass
class PagedCase:
    """Inputs of one paged-MQA launch in the canonical ``(B, next_n)`` form, plus helpers to re-form them."""

    q: torch.Tensor  # (B, next_n, H, D) fp8
    kv_cache: torch.Tensor  # (blocks, 64, 1, D + 4) uint8
    weights: torch.Tensor  # (B*next_n, H) fp32
    lens_2d: torch.Tensor  # (B, next_n) int32, last column = sequence length
    block_table: torch.Tensor  # (B, max_blocks) int32
    max_context_len: int

    @property
    def batch(self) -> int:
        return int(self.q.shape[0])

    @property
    def next_n(self) -> int:
        return int(self.q.shape[1])

    def context_lens(self, form: str) -> torch.Tensor:
        """``1d`` (B,), ``2d`` (B, next_n) or ``flat`` (B*next_n, 1)."""
        if form == "1d":
            return self.lens_2d[:, -1].contiguous()
        if form == "2d":
            return self.lens_2d.contiguous()
        if form == "flat":
            return self.lens_2d.reshape(-1, 1).contiguous()
        raise ValueError(form)

    def row_lengths(self) -> torch.Tensor:
        """Visible length of every output row (B*next_n,)."""
        return self.lens_2d.reshape(-1).to(torch.int64)

    def block_table_for(self, form: str) -> torch.Tensor:
        """``per_seq`` (B, max_blocks) or ``per_token`` (B*next_n, max_blocks) repeated rows."""
        if form == "per_seq":
            return self.block_table
        if form == "per_token":
            return self.block_table.repeat_interleave(self.next_n, dim=0).contiguous()
        raise ValueError(form)


def paged_case(batch: int, next_n: int, lens: list[int], g: torch.Generator, *, heads: int = 32, dim: int = 128,
               block_kv: int = 64) -> PagedCase:
    """A paged-MQA input whose sequence ``b`` has length ``lens[b]`` (row ``j`` sees ``len - next_n + j + 1``)."""

    max_len = max(max(lens), 1)  # noqa: PLW3301 - no sequences at all is an error
    max_blocks = -(-max_len // block_kv)
    num_blocks = batch * max_blocks + 1
    k = torch.randn((num_blocks, block_kv, dim), generator=g)
    kv_cache = reference.pack_kv_cache(k).to(device())
    perm = torch.randperm(num_blocks, generator=g)[: batch * max_blocks]
    block_table = perm.view(batch, max_blocks).to(torch.int32).to(device())
    q = torch.randn((batch, next_n, heads, dim), generator=g).to(torch.float8_e4m3fn).to(device())
    weights = torch.rand((batch * next_n, heads), generator=g).to(device())
    rows = []
    for length in lens:
        rows.append([max(length - next_n + j + 1, 0) for j in range(next_n)])
    lens_2d = torch.tensor(rows, dtype=torch.int32).to(device())
    return PagedCase(q, kv_cache, weights, lens_2d, block_table, max_blocks * block_kv)


def close(out: torch.Tensor, ref: torch.Tensor, *, atol: float = 2e-2, rtol: float = 2e-2) -> None:
    """Assert two results agree (bf16-level tolerance; both are computed from the same FP8 inputs)."""
    torch.testing.assert_close(out.float().cpu(), ref.float().cpu(), atol=atol, rtol=rtol)


def valid_close(out: torch.Tensor, ref: torch.Tensor, row_lengths: torch.Tensor, *, atol: float = 1e-3,
                rtol: float = 1e-3) -> None:
    """Compare logits only where row ``i`` is visible (``col < row_lengths[i]``): elsewhere they are unspecified."""
    assert tuple(out.shape) == tuple(ref.shape), f"shape {tuple(out.shape)} != {tuple(ref.shape)}"
    cols = torch.arange(out.shape[1])
    mask = cols.unsqueeze(0) < row_lengths.cpu().unsqueeze(1)
    torch.testing.assert_close(out.float().cpu()[mask], ref.float().cpu()[mask], atol=atol, rtol=rtol)


@contextlib.contextmanager
def unless_not_emulated() -> Iterator[None]:
    """Skip (instead of fail) when the CPU tier's stand-in does not emulate the native call reached.

    The exception may arrive wrapped (dgcompat chains the native error as ``__cause__``), so the
    whole chain is searched; any other error propagates.
    """

    try:
        yield
    except Exception as exc:
        seen: BaseException | None = exc
        while seen is not None:
            if isinstance(seen, StandInNotEmulated):
                pytest.skip(f"the CPU tier does not emulate this call: {seen}")
            seen = seen.__cause__ or seen.__context__
        raise
