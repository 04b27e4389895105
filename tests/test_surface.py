"""Tests of the static surface extractor (``dgcompat_conformance.surface``).

The fast tests run on synthetic inputs: byte blobs with the strings the native reader looks for,
and a tiny fake wheel built in ``tmp_path``. The ``wheels`` class extracts the 21 published
sgl-deep-gemm wheels (from the cache, downloading them on first use).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import pytest

from dgcompat_conformance.surface import (
    CHANGE_KINDS,
    ENGINE_SYMBOLS,
    SCHEMA_VERSION,
    Change,
    SurfaceError,
    changes_to_json,
    cli,
    diff,
    extract,
    format_signature,
    is_engine_symbol,
    render_changes,
    resolve_wheel,
    to_json,
)
from dgcompat_conformance.surface import native as native_mod
from dgcompat_conformance.surface.demangle import cxxfilt, demangle_params
from dgcompat_conformance.surface.native import (
    NativeOp,
    NativeParam,
    binding_era,
    parse_schema,
    read_native_ops,
    torch_build_fingerprint,
)
from dgcompat_conformance.surface.python import read_python_surface
from testsupport.wheels import published_wheel

# ---------------------------------------------------------------------------------------------
# Synthetic native libraries
# ---------------------------------------------------------------------------------------------

STRING = "NSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"


def _blob(*strings: str) -> bytes:
    """A fake shared object: NUL-separated strings, as in a string table."""
    return b"FAKE\x00" + b"\x00".join(s.encode() for s in strings) + b"\x00"


TVM_BLOB = _blob(
    "__tvm_ffi_set_pdl",
    "_ZZ17__tvm_ffi_set_pdlE4name",  # a local static inside the export, not an export
    "__tvm_ffi_init",
    "__tvm_ffi_gemm",
    "__tvm_ffi_no_prototype",
    "__tvm_ffi__library_ctx",  # tvm-ffi bookkeeping
    "_Z10dg_set_pdlb",
    "_Z10dg_set_pdlb.cold",
    f"_Z7dg_init{STRING}S4_",
    "_Z7dg_gemmN3tvm3ffi10TensorViewES1_NS0_8OptionalIS1_vEENS2_INS0_5TupleIJlllEEEvEENS0_5ArrayIlvEEdl",
    '/opt/python/lib/python3.12/site-packages/torch/include/torch/csrc/autograd/variable.h":341, please report',
    '/opt/python/lib/python3.12/site-packages/torch/include/c10/core/TensorImpl.h":1335, please report',
)

TORCH_BLOB = _blob(
    "get_num_sms() -> int",
    "set_pdl(bool enable) -> ()",
    'fp8_gemm_nt(Any a, Any b, Tensor(a!) d, Tensor? c=None, int[]? recipe=None, str compiled_dims="nk", '
    "int[3] shape=[1, 1, 128], SymInt n=0, *, bool flag=False) -> ()",
    "bf16_mega_gate_config(int num_tokens) -> Dict(str, int)",
    "masked(Tensor a, Tensor(b!)? signal=None) -> (int?, int?)",
    "not a schema at all -> x",
    "broken(Tensor) -> ()",
    '/x/torch/include/c10/core/TensorImpl.h":1338, please report',
    '/x/torch/include/torch/csrc/autograd/variable.h":345, please report',
)


class TestNativeReader:
    def test_tvm_ffi_era_and_types(self) -> None:
        assert binding_era(TVM_BLOB) == "tvm-ffi"
        ops = read_native_ops(TVM_BLOB)
        assert sorted(ops) == ["gemm", "init", "no_prototype", "set_pdl"]
        assert ops["set_pdl"] == NativeOp("set_pdl", (NativeParam(None, "bool", None),), None, "tvm-ffi")
        assert [p.type for p in ops["init"].params] == ["str", "str"]
        assert [p.type for p in ops["gemm"].params] == ["Tensor", "Tensor", "Tensor?", "(int, int, int)?", "int[]", "float", "int"]
        assert all(p.name is None and p.default is None for p in ops["gemm"].params)
        # No dg_ prototype: the arity is unknown, not zero.
        assert ops["no_prototype"].params == (NativeParam(None, "...", None),)

    def test_torch_library_era_and_schemas(self) -> None:
        assert binding_era(TORCH_BLOB) == "torch-library"
        ops = read_native_ops(TORCH_BLOB)
        assert sorted(ops) == ["bf16_mega_gate_config", "fp8_gemm_nt", "get_num_sms", "masked", "set_pdl"]
        gemm = ops["fp8_gemm_nt"]
        assert gemm.binding == "torch-library"
        assert gemm.returns == "()"
        assert [(p.name, p.type, p.default) for p in gemm.params] == [
            ("a", "Any", None),
            ("b", "Any", None),
            ("d", "Tensor", None),
            ("c", "Tensor?", "None"),
            ("recipe", "int[]?", "None"),
            ("compiled_dims", "str", '"nk"'),
            ("shape", "int[]", "[1, 1, 128]"),
            ("n", "int", "0"),
            ("flag", "bool", "False"),
        ]
        assert ops["masked"].returns == "(int?, int?)"
        assert [p.type for p in ops["masked"].params] == ["Tensor", "Tensor?"]
        assert ops["bf16_mega_gate_config"].returns == "Dict(str, int)"
        assert ops["get_num_sms"].params == ()

    def test_parse_schema_rejects_non_schemas(self) -> None:
        assert parse_schema("foo(bar) -> baz") is None
        assert parse_schema("hello world") is None
        assert parse_schema("deep_gemm::op(int x) -> ()") == NativeOp("op", (NativeParam("x", "int", None),), "()", "torch-library")

    def test_unknown_era(self) -> None:
        assert binding_era(b"\x00nothing here\x00") == "unknown"
        assert read_native_ops(b"") == {}

    def test_torch_fingerprint(self) -> None:
        assert torch_build_fingerprint(TVM_BLOB) == "2.11"
        assert torch_build_fingerprint(TORCH_BLOB) == "2.14"
        only_tensor_impl = _blob('/t/include/c10/core/TensorImpl.h":1799, please report')
        assert torch_build_fingerprint(only_tensor_impl) == "2.13|2.14"
        assert torch_build_fingerprint(_blob('/t/include/torch/csrc/autograd/variable.h":305, please')) == "2.9"
        assert torch_build_fingerprint(b"\x00no torch\x00") is None
        # Contradicting evidence gives no answer rather than a wrong one.
        assert torch_build_fingerprint(_blob('/t/include/c10/core/TensorImpl.h":1335, x', '/t/include/torch/csrc/autograd/variable.h":345, x')) is None

    def test_demangler(self) -> None:
        assert demangle_params("_Z10dg_get_pdlv") == ("dg_get_pdl", [])
        name, params = demangle_params(f"_Z7dg_init{STRING}S4_") or ("", [])
        assert name == "dg_init"
        assert params == ["std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char>>"] * 2
        assert demangle_params("_Z6dg_barPFvvE") is None  # function pointers are not supported

    def test_unparsed_symbol_falls_back_to_cxxfilt_or_unknown(self, monkeypatch: pytest.MonkeyPatch) -> None:
        blob = _blob("__tvm_ffi_bar", "_Z6dg_barPFvvE")
        op = read_native_ops(blob)["bar"]
        if shutil.which("c++filt"):
            assert op.params == (NativeParam(None, "?", None),)  # "void (*)()" has no kind
        monkeypatch.setattr("dgcompat_conformance.surface.demangle.shutil.which", lambda _name: None)
        assert read_native_ops(blob)["bar"].params == (NativeParam(None, "...", None),)


# ---------------------------------------------------------------------------------------------
# Synthetic packages
# ---------------------------------------------------------------------------------------------

INIT_V1 = """
from __future__ import annotations
import os
from typing import TYPE_CHECKING
import torch

