"""Parts of the paged fast path against its floor, timed interleaved in one process.

Run as ``python bench/paged_parts.py`` with a stand-in site (:func:`testsupport.stand_in.write_site`) and the
repository on ``PYTHONPATH``, ``DGCOMPAT_ALLOW_TORCH_MISMATCH=1`` and ``DGCOMPAT_ARCH=sm90``. The native next_n=2 case of :mod:`bench.cases` is planned once (CUDA tensors
and a CUDA context where torch sees a GPU); then each statement below is timed in 25 interleaved
rounds of 10,000 calls on the thread's CPU clock, and the min and median per call are printed with
their difference to the direct call. ``floor`` is :func:`bench.cases.paged_floor`: only the checks no
sound repeat call may skip, then the call.
"""

from __future__ import annotations

import statistics
import time
import timeit
import weakref
from typing import Any

from testsupport.record import header


def main() -> None:
    import torch

    import dgcompat
    from bench import cases as C
    from dgcompat import _tooling

    up = _tooling.load_backend()
    cuda = torch.cuda.is_available()
    if cuda:
        torch.zeros(1, device="cuda")  # a CUDA context, as an engine has
        C.DEVICE[0] = "cuda"
    case = next(c for c in C.build_cases(dgcompat, up) if c.name == "fp8_paged_mqa_logits [native next_n=2]")
    for key, value in case.state.items():
        setattr(up, key, value)
    env = dict(case.env)
    q, kv, w, lens, bt, s, L = (env[k] for k in ("q", "kv", "w", "lens", "bt", "s", "L"))  # noqa: N806 - the case's name
    f = dgcompat.fp8_paged_mqa_logits
    f(q, kv, w, lens, bt, s, L)
    plan = _tooling.last_paged_plan()
    assert plan is not None, "expected a plan"
    assert plan[-1] is not None, "expected the plain native plan (its last field)"
    names: dict[str, Any] = {
        "q": q, "kv": kv, "w": w, "lens": lens, "bt": bt, "s": s, "L": L, "f": f,
        "direct": up.fp8_paged_mqa_logits, "floor": env["f_floor"],
        "same_meta": _tooling.same_metadata(q, w, kv), "cap": _tooling.capture_probe(q.device), "lr": weakref.ref(lens),
    }
    stmts = ["direct(q, kv, w, lens, bt, s, L)", "f(q, kv, w, lens, bt, s, L)", "floor(q, kv, w, lens, bt, s, L)",
             "same_meta(q, w, kv)", "cap()", "same_meta(q, w, kv) and not cap()", "lens._version", "lr()",
             "q.shape"]
    timers = [timeit.Timer(st, globals=names, timer=time.thread_time_ns) for st in stmts]
    rounds: list[list[float]] = [[] for _ in stmts]
    for _ in range(25):
        for i, timer in enumerate(timers):
            rounds[i].append(timer.timeit(10000) / 10000)
    d_min, d_med = min(rounds[0]), statistics.median(rounds[0])
    print(f"# {header()}; {dgcompat.release().label} cuda={cuda} q on {q.device}")
    for st, r in zip(stmts, rounds, strict=True):
        print(f"{min(r):8.1f} min {statistics.median(r):8.1f} median  (added min {min(r) - d_min:7.1f} / "
              f"median {statistics.median(r) - d_med:7.1f})  {st}")


if __name__ == "__main__":
    main()
