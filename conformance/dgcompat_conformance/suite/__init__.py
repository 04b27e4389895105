"""The conformance suite: pytest tests of "the deep_gemm dgcompat resolves to".

Run by the harness child against one release (CPU tier or installed GPU build), or directly:
``pytest conformance/dgcompat_conformance/suite`` on a machine with a deep_gemm install.
"""
