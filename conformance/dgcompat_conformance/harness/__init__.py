"""The CPU tier: each published deep_gemm wheel's real Python layer over native stand-ins.

* the published builds are named by :mod:`dgcompat_conformance.releases` and fetched and unpacked by
  :mod:`dgcompat_conformance.wheels` (the surface, the intake and the GPU tier use them too);
* :mod:`.signatures` recovers each release's native signatures from its binary;
* :mod:`.standins` and :mod:`.emulation` replace the native library (checks, then the
  reference backend computes);
* :mod:`.child` runs the suite against one release in its own process; :mod:`.runner` starts the
  children and turns their results into certificates (:mod:`.certificate`).
"""

from __future__ import annotations

__all__ = ["signatures", "standins", "emulation", "child", "runner", "certificate"]
