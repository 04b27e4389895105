"""Which torch a deep_gemm native library needs, read from the symbols it imports.

A library that imports mangled ``c10::`` / ``at::`` / ``torch::`` symbols was compiled against
one torch's C++ headers: it needs that exact torch minor (a neighbouring one fails to load or,
worse, mis-reads tensors). The binary does not say which minor; that comes from the pairing table
in :mod:`dgcompat.detection` (``EXPECTED_TORCH``, built from each wheel's header fingerprint).

A library that imports only the C shim (``aoti_torch_*``, ``torch_*``, registering ops through
``STABLE_TORCH_LIBRARY``) uses torch's stable ABI: it runs on the torch that introduced the newest
shim function it imports, and on every later one. :data:`SHIM_SINCE` dates the shim functions.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

from ._elf import DynamicSymbols

__all__ = ["Imports", "classify", "SHIM_SINCE", "STABLE_SHIM_BASE", "UNSTABLE_PREFIXES"]

#: Mangled-name prefixes of torch's C++ API (namespaces c10, at, torch, caffe2; vtables/typeinfo).
UNSTABLE_PREFIXES: tuple[str, ...] = tuple(
    f"{kind}{ns}" for kind in ("_ZN", "_ZNK", "_ZTVN", "_ZTIN", "_ZTSN") for ns in ("3c10", "2at", "5torch", "6caffe2")
)

#: The ``aoti_torch_*`` shim plus ``aoti_torch_library_*`` registration (STABLE_TORCH_LIBRARY)
#: shipped together in torch 2.8, the first release with a stable-ABI extension API.
STABLE_SHIM_BASE = Version("2.8")

#: Shim functions newer than :data:`STABLE_SHIM_BASE`, with the torch minor that first exports
#: them. torch 2.10's ``torch/csrc/stable/c/shim.h`` added the ``torch_*`` family; its test
#: extension ``libtorch_agn_2_10`` (built to run on torch >= 2.10) is the first that uses them.
SHIM_SINCE: dict[str, Version] = {
    name: Version("2.10")
    for name in (
        "torch_call_dispatcher", "torch_library_impl", "torch_from_blob", "torch_get_const_data_ptr",
        "torch_get_mutable_data_ptr", "torch_get_current_cuda_blas_handle", "torch_new_list_reserve_size",
        "torch_list_size", "torch_list_get_item", "torch_list_push_back", "torch_delete_list",
        "torch_string_c_str", "torch_string_length", "torch_delete_string", "torch_dtype_float8_e8m0fnu",
        "torch_dtype_float4_e2m1fn_x2",
    )
}


@dataclass(frozen=True)
class Imports:
    """What a library's imports say about torch."""

    rule: str
    """``"exact"`` (C++ API symbols), ``"minimum"`` (C shim only) or ``"none"`` (imports no torch symbol)."""
    minimum: Version | None
    """For ``"minimum"``: the torch the newest imported shim function needs."""
    undated: tuple[str, ...]
    """Imported ``torch_*`` shim functions :data:`SHIM_SINCE` does not date (newer than it knows)."""
    shim_count: int
    unstable_count: int


def classify(symbols: DynamicSymbols) -> Imports:
    """Read the torch rule from the undefined symbols of one library."""
    unstable = [s for s in symbols.undefined if s.startswith(UNSTABLE_PREFIXES)]
    shim = [s for s in symbols.undefined if s.startswith(("aoti_torch_", "torch_"))]
    if unstable:
        return Imports("exact", None, (), len(shim), len(unstable))
    if not shim:
        return Imports("none", None, (), 0, 0)
    newest = STABLE_SHIM_BASE
    undated: list[str] = []
    for name in shim:
        since = SHIM_SINCE.get(name)
        if since is None and name.startswith("torch_"):
            undated.append(name)
        elif since is not None and since > newest:
            newest = since
    return Imports("minimum", newest, tuple(undated), len(shim), 0)
