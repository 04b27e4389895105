"""What tests/ and bench/ share: fake ``deep_gemm`` releases, the stand-in, the fake JIT, the ELF writer, the
fake-distribution writer, the import scanner (:mod:`testsupport.layout`) and the runtime's layer map
(:mod:`testsupport.layers`). Neither imports the other; both import this.

A checkout-only package (pyproject.toml installs only ``dgcompat`` and ``dgcompat_conformance``): pytest
and ``python -m bench`` find it from the repository root. The fake modules are real modules of its
subpackages (lint and type checks read them) that :mod:`testsupport.parts` joins into the
``deep_gemm/__init__.py`` written into a temporary site folder.
"""
