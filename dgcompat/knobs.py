"""Runtime knobs: SM count, PDL, compile mode, contiguous-layout alignment.

Nothing is changed implicitly: ``set_pdl`` and ``set_num_sms`` act only when called, and the
context managers restore the previous value on exit (also on error).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from . import _backend
from . import _binding
from . import _device
from ._calls import UpstreamCall
from ._checks import bad
from ._checks import spelled
from ._checks import translate
from .errors import DgcompatError
from .table import capabilities

__all__ = [
    "is_available", "get_num_sms", "set_num_sms", "num_sms", "set_pdl", "get_pdl", "compile_mode",
    "get_mk_alignment_for_contiguous_layout", "get_theoretical_mk_alignment_for_contiguous_layout",
]

#: The upstream calls of this module (see :mod:`dgcompat._calls`).
CALLS: tuple[UpstreamCall, ...] = (
    UpstreamCall("deep_gemm.get_mk_alignment_for_contiguous_layout", "dgcompat.get_mk_alignment_for_contiguous_layout",
                 uses_result=True, alternatives=("deep_gemm.get_m_alignment_for_contiguous_layout",)),
    UpstreamCall("deep_gemm.get_num_sms", "dgcompat.get_num_sms", uses_result=True, passthrough=True),
    UpstreamCall("deep_gemm.set_num_sms", "dgcompat.set_num_sms", ("*",), passthrough=True),
    UpstreamCall("deep_gemm.set_pdl", "dgcompat.set_pdl", ("*",), selected_by=("pdl", "top-level")),
    UpstreamCall("deep_gemm.get_pdl", "dgcompat.get_pdl", uses_result=True, selected_by=("pdl", "top-level")),
    UpstreamCall("_C.set_pdl", "dgcompat.set_pdl", ("*",), selected_by=("pdl", "native")),
    UpstreamCall("_C.get_pdl", "dgcompat.get_pdl", uses_result=True, selected_by=("pdl", "native")),
    UpstreamCall("deep_gemm.set_compile_mode", "dgcompat.compile_mode", ("*",), selected_by=("compile_mode", True),
                 optional=True),
    UpstreamCall("deep_gemm.get_compile_mode", "dgcompat.compile_mode", uses_result=True,
                 selected_by=("compile_mode", True), optional=True),
    UpstreamCall("deep_gemm.get_theoretical_mk_alignment_for_contiguous_layout",
                 "dgcompat.get_theoretical_mk_alignment_for_contiguous_layout", ("expected_m",), uses_result=True,
                 selected_by=("mk_alignment_arity", 1), optional=True),
    UpstreamCall("deep_gemm.get_theoretical_mk_alignment_for_contiguous_layout",
                 "dgcompat.get_theoretical_mk_alignment_for_contiguous_layout", ("expected_m", "num_groups"),
                 uses_result=True, selected_by=("mk_alignment_arity", 2), optional=True),
    # Releases without the theoretical function answer with the fixed alignment.
    UpstreamCall("deep_gemm.get_mk_alignment_for_contiguous_layout",
                 "dgcompat.get_theoretical_mk_alignment_for_contiguous_layout", uses_result=True,
                 selected_by=("mk_alignment_arity", 0), alternatives=("deep_gemm.get_m_alignment_for_contiguous_layout",)),
)
(_ALIGNMENT, _GET_SMS, _SET_SMS, _SET_PDL, _GET_PDL, _SET_PDL_C, _GET_PDL_C, _SET_MODE, _GET_MODE, _THEORY_1,
 _THEORY_2, _THEORY_0) = CALLS


def _selected(*calls: UpstreamCall) -> Callable[..., Any] | None:
    """The upstream function of the first declaration the table selects for this release, or None."""
    caps = capabilities()
    for call in calls:
        if call.in_effect(caps):
            return _binding.find_upstream(call) if call.optional else _binding.upstream(call)
    return None


_B = _binding.Slots(
    get_num_sms=lambda: _binding.upstream(_GET_SMS),
    set_num_sms=lambda: _binding.upstream(_SET_SMS),
    set_pdl=lambda: _selected(_SET_PDL, _SET_PDL_C),
    get_pdl=lambda: _selected(_GET_PDL, _GET_PDL_C),
    set_compile_mode=lambda: _selected(_SET_MODE),
    get_compile_mode=lambda: _selected(_GET_MODE),
    mk_alignment=lambda: _binding.upstream(_ALIGNMENT),
    theoretical_alignment=lambda: _bind_theoretical_alignment(),
)


def is_available() -> bool:
    """True when a backend can be bound (deep_gemm imports, or the reference backend is chosen).

    Imports deep_gemm the first time (that is the only way to know); never raises.
    """
    try:
        _backend.load()
    except DgcompatError:
        return False
    return True


def get_num_sms() -> int:
    """The number of SMs deep_gemm's kernels use (the device's count unless set)."""
    return int(_B.get_num_sms())


def set_num_sms(new_num_sms: int) -> None:
    """Limit deep_gemm's kernels to ``new_num_sms`` SMs, at most the device's count (process-wide).

    Prefer the :func:`num_sms` context.
    """
    if isinstance(new_num_sms, bool) or not isinstance(new_num_sms, int) or new_num_sms < 1:
        raise bad("set_num_sms", "new_num_sms", "a positive int", new_num_sms)
    try:
        _B.set_num_sms(new_num_sms)
    except Exception as exc:
        translate("set_num_sms", exc, _diagnose_num_sms, new_num_sms)


def _diagnose_num_sms(n: int) -> None:
    limit = _device.sm_count()
    if n > limit:
        raise bad("set_num_sms", "new_num_sms", f"at most the device's {limit} SMs", n)


@contextmanager
def num_sms(n: int | None) -> Iterator[None]:
    """Run the block with ``n`` SMs and restore the previous count; ``None`` changes nothing."""
    if n is None:
        yield
        return
    previous = get_num_sms()
    set_num_sms(n)
    try:
        yield
    finally:
        set_num_sms(previous)


def set_pdl(enable: bool | None = None, *, new_enable_pdl: bool | None = None, enabled: bool | None = None) -> bool:
    """Turn programmatic dependent launch on (``enable`` None or True) or off; True if the release has a switch
    and it was set.

    ``enable`` is sgl-deep-gemm's name (0.2.3+); ``new_enable_pdl`` (upstream 2.8) and ``enabled`` (dgcompat's
    name before) are the same parameter, each accepted once.
    Uses ``deep_gemm.set_pdl`` (sgl-deep-gemm >= 0.1.4), the native ``_C.set_pdl`` where only that
    exists (0.1.1-0.1.3), and returns False where there is none (bundled copies, 0.0.1/0.1.0): the
    table's ``pdl`` row decides.
    Call it after the worker's CUDA device is set; dgcompat never calls it on its own.
    """
    if new_enable_pdl is not None or enabled is not None:
        enable = spelled("set_pdl", "enable", enable, "new_enable_pdl", new_enable_pdl)
        enable = spelled("set_pdl", "enable", enable, "enabled", enabled)
    if enable is None:
        enable = True
    if not isinstance(enable, bool):
        raise bad("set_pdl", "enable", "a bool", enable)
    setter = _B.bound("set_pdl")
    if setter is None:
        return False
    setter(enable)
    return True


def get_pdl() -> bool | None:
    """The PDL switch's state, or None where the release has none."""
    getter = _B.bound("get_pdl")
    return None if getter is None else bool(getter())


