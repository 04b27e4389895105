"""dgcompat installed as ``deep_gemm`` (:func:`dgcompat.install_as_deep_gemm`) and the launcher.

Every test runs its scenario in a fresh interpreter: the install changes ``sys.meta_path`` and
``sys.modules`` for the whole process, and a real deep_gemm can be imported once per process. The
fake ``deep_gemm`` laid out here has real submodules, relative imports (also function-local
ones, as the wheels' ``from .. import _C``), a load counter and the sgl wheels'
``deep_gemm.<function>`` ``sys.modules`` entries.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

import pytest

from testsupport.dists import torch_metadata, write_dist

ROOT = Path(__file__).resolve().parent.parent

FAKE_INIT = """
import builtins, sys as _sys
builtins.__dict__.setdefault("_dg_real_loads", []).append(__name__)
from . import _C
from . import utils
from .utils import *
from . import testing

def fp8_gemm_nt(a, b, d, c=None, recipe=None, compiled_dims="nk", disable_ue8m0_cast=False):
    from dgcompat import reference as R
    R.fp8_gemm_nt(a, b, d, c=c, recipe=recipe)

def get_num_sms():
    return 132

def set_num_sms(n):
    pass

def get_mk_alignment_for_contiguous_layout():
    return 128

def set_tc_util(x):
    return "real set_tc_util"

FLAG = 7
__version__ = "9.9.9-real"
for _n, _v in list(globals().items()):
    if not _n.startswith("_") and callable(_v) and not isinstance(_v, type(_sys)):
        _sys.modules.setdefault(__name__ + "." + _n, _v)
