"""Fake ``deep_gemm`` modules shaped like each family of releases, computing with the reference.

They reproduce what engines trip over (parameter names and positions, 1-D vs 2-D lengths, the SM90
next_n limit, a schedule that does not match the launch, return values, collapsed strides) so the
adapters can be tested without a GPU. The real wheels are exercised by the conformance CPU tier.

Each family's ``deep_gemm/__init__.py`` is joined (:mod:`testsupport.parts`) from ``_common`` (native-ish
checks, reference math), for the 'nk' releases ``_grouped_nk``, and the family's own part.
"""

from __future__ import annotations

from ..parts import joined

__all__ = ["FAMILIES", "SGL_013", "SGL_025", "UP_281", "UP_281_LOGITS_DTYPE", "BUNDLED"]

SGL_013 = joined(__name__, "_common", "sgl_0_1_3")
SGL_025 = joined(__name__, "_common", "_grouped_nk", "sgl_0_2_5")
UP_281 = joined(__name__, "_common", "_grouped_nk", "upstream_2_8_1")
# vLLM 0.34.0's build: the same version, its MQA functions redefined after 0.33.0's (the later definition wins)
UP_281_LOGITS_DTYPE = joined(__name__, "_common", "_grouped_nk", "upstream_2_8_1", "upstream_2_8_1_logits_dtype")
BUNDLED = joined(__name__, "_common", "bundled")

#: family -> (distribution, version, ``deep_gemm/__init__.py``).
FAMILIES = {
    "sgl-0.1.3": ("sgl-deep-gemm", "0.1.3", SGL_013),
    "sgl-0.2.5": ("sgl-deep-gemm", "0.2.5", SGL_025),
    "bundled": ("sglang-kernel", "0.4.1.post1", BUNDLED),
    "up-2.8.1": ("deep_gemm", "2.8.1", UP_281),
    "up-2.8.1-logits-dtype": ("deep_gemm", "2.8.1", UP_281_LOGITS_DTYPE),
}
