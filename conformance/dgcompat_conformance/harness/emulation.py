"""What each stand-in native function checks and computes.

A stand-in call arrives here after its arity and argument kinds were checked against the
release's recovered signature. This module then

1. names the positional arguments: by the release's own schema where it has one (TORCH_LIBRARY builds:
   :func:`schema_names`, since one arity can mean different layouts, e.g. vLLM 0.34.0's inserted
   ``logits_dtype``), else with the layout that matches the recovered arity (tvm-ffi builds: layouts only
   ever grew by appended arguments, except the one insertion of ``ensure_zero_padding`` in
   sgl-deep-gemm 0.1.4, which the arity tells apart),
2. applies the host-side assertions of the real native code that matter to engines, and
3. computes the result with :mod:`dgcompat.reference` and returns what the real binding returns.

Every rule cites where it comes from. ``docs/sources/gpu-observed.md`` is what real wheels did on an H200,
``docs/sources/upstream-history.md`` and ``docs/sources/wheel-matrix.md`` are the static reading of DeepGEMM's sources and of the
wheels (all in docs/sources/). A rule is only emulated when it is
documented there; anything else is left to the reference's own argument checks, whose
:class:`~dgcompat.errors.BadArgumentError` is turned into the ``RuntimeError`` a native host
assertion raises, so that no stand-in error looks like one of dgcompat's own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from dgcompat import reference
from dgcompat.errors import DgcompatError

from .indexer_rules import IndexerRules

__all__ = [
    "StandInHang",
    "StandInNotEmulated",
    "Profile",
    "NativeState",
    "emulate",
    "LAYOUTS",
]


class StandInHang(BaseException):
    """The real kernel would never finish (a GPU hang): the call was stopped instead.

    Derived from :class:`BaseException` so that no ``except Exception`` in an adapter can turn a
    hang into an ordinary error; the harness also counts every one it raises.
    """


class StandInNotEmulated(RuntimeError):
    """The stand-in does not emulate this native function (or this use of it)."""


@dataclass
class Profile:
    """The facts about one release that change what its native code accepts."""

    dist: str
    version: str
    flavor: str  # "sgl" (sgl-deep-gemm) or "bundled" (sgl-kernel / sglang-kernel copy)
    binding: str  # "tvm-ffi" or "torch-library"
    arch: str = "sm90"
    device_sms: int = 132  # the H200 of docs/sources/gpu-observed.md
    schedule_balance: Literal["tail", "head"] = "tail"  # where the remainder of a split goes
    ffi_returns: str = "torch"  # "torch" or "dlpack" (tvm-ffi results as DLPack capsule owners)
    rules: IndexerRules | None = None  # indexer conditions read from the binary's host asserts

    def block_kv_allowed(self, default: tuple[int, ...]) -> tuple[int, ...]:
        """The binary's per-arch block_kv condition where it states one, else ``default``."""
        if self.rules is not None and self.arch in self.rules.block_kv:
            return tuple(self.rules.block_kv[self.arch])
        return default

    @property
    def paged_context_lens_dim(self) -> int:
        # docs/sources/gpu-observed.md (sgl-deep-gemm 0.1.2/0.1.4): 1-D rejected with "context_lens.dim() == 2";
        # docs/sources/upstream-history.md §3 "S-arch" column: the bundled copies take 1-D only.
        return 1 if self.flavor == "bundled" else 2

    @property
    def paged_native_next_n(self) -> tuple[int, ...]:
        # docs/sources/gpu-observed.md: next_n 3 and 4 rejected with "next_n == 1 or next_n == 2" on SM90;
        # docs/sources/upstream-history.md §1.5 / §2.2: SM100 takes any next_n >= 1 from 7f2a703 on.
        if self.arch == "sm90" and self.rules is not None and self.rules.sm90_next_n:
            return self.rules.sm90_next_n  # the binary's own list (vLLM's 2.8.1 build: 1, 2, 4)
        if self.arch == "sm90" or self.flavor == "bundled":
            return (1, 2)
        return tuple(range(1, 65))


@dataclass
class NativeState:
    """Process-wide native state the real library keeps (device runtime, layout settings)."""

    num_sms: int = 132
    tc_util: int = 100
    pdl: bool = False
    compile_mode: int = 0
    mk_alignment: int = 128
    deterministic: bool = False
    ignore_compile_dims: bool = False
    block_size_multiple_of: tuple[int, int] = (1, 1)
    init_args: tuple[Any, ...] | None = None
    calls: dict[str, int] = field(default_factory=dict)
    hangs: list[str] = field(default_factory=list)
    not_emulated: list[str] = field(default_factory=list)


@dataclass
class Ctx:
    profile: Profile
    state: NativeState
    op: str


class _Args(dict[str, Any]):
    """Named native arguments (attribute access for readability)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError as exc:
            raise AttributeError(name) from exc


# --------------------------------------------------------------------------- errors


def _assert(cond: bool, where: str, expr: str) -> None:
    """A failed ``DG_HOST_ASSERT``: both bindings surface it as RuntimeError (docs/sources/gpu-observed.md)."""
    if not cond:
        raise RuntimeError(f"Assertion error ({where}): {expr} [cpu-tier stand-in]")


def _compute(where: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a reference function; its argument errors become native-style assertions."""

    try:
        return fn(*args, **kwargs)
    except DgcompatError as exc:
        raise RuntimeError(f"Assertion error ({where}): {exc} [cpu-tier stand-in, reference check]") from exc


def _not_emulated(ctx: Ctx, what: str) -> StandInNotEmulated:
    ctx.state.not_emulated.append(f"{ctx.op}: {what}")
    return StandInNotEmulated(f"cpu-tier stand-in of {ctx.op} does not emulate {what}")


def _is_tensor(x: Any) -> bool:
    return isinstance(x, torch.Tensor)


def _dtype(x: Any) -> str:
    return str(x.dtype).replace("torch.", "") if _is_tensor(x) else type(x).__name__


def _pair(ctx: Ctx, name: str, v: Any) -> tuple[Any, Any]:
    """An ``Any`` (data, sf) argument of the bundled schemas (pybind/torch ``std::pair``)."""
    if isinstance(v, (tuple, list)) and len(v) == 2 and _is_tensor(v[0]) and _is_tensor(v[1]):
        return v[0], v[1]
    raise RuntimeError(
        f"{ctx.op}(): argument '{name}' must be a (Tensor, Tensor) pair, got {type(v).__name__} [cpu-tier stand-in]"
    )


# --------------------------------------------------------------------------- argument layouts

_EPI = ("epilogue_kind", "epilogue_scalar", "epilogue_sfd", "epilogue_count")
_GEMM_FP8 = ("a", "a_sf", "b", "b_sf", "d", "c", "recipe", "recipe_a", "recipe_b", "compiled_dims",
             "disable_ue8m0_cast")
_GROUPED_FP8 = ("a", "a_sf", "b", "b_sf", "d", "grouped_layout", "recipe", "recipe_a", "recipe_b",
                "compiled_dims", "disable_ue8m0_cast", "use_psum_layout")
_MASKED_FP8 = ("a", "a_sf", "b", "b_sf", "d", "masked_m", "expected_m", "recipe", "recipe_a", "recipe_b",
               "compiled_dims", "disable_ue8m0_cast")

# Upstream DeepGEMM 2.8 (stable ABI): the epilogue is (kind, alpha, sfd), three arguments.
_EPI3 = ("epilogue_kind", "epilogue_alpha", "epilogue_sfd")

