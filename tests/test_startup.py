"""The install hook in real start-ups: bad settings, the user's own sitecustomize, two dgcompat installs,
a refused import retried, and tools whose children must not inherit the install."""

from __future__ import annotations

import ast
import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dgcompat._install import launch as _launch
from testsupport.dists import torch_metadata, write_dist

from .test_dropin import FAKE_FILES

ROOT = Path(__file__).resolve().parent.parent


def _env(site: Path, *extra_paths: Path, **variables: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DGCOMPAT_")}
    env["PYTHONPATH"] = os.pathsep.join([*map(str, extra_paths), str(site), str(ROOT), str(ROOT / "conformance")])
    env.update(DGCOMPAT_ALLOW_TORCH_MISMATCH="1", DGCOMPAT_ARCH="sm90")
    env.update(variables)
    return env


def _user_hook(tmp_path: Path) -> Path:
    """A user's own sitecustomize: appends ``user <pid>`` to a file each time it runs."""
    folder = tmp_path / "user"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(
        f"import os\nwith open({str(tmp_path / 'ran.txt')!r}, 'a') as f:\n    f.write(f'user {{os.getpid()}}\\n')\n")
    return folder


def _runs(tmp_path: Path) -> list[str]:
    """The processes the user's sitecustomize ran in, one line per run."""
    return (tmp_path / "ran.txt").read_text().splitlines()


def _site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    write_dist(site, "sgl-deep-gemm", "0.1.4", FAKE_FILES)
    return site


PROBE = "import deep_gemm, sys; print(type(deep_gemm).__name__)"


def _launch_run(env: dict[str, str], *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dgcompat", "run", "--", *command], capture_output=True, text=True,
                          env=env, timeout=240, check=False)


@pytest.mark.parametrize(("variable", "value"), [("DGCOMPAT_BACKEND", "refrence"), ("DGCOMPAT_DEBUG", "2"),
                                             ("DGCOMPAT_ARCH", "sm999"), ("DGCOMPAT_ALLOW_TORCH_MISMATCH", "yes please")])
def test_a_bad_setting_stops_the_launcher_before_the_engine_runs(tmp_path: Path, variable: str, value: str) -> None:
    site = _site(tmp_path)
    marker = tmp_path / "engine-ran"
    proc = _launch_run(_env(site, **{variable: value}), sys.executable, "-c", f"open({str(marker)!r}, 'w')")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert variable in proc.stderr and repr(value) in proc.stderr and "Traceback" not in proc.stderr
    assert not marker.exists(), "the engine ran"


@pytest.mark.parametrize(("variable", "value"), [("DGCOMPAT_BACKEND", "refrence"), ("DGCOMPAT_INSTALL", "maybe")])
def test_a_bad_setting_in_a_child_stops_that_child_loudly(tmp_path: Path, variable: str, value: str) -> None:
    # The launcher checked its own environment; a child started with another one is stopped by the hook.
    site = _site(tmp_path)
    env = _launch.launch_env(_env(site, _user_hook(tmp_path)))
    env[variable] = value
    proc = subprocess.run([sys.executable, "-c", "print('engine ran')"], capture_output=True, text=True, env=env,
                          timeout=240, check=False)
    assert proc.returncode == 2 and "engine ran" not in proc.stdout, proc.stdout + proc.stderr
    assert variable in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(("value", "installed"), [  # each a process of its own: one of each answer in the fast tier
    ("1", True), ("no", False), *(pytest.param(v, i, marks=pytest.mark.slow) for v, i in (
        ("true", True), ("yes", True), (" 1", True), ("ON", True), ("0", False), ("false", False)))])
def test_the_install_switch_takes_the_usual_spellings(tmp_path: Path, value: str, installed: bool) -> None:
    site = _site(tmp_path)
    env = _launch.launch_env(_env(site, _user_hook(tmp_path)))
    env["DGCOMPAT_INSTALL"] = value
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=240, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == ("_Facade" if installed else "module")
    assert len(_runs(tmp_path)) == 1  # the user's sitecustomize, exactly once


def test_the_users_sitecustomize_runs_exactly_once_under_the_launcher(tmp_path: Path) -> None:
    site = _site(tmp_path)
    proc = _launch_run(_env(site, _user_hook(tmp_path)), sys.executable, "-c", PROBE)
    assert proc.returncode == 0 and proc.stdout.strip() == "_Facade", proc.stderr[-2000:]
    # Once in the launcher's interpreter, once in the engine's (exec keeps the process id): once per interpreter.
    assert len(_runs(tmp_path)) == 2


def _other_install(tmp_path: Path, hook: str) -> Path:
    """Another dgcompat install's hook folder ``dgcompat/<hook>`` (this layout's ``_install/_startup``, or the
    earlier ``_startup``), as a container image may carry one; returns the hook folder."""
    other = tmp_path / "image" / "dgcompat"
    shutil.copytree(_launch.HOOK_DIR, other / hook)
    (other / "__init__.py").write_text("")
    if hook != "_startup":
        (other / "_install" / "__init__.py").write_text("")
    return other / hook


@pytest.mark.parametrize("hook", ["_install/_startup", "_startup"], ids=["this-layout", "earlier-layout"])
def test_two_dgcompat_hooks_on_the_path_neither_recurse_nor_install_twice(tmp_path: Path, hook: str) -> None:
    # A virtualenv inside a container image that has a dgcompat of its own: both hook folders on PYTHONPATH.
    other_hook = _other_install(tmp_path, hook)
    assert _launch.is_hook_dir(other_hook) and _launch.is_hook_dir(_launch.HOOK_DIR)
    site = _site(tmp_path)
    env = _launch.launch_env(_env(site, _user_hook(tmp_path)))
    for order in ([str(other_hook), env["PYTHONPATH"]], [env["PYTHONPATH"], str(other_hook)]):
        (tmp_path / "ran.txt").unlink(missing_ok=True)
        variant = dict(env, PYTHONPATH=os.pathsep.join(order))
        proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=variant,
                              timeout=240, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stdout.strip() == "_Facade" and "RecursionError" not in proc.stderr
        assert len(_runs(tmp_path)) == 1
    # The launcher itself drops the other install's hook folder.
    launched = _launch.launch_env({"PYTHONPATH": os.pathsep.join([str(other_hook), "/x"])})
    assert launched["PYTHONPATH"].split(os.pathsep) == [str(_launch.HOOK_DIR), "/x"]


def _hook_rule() -> Callable[[str], bool]:
    """The start-up hook's own ``_is_hook_dir`` (the hook cannot import dgcompat), read from its source without
    running the hook."""
    source = (_launch.HOOK_DIR / "sitecustomize.py").read_text()
    fn = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "_is_hook_dir")
    scope: dict[str, Any] = {"os": os}
    exec(compile(ast.Module([fn], []), "sitecustomize.py", "exec"), scope)
    rule: Callable[[str], bool] = scope["_is_hook_dir"]
    return rule


