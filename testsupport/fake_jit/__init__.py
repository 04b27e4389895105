"""A fake deep_gemm with a JIT shaped like the real ones, and a fake NVCC, for warmup tests on the CPU.

The fake JIT follows each real lineage where warmup and relocation depend on it (dgcompat/jit_warmup/keys.py
says what was read; this file models it independently, so a wrong port there fails here):

- ``compiler`` (the default; sgl-deep-gemm 0.0.1-0.1.7): the compiler is built on the first kernel build
  and reads ``DG_JIT_CACHE_DIR`` and ``DG_JIT_NVCC_COMPILER`` then (``<nvcc> --version`` once, the signature
  ``NVCC<major>.<minor>``); the generated code gets the stamp ``// Includes' hash value: <hash>`` of the
  ``deep_gemm/`` headers it includes; a kernel lives in ``<cache>/cache/kernel.<name>.<H(name$$signature$$
  flags$$code)>`` with deep_gemm's FNV-1a/splitmix64 ``H``; the flags name the include folder
  (``-I<deep_gemm>/include``); a miss writes ``kernel.cu`` into ``<cache>/tmp/<uuid>/``, runs
  ``cd <cache>/tmp && <nvcc> <cu> -cubin -o <cubin> <flags>`` through the shell, raises on a non-zero exit and
  otherwise renames the folder into place; loaded kernels are remembered per path; a hit writes nothing.
- ``bundled`` (sgl-kernel 0.3.21 / sglang-kernel 0.4.x): the key is ``H(name$$library_version$$signature$$
  flags$$code)`` with ``library_version`` = ``H`` of every ``.cuh`` under ``include/deep_gemm`` in path order
  and ``-cubin`` among the flags; a miss creates the entry folder, writes ``kernel.cu`` there (a temporary
  file renamed in), runs ``<nvcc> <entry>/kernel.cu -o <cache>/tmp/<uuid> <flags>`` and renames the output to
  ``<entry>/kernel.cubin``.
- ``deep_jit`` (upstream 2.8 as vLLM vendors it, sgl-deep-gemm 0.2.x): the build folder
  ``<cache>/tmp/<pid>-<uuid>/`` holds ``kernel.cu``; ``cd <build> && <nvcc> <build>/kernel.cu --cubin
  --output-file <build>/kernel.cubin <flags> --include-path <deep_gemm>/include``; a failed build's folder is
  deleted before its error is raised; a good one gets ``meta.json`` and ``.committed`` and is renamed to
  ``<cache>/cache/<name>.<key>/``, the key covering the ``nvcc --version`` text, the flags and the source
  with the contents of its includes, not their folder.

The layout is the site's (:func:`files`), or ``FAKE_JIT_LAYOUT``. Kernel choice depends on M the way block-size
heuristics do (only through the classes of :mod:`dgcompat.jit_warmup.classes`); float32 activation scales that
are not MN-major and TMA-aligned are transposed first by a ``transpose_fp32`` kernel per ``ceil(K/128)``, in
the GEMMs as in the layout helpers; the paged schedule kernel is compiled per batch rounded up to 32 and the
paged logits kernel per (heads, head_dim, next_n); the ragged logits kernel per (heads, head_dim).

The fake NVCC (the shell script ``nvcc`` beside this file) prints ``release $FAKE_NVCC_VERSION`` (default ``12.9, V12.9.86``) for ``--version``; otherwise it
waits ``$FAKE_NVCC_SECONDS`` (busy, using a core, with ``FAKE_NVCC_BURN=1``; times 1-3 by the source with
``FAKE_NVCC_VARY=1``), copies the source to the output (padded to ``$FAKE_NVCC_PAD`` bytes) and appends one line
per compile to ``$FAKE_NVCC_LOG``.
"""

from __future__ import annotations

import os
import sys
from importlib import resources
from pathlib import Path

from .. import stand_in
from ..dists import write_dist
from ..parts import joined

__all__ = ["KERNELS", "source", "headers", "files", "write_site", "write_nvcc", "site_env"]

#: The kernels the fake JIT builds (one header each under ``include/deep_gemm/impls/``).
KERNELS = ("sm90_fp8_gemm_1d2d", "sm90_bf16_gemm", "transpose_fp32", "transpose_and_pack_fp32_into_ue8m0",
           "sm90_m_grouped_fp8_gemm_contiguous", "sm90_fp8_m_grouped_gemm_masked", "paged_mqa_logits_metadata",
           "sm90_fp8_paged_mqa_logits", "sm90_fp8_mqa_logits")


def source(version: str = "0.1.4", layout: str = "compiler") -> str:
    """The fake release's ``deep_gemm/__init__.py``: the stand-in of ``version`` with the fake JIT of ``layout``."""
    return stand_in.source(version) + f"\n_FAKE_LAYOUT = {layout!r}\n\n" + joined(__name__, "jit")


def headers(revision: str = "") -> dict[str, str]:
    """The fake package's ``include`` folder: a header per kernel (each including a common one), and a third-party
    header; ``revision`` changes the common header (another build's headers)."""
    out = {f"deep_gemm/include/deep_gemm/impls/{k}.cuh":
           f"#pragma once\n#include <deep_gemm/common/utils.cuh>\n#include <cute/tensor.hpp>\n// {k}\n"
           for k in KERNELS}
    out["deep_gemm/include/deep_gemm/common/utils.cuh"] = f"#pragma once\n// common utilities {revision}\n"
    out["deep_gemm/include/cute/tensor.hpp"] = "#pragma once\n// third-party\n"
    return out


def files(version: str = "0.1.4", layout: str = "compiler", revision: str = "") -> dict[str, str | bytes]:
    """Everything :func:`write_site` puts into a site folder besides the dist-info."""
    return {"deep_gemm/__init__.py": source(version, layout), **headers(revision)}


def write_site(site: Path, layout: str = "compiler", version: str = "0.1.4", revision: str = "") -> Path:
    """A fake sgl-deep-gemm ``version`` whose JIT is of lineage ``layout``, laid out in ``site``."""
    write_dist(site, "sgl-deep-gemm", version, files(version, layout, revision))
    return site


def write_nvcc(folder: Path) -> Path:
    """Write the fake NVCC (an executable shell script) into ``folder``; return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "nvcc"
    text = resources.files(__name__).joinpath("nvcc").read_text("utf-8")
    path.write_text(text.replace("@PYTHON@", sys.executable))
    path.chmod(0o755)
    return path


def site_env(folder: Path, seconds: float, layout: str = "compiler") -> dict[str, str]:
    """A fake sgl-deep-gemm 0.1.4 with this JIT in ``folder/fake-site`` and the fake NVCC in ``folder/fake-bin``
    (each NVCC run sleeping ``seconds``): the environment a process needs to use them, the current
    ``PYTHONPATH`` kept after the site."""
    site = write_site(folder / "fake-site", layout)
    nvcc = write_nvcc(folder / "fake-bin")
    return {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
            "DGCOMPAT_ALLOW_TORCH_MISMATCH": "1", "DGCOMPAT_ARCH": "sm90", "DG_JIT_NVCC_COMPILER": str(nvcc),
            "FAKE_NVCC_SECONDS": str(seconds)}