#: (flavor, op) -> argument names by arity (docs/sources/wheel-matrix.md §5 native schema legend; 2.8.1 arities
#: from the schemas in vllm 0.33.0's _C_extension.abi3.so).
LAYOUTS: dict[tuple[str, str], dict[int, tuple[str, ...]]] = {
    ("sgl", "fp8_fp4_gemm_nt"): {11: _GEMM_FP8, 12: _GEMM_FP8 + ("alpha",), 16: _GEMM_FP8 + ("alpha",) + _EPI,
                                 15: _GEMM_FP8 + ("alpha",) + _EPI3},
    ("sgl", "m_grouped_fp8_fp4_gemm_nt_contiguous"): {
        13: _GROUPED_FP8 + ("expected_m_for_psum_layout",),
        14: _GROUPED_FP8 + ("ensure_zero_padding", "expected_m_for_psum_layout"),
        18: _GROUPED_FP8 + ("ensure_zero_padding", "expected_m_for_psum_layout") + _EPI,
        17: _GROUPED_FP8 + ("ensure_zero_padding", "expected_m_for_psum_layout") + _EPI3,
    },
    ("sgl", "m_grouped_fp8_fp4_gemm_nt_masked"): {12: _MASKED_FP8, 16: _MASKED_FP8 + _EPI, 15: _MASKED_FP8 + _EPI3},
    ("sgl", "bf16_gemm_nt"): {
        5: ("a", "b", "d", "c", "compiled_dims"),
        6: ("a", "b", "d", "c", "compiled_dims", "alpha"),
        10: ("a", "b", "d", "c", "compiled_dims", "alpha") + _EPI,
        9: ("a", "b", "d", "c", "compiled_dims", "alpha") + _EPI3,
    },
    ("sgl", "m_grouped_bf16_gemm_nt_contiguous"): {
        7: ("a", "b", "d", "grouped_layout", "compiled_dims", "use_psum_layout", "expected_m_for_psum_layout"),
        8: ("a", "b", "d", "grouped_layout", "compiled_dims", "use_psum_layout", "ensure_zero_padding",
            "expected_m_for_psum_layout"),
        12: ("a", "b", "d", "grouped_layout", "compiled_dims", "use_psum_layout", "ensure_zero_padding",
             "expected_m_for_psum_layout") + _EPI,
        11: ("a", "b", "d", "grouped_layout", "compiled_dims", "use_psum_layout", "ensure_zero_padding",
             "expected_m_for_psum_layout") + _EPI3,
    },
    ("sgl", "m_grouped_bf16_gemm_nt_masked"): {
        6: ("a", "b", "d", "masked_m", "expected_m", "compiled_dims"),
        10: ("a", "b", "d", "masked_m", "expected_m", "compiled_dims") + _EPI,
        9: ("a", "b", "d", "masked_m", "expected_m", "compiled_dims") + _EPI3,
    },
    ("sgl", "fp8_mqa_logits"): {8: ("q", "kv", "kv_sf", "weights", "ks", "ke", "clean_logits", "max_seqlen_k")},
    ("sgl", "fp8_fp4_mqa_logits"): {
        10: ("q", "q_sf", "kv", "kv_sf", "weights", "ks", "ke", "clean_logits", "max_seqlen_k", "logits_dtype"),
        11: ("q", "q_sf", "kv", "kv_sf", "weights", "ks", "ke", "clean_logits", "max_seqlen_k", "logits_dtype",
             "schedule_meta"),
        9: ("q", "q_sf", "kv", "kv_sf", "weights", "ks", "ke", "max_seqlen_k", "schedule_meta"),
    },
    ("sgl", "fp8_paged_mqa_logits"): {
        9: ("q", "kv_cache", "weights", "context_lens", "block_table", "schedule_meta", "max_context_len",
            "clean_logits", "indices"),
    },
    ("sgl", "fp8_fp4_paged_mqa_logits"): {
        11: ("q", "q_sf", "kv_cache", "weights", "context_lens", "block_table", "schedule_meta", "max_context_len",
             "clean_logits", "logits_dtype", "indices"),
        9: ("q", "q_sf", "kv_cache", "weights", "context_lens", "block_table", "schedule_meta", "max_context_len",
            "indices"),
    },
    ("sgl", "get_paged_mqa_logits_metadata"): {4: ("context_lens", "block_kv", "num_sms", "indices")},
    ("sgl", "transform_sf_into_required_layout"): {
        9: ("sf", "mn", "k", "recipe_a", "recipe_b", "recipe_c", "num_groups", "is_sfa", "disable_ue8m0_cast"),
        10: ("sf", "mn", "k", "recipe_a", "recipe_b", "recipe_c", "num_groups", "is_sfa", "disable_ue8m0_cast",
             "psum_layout"),
        8: ("sf", "mn", "k", "recipe", "num_groups", "is_sfa", "disable_ue8m0_cast", "psum_layout"),
    },
    ("sgl", "get_mn_major_tma_aligned_packed_ue8m0_tensor"): {1: ("sf",), 2: ("sf", "psum_layout")},
    # The copies bundled in sgl-kernel / sglang-kernel (S-arch, a DeepGEMM v2.1 base).
    ("bundled", "fp8_gemm_nt"): {7: ("a", "b", "d", "c", "recipe", "compiled_dims", "disable_ue8m0_cast")},
    ("bundled", "m_grouped_fp8_gemm_nt_contiguous"): {
        7: ("a", "b", "d", "grouped_layout", "recipe", "compiled_dims", "disable_ue8m0_cast"),
    },
    ("bundled", "m_grouped_fp8_gemm_nt_masked"): {
        11: ("a", "b", "d", "masked_m", "expected_m", "recipe", "compiled_dims", "disable_ue8m0_cast",
             "max_block_n", "enable_overlap", "signal"),
    },
    ("bundled", "bf16_gemm_nt"): {5: ("a", "b", "d", "c", "compiled_dims")},
    ("bundled", "m_grouped_bf16_gemm_nt_contiguous"): {5: ("a", "b", "d", "grouped_layout", "compiled_dims")},
    ("bundled", "m_grouped_bf16_gemm_nt_masked"): {6: ("a", "b", "d", "masked_m", "expected_m", "compiled_dims")},
    ("bundled", "fp8_mqa_logits"): {
        6: ("q", "kv", "weights", "ks", "ke", "clean_logits"),
        7: ("q", "kv", "weights", "ks", "ke", "clean_logits", "max_seqlen_k"),
    },
    ("bundled", "fp8_paged_mqa_logits"): {
        8: ("q", "kv_cache", "weights", "context_lens", "block_table", "schedule_meta", "max_context_len",
            "clean_logits"),
    },
    ("bundled", "get_paged_mqa_logits_metadata"): {3: ("context_lens", "block_kv", "num_sms")},
    ("bundled", "transform_sf_into_required_layout"): {
        7: ("sf", "mn", "k", "recipe", "num_groups", "is_sfa", "disable_ue8m0_cast"),
    },
    ("bundled", "get_mn_major_tma_aligned_packed_ue8m0_tensor"): {1: ("sf",)},
}

