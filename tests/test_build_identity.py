"""A build is known by its surface: registrations read from source, fingerprints, "same version, different surface"
everywhere, and every way deep_gemm gets installed detected (wheel, PEP 660 editable, .pth path, vendored,
plain folder, zip archive)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import dgcompat
from dgcompat import _pysurface, detection
from dgcompat._tooling import all_calls
from dgcompat_conformance import doctor, pins
from dgcompat_conformance.intake import builds as intake_builds
from dgcompat_conformance.intake import mapping
from dgcompat_conformance.surface import extract, fingerprint
from dgcompat_conformance.surface.python import read_python_surface
from testsupport import fakes
from testsupport.dists import write_dist

ROOT = Path(__file__).resolve().parent.parent

# The registration idioms of upstream DeepGEMM 2.8.1's _C.py (vLLM's vendored copy), in miniature.
C_PY = """
import torch
_torch_ops = torch.ops.deep_gemm

def _bind_guarded_ops(*names):
    present = [name for name in names if hasattr(_torch_ops, name)]
    if not present:
        return
    globals().update({name: getattr(_torch_ops, name) for name in names})

def _register():
    def fp8_fp4_gemm_nt(a, b, d, c=None, recipe=None, compiled_dims='nk'):
        return _torch_ops.fp8_fp4_gemm_nt(a[0], a[1], b[0], b[1], d, c, recipe, compiled_dims)

    def fp8_fp4_mqa_logits(q, kv, weights, ks, ke, max_seqlen_k, logits_dtype=torch.float32, schedule_meta=None):
        return _torch_ops.fp8_fp4_mqa_logits(q[0], q[1], kv[0], kv[1], weights, ks, ke, max_seqlen_k, logits_dtype,
                                             schedule_meta)

    globals().update({'fp8_fp4_gemm_nt': fp8_fp4_gemm_nt, 'fp8_gemm_nt': fp8_fp4_gemm_nt,
                      'fp8_fp4_mqa_logits': fp8_fp4_mqa_logits})

    def bf16_gemm_nt(a, b, d, c=None, compiled_dims='nk'):
        return _torch_ops.bf16_gemm_nt(a, b, d, c, compiled_dims)

    def unrelated(x):
        return x

    globals().update({name: value for name, value in locals().items() if name in {'bf16_gemm_nt'}})
    _bind_guarded_ops('get_paged_mqa_logits_metadata')

