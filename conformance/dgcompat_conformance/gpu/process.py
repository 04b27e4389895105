"""The process contract on a real GPU: what the runtime may do before the first kernel call.

Engines configure in the parent (detect the build, read capabilities) and then fork one worker per
rank. A CUDA context created in the parent before the fork makes CUDA unusable in every child, so
nothing before the first kernel call may create one. This check, run in a fresh interpreter::

    python -m dgcompat_conformance.gpu.process

1. imports dgcompat and calls ``release()`` and ``capabilities()`` (and reads ``str()`` of both);
2. records whether torch's CUDA context exists (it must not);
3. forks a child that runs ``fp8_gemm_nt`` through dgcompat on the GPU and compares it with the
   reference backend (it must compute);
4. runs the same call in the parent after the child has exited.

It prints one JSON line: ``{"initialized_before_fork": bool, "child": {...}, "parent": {...},
"ok": bool}`` and exits 0 only when every step held.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

__all__ = ["main"]

_SHAPE = (128, 256, 512)  # m, n, k
_TOLERANCE = 1e-3


def _gemm_diff() -> float:
    """``calc_diff`` of one dgcompat ``fp8_gemm_nt`` on the GPU against the reference backend."""
    import torch

    import dgcompat
    from dgcompat import reference

    from .cases import calc_diff

    m, n, k = _SHAPE
    gen = torch.Generator(device="cuda").manual_seed(7)
    a = reference.per_token_cast_to_fp8(torch.randn((m, k), device="cuda", generator=gen).bfloat16())
    b = reference.per_block_cast_to_fp8(torch.randn((n, k), device="cuda", generator=gen).bfloat16())
    d = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
    dgcompat.fp8_gemm_nt(a, b, d)
    ref = torch.empty((m, n), device="cuda", dtype=torch.float32)
    reference.fp8_gemm_nt(a, b, ref)
    torch.cuda.synchronize()
    return calc_diff(d, ref)


def _step(fn: Any) -> dict[str, Any]:
    try:
        diff = fn()
    except BaseException as exc:  # reported, not raised: the JSON line is the result
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:800]}
    return {"ok": diff < _TOLERANCE, "diff": diff}


def main() -> int:
    import torch

    import dgcompat

    rel = dgcompat.release()
    caps = dgcompat.capabilities()
    _ = (str(rel), str(caps))
    before = bool(torch.cuda.is_initialized())
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the first kernel call of its life
        os.close(read)
        result = _step(_gemm_diff)
        os.write(write, json.dumps(result).encode())
        os.close(write)
        os._exit(0 if result["ok"] else 1)
    os.close(write)
    chunks = []
    while True:
        chunk = os.read(read, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    child: dict[str, Any] = json.loads(b"".join(chunks) or b'{"ok": false, "error": "no result"}')
    child["exit_status"] = status
    parent = _step(_gemm_diff)
    out = {"release": rel.label, "arch": caps.arch, "initialized_before_fork": before, "child": child,
           "parent": parent, "ok": (not before) and bool(child.get("ok")) and bool(parent.get("ok"))}
    print(json.dumps(out))
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