# Runtime-state functions share one layout everywhere (names from the TORCH_LIBRARY schemas).
_COMMON_LAYOUTS: dict[str, dict[int, tuple[str, ...]]] = {
    "init": {2: ("library_root_path", "cuda_home")},
    "set_num_sms": {1: ("new_num_sms",)},
    "get_num_sms": {0: ()},
    "set_tc_util": {1: ("new_tc_util",)},
    "get_tc_util": {0: ()},
    "set_pdl": {1: ("enable",)},
    "get_pdl": {0: ()},
    "set_compile_mode": {1: ("new_compile_mode",)},
    "get_compile_mode": {0: ()},
    "use_deterministic_algorithms": {1: ("enable",)},
    "get_deterministic_algorithms": {0: ()},
    "set_ignore_compile_dims": {1: ("ignore",)},
    "set_block_size_multiple_of": {2: ("m", "n"), 1: ("new_value",)},
    "get_mk_alignment_for_contiguous_layout": {0: ()},
    "set_mk_alignment_for_contiguous_layout": {1: ("new_value",)},
    "get_theoretical_mk_alignment_for_contiguous_layout": {1: ("expected_m",), 2: ("expected_m", "num_groups")},
    "get_tma_aligned_size": {2: ("mn", "element_size")},
    "get_mn_major_tma_aligned_tensor": {1: ("sf",)},
    "shutdown": {0: ()},
    "set_mlopart_callbacks": {3: ("is_available", "create_memory", "release")},
    "release_mlopart": {0: ()},
    "is_localization_available": {0: ()},
    "uses_native_locality_domains": {0: ()},
    "get_num_locality_domains": {0: ()},
    "is_localized": {0: (), 1: ("x",)},
}


#: Schema argument names (TORCH_LIBRARY builds) -> the names the stand-ins read, where a build spells one
#: differently (the schemas of sgl-deep-gemm 0.2.3+, the bundled copies and vLLM's 2.8.1; docs/sources/wheel-matrix.md §5).
SCHEMA_ALIASES: dict[str, str] = {
    "kv_data": "kv", "cu_seq_len_k_start": "ks", "cu_seq_len_k_end": "ke", "fused_kv_cache": "kv_cache",
    "sfa": "a_sf", "sfb": "b_sf", "m_indices": "grouped_layout", "cuda_home_path_by_torch": "cuda_home",
    "new_enable_pdl": "enable", "enabled": "enable",
}
#: Per-op aliases, where a schema name means something else in another op.
_OP_SCHEMA_ALIASES: dict[str, dict[str, str]] = {
    "get_tma_aligned_size": {"x": "mn", "size": "mn"},  # vLLM's 2.8.1: x; the bundled copies: size
    "is_localized": {"t": "x"},
    "set_ignore_compile_dims": {"new_value": "ignore"},
    "get_mn_major_tma_aligned_tensor": {"a": "sf"},  # the bundled copies
    "get_mn_major_tma_aligned_packed_ue8m0_tensor": {"a": "sf"},  # the bundled copies
}
#: Arguments only a schema has (no arity layout names them); the stand-in reads them by these names.
_SCHEMA_ONLY_NAMES: dict[str, frozenset[str]] = {"init": frozenset({"python_package_name"})}  # vLLM 0.34.0's 2.8.1


def schema_names(flavor: str, op: str, names: tuple[str | None, ...]) -> tuple[str, ...] | None:
    """The stand-in's names of ``op``'s arguments from the release's schema names, or None when the schema has
    none (tvm-ffi builds: the arity layout then decides). Raises :class:`StandInNotEmulated` for a schema
    argument the stand-in of ``op`` does not read under any name."""
    if not names or any(n is None for n in names):
        return None
    own = _OP_SCHEMA_ALIASES.get(op, {})
    mapped = tuple(own.get(n) or SCHEMA_ALIASES.get(n) or n for n in names if n is not None)
    known = {n for table in (LAYOUTS.get((flavor, op)), _COMMON_LAYOUTS.get(op)) if table
             for layout in table.values() for n in layout} | _SCHEMA_ONLY_NAMES.get(op, frozenset())
    unknown = [orig for orig, n in zip(names, mapped, strict=True) if n not in known]
    if unknown:
        raise StandInNotEmulated(f"cpu-tier stand-in of {op} does not know the schema argument(s) {unknown}")
    return mapped


def layout_for(flavor: str, op: str, arity: int) -> tuple[str, ...] | None:
    """Argument names of ``op`` with ``arity`` arguments in ``flavor``, or None if unknown."""
    table = LAYOUTS.get((flavor, op)) or _COMMON_LAYOUTS.get(op)
    if table is None:
        return None
    return table.get(arity)


# --------------------------------------------------------------------------- runtime state


def _init(ctx: Ctx, a: _Args) -> None:
    # Native init only records the package and toolkit paths (docs/sources/wheel-matrix.md §1 item 7: its call
    # graph reaches no CUDA call); the stand-in does the same.
    # vLLM 0.34.0's 2.8.1: init(str library_root_path, str python_package_name='deep_gemm'), no toolkit path.
    ctx.state.init_args = (a.library_root_path, a.get("cuda_home", a.get("python_package_name")))


def _set_num_sms(ctx: Ctx, a: _Args) -> None:
    # docs/sources/upstream-history.md §1.14: DeviceRuntime::set_num_sms asserts 0 <= n <= multiProcessorCount.
    n = int(a.new_num_sms)
    _assert(0 <= n <= ctx.profile.device_sms, "csrc/jit/device_runtime.hpp",
            f"0 <= new_num_sms and new_num_sms <= {ctx.profile.device_sms} (got {n})")
    ctx.state.num_sms = n


def _set_tc_util(ctx: Ctx, a: _Args) -> None:
    n = int(a.new_tc_util)
    _assert(0 <= n <= 100, "csrc/jit/device_runtime.hpp", f"0 <= new_tc_util and new_tc_util <= 100 (got {n})")
    ctx.state.tc_util = n


def _set_mk_alignment(ctx: Ctx, a: _Args) -> None:
    ctx.state.mk_alignment = int(a.new_value)


def _theoretical_alignment(ctx: Ctx, a: _Args) -> int:
    # docs/sources/upstream-history.md §1.13: SM100 steps down from 240; every other arch answers 128.
    return 128 if ctx.profile.arch == "sm90" else ctx.state.mk_alignment


_STATE_OPS: dict[str, Callable[[Ctx, _Args], Any]] = {
    "init": _init,
    "set_num_sms": _set_num_sms,
    "get_num_sms": lambda ctx, a: ctx.state.num_sms,
    "set_tc_util": _set_tc_util,
    "get_tc_util": lambda ctx, a: ctx.state.tc_util,
    "set_pdl": lambda ctx, a: setattr(ctx.state, "pdl", bool(a.enable)),
    "get_pdl": lambda ctx, a: ctx.state.pdl,
    "set_compile_mode": lambda ctx, a: setattr(ctx.state, "compile_mode", int(a.new_compile_mode)),
    "get_compile_mode": lambda ctx, a: ctx.state.compile_mode,
    "use_deterministic_algorithms": lambda ctx, a: setattr(ctx.state, "deterministic", bool(a.enable)),
    "get_deterministic_algorithms": lambda ctx, a: ctx.state.deterministic,
    "set_ignore_compile_dims": lambda ctx, a: setattr(ctx.state, "ignore_compile_dims", bool(a.ignore)),
    "set_block_size_multiple_of": lambda ctx, a: setattr(
        ctx.state, "block_size_multiple_of",
        (int(a.m), int(a.n)) if "m" in a else tuple(int(x) for x in (list(a.new_value) * 2)[:2])),
    "get_mk_alignment_for_contiguous_layout": lambda ctx, a: ctx.state.mk_alignment,
    "set_mk_alignment_for_contiguous_layout": _set_mk_alignment,
    "get_theoretical_mk_alignment_for_contiguous_layout": _theoretical_alignment,
    # 0.2.5's import-time locality-domain hooks and its atexit shutdown: nothing to do without a GPU.
    "shutdown": lambda ctx, a: None,
    "set_mlopart_callbacks": lambda ctx, a: None,
    "release_mlopart": lambda ctx, a: None,
    "is_localization_available": lambda ctx, a: False,
    "uses_native_locality_domains": lambda ctx, a: False,
    "get_num_locality_domains": lambda ctx, a: 1,
    "is_localized": lambda ctx, a: False,
}