if TYPE_CHECKING:
    def only_for_typing(): ...

try:
    from .envs import persistent_envs
except ImportError:
    persistent_envs = None

class _TorchOps:
    pass

def _load_module():
    return _TorchOps()

_C = _load_module()

set_num_sms = _C.set_num_sms
get_num_sms = _C.get_num_sms

def _parse(x):
    return x, None

try:
    def fp8_gemm_nt(a, b, d, c=None, recipe=None, compiled_dims='nk'):
        (a_data, a_sf), (b_data, b_sf) = _parse(a), _parse(b)
        _C.fp8_gemm_nt(a_data, a_sf, b_data, b_sf, d, c, recipe, compiled_dims)

    gemm_alias = fp8_gemm_nt

    def fp8_mqa_logits(q, kv, clean_logits=False, max_seqlen_k=0):
        return _C.fp8_mqa_logits(q, kv, clean_logits, max_seqlen_k)

    probe = _C.not_in_this_build

    def after_probe(x):
        pass
except AttributeError:
    pass

if os.environ.get("X"):
    def maybe(x, *, flag=True):
        pass
else:
    def maybe(x, *, flag=False):
        pass

old_name = None
temp = 1
del temp

get_mn_major_tma_aligned_tensor = None
from . import utils
from .utils import *

_C.init(os.path.dirname(__file__), "")
"""

UTILS_INIT = """
from . import layout
from .layout import *
"""

LAYOUT = """
import torch

__all__ = ["get_mn_major_tma_aligned_tensor", "pack_scales"]


def _get_C():
    from .. import _C
    return _C


def get_mn_major_tma_aligned_tensor(sf: torch.Tensor) -> torch.Tensor:
    return _get_C().get_mn_major_tma_aligned_tensor(sf)


def pack_scales(x, /, y, *args, z, **kw):
    pass


