"""Fake ``deep_gemm`` modules kept as real modules and written out as one.

A fake release is one ``deep_gemm/__init__.py``, as in the real packages; its source is joined from
parts, each a module of a testsupport subpackage so that ruff and mypy read it. A name a part takes from
an earlier part is imported under ``typing.TYPE_CHECKING`` only: in the joined module it is already
defined above. A part holds no ``from __future__`` import (that must open a module) and no function
docstrings beyond the real release's (dgcompat reads parameter names from docstrings).
"""

from __future__ import annotations

import functools
from importlib import resources

__all__ = ["joined"]


@functools.cache
def joined(package: str, *parts: str) -> str:
    """The source of one module: the parts (module names inside ``package``, in order) joined."""
    texts = []
    for part in parts:
        text = resources.files(package).joinpath(f"{part}.py").read_text("utf-8")
        if "from __future__" in text:
            raise ValueError(f"{package}.{part} has a __future__ import, which cannot follow another part")
        texts.append(text)
    return "\n\n".join(texts)
