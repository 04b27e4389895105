"""Benchmarks of dgcompat's cost over calling deep_gemm directly.

``python -m bench`` measures, on the CPU, with a no-op stand-in for deep_gemm's native layer
(:mod:`testsupport.stand_in`), one fresh process per emulated release:

- the host time each hot stable function adds per call (:mod:`bench.overhead`);
- the tensor allocations, writes and views dgcompat's normalizations make per call in steady state
  and per batch (:mod:`bench.allocations`);
- ``import dgcompat`` time with torch already imported, and that it imports no deep_gemm
  (:mod:`bench.importtime`).

``python -m bench --gpu`` times real kernels through dgcompat and directly on a CUDA device with a
real deep_gemm installed (:mod:`bench.gpu`). Benchmarks print and write JSON; nothing here asserts a
timing. docs/performance.md records the numbers and the commands.
"""

from __future__ import annotations

__all__ = ["GOALS"]

#: dgcompat's performance targets, by the key used in the JSON summary (docs/performance.md).
GOALS: dict[str, float] = {
    "gemm_added_ns": 300.0,
    "paged_added_ns": 1000.0,
    "import_ms": 10.0,
    "allocs_per_call": 0.0,
    "gpu_ratio": 1.01,
}
