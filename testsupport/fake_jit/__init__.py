"""A fake deep_gemm with a JIT shaped like the real one, and a fake NVCC, for warmup tests on the CPU.

The fake follows what the 0.1.x wheels' JIT does (csrc/jit/compiler.hpp of the sgl-project fork):
the compiler is built on the first kernel build and reads ``DG_JIT_CACHE_DIR`` and
``DG_JIT_NVCC_COMPILER`` then (``<nvcc> --version`` once); a kernel lives in
``<cache>/cache/kernel.<name>.<hash of name, flags, code>``; a miss writes ``kernel.cu`` into
``<cache>/tmp/<uuid>/``, runs ``cd <cache>/tmp && <nvcc> <cu> -cubin -o <cubin> <flags>`` through
the shell, raises on a non-zero exit and otherwise renames the folder into place; loaded kernels are
remembered per path; the flags name the package's include folder (``-I<deep_gemm>/include``), as the
real ones do. Kernel choice depends on M the way block-size heuristics do (only through the classes
of :mod:`dgcompat.jit_warmup.classes`); float32 activation scales that are not MN-major and TMA-aligned
are transposed first by a ``transpose_fp32`` kernel per ``ceil(K/128)``, in the GEMMs as in the layout
helpers; the paged schedule kernel is compiled per batch rounded up to 32 and the paged logits kernel
per (heads, head_dim, next_n); the ragged logits kernel per (heads, head_dim). The fake NVCC (the shell
script ``nvcc`` beside this file) sleeps, copies the source to the cubin and appends one line per
compile to ``$FAKE_NVCC_LOG``. ``FAKE_JIT_LAYOUT=deep_jit`` switches to the build folders of the newer
JIT (``_Compiler.build_deep_jit`` in ``jit.py``).

The module is the stand-in of :mod:`testsupport.stand_in` with the part ``jit.py`` joined after it.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from .. import stand_in
from ..dists import write_dist
from ..parts import joined

__all__ = ["source", "write_nvcc", "site_env"]


def source(version: str = "0.1.4") -> str:
    """The fake release's ``deep_gemm/__init__.py``: the stand-in of ``version`` with the fake JIT."""
    return stand_in.source(version) + "\n\n" + joined(__name__, "jit")


def write_nvcc(folder: Path) -> Path:
    """Write the fake NVCC (an executable shell script) into ``folder``; return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "nvcc"
    path.write_text(resources.files(__name__).joinpath("nvcc").read_text("utf-8"))
    path.chmod(0o755)
    return path


def site_env(folder: Path, seconds: float) -> dict[str, str]:
    """A fake sgl-deep-gemm 0.1.4 with this JIT in ``folder/fake-site`` and the fake NVCC in ``folder/fake-bin``
    (each NVCC run sleeping ``seconds``): the environment a process needs to use them, the current
    ``PYTHONPATH`` kept after the site."""
    site = folder / "fake-site"
    write_dist(site, "sgl-deep-gemm", "0.1.4", {"deep_gemm/__init__.py": source("0.1.4")})
    nvcc = write_nvcc(folder / "fake-bin")
    return {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
            "DGCOMPAT_ALLOW_TORCH_MISMATCH": "1", "DGCOMPAT_ARCH": "sm90", "DG_JIT_NVCC_COMPILER": str(nvcc),
            "FAKE_NVCC_SECONDS": str(seconds)}