"""

FAKE_FILES: dict[str, str | bytes] = {
    "deep_gemm/__init__.py": FAKE_INIT,
    "deep_gemm/_C.py": "NAME = 'real _C'\ndef tma(mn, es):\n    a = 16 // es\n    return (mn + a - 1) // a * a\n",
    "deep_gemm/utils/__init__.py": "from . import math, layout\nfrom .layout import *\nfrom .math import *\n",
    "deep_gemm/utils/math.py": ("def align(x, y):\n    return 'real align'\n"
                                "def per_block_cast_to_fp8(x):\n    return 'real per_block_cast_to_fp8'\n"),
    "deep_gemm/utils/layout.py": ("from .math import align\n"
                                  "def _get_C():\n    from .. import _C\n    return _C\n"
                                  "def get_tma_aligned_size(mn, es):\n    return _get_C().tma(mn, es)\n"
                                  "def get_mn_major_tma_aligned_tensor(x):\n    return 'real get_mn_major'\n"
                                  "def only_in_real_layout():\n    return _get_C().NAME\n"),
    "deep_gemm/utils/dist.py": "from ..utils.math import align\ndef init_dist():\n    return 'real init_dist'\n",
    "deep_gemm/testing/__init__.py": ("from . import numeric\nfrom .numeric import *\n"
                                      "def bench_kineto():\n    return 'real bench_kineto'\n"),
    "deep_gemm/testing/numeric.py": "def calc_diff(x, y):\n    return 'real calc_diff'\n",
    "deep_gemm/legacy/__init__.py": ("from .. import _C as _c\nfrom ..utils import layout as _l\n"
                                     "LEGACY = (_c.NAME, _l.only_in_real_layout())\n"),
}


def _site(tmp_path: Path, files: Mapping[str, str | bytes] | None = None, version: str = "0.1.4") -> Path:
    site = tmp_path / "site"
    write_dist(site, "sgl-deep-gemm", version, files or FAKE_FILES)
    return site


def _run(code: str, *paths: Path, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("DGCOMPAT_")}
    full["PYTHONPATH"] = os.pathsep.join([*map(str, paths), str(ROOT), str(ROOT / "conformance")])
    full["DGCOMPAT_ALLOW_TORCH_MISMATCH"] = "1"  # the fakes have no native library
    full["DGCOMPAT_ARCH"] = "sm90"
    full.update(env or {})
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full,
                          timeout=240, check=False)
    if check:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _loads() -> str:
    return "__import__('builtins').__dict__.get('_dg_real_loads', [])"


# --------------------------------------------------------------------------- nothing at import


def test_import_dgcompat_installs_nothing(tmp_path: Path) -> None:
    _run(f"""
        import sys
        import dgcompat
        assert "deep_gemm" not in sys.modules
        assert not dgcompat.installed_as_deep_gemm()
        assert not [f for f in sys.meta_path if type(f).__module__ == "dgcompat._install"]
        import deep_gemm
        assert type(deep_gemm).__name__ == "module" and {_loads()} == ["deep_gemm"]
        dgcompat.install_as_deep_gemm()  # late: imports nothing more
        assert {_loads()} == ["deep_gemm"]
    """, _site(tmp_path))


# --------------------------------------------------------------------------- fake package, early install


def test_every_import_form_before_the_real_import(tmp_path: Path) -> None:
    _run(f"""
        import importlib, sys
        import dgcompat
        from dgcompat import _backend
        dgcompat.install_as_deep_gemm()
        assert dgcompat.installed_as_deep_gemm()
        assert "deep_gemm" not in sys.modules and {_loads()} == []   # the install itself imports nothing

        # SGLang's entrypoint, at module level
        from deep_gemm.utils.layout import get_mn_major_tma_aligned_tensor
        assert get_mn_major_tma_aligned_tensor is dgcompat.get_mn_major_tma_aligned_tensor
        import deep_gemm
        assert type(deep_gemm).__name__ == "_Facade" and deep_gemm.__name__ == "deep_gemm"
        # a function-local `import deep_gemm.utils.layout`
        def local():
            import deep_gemm.utils.layout
            return deep_gemm.utils.layout
        assert local() is sys.modules["deep_gemm.utils.layout"]
        assert local().get_mn_major_tma_aligned_tensor is dgcompat.get_mn_major_tma_aligned_tensor
        assert deep_gemm.utils.layout is local() and deep_gemm.utils is sys.modules["deep_gemm.utils"]

        # stable names come from dgcompat, in every mirrored module
        from deep_gemm import transform_sf_into_required_layout, fp8_gemm_nt, get_col_major_tma_aligned_tensor
        assert transform_sf_into_required_layout is dgcompat.transform_sf_into_required_layout
        assert fp8_gemm_nt is dgcompat.fp8_gemm_nt
        assert get_col_major_tma_aligned_tensor is dgcompat.get_mn_major_tma_aligned_tensor
        from deep_gemm.utils import align, get_tma_aligned_size
        assert align is dgcompat.align and align(130, 128) == 256 and get_tma_aligned_size(5, 4) == 8
        from deep_gemm.utils.math import align as math_align
        assert math_align is dgcompat.align
        from deep_gemm.testing import calc_diff
        assert calc_diff is dgcompat.calc_diff
        assert importlib.import_module("deep_gemm.fp8_gemm_nt") is dgcompat.fp8_gemm_nt  # the wheels' entries

        # everything else is the real package's, submodules included
        assert deep_gemm.FLAG == 7 and deep_gemm.__version__ == "9.9.9-real"
        assert deep_gemm.set_tc_util(1) == "real set_tc_util"
        assert deep_gemm.__file__.endswith("deep_gemm/__init__.py")
        from deep_gemm.utils import per_block_cast_to_fp8
        assert per_block_cast_to_fp8(0) == "real per_block_cast_to_fp8"
        from deep_gemm.utils.layout import only_in_real_layout
        assert only_in_real_layout() == "real _C"   # its call-time `from .. import _C` goes through the facade
        from deep_gemm.utils.dist import init_dist
        assert init_dist() == "real init_dist"
        from deep_gemm.testing import bench_kineto
        assert bench_kineto() == "real bench_kineto"
        from deep_gemm.testing.numeric import calc_diff as real_calc_diff
        assert real_calc_diff(1, 2) == "real calc_diff"
        import deep_gemm.legacy
        assert deep_gemm.legacy.LEGACY == ("real _C", "real _C")
        assert type(sys.modules["deep_gemm.legacy"]).__name__ == "module"

        # probes
        assert hasattr(deep_gemm, "set_tc_util") and not hasattr(deep_gemm, "no_such_name")
        assert not hasattr(dgcompat, "no_such_name") and not hasattr(deep_gemm.utils, "no_such_name")
        assert "FLAG" in dir(deep_gemm) and "fp8_gemm_nt" in dir(deep_gemm)
        assert "install_as_deep_gemm" not in dir(deep_gemm) and not hasattr(deep_gemm, "install_as_deep_gemm")

        # a resolved stable name is a plain module attribute (no per-access hook: hot-path cost of dgcompat.<name>)
        assert vars(deep_gemm)["fp8_gemm_nt"] is dgcompat.fp8_gemm_nt
        assert "__getattr__" not in type(deep_gemm).__dict__ and "__getattribute__" not in type(deep_gemm).__dict__
        assert type(deep_gemm).__getattribute__ is type(sys).__getattribute__

        # the real package loaded exactly once, as itself; dgcompat binds to it, not to the facade
        assert {_loads()} == ["deep_gemm"]
        assert dgcompat.get_num_sms() == 132
        real = _backend.loaded_module()
        assert type(real).__name__ == "module" and real.__name__ == "deep_gemm" and real is not deep_gemm
        assert real.utils.layout.get_mn_major_tma_aligned_tensor(0) == "real get_mn_major"
        assert dgcompat.utils.per_block_cast_to_fp8(0) == "real per_block_cast_to_fp8"
        assert dgcompat.set_tc_util(2) == "real set_tc_util"
        print("ok")
    """, _site(tmp_path))


@pytest.mark.slow
def test_threads_racing_the_first_import(tmp_path: Path) -> None:
    # A slow real __init__; 16 threads import deep_gemm while 4 others bind dgcompat (stable calls):
    # one real import, every thread gets the facade, and nothing deadlocks (the binding's lock and
    # the import system's module lock are always taken in the same order).
    files = dict(FAKE_FILES)
    files["deep_gemm/__init__.py"] = "import time\ntime.sleep(0.3)\n" + FAKE_INIT
    code = f"""
        import sys, threading, time
        import dgcompat
        dgcompat.install_as_deep_gemm()
        barrier = threading.Barrier(20)
        seen, errors = [], []
        def importer():
            try:
                barrier.wait()
                import deep_gemm
                seen.append((type(deep_gemm).__name__,
                             deep_gemm.utils.layout.get_mn_major_tma_aligned_tensor is dgcompat.get_mn_major_tma_aligned_tensor))
            except BaseException as exc:
                errors.append(exc)
        def binder():
            try:
                barrier.wait()
                seen.append(("sms", dgcompat.get_num_sms() == 132))
            except BaseException as exc:
                errors.append(exc)
        threads = [threading.Thread(target=importer) for _ in range(16)] + [threading.Thread(target=binder) for _ in range(4)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        assert not any(t.is_alive() for t in threads), "deadlock"
        assert not errors, errors
        assert sorted(seen) == sorted([("_Facade", True)] * 16 + [("sms", True)] * 4), seen
        assert {_loads()} == ["deep_gemm"]
    """
    site = _site(tmp_path, files)
    for _ in range(5):  # interleavings differ from run to run
        _run(code, site)


def test_binding_first_then_import(tmp_path: Path) -> None:
    # dgcompat binds (a stable call) before anything imports deep_gemm.
    _run(f"""
        import sys
        import dgcompat
        dgcompat.install_as_deep_gemm()
        assert dgcompat.get_mk_alignment_for_contiguous_layout() == 128
        assert type(sys.modules["deep_gemm"]).__name__ == "_Facade" and {_loads()} == ["deep_gemm"]
        import deep_gemm.utils
        assert deep_gemm.utils.get_tma_aligned_size is dgcompat.get_tma_aligned_size
        assert {_loads()} == ["deep_gemm"]
    """, _site(tmp_path))


def test_install_after_the_real_import(tmp_path: Path) -> None:
    _run(f"""
        import sys
        import deep_gemm as raw
        from deep_gemm.utils.layout import get_mn_major_tma_aligned_tensor as raw_fn
        import dgcompat
        dgcompat.install_as_deep_gemm()
        import deep_gemm
        assert deep_gemm is not raw and type(deep_gemm).__name__ == "_Facade"
        from deep_gemm.utils.layout import get_mn_major_tma_aligned_tensor, only_in_real_layout
        assert get_mn_major_tma_aligned_tensor is dgcompat.get_mn_major_tma_aligned_tensor
        assert raw_fn(0) == "real get_mn_major"      # taken before the install: stays the real one
        assert only_in_real_layout() == "real _C"
        assert dgcompat.get_num_sms() == 132
        assert {_loads()} == ["deep_gemm"]
    """, _site(tmp_path))


def test_uninstall_and_context_manager(tmp_path: Path) -> None:
    _run(f"""
        import sys
        import dgcompat
        with dgcompat.as_deep_gemm():
            import deep_gemm
            assert type(deep_gemm).__name__ == "_Facade"
        assert not dgcompat.installed_as_deep_gemm()
        import deep_gemm as again
        assert type(again).__name__ == "module" and again.__name__ == "deep_gemm"
        from deep_gemm.utils.layout import get_mn_major_tma_aligned_tensor
        assert get_mn_major_tma_aligned_tensor(0) == "real get_mn_major"
        import importlib
        assert importlib.import_module("deep_gemm.fp8_gemm_nt") is again.fp8_gemm_nt  # the wheel's entries are back
        assert {_loads()} == ["deep_gemm"]   # never imported twice
        assert deep_gemm.fp8_gemm_nt is dgcompat.fp8_gemm_nt  # a facade handed out earlier keeps working
    """, _site(tmp_path))


def test_a_hand_planted_alias_is_replaced_not_recursed(tmp_path: Path) -> None:
    _run(f"""
        import sys
        import dgcompat
        sys.modules["deep_gemm"] = dgcompat   # what an engine developer tries first
        dgcompat.install_as_deep_gemm()
        import deep_gemm
        assert type(deep_gemm).__name__ == "_Facade"
        assert dgcompat.get_num_sms() == 132 and deep_gemm.FLAG == 7
        assert {_loads()} == ["deep_gemm"]
    """, _site(tmp_path))


def test_a_hand_planted_alias_without_the_install_is_a_typed_error(tmp_path: Path) -> None:
    _run("""
        import sys
        import dgcompat
        import pytest
        sys.modules["deep_gemm"] = dgcompat
        for attempt in range(2):
            with pytest.raises(dgcompat.IncompatibleBuildError, match="install_as_deep_gemm"):
                dgcompat.get_num_sms()
        assert not hasattr(dgcompat, "set_tc_util")
    """, _site(tmp_path))


# --------------------------------------------------------------------------- unusable builds


def test_broken_build_keeps_the_facade_and_types_the_errors(tmp_path: Path) -> None:
    files = dict(FAKE_FILES)
    files["deep_gemm/__init__.py"] = ("from . import utils\n"
                                      "raise OSError('_C.so: undefined symbol: _ZN3c104cuda19CUDAErrorLogCaptureC1Ev')\n")
    _run("""
        import sys
        import dgcompat
        import pytest
        dgcompat.install_as_deep_gemm()
        import deep_gemm                      # the facade imports; the failure is kept for the calls
        assert type(deep_gemm).__name__ == "_Facade"
        assert not hasattr(deep_gemm, "set_tc_util")
        with pytest.raises(dgcompat.UnavailableNameError, match="undefined symbol") as info:
            deep_gemm.set_tc_util
        assert isinstance(info.value, AttributeError) and isinstance(info.value, dgcompat.IncompatibleBuildError)
        for attempt in range(2):              # typed on every call, not only the first
            with pytest.raises(dgcompat.IncompatibleBuildError, match="undefined symbol"):
                dgcompat.get_num_sms()
        from deep_gemm.utils.layout import get_mn_major_tma_aligned_tensor
        assert get_mn_major_tma_aligned_tensor is dgcompat.get_mn_major_tma_aligned_tensor
        assert type(sys.modules["deep_gemm.utils"]).__name__ == "_Facade"   # no half-imported real module left
        assert not hasattr(deep_gemm.utils, "per_block_cast_to_fp8")
    """, _site(tmp_path, files))


def test_torch_mismatch_is_refused_before_the_real_import(tmp_path: Path) -> None:
    files = {"deep_gemm/__init__.py": "raise RuntimeError('must not be imported')\n"}
    proc = _run("""
        import dgcompat
        import pytest
        rel = dgcompat.release()
        assert rel.torch_ok is False, rel
        dgcompat.install_as_deep_gemm()
        import deep_gemm
        with pytest.raises(dgcompat.IncompatibleBuildError, match="built for torch"):
            deep_gemm.get_num_sms()
        assert not hasattr(deep_gemm, "set_tc_util")
        print("refused")
    """, torch_metadata(_site(tmp_path, files, version="0.2.5"), "2.12.0").parent,  # what detection reads
                env={"DGCOMPAT_ALLOW_TORCH_MISMATCH": "0"})
    assert "refused" in proc.stdout


def test_without_deep_gemm_the_import_fails_as_usual(tmp_path: Path) -> None:
    _run("""
        import dgcompat
        import pytest
        dgcompat.install_as_deep_gemm()
        try:
            import deep_gemm
        except ModuleNotFoundError:
            pass
        else:
            raise AssertionError("a facade without anything behind it")
        assert not hasattr(dgcompat, "nonexistent") and not hasattr(dgcompat, "set_tc_util")
        assert not hasattr(dgcompat.utils, "per_block_cast_to_fp8")
        with pytest.raises(dgcompat.UnavailableNameError) as info:
            dgcompat.utils.per_block_cast_to_fp8
        assert isinstance(info.value.__cause__, dgcompat.DeepGemmUnavailableError), repr(info.value.__cause__)
        assert dgcompat.align(5, 4) == 8 and dgcompat.utils.layout.align is dgcompat.align
    """, tmp_path / "empty")


# --------------------------------------------------------------------------- reference backend


def test_reference_backend_serves_every_import_form(tmp_path: Path) -> None:
    _run("""
        import sys, torch
        import dgcompat
        dgcompat.install_as_deep_gemm()
        import deep_gemm
        from deep_gemm.utils.layout import get_mn_major_tma_aligned_tensor
        import deep_gemm.utils.layout
        from deep_gemm.utils import align, get_tma_aligned_size
        from deep_gemm.testing import calc_diff
        from deep_gemm import transform_sf_into_required_layout, get_col_major_tma_aligned_tensor
        assert get_mn_major_tma_aligned_tensor is dgcompat.get_mn_major_tma_aligned_tensor
        sf = torch.rand(130, 4)
        out = get_col_major_tma_aligned_tensor(sf)
        assert torch.equal(out, sf) and out.stride() == (1, get_tma_aligned_size(130, 4))
        assert deep_gemm.get_num_sms() == dgcompat.get_num_sms()
        x = torch.randn(64, 64)
        assert float(calc_diff(x, x)) < 1e-12 and abs(float(calc_diff(x, -x)) - 2.0) < 1e-12
        try:
            from deep_gemm.utils import per_block_cast_to_fp8
        except ImportError:
            pass
        else:
            raise AssertionError("a pass-through name without a deep_gemm")
        assert not hasattr(deep_gemm.utils, "per_block_cast_to_fp8")
    """, tmp_path / "empty", env={"DGCOMPAT_BACKEND": "reference"})


# --------------------------------------------------------------------------- names


def test_calc_diff_formula() -> None:
    import torch

    import dgcompat

    x = torch.tensor([1.0, 2.0, 3.0])
    y = torch.tensor([1.0, 2.5, 2.0])
    expected = 1 - 2 * (1 * 1 + 2 * 2.5 + 3 * 2) / ((1 + 4 + 9) + (1 + 6.25 + 4))
    got = dgcompat.calc_diff(x, y)
    assert got.dtype == torch.float64 and abs(float(got) - expected) < 1e-15
    assert float(dgcompat.calc_diff(x.bfloat16(), x.bfloat16())) == 0.0
    assert torch.isnan(dgcompat.calc_diff(torch.zeros(3), torch.zeros(3)))


def test_align_and_ceil_div() -> None:
    import dgcompat

    assert [dgcompat.align(x, 128) for x in (0, 1, 128, 129)] == [0, 128, 128, 256]
    assert [dgcompat.ceil_div(x, 4) for x in (0, 1, 4, 5)] == [0, 1, 1, 2]
    assert dgcompat.utils.math.align is dgcompat.align and dgcompat.utils.align is dgcompat.align
    assert dgcompat.get_col_major_tma_aligned_tensor is dgcompat.get_mn_major_tma_aligned_tensor


# --------------------------------------------------------------------------- launcher


CHILD_SCRIPT = """
import json, multiprocessing as mp, os, sys

def probe(q):
    import deep_gemm
    q.put(type(deep_gemm).__name__)

if __name__ == "__main__":
    import deep_gemm
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=probe, args=(q,))
    p.start()
    child = q.get(timeout=120)
    p.join(120)
    print(json.dumps({"main": type(deep_gemm).__name__, "spawned": child,
                      "shadowed": os.environ.get("SHADOWED_SITECUSTOMIZE_RAN"), "argv": sys.argv[1:]}))
