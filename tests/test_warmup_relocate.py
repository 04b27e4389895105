"""A warmed cache serves another install of the same build: the key ports (checked against deep_gemm's own C++),
``--adopt`` after a move on every JIT lineage, refusals that say why, ``--export`` / ``--import``, and a read-only
folder serving many processes. Against the fake JITs of tests/fake_jit.py, each keyed as its real lineage."""

from __future__ import annotations

import io
import json
import re
import shutil
import tarfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dgcompat.jit_warmup import keys as K
from dgcompat.jit_warmup.cache import entries, snapshot
from dgcompat.jit_warmup.relocate import Build, read_builds
from testsupport.folders import readonly, writable

from .warmup_env import SMALL, as_reader, at_site, cli, compiles, install, serve

LINEAGES = ("compiler", "bundled", "deep_jit")


# ---- the key ports ---------------------------------------------------------------------------------------------

def test_the_hash_is_deep_gemms() -> None:
    # Pinned from deep_gemm's csrc/utils/hash.hpp (release/v0.1.2) compiled with g++ over the same bytes.
    assert K.hex_digest(b"name$$NVCC12.9$$-I/x/include --gpu$$// code \xff\x80 bytes\n") == \
        "ab59a9f556fdbca848ac14046d961eea"
    assert K.hex_digest(b"") != K.hex_digest(b"\0") and len(K.hex_digest(b"x")) == 32


@pytest.mark.wheels
def test_the_header_stamp_is_deep_gemms_on_the_real_headers(tmp_path: Path) -> None:
    from dgcompat_conformance import wheelcache

    wheel = wheelcache.fetch("sgl-deep-gemm", "0.1.4")
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(tmp_path, [n for n in zf.namelist() if n.startswith("deep_gemm/include/deep_gemm/")])  # noqa: S202 - a cached wheel
    code = (b"#include <deep_gemm/impls/sm90_fp8_gemm_1d2d.cuh>\n#include <cute/tensor.hpp>\n"
            b"using namespace deep_gemm;\nstatic void __instantiate_kernel() {}\n")
    # Pinned from csrc/jit/include_parser.hpp (release/v0.1.2) compiled with g++ over the 0.1.4 wheel's headers.
    assert K.HeaderHashes(tmp_path / "deep_gemm" / "include").include_hash(code) == "77cf0af03ad8c00d905cc3b56ff31384"


def test_commands_name_their_lineage_and_flags() -> None:
    c = ["/c/tmp/1f/kernel.cu", "-cubin", "-o", "/c/tmp/1f/kernel.cubin", "-std=c++20", "-I/s/deep_gemm/include",
         "--gpu-architecture=sm_90a"]
    assert K.lineage_of(c) == "compiler" and K.flags_of(c) == "-std=c++20 -I/s/deep_gemm/include --gpu-architecture=sm_90a"
    b = [f"/c/cache/kernel.x.{'a' * 32}/kernel.cu", "-o", "/c/tmp/uu", "-std=c++20", "-I/s/include", "-cubin"]
    assert K.lineage_of(b) == "bundled" and K.flags_of(b) == "-std=c++20 -I/s/include -cubin"
    d = ["/c/tmp/1-2/kernel.cu", "--cubin", "--output-file", "/c/tmp/1-2/kernel.cubin", "-O3", "--include-path", "/s"]
    assert K.lineage_of(d) == "deep_jit"
    assert K.parse_entry(f"kernel.sm90_fp8_gemm_1d2d.{'0' * 32}", "compiler") == ("sm90_fp8_gemm_1d2d", "0" * 32)
    assert K.parse_entry("sm90_gemm.abc123", "deep_jit") == ("sm90_gemm", "abc123")
    assert K.parse_entry("kernel.x.short", "compiler") is None


# ---- a moved install -------------------------------------------------------------------------------------------

