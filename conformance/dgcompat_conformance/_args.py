"""Argument checks the commands share: a usage error (exit 2) naming the argument instead of a nonsensical run.

Each check is an :mod:`argparse` type: it returns the value read, or raises
:class:`argparse.ArgumentTypeError` saying what was expected and what came, which argparse
prints as ``PROG: error: argument --NAME: ...`` after the usage line and exits with status 2.
None of them writes anything: an output folder is only checked to be creatable. A command's
``main(argv)`` returns that status 2 instead of exiting: :func:`parse` raises :class:`UsageExit` where
argparse would exit, :func:`returns_status` (on ``main``) returns its status, and :func:`usage_error`
returns 2 for a check argparse cannot make.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ParamSpec, TypeVar
from urllib.parse import urlsplit

from packaging.version import InvalidVersion, Version

from .releases import SGL_DEEP_GEMM, ReleaseSpec, parse_release, release_problem, spec_from_wheel

__all__ = ["positive_int", "positive_seconds", "readable_folder", "readable_file", "readable_path", "output_folder",
           "output_file", "release_version", "release_spec", "wheel_spec", "release_source", "index_url",
           "version_text", "typed", "UsageExit", "parse", "returns_status", "usage_error"]

T = TypeVar("T")
P = ParamSpec("P")


def _bad(expected: str, text: str, why: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"expected {expected}, got {text!r} ({why})")


def positive_int(text: str) -> int:
    """A whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise _bad("a whole number >= 1", text, "not a whole number") from None
    if value < 1:
        raise _bad("a whole number >= 1", text, "not a positive number")
    return value


def positive_seconds(text: str) -> float:
    """A finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise _bad("a number of seconds > 0", text, "not a number") from None
    if not value > 0 or not math.isfinite(value):
        raise _bad("a number of seconds > 0", text, "not a positive, finite number of seconds")
    return value


def _missing(path: Path) -> str:
    return "a link to nothing" if path.is_symlink() else "no such path"


def _readable(text: str, what: str, folder: bool | None) -> Path:
    """An existing path this process may read (a folder: also list); ``folder``: True for a folder only, False
    for a file only, None for either."""
    path = Path(text).expanduser()
    if not path.exists():
        raise _bad(what, text, _missing(path))
    if folder is not None and path.is_dir() != folder:
        raise _bad(what, text, "a folder" if path.is_dir() else "a file")
    if not os.access(path, os.R_OK | (os.X_OK if path.is_dir() else 0)):
        raise _bad(what, text, "not readable")
    return path


def readable_folder(text: str) -> Path:
    """An existing folder this process may list and read."""
    return _readable(text, "a readable folder", True)


def readable_file(text: str) -> Path:
    """An existing file this process may read."""
    return _readable(text, "a readable file", False)


def readable_path(text: str) -> Path:
    """An existing file or folder this process may read."""
    return _readable(text, "a readable file or folder", None)


def _creatable_in(path: Path) -> str | None:
    """Why nothing can be created at ``path`` (its nearest existing ancestor decides), or None."""
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        if parent.is_symlink():
            return f"{parent} is a link to nothing"
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is a file"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{parent} is not writable"
    return None


def output_folder(text: str) -> Path:
    """A folder to write into: an existing writable folder, or one that can be created (it is not created here)."""
    path = Path(text).expanduser()
    if path.exists():
        if not path.is_dir():
            raise _bad("a folder to write into", text, "a file")
        if not os.access(path, os.W_OK | os.X_OK):
            raise _bad("a folder to write into", text, "not writable")
        return path
    if path.is_symlink():
        raise _bad("a folder to write into", text, "a link to nothing")
    why = _creatable_in(path)
    if why is not None:
        raise _bad("a folder to write into", text, why)
    return path


def output_file(text: str) -> Path:
    """A file to write: not a folder, in an existing writable folder (an existing file must be writable)."""
    path = Path(text).expanduser()
    if path.is_dir():
        raise _bad("a file to write", text, "a folder")
    if path.exists() and not os.access(path, os.W_OK):
        raise _bad("a file to write", text, "not writable")
    parent = path.parent
    if not parent.exists():
        raise _bad("a file to write", text, f"its folder {parent} does not exist")
    if not parent.is_dir():
        raise _bad("a file to write", text, f"{parent} is a file")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise _bad("a file to write", text, f"its folder {parent} is not writable")
    return path


def release_version(text: str) -> str:
    """An sgl-deep-gemm version: a published one or one newer than all (:func:`~.releases.release_problem`)."""
    problem = release_problem(SGL_DEEP_GEMM, text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def release_spec(text: str) -> ReleaseSpec:
    """A release the CPU tier certifies (``0.1.4``, ``sgl-kernel==0.3.21``, ``vllm-0.33.0``) that the wing knows."""
    try:
        spec = parse_release(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    problem = release_problem(spec.dist, spec.version)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return spec


def wheel_spec(text: str) -> ReleaseSpec:
    """A readable wheel file of a distribution that holds deep_gemm (named as :func:`spec_from_wheel` reads it)."""
    path = readable_file(text)
    try:
        return spec_from_wheel(path)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def release_source(text: str) -> str:
    """A release to read: an existing readable file or folder, else an sgl-deep-gemm version (:func:`release_version`)
    or a release of another distribution the wing knows (:func:`release_spec`)."""
    path = Path(text).expanduser()
    if path.exists() or path.is_symlink():
        readable_path(text)
        return text
    try:
        Version(text)
    except InvalidVersion:
        try:
            release_spec(text)  # a release of another distribution: vllm-0.34.0, sglang-kernel==0.4.2
        except argparse.ArgumentTypeError:
            raise _bad("a wheel file, a deep_gemm folder, an sgl-deep-gemm version or a release such as vllm-0.34.0",
                       text, "no such path, and not a release") from None
        return text
    return release_version(text)


def index_url(text: str) -> str:
    """A package index address: ``http(s)://host/...`` or ``file:///folder``."""
    parts = urlsplit(text)
    if parts.scheme in ("http", "https") and parts.netloc:
        return text
    if parts.scheme == "file" and parts.path:
        return text
    raise _bad("an index address (https://host/simple or file:///folder)", text, "no http, https or file address")


