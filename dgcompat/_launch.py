"""``python -m dgcompat run [--print-env] -- COMMAND...``: run an engine with dgcompat installed as deep_gemm.

The command is executed (``exec``, same process id, signals and exit status pass straight
through) with two environment variables set:

* ``PYTHONPATH`` gains, in front, the folder of dgcompat's start-up hook
  (``dgcompat/_startup/sitecustomize.py``);
* ``DGCOMPAT_INSTALL=1``, which that hook honours by calling
  :func:`dgcompat.install_as_deep_gemm` at interpreter start-up.

Both are inherited, so every Python process the engine starts (``multiprocessing`` spawn
workers, ``torchrun`` ranks, ``vllm serve``/``python -m sglang.launch_server``) has the install,
with no change to engine code. ``--print-env`` prints the two variables as ``export`` lines
instead, for service files and container images. The hook does nothing in interpreters started
with ``-S``, ``-I`` or ``-E`` (they skip ``sitecustomize`` or ``PYTHONPATH``).
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Mapping, Sequence

__all__ = ["HOOK_DIR", "launch_env", "main"]

#: the folder holding the start-up hook (``sitecustomize.py``).
HOOK_DIR = Path(__file__).resolve().parent / "_startup"

_USAGE = "usage: python -m dgcompat run [--print-env] -- COMMAND [ARG...]\n"


def launch_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` plus the hook folder first on ``PYTHONPATH`` and ``DGCOMPAT_INSTALL=1``."""
    env = dict(environ)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != HOOK_DIR]
    env["PYTHONPATH"] = os.pathsep.join([str(HOOK_DIR), *parts])
    env["DGCOMPAT_INSTALL"] = "1"
    return env


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    print_env = False
    while args and args[0] != "--":
        if args[0] == "--print-env":
            print_env = True
        elif args[0] in ("-h", "--help"):
            sys.stdout.write(_USAGE + (__doc__ or ""))
            return 0
        else:
            break
        args.pop(0)
    if args and args[0] == "--":
        args.pop(0)
    env = launch_env(os.environ)
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
        os.execvpe(args[0], args, env)
    except OSError as exc:
        sys.stderr.write(f"dgcompat run: cannot execute {args[0]!r}: {exc}\n")
        return 127
    return 0  # not reached: exec replaces this process
