"""The two wings: the runtime (``dgcompat``) never reaches the certification wing (``dgcompat_conformance``)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testsupport import layout

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "dgcompat"
WING = "dgcompat_conformance"

_USE_THE_RUNTIME = r"""
import json, sys
import torch
import dgcompat
rel = dgcompat.release()
caps = dgcompat.capabilities()
a = torch.randn(128, 256).to(torch.bfloat16)
b = torch.randn(64, 256).to(torch.bfloat16)
d = torch.empty(128, 64, dtype=torch.bfloat16)
dgcompat.bf16_gemm_nt(a, b, d)
scales = dgcompat.get_mn_major_tma_aligned_tensor(torch.rand(64, 4))
n = dgcompat.get_mk_alignment_for_contiguous_layout()
print(json.dumps({
    "wing": sorted(m for m in sys.modules if m == "dgcompat_conformance" or m.startswith("dgcompat_conformance.")),
    "gemm_ok": bool(torch.allclose(d.float(), a.float() @ b.float().T, rtol=2e-2, atol=2e-1)),
    "alignment": n,
    "scales": list(scales.shape),
}))
"""


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "conformance"), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def test_using_the_runtime_loads_nothing_of_the_certification_wing() -> None:
    proc = subprocess.run([sys.executable, "-c", _USE_THE_RUNTIME], capture_output=True, text=True, timeout=300,
                          env=_env(DGCOMPAT_BACKEND="reference"), cwd=str(ROOT), check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["gemm_ok"] and found["alignment"] > 0 and found["scales"] == [64, 4]  # the stable calls ran
    assert found["wing"] == [], found["wing"]


def _imports_of(path: Path) -> list[tuple[int, str]]:
    return _imports_in(ast.parse(path.read_text("utf-8"), str(path)))


def _imports_in(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)):
            # importlib.import_module("...") and __import__("...") with a literal name
            name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            if name in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
                out.append((node.lineno, str(node.args[0].value)))
    return out


def test_no_runtime_module_imports_the_certification_wing() -> None:
    offenders = []
    files = sorted(RUNTIME.rglob("*.py"))
    assert len(files) > 10
    for path in files:
        if path == RUNTIME / "__main__.py":
            continue  # the command launcher: it hands `python -m dgcompat ...` to the wing's CLI
        for line, module in _imports_of(path):
            if module == WING or module.startswith(WING + "."):
                offenders.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert offenders == []


def test_the_static_check_sees_a_back_import(tmp_path: Path) -> None:
    """Control: the import scan does find the imports it looks for."""
    probe = tmp_path / "probe.py"
    probe.write_text("import os\ndef f():\n    from dgcompat_conformance import pins\n"
                     "    import importlib\n    importlib.import_module('dgcompat_conformance.cli')\n")
    assert [m for _l, m in _imports_of(probe)] == ["os", "dgcompat_conformance", "importlib",
                                                   "dgcompat_conformance.cli"]


@pytest.mark.slow
def test_import_floors(capsys: pytest.CaptureFixture[str]) -> None:
    runtime, tooling = layout.wings()
    project = {**runtime.imports, **tooling.imports}
    r_floors, r_chain = runtime.floor(project)
    t_floors, _t_chain = tooling.floor(project)
    assert r_floors >= 2 and t_floors > 2
    assert not any(m.startswith(WING) for m in r_chain)  # no runtime chain reaches the wing
    assert all(not (set(ts) & set(tooling.modules)) for ts in runtime.imports.values())
    assert runtime.cycles() == [] and tooling.cycles() == []
    text = layout.render()
    with capsys.disabled():
        print("\n" + text)
    assert "runtime -> certification imports: none" in text


@pytest.mark.parametrize("command", [  # the script also runs as the README's first command in every CI run
    pytest.param(["dgcompat"], id="script", marks=pytest.mark.slow), pytest.param([sys.executable, "-m", "dgcompat"],
                                                                                  id="module")])
def test_the_command_works_both_ways(command: list[str], tmp_path: Path) -> None:
    if command == ["dgcompat"]:
        # The console script of this checkout: the entry point pyproject.toml declares, run as pip's wrapper does.
        script = tmp_path / "dgcompat"
        script.write_text(f"#!{sys.executable}\nimport sys\nfrom dgcompat_conformance.cli import main\n"
                          "sys.exit(main())\n")
        script.chmod(0o755)
        command = [str(script)]
    for args, expect in ((["--help"], "commands:"), (["table"], "mqa_logits"), (["pin", "--release", "0.1.4"],
                                                                                  "sgl-deep-gemm==0.1.4")):
        proc = subprocess.run([*command, *args], capture_output=True, text=True, timeout=300, env=_env(),
                              cwd=str(tmp_path), check=False)
        assert proc.returncode == 0, (args, proc.stderr[-2000:])
        assert expect in proc.stdout, (args, proc.stdout[-2000:])


def test_the_entry_point_is_the_wing_cli() -> None:
    tomllib = pytest.importorskip("tomllib")

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"dgcompat": "dgcompat_conformance.cli:main"}


def test_one_copy_of_the_release_list_and_the_names() -> None:
    from dgcompat import detection
    from dgcompat_conformance import dists, releases

    assert releases.SGL_DEEP_GEMM_RELEASES is detection.KNOWN_SGL_DEEP_GEMM
    assert dists.SGL_DEEP_GEMM is detection.SGL_DEEP_GEMM and set(dists.KERNEL_DISTS) == set(detection.KERNEL_WHEELS)
    names = {detection.SGL_DEEP_GEMM, *detection.KERNEL_WHEELS}
    wing = ROOT / "conformance" / WING
    offenders = []
    for path in sorted(wing.rglob("*.py")):
        rel = path.relative_to(wing).as_posix()
        if rel.startswith("suite/") or rel in ("dists.py", "gpu/cases.py"):
            continue  # the suite and the GPU cases speak about releases; they define no names
        tree = ast.parse(path.read_text("utf-8"))
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                values = [n.value for n in ast.walk(node.value) if isinstance(n, ast.Constant)]
                if any(v in names for v in values):
                    offenders.append(f"{rel}:{node.lineno} defines a distribution name")
        text = path.read_text("utf-8")
        if 're.sub(r"[-_.]+"' in text or "canonicalize_name" in text:
            offenders.append(f"{rel}: normalizes distribution names itself (use dists.canonical)")
    assert offenders == []



# --- tests, benchmarks and what they share ---------------------------------------------------------------------

#: The tests of the benchmarks' own code: the only test modules that import bench.
BENCH_TESTS = {"tests/test_bench.py", "tests/test_warmup_bench.py"}


def _top_imports(folder: Path) -> dict[str, set[str]]:
    """Each module of ``folder`` (relative path) -> the top-level packages it imports (every form, relative
    imports resolved to ``folder``'s own top-level name)."""
    out: dict[str, set[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text("utf-8"), str(path))
        tops = {m.split(".")[0] for _line, m in _imports_in(tree)}
        if any(isinstance(n, ast.ImportFrom) and n.level > 0 for n in ast.walk(tree)):
            tops.add(folder.name)
        out[str(path.relative_to(ROOT))] = tops
    return out


@pytest.mark.slow  # a subprocess per run: the slow tier
def test_tests_and_bench_share_testsupport_and_import_neither_each_other() -> None:
    """bench/ never imports tests/; tests/ imports bench/ only where it tests the benchmarks' code; testsupport/
    (the fakes both use) imports neither."""
    bench, support, tests = (_top_imports(ROOT / name) for name in ("bench", "testsupport", "tests"))
    offenders = [f"{rel} imports tests" for rel, tops in bench.items() if "tests" in tops]
    offenders += [f"{rel} imports {t}" for rel, tops in support.items() for t in sorted(tops & {"tests", "bench"})]
    offenders += [f"{rel} imports bench" for rel, tops in tests.items() if "bench" in tops and rel not in BENCH_TESTS]
    assert offenders == []
    assert "testsupport" in bench["bench/__main__.py"] and "testsupport" in tests["tests/conftest.py"]  # real imports

# --- the door: the other wing, the benchmarks and the docs use the runtime only through names meant for them ---

#: The runtime's one declared internal interface for its tooling.
TOOLING = "dgcompat._tooling"


def _private_runtime_uses(source: str, where: str) -> list[str]:
    """Private runtime names ``source`` uses: a private module path (``dgcompat._x``, ``dgcompat.indexer._y``)
    other than the tooling interface, or an underscore attribute of a runtime module."""
    tree = ast.parse(source, where)
    aliases: dict[str, str] = {}  # local name -> runtime module path it stands for
    found = []

    def private(path: str) -> bool:
        return path != TOOLING and not path.startswith(TOOLING + ".") and any(
            part.startswith("_") and not part.startswith("__") for part in path.split(".")[1:])

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "dgcompat" or a.name.startswith("dgcompat."):
                    if private(a.name):
                        found.append(f"{where}:{node.lineno} imports {a.name}")
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else "dgcompat"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
                node.module == "dgcompat" or node.module.startswith("dgcompat.")):
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if private(full):
                    found.append(f"{where}:{node.lineno} imports {full}")
                aliases[a.asname or a.name] = full
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            full = f"{aliases[node.value.id]}.{node.attr}"
            if private(full):
                found.append(f"{where}:{node.lineno} uses {full}")
    return found


def _python_blocks(markdown: str) -> list[str]:
    blocks: list[str] = []
    inside, current = False, list[str]()
    for line in markdown.splitlines():
        if line.strip().startswith("```"):
            if inside:
                blocks.append("\n".join(current))
            inside, current = (not inside and line.strip() in ("```python", "```py")), []
        elif inside:
            current.append(line)
    return blocks


def test_the_tooling_uses_no_private_runtime_name() -> None:
    offenders = []
    for folder in (ROOT / "conformance" / WING, ROOT / "bench", ROOT / "testsupport"):
        for path in sorted(folder.rglob("*.py")):
            offenders += _private_runtime_uses(path.read_text("utf-8"), str(path.relative_to(ROOT)))
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for i, block in enumerate(_python_blocks(doc.read_text("utf-8"))):
            try:
                offenders += _private_runtime_uses(block, f"{doc.relative_to(ROOT)} block {i}")
            except SyntaxError:
                continue  # a fragment, not a program
    assert offenders == []


def test_the_door_check_sees_private_names() -> None:
    """Control: each way of reaching a private runtime name is found; the tooling interface and public names are not."""
    code = ("import dgcompat\nfrom dgcompat import _binding, indexer, _tooling\nfrom dgcompat.indexer._state import STATE\n"
            "import dgcompat._env as env\nindexer._B.clear()\n_tooling.load_backend()\ndgcompat.fp8_gemm_nt\n"
            "from dgcompat.detection import release\n")
    assert sorted(_private_runtime_uses(code, "probe")) == [
        "probe:2 imports dgcompat._binding", "probe:3 imports dgcompat.indexer._state.STATE",
        "probe:4 imports dgcompat._env", "probe:5 uses dgcompat.indexer._B"]