def test_the_hook_and_the_launcher_tell_hook_folders_alike(tmp_path: Path) -> None:
    hook_rule = _hook_rule()
    folders = {"this": _launch.HOOK_DIR, "other-layout": _other_install(tmp_path / "a", "_install/_startup"),
               "earlier-layout": _other_install(tmp_path / "b", "_startup")}
    lookalikes = {"no-package": tmp_path / "c" / "dgcompat" / "_startup",
                  "no-_install-package": tmp_path / "d" / "dgcompat" / "_install" / "_startup",
                  "not-dgcompat": tmp_path / "e" / "other" / "_startup"}
    for folder in lookalikes.values():
        folder.mkdir(parents=True)
        (folder / "sitecustomize.py").write_text("")
    (tmp_path / "d" / "dgcompat" / "__init__.py").write_text("")
    (tmp_path / "e" / "other" / "__init__.py").write_text("")
    for name, folder in {**folders, **lookalikes}.items():
        expect = name in folders
        assert _launch.is_hook_dir(folder) is expect and hook_rule(str(folder)) is expect, name


def test_hookless_env_removes_the_install() -> None:
    env = _launch.launch_env({"PYTHONPATH": "/a", "OTHER": "1"})
    assert _launch.hookless_env(env) == {"PYTHONPATH": "/a", "OTHER": "1"}
    assert _launch.hookless_env(_launch.launch_env({})) == {}