def _warm(base: Path, layout: str, *extra: str) -> tuple[dict[str, str], Path]:
    env = install(base, layout, site="siteA")
    cache = base / "cache"
    out = cli(env, *SMALL.split(), "--cache-dir", str(cache), "--no-progress", *extra)
    assert out.returncode == 0, out.stderr[-3000:]
    assert len(compiles(Path(env["FAKE_NVCC_LOG"]))) == 3
    return env, cache


def _move(base: Path, env: dict[str, str], cache: Path) -> tuple[dict[str, str], Path]:
    """The virtualenv and the folder moved: siteA is gone, the same files are at siteB."""
    shutil.copytree(base / "siteA", base / "siteB")
    shutil.rmtree(base / "siteA")
    moved = base / "moved-cache"
    cache.rename(moved)
    return at_site(env, base / "siteB"), moved


@pytest.mark.slow
@pytest.mark.parametrize("layout", LINEAGES)
def test_a_moved_install_serves_from_the_adopted_folder(tmp_path: Path, layout: str) -> None:
    env, cache = _warm(tmp_path, layout)
    env, moved = _move(tmp_path, env, cache)
    as_is = tmp_path / "as-is"
    shutil.copytree(moved, as_is)
    # Without dgcompat: the 0.1.x and bundled keys contain the include folder, so all 3 compile again.
    assert serve(env, as_is) == (0 if layout == "deep_jit" else 3)
    out = cli(env, "--adopt", "--cache-dir", str(moved))
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"{0 if layout == 'deep_jit' else 3} kernels re-keyed" in out.stdout, out.stdout
    assert serve(env, moved) == 0
    again = cli(env, "--adopt", "--cache-dir", str(moved))
    assert "0 kernels re-keyed" in again.stdout  # idempotent
    if layout != "deep_jit":  # the folder now also records the install here, so it can be exported from here
        assert {Path(b.location).parent.name for b in read_builds(moved)} == {"siteA", "siteB"}


