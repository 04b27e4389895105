"""Which calls stand for which in identification: the M classes of a release's kernel choice.

deep_gemm's JIT picks a kernel from a call's arguments through its heuristics; M enters them only in a
few ways, so calls whose M falls in one class need the same kernels, and one representative per class is
identified (the largest M of the class: it meets the layout kernels that only some M values need, such
as SM100's UE8M0 packing of MN-major scales, used when ``M % 4 == 0``). Every other call is still run
against the warmed folder by the verify pass, which compiles whatever a class missed, so a class that
is too coarse for some release costs time, never a kernel at serve time; the report says how many
kernels only the verify pass found.

What was read (csrc/jit_kernels/heuristics/*.hpp and impls/*.hpp of sgl-project/DeepGEMM at its
``release/v0.1.2`` branch, the lineage of sgl-deep-gemm 0.1.x since upstream's 2.4.2 merge, and the same
heuristics files of deepseek-ai/DeepGEMM at ``54e2261``, 2.6.1):

- SM90 dense and BF16 GEMMs: block M candidates 64 and 128 (256 with a BF16 output), plus 16 when
  ``M <= 16`` and 32 when ``M <= 32``; every use of M is ``ceil(M / block_m)`` (waves, last-wave
  utilisation, multicast legality) or one of those two thresholds. So M enters through
  ``[M <= 16], [M <= 32], ceil(M / 64)``: classes 1-16, 17-32, then 33-64, 65-128, ...
- SM90 masked GEMMs: block M 64 or 128 from ``expected_m``: classes of ``ceil(M / 64)``.
- SM100 GEMMs: block M any multiple of 16 up to 256 (swap A/B), or 32 / 64 / 128 chosen by thresholds at
  32 and 64: classes of ``ceil(M / 16)``.
- Contiguous grouped GEMMs: block M is the alignment (128) and M a multiple of it: each M is its class.
- Paged indexer: the schedule kernel is compiled per ``align(batch, 32)`` (its template has the aligned
  batch size), the logits kernel not per batch: classes of ``ceil(batch / 32)``.
- Ragged MQA logits: the sequence lengths are launch arguments only: one class.

Other lineages (sgl-deep-gemm 0.0.x and 0.2.x, the copies bundled in sgl-kernel / sglang-kernel, upstream
builds before 2.4.2 or from 2.7, such as vLLM's 2.8.1) get classes of ``ceil(M / 16)`` (``ceil(batch / 32)`` for the paged indexer; each M of
the ragged indexer up to 16 and every 16th beyond): a guess from their block sizes, all multiples of 16,
that the verify pass checks.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Hashable
from collections.abc import Sequence
from dataclasses import dataclass

from packaging.version import Version

from .spec import DenseGemm
from .spec import GroupedGemm
from .spec import PagedIndexer
from .spec import RaggedIndexer
from .spec import Shape

__all__ = ["Rule", "rule_for", "classes"]


def _ceil(m: int, step: int) -> int:
    return -(-m // step)


def _sm90_dense(m: int) -> Hashable:
    return ("<=16",) if m <= 16 else ("<=32",) if m <= 32 else ("/64", _ceil(m, 64))


@dataclass(frozen=True)
class Rule:
    """The class key of each kind of shape for one (release lineage, architecture), and where it comes from."""

    name: str
    dense: Callable[[int], Hashable]
    masked: Callable[[int], Hashable]
    paged: Callable[[int], Hashable]
    ragged: Callable[[int], Hashable]
    read: bool  # taken from the release's source (True) or a guess the verify pass checks (False)

    def key(self, shape: Shape, m: int) -> Hashable:
        if isinstance(shape, DenseGemm):
            return self.dense(m)
        if isinstance(shape, GroupedGemm):
            return m if shape.layout == "contiguous" else self.masked(m)
        if isinstance(shape, PagedIndexer):
            return self.paged(m)
        assert isinstance(shape, RaggedIndexer)
        return self.ragged(m)


_BY_16: Callable[[int], Hashable] = lambda m: _ceil(m, 16)  # noqa: E731
_BY_32: Callable[[int], Hashable] = lambda m: _ceil(m, 32)  # noqa: E731
_ONE: Callable[[int], Hashable] = lambda m: 0  # noqa: E731

SM90_01 = Rule("sgl-deep-gemm 0.1.x lineage, SM90", _sm90_dense, lambda m: _ceil(m, 64), _BY_32, _ONE, True)
SM100_01 = Rule("sgl-deep-gemm 0.1.x lineage, SM100", _BY_16, _BY_16, _BY_32, _ONE, True)
GUESS = Rule("other lineages (a guess)", _BY_16, _BY_16, _BY_32, lambda m: m if m <= 16 else _ceil(m, 16), False)


def rule_for(dist: str | None, version: Version | None, family: str | None) -> Rule:
    """The rule for a release (``dist``, ``version`` as :func:`dgcompat.release` names them) on a GPU family."""
    lineage = version is not None and (
        (dist == "sgl-deep-gemm" and Version("0.1.0") <= version < Version("0.2.0"))
        or (dist == "deep-gemm" and Version("2.4.2") <= version < Version("2.7")))
    if lineage and family == "sm90":
        return SM90_01
    if lineage and family == "sm100":
        return SM100_01
    return GUESS


def classes(rule: Rule, shape: Shape, ms: Sequence[int]) -> dict[Hashable, list[int]]:
    """``ms`` grouped by class, each group sorted, largest M last (the representative)."""
    groups: dict[Hashable, list[int]] = {}
    for m in sorted(set(ms)):
        groups.setdefault(rule.key(shape, m), []).append(m)
    return groups