# --------------------------------------------------------------------------- GEMMs


def _no_extras(ctx: Ctx, a: _Args, *, psum: bool = False) -> None:
    """Reject the options the stand-in cannot reproduce instead of silently ignoring them."""
    if a.get("alpha") is not None and float(a["alpha"]) != 1.0:
        raise _not_emulated(ctx, "alpha != 1")
    if a.get("epilogue_kind", 0) not in (0, None):
        raise _not_emulated(ctx, f"epilogue kind {a['epilogue_kind']}")
    if a.get("use_psum_layout") and not (psum and ctx.state.mk_alignment == reference.MK_ALIGNMENT):
        raise _not_emulated(ctx, f"use_psum_layout=True (alignment {ctx.state.mk_alignment})")
    if a.get("recipe_a") is not None or a.get("recipe_b") is not None:  # noqa: SIM102 - the comment is the inner test's
        # Split recipes over FP8 operands are what the reference computes; FP4 operands are not.
        if _dtype(a.a) != "float8_e4m3fn" or _dtype(a.b) != "float8_e4m3fn":
            raise _not_emulated(ctx, "recipe_a / recipe_b (FP4 operands)")


def _recipe(a: _Args, name: str = "recipe") -> tuple[int, ...] | None:
    r = a.get(name)
    return None if r is None else tuple(int(x) for x in r)


def _recipes(a: _Args) -> dict[str, Any]:
    """The recipe keywords for the reference: ``recipe``, and the split pair where the call has one."""
    out: dict[str, Any] = {"recipe": _recipe(a)}
    if a.get("recipe_a") is not None or a.get("recipe_b") is not None:
        out.update(recipe_a=_recipe(a, "recipe_a"), recipe_b=_recipe(a, "recipe_b"))
    return out


def _check_gemm_operands(ctx: Ctx, a_data: Any, b_data: Any, d: Any, *, fp8: bool) -> None:
    # DeepGEMM csrc/apis/gemm.hpp host checks (as summarized in docs/sources/upstream-history.md §1.1-§1.3, §4.1):
    # FP8 e4m3 (or BF16) operands, K-major A and B, N-major D in BF16 (FP32 only with accumulation).
    want = "float8_e4m3fn" if fp8 else "bfloat16"
    _assert(_dtype(a_data) == want, "csrc/apis/gemm.hpp", f"a.scalar_type() == {want} (got {_dtype(a_data)})")
    _assert(_dtype(b_data) == want, "csrc/apis/gemm.hpp", f"b.scalar_type() == {want} (got {_dtype(b_data)})")
    _assert(a_data.stride(-1) == 1 or a_data.size(-1) == 1, "csrc/utils/layout.hpp", "major_a == K (a.stride(-1) == 1)")
    _assert(b_data.stride(-1) == 1 or b_data.size(-1) == 1, "csrc/utils/layout.hpp", "major_b == K (b.stride(-1) == 1)")
    _assert(d.stride(-1) == 1 or d.size(-1) == 1, "csrc/utils/layout.hpp", "d is N-major (d.stride(-1) == 1)")
    _assert(_dtype(d) in ("bfloat16", "float32"), "csrc/apis/gemm.hpp",
            f"d.scalar_type() == bfloat16 or float32 (got {_dtype(d)})")


def _check_sf(ctx: Ctx, name: str, sf: Any) -> None:
    # csrc/utils/layout.hpp check_sf_layout (docs/sources/upstream-history.md §4.1): FP32 or packed-UE8M0 int32.
    _assert(_dtype(sf) in ("float32", "int32"), "csrc/utils/layout.hpp",
            f"{name}.scalar_type() == float32 or int32 (got {_dtype(sf)})")
    if ctx.profile.arch == "sm90":
        # SM90 kernels read FP32 scales; packed UE8M0 is the SM100 format (docs/sources/upstream-history.md §1.11).
        _assert(_dtype(sf) == "float32", "csrc/apis/layout.hpp", f"{name} is FP32 on SM90 (got {_dtype(sf)})")


def _gemm_fp8(ctx: Ctx, a: _Args) -> None:
    _no_extras(ctx, a)
    if ctx.profile.flavor == "bundled":
        (ad, asf), (bd, bsf) = _pair(ctx, "a", a.a), _pair(ctx, "b", a.b)
    else:
        ad, asf, bd, bsf = a.a, a.a_sf, a.b, a.b_sf
    _check_gemm_operands(ctx, ad, bd, a.d, fp8=True)
    _check_sf(ctx, "sfa", asf)
    _check_sf(ctx, "sfb", bsf)
    if a.get("c") is not None:
        # docs/sources/upstream-history.md §1.1: D = C + AB accumulates in FP32.
        _assert(_dtype(a.c) == "float32" and _dtype(a.d) == "float32", "csrc/apis/gemm.hpp",
                "c and d are float32 when accumulating")
    _compute("csrc/apis/gemm.hpp", reference.fp8_gemm_nt, (ad, asf), (bd, bsf), a.d, c=a.get("c"), **_recipes(a))


def _contiguous_layout_checks(ctx: Ctx, grouped_layout: Any, m: int) -> None:
    # docs/sources/upstream-history.md §1.2: m_indices / grouped_layout is int32, contiguous, one entry per row;
    # rows of each group are padded to get_mk_alignment_for_contiguous_layout() (128), -1 = padding.
    _assert(_dtype(grouped_layout) == "int32", "csrc/apis/gemm.hpp", "m_indices.scalar_type() == torch::kInt")
    _assert(grouped_layout.is_contiguous(), "csrc/apis/gemm.hpp", "m_indices.is_contiguous()")
    _assert(grouped_layout.dim() == 1 and grouped_layout.numel() == m, "csrc/apis/gemm.hpp",
            f"m == m_indices.numel() (m={m}, got shape {tuple(grouped_layout.shape)})")
    align = ctx.state.mk_alignment
    _assert(m % align == 0, "csrc/apis/gemm.hpp",
            f"m % get_mk_alignment_for_contiguous_layout() == 0 (m={m}, alignment={align})")
    if m:
        # A tile of `align` rows is computed with one group's weights: a tile mixing groups would be
        # silently wrong on the GPU, so the stand-in refuses it.
        blocks = grouped_layout.view(-1, align).to("cpu")
        for i, row in enumerate(blocks):
            ids = {int(x) for x in row.tolist() if int(x) >= 0}
            _assert(len(ids) <= 1, "deep_gemm/include/deep_gemm/scheduler",
                    f"rows {i * align}..{(i + 1) * align - 1} of m_indices belong to one group (got {sorted(ids)})")


def _psum_layout_checks(grouped_layout: Any, groups: int) -> None:
    # The psum layout (DeepGEMM tests/generators.py): one int32 end row per group, contiguous.
    _assert(_dtype(grouped_layout) == "int32", "csrc/apis/gemm.hpp", "grouped_layout.scalar_type() == torch::kInt")
    _assert(grouped_layout.is_contiguous(), "csrc/apis/gemm.hpp", "grouped_layout.is_contiguous()")
    _assert(grouped_layout.dim() == 1 and grouped_layout.numel() == groups, "csrc/apis/gemm.hpp",
            f"grouped_layout.numel() == num_groups (psum layout; {groups}, got shape {tuple(grouped_layout.shape)})")


def _layout_checks(ctx: Ctx, a: _Args, m: int, groups: int) -> None:
    if a.get("use_psum_layout"):
        _psum_layout_checks(a.grouped_layout, groups)
    else:
        _contiguous_layout_checks(ctx, a.grouped_layout, m)


