"""Start-up hook of ``python -m dgcompat run``: dgcompat installed as deep_gemm in every interpreter.

The launcher puts this folder first on ``PYTHONPATH`` and sets ``DGCOMPAT_INSTALL=1``; Python's
``site`` module imports ``sitecustomize`` at start-up, so every interpreter the command starts
(engine workers spawned with ``multiprocessing``, ``torchrun`` ranks, console scripts) runs
``dgcompat.install_as_deep_gemm()`` before any engine code. The ``sitecustomize`` this file
shadows (a distribution's or an environment's) is run afterwards, unchanged.
``DGCOMPAT_INSTALL=0`` in a child's environment turns the install off for that child.
"""

import importlib.machinery
import importlib.util
import os
import sys


def _install() -> None:
    if os.environ.get("DGCOMPAT_INSTALL") != "1":
        return
    try:
        import dgcompat
    except ImportError as exc:
        # Running without the install would silently bypass dgcompat: stop instead (exit status 3;
        # os._exit because site.py turns an exception here into a fatal start-up error).
        sys.stderr.write(f"dgcompat: DGCOMPAT_INSTALL=1 but {sys.executable} cannot import dgcompat: {exc}\n")
        sys.stderr.flush()
        os._exit(3)
    dgcompat.install_as_deep_gemm()


def _run_shadowed() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_install()
_run_shadowed()
