"""The GPU tier of the conformance suite: real deep_gemm kernels on a real device.

- :mod:`.abi` is the ABI health check (the release's native library must load, and a tiny call must
  see the tensors it was given), run in a child process; ``dgcompat doctor`` can use it too.
- :mod:`.cases` holds the cases, each runnable alone as ``python -m dgcompat_conformance.gpu.cases CASE_ID``;
  every case goes through dgcompat and is compared with :mod:`dgcompat.reference` on the GPU tensors.
- :mod:`.subject` says what a subject is (a wheel release, a plain folder, a bundled site) and names it;
  :mod:`.install` puts one into its own folder and asks detection what it is; :mod:`.machine` probes
  this machine (torch, CUDA, driver, device); :mod:`.deadline` bounds a run and stops it (signals,
  killing the children's process groups); :mod:`.output` prints the runner's lines.
- :mod:`.certify` certifies one subject: install, identity, ABI check, then one child per case under a
  watchdog, into its :class:`~dgcompat_conformance.certificate.Certificate`.
- :mod:`.table` publishes a run's certificates into ``conformance/dgcompat_conformance/certificates/`` and
  writes ``docs/compatibility-gpu.md`` (rendered by :mod:`dgcompat_conformance.report`).
- :mod:`.runner` is the command line, ``python -m dgcompat_conformance.gpu.runner``: it certifies
  several subjects side by side and writes ``gpu-<release>.json`` for each.
"""

from __future__ import annotations

__all__ = ["abi", "cases", "certify", "deadline", "install", "machine", "output", "runner", "subject", "table"]
