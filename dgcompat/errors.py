"""The public exception hierarchy of dgcompat.

Every error raised by a dgcompat entry point is a :class:`DgcompatError`. Messages name the
function, the argument, the installed release, what was expected and what came, so that a log
line alone is enough to fix the call site.

``BadArgumentError`` also derives from :class:`ValueError` and :class:`TypeError`, and
``UnsupportedFeatureError`` from :class:`NotImplementedError`, so that engine code that already
catches the builtin types keeps working.
"""

from __future__ import annotations

__all__ = [
    "DgcompatError",
    "BadArgumentError",
    "UnsupportedFeatureError",
    "ScheduleMismatchError",
    "IncompatibleBuildError",
    "DeepGemmUnavailableError",
    "UnidentifiedBuildError",
    "UnavailableNameError",
    "KernelError",
    "ConfigurationError",
]


class DgcompatError(Exception):
    """Base class of every error dgcompat raises."""


class BadArgumentError(DgcompatError, ValueError, TypeError):
    """An argument has the wrong dtype, rank, shape, stride, device or value.

    Attributes mirror the message: ``function``, ``argument``, ``expected``, ``got``.
    """

    def __init__(self, function: str, argument: str, expected: str, got: str, *, release: str | None = None,
                 hint: str | None = None) -> None:
        self.function = function
        self.argument = argument
        self.expected = expected
        self.got = got
        self.release = release
        where = f" [deep_gemm {release}]" if release else ""
        msg = f"{function}(): argument '{argument}' must be {expected}, got {got}{where}"
        if hint:
            msg += f". {hint}"
        super().__init__(msg)


class UnsupportedFeatureError(DgcompatError, NotImplementedError):
    """The installed release (or architecture) cannot do what was asked."""

    def __init__(self, function: str, feature: str, release: str, *, hint: str | None = None) -> None:
        self.function = function
        self.feature = feature
        self.release = release
        msg = f"{function}(): {feature} is not supported by deep_gemm {release}"
        if hint:
            msg += f". {hint}"
        super().__init__(msg)


class ScheduleMismatchError(DgcompatError):
    """A paged-MQA schedule does not belong to the lengths it would be launched with.

    Launching such a schedule can make the persistent kernel wait forever (a GPU hang), so
    dgcompat refuses before the launch.
    """


class IncompatibleBuildError(DgcompatError):
    """The installed deep_gemm cannot work in this process (wrong torch build, broken library)."""


class DeepGemmUnavailableError(IncompatibleBuildError):
    """No deep_gemm is installed, or it cannot be imported."""


class UnidentifiedBuildError(IncompatibleBuildError):
    """A deep_gemm is installed but dgcompat cannot establish which release it is.

    Raised instead of planning it as some other release (an unowned sgl-deep-gemm layer, two
    owners claiming the files, an unreadable version, an unrelated ``deep-gemm`` distribution).
    ``found`` is what detection saw (``dgcompat.release()``'s refusal text).
    """

    def __init__(self, found: str) -> None:
        self.found = found
        super().__init__(
            f"dgcompat cannot use the installed deep_gemm: {found}. Reinstall a certified release (see `dgcompat pin`), "
            f"select another copy with DGCOMPAT_BACKEND, or set DGCOMPAT_BACKEND=reference")

class UnavailableNameError(IncompatibleBuildError, AttributeError):
    """A name outside the stable surface was looked up, but there is no usable deep_gemm to take it from.

    Raised by the pass-through of names dgcompat does not define (``dgcompat.<name>``,
    ``dgcompat.utils.<name>``, and every ``deep_gemm`` module under :func:`dgcompat.install_as_deep_gemm`)
    when deep_gemm is absent, refused (wrong torch build) or failed to import; the reason is chained
    as ``__cause__``. It is an :class:`AttributeError` as well, so ``hasattr(deep_gemm, "set_pdl")``
    and ``getattr(deep_gemm, name, None)`` probes keep answering instead of raising.
    """


class KernelError(DgcompatError):
    """deep_gemm's own host code rejected a call that dgcompat's checks let through.

    The upstream exception is chained as ``__cause__``.
    """


class ConfigurationError(DgcompatError, ValueError):
    """A ``DGCOMPAT_*`` environment variable holds a value dgcompat does not know.

    Attributes: ``variable``, ``value``, ``accepted`` (the values it takes).
    """

    def __init__(self, variable: str, value: str, accepted: tuple[str, ...]) -> None:
        self.variable = variable
        self.value = value
        self.accepted = accepted
        super().__init__(f"environment variable {variable}={value!r} is not understood; "
                         f"accepted values: {', '.join(accepted)} (or unset)")