def _grouped_contiguous_fp8(ctx: Ctx, a: _Args) -> None:
    _no_extras(ctx, a, psum=True)
    if ctx.profile.flavor == "bundled":
        (ad, asf), (bd, bsf) = _pair(ctx, "a", a.a), _pair(ctx, "b", a.b)
    else:
        ad, asf, bd, bsf = a.a, a.a_sf, a.b, a.b_sf
    _check_gemm_operands(ctx, ad, bd, a.d, fp8=True)
    _assert(_dtype(a.d) == "bfloat16", "csrc/apis/gemm.hpp", f"d.scalar_type() == torch::kBFloat16 (got {_dtype(a.d)})")
    _check_sf(ctx, "sfa", asf)
    _check_sf(ctx, "sfb", bsf)
    _layout_checks(ctx, a, int(ad.shape[0]), int(bd.shape[0]))
    _compute("csrc/apis/gemm.hpp", reference.m_grouped_fp8_gemm_nt_contiguous, (ad, asf), (bd, bsf), a.d,
             a.grouped_layout, use_psum_layout=bool(a.get("use_psum_layout")), **_recipes(a))


def _masked_checks(ctx: Ctx, masked_m: Any, d: Any) -> None:
    # docs/sources/upstream-history.md §1.3 / DeepGEMM gemm.hpp: masked_m int32 (G,), contiguous; D BF16.
    _assert(_dtype(masked_m) == "int32", "csrc/apis/gemm.hpp", "masked_m.scalar_type() == torch::kInt")
    _assert(masked_m.is_contiguous(), "csrc/apis/gemm.hpp", "masked_m.is_contiguous()")
    _assert(_dtype(d) == "bfloat16", "csrc/apis/gemm.hpp", f"d.scalar_type() == torch::kBFloat16 (got {_dtype(d)})")


def _grouped_masked_fp8(ctx: Ctx, a: _Args) -> Any:
    _no_extras(ctx, a)
    bundled = ctx.profile.flavor == "bundled"
    if bundled:
        (ad, asf), (bd, bsf) = _pair(ctx, "a", a.a), _pair(ctx, "b", a.b)
        if a.enable_overlap:
            # docs/sources/upstream-history.md §1.3 (SBO): returns (block_m, signal_threshold) and writes `signal`;
            # that protocol is not reproduced.
            raise _not_emulated(ctx, "enable_overlap=True (single-batch overlap)")
    else:
        ad, asf, bd, bsf = a.a, a.a_sf, a.b, a.b_sf
    _check_gemm_operands(ctx, ad, bd, a.d, fp8=True)
    _check_sf(ctx, "sfa", asf)
    _check_sf(ctx, "sfb", bsf)
    _masked_checks(ctx, a.masked_m, a.d)
    _compute("csrc/apis/gemm.hpp", reference.m_grouped_fp8_gemm_nt_masked, (ad, asf), (bd, bsf), a.d, a.masked_m,
             int(a.expected_m), **_recipes(a))
    # docs/sources/wheel-matrix.md §5: the bundled schema returns (int?, int?) = (None, None) without overlap.
    return (None, None) if bundled else None


def _gemm_bf16(ctx: Ctx, a: _Args) -> None:
    _no_extras(ctx, a)
    _check_gemm_operands(ctx, a.a, a.b, a.d, fp8=False)
    _compute("csrc/apis/gemm.hpp", reference.bf16_gemm_nt, a.a, a.b, a.d, c=a.get("c"))


def _grouped_contiguous_bf16(ctx: Ctx, a: _Args) -> None:
    _no_extras(ctx, a, psum=True)
    _check_gemm_operands(ctx, a.a, a.b, a.d, fp8=False)
    _assert(_dtype(a.d) == "bfloat16", "csrc/apis/gemm.hpp", f"d.scalar_type() == torch::kBFloat16 (got {_dtype(a.d)})")
    _layout_checks(ctx, a, int(a.a.shape[0]), int(a.b.shape[0]))
    _compute("csrc/apis/gemm.hpp", reference.m_grouped_bf16_gemm_nt_contiguous, a.a, a.b, a.d, a.grouped_layout,
             use_psum_layout=bool(a.get("use_psum_layout")))


def _grouped_masked_bf16(ctx: Ctx, a: _Args) -> None:
    _no_extras(ctx, a)
    _check_gemm_operands(ctx, a.a, a.b, a.d, fp8=False)
    _masked_checks(ctx, a.masked_m, a.d)
    _compute("csrc/apis/gemm.hpp", reference.m_grouped_bf16_gemm_nt_masked, a.a, a.b, a.d, a.masked_m,
             int(a.expected_m))


# --------------------------------------------------------------------------- scale-factor layouts


def _transform_sf(ctx: Ctx, a: _Args) -> Any:
    if a.get("psum_layout") is not None:
        raise _not_emulated(ctx, "psum_layout")
    if ctx.profile.flavor == "bundled":
        recipe = tuple(int(x) for x in a.recipe)
        # docs/sources/wheel-matrix.md §5 legend d: the bundled schema has `bool is_sfa=False` (v2.1 base, no
        # "is_sfa must be given" assertion).
        is_sfa: bool | None = bool(a.is_sfa) if len(recipe) == 3 else None
    else:
        if "recipe" in a:  # upstream 2.8: int[] recipe
            recipe = tuple(int(x) for x in a.recipe)
        else:
            recipe = (int(a.recipe_a), int(a.recipe_b)) + (() if a.recipe_c is None else (int(a.recipe_c),))
        is_sfa = a.is_sfa
        # docs/sources/upstream-history.md §1.11 (7f2a703+, which sgl-deep-gemm's C++ follows): a 3-tuple
        # recipe needs is_sfa, a 2-tuple forbids it.
        if len(recipe) == 3:
            _assert(is_sfa is not None, "csrc/apis/layout.hpp", "is_sfa.has_value()")
        else:
            _assert(is_sfa is None, "csrc/apis/layout.hpp", "not is_sfa.has_value()")
    # docs/sources/upstream-history.md §1.11: SM90 keeps FP32 (MN-major at granularity 1); SM100 packs UE8M0
    # and asserts `not disable_ue8m0_cast`.
    use_ue8m0 = ctx.profile.arch != "sm90"
    if use_ue8m0:
        _assert(not a.disable_ue8m0_cast, "csrc/apis/layout.hpp", "not disable_ue8m0_cast")
    else:
        # docs/sources/gpu-observed.md (2026-12-03): on an H200, sgl-deep-gemm 0.1.4 and vLLM 0.34.0's 2.8.1 reject a
        # 32-wide K recipe ((1, 32), SGLang's FP4-expert scales) with "Unknown SF transformation": SM90 transforms
        # float32 scales of 128-wide K blocks only.
        _assert(recipe[-1] == 128, "csrc/apis/layout.hpp", "Unknown SF transformation")
    return _compute("csrc/apis/layout.hpp", reference.transform_sf_into_required_layout, a.sf, int(a.mn), int(a.k),
                    recipe, num_groups=a.num_groups, is_sfa=is_sfa, use_ue8m0=use_ue8m0)


def _mn_major(ctx: Ctx, a: _Args) -> Any:
    return _compute("csrc/jit_kernels/impls/smxx_layout.hpp", reference.get_mn_major_tma_aligned_tensor, a.sf)


def _mn_major_packed(ctx: Ctx, a: _Args) -> Any:
    if a.get("psum_layout") is not None:
        raise _not_emulated(ctx, "psum_layout")
    return _compute("csrc/jit_kernels/impls/smxx_layout.hpp", reference.get_mn_major_tma_aligned_packed_ue8m0_tensor,
                    a.sf)