hidden = 3
"""

SO_V1 = _blob(
    "init(str library_root_path, str cuda_home) -> ()",
    "get_num_sms() -> int",
    "set_num_sms(int new_num_sms) -> ()",
    "fp8_gemm_nt(Tensor a, Tensor a_sf, Tensor b, Tensor b_sf, Tensor(a!) d, Tensor? c, int[]? recipe, str compiled_dims) -> ()",
    "fp8_mqa_logits(Tensor q, Tensor kv, bool clean_logits, int max_seqlen_k) -> Tensor",
    "get_mn_major_tma_aligned_tensor(Tensor sf) -> Tensor",
    '/opt/torch/include/torch/csrc/autograd/variable.h":345, please report a bug',
)

# Version 2: a parameter inserted, a function removed, parameters renamed, another torch.
INIT_V2 = (
    INIT_V1.replace(
        "def fp8_gemm_nt(a, b, d, c=None, recipe=None, compiled_dims='nk'):",
        "def fp8_gemm_nt(a, b, d, c=None, recipe=None, recipe_a=None, compiled_dims='nk'):",
    )
    .replace(
        "    def fp8_mqa_logits(q, kv, clean_logits=False, max_seqlen_k=0):\n"
        "        return _C.fp8_mqa_logits(q, kv, clean_logits, max_seqlen_k)\n",
        "",
    )
)
LAYOUT_V2 = LAYOUT.replace("(sf: torch.Tensor)", "(x: torch.Tensor)").replace("(sf)", "(x)")
SO_V2 = (
    SO_V1.replace(b"set_num_sms(int new_num_sms)", b"set_num_sms(int num_sms)")
    .replace(b"fp8_mqa_logits(Tensor q, Tensor kv, bool clean_logits, int max_seqlen_k) -> Tensor", b"unrelated() -> ()")
    .replace(b'variable.h":345', b'variable.h":341')
)


def _metadata(version: str, requires: list[str]) -> str:
    lines = ["Metadata-Version: 2.1", "Name: sgl-deep-gemm", f"Version: {version}"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    return "\n".join(lines) + "\n\nA description.\n"


def _package_files(version: str, init: str, layout: str, so: bytes, requires: list[str]) -> dict[str, str | bytes]:
    dist_info = f"sgl_deep_gemm-{version}.dist-info"
    return {
        "deep_gemm/__init__.py": textwrap.dedent(init),
        "deep_gemm/utils/__init__.py": UTILS_INIT,
        "deep_gemm/utils/layout.py": layout,
        "deep_gemm/_C.so": so,
        "deep_gemm/include/deep_gemm/common.cuh": "// a header\n",
        f"{dist_info}/METADATA": _metadata(version, requires),
        f"{dist_info}/top_level.txt": "deep_gemm\n",
        f"{dist_info}/RECORD": "deep_gemm/__init__.py,,\n",
    }


def _make_wheel(folder: Path, version: str, files: dict[str, str | bytes]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"sgl_deep_gemm-{version}-py3-none-manylinux2014_x86_64.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


def _unpack(folder: Path, files: dict[str, str | bytes]) -> Path:
    for name, data in files.items():
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            target.write_bytes(data)
        else:
            target.write_text(data)
    return folder


@pytest.fixture
def fake_wheels(tmp_path: Path) -> tuple[Path, Path]:
    v1 = _make_wheel(tmp_path / "wheels", "9.1.0", _package_files("9.1.0", INIT_V1, LAYOUT, SO_V1, ["apache-tvm-ffi==0.1.9"]))
    v2 = _make_wheel(tmp_path / "wheels", "9.2.0", _package_files("9.2.0", INIT_V2, LAYOUT_V2, SO_V2, []))
    return v1, v2


class TestExtractSynthetic:
    def test_document(self, fake_wheels: tuple[Path, Path]) -> None:
        doc = extract(fake_wheels[0], cache=False)
        assert doc["schema"] == SCHEMA_VERSION
        assert doc["release"] == {"name": "sgl-deep-gemm", "version": "9.1.0"}
        assert doc["source"]["kind"] == "wheel" and len(doc["source"]["sha256"]) == 64
        assert doc["binding"] == "torch-library"
        assert doc["requires_dist"] == ["apache-tvm-ffi==0.1.9"]
        assert doc["torch_build"] == "2.14"
        assert doc["native_library"] == "deep_gemm/_C.so"
        assert doc["import_errors"] == []
        assert doc["native"]["set_num_sms"]["params"] == [{"name": "new_num_sms", "type": "int", "default": None}]

    def test_python_bindings(self, fake_wheels: tuple[Path, Path]) -> None:
        py = extract(fake_wheels[0], cache=False)["python"]
        assert py["deep_gemm.set_num_sms"] == {
            "kind": "native",
            "op": "set_num_sms",
            "via": None,
            "params": [{"name": "new_num_sms", "kind": "positional", "default": None, "annotation": "int"}],
            "returns": "()",
        }
        gemm = py["deep_gemm.fp8_gemm_nt"]
        assert gemm["kind"] == "function" and gemm["guard"] == "try/except AttributeError"
        assert [(p["name"], p["default"]) for p in gemm["params"]] == [
            ("a", None), ("b", None), ("d", None), ("c", "None"), ("recipe", "None"), ("compiled_dims", "'nk'"),
        ]
        assert gemm["native_calls"] == [
            {"op": "fp8_gemm_nt", "args": ["a_data", "a_sf", "b_data", "b_sf", "d", "c", "recipe", "compiled_dims"]}
        ]
        assert gemm["returns"] == "None"
        assert py["deep_gemm.gemm_alias"]["kind"] == "alias"
        assert py["deep_gemm.gemm_alias"]["alias_of"] == "deep_gemm.fp8_gemm_nt"
        assert py["deep_gemm.fp8_mqa_logits"]["returns"] == "_C.fp8_mqa_logits"
        # Reading a missing op raised AttributeError: the rest of the try body never ran.
        assert "deep_gemm.probe" not in py and "deep_gemm.after_probe" not in py
        # The except ImportError clause ran; TYPE_CHECKING blocks do not.
        assert py["deep_gemm.persistent_envs"] == {"kind": "none"}
        assert "deep_gemm.only_for_typing" not in py
        # An undecidable if: both branches, the if branch wins, the guard says so.
        maybe = py["deep_gemm.maybe"]
        assert maybe["guard"] == "if os.environ.get('X')"
        assert maybe["params"][1] == {"name": "flag", "kind": "keyword_only", "default": "True", "annotation": None}
        assert py["deep_gemm.old_name"] == {"kind": "none"}
        assert "deep_gemm.temp" not in py
        # Late rebinding by the star import, which honours __all__.
        mn = py["deep_gemm.get_mn_major_tma_aligned_tensor"]
        assert mn["qualname"] == "deep_gemm.utils.layout.get_mn_major_tma_aligned_tensor"
        assert mn["returns"] == "_C.get_mn_major_tma_aligned_tensor"
        assert mn["params"] == [{"name": "sf", "kind": "positional", "default": None, "annotation": "torch.Tensor"}]
        assert mn["returns_annotation"] == "torch.Tensor"
        assert [p["kind"] for p in py["deep_gemm.pack_scales"]["params"]] == [
            "positional_only", "positional", "var_positional", "keyword_only", "var_keyword",
        ]
        assert "deep_gemm.hidden" not in py
        assert py["deep_gemm.utils.layout.hidden"] == {"kind": "value", "value": "3", "const": True}
        # Submodules; third-party names are not part of the surface.
        assert py["deep_gemm.utils"] == {"kind": "module", "module": "deep_gemm.utils"}
        assert py["deep_gemm.layout"] == {"kind": "module", "module": "deep_gemm.utils.layout"}
        assert "deep_gemm.torch" not in py and "deep_gemm.os" not in py and "deep_gemm.annotations" not in py

    def test_folder_equals_wheel(self, tmp_path: Path) -> None:
        files = _package_files("9.1.0", INIT_V1, LAYOUT, SO_V1, ["x"])
        wheel = extract(_make_wheel(tmp_path / "w", "9.1.0", files), cache=False)
        folder = extract(_unpack(tmp_path / "site", files))
        package = extract(tmp_path / "site" / "deep_gemm")
        for doc in (folder, package):
            assert doc["source"]["kind"] == "folder"
            assert {k: v for k, v in doc.items() if k != "source"} == {k: v for k, v in wheel.items() if k != "source"}

    def test_cache_next_to_wheel(self, fake_wheels: tuple[Path, Path]) -> None:
        wheel = fake_wheels[0]
        first = extract(wheel)
        cached = list(wheel.parent.glob(f"*.surface-v{SCHEMA_VERSION}.json"))
        assert len(cached) == 1 and cached[0].name.startswith(first["source"]["sha256"])
        # The cached document is what later calls return.
        doc = json.loads(cached[0].read_text())
        doc["python"]["deep_gemm.marker"] = {"kind": "none"}
        cached[0].write_text(json.dumps(doc))
        assert "deep_gemm.marker" in extract(wheel)["python"]
        assert "deep_gemm.marker" not in extract(wheel, cache=False)["python"]

    def test_deterministic_json(self, fake_wheels: tuple[Path, Path]) -> None:
        a = to_json(extract(fake_wheels[0], cache=False))
        b = to_json(extract(fake_wheels[0], cache=False))
        assert a == b
        assert list(json.loads(a)["python"]) == sorted(json.loads(a)["python"])

    def test_version_from_cache(self, fake_wheels: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("DGCOMPAT_CACHE", str(fake_wheels[0].parent.parent))
        assert extract("9.1.0", download=False)["release"]["version"] == "9.1.0"
        assert resolve_wheel("9.2.0", download=False) == fake_wheels[1]
        with pytest.raises(SurfaceError):
            extract("9.9.9", download=False)
        with pytest.raises(SurfaceError):
            extract("not-a-version-or-path")

    def test_not_a_wheel(self, tmp_path: Path) -> None:
        bogus = tmp_path / "x.whl"
        bogus.write_bytes(b"not a zip")
        with pytest.raises(SurfaceError):
            extract(bogus)
        with pytest.raises(SurfaceError):
            extract(tmp_path)  # a folder without deep_gemm/


class TestPythonEvaluator:
    def test_unguarded_missing_op_aborts_the_import(self) -> None:
        surface = read_python_surface(
            {"deep_gemm/__init__.py": "_C = load()\nx = _C.gone\ny = 1\n"}, native_ops={"init"}
        )
        assert surface.symbols == {}
        assert surface.import_errors == ("deep_gemm: AttributeError: the native library has no op 'gone'",)

    def test_without_native_ops_every_read_succeeds(self) -> None:
        surface = read_python_surface({"deep_gemm/__init__.py": "_C = load()\nx = _C.gone\n"})
        assert surface.symbols["deep_gemm.x"] == {"kind": "native", "op": "gone", "via": None}
        assert surface.native_reads == ("gone",)

    def test_failed_submodule_import_is_handled(self) -> None:
        sources = {
            "deep_gemm/__init__.py": "try:\n    from . import legacy\nexcept Exception as e:\n    print(e)\nfrom .sub import f\n",
            "deep_gemm/legacy/__init__.py": "from .._C import thing\n",
            "deep_gemm/sub.py": "def f(a, b=2):\n    return a\n",
        }
        surface = read_python_surface(sources, extension_modules={"deep_gemm._C": False})
        assert "deep_gemm.legacy" not in surface.symbols
        assert "deep_gemm.e" not in surface.symbols
        assert surface.symbols["deep_gemm.sub"] == {"kind": "module", "module": "deep_gemm.sub"}
        assert surface.symbols["deep_gemm.f"]["returns"] == "a"
        assert any(err.startswith("deep_gemm.legacy: ImportError") for err in surface.import_errors)

    def test_missing_name_in_from_import(self) -> None:
        sources = {
            "deep_gemm/__init__.py": "try:\n    from .sub import nope\nexcept ImportError:\n    nope = None\n",
            "deep_gemm/sub.py": "x = 1\n",
        }
        assert read_python_surface(sources).symbols["deep_gemm.nope"] == {"kind": "none"}

    def test_bundled_op_factory_and_torch_ops(self) -> None:
        sources = {
            "deep_gemm/__init__.py": textwrap.dedent(
                """
                import torch
                from . import deep_gemm_cpp

                def _wrap_op(name: str):
                    func = getattr(torch.ops.deep_gemm, name)
                    def _fn(*args, **kwargs):
                        return func(*args, **kwargs)
                    return _fn

                fp8_gemm_nt = _wrap_op('fp8_gemm_nt')
                fp8_m_grouped_gemm_nt_masked = m_grouped = _wrap_op('m_grouped_fp8_gemm_nt_masked')
                get_tma_aligned_size = torch.ops.deep_gemm.get_tma_aligned_size
                """
            ),
        }
        surface = read_python_surface(
            sources,
            native_ops={"fp8_gemm_nt", "m_grouped_fp8_gemm_nt_masked", "get_tma_aligned_size"},
            extension_modules={"deep_gemm.deep_gemm_cpp": True},
        )
        sym = surface.symbols
        assert sym["deep_gemm.fp8_gemm_nt"] == {"kind": "native", "op": "fp8_gemm_nt", "via": "_wrap_op"}
        assert sym["deep_gemm.fp8_m_grouped_gemm_nt_masked"]["op"] == "m_grouped_fp8_gemm_nt_masked"
        assert sym["deep_gemm.get_tma_aligned_size"] == {"kind": "native", "op": "get_tma_aligned_size", "via": None}
        assert sym["deep_gemm.deep_gemm_cpp"] == {"kind": "module", "module": "deep_gemm.deep_gemm_cpp"}

    def test_star_import_binds_parent_attributes_and_classes(self) -> None:
        sources = {
            "deep_gemm/__init__.py": "from .utils import *\n",
            "deep_gemm/utils/__init__.py": "from .dist import init_dist\n",
            "deep_gemm/utils/dist.py": "class Group(object):\n    def __init__(self, rank: int = 0):\n        pass\n    def size(self):\n        return 1\ndef init_dist():\n    pass\n",
        }
        sym = read_python_surface(sources).symbols
        # Importing utils.dist bound ``dist`` in utils, and the star import re-exports it.
        assert sym["deep_gemm.dist"] == {"kind": "module", "module": "deep_gemm.utils.dist"}
        assert sym["deep_gemm.init_dist"]["qualname"] == "deep_gemm.utils.dist.init_dist"

    def test_syntax_error_is_reported(self) -> None:
        surface = read_python_surface({"deep_gemm/__init__.py": "def broken(:\n"})
        assert surface.symbols == {} and surface.import_errors[0].startswith("deep_gemm: SyntaxError")


# ---------------------------------------------------------------------------------------------
# Diff
# ---------------------------------------------------------------------------------------------


def _fn(name: str, *params: tuple[str, str | None], kind: str = "function") -> dict[str, Any]:
    return {
        "kind": kind,
        "qualname": f"deep_gemm.{name}",
        "params": [{"name": n, "kind": "positional", "default": d, "annotation": None} for n, d in params],
        "returns": "None",
        "returns_annotation": None,
        "native_calls": [],
        "decorators": [],
        "guard": None,
    }


def _surface(python: dict[str, Any], native: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"binding": "torch-library", "torch_build": "2.14", "requires_dist": [], "python": python, "native": native or {}, **extra}


def _keys(changes: list[Change]) -> set[tuple[str, str, str | None]]:
    return {(c.kind, c.symbol, c.param) for c in changes}


class TestDiff:
    def test_insertion_is_not_a_rename(self) -> None:
        a = _surface({"deep_gemm.fp8_gemm_nt": _fn("fp8_gemm_nt", ("a", None), ("x", "None"), ("y", "None"))})
        b = _surface({"deep_gemm.fp8_gemm_nt": _fn("fp8_gemm_nt", ("a", None), ("new", "True"), ("x", "None"), ("y", "None"))})
        changes = diff(a, b)
        assert _keys(changes) == {
            ("added-param", "deep_gemm.fp8_gemm_nt", "new"),
            ("moved-param", "deep_gemm.fp8_gemm_nt", "x"),
            ("moved-param", "deep_gemm.fp8_gemm_nt", "y"),
        }
        moved = next(c for c in changes if c.kind == "moved-param" and c.param == "x")
        assert (moved.before, moved.after) == (1, 2)

    def test_rename_and_defaults(self) -> None:
        a = _surface({"deep_gemm.set_num_sms": _fn("set_num_sms", ("sf", None), ("k", "0"), ("m", None), ("n", "1"))})
        b = _surface({"deep_gemm.set_num_sms": _fn("set_num_sms", ("x", None), ("k", None), ("m", "2"), ("n", "3"))})
        keys = _keys(diff(a, b))
        assert keys == {
            ("renamed-param", "deep_gemm.set_num_sms", "x"),
            ("became-required", "deep_gemm.set_num_sms", "k"),
            ("became-optional", "deep_gemm.set_num_sms", "m"),
            ("default-changed", "deep_gemm.set_num_sms", "n"),
        }

    def test_added_removed_kind_and_scope(self) -> None:
        a = _surface({
            "deep_gemm.fp8_mqa_logits": _fn("fp8_mqa_logits"),
            "deep_gemm.set_pdl": {"kind": "none"},
            "deep_gemm.not_engine": _fn("not_engine"),
        })
        b = _surface({
            "deep_gemm.set_pdl": {"kind": "native", "op": "set_pdl", "via": None, "params": [], "returns": "()"},
            "deep_gemm.utils.layout.pack_scales": _fn("pack_scales"),
        })
        keys = _keys(diff(a, b))
        assert keys == {
            ("removed-function", "deep_gemm.fp8_mqa_logits", None),
            ("kind-changed", "deep_gemm.set_pdl", None),
            ("added-function", "deep_gemm.utils.layout.pack_scales", None),
        }
        assert ("removed-function", "deep_gemm.not_engine", None) in _keys(diff(a, b, all_symbols=True))
        assert _keys(diff(a, b, symbols=["deep_gemm.not_engine"])) == {("removed-function", "deep_gemm.not_engine", None)}

    def test_native_ops_of_engine_symbols(self) -> None:
        call = {"op": "gemm", "args": ["a"]}
        f1, f2 = _fn("fp8_gemm_nt", ("a", None)), _fn("fp8_gemm_nt", ("a", None))
        f1["native_calls"], f2["native_calls"] = [call], [{"op": "gemm", "args": ["a", "0"]}]
        native_a = {"gemm": {"params": [{"name": "a", "type": "Tensor", "default": None}], "returns": "()"}, "other": {"params": [], "returns": "()"}}
        native_b = {"gemm": {"params": [{"name": "a", "type": "Tensor?", "default": None}, {"name": "k", "type": "int", "default": None}], "returns": "Tensor"}}
        a = _surface({"deep_gemm.fp8_gemm_nt": f1}, native_a, binding="tvm-ffi", torch_build="2.11", requires_dist=["x==1"])
        b = _surface({"deep_gemm.fp8_gemm_nt": f2}, native_b)
        keys = _keys(diff(a, b))
        assert keys == {
            ("binding-changed", "deep_gemm", None),
            ("torch-changed", "deep_gemm", None),
            ("requires-changed", "deep_gemm", None),
            ("native-call-changed", "deep_gemm.fp8_gemm_nt", None),
            ("native-arity-changed", "_C.gemm", None),
            ("native-type-changed", "_C.gemm", "a"),
            ("added-param", "_C.gemm", "k"),
            ("return-changed", "_C.gemm", None),
        }
        assert ("removed-native", "_C.other", None) in _keys(diff(a, b, all_symbols=True))

    def test_positional_native_types_without_names(self) -> None:
        def op(*types: str) -> dict[str, Any]:
            return {"params": [{"name": None, "type": t, "default": None} for t in types], "returns": None}

        a = _surface({"deep_gemm.set_num_sms": {"kind": "native", "op": "s", "via": None, "params": None, "returns": None}}, {"s": op("int", "bool")})
        b = _surface({"deep_gemm.set_num_sms": {"kind": "native", "op": "s", "via": None, "params": None, "returns": None}}, {"s": op("int", "int", "str")})
        changes = diff(a, b)
        assert _keys(changes) == {("native-arity-changed", "_C.s", None), ("native-type-changed", "_C.s", "#1")}

    def test_rendering(self) -> None:
        a = _surface({"deep_gemm.fp8_mqa_logits": _fn("fp8_mqa_logits", ("q", None))}, release={"name": "sgl-deep-gemm", "version": "1"})
        b = _surface({}, release={"name": "sgl-deep-gemm", "version": "2"})
        changes = diff(a, b)
        text = render_changes(changes, a, b)
        assert text.splitlines()[0] == "sgl-deep-gemm 1 -> sgl-deep-gemm 2"
        assert "removed-function" in text and "def fp8_mqa_logits(q)" in text
        doc = json.loads(changes_to_json(changes, a, b))
        assert doc["changes"][0] == {
            "kind": "removed-function", "symbol": "deep_gemm.fp8_mqa_logits", "param": None,
            "detail": "removed (was def fp8_mqa_logits(q))", "before": "def fp8_mqa_logits(q)", "after": None,
        }
        assert render_changes([]) == "no changes\n"
        assert set(CHANGE_KINDS) >= {c.kind for c in changes}

    def test_format_signature(self) -> None:
        rec = _fn("f", ("a", None), ("b", "1"))
        rec["params"][0]["annotation"] = "int"
        assert format_signature(rec) == "def f(a: int, b=1)"
        assert format_signature({"kind": "native", "op": "o", "via": "w", "params": [{"name": None, "kind": "positional_only", "default": None, "annotation": "int"}], "returns": None}) == "native via w: o(int) -> ?"
        assert format_signature(None) == "-"

    def test_engine_symbols(self) -> None:
        assert len(ENGINE_SYMBOLS) == 24
        assert is_engine_symbol("deep_gemm.fp8_paged_mqa_logits")
        assert is_engine_symbol("deep_gemm.utils.layout.anything")
        assert not is_engine_symbol("deep_gemm.fp8_einsum")


class TestCli:
    def test_extract_prints_json(self, fake_wheels: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
        assert cli.main([str(fake_wheels[0]), "--no-cache"]) == 0
        assert json.loads(capsys.readouterr().out)["release"]["version"] == "9.1.0"

    def test_extract_out_file(self, fake_wheels: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        out = tmp_path / "s.json"
        assert cli.main(["surface", str(fake_wheels[0]), "--out", str(out)]) == 0
        assert capsys.readouterr().out == ""
        assert json.loads(out.read_text())["binding"] == "torch-library"
        # A saved surface is accepted as a diff input.
        assert cli.main(["--diff", str(out), str(fake_wheels[1])]) == 0
        assert "deep_gemm.fp8_mqa_logits" in capsys.readouterr().out

    def test_diff_text_and_json(self, fake_wheels: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
        v1, v2 = (str(p) for p in fake_wheels)
        assert cli.main(["--diff", v1, v2]) == 0
        text = capsys.readouterr().out
        assert text.startswith("sgl-deep-gemm 9.1.0 -> sgl-deep-gemm 9.2.0\n")
        assert cli.main(["--diff", v1, v2, "--json"]) == 0
        keys = {(c["kind"], c["symbol"], c["param"]) for c in json.loads(capsys.readouterr().out)["changes"]}
        assert {
            ("torch-changed", "deep_gemm", None),
            ("requires-changed", "deep_gemm", None),
            ("removed-function", "deep_gemm.fp8_mqa_logits", None),
            ("removed-native", "_C.fp8_mqa_logits", None),
            ("added-param", "deep_gemm.fp8_gemm_nt", "recipe_a"),
            ("moved-param", "deep_gemm.fp8_gemm_nt", "compiled_dims"),
            ("renamed-param", "deep_gemm.set_num_sms", "num_sms"),
            ("renamed-param", "_C.set_num_sms", "num_sms"),
            ("renamed-param", "deep_gemm.get_mn_major_tma_aligned_tensor", "x"),
            ("renamed-param", "deep_gemm.utils.layout.get_mn_major_tma_aligned_tensor", "x"),
        } <= keys

    def test_errors(self, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
        assert cli.main([str(tmp_path / "missing.whl")]) == 2
        assert "error" in capsys.readouterr().err
        assert cli.main([]) == 2  # a usage error, returned like the others (no SystemExit from main)
        assert "SOURCE or --diff A B is required" in capsys.readouterr().err


def test_no_torch_import() -> None:
    code = (
        "import sys, dgcompat; before = 'torch' in sys.modules\n"
        "import dgcompat_conformance.surface, dgcompat_conformance.surface.cli, dgcompat_conformance.surface.native, dgcompat_conformance.surface.python\n"
        "print(before, 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parent.parent, check=True)
    before, after = out.stdout.split()
    assert after == before


# ---------------------------------------------------------------------------------------------
# The published wheels
# ---------------------------------------------------------------------------------------------

VERSIONS = (
    "0.0.1", "0.1.0", "0.1.1", "0.1.2", "0.1.3", "0.1.4", "0.1.4.post1", "0.1.5", "0.1.5.post1",
    "0.1.5.post2", "0.1.5.post3", "0.1.6", "0.1.7", "0.2.0", "0.2.1", "0.2.1.post1", "0.2.2",
    "0.2.3", "0.2.3.post1", "0.2.3.post2", "0.2.5",
)
TORCH_211 = VERSIONS[: VERSIONS.index("0.1.5.post2")]
TORCH_213 = VERSIONS[VERSIONS.index("0.1.5.post2") : VERSIONS.index("0.2.1.post1")]
TVM_FFI = VERSIONS[: VERSIONS.index("0.2.3")]

#: The native op schemas read from every published wheel's binary by a separate analysis (docs/sources/).
REFERENCE = Path(__file__).resolve().parent.parent / "docs" / "sources" / "native-ops.json"


@pytest.fixture(scope="module")
def wheels() -> dict[str, Path]:
    return {version: published_wheel(version) for version in VERSIONS}


@pytest.fixture(scope="module")
def surfaces(wheels: dict[str, Path]) -> dict[str, dict[str, Any]]:
    return {version: extract(path) for version, path in wheels.items()}


@pytest.mark.wheels
class TestPublishedWheels:

    def test_release_and_binding(self, surfaces: dict[str, dict[str, Any]]) -> None:
        for version, doc in surfaces.items():
            assert doc["release"] == {"name": "sgl-deep-gemm", "version": version}
            tvm = version in TVM_FFI
            assert doc["binding"] == ("tvm-ffi" if tvm else "torch-library"), version
            assert any(r.startswith("apache-tvm-ffi") for r in doc["requires_dist"]) == tvm, version
            # Only 0.0.1's legacy package fails to import (it imports from the native library).
            assert bool(doc["import_errors"]) == (version == "0.0.1"), (version, doc["import_errors"])

    def test_torch_fingerprint(self, surfaces: dict[str, dict[str, Any]]) -> None:
        got = {version: doc["torch_build"] for version, doc in surfaces.items()}
        expected = {v: "2.11" if v in TORCH_211 else "2.13" if v in TORCH_213 else "2.14" for v in VERSIONS}
        assert got == expected

    def test_diff_0_2_3_post2_to_0_2_5(self, surfaces: dict[str, dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> None:
        assert cli.main(["--diff", "0.2.3.post2", "0.2.5", "--json"]) == 0
        changes = json.loads(capsys.readouterr().out)["changes"]
        keys = {(c["kind"], c["symbol"], c["param"]) for c in changes}
        expected = {
            ("removed-function", "deep_gemm.fp8_mqa_logits", None),
            ("removed-function", "deep_gemm.fp8_paged_mqa_logits", None),
            ("removed-native", "_C.fp8_mqa_logits", None),
            ("removed-native", "_C.fp8_paged_mqa_logits", None),
            ("became-required", "deep_gemm.fp8_fp4_mqa_logits", "max_seqlen_k"),
            ("moved-param", "deep_gemm.fp8_fp4_mqa_logits", "max_seqlen_k"),
            ("native-arity-changed", "_C.fp8_fp4_gemm_nt", None),
        }
        for fn in ("fp8_fp4_mqa_logits", "fp8_fp4_paged_mqa_logits"):
            expected |= {("removed-param", f"deep_gemm.{fn}", p) for p in ("clean_logits", "logits_dtype")}
        for fn in ("fp8_gemm_nt", "m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nt_masked",
                   "fp8_m_grouped_gemm_nt_masked", "bf16_gemm_nt", "m_grouped_bf16_gemm_nt_masked"):
            expected.add(("added-param", f"deep_gemm.{fn}", "epilogue"))
        assert expected <= keys, expected - keys
        # Nothing the engine uses changed binding or torch between these two.
        assert not any(k[0] in ("binding-changed", "torch-changed") for k in keys)
        assert cli.main(["--diff", "0.2.3.post2", "0.2.5"]) == 0
        text = capsys.readouterr().out
        assert "removed (was def fp8_mqa_logits(q, kv, weights, ks, ke, clean_logits=False, max_seqlen_k=0))" in text

    def test_diff_0_1_3_to_0_1_4(self, surfaces: dict[str, dict[str, Any]]) -> None:
        changes = diff(surfaces["0.1.3"], surfaces["0.1.4"])
        by_key = {(c.kind, c.symbol, c.param): c for c in changes}
        added = by_key[("added-param", "deep_gemm.m_grouped_fp8_gemm_nt_contiguous", "ensure_zero_padding")]
        assert added.after == 10 and "inserted" in added.detail
        moved = by_key[("moved-param", "deep_gemm.m_grouped_fp8_gemm_nt_contiguous", "expected_m_for_psum_layout")]
        assert (moved.before, moved.after) == (10, 11)
        assert ("renamed-param", "deep_gemm.utils.layout.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor", "grouped_layout") in by_key
        assert ("added-function", "deep_gemm.set_pdl", None) in by_key
        assert not any(c.kind == "renamed-param" and c.symbol == "deep_gemm.m_grouped_fp8_gemm_nt_contiguous" for c in changes)

    def test_engine_signatures(self, surfaces: dict[str, dict[str, Any]]) -> None:
        for version, doc in surfaces.items():
            py = doc["python"]
            assert ("deep_gemm.fp8_mqa_logits" in py) == (version != "0.2.5")
            assert "deep_gemm.get_col_major_tma_aligned_tensor" not in py
            assert ("deep_gemm.set_pdl" in py) == (VERSIONS.index(version) >= VERSIONS.index("0.1.4"))
            mk = py["deep_gemm.get_mk_alignment_for_contiguous_layout"]
            assert mk["qualname"] == "deep_gemm.utils.layout.get_mk_alignment_for_contiguous_layout"  # late rebinding
            assert py["deep_gemm.fp8_gemm_nt"]["alias_of"] == "deep_gemm.fp8_fp4_gemm_nt"
        bf16_masked = surfaces["0.0.1"]["python"]["deep_gemm.bf16_m_grouped_gemm_nt_masked"]
        assert bf16_masked == {"kind": "none"}

    def test_cache_matches_fresh_extraction(self, wheels: dict[str, Path], surfaces: dict[str, dict[str, Any]]) -> None:
        for version in ("0.1.4", "0.2.5"):
            assert extract(wheels[version], cache=False) == surfaces[version]

    def test_demangler_agrees_with_cxxfilt(self, wheels: dict[str, Path]) -> None:
        assert shutil.which("c++filt") is not None, "c++filt (binutils) is what the demangler is compared with"
        for version in ("0.1.4", "0.2.2"):
            with zipfile.ZipFile(wheels[version]) as zf:
                data = zf.read("deep_gemm/_C.so")
            symbols = [s for group in native_mod._dg_symbols(data).values() for s in group]
            reference = cxxfilt(symbols)
            assert len(reference) == len(symbols)
            for sym in symbols:
                parsed = demangle_params(sym)
                assert parsed is not None, sym
                assert f"{parsed[0]}({', '.join(parsed[1])})".replace(" ", "") == reference[sym].replace(" ", ""), sym

    def test_bundled_copy_in_sgl_kernel(self, surfaces: dict[str, dict[str, Any]]) -> None:
        doc = extract(published_wheel("sgl-kernel==0.3.21"))  # ~540 MB, downloaded once into the cache
        assert doc["release"] == {"name": "sgl-kernel", "version": "0.3.21"}
        assert (doc["binding"], doc["torch_build"], doc["native_library"]) == ("torch-library", "2.9", "deep_gemm/deep_gemm_cpp.abi3.so")
        assert doc["python"]["deep_gemm.fp8_gemm_nt"]["via"] == "_wrap_op"
        assert doc["python"]["deep_gemm.set_compile_mode"]["op"] == "set_compile_mode"
        keys = _keys(diff(doc, surfaces["0.0.1"]))
        assert {
            ("renamed-param", "deep_gemm.fp8_paged_mqa_logits", "kv_cache"),
            ("default-changed", "deep_gemm.fp8_gemm_nt", "compiled_dims"),
            ("removed-param", "deep_gemm.fp8_m_grouped_gemm_nt_masked", "signal"),
            ("removed-function", "deep_gemm.set_compile_mode", None),
            ("binding-changed", "deep_gemm", None),
        } <= keys
        ref_ops = json.loads(REFERENCE.read_text())["native_ops"]["sgl-kernel-0.3.21-bundled"]
        assert {op: _reference_kinds(schema) for op, schema in ref_ops.items()} == {
            op: [p["type"] for p in record["params"]] for op, record in doc["native"].items()
        }

    def test_matches_reference_data(self, surfaces: dict[str, dict[str, Any]]) -> None:
        ref = json.loads(REFERENCE.read_text())
        for version, doc in surfaces.items():
            ref_ops = ref["native_ops"][version]
            assert set(ref_ops) == set(doc["native"]), version
            for op, schema in ref_ops.items():
                got = [p["type"] for p in doc["native"][op]["params"]]
                assert _reference_kinds(schema) == got, (version, op)


def _reference_kinds(schema: str) -> list[str]:
    """Argument kinds of a reference schema row (tvm-ffi rows name arguments by call-site expressions)."""
    inner = schema[schema.index("(") + 1 : schema.rindex(") ->")]
    kinds: list[str] = []
    for arg in native_mod.split_top_level(inner) if inner.strip() else []:
        arg = native_mod.split_top_level(arg, "=")[0]
        if arg.endswith(">") and " <" in arg:
            arg = arg[: arg.index(" <")]
        else:
            head, _, last = arg.rpartition(" ")
            if head and last.isidentifier():
                arg = head
        kinds.append(native_mod.normalize_schema_type(arg))
    return kinds
