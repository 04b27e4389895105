"""The CPU tier: each published deep_gemm wheel's real Python layer over native stand-ins.

* :mod:`.releases` names the published builds, :mod:`.wheels` fetches and unpacks them;
* :mod:`.signatures` recovers each release's native signatures from its binary;
* :mod:`.standins` and :mod:`.emulation` replace the native library (checks, then the
  reference backend computes);
* :mod:`.child` runs the suite against one release in its own process; :mod:`.runner` starts the
  children and turns their results into certificates (:mod:`.certificate`).
"""

from __future__ import annotations

__all__ = ["releases", "wheels", "signatures", "standins", "emulation", "child", "runner", "certificate"]