def _tma_aligned_size(ctx: Ctx, a: _Args) -> int:
    return int(_compute("csrc/utils/math.hpp", reference.get_tma_aligned_size, int(a.mn), int(a.element_size)))


# --------------------------------------------------------------------------- MQA logits


def _torch_dtype(ctx: Ctx, value: Any) -> Any:
    """A ``logits_dtype`` as a torch dtype: tvm-ffi builds take its name (``str(dtype).split('.')[-1]`` in their
    Python layer), TORCH_LIBRARY builds a ScalarType."""

    dt = getattr(torch, value, None) if isinstance(value, str) else value
    _assert(isinstance(dt, torch.dtype), "csrc/apis/attention.hpp", f"logits_dtype names a ScalarType (got {value!r})")
    return dt


def _indexer_format(ctx: Ctx, a: _Args, q: Any, q_sf: Any, kv_sf: Any) -> tuple[str, Any]:
    """Apply the release's host asserts on the formats of an MQA logits call: ``(format, logits dtype)``.

    Formats: ``fp8`` (q FP8, float32 KV scales), ``mxfp8`` (FP8 with int32 UE8M0 q / KV scales), ``fp4`` (packed
    e2m1 int8 with int32 UE8M0 scales). The conditions are the binary's own (``harness.indexer_rules``):

    * MX-era builds (``is_mx_sf`` in their texts): FP4 is q's dtype (``kPackedFP4`` = int8), MX is a ``q_sf``
      (upstream 2.8 passes ``q_sf`` exactly for these); ``is_mx_sf == (...)`` where the binary states it, else a
      bare ``not is_mx_sf`` taken to be the SM90 path's (the one architecture without MX kernels; the texts do not
      say which path asserts it); ``not is_fp4 or is_mx_sf``.
    * Earlier builds: a ``q_sf`` means FP4 and the FP4 branch asserts ``arch_major == 10`` (upstream 7f2a703
      ``is_fp4 = q_sf.has_value()``; the string is in 0.1.4's binary, not in 0.0.1's, where it is assumed).
    * SM90's kernels read FP8 only (``qk_dtype == torch::kFloat8_e4m3fn``, in every binary's SM90 section).
    * weights: float32, bfloat16 where the binary allows (``arch_major == 10``) or requires it (0.2.5), bfloat16
      only with bfloat16 logits.
    * logits: ``logits_dtype`` where the call has one (float32 / bfloat16 where the binary asserts that list);
      without one, float32, except bfloat16 where bfloat16 weights are required (0.2.5 on SM100).
    """

    rules = ctx.profile.rules or IndexerRules()
    arch = ctx.profile.arch
    where = "csrc/apis/attention.hpp"
    if rules.mx_scales:
        is_fp4, is_mx = _dtype(q) == "int8", q_sf is not None
    else:
        is_fp4 = is_mx = q_sf is not None
        if is_fp4:
            _assert(arch == "sm100", where, "arch_major == 10")
    _assert(_dtype(q) == ("int8" if is_fp4 else "float8_e4m3fn"), where,
            f"q_fp.scalar_type() == (is_fp4 ? kPackedFP4 : torch::kFloat8_e4m3fn) (got {_dtype(q)})")
    if arch in rules.mx_sf:
        want = (rules.mx_sf_fp4 if is_fp4 else rules.mx_sf)[arch]
        _assert(is_mx == want, where, f"{rules.mx_sf_text} (is_mx_sf = {is_mx}, is_fp4 = {is_fp4})")
    elif rules.bare_no_mx and arch == "sm90":
        _assert(not is_mx, where, "not is_mx_sf")
    if rules.fp4_needs_mx:
        _assert(not is_fp4 or is_mx, where, "not is_fp4 or is_mx_sf")
    if arch == "sm90":
        _assert(not is_fp4, where, "qk_dtype == torch::kFloat8_e4m3fn")
    dim = int(q.shape[-1]) * (2 if is_fp4 else 1)
    fmt = "fp4" if is_fp4 else "mxfp8" if is_mx else "fp8"
    dims = rules.head_dims.get("fp4" if is_fp4 else "fp8")
    if dims and is_mx:
        _assert(dim in dims, where, f"(not is_fp4 and head_dim == 32) or head_dim == 64 or head_dim == 128 "
                f"(head_dim = {dim}, is_fp4 = {is_fp4})")
    if is_mx:
        _assert(_dtype(q_sf) == "int32" and q_sf.is_contiguous() and tuple(q_sf.shape) == tuple(q.shape[:-1]), where,
                f"q_sf is int32 {tuple(q.shape[:-1])}, contiguous (got {_dtype(q_sf)} {tuple(q_sf.shape)})")
    if kv_sf is not None:
        want_sf = "int32" if is_mx else "float32"
        _assert(_dtype(kv_sf) == want_sf, where,
                f"kv_sf.scalar_type() == (is_mx_sf ? torch::kInt32 : torch::kFloat) (got {_dtype(kv_sf)})")

    weights = a.weights
    if "logits_dtype" in a:
        out = _torch_dtype(ctx, a.logits_dtype)
        if rules.logits_dtypes:
            _assert(out in (torch.float32, torch.bfloat16), where,
                    "logits_dtype == torch::kFloat32 or logits_dtype == torch::kBFloat16")
        elif out != torch.float32:
            raise _not_emulated(ctx, f"logits_dtype {out} (the binary states no logits dtypes)")
    else:
        # No logits_dtype argument: float32 logits, except where the binary requires bf16 weights (0.2.5 on
        # SM100), whose kernels then return bf16 logits.
        bf16_only = ctx.profile.rules is not None and ctx.profile.rules.bf16_weights.get(arch, False)
        out = torch.bfloat16 if bf16_only and _dtype(weights) == "bfloat16" else torch.float32
    w = _dtype(weights)
    if arch in rules.bf16_weights:
        need = "bfloat16" if rules.bf16_weights[arch] else "float32"
        _assert(w == need, where, f"weights.scalar_type() == (arch_major == 10 ? torch::kBFloat16 : torch::kFloat32) "
                f"(got {w})")
    elif rules.bf16_weights_allowed.get(arch):
        _assert(w in ("float32", "bfloat16"), where, "weights.scalar_type() == torch::kFloat or (arch_major == 10 and "
                f"weights.scalar_type() == torch::kBFloat16) (got {w})")
    else:
        # every release's SM90 path (and the earlier builds' only one): weights.scalar_type() == torch::kFloat
        _assert(w == "float32", where, f"weights.scalar_type() == torch::kFloat (got {w})")
    if w == "bfloat16":
        _assert(out == torch.bfloat16, where,
                "weights.scalar_type() != torch::kBFloat16 or logits_dtype == torch::kBFloat16")
    if fmt != "fp8":
        heads = (rules.heads.get(arch) if ctx.profile.rules else None) or ()
        if heads:
            _assert(int(q.shape[-2]) in heads, where, " or ".join(f"num_heads == {h}" for h in heads))
    return fmt, out


def _check_positive_max_seqlen_k(ctx: Ctx, max_seqlen_k: int) -> None:
    # The binary's own host assert where it has one (0.2.5, upstream 2.8: no uncompressed layout).
    if ctx.profile.rules is not None and ctx.profile.rules.positive_max_seqlen_k:
        _assert(max_seqlen_k > 0, "csrc/apis/attention.hpp", "max_seqlen_k > 0")


