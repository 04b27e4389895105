"""``python -m bench.cuda_unusable``: the reference backend on CPU tensors where CUDA is compiled in but unusable.

Run it under a CUDA build of torch with ``CUDA_VISIBLE_DEVICES=""`` on a GPU host (or on a machine without
a driver): paged MQA logits (every lengths form, next_n 1, 2 and 4, repeat calls) and ragged MQA logits
through ``dgcompat`` on the reference backend, each compared with the reference itself, then the CUDA
state. Prints one JSON line per check and a summary; exit status 1 when a check fails.
"""

from __future__ import annotations

import json
import math
import os
import sys

from testsupport.record import stamped


def main() -> int:
    os.environ.setdefault("DGCOMPAT_BACKEND", "reference")
    import torch

    import dgcompat
    from dgcompat import reference as R

    failed = 0
    env = {"torch": torch.__version__, "cuda_compiled": torch.cuda._is_compiled(),
           "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"), "backend": dgcompat.capabilities().backend}
    print(json.dumps(stamped({"environment": env})))
    g = torch.Generator().manual_seed(0)
    for n in (1, 2, 4):
        b, ctx = 3, [70, 130, 66 + n]
        blocks = math.ceil(max(ctx) / 64)
        q = torch.randn(b, n, 32, 128, generator=g).to(torch.float8_e4m3fn)
        kv = R.pack_kv_cache(torch.randn(b * blocks, 64, 128, generator=g))
        w = torch.rand(b * n, 32, generator=g)
        bt = torch.randperm(b * blocks, generator=g).to(torch.int32).view(b, blocks)
        seq = torch.tensor(ctx, dtype=torch.int32)
        rows = (seq.view(-1, 1) - n + 1 + torch.arange(n, dtype=torch.int32)).contiguous()
        ref = R.fp8_paged_mqa_logits(q, kv, w, seq, bt, None, blocks * 64, clean_logits=True)
        for form, lens in (("(B,)", seq), ("(B, next_n)", rows), ("(B*next_n, 1)", rows.view(-1, 1))):
            try:
                diffs = []
                for _ in range(3):
                    sched = dgcompat.get_paged_mqa_logits_metadata(lens, 64)
                    out = dgcompat.fp8_paged_mqa_logits(q, kv, w, lens, bt, sched, blocks * 64, clean_logits=True)
                    diffs.append(float((out - ref).abs().nan_to_num(0.0).max()))
                ok = max(diffs) < 1e-3
                result = {"check": f"paged next_n={n} lengths {form}", "ok": ok, "max_abs_diff": max(diffs)}
            except Exception as exc:  # noqa: BLE001 - reported as the failure it is
                ok, result = False, {"check": f"paged next_n={n} lengths {form}", "ok": False,
                                     "error": f"{type(exc).__module__}.{type(exc).__name__}: {exc}"[:300]}
            failed += not ok
            print(json.dumps(result))
    q = torch.randn(5, 32, 128, generator=g).to(torch.float8_e4m3fn)
    kvr = (torch.randn(9, 128, generator=g).to(torch.float8_e4m3fn), torch.rand(9, generator=g) + 0.5)
    w = torch.rand(5, 32, generator=g)
    ks = torch.tensor([0, 1, 2, 0, 3], dtype=torch.int32)
    ke = torch.tensor([4, 5, 9, 9, 6], dtype=torch.int32)
    try:
        out = dgcompat.fp8_mqa_logits(q, kvr, w, ks, ke, clean_logits=True)
        diff = float((out - R.fp8_mqa_logits(q, kvr, w, ks, ke, clean_logits=True)).abs().nan_to_num(0.0).max())
        ok, result = diff < 1e-3, {"check": "ragged MQA logits", "ok": diff < 1e-3, "max_abs_diff": diff}
    except Exception as exc:  # noqa: BLE001
        ok, result = False, {"check": "ragged MQA logits", "ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    failed += not ok
    print(json.dumps(result))
    state = {"check": "no CUDA context created", "cuda_initialized": torch.cuda.is_initialized()}
    state["ok"] = not state["cuda_initialized"]
    failed += not state["ok"]
    print(json.dumps(state))
    print(json.dumps({"summary": {"failed": failed}}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
