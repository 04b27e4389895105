"""The upstream calls dgcompat's adapters make, declared as data.

Each :class:`UpstreamCall` says which deep_gemm callable an adapter calls, which arguments it
passes by position and which by keyword, on which releases (``selected_by`` a capability), and
whether it reads the result. The certification wing's intake checks every declaration against a
release's extracted surface, so a release that moves or renames a parameter dgcompat relies on is
caught before it is deployed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["UpstreamCall", "CALLS", "all_calls"]

_DG = "deep_gemm."


def _dg(name: str) -> str:
    return _DG + name


@dataclass(frozen=True)
class UpstreamCall:
    """One upstream callable an adapter in dgcompat calls, and what about it the call relies on.

    Parameter entries are names as the releases spell them; ``"a|b"`` accepts either name and
    ``"*"`` any name (the argument is passed by position, so only the slot matters).
    """

    symbol: str
    """``deep_gemm.<name>`` or ``_C.<op>`` (a native op called directly)."""
    caller: str
    """The dgcompat function whose adapter makes the call."""
    positional: tuple[str, ...] = ()
    """Arguments passed by position, in order."""
    keywords: tuple[str, ...] = ()
    """Arguments passed by keyword."""
    row_positional: tuple[tuple[str, str, tuple[Any, ...]], ...] = ()
    """Further positional arguments whose presence rows decide: ``(param, capability, values where passed)``."""
    uses_result: bool = False
    """The adapter reads what the call returns."""
    passthrough: bool = False
    """:func:`dgcompat.resolve` may hand the upstream object to engines, so the documented positions of the
    keyword arguments (right after the positional ones, in order) are part of the contract too."""
    selected_by: tuple[str, Any] | None = None
    """``(capability, value)``: called only where the release's capability has that value."""
    alternatives: tuple[str, ...] = ()
    """Symbols the adapter falls back to when this one is missing."""
    optional: bool = False
    """The adapter copes with the symbol's absence (``getattr`` with a no-op fallback)."""

    def in_effect(self, caps: Any) -> bool:
        """Whether the adapter calls this symbol on a release with ``caps`` (None: unknown, assume so).

        ``caps`` is a :class:`~dgcompat.table.Capabilities` or any object with the same attributes.
        """
        if caps is None or self.selected_by is None:
            return True
        capability, value = self.selected_by
        return bool(getattr(caps, capability) == value)

    def expected_positional(self, caps: Any) -> tuple[str, ...]:
        """Every argument passed by position on a release with ``caps`` (None: every possible one)."""
        extra = tuple(p for p, cap, values in self.row_positional if caps is None or getattr(caps, cap) in values)
        return self.positional + extra

    def relied_names(self) -> frozenset[str]:
        """Every parameter name this call passes (by position or keyword) on some release."""
        names: set[str] = set()
        for entry in self.positional + self.keywords + tuple(p for p, _c, _v in self.row_positional):
            names.update(n for n in entry.split("|") if n != "*")
        return frozenset(names)


_MQA_ROW_POSITIONAL: tuple[tuple[str, str, tuple[Any, ...]], ...] = (
    # indexer._bind_mqa: (.., clean) without max_seqlen_k, (.., clean, max_k) natively, (.., max_k) emulated.
    ("clean_logits", "mqa_clean_logits", ("native",)),
    ("max_seqlen_k", "mqa_max_seqlen_k", ("required", "optional")),
)
_MQA_POSITIONAL = ("q", "kv", "weights", "ks|cu_seq_len_k_start", "ke|cu_seq_len_k_end")
_PAGED_POSITIONAL = ("q", "kv_cache|fused_kv_cache", "weights", "context_lens", "block_table", "schedule_meta",
                     "max_context_len")
_CONTIGUOUS_POSITIONAL = ("a", "b", "d", "grouped_layout|m_indices")
_MASKED_POSITIONAL = ("a", "b", "d", "masked_m", "expected_m")