def test_a_refused_import_is_retried_under_the_install_as_without_it(tmp_path: Path) -> None:
    # Refused once (torch mismatch), then allowed and reset: the same rule with and without the install.
    site = tmp_path / "site"
    write_dist(site, "sgl-deep-gemm", "0.2.5", FAKE_FILES)  # built for torch 2.14
    torch_metadata(site, "2.12.0")  # the torch detection reads, whatever torch is installed
    code = (
        "import os, sys, dgcompat\n"
        "if sys.argv[1] == 'install':\n    dgcompat.install_as_deep_gemm()\n"
        "from dgcompat import errors\n"
        "rel = dgcompat.release()\n"
        "assert rel.torch_ok is False, rel\n"
        # Under the install the engine's `import deep_gemm` comes first: refused inside it, the facade stays.
        "dg = __import__('deep_gemm') if sys.argv[1] == 'install' else dgcompat\n"
        "try:\n    dg.get_num_sms(); print('not refused')\n"
        "except (errors.IncompatibleBuildError, AttributeError): print('refused')\n"
        "os.environ['DGCOMPAT_ALLOW_TORCH_MISMATCH'] = '1'\ndgcompat.reset()\n"
        "print(dg.get_num_sms())\n"
        "print(dgcompat.get_num_sms())\n"
    )
    for mode in ("install", "plain"):
        env = _env(site)
        env.pop("DGCOMPAT_ALLOW_TORCH_MISMATCH")
        proc = subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True, env=env,
                              timeout=240, check=False)
        assert proc.returncode == 0, (mode, proc.stdout, proc.stderr[-3000:])
        assert proc.stdout.split() == ["refused", "132", "132"], (mode, proc.stdout)


def test_conformance_children_do_not_inherit_the_install(tmp_path: Path) -> None:
    from dgcompat_conformance.harness.runner import child_env

    saved = dict(os.environ)
    try:
        os.environ.update(_launch.launch_env(os.environ))
        os.environ["DGCOMPAT_BACKEND"] = "reference"
        env = child_env()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert "DGCOMPAT_INSTALL" not in env and "DGCOMPAT_BACKEND" not in env
    assert not any(_launch.is_hook_dir(p) for p in env["PYTHONPATH"].split(os.pathsep))


