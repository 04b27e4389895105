"""Per-call host cost of dgcompat against calling deep_gemm directly, in one process per release.

Run as ``python -m bench.overhead --version 0.1.4`` with the stand-in site first on ``PYTHONPATH``
(:mod:`bench.__main__` does this); it prints one JSON object. Every statement is timed with
:class:`timeit.Timer` over ``time.perf_counter_ns`` (with ``--clock cpu``: ``time.thread_time_ns``, the
timing thread's CPU time, which leaves out the time a loaded shared machine preempts it; garbage
collection off, the call's names bound to locals so the loop itself costs the same for every
column), in rounds that alternate direct / dgcompat / resolved, and the median round is reported. Nothing is subtracted: the table shows
absolute ns per call, and "added" is the difference of the two medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import timeit
from collections.abc import Callable
from typing import Any

from testsupport.stand_in import owner

from .cases import Case, build_cases, calibration_cases, cycle

__all__ = ["time_statement", "measure", "main"]

# Whether the installed release already matches the stable contract, so that dgcompat.resolve
# should hand back the upstream object (the "identity" target), with the reason when not.
# Judged from the release's signatures (docs/performance.md lists the reasoning).
_CONTRACT: dict[str, dict[str, tuple[bool, str]]] = {
    # The stable functions take every parameter some release has (epilogue from 0.2.5, alpha from 0.2.0):
    # where the release lacks one, stable refuses it with UnsupportedFeatureError, upstream with TypeError.
    "fp8_gemm_nt": {"0.2.5": (True, "the same parameters in the same positions, returns None"),
                    "*": (False, "no alpha= / epilogue= parameter (0.2.0 / 0.2.5 add them)")},
    "bf16_gemm_nt": {"0.2.5": (True, "the same parameters in the same positions, returns None"),
                     "*": (False, "no alpha= / epilogue= parameter (0.2.0 / 0.2.5 add them)")},
    "m_grouped_fp8_gemm_nt_contiguous": {"*": (False, "the stable function takes the layout as m_indices= and "
                                                      "grouped_layout=; every release takes one of the two")},
    "m_grouped_bf16_gemm_nt_contiguous": {"*": (False, "the stable function takes the layout as m_indices= and "
                                                       "grouped_layout=; every release takes one of the two")},
    "m_grouped_fp8_gemm_nt_masked": {
        "0.1.4": (False, "only the fp8_m_grouped_* alias; returns the raw native result"),
        "*": (False, "no overlap= parameter (stable: UnsupportedFeatureError, upstream: TypeError)"),
    },
    "m_grouped_bf16_gemm_nt_masked": {"0.2.5": (True, "same call, returns None"),
                                      "*": (False, "no epilogue= parameter (0.2.5 adds it)")},
    "get_paged_mqa_logits_metadata": {"*": (False, "dgcompat records the schedule's lengths for the guard")},
    "fp8_paged_mqa_logits": {"*": (False, "schedule guard, any lens form, split layout where not native")},
    "get_num_sms": {"*": (True, "same call")},
}


def contract(function: str, version: str) -> tuple[bool, str]:
    """(matches the stable contract, why) for ``function`` on the emulated ``version``."""
    rows = _CONTRACT.get(function, {"*": (False, "not judged")})
    return rows.get(version, rows["*"])


def time_statement(stmt: str, env: dict[str, Any], fn: Callable[..., Any], *, setup: str = "") -> timeit.Timer:
    """A timer for ``stmt`` with every name of ``env`` bound as a local of the timing function.

    ``f_up``/``f_dg`` in ``env`` are replaced by ``fn`` so the three columns run one statement shape.
    """
    glb: dict[str, Any] = {"_cycle": cycle}
    lines = []
    for key, value in env.items():
        glb[f"_g_{key}"] = fn if key in ("f_up", "f_dg") else value
        lines.append(f"{key} = _g_{key}")
    if setup:
        lines.append(setup)
    return timeit.Timer(stmt, setup="\n".join(lines), timer=_CLOCK[0], globals=glb)


#: The clock every statement is timed with (``--clock``).
_CLOCK: list[Callable[[], int]] = [time.perf_counter_ns]
CLOCKS: dict[str, Callable[[], int]] = {"wall": time.perf_counter_ns, "cpu": time.thread_time_ns}


def _apply_state(up: Any, case: Case) -> None:
    for key, value in case.state.items():
        setattr(up, key, value)


def measure(case: Case, up: Any, resolved: Callable[..., Any], *, rounds: int, calls: int) -> dict[str, Any]:
    """Median ns per call of the direct, dgcompat and resolved statements of ``case``."""
    _apply_state(up, case)
    calls = max(1, calls // 10) if case.per == "batch" and case.function != "get_num_sms" else calls
    resolved_stmt = case.direct if resolved is case.env.get("f_up") and resolved is not None else case.stable
    timers = {
        "direct": time_statement(case.direct, case.env, case.env["f_up"], setup=case.setup),
        "dgcompat": time_statement(case.stable, case.env, case.env["f_dg"], setup=case.setup),
        "resolved": time_statement(resolved_stmt, case.env, resolved, setup=case.setup),
    }
    if case.floor:
        timers["floor"] = time_statement(case.floor, case.env, case.env["f_up"], setup=case.setup)
    for timer in timers.values():  # warm: binding, plan, specialization of the bytecode
        timer.timeit(max(200, calls // 20))
    samples: dict[str, list[float]] = {k: [] for k in timers}
    for _ in range(rounds):
        for key, timer in timers.items():
            samples[key].append(timer.timeit(calls) / calls)
    med = {k: statistics.median(v) for k, v in samples.items()}
    return {
        "direct_ns": round(med["direct"], 1),
        "dgcompat_ns": round(med["dgcompat"], 1),
        "resolved_ns": round(med["resolved"], 1),
        "added_ns": round(med["dgcompat"] - med["direct"], 1),
        "ratio": round(med["dgcompat"] / med["direct"], 3) if med["direct"] > 0 else None,
        # The fastest round of each: on a shared, loaded machine preemption only ever adds time, so
        # the minimum is the better estimate of the cost itself (the median is the targets' statistic).
        "direct_min_ns": round(min(samples["direct"]), 1),
        "dgcompat_min_ns": round(min(samples["dgcompat"]), 1),
        "added_min_ns": round(min(samples["dgcompat"]) - min(samples["direct"]), 1),
        # Spread of the dgcompat rounds, to tell a real difference from noise.
        "dgcompat_iqr_ns": round(_iqr(samples["dgcompat"]), 1),
        "direct_iqr_ns": round(_iqr(samples["direct"]), 1),
        "calls_per_round": calls,
        "rounds": rounds,
        # The least a sound dgcompat call could add (bench.cases.paged_floor), timed in the same rounds.
        "floor_added_ns": round(med["floor"] - med["direct"], 1) if "floor" in med else None,
        "floor_added_min_ns": round(min(samples["floor"]) - min(samples["direct"]), 1) if "floor" in med else None,
    }


def _iqr(values: list[float]) -> float:
    if len(values) < 4:
        return max(values) - min(values)
    q = statistics.quantiles(values, n=4)
    return q[2] - q[0]


def _pin(cpu: int | None) -> int | None:
    """Pin this process to one CPU: a process that migrates between cores timed 2x slower and
    bimodal on a 2-vCPU KVM dev box, which would hide a 100 ns difference."""
    if cpu is None or not hasattr(os, "sched_setaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    chosen = allowed[cpu % len(allowed)]
    os.sched_setaffinity(0, {chosen})
    return chosen


def _use_device(device: str) -> str:
    """Where the inputs go: ``auto`` is ``cuda`` where torch sees a GPU. With ``cuda`` a CUDA context is made
    first, as an engine has one (torch's capture-status query costs about 1.5 us more per call without)."""
    import torch

    from . import cases

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        torch.zeros(1, device="cuda")
    cases.DEVICE[0] = device
    return device


def run(version: str, *, rounds: int, calls: int, alloc_calls: int, cpu: int | None,
        only: tuple[str, ...] = (), device: str = "cpu") -> dict[str, Any]:
    """Bind dgcompat to the stand-in of ``version`` (already on sys.path) and measure every case
    (those whose name contains one of ``only``, when given) on inputs on ``device`` (see :func:`_use_device`)."""
    pinned = _pin(cpu)
    import torch

    device = _use_device(device)

    import dgcompat
    from dgcompat import _tooling

    rel = dgcompat.release()
    dist, dist_version = owner(version)
    if str(rel.version) != dist_version or rel.dist != dist:
        raise SystemExit(f"expected the {dist} {dist_version} stand-in, found {rel.label}")
    up = _tooling.load_backend()
    caps = dgcompat.capabilities()
    cases = build_cases(dgcompat, up)
    if only:
        cases = [c for c in cases if any(part in c.name for part in only)]

    from .allocations import count_case

    rows = []
    for case in cases:
        resolved = dgcompat.resolve(case.function)
        is_up = case.upstream is not None and resolved is case.upstream
        matches, why = contract(case.function, version)
        row: dict[str, Any] = {
            "name": case.name, "function": case.function, "per": case.per, "goal_added_ns": case.goal_ns,
            "note": case.note, "resolve_is_upstream": is_up, "contract_matches": matches, "contract_why": why,
        }
        row.update(measure(case, up, resolved, rounds=rounds, calls=calls))
        row["goal_met"] = None if case.goal_ns is None else row["added_ns"] <= case.goal_ns
        row["identity_goal_met"] = (is_up == matches) if matches else None
        rows.append(row)

    allocations = [count_case(case, up, calls=alloc_calls) for case in cases]
    calibration = {}
    for case in calibration_cases(up):
        calibration[case.name.split(": ", 1)[1]] = {"note": case.note, **measure(case, up, case.env["f_dg"],
                                                                                rounds=rounds, calls=calls)}
    return {
        "version": version,
        "release": rel.label,
        "binding": rel.binding,
        "arch": caps.arch,
        "capabilities": {k: caps.as_dict()[k] for k in ("collapsed_strides", "raw_ffi_returns", "paged_context_lens",
                                                          "paged_native_next_n", "masked_gemm", "paged_mqa_logits")},
        "pinned_cpu": pinned,
        "device": device,
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "cases": rows,
        "allocations": allocations,
        "calibration": calibration,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.overhead", description=__doc__)
    parser.add_argument("--version", required=True)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--alloc-calls", type=int, default=100)
    parser.add_argument("--cpu", type=int, default=0, help="index among the allowed CPUs to pin to; -1: no pinning")
    parser.add_argument("--only", default="", help="comma-separated parts of case names to run (default: all)")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="where the inputs live (auto: cuda where torch sees a GPU)")
    args = parser.parse_args(argv)
    _CLOCK[0] = CLOCKS[args.clock]
    result = run(args.version, rounds=args.rounds, calls=args.calls, alloc_calls=args.alloc_calls,
                 cpu=None if args.cpu < 0 else args.cpu, only=tuple(p for p in args.only.split(",") if p),
                 device=args.device)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
