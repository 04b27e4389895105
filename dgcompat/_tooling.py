"""The runtime's one internal interface for dgcompat's own tooling: the certification wing, the benchmarks, the tests.

Engines use the public surface (``dgcompat.<name>``); this module serves what certifying, measuring
and testing the runtime needs beyond it, under names meant for that use, so that the runtime's
private names never cross into the other wing (a test checks it). It carries no stability promise
to engines. Nothing in the runtime imports it.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

from . import _backend
from . import _pysurface
from . import detection
from . import env
from ._calls import UpstreamCall
from ._install.launch import hookless_env
from ._install.launch import is_hook_dir
from ._install.launch import launch_env
from ._install.launch import main as run_command
from ._surface import DEEP_GEMM_MODULES
from ._surface import NAMES
from ._surface import SUBMODULES
from .detection import Release
from .detection import _elf
from .detection._known import expected_torch as _expected
from .indexer import _bind as _indexer_bind
from .indexer import _ragged as _indexer_ragged
from .indexer._guards import same_metadata
from .indexer._sm100 import unit_mx_scales
from .indexer._state import STATE as _INDEXER
from .table import _effective

__all__ = [
    "UpstreamCall", "ADAPTERS", "all_calls", "load_backend", "loaded_backend", "backend_name", "expected_torch",
    "effective_release", "env_report", "env_folder", "env_text", "retired_variables", "internal_variable_prefixes",
    "allow_torch_mismatch", "read_dynamic_bytes",
    "Registration", "source_registrations", "source_parameters", "parameters_from_sources", "signature_digest", "own_nodes",
    "launch_env", "hookless_env", "is_hook_dir", "run_command", "unit_mx_scales", "same_metadata", "capture_probe", "indexer_state",
    "last_paged_plan", "rebind_indexer", "simulated_capture", "NAMES", "SUBMODULES", "DEEP_GEMM_MODULES",
]

#: The adapter modules that declare ``CALLS`` (in this order).
ADAPTERS = ("gemm", "moe", "indexer", "scales", "knobs")

load_backend = _backend.load
loaded_backend = _backend.loaded_module
backend_name = detection.backend_name
env_report = env.env_report
env_folder = env.folder
env_text = env.text
retired_variables = env.RETIRED
internal_variable_prefixes = env.INTERNAL_PREFIXES
allow_torch_mismatch = env.allow_torch_mismatch
read_dynamic_bytes = _elf.read_dynamic_bytes
#: How a build's source binds names at import (``globals().update(...)``): one reader for detection and the surface.
Registration = _pysurface.Registration
source_registrations = _pysurface.registrations
#: The parameters a build's source gives the named functions, and the id of such a set (detection's surface).
source_parameters = _pysurface.source_parameters
parameters_from_sources = _pysurface.parameters_from_sources
signature_digest = _pysurface.digest
#: The nodes of a function's (or module's) body in source order, not descending into nested scopes.
own_nodes = _pysurface.own_nodes


def all_calls() -> tuple[UpstreamCall, ...]:
    """Every upstream call the adapters declare (each module's ``CALLS``), in :data:`ADAPTERS` order.

    Imports the adapter modules (never on a hot path).
    """
    calls: list[UpstreamCall] = []
    for name in ADAPTERS:
        calls.extend(importlib.import_module(f"dgcompat.{name}").CALLS)
    return tuple(calls)


def expected_torch(dist: str, version: Any) -> Any:
    """The torch specifier a release's native library was built for (:data:`dgcompat.detection.EXPECTED_TORCH`), or None."""
    return _expected(dist, version)


def effective_release(rel: Release, backend: str) -> tuple[str, Any]:
    """The ``(distribution, version)`` the capability rows are matched against for ``rel``."""
    return _effective(rel, backend)


def capture_probe(device: Any) -> Callable[[], bool]:
    """The capture-status query a paged call on ``device`` makes (the indexer's, so simulations apply)."""
    return _INDEXER.probe(device)


def indexer_state() -> dict[str, int]:
    """What the indexer holds now (:meth:`dgcompat.indexer._state.IndexerState.held`)."""
    return _INDEXER.held()


def last_paged_plan() -> tuple[Any, ...] | None:
    """The paged plan the next repeat call would reuse (see :mod:`dgcompat.indexer._plan` for its fields)."""
    return _INDEXER.last


def rebind_indexer() -> None:
    """Unbind the indexer's upstream calls (the next call binds them again, e.g. to wrapped natives)."""
    _indexer_bind.B.clear()
    _indexer_ragged.B.clear()


@contextlib.contextmanager
def simulated_capture(capture_id: Callable[[], int | None]) -> Iterator[None]:
    """Inside the block every paged call sees a CUDA-graph capture underway, whose driver id is ``capture_id()``.

    For the CPU analogue of graph capture (:mod:`dgcompat_conformance.gpu.graphsim`): the indexer's
    capture-status query and driver id are replaced for the block and restored afterwards.
    """
    saved = (_INDEXER.probe, _INDEXER.driver_id)
    capturing: Callable[[], bool] = lambda: True  # noqa: E731
    _INDEXER.probe = lambda device: capturing
    _INDEXER.driver_id = capture_id
    try:
        yield
    finally:
        _INDEXER.probe, _INDEXER.driver_id = saved