@pytest.mark.wheels
def test_conform_a_release_from_an_engine_environment_with_the_hook_baked_in(tmp_path: Path) -> None:
    # An engine container where `python -m dgcompat run --print-env` was baked in: the CPU tier of a release
    # still certifies it (its children must not bind the hook's dgcompat before the release is on sys.path).
    env = _launch.launch_env({k: v for k, v in os.environ.items() if not k.startswith("DGCOMPAT_")})
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(ROOT), str(ROOT / "conformance")])
    proc = subprocess.run([sys.executable, "-m", "dgcompat", "conform", "--release", "0.1.4", "--out",
                           str(tmp_path / "c"), "-k", "gemm"], capture_output=True, text=True, env=env, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "PASS" in proc.stdout


# --------------------------------------------------------------------------- PYTHONPATH as Python reads it

_PATH_PROBE = "import json, sys; print(json.dumps(sys.path))"


def _child_path(env: dict[str, str], cwd: Path) -> list[str]:
    """``sys.path`` of a Python started with ``env`` in ``cwd``, dgcompat hook folders left out."""
    proc = subprocess.run([sys.executable, "-c", _PATH_PROBE], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=240, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [p for p in json.loads(proc.stdout.strip().splitlines()[-1]) if not (p and _launch.is_hook_dir(p))]


_SLOW = pytest.mark.slow  # a subprocess each: four layouts in the fast tier, the rest in the slow one


@pytest.mark.parametrize("entries", [
    pytest.param(None, id="unset"), pytest.param([], id="empty", marks=_SLOW),
    pytest.param(["", ""], id="colon-only"), pytest.param(["{a}", ""], id="trailing", marks=_SLOW),
    pytest.param(["", "{a}"], id="leading", marks=_SLOW), pytest.param(["{a}", "", "{b}"], id="middle"),
    pytest.param(["{other}", ""], id="other-hook-then-empty", marks=_SLOW),
    pytest.param(["", "{other}", "{a}"], id="empty-then-other-hook"),
    pytest.param(["{a}"], id="no-empty", marks=_SLOW)])
def test_the_launcher_keeps_pythonpath_as_python_reads_it(tmp_path: Path, entries: list[str] | None) -> None:
    # Python ignores an empty PYTHONPATH and reads every empty entry of a non-empty one as the current folder.
    folders = {"a": tmp_path / "a", "b": tmp_path / "b", "other": _other_install(tmp_path, "_startup")}
    for f in folders.values():
        f.mkdir(exist_ok=True)
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DGCOMPAT_") and k != "PYTHONPATH"}
    if entries is not None:
        env["PYTHONPATH"] = os.pathsep.join(e.format(**{k: str(v) for k, v in folders.items()}) for e in entries)
    launched = _launch.launch_env(env)
    assert launched["PYTHONPATH"].split(os.pathsep)[0] == str(_launch.HOOK_DIR)
    assert _child_path(launched, work) == _child_path(env, work)
    back = _launch.hookless_env(launched)
    assert _child_path(back, work) == _child_path(env, work) and "DGCOMPAT_INSTALL" not in back


def test_print_env_shows_the_empty_entries(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for name in [k for k in os.environ if k.startswith("DGCOMPAT_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["", "/srv/app", ""]))
    assert _launch.main(["--print-env"]) == 0
    out = capsys.readouterr().out.splitlines()
    expected = os.pathsep.join([str(_launch.HOOK_DIR), "", "/srv/app", ""])
    assert out == [f"export PYTHONPATH={shlex.quote(expected)}", "export DGCOMPAT_INSTALL=1"]


def test_a_launch_script_imports_the_deployments_module_from_the_working_folder(tmp_path: Path) -> None:
    # The real start-up: the working folder holds the deployment's own module, the launch script lives elsewhere,
    # and PYTHONPATH starts with an empty entry (the current folder), as `export PYTHONPATH=:$PYTHONPATH` writes it.
    site = _site(tmp_path)
    work = tmp_path / "deployment"
    work.mkdir()
    (work / "deployment_settings.py").write_text("MODEL = 'from the working folder'\n")
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "launch.py").write_text("import json, deep_gemm, deployment_settings\n"
                                       "print(json.dumps([deployment_settings.MODEL, type(deep_gemm).__name__]))\n")
    env = _env(site)
    env["PYTHONPATH"] = os.pathsep + env["PYTHONPATH"]
    plain = subprocess.run([sys.executable, str(scripts / "launch.py")], capture_output=True, text=True, env=env,
                           cwd=work, timeout=240, check=False)
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert json.loads(plain.stdout) == ["from the working folder", "module"]
    launched = subprocess.run([sys.executable, "-m", "dgcompat", "run", "--", sys.executable, str(scripts / "launch.py")],
                              capture_output=True, text=True, env=env, cwd=work, timeout=240, check=False)
    assert launched.returncode == 0, launched.stderr[-2000:]
    assert json.loads(launched.stdout.strip().splitlines()[-1]) == ["from the working folder", "_Facade"]


@pytest.mark.parametrize("argv", [["--print-envv", "--"], ["--print-envv"], ["--print-env", "-x", "--"], ["-m"]])
def test_an_unknown_launcher_option_is_a_usage_error_not_a_command(tmp_path: Path, argv: list[str]) -> None:
    site = _site(tmp_path)
    marker = tmp_path / "engine-ran"
    proc = subprocess.run([sys.executable, "-m", "dgcompat", "run", *argv, sys.executable, "-c",
                           f"open({str(marker)!r}, 'w')"], capture_output=True, text=True, env=_env(site), timeout=240, check=False)
    unknown = next(a for a in argv if a not in ("--", "--print-env"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == "" and len(proc.stderr.splitlines()) == 1 and repr(unknown) in proc.stderr, proc.stderr
    assert "--print-env" in proc.stderr and not marker.exists()