def _mqa_logits(ctx: Ctx, a: _Args) -> Any:
    if ctx.profile.flavor == "bundled":
        kv, kv_sf = _pair(ctx, "kv", a.kv)
    else:
        kv, kv_sf = a.kv, a.kv_sf
    fmt, out_dtype = _indexer_format(ctx, a, a.q, a.get("q_sf"), kv_sf)
    if a.get("schedule_meta") is not None:
        raise _not_emulated(ctx, "a precomputed MQA schedule")
    for name in ("ks", "ke"):
        # docs/sources/upstream-history.md §1.4: cu_seq_len_k_start/end are int32 (S,).
        t = a[name]
        _assert(_dtype(t) == "int32", "csrc/apis/attention.hpp", f"{name}.scalar_type() == torch::kInt")
        _assert(t.is_contiguous(), "csrc/apis/attention.hpp", f"{name}.is_contiguous()")
    max_seqlen_k = int(a.get("max_seqlen_k") or 0)
    _check_positive_max_seqlen_k(ctx, max_seqlen_k)
    clean = bool(a.get("clean_logits", False))
    # docs/sources/upstream-history.md §1.4 / §1.7: max_seqlen_k > 0 requires clean_logits == False (2.2.0+).
    _assert(not (max_seqlen_k > 0 and clean), "csrc/apis/attention.hpp", "max_seqlen_k == 0 or not clean_logits")
    if fmt == "fp8" and out_dtype == torch.float32:
        return _compute("csrc/apis/attention.hpp", reference.fp8_mqa_logits, a.q, (kv, kv_sf), a.weights, a.ks, a.ke,
                        clean_logits=clean, max_seqlen_k=max_seqlen_k or None)
    # MX / FP4 inputs, bfloat16 logits: the reference computes them (the result is clean, which the kernel's
    # clean_logits=True also gives).
    return _compute("csrc/apis/attention.hpp", reference.fp8_fp4_mqa_logits, (a.q, a.get("q_sf")), (kv, kv_sf),
                    a.weights, a.ks, a.ke, max_seqlen_k, logits_dtype=out_dtype)


def _context_lens_checks(ctx: Ctx, context_lens: Any, where: str) -> None:
    want = ctx.profile.paged_context_lens_dim
    # docs/sources/gpu-observed.md: "Assertion error (attention.hpp): context_lens.dim() == 2" on sgl-deep-gemm;
    # docs/sources/upstream-history.md §3 (S-arch): the bundled v2.1 base takes 1-D only.
    _assert(context_lens.dim() == want, where, f"context_lens.dim() == {want}")
    # docs/sources/upstream-history.md §2.1(b): int32 and contiguous are asserted by metadata and logits calls.
    _assert(_dtype(context_lens) == "int32", where, "context_lens.scalar_type() == torch::kInt")
    _assert(context_lens.is_contiguous(), where, "context_lens.is_contiguous()")


def _varlen_allowed(ctx: Ctx) -> tuple[bool, ...]:
    """The ``is_varlen`` values the paged logits accept on the emulated architecture."""
    rules = ctx.profile.rules
    if rules is not None and ctx.profile.arch in rules.varlen:
        # upstream 2.8 (0.2.5, vLLM's 2.8.1): `arch_major == 12 or is_varlen == (arch_major == 10)`
        return tuple(rules.varlen[ctx.profile.arch])
    # docs/sources/upstream-history.md §1.6: `indices` (varlen) is SM100-only.
    return (False,) if ctx.profile.arch == "sm90" else (False, True)


def _check_varlen(ctx: Ctx, indices: Any, where: str) -> None:
    is_varlen = indices is not None
    if ctx.profile.rules is not None and ctx.profile.arch in ctx.profile.rules.varlen:
        expr = "arch_major == 12 or is_varlen == (arch_major == 10)"
    else:
        expr = "not indices.has_value() (varlen is SM100 only)"
    _assert(is_varlen in _varlen_allowed(ctx), where, f"{expr} (is_varlen = {is_varlen} on {ctx.profile.arch})")


def _paged_metadata(ctx: Ctx, a: _Args) -> Any:
    where = "csrc/apis/attention.hpp"
    _context_lens_checks(ctx, a.context_lens, where)
    if a.get("indices") is not None:
        _check_varlen(ctx, a.indices, where)
    block_kv, num_sms = int(a.block_kv), int(a.num_sms)
    # docs/sources/upstream-history.md §1.6: block_kv == 64 (or 32 on SM100) from 7f2a703, 64 at v2.1.0.
    allowed = ctx.profile.block_kv_allowed((64,) if ctx.profile.arch == "sm90" or ctx.profile.flavor == "bundled"
                                           else (32, 64))  # the binary's own condition where it has one
    _assert(block_kv in allowed, where, f"block_kv in {allowed} (got {block_kv})")
    _assert(0 < num_sms <= ctx.profile.device_sms, where, f"0 < num_sms <= {ctx.profile.device_sms} (got {num_sms})")
    # A varlen schedule's values are the stand-in's own split (the SM100 scheduler is not reproduced); only its
    # shape is the release's. The logits stand-in checks it was built from the same lengths, like any schedule.
    return _compute(where, reference.get_paged_mqa_logits_metadata, a.context_lens, block_kv, num_sms,
                    a.get("indices"), balance=ctx.profile.schedule_balance)