_register()
"""
INIT_PY = "from ._C import fp8_gemm_nt, fp8_fp4_gemm_nt, fp8_fp4_mqa_logits, bf16_gemm_nt, " \
          "get_paged_mqa_logits_metadata\n__version__ = '2.8.1'\n"


def test_registrations_are_read_from_source() -> None:
    regs = _pysurface.module_registrations(ast.parse(C_PY))
    assert [(r.name, r.kind, r.target) for r in regs] == [
        ("fp8_fp4_gemm_nt", "def", "fp8_fp4_gemm_nt"), ("fp8_gemm_nt", "def", "fp8_fp4_gemm_nt"),
        ("fp8_fp4_mqa_logits", "def", "fp8_fp4_mqa_logits"), ("bf16_gemm_nt", "def", "bf16_gemm_nt"),
        ("get_paged_mqa_logits_metadata", "op", "get_paged_mqa_logits_metadata")]
    params = _pysurface.parameters_from_sources({"_C.py": C_PY, "__init__.py": INIT_PY}, detection.SIGNATURE_NAMES)
    assert params["fp8_gemm_nt"] == ("a", "b", "d", "c", "recipe", "compiled_dims")
    assert params["fp8_fp4_mqa_logits"][5:7] == ("max_seqlen_k", "logits_dtype")
    assert "get_paged_mqa_logits_metadata" not in params  # a native op: its schema, not the source, says


def test_the_surface_extractor_follows_the_registrations() -> None:
    sources = {"deep_gemm/__init__.py": INIT_PY, "deep_gemm/_C.py": C_PY}
    surface = read_python_surface(sources, native_ops={"get_paged_mqa_logits_metadata", "fp8_fp4_gemm_nt"})
    py: dict[str, Any] = dict(surface.symbols)
    assert py["deep_gemm.fp8_gemm_nt"]["kind"] == "alias" and py["deep_gemm.fp8_gemm_nt"]["alias_of"].endswith(
        "fp8_fp4_gemm_nt")
    assert [p["name"] for p in py["deep_gemm.fp8_fp4_mqa_logits"]["params"]][6] == "logits_dtype"
    assert py["deep_gemm.bf16_gemm_nt"]["kind"] == "function"
    assert py["deep_gemm.get_paged_mqa_logits_metadata"] == {"kind": "native", "op": "get_paged_mqa_logits_metadata",
                                                             "via": None}
    assert surface.version == "2.8.1" and surface.import_errors == ()
    # A guarded op the library lacks is left unbound, so the import that names it fails as the real one would.
    lacking = read_python_surface(sources, native_ops={"fp8_fp4_gemm_nt"})
    assert "deep_gemm.get_paged_mqa_logits_metadata" not in lacking.symbols and lacking.import_errors


def test_signature_names_cover_every_call_dgcompat_makes() -> None:
    called = {c.symbol.rsplit(".", 1)[-1] for c in all_calls()} | {a.rsplit(".", 1)[-1] for c in all_calls()
                                                                    for a in c.alternatives}
    assert called <= set(detection.SIGNATURE_NAMES), called - set(detection.SIGNATURE_NAMES)


def test_recorded_builds_agree_with_the_runtime_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert intake_builds.main(["--check"]) == 0, capsys.readouterr().out  # the command says so too
    want = fingerprint.known_surfaces_table(fingerprint.recorded())
    assert {k: set(v) for k, v in want.items()} == {k: set(v) for k, v in detection.KNOWN_SURFACES.items()}
    builds = fingerprint.recorded()
    assert builds["vllm-0.33.0"]["python"]["id"] != builds["vllm-0.34.0"]["python"]["id"]
    assert (builds["vllm-0.34.0"]["dist"], builds["vllm-0.34.0"]["version"]) == ("deep-gemm", "2.8.1")
    assert all(b["headers"]["count"] > 0 and b["native"]["id"] for b in builds.values())


def test_the_fingerprint_names_the_logits_dtype_insertion() -> None:
    builds = fingerprint.recorded()
    diffs = fingerprint.compare(builds["vllm-0.34.0"], builds["vllm-0.33.0"])
    text = "\n".join(mapping.render_differences(diffs))
    assert "fp8_fp4_mqa_logits: logits_dtype inserted at #6" in text
    assert "fp8_fp4_paged_mqa_logits: logits_dtype inserted at #7" in text
    assert "new native ops: bf16_mega_moe_trtllm, fp4_fp4_mega_moe_trtllm" in text
    probes, _rows = mapping.rows_touched(diffs)
    assert {"mqa_logits_dtype", "paged_logits_dtype", "indexer_weights"} <= set(probes)
    # Parts one side did not read are not compared.
    unread = dict(builds["vllm-0.34.0"], headers={"id": "", "count": 0})
    assert fingerprint.compare(unread, builds["vllm-0.34.0"]) == []


# ---------------------------------------------------------------------------------------------
# Same version, different surface: release label, problems, doctor, pins
# ---------------------------------------------------------------------------------------------


def test_an_unrecorded_surface_of_a_known_release(fake_site: Callable[..., Path]) -> None:
    fake_site("sgl-deep-gemm", "0.2.5", fakes.SGL_025)  # a fake: its Python layer is not the published wheel's
    rel = dgcompat.release()
    assert rel.surface_recorded is False and rel.surface
    assert rel.label == f"sgl-deep-gemm 0.2.5 [same version, different surface {rel.surface}]"
    assert any("same version, different surface" in p and "1108e26fabd6" in p for p in rel.problems)
    lines = pins.suggest(rel)
    assert not any(line.startswith("# certificates:") for line in lines)
    assert "the certificates of 0.2.5 do not cover it" in lines[-1]


def test_a_recorded_surface_is_named(fake_site: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> None:
    fake_site("deep-gemm", "2.8.1", fakes.UP_281_LOGITS_DTYPE)
    surface = dgcompat.release().surface
    assert any("different surface" in p for p in dgcompat.release().problems)
    monkeypatch.setitem(detection.KNOWN_SURFACES, ("deep-gemm", "2.8.1"), {surface: "the fake build", "x": "y"})
    dgcompat.reset()
    rel = dgcompat.release()
    assert rel.surface_recorded is True and rel.label.endswith("[the fake build]")
    assert not any("different surface" in p for p in rel.problems)


def test_doctor_names_what_differs(fake_site: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> None:
    fake_site("deep-gemm", "2.8.1", fakes.UP_281)
    rel = dgcompat.release()
    builds = fingerprint.recorded()
    report = doctor.surface_report(rel)
    assert report is not None and report["recorded"] == ["vllm-0.33.0", "vllm-0.34.0"]
    assert report["differences"] and report["nearest"] in builds
    data = doctor.collect(run_abi=False)
    assert any(p.startswith("same version, different surface: deep-gemm 2.8.1 here") for p in data["problems"])
    assert data["surface"]["differences"] == report["differences"]


# ---------------------------------------------------------------------------------------------
# Every way deep_gemm gets installed
# ---------------------------------------------------------------------------------------------


def _checkout(root: Path, body: str = fakes.UP_281_LOGITS_DTYPE) -> Path:
    """A DeepGEMM source checkout: deep_gemm/ (its Python layer) and a setup.py."""
    pkg = root / "deep_gemm"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(textwrap.dedent(body))
    (root / "setup.py").write_text("from setuptools import setup\nsetup(name='deep_gemm', version='2.8.1', "
                                   "packages=['deep_gemm'])\n")
    return root


def _editable_dist_info(site: Path, project: Path, files: dict[str, str]) -> None:
    write_dist(site, "deep_gemm", "2.8.1", files)
    info = site / "deep_gemm-2.8.1.dist-info"
    (info / "direct_url.json").write_text(json.dumps({"url": project.as_uri(), "dir_info": {"editable": True}}))


_PROBE = """
import json, site, sys
site.addsitedir(sys.argv[1])  # processes the .pth files, as the interpreter does for site-packages
import dgcompat
r = dgcompat.release()
print(json.dumps({"label": r.label, "source": r.source, "owner": r.owner, "installed_as": r.installed_as,
                  "location": r.location, "refusal": r.refusal, "surface": r.surface}))