#: Every upstream callable dgcompat's adapters (gemm, moe, indexer, scales, runtime) call, and how.
CALLS: tuple[UpstreamCall, ...] = (
    # gemm.py: impl(a, b, d, c, recipe) by position; resolve() returns the upstream function itself.
    UpstreamCall(_dg("fp8_gemm_nt"), "dgcompat.fp8_gemm_nt", ("a", "b", "d", "c", "recipe"), passthrough=True),
    UpstreamCall(_dg("bf16_gemm_nt"), "dgcompat.bf16_gemm_nt", ("a", "b", "d", "c"), passthrough=True),
    # moe.py: the layout tensor always by position (m_indices / grouped_layout), recipe by keyword.
    UpstreamCall(_dg("m_grouped_fp8_gemm_nt_contiguous"), "dgcompat.m_grouped_fp8_gemm_nt_contiguous",
              _CONTIGUOUS_POSITIONAL, ("recipe",)),
    UpstreamCall(_dg("m_grouped_bf16_gemm_nt_contiguous"), "dgcompat.m_grouped_bf16_gemm_nt_contiguous",
              _CONTIGUOUS_POSITIONAL, selected_by=("bf16_grouped_contiguous", True)),
    UpstreamCall(_dg("m_grouped_fp8_gemm_nt_masked"), "dgcompat.m_grouped_fp8_gemm_nt_masked", _MASKED_POSITIONAL,
              ("recipe",), selected_by=("masked_gemm", "m_grouped_fp8_gemm_nt_masked")),
    UpstreamCall(_dg("fp8_m_grouped_gemm_nt_masked"), "dgcompat.m_grouped_fp8_gemm_nt_masked", _MASKED_POSITIONAL,
              ("recipe",), selected_by=("masked_gemm", "fp8_m_grouped_gemm_nt_masked")),
    UpstreamCall(_dg("m_grouped_bf16_gemm_nt_masked"), "dgcompat.m_grouped_bf16_gemm_nt_masked", _MASKED_POSITIONAL,
              passthrough=True, selected_by=("bf16_grouped_masked", True),
              alternatives=(_dg("bf16_m_grouped_gemm_nt_masked"),)),
    # indexer.py
    UpstreamCall(_dg("fp8_mqa_logits"), "dgcompat.fp8_mqa_logits", _MQA_POSITIONAL, row_positional=_MQA_ROW_POSITIONAL,
              uses_result=True, selected_by=("mqa_logits", "fp8_mqa_logits")),
    UpstreamCall(_dg("fp8_fp4_mqa_logits"), "dgcompat.fp8_mqa_logits", _MQA_POSITIONAL,
              row_positional=_MQA_ROW_POSITIONAL, uses_result=True, selected_by=("mqa_logits", "fp8_fp4_mqa_logits")),
    # The fp8 name gets clean_logits=False at #7 only where it has no default (dgcompat masks itself);
    # the fp8_fp4 name gets a (q, None) pair.
    UpstreamCall(_dg("fp8_paged_mqa_logits"), "dgcompat.fp8_paged_mqa_logits", _PAGED_POSITIONAL,
              row_positional=(("clean_logits", "paged_clean_logits_arg", ("required",)),),
              uses_result=True, selected_by=("paged_mqa_logits", "fp8_paged_mqa_logits")),
    UpstreamCall(_dg("fp8_fp4_paged_mqa_logits"), "dgcompat.fp8_paged_mqa_logits", _PAGED_POSITIONAL,
              uses_result=True, selected_by=("paged_mqa_logits", "fp8_fp4_paged_mqa_logits")),
    UpstreamCall(_dg("get_paged_mqa_logits_metadata"), "dgcompat.get_paged_mqa_logits_metadata",
              ("context_lens", "block_kv", "num_sms"), uses_result=True),
    # indices= (varlen) by keyword, only when the caller passes it and the release has it. The paged
    # logits call passes it the same way (to whichever name paged_mqa_logits selects); the paged_indices
    # row's surface claim checks both functions for the parameter.
    UpstreamCall(_dg("get_paged_mqa_logits_metadata"), "dgcompat.get_paged_mqa_logits_metadata",
              ("context_lens", "block_kv", "num_sms"), ("indices",), uses_result=True,
              selected_by=("paged_indices", True)),
    # scales.py
    UpstreamCall(_dg("transform_sf_into_required_layout"), "dgcompat.transform_sf_into_required_layout",
              ("sf", "mn", "k", "recipe", "num_groups", "is_sfa"), uses_result=True),
    UpstreamCall(_dg("get_mn_major_tma_aligned_tensor"), "dgcompat.get_mn_major_tma_aligned_tensor", ("*",),
              uses_result=True, passthrough=True, alternatives=(_dg("utils.layout.get_mn_major_tma_aligned_tensor"),)),
    UpstreamCall(_dg("get_mn_major_tma_aligned_packed_ue8m0_tensor"),
              "dgcompat.get_mn_major_tma_aligned_packed_ue8m0_tensor", ("*",), uses_result=True, passthrough=True,
              alternatives=(_dg("utils.layout.get_mn_major_tma_aligned_packed_ue8m0_tensor"),)),
    # runtime.py
    UpstreamCall(_dg("get_mk_alignment_for_contiguous_layout"), "dgcompat.get_mk_alignment_for_contiguous_layout",
              uses_result=True, alternatives=(_dg("get_m_alignment_for_contiguous_layout"),)),
    UpstreamCall(_dg("get_num_sms"), "dgcompat.get_num_sms", uses_result=True, passthrough=True),
    UpstreamCall(_dg("set_num_sms"), "dgcompat.set_num_sms", ("*",), passthrough=True),
    UpstreamCall(_dg("set_pdl"), "dgcompat.set_pdl", ("*",), selected_by=("pdl", "top-level")),
    UpstreamCall(_dg("get_pdl"), "dgcompat.get_pdl", uses_result=True, selected_by=("pdl", "top-level")),
    UpstreamCall("_C.set_pdl", "dgcompat.set_pdl", ("*",), selected_by=("pdl", "native")),
    UpstreamCall("_C.get_pdl", "dgcompat.get_pdl", uses_result=True, selected_by=("pdl", "native")),
    UpstreamCall(_dg("set_compile_mode"), "dgcompat.compile_mode", ("*",), selected_by=("compile_mode", True),
              optional=True),
    UpstreamCall(_dg("get_compile_mode"), "dgcompat.compile_mode", uses_result=True,
              selected_by=("compile_mode", True), optional=True),
)


def all_calls() -> tuple[UpstreamCall, ...]:
    """Every declared upstream call, in declaration order."""
    return CALLS