def version_text(text: str) -> str:
    """A version number as PEP 440 reads it (``2.14.0``, ``2.11.0+cu130``)."""
    try:
        Version(text)
    except InvalidVersion:
        raise _bad("a version such as 2.14.0", text, "not a version") from None
    return text


def typed(read: Callable[[str], T]) -> Callable[[str], T]:
    """``read`` as an argparse type: its ValueError becomes the usage error's message."""

    def check(text: str) -> T:
        try:
            return read(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    check.__name__ = getattr(read, "__name__", "value")
    return check


class UsageExit(Exception):
    """argparse ended the parse: a usage error (status 2, its lines already printed) or ``--help`` (status 0)."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parser.parse_args(argv)``; where argparse would exit, :class:`UsageExit` with its status instead."""
    try:
        return parser.parse_args(None if argv is None else list(argv))
    except SystemExit as exc:
        raise UsageExit(exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2) from None


def returns_status(main: Callable[P, int]) -> Callable[P, int]:
    """``main`` (a command's entry point, signature kept), returning the status of a :class:`UsageExit` it raises
    (from :func:`parse`) instead of exiting: tests and the ``dgcompat`` dispatcher get every status returned."""

    @functools.wraps(main)
    def run(*args: P.args, **kwargs: P.kwargs) -> int:
        try:
            return main(*args, **kwargs)
        except UsageExit as exc:
            return exc.status

    return run


def usage_error(parser: argparse.ArgumentParser, message: str) -> int:
    """Print the usage line and ``PROG: error: message`` to stderr, as argparse does; return 2."""
    parser.print_usage(sys.stderr)
    print(f"{parser.prog}: error: {message}", file=sys.stderr)
    return 2