"""


def _probe(site: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(site)], capture_output=True, text=True, timeout=120,
                          cwd=str(site), env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return found


def _finder_module(name: str, mapping: dict[str, str]) -> str:
    """setuptools' own PEP 660 finder module for ``mapping`` (its template, rendered in a child: importing
    setuptools here could clash with a distutils another test imported)."""
    code = ("import sys, json; from setuptools.command.editable_wheel import _finder_template; "
            "sys.stdout.write(_finder_template(sys.argv[1], json.loads(sys.argv[2]), {}))")
    proc = subprocess.run([sys.executable, "-c", code, name, json.dumps(mapping)], capture_output=True, text=True,
                          timeout=120, check=False)
    if proc.returncode != 0:
        pytest.skip(f"setuptools' editable finder template is not available: {proc.stderr[-300:]}")
    return proc.stdout


def test_a_pep660_editable_install_is_detected(tmp_path: Path) -> None:
    project = _checkout(tmp_path / "DeepGEMM")
    site = tmp_path / "site-packages"
    site.mkdir()
    finder = "__editable___deep_gemm_2_8_1_finder"
    files = {f"{finder}.py": _finder_module(finder, {"deep_gemm": str(project / "deep_gemm")}),
             "__editable__.deep_gemm-2.8.1.pth": f"import {finder}; {finder}.install()\n"}
    _editable_dist_info(site, project, files)
    found = _probe(site)
    assert found["refusal"] is None and found["source"] == "upstream", found
    assert found["label"].startswith("deep-gemm 2.8.1") and found["owner"] == "deep-gemm 2.8.1"
    assert found["installed_as"] == f"editable (PEP 660 finder {finder}, deep-gemm 2.8.1)"
    assert found["location"] == str(project / "deep_gemm")
    # The same checkout on a .pth path entry (setuptools' layout for a flat package, or hatchling's).
    site2 = tmp_path / "site2"
    site2.mkdir()
    _editable_dist_info(site2, project, {"__editable__.deep_gemm-2.8.1.pth": f"{project}\n"})
    found = _probe(site2)
    assert found["installed_as"] == "editable (path entry, deep-gemm 2.8.1)" and found["source"] == "upstream"


def test_a_plain_folder_and_a_zip_archive(tmp_path: Path) -> None:
    folder = _checkout(tmp_path / "copy")
    (tmp_path / "plain.pth").write_text(f"{folder}\n")
    found = _probe(tmp_path)
    assert (found["source"], found["installed_as"]) == ("unowned", "folder on sys.path")
    archive = tmp_path / "z" / "deps.zip"
    archive.parent.mkdir()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("deep_gemm/__init__.py", "__version__ = '2.8.1'\n")
    (archive.parent / "deps.pth").write_text(f"{archive}\n")
    found = _probe(archive.parent)
    assert found["installed_as"] == "zip archive" and "inside a zip archive" in found["refusal"]


def test_an_archive_is_refused_at_the_first_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 clean_dgcompat: None) -> None:
    archive = tmp_path / "deps.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("deep_gemm/__init__.py", "__version__ = '2.8.1'\n")
    monkeypatch.syspath_prepend(str(archive))
    dgcompat.reset()
    assert dgcompat.release().installed_as == "zip archive"
    with pytest.raises(dgcompat.errors.UnidentifiedBuildError, match="zip archive"):
        dgcompat.get_num_sms()
    with pytest.raises(pins.PinRefused, match="inside a zip archive"):
        pins.suggest(dgcompat.release())


@pytest.mark.slow
def test_pip_install_editable_of_a_checkout(tmp_path: Path) -> None:
    """``pip install -e`` for real (this environment's setuptools, PEP 660, no network) into a prefix of its own."""
    import sysconfig

    project = _checkout(tmp_path / "DeepGEMM")
    # A package folder outside the project root makes setuptools use its finder (a flat package uses a .pth path).
    (project / "setup.py").write_text("from setuptools import setup\nsetup(name='deep_gemm', version='2.8.1', "
                                      "packages=['deep_gemm'], package_dir={'deep_gemm': 'python/deep_gemm'})\n")
    (project / "python").mkdir()
    (project / "deep_gemm").rename(project / "python" / "deep_gemm")
    prefix = tmp_path / "prefix"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                           "--prefix", str(prefix), "-e", str(project)], capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    site = Path(sysconfig.get_path("purelib", vars={"base": str(prefix), "platbase": str(prefix)}))
    assert list(site.glob("__editable__*deep_gemm*.pth")), sorted(p.name for p in site.iterdir())
    found = _probe(site)
    assert found["label"].startswith("deep-gemm 2.8.1") and found["source"] == "upstream", found
    assert found["installed_as"].startswith("editable (PEP 660 finder __editable___deep_gemm"), found
    assert found["location"] == str(project / "python" / "deep_gemm")


