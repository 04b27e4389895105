"""Which deep_gemm is installed, read from files on disk without importing it.

Importing deep_gemm has side effects (a CUDA-toolkit lookup that asserts, native init, ``atexit``
hooks), so :func:`release` never imports deep_gemm, torch, an engine or anything CUDA. It finds
each copy of the package with :func:`importlib.util.find_spec` on top-level names only (which
executes nothing), establishes who owns it and which release it is, and reads the native
library's dynamic symbols (:mod:`dgcompat.detection._elf`) for the binding era and the torch it needs.

Copies, in the order ``DGCOMPAT_BACKEND=auto`` prefers them (the order vLLM itself uses):

1. an importable ``deep_gemm``: owned by ``sgl-deep-gemm``, by a kernel wheel that bundles it
   (``sgl-kernel`` / ``sglang-kernel``), by an upstream DeepGEMM build (``deep-gemm`` /
   ``deepgemm``), or by nothing (a copied tree);
2. vLLM's vendored copy ``vllm.third_party.deep_gemm`` (owned by the ``vllm`` distribution);
3. TensorRT-LLM's ``tensorrt_llm.deep_gemm`` (owned by ``tensorrt-llm``).

``DGCOMPAT_BACKEND=vllm`` or ``=tensorrt-llm`` selects a vendored copy even when a ``deep_gemm``
is importable; ``=deep_gemm`` only considers the importable one.

The release id comes from distribution metadata. ``deep_gemm.__version__`` is not one for
sgl-deep-gemm (it lags ``.postN``; the bundled copies carry none), so an sgl-deep-gemm layer
without its metadata is refused rather than guessed. Upstream DeepGEMM's ``__version__`` is its
release (``'2.8.1'``), so a vendored or copied upstream tree is identified from it, and
:attr:`Release.version_source` says so. An install that cannot be identified is never planned
as another release: :attr:`Release.refusal` says why, and the first stable call raises
:class:`~dgcompat.errors.UnidentifiedBuildError`.

The answer is computed once per process and cached; tests call :func:`reset` (or
``release.cache_clear()``) after changing ``sys.path``.

The package, one job per module: :mod:`._known` (the registries: distributions, known builds and
their surfaces, the torch each native library was built for), :mod:`._distinfo` (the dist-info /
RECORD reader), :mod:`._elf` and :mod:`._torch_abi` (reading a native library's symbols),
:mod:`._native` (the binding era and the torch a library needs) and :mod:`._decision` (finding the
copies, identifying the chosen one, :class:`Release`). This module names the public part.
"""

from __future__ import annotations

from ._decision import KernelWheel
from ._decision import Release
from ._decision import backend_choice
from ._decision import backend_name
from ._decision import release
from ._decision import reset
from ._known import EXPECTED_TORCH
from ._known import KERNEL_FLOOR_WITH_SGL_DEEP_GEMM
from ._known import KERNEL_WHEELS
from ._known import KNOWN_SGL_DEEP_GEMM
from ._known import KNOWN_SURFACES
from ._known import KNOWN_UPSTREAM
from ._known import SGL_DEEP_GEMM
from ._known import SIGNATURE_NAMES
from ._known import UPSTREAM
from ._known import UPSTREAM_NAMES
from ._known import VENDORED

__all__ = ["Release", "KernelWheel", "release", "reset", "backend_name", "backend_choice", "SGL_DEEP_GEMM",
           "UPSTREAM", "KERNEL_WHEELS", "UPSTREAM_NAMES", "VENDORED", "KNOWN_SGL_DEEP_GEMM", "KNOWN_UPSTREAM",
           "SIGNATURE_NAMES", "KNOWN_SURFACES", "EXPECTED_TORCH", "KERNEL_FLOOR_WITH_SGL_DEEP_GEMM"]
