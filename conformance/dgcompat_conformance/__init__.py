"""dgcompat's conformance suite and the harness that runs it against published deep_gemm wheels.

``dgcompat_conformance.suite`` holds the pytest tests, written against "the deep_gemm dgcompat resolves
to". ``dgcompat_conformance.harness`` runs them against each published wheel's real Python layer on a
machine without CUDA (the CPU tier), one child process per release, with stand-ins for the
native library. ``dgcompat_conformance.cli`` is the ``dgcompat conform`` command.
"""

from __future__ import annotations

__all__: list[str] = []