@contextmanager
def compile_mode(mode: int = 1) -> Iterator[None]:
    """Run the block with deep_gemm's JIT compile mode ``mode`` and restore the previous one.

    Only the bundled copies (sgl-kernel / sglang-kernel <= 0.4.2) have a compile mode; elsewhere
    this is a no-op.
    """
    if isinstance(mode, bool) or not isinstance(mode, int):
        raise bad("compile_mode", "mode", "an int", mode)
    getter, setter = _B.bound("get_compile_mode"), _B.bound("set_compile_mode")
    if getter is None or setter is None:
        yield
        return
    previous = int(getter())
    setter(mode)
    try:
        yield
    finally:
        setter(previous)


def get_mk_alignment_for_contiguous_layout() -> int:
    """Row alignment (M for m-grouped, K for k-grouped) that contiguous grouped layouts need.

    Always an ``int`` (native bindings may return other integer types).
    """
    return int(_B.mk_alignment())


def _optional_count(fn: str, name: str, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise bad(fn, name, "None or a positive int", value)


def get_theoretical_mk_alignment_for_contiguous_layout(expected_m: int | None = None,
                                                       num_groups: int | None = None) -> int:
    """The contiguous-layout alignment the release's kernels would choose for ``expected_m`` rows.

    Releases differ in arity (capability ``mk_alignment_arity``): sgl-deep-gemm 0.2.0+ takes
    ``(expected_m, num_groups)``; upstream DeepGEMM 2.4.2+ and sgl-deep-gemm before 0.2.0 take
    ``(expected_m)`` only (they do not use the group count, which is then ignored); the bundled
    copies and the reference backend have no such function, and their alignment is the fixed
    :func:`get_mk_alignment_for_contiguous_layout`. Always an ``int``.
    """
    fn = "get_theoretical_mk_alignment_for_contiguous_layout"
    _optional_count(fn, "expected_m", expected_m)
    _optional_count(fn, "num_groups", num_groups)
    return int(_B.theoretical_alignment(expected_m, num_groups))


def _bind_theoretical_alignment() -> Callable[[int | None, int | None], Any]:
    target = _selected(_THEORY_1, _THEORY_2)  # the declaration the release's arity selects, if present
    call: Callable[[int | None, int | None], Any]
    if target is None:
        fixed = _binding.upstream(_THEORY_0)

        def call(expected_m: int | None, num_groups: int | None) -> Any:
            return fixed()
    elif _THEORY_1.in_effect(capabilities()):
        def call(expected_m: int | None, num_groups: int | None) -> Any:
            return target(expected_m)
    else:
        call = target
    return call