@pytest.mark.slow
def test_a_warmup_after_a_move_adopts_and_compiles_nothing(tmp_path: Path) -> None:
    env, cache = _warm(tmp_path, "compiler")
    env, moved = _move(tmp_path, env, cache)
    out = cli(env, *SMALL.split(), "--cache-dir", str(moved), "--no-progress", "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert (report["compiled"], report["cached"]) == (0, 3)
    assert any("3 kernels warmed by another install of this build" in n for n in report["notes"]), report["notes"]
    assert len(compiles(Path(env["FAKE_NVCC_LOG"]))) == 3


@pytest.mark.slow
@pytest.mark.parametrize(("change", "why"), [
    ("headers", "another build"),
    ("nvcc", "another compiler"),
    ("settings", "other compiler settings: DG_JIT_DEBUG='1' here"),
    ("arch", "another GPU architecture: built for sm_90a, this GPU is sm100"),
])
def test_anything_but_the_install_folder_differing_compiles_and_says_why(tmp_path: Path, change: str,
                                                                         why: str) -> None:
    env, cache = _warm(tmp_path, "compiler")
    env, moved = _move(tmp_path, env, cache)
    if change == "headers":  # the same release rebuilt with other headers
        shutil.rmtree(tmp_path / "siteB")
        install(tmp_path, "compiler", site="siteB", revision="patched")
    elif change == "nvcc":
        env["FAKE_NVCC_VERSION"] = "13.0, V13.0.48"
    elif change == "settings":
        env["DG_JIT_DEBUG"] = "1"
    else:
        env["DGCOMPAT_ARCH"] = "sm100"
    out = cli(env, "--adopt", "--cache-dir", str(moved))
    assert out.returncode == 0 and "0 kernels re-keyed" in out.stdout, out.stdout + out.stderr
    assert why in out.stdout, out.stdout
    if change != "arch":  # (the fake JIT builds sm_90a whatever the GPU)
        assert serve(env, moved) == 3


def test_entries_whose_key_or_headers_do_not_verify_are_left_alone(tmp_path: Path) -> None:
    include = tmp_path / "include"
    for rel, text in {"deep_gemm/impls/k.cuh": "#include <deep_gemm/common.cuh>\n// k\n",
                      "deep_gemm/common.cuh": "// common\n"}.items():
        (include / rel).parent.mkdir(parents=True, exist_ok=True)
        (include / rel).write_text(text)
    hashes = K.HeaderHashes(include)
    body = b"#include <deep_gemm/impls/k.cuh>\nBLOCK_M=64;\n"
    code = f"// Includes' hash value: {hashes.include_hash(body)}\n".encode() + body
    build = Build("compiler", "r", "/s/deep_gemm", "/s/deep_gemm/include", "fp", "release 12.9", "NVCC12.9",
                  "-std=c++20 -I/s/deep_gemm/include --gpu-architecture=sm_90a", (), "2.11")
    name = K.entry_name("compiler", "k", K.entry_key("compiler", "k", "NVCC12.9", build.flags, code))
    from dgcompat.jit_warmup.relocate import verify_entry

    files = {"kernel.cu": code, "kernel.cubin": b"cubin"}
    assert verify_entry(name, files, build, hashes) is None
    tampered = {**files, "kernel.cu": code.replace(b"64", b"128")}
    assert "does not reproduce" in str(verify_entry(name, tampered, build, hashes))
    other = Build(*[build.flags.replace("sm_90a", "sm_100a") if v == build.flags else v
                    for v in (build.lineage, build.release, build.location, build.include, build.fingerprint,
                              build.nvcc, build.signature, build.flags, build.settings, build.torch)])  # type: ignore[arg-type]
    assert "does not reproduce" in str(verify_entry(name, files, other, hashes))
    (include / "deep_gemm/common.cuh").write_text("// patched\n")
    assert "other deep_gemm headers" in str(verify_entry(name, files, build, K.HeaderHashes(include)))


# ---- one artifact ----------------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("layout", LINEAGES)
def test_an_export_imported_at_another_path_checks_with_zero_compiles(tmp_path: Path, layout: str) -> None:
    artifact = tmp_path / "warm.dgcache"
    env, _cache = _warm(tmp_path, layout, "--export", str(artifact))
    with tarfile.open(artifact) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
    # The fake's Python layer is not the published wheel's, so its label carries the surface note.
    assert manifest["release"].startswith("sgl-deep-gemm 0.1.4") and manifest["lineage"] == layout
    assert len(manifest["kernels"]) == 3 and manifest["spec"]["shapes"][0]["n"] == 256
    assert manifest["nvcc"].endswith("V12.9.86") and manifest["arch"] == "sm_90a" and manifest["torch"]
    env, _ = _move(tmp_path, env, _cache)
    serving = tmp_path / "serving"
    out = cli(env, "--import", str(artifact), "--cache-dir", str(serving), "--check", "--check-sample", "4")
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert "OK: 3 kernels" in out.stdout and "3 relocated" in out.stdout
    assert re.search(r"check \[sgl-deep-gemm 0\.1\.4[^\n]*\]: OK: 4 sampled calls compiled 0 kernels", out.stdout), out.stdout
    assert len(entries(serving)) == 3 and serve(env, serving) == 0
    assert len(compiles(Path(env["FAKE_NVCC_LOG"]))) == 3  # only the warmup at the first install compiled
    # The folder now answers an identical warmup from its record, and never needed to be written since.
    before = snapshot(serving)
    readonly(serving)
    try:
        warm = cli(env, *SMALL.split(), "--cache-dir", str(serving), "--json", **as_reader())
        assert warm.returncode == 0, warm.stderr[-3000:]
        assert json.loads(warm.stdout)["method"] == "record"
    finally:
        writable(serving)
    assert snapshot(serving) == before


@pytest.mark.slow
def test_an_import_for_another_compiler_writes_nothing_and_says_why(tmp_path: Path) -> None:
    artifact = tmp_path / "warm.dgcache"
    env, cache = _warm(tmp_path, "compiler", "--export", str(artifact))
    env, _ = _move(tmp_path, env, cache)
    env["FAKE_NVCC_VERSION"] = "13.0, V13.0.48"
    serving = tmp_path / "serving"
    out = cli(env, "--import", str(artifact), "--cache-dir", str(serving))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "refused: another compiler: built with Cuda compilation tools, release 12.9" in out.stdout
    assert "release 13.0" in out.stdout and entries(serving) == []


@pytest.mark.slow  # a subprocess per run: the slow tier
def test_export_and_import_usage_errors_come_before_anything_is_written(tmp_path: Path) -> None:
    env = install(tmp_path, "compiler")
    taken = tmp_path / "taken.dgcache"
    taken.write_text("keep me")
    out = cli(env, *SMALL.split(), "--cache-dir", str(tmp_path / "c"), "--export", str(taken))
    assert out.returncode == 2 and "--export" in out.stderr and "never overwritten" in out.stderr, out.stderr
    assert taken.read_text() == "keep me" and not (tmp_path / "c").exists()
    out = cli(env, "--export", str(tmp_path / "new.dgcache"), "--cache-dir", str(tmp_path / "c"))
    assert out.returncode == 2 and "give the shapes" in out.stderr, out.stderr
    out = cli(env, "--import", str(tmp_path / "missing.dgcache"))
    assert out.returncode == 2 and "--import" in out.stderr and "Traceback" not in out.stderr
    out = cli(env, "--import", str(taken), "--cache-dir", str(tmp_path / "c"))
    assert out.returncode == 2 and "--import" in out.stderr and "Traceback" not in out.stderr, out.stderr
    evil = tmp_path / "evil.dgcache"
    with tarfile.open(evil, "w:gz") as tar:
        for name in ("../outside", f"kernels/kernel.k.{'0' * 32}/kernel.cu"):
            info = tarfile.TarInfo(name)
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
    from dgcompat.errors import BadArgumentError
    from dgcompat.jit_warmup.artifact import _members

    with tarfile.open(evil) as tar, pytest.raises(BadArgumentError) as raised:
        _members(tar, evil, "compiler")
    assert raised.value.argument == "import" and "'../outside'" in str(raised.value)


# ---- a read-only shared folder ---------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_read_only_folder_serves_many_processes_and_is_checked_and_printed(tmp_path: Path) -> None:
    env, cache = _warm(tmp_path, "compiler")
    reader = as_reader()
    before = snapshot(cache)
    readonly(cache)
    try:
        with ThreadPoolExecutor(4) as pool:  # four ranks at once
            assert list(pool.map(lambda _: serve(env, cache, **reader), range(4))) == [0, 0, 0, 0]
        env_ro = {**env, "DG_JIT_CACHE_DIR": str(cache)}
        printed = cli(env_ro, "--print-cache-dir", **reader)
        assert printed.returncode == 0 and printed.stdout.strip() == str(cache), printed.stderr
        checked = cli(env_ro, *SMALL.split(), "--check-only", "--check-sample", "4", **reader)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "OK: 4 sampled calls compiled 0 kernels" in checked.stdout
        assert snapshot(cache) == before
        # A description it does not hold: the check says so (a miss cannot be compiled into a read-only folder).
        other = cli(env_ro, "--dense", "384,512", "--ms", "1", "--check-only", **reader)
        assert other.returncode == 1 and "Traceback" not in other.stderr, other.stdout + other.stderr
        assert "is read-only here: a kernel it lacks cannot be compiled into it" in other.stdout, other.stdout
        warm = cli(env_ro, "--dense", "384,512", "--ms", "1", **reader)  # nothing answers for it: a usage error
        assert warm.returncode == 2 and "--cache-dir" in warm.stderr and "read-only" in warm.stderr, warm.stderr
    finally:
        writable(cache)
    assert snapshot(cache) == before
