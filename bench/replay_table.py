"""The CUDA-graph replay table of paged MQA logits through dgcompat, on a real GPU.

For each lengths form and next_n: capture ``dgcompat.fp8_paged_mqa_logits`` once with persistent
buffers (lengths, block table, q, weights, schedule), write the next batch into those buffers and
refresh the schedule as the migration guide says (``get_paged_mqa_logits_metadata(lens, 64,
out=schedule)``), replay, and compare with a float32 reference for the new batch. B=8, H=64, D=128,
64-token blocks, contexts up to 3000; ``diff = 1 - 2*sum(x*y) / sum(x*x + y*y)`` over each row's
valid positions. Every row should read about 1e-8 (a wrong batch reads 1e-1 or worse).

Run from the repository root with a deep_gemm on the path, e.g.::

    PYTHONPATH=/tmp/dgsite:$PWD:$PWD/conformance python bench/replay_table.py [--pattern out|sglang|vllm|nothing]

``DGCOMPAT_CASES_DEVICE=cpu DGCOMPAT_BACKEND=reference`` dry-runs the same code on the CPU (the graph is
then the CPU analogue in ``dgcompat_conformance.gpu.graphsim``).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent.parent / "conformance")]

from testsupport.record import header  # noqa: E402  (found through the path set above)

ROWS = (("1-D `(B,)`", "seq", False), ("2-D `(B, next_n)`", "rows", False),
        ("`(B*next_n, 1)` + per-row table", "flat", True))


def measure(form: str, per_row: bool, next_n: int, pattern: str, batch: int = 8) -> tuple[float, float, float]:
    """(eager first batch, replay next batch, eager next batch) diffs for one row of the table."""
    from dgcompat_conformance.gpu import cases as C

    first, second = C._replay_pair(4242 + next_n, batch, next_n)
    buf = C._ReplayBuffers(first, next_n, form, per_row)
    eager_first = buf.launch()
    d_first = C.calc_diff(eager_first[C._valid(first)], C._paged_ref(first)[C._valid(first)])
    graph = C._Graph()
    out = graph.capture(buf.launch)
    C._sync()
    buf.write(second, pattern)
    graph.replay()
    C._sync()
    d_replay = C.calc_diff(out[C._valid(second)], C._paged_ref(second)[C._valid(second)])
    if pattern == "nothing":
        d_eager = float("nan")  # refused eagerly (ScheduleMismatchError): nothing to compare
    else:
        eager_next = buf.launch()
        d_eager = C.calc_diff(eager_next[C._valid(second)], C._paged_ref(second)[C._valid(second)])
    return d_first, d_replay, d_eager


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pattern", default="out", choices=("out", "sglang", "vllm", "nothing"),
                        help="how the next batch's schedule is refreshed before the replay (default: out=)")
    args = parser.parse_args(argv)
    import torch

    import dgcompat
    from dgcompat_conformance.gpu import cases as C

    if C.DEVICE == "cuda" and not torch.cuda.is_available():
        print("needs a CUDA GPU (DGCOMPAT_CASES_DEVICE=cpu DGCOMPAT_BACKEND=reference dry-runs the code path)",
              file=sys.stderr)
        return 2
    where = torch.cuda.get_device_name() if C.DEVICE == "cuda" else "CPU dry run (graphsim)"
    print(header())
    print(f"deep_gemm: {dgcompat.release().label}; torch {torch.__version__}; {where}; refresh: {args.pattern}")
    print("\n| lengths form given | next_n | eager, first batch | graph replay, next batch | eager, next batch |")
    print("|---|---|---|---|---|")
    worst = 0.0
    for label, form, per_row in ROWS:
        for next_n in (1, 2, 4):
            try:
                d = measure(form, per_row, next_n, args.pattern)
            except Exception as exc:  # noqa: BLE001 - one row's failure must not hide the others
                print(f"| {label} | {next_n} | {type(exc).__name__}: {str(exc)[:120]} | | |")
                worst = float("inf")
                continue
            worst = max([worst] + [v for v in d if not math.isnan(v)])
            print(f"| {label} | {next_n} | " + " | ".join("-" if math.isnan(v) else f"{v:.1e}" for v in d) + " |")
    print(f"\nworst diff: {worst:.2e} ({'all rows correct' if worst < 1e-6 else 'WRONG'})")
    return 0 if worst < 1e-6 else 1


if __name__ == "__main__":
    sys.exit(main())