"""


def test_launcher_installs_in_every_interpreter(tmp_path: Path) -> None:
    site = _site(tmp_path)
    script = tmp_path / "engine.py"
    script.write_text(CHILD_SCRIPT)
    shadowed = tmp_path / "other"
    shadowed.mkdir()
    (shadowed / "sitecustomize.py").write_text("import os\nos.environ['SHADOWED_SITECUSTOMIZE_RAN'] = '1'\n")
    proc = _run(f"""
        import sys
        from dgcompat_conformance.cli import main
        sys.exit(main(["run", "--", sys.executable, {str(script)!r}, "--port", "1"]))
    """, site, shadowed)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"main": "_Facade", "spawned": "_Facade", "shadowed": "1", "argv": ["--port", "1"]}


def test_launcher_runs_modules_and_passes_the_exit_status(tmp_path: Path) -> None:
    site = _site(tmp_path)
    pkg = tmp_path / "mods"
    (pkg / "engine_pkg").mkdir(parents=True)
    (pkg / "engine_pkg" / "__init__.py").write_text("")
    (pkg / "engine_pkg" / "serve.py").write_text(
        "import sys, deep_gemm\nprint(type(deep_gemm).__name__)\nsys.exit(5)\n")
    proc = _run("""
        import sys
        from dgcompat_conformance.cli import main
        sys.exit(main(["run", "--", sys.executable, "-m", "engine_pkg.serve"]))
    """, site, pkg, check=False)
    assert proc.returncode == 5, proc.stderr[-2000:]
    assert proc.stdout.strip() == "_Facade"
    off = _run("""
        import sys
        from dgcompat_conformance.cli import main
        sys.exit(main(["run", "--", sys.executable, "-c", "import deep_gemm; print(type(deep_gemm).__name__)"]))
    """, site, env={"DGCOMPAT_INSTALL": "0"})
    assert off.stdout.strip() == "_Facade"  # the launcher sets the switch for the command it runs


def test_launcher_print_env_and_errors(tmp_path: Path) -> None:
    from dgcompat._install import launch as _launch

    env = _launch.launch_env({"PYTHONPATH": "/a" + os.pathsep + str(_launch.HOOK_DIR)})
    assert env["PYTHONPATH"] == os.pathsep.join([str(_launch.HOOK_DIR), "/a"]) and env["DGCOMPAT_INSTALL"] == "1"
    assert (_launch.HOOK_DIR / "sitecustomize.py").is_file()
    proc = _run("""
        import sys
        from dgcompat_conformance.cli import main
        sys.exit(main(["run", "--print-env"]))
    """)
    assert "export DGCOMPAT_INSTALL=1" in proc.stdout and str(_launch.HOOK_DIR) in proc.stdout
    missing = _run("""
        import sys
        from dgcompat_conformance.cli import main
        sys.exit(main(["run", "--", "no-such-command-dgcompat"]))
    """, check=False)
    assert missing.returncode == 127 and "cannot execute" in missing.stderr
    assert _run("from dgcompat_conformance.cli import main; import sys; sys.exit(main(['run']))",
                check=False).returncode == 2


def test_hook_refuses_to_run_without_dgcompat(tmp_path: Path) -> None:
    from dgcompat._install import launch as _launch

    broken = tmp_path / "broken"
    (broken / "dgcompat").mkdir(parents=True)
    (broken / "dgcompat" / "__init__.py").write_text("raise ImportError('dgcompat is not installed for this python')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(_launch.HOOK_DIR), str(broken)]), DGCOMPAT_INSTALL="1")
    # An interpreter that cannot import dgcompat stops instead of running the engine without it.
    proc = subprocess.run([sys.executable, "-c", "print('ran')"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120, check=False)
    assert proc.returncode == 3 and "cannot import dgcompat" in proc.stderr, proc.stdout + proc.stderr
    assert "ran" not in proc.stdout
