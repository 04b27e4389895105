"""The GPU tier of the conformance suite: real deep_gemm kernels on a real device.

- :mod:`.abi` is the ABI health check (the release's native library must load, and a tiny call must
  see the tensors it was given), run in a child process; ``dgcompat doctor`` can use it too.
- :mod:`.cases` holds the cases, each runnable alone as ``python -m dgcompat_conformance.gpu.cases CASE_ID``;
  every case goes through dgcompat and is compared with :mod:`dgcompat.reference` on the GPU tensors.
- :mod:`.runner` installs one release per isolated folder, runs the ABI check and then one child per
  case under a watchdog, and writes ``conformance/dgcompat_conformance/certificates/gpu-<release>.json`` plus the table in
  ``docs/compatibility-gpu.md``.
"""

from __future__ import annotations

__all__ = ["abi", "cases", "runner"]
