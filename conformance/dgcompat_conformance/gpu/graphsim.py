"""A CPU analogue of CUDA-graph capture and replay, for the paged indexer's replay hazard.

Used by dgcompat's unit tests and by the GPU tier's replay cases when they dry-run on the CPU
(``DGCOMPAT_CASES_DEVICE=cpu``); on a GPU those cases use ``torch.cuda.CUDAGraph`` itself.

A CUDA graph records the device work a call issued (kernels and copies, with the addresses they
read and write) and replays exactly that work later; no Python runs at replay. :class:`Graph`
does the same on the CPU:

- while recording, every ATen op issued by dgcompat is recorded with its (tensor) arguments and
  results, through a ``TorchDispatchMode``; the fake deep_gemm's native functions are recorded as
  single opaque nodes (their internals are the "kernel");
- a host synchronization while recording (``.item()``, ``torch.equal``, ``nonzero``...) raises,
  as it does on a capturing CUDA stream;
- replay re-runs the nodes in order on the very same tensors: in-place ops mutate their recorded
  targets again, functional ops and native calls write their fresh results into the recorded
  result tensors (static addresses), views are already aliases and are skipped.

So anything dgcompat derived from the buffers *outside* the recorded work (in an earlier eager
call, or in another graph) is not recomputed at replay, exactly as on the GPU; the fake native
logits call re-checks at replay that its schedule belongs to its lengths (a mismatch raises the
fake's ``HANG``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from dgcompat import _tooling

_IDS = itertools.count(1)  # graph ids (the driver's capture ids stand-in)
_SYNCS = {"_local_scalar_dense", "equal", "nonzero", "is_nonzero", "item"}


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


class HostSyncInCapture(RuntimeError):
    """A host synchronization while recording (illegal on a capturing CUDA stream)."""


class Graph:
    """Recorded device work of the calls made inside :meth:`capture`; :meth:`replay` re-runs it."""

    def __init__(self) -> None:
        self.id = next(_IDS)
        self.nodes: list[tuple[str, Any, Any, Any, Any]] = []
        self.recording = False

    def natives(self, name: str) -> int:
        """How many recorded native calls of ``name`` the graph holds."""
        return sum(1 for kind, fn, *_ in self.nodes if kind == "native" and fn.__name__ == name)

    @contextmanager
    def capture(self, module: Any, *, driver_id: bool = True) -> Iterator[Graph]:
        """Record the calls made inside the block (dgcompat sees a capture with this graph's id, or, with
        ``driver_id=False``, a capture whose id the driver does not tell); ``module`` is the bound
        deep_gemm (or reference) module whose native calls become nodes."""

        saved = _wrap_natives(self, module)
        _tooling.rebind_indexer()  # rebind to the wrapped natives
        self.recording = True
        try:
            with _tooling.simulated_capture((lambda: self.id) if driver_id else (lambda: None)), _Recorder(self):
                yield self
        finally:
            self.recording = False
            for name, value in saved.items():
                setattr(module, name, value)
            _tooling.rebind_indexer()

    def replay(self) -> None:
        """Re-run the recorded work in order on the recorded tensors."""
        for kind, fn, args, kwargs, out in self.nodes:
            if kind == "view":
                continue
            if kind == "inplace":
                fn(*args, **kwargs)
                continue
            fresh = fn(*args, **kwargs)
            for dst, src in zip(_tensors(out), _tensors(fresh), strict=True):
                dst.copy_(src)


class _Recorder(TorchDispatchMode):
    def __init__(self, graph: Graph) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch declares TorchDispatchMode.__init__ untyped
        self.graph = graph
        self.depth = 0  # > 0 inside a native call: its ops are the kernel's, not recorded one by one

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if _NATIVE_DEPTH[0] == 0 and self.graph.recording and name in _SYNCS:
            raise HostSyncInCapture(f"{name} while capturing")
        out = func(*args, **kwargs)
        if _NATIVE_DEPTH[0] or not self.graph.recording:
            return out
        schema = func._schema
        mutates = any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
        ins = {t.untyped_storage().data_ptr() for t in _tensors((args, kwargs))}
        outs = _tensors(out)
        if mutates:
            kind = "inplace"
        elif outs and all(t.untyped_storage().data_ptr() in ins for t in outs):
            kind = "view"
        else:
            kind = "op"
        self.graph.nodes.append((kind, func, args, kwargs, out))
        return out


_NATIVE_DEPTH = [0]


def _wrap_natives(graph: Graph, module: Any) -> dict[str, Any]:
    names = [n for n in ("get_paged_mqa_logits_metadata", "fp8_paged_mqa_logits", "fp8_fp4_paged_mqa_logits")
             if hasattr(module, n)]
    saved = {name: getattr(module, name) for name in names}
    for name, real in saved.items():
        setattr(module, name, _native(graph, real))
    return saved


def _native(graph: Graph, real: Callable[..., Any]) -> Callable[..., Any]:
    def node(*args: Any, **kwargs: Any) -> Any:
        _NATIVE_DEPTH[0] += 1
        try:
            out = real(*args, **kwargs)
        finally:
            _NATIVE_DEPTH[0] -= 1
        if graph.recording:
            graph.nodes.append(("native", real, args, kwargs, out))
        return out
    node.__name__ = real.__name__
    return node
