"""The certification wing in layers (testsupport/wing_layers.py): no import points to a later layer, in any form,
with a planted control; every module placed; the function-level imports kept are the ones that must be lazy, each
saying why, and the command modules load no optional dependency at start."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from testsupport import wing_layers as W

ROOT = Path(__file__).resolve().parent.parent
WING = ROOT / "conformance" / "dgcompat_conformance"


def test_no_import_points_to_a_later_layer(capsys: pytest.CaptureFixture[str]) -> None:
    found = W.edges()
    kinds = {k: sum(e.kind == k for e in found) for k in ("top", "function", "string", "computed")}
    assert kinds["top"] > 150 and kinds["function"] > 0  # both forms are read
    assert W.upward(found) == []
    with capsys.disabled():
        print(f"\nwing import edges: {kinds}; layers: " + " -> ".join(layer.name for layer in W.LAYERS))


def test_every_module_has_one_layer_and_every_entry_a_module() -> None:
    assert W.unplaced() == [] and W.stale() == []
    names = [m for layer in W.LAYERS for m in layer.modules]
    assert len(names) == len(set(names))


def test_the_readme_shows_the_layers() -> None:
    assert W.markdown() in (ROOT / "README.md").read_text(), "README.md's table of the wing's layers is stale"


def _plant(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / W.WING / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_check_finds_a_planted_upward_edge_of_every_form(tmp_path: Path) -> None:
    """Control: a wing in a temporary folder whose leaf imports a command at the top, inside a function, by a
    string and by an undeclared computed name; each is reported, and the same wing without them is clean."""
    layers = (W.Layer("leaves", "", ("", "_text")), W.Layer("commands", "", ("cli",)))
    clean = {"__init__.py": "", "_text.py": "X = 1\n", "cli.py": "from ._text import X\n"}
    _plant(tmp_path / "clean", clean)
    assert W.upward(W.edges(tmp_path / "clean"), layers) == []
    _plant(tmp_path / "bad", {**clean, "_text.py": (
        "import importlib\n"
        "from . import cli\n"
        "def f(name: str) -> None:\n"
        "    from .cli import X\n"
        "    importlib.import_module('dgcompat_conformance.cli')\n"
        "    importlib.import_module(name)\n")})
    up = W.upward(W.edges(tmp_path / "bad"), layers)
    assert [re.sub(r"line \d+", "line", u) for u in up] == [
        "_text (leaves) imports cli (commands) [top, line]",
        "_text (leaves) imports cli (commands) [function, line]",
        "_text (leaves) imports cli (commands) [string, line]",
        "_text (leaves) imports <undeclared computed import> (no layer) [computed, line]",
    ], up


def _kept() -> list[tuple[str, int, str]]:
    """(file, line, reason) of every function-level import the wing keeps (``# noqa: PLC0415 (reason)``)."""
    out = []
    for path in sorted(WING.rglob("*.py")):
        text = path.read_text("utf-8")
        lines = text.splitlines()
        tree = ast.parse(text)
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    m = re.search(r"# noqa: (?:[A-Z0-9]+, )*PLC0415 \((.+)\)$", lines[(node.end_lineno or node.lineno) - 1])
                    out.append((str(path.relative_to(WING)), node.lineno, m.group(1) if m else ""))
    return sorted(set(out))


def test_every_kept_function_level_import_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    kept = [k for k in _kept() if k[0] != "layout.py"]  # layout.py leaves the wheel (test-only)
    assert [k for k in kept if len(k[2]) < 15] == []  # ruff's PLC0415 makes the noqa needed; the reason is ours
    reasons: dict[str, int] = {}
    for _file, _line, why in kept:
        reasons[why] = reasons.get(why, 0) + 1
    # The reasons that make an import lazy, and nothing else: a child's order, torch out of a parent, one command.
    assert set(reasons) == {"torch only in the case's child", "torch loads only in the check's child",
                            "after the child's settings", "a command loads only its own modules",
                            "a torch that fails to import is reported by doctor, not fatal",
                            "only the bundled copies installed as deep_gemm have it; the reference tier has none"}
    with capsys.disabled():
        print(f"\nwing function-level imports kept: {len(kept)}: {json.dumps(reasons)}")


_STARTS = r"""
import json, sys
import dgcompat_conformance.cli, dgcompat_conformance.conform, dgcompat_conformance.doctor
import dgcompat_conformance.pins, dgcompat_conformance.surface.cli, dgcompat_conformance.intake.cli
import dgcompat_conformance.gpu.runner, dgcompat_conformance.report
loaded = set(sys.modules)
import dgcompat_conformance.harness.child
print(json.dumps({"optional": sorted(m for m in ("torch", "pytest", "hypothesis", "deep_gemm", "tvm_ffi")
                                     if m in loaded),
                  "child": sorted(m for m in set(sys.modules) - loaded if m.startswith("dgcompat."))}))
"""


def test_the_commands_load_no_optional_dependency_and_the_child_no_runtime() -> None:
    """What the kept imports are for: the command modules start without torch, pytest or hypothesis; the harness
    child's module, imported alone, loads no module of the runtime before its settings."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "conformance")]))
    proc = subprocess.run([sys.executable, "-c", _STARTS], capture_output=True, text=True, timeout=300, env=env,
                          cwd=str(ROOT), check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["optional"] == [], found
    child = subprocess.run([sys.executable, "-c", "import json, sys\nimport dgcompat_conformance.harness.child\n"
                            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('dgcompat.'))))"],
                           capture_output=True, text=True, timeout=300, env=env, cwd=str(ROOT), check=False)
    assert child.returncode == 0, child.stderr[-2000:]
    # The runtime's package (its __init__ loads only these) and nothing that reads the environment.
    assert set(json.loads(child.stdout)) <= {"dgcompat.errors", "dgcompat._version", "dgcompat._surface"}
