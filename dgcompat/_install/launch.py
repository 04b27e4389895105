"""``python -m dgcompat run [--print-env] [--] COMMAND...``: run an engine with dgcompat installed as deep_gemm.

The command is executed (``exec``, same process id, signals and exit status pass straight
through) with two environment variables set:

* ``PYTHONPATH`` gains, in front, the folder of dgcompat's start-up hook
  (``dgcompat/_install/_startup/sitecustomize.py``); every other entry stays as it was, empty ones included
  (Python reads an empty entry as the current folder, so a launch script that imports the
  deployment's own module from the working folder finds it under the launcher as without it);
* ``DGCOMPAT_INSTALL=1``, which that hook honours by calling
  :func:`dgcompat.install_as_deep_gemm` at interpreter start-up.

Both are inherited, so every Python process the engine starts (``multiprocessing`` spawn
workers, ``torchrun`` ranks, ``vllm serve``/``python -m sglang.launch_server``) has the install,
with no change to engine code. ``--print-env`` prints the two variables as ``export`` lines
instead, for service files and container images. The hook does nothing in interpreters started
with ``-S``, ``-I`` or ``-E`` (they skip ``sitecustomize`` or ``PYTHONPATH``).

Before anything runs, every ``DGCOMPAT_*`` variable whose value the hook or the runtime would refuse
is checked (:data:`dgcompat.env.VARIABLES`): an unknown value is a usage error (exit 2) naming it,
so an engine never starts silently without the install. So is an option before the command
that the launcher does not know (``--print-envv``): it is named, never executed. Start-up hooks of other dgcompat installs on ``PYTHONPATH`` (a virtualenv inside an image
that has one) are replaced by this one; tools that start children which must not get the install
take :func:`hookless_env`.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path

from ..env import env_report

__all__ = ["HOOK_DIR", "is_hook_dir", "launch_env", "hookless_env", "main"]

#: the folder holding the start-up hook (``sitecustomize.py``).
HOOK_DIR = Path(__file__).resolve().parent / "_startup"

_USAGE = "usage: python -m dgcompat run [--print-env] [--] COMMAND [ARG...]\n"


def is_hook_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is the start-up hook folder of a dgcompat install, this one's or another's: a ``_startup``
    folder holding ``sitecustomize.py`` in the package ``dgcompat/_install/`` (this layout) or ``dgcompat/`` (the
    earlier layout, which an image may still carry). The hook itself applies the same rule when it looks
    for the ``sitecustomize`` it shadows."""
    folder = Path(path)
    if folder.name != "_startup" or not (folder / "sitecustomize.py").is_file():
        return False
    package = folder.parent.parent if folder.parent.name == "_install" else folder.parent
    return (package.name == "dgcompat" and (package / "__init__.py").is_file()
            and (package == folder.parent or (folder.parent / "__init__.py").is_file()))


def _without_hooks(pythonpath: str) -> list[str]:
    """The entries of ``pythonpath`` as Python reads them, dgcompat hook folders left out.

    Python ignores a ``PYTHONPATH`` that is empty as a whole, and reads every empty entry of a non-empty
    one as the current folder: those entries are kept (``""``), never dropped.
    """
    if not pythonpath:
        return []
    return [p for p in pythonpath.split(os.pathsep) if not (p and is_hook_dir(p))]


def _joined(entries: list[str]) -> str:
    """``PYTHONPATH`` text that Python reads as ``entries``: a lone empty entry (the current folder) is written
    as two (``os.pathsep``), since an empty ``PYTHONPATH`` means no entry at all."""
    return os.pathsep.join(entries) or (os.pathsep if entries else "")


def launch_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` plus this install's hook folder first on ``PYTHONPATH`` (any other dgcompat hook folder
    removed, every other entry kept as Python reads it) and ``DGCOMPAT_INSTALL=1``."""
    env = dict(environ)
    env["PYTHONPATH"] = _joined([str(HOOK_DIR), *_without_hooks(env.get("PYTHONPATH", ""))])
    env["DGCOMPAT_INSTALL"] = "1"
    return env


def hookless_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without the install: no ``DGCOMPAT_INSTALL`` and no dgcompat hook folder on ``PYTHONPATH``
    (for tools whose children import a deep_gemm of their own choosing)."""
    env = dict(environ)
    env.pop("DGCOMPAT_INSTALL", None)
    parts = _without_hooks(env.get("PYTHONPATH", ""))
    if parts:
        env["PYTHONPATH"] = _joined(parts)
    else:
        env.pop("PYTHONPATH", None)
    return env


def _environment_problems(env: Mapping[str, str]) -> list[str]:
    """One line per ``DGCOMPAT_*`` variable of ``env`` whose value the hook or the runtime would refuse with
    :class:`~dgcompat.errors.ConfigurationError` (those with a fixed set of values; folders are the tools' and
    warmup's to check when they write there)."""
    return [f"{row.name}={row.value!r} is not understood; accepted values: {', '.join(row.accepted)} (or unset)"
            for row in env_report(env) if not row.ok and row.accepted]


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    print_env = False
    while args and args[0] != "--":
        if args[0] == "--print-env":
            print_env = True
        elif args[0] in ("-h", "--help"):
            sys.stdout.write(_USAGE + (__doc__ or ""))
            return 0
        elif args[0].startswith("-"):
            sys.stderr.write(f"dgcompat run: error: unknown option {args[0]!r}: expected --print-env, -h/--help, or "
                             f"-- followed by the command\n")
            return 2
        else:
            break
        args.pop(0)
    if args and args[0] == "--":
        args.pop(0)
    env = launch_env(os.environ)
    problems = _environment_problems(env)
    if problems:
        for line in problems:
            sys.stderr.write(f"dgcompat run: environment variable {line}\n")
        sys.stderr.write("dgcompat run: nothing was started; fix the variable(s) above\n")
        return 2
    if print_env:
        for key in ("PYTHONPATH", "DGCOMPAT_INSTALL"):
            print(f"export {key}={shlex.quote(env[key])}")
        return 0
    if not args:
        sys.stderr.write(_USAGE)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(args[0], args, env)  # noqa: S606 - the user's command replaces this process, as a shell's exec
    except OSError as exc:
        sys.stderr.write(f"dgcompat run: cannot execute {args[0]!r}: {exc}\n")
        return 127
    return 0  # not reached: exec replaces this process
