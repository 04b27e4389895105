"""Tensor work a call does on the host's behalf: allocations, writes and views, counted per call.

:class:`OpCounter` is a :class:`~torch.utils._python_dispatch.TorchDispatchMode`: every ATen op
issued while it is active passes through it, whatever the device, so on the CPU it sees exactly
the ops the normalizations would issue on the GPU. Each op is classified by its outputs:

- **alloc**: an output tensor whose storage is none of the inputs' storages (a device allocation
  on the GPU: ``torch.zeros``, ``clamp_min``, ``.to(dtype)``, ``clone``, ...);
- **write**: an in-place or ``out=`` op (``copy_``, ``fill_``, ``masked_fill_``: a kernel launch
  on the GPU that writes existing memory);
- **view**: an output that aliases an input (``view``, ``expand``, slicing): no device memory and
  no launch, only a host-side tensor object.

Metadata reads (``shape``, ``stride()``, ``data_ptr()``, ``_version``) are not ATen ops and cost
nothing here. The stand-in deep_gemm issues no ops, so what is counted is dgcompat's (or, in the
direct column, the hand-written launch's) own.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from .cases import Case, cycle

__all__ = ["OpCounter", "count_case"]


def _tensors(tree: Any) -> list[Any]:
    import torch
    from torch.utils._pytree import tree_flatten

    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def _make_counter() -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode

    class OpCounter(TorchDispatchMode):
        """Counts ATen ops by kind (see the module documentation)."""

        def __init__(self) -> None:
            super().__init__()  # type: ignore[no-untyped-call]  # torch declares TorchDispatchMode.__init__ untyped
            self.kinds: Counter[str] = Counter()
            self.ops: Counter[str] = Counter()

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            inputs = {t.untyped_storage().data_ptr() for t in _tensors((args, kwargs)) if t.numel()}
            outs = _tensors(out)
            name = func.overloadpacket.__name__
            schema = func._schema
            mutates = any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
            if mutates:
                kind = "write"
            elif any(t.numel() and t.untyped_storage().data_ptr() not in inputs for t in outs) or (
                    outs and not inputs):
                kind = "alloc"
            else:
                kind = "view"
            self.kinds[kind] += 1
            self.ops[f"{kind}:{name}"] += 1
            return out

    return OpCounter


OpCounter: Any = None  # the class, created on first use (torch is imported lazily)


def _counter() -> Any:
    global OpCounter
    if OpCounter is None:
        OpCounter = _make_counter()
    return OpCounter()


def _run(stmt: str, case: Case, calls: int) -> dict[str, Any]:
    env = dict(case.env)
    env["_cycle"] = cycle
    code = compile(stmt, f"<{case.name}>", "exec")
    if case.setup:
        exec(compile(case.setup, "<setup>", "exec"), env)
    for _ in range(20):  # warm: the plan is built on the first call, not counted as steady state
        exec(code, env)
    counter = _counter()
    with counter:
        for _ in range(calls):
            exec(code, env)
    return {
        "allocs_per_call": counter.kinds["alloc"] / calls,
        "writes_per_call": counter.kinds["write"] / calls,
        "views_per_call": counter.kinds["view"] / calls,
        "ops": {k: v / calls for k, v in sorted(counter.ops.items())},
    }


def _run_batch(case: Case) -> dict[str, Any]:
    """What starting a new batch costs: refresh the lengths, rebuild the schedule, first launch."""
    assert case.new_batch is not None
    env = dict(case.env)
    if case.batch_refresh:
        exec(compile(case.batch_refresh, "<refresh>", "exec"), env)
    counter = _counter()
    with counter:
        exec(compile(case.new_batch, "<new batch>", "exec"), env)
    return {"allocs": counter.kinds["alloc"], "writes": counter.kinds["write"], "views": counter.kinds["view"],
            "ops": dict(sorted(counter.ops.items()))}


def count_case(case: Case, up: Any, *, calls: int) -> dict[str, Any]:
    """Per-call op counts of the direct and dgcompat statements of ``case`` in steady state."""
    for key, value in case.state.items():
        setattr(up, key, value)
    result: dict[str, Any] = {
        "name": case.name,
        "function": case.function,
        "per": case.per,
        "direct": _run(case.direct, case, calls),
        "dgcompat": _run(case.stable, case, calls),
    }
    if case.new_batch is not None:
        result["dgcompat_new_batch"] = _run_batch(case)
        # Steady state again after the new batch: the rebuilt plan is reused from the second call.
        result["dgcompat_after_new_batch"] = _run(case.stable, case, calls)
    # The goal is about the per-layer calls; per-batch work is reported, not judged.
    result["goal_met"] = None if case.per != "call" else (
        result["dgcompat"]["allocs_per_call"] == 0 and result["dgcompat"]["writes_per_call"] == 0)
    return result