def test_extract_reads_a_vendored_wheel(tmp_path: Path) -> None:
    wheel = tmp_path / "vllm-0.35.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("vllm/third_party/deep_gemm/__init__.py", INIT_PY)
        zf.writestr("vllm/third_party/deep_gemm/_C.py", C_PY)
        zf.writestr("vllm/third_party/deep_gemm/include/deep_gemm/a.cuh", "// a")
        zf.writestr("vllm-0.35.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: vllm\nVersion: 0.35.0\n")
        zf.writestr("vllm-0.35.0.dist-info/RECORD", "vllm/third_party/deep_gemm/__init__.py,,\n")
    doc = extract(wheel, cache=False)
    assert doc["package_path"] == "vllm/third_party/deep_gemm" and doc["deep_gemm_version"] == "2.8.1"
    assert doc["release"] == {"name": "vllm", "version": "0.35.0"}
    fp = doc["fingerprint"]
    assert fp["headers"]["count"] == 1 and fp["python"]["signatures"]["fp8_gemm_nt"][-1] == "compiled_dims"
    from dgcompat_conformance.intake.claims import release_of

    rel = release_of(doc)
    assert (rel.dist, str(rel.version), rel.source, rel.owner) == ("deep-gemm", "2.8.1", "vendored", "vllm 0.35.0")
    assert rel.surface == fp["python"]["id"]
