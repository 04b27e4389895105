"""Runtime knobs: SM count, PDL, compile mode, contiguous-layout alignment.

Nothing is changed implicitly: ``set_pdl`` and ``set_num_sms`` act only when called, and the
context managers restore the previous value on exit (also on error).
"""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, Callable, Iterator

from . import _binding
from ._checks import bad, release_label
from .errors import DgcompatError, IncompatibleBuildError

__all__ = [
    "is_available", "get_num_sms", "set_num_sms", "num_sms", "set_pdl", "get_pdl", "compile_mode",
    "get_mk_alignment_for_contiguous_layout", "get_theoretical_mk_alignment_for_contiguous_layout",
]

_B = SimpleNamespace()
_binding.register_reset(_B.__dict__.clear)


def is_available() -> bool:
    """True when a backend can be bound (deep_gemm imports, or the reference backend is chosen).

    Imports deep_gemm the first time (that is the only way to know); never raises.
    """
    try:
        _binding.load()
    except DgcompatError:
        return False
    return True


def _mod() -> Any:
    return _binding.load()


def _bind_num_sms() -> tuple[Callable[[], int], Callable[[int], None]]:
    mod = _mod()
    getter, setter = mod.get_num_sms, mod.set_num_sms
    _B.get_num_sms, _B.set_num_sms = getter, setter
    return getter, setter


def get_num_sms() -> int:
    """The number of SMs deep_gemm's kernels use (the device's count unless set)."""
    try:
        getter = _B.get_num_sms
    except AttributeError:
        getter = _bind_num_sms()[0]
    return int(getter())


def set_num_sms(n: int) -> None:
    """Limit deep_gemm's kernels to ``n`` SMs (process-wide). Prefer the :func:`num_sms` context."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise bad("set_num_sms", "n", "a positive int", n)
    try:
        setter = _B.set_num_sms
    except AttributeError:
        setter = _bind_num_sms()[1]
    setter(n)


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


def _pdl_functions() -> tuple[Callable[[bool], Any], Callable[[], bool]] | None:
    from .table import capabilities

    mod = _mod()
    where = capabilities().pdl
    if where == "top-level":
        return mod.set_pdl, mod.get_pdl
    if where == "native":
        return mod._C.set_pdl, mod._C.get_pdl
    return None


def set_pdl(enabled: bool = True) -> bool:
    """Turn programmatic dependent launch on or off; True if the release has a switch and it was set.

    Uses ``deep_gemm.set_pdl`` (sgl-deep-gemm >= 0.1.4), the native ``_C.set_pdl`` where only that
    exists (0.1.1-0.1.3), and returns False where there is none (bundled copies, 0.0.1/0.1.0).
    Call it after the worker's CUDA device is set; dgcompat never calls it on its own.
    """
    if not isinstance(enabled, bool):
        raise bad("set_pdl", "enabled", "a bool", enabled)
    fns = _pdl_functions()
    if fns is None:
        return False
    fns[0](enabled)
    return True


def get_pdl() -> bool | None:
    """The PDL switch's state, or None where the release has none."""
    fns = _pdl_functions()
    return None if fns is None else bool(fns[1]())


@contextmanager
def compile_mode(mode: int = 1) -> Iterator[None]:
    """Run the block with deep_gemm's JIT compile mode ``mode`` and restore the previous one.

    Only the bundled copies (sgl-kernel / sglang-kernel <= 0.4.2) have a compile mode; elsewhere
    this is a no-op.
    """
    if isinstance(mode, bool) or not isinstance(mode, int):
        raise bad("compile_mode", "mode", "an int", mode)
    from .table import capabilities

    mod = _mod()
    if not capabilities().compile_mode:
        yield
        return
    getter, setter = mod.get_compile_mode, mod.set_compile_mode
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
    try:
        fn = _B.mk_alignment
    except AttributeError:
        mod = _mod()
        fn = getattr(mod, "get_mk_alignment_for_contiguous_layout", None)
        if fn is None:
            fn = getattr(mod, "get_m_alignment_for_contiguous_layout", None)
        if fn is None:
            raise IncompatibleBuildError(
                f"get_mk_alignment_for_contiguous_layout(): deep_gemm {release_label()} has neither "
                "get_mk_alignment_for_contiguous_layout nor get_m_alignment_for_contiguous_layout"
            )
        _B.mk_alignment = fn
    value = fn()
    if isinstance(value, (tuple, list)):
        value = value[0]
    return int(value)


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
    try:
        call = _B.theoretical_alignment
    except AttributeError:
        call = _bind_theoretical_alignment()
    return int(call(expected_m, num_groups))


def _bind_theoretical_alignment() -> Callable[[int | None, int | None], Any]:
    from .table import capabilities

    mod = _mod()
    arity = capabilities().mk_alignment_arity
    target = getattr(mod, "get_theoretical_mk_alignment_for_contiguous_layout", None)
    call: Callable[[int | None, int | None], Any]
    if target is None or arity == 0:
        def call(expected_m: int | None, num_groups: int | None) -> Any:
            return get_mk_alignment_for_contiguous_layout()
    elif arity == 1:
        def call(expected_m: int | None, num_groups: int | None) -> Any:
            return target(expected_m)
    else:
        call = target
    _B.theoretical_alignment = call
    return call