def _paged_logits(ctx: Ctx, a: _Args) -> Any:
    where = "csrc/apis/attention.hpp"
    q, kv_cache, weights = a.q, a.kv_cache, a.weights
    fmt, out_dtype = _indexer_format(ctx, a, q, a.get("q_sf"), None)
    context_lens, block_table, schedule_meta = a.context_lens, a.block_table, a.schedule_meta
    # docs/sources/upstream-history.md §1.5 (v2.1.0 row, kept since): q (B, next_n, H, D) FP8, kv_cache uint8
    # (blocks, block_kv, 1, D + 4), weights (B*next_n, H) FP32; FP4: q int8 (B, next_n, H, D/2), D/2 + 4 bytes.
    _assert(q.dim() == 4, where, f"q.dim() == 4 (got {q.dim()})")
    _assert(q.is_contiguous(), where, "q.is_contiguous()")
    batch, next_n = int(q.shape[0]), int(q.shape[1])
    _assert(_dtype(kv_cache) == "uint8" and kv_cache.dim() == 4, where, "kv_cache is uint8 (blocks, block_kv, 1, bytes)")
    block_kv = int(kv_cache.shape[1])
    width = int(q.shape[-1]) + 4  # D + 4 (FP8), D/2 + 4 (FP4: q holds D/2 bytes per head)
    _assert(int(kv_cache.shape[3]) == width and int(kv_cache.shape[2]) == 1, where,
            f"num_heads_kv == 1 and head_dim_with_sf == kv_head_dim + sf_bytes ({width}, got "
            f"{tuple(kv_cache.shape[2:])})")
    _assert(weights.dim() == 2 and weights.stride(-1) == 1, where, "weights is (B*next_n, H) with stride(1) == 1")
    _context_lens_checks(ctx, context_lens, where)
    if ctx.profile.paged_context_lens_dim == 2:
        # docs/sources/upstream-history.md §2.1(b): batch_size == context_lens.size(0) and next_n == context_lens.size(1).
        _assert(tuple(context_lens.shape) == (batch, next_n), where,
                f"batch_size == context_lens.size(0) and next_n == context_lens.size(1) "
                f"(q gives ({batch}, {next_n}), context_lens is {tuple(context_lens.shape)})")
        # docs/sources/upstream-history.md §1.5 / §1.7: clean_logits is refused with 2-D lengths.
        _assert(not a.get("clean_logits", False), where, "not (clean_logits and is_context_lens_2d)")
    else:
        _assert(int(context_lens.shape[0]) == batch, where, f"context_lens.size(0) == batch_size ({batch})")
    indices = a.get("indices")
    _check_varlen(ctx, indices, where)
    # docs/sources/gpu-observed.md: "next_n == 1 or next_n == 2" on SM90.
    allowed_next_n = (1,) if indices is not None else ctx.profile.paged_native_next_n
    _assert(next_n in allowed_next_n, where, " or ".join(f"next_n == {n}" for n in allowed_next_n)
            if len(allowed_next_n) <= 4 else f"next_n in {allowed_next_n}")
    # docs/sources/upstream-history.md §1.5: block_kv == 64 on SM90 (32 also on SM100 from 7f2a703).
    allowed_bkv = ctx.profile.block_kv_allowed((64,) if ctx.profile.arch == "sm90" or ctx.profile.flavor == "bundled"
                                               else (32, 64))
    heads = (ctx.profile.rules.heads.get(ctx.profile.arch) if ctx.profile.rules else None) or ()
    if heads:
        _assert(int(q.shape[2]) in heads, where, " or ".join(f"num_heads == {h}" for h in heads))
    _assert(block_kv in allowed_bkv, where, f"block_kv in {allowed_bkv} (got {block_kv})")
    # docs/sources/upstream-history.md §1.5 and §4.1: block_table int32 with stride(1) == 1.
    _assert(_dtype(block_table) == "int32", where, "block_table.scalar_type() == torch::kInt")
    _assert(block_table.dim() == 2 and block_table.stride(1) == 1, where, "block_table.stride(1) == 1")
    # docs/sources/upstream-history.md §1.6 contract: schedule_meta.size(0) == get_num_sms() + 1 at launch. vLLM's
    # 2.8.1 builds (0.33.0, 0.34.0) launch SM90 next_n 4 as 2-SM KV-multicast clusters, one task each: their host
    # assert `_schedule_meta_size == num_sms / num_kv_multicast + 1` (the binary's text; upstream-history.md, the
    # nv_dev row), seen on an H200; vLLM 0.34.0's `_paged_mqa_logits_schedule_slots` asks for num_sms // 2 there.
    multicast = 2 if (ctx.profile.rules is not None and ctx.profile.rules.kv_multicast and ctx.profile.arch == "sm90"
                      and next_n == 4) else 1
    slots = ctx.state.num_sms // multicast
    _assert(_dtype(schedule_meta) == "int32" and schedule_meta.dim() == 2, where, "schedule_meta is int32 (num_sms + 1, 2)")
    if multicast > 1:
        _assert(int(schedule_meta.shape[0]) == slots + 1, where,
                f"_schedule_meta_size == num_sms / num_kv_multicast + 1 (num_sms = {ctx.state.num_sms}, "
                f"num_kv_multicast = {multicast}, got {int(schedule_meta.shape[0])} rows)")
    else:
        _assert(int(schedule_meta.shape[0]) == slots + 1, where,
                f"schedule_meta.size(0) == num_sms + 1 (num_sms = {slots}, got {int(schedule_meta.shape[0])} rows)")
    # docs/sources/gpu-observed.md: a schedule built from other lengths than the launch's can leave the
    # persistent kernel waiting forever; stop here instead of computing a result.
    if not reference.paged_schedule_matches(schedule_meta, context_lens, block_kv, slots,
                                         balance=ctx.profile.schedule_balance):
        ctx.state.hangs.append(ctx.op)
        raise StandInHang(
            f"{ctx.op}: schedule_meta was not built from these context_lens (block_kv={block_kv}, "
            f"num_sms={slots}); the real kernel could wait forever [cpu-tier stand-in]"
        )
    if fmt == "fp8" and out_dtype == torch.float32:
        out = _compute(where, reference.fp8_paged_mqa_logits, q, kv_cache, weights, context_lens, block_table,
                       schedule_meta, int(a.max_context_len), clean_logits=bool(a.get("clean_logits", False)),
                       indices=indices)
    else:
        # MX / FP4 inputs, bfloat16 logits; the reference allocates the 2.8 kernels' 1024-byte aligned rows.
        return _compute(where, reference.fp8_fp4_paged_mqa_logits, (q, a.get("q_sf")), kv_cache, weights, context_lens,
                        block_table, schedule_meta, int(a.max_context_len), logits_dtype=out_dtype, indices=indices)
    # docs/sources/upstream-history.md §1.5: the result is a view of rows padded to align(max_context_len, 256)
    # (docs/sources/gpu-observed.md: row stride 4352 for a 1-row result); keep the reference's layout if it has it.
    width = int(a.max_context_len)
    stride = -(-width // 256) * 256
    if out.dim() == 2 and out.shape[0] > 0 and out.stride(0) != stride and out.stride(-1) == 1:
        padded = torch.empty((out.shape[0], stride), dtype=out.dtype, device=out.device)[:, :width]
        padded.copy_(out)
        out = padded
    return out


_OPS: dict[str, Callable[[Ctx, _Args], Any]] = {
    "fp8_fp4_gemm_nt": _gemm_fp8,
    "fp8_gemm_nt": _gemm_fp8,
    "m_grouped_fp8_fp4_gemm_nt_contiguous": _grouped_contiguous_fp8,
    "m_grouped_fp8_gemm_nt_contiguous": _grouped_contiguous_fp8,
    "m_grouped_fp8_fp4_gemm_nt_masked": _grouped_masked_fp8,
    "m_grouped_fp8_gemm_nt_masked": _grouped_masked_fp8,
    "bf16_gemm_nt": _gemm_bf16,
    "m_grouped_bf16_gemm_nt_contiguous": _grouped_contiguous_bf16,
    "m_grouped_bf16_gemm_nt_masked": _grouped_masked_bf16,
    "transform_sf_into_required_layout": _transform_sf,
    "get_mn_major_tma_aligned_tensor": _mn_major,
    "get_mn_major_tma_aligned_packed_ue8m0_tensor": _mn_major_packed,
    "get_tma_aligned_size": _tma_aligned_size,
    "fp8_mqa_logits": _mqa_logits,
    "fp8_fp4_mqa_logits": _mqa_logits,
    "get_paged_mqa_logits_metadata": _paged_metadata,
    "fp8_paged_mqa_logits": _paged_logits,
    "fp8_fp4_paged_mqa_logits": _paged_logits,
    **_STATE_OPS,
}


def emulate(profile: Profile, state: NativeState, op: str, args: tuple[Any, ...],
            schema: tuple[str | None, ...] | None = None) -> Any:
    """Run the stand-in of native ``op`` with positional ``args`` (already checked against its signature).

    ``schema``: the argument names of the release's own schema (TORCH_LIBRARY builds). They name the arguments
    where the build has them (:func:`schema_names`): two builds' signatures of one arity can mean different
    things (vLLM 0.34.0's ``fp8_fp4_mqa_logits(..., max_seqlen_k, logits_dtype, schedule_meta)`` and
    sgl-deep-gemm 0.0.1's ``(..., clean_logits, max_seqlen_k, logits_dtype_str)``). Without names (tvm-ffi
    builds) the arity picks the layout (:data:`LAYOUTS`).
    """
    state.calls[op] = state.calls.get(op, 0) + 1
    ctx = Ctx(profile, state, op)
    fn = _OPS.get(op)
    if fn is None:
        raise _not_emulated(ctx, "this function")
    try:
        names = schema_names(profile.flavor, op, schema or ())
    except StandInNotEmulated as exc:
        state.not_emulated.append(f"{op}: {exc}")
        raise
    if names is not None and len(names) != len(args):
        raise _not_emulated(ctx, f"{len(args)} arguments for a {len(names)}-argument schema")
    names = names or layout_for(profile.flavor, op, len(args))
    if names is None:
        raise _not_emulated(ctx, f"a {len(args)}-argument signature (no known layout)")
    return fn(ctx, _Args(zip(names, args, strict=False)))
