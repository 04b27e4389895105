"""Start-up hook of ``python -m dgcompat run``: dgcompat installed as deep_gemm in every interpreter.

The launcher puts this folder first on ``PYTHONPATH`` and sets ``DGCOMPAT_INSTALL=1``; Python's
``site`` module imports ``sitecustomize`` at start-up, so every interpreter the command starts
(engine workers spawned with ``multiprocessing``, ``torchrun`` ranks, console scripts) runs
``dgcompat.install_as_deep_gemm()`` before any engine code. Then the ``sitecustomize`` this file
shadows (a distribution's, an environment's or the user's) runs, exactly once, unchanged; start-up
hooks of other dgcompat installs on the path are skipped (they would run this hook again).

``DGCOMPAT_INSTALL`` takes the switch spellings of ``dgcompat.env`` (``1``/``true``/``yes``/``on``,
``0``/``false``/``no``/``off``); ``0`` in a child's environment turns the install off for that
child. A value dgcompat does not understand there, or in any ``DGCOMPAT_*`` variable the install
reads, stops the interpreter with a message and exit status 2 before any engine code runs: an engine
never starts silently without the install. Without ``DGCOMPAT_INSTALL`` this hook imports nothing.
"""

import importlib.machinery
import importlib.util
import os
import sys


def _stop(message: str, status: int) -> None:
    # os._exit: site.py turns an exception raised here into a warning and goes on without the install.
    sys.stderr.write(f"dgcompat: {message}\n")
    sys.stderr.flush()
    os._exit(status)


def _install() -> None:
    if not os.environ.get("DGCOMPAT_INSTALL", "").strip():
        return
    try:
        from dgcompat import env
        from dgcompat.errors import DgcompatError
    except ImportError as exc:
        _stop(f"DGCOMPAT_INSTALL is set but {sys.executable} cannot import dgcompat: {exc}", 3)
        return
    try:
        if not env.install():
            return
        import dgcompat

        dgcompat.install_as_deep_gemm()
    except DgcompatError as exc:
        _stop(f"cannot install dgcompat as deep_gemm in {sys.executable}: {exc}", 2)


def _is_hook_dir(folder: str) -> bool:
    # The rule of dgcompat._install.launch.is_hook_dir (this file must not import dgcompat to apply it): a
    # _startup folder with sitecustomize.py in dgcompat/_install/ (this layout) or in dgcompat/ (the earlier one).
    head, name = os.path.split(os.path.abspath(folder or os.curdir))
    if name != "_startup" or not os.path.isfile(os.path.join(folder or os.curdir, "sitecustomize.py")):
        return False
    package = os.path.dirname(head) if os.path.basename(head) == "_install" else head
    return (os.path.basename(package) == "dgcompat" and os.path.isfile(os.path.join(package, "__init__.py"))
            and (package == head or os.path.isfile(os.path.join(head, "__init__.py"))))


def _run_shadowed() -> None:
    rest = [p for p in sys.path if not _is_hook_dir(p)]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_install()
_run_shadowed()
