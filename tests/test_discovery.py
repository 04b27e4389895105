"""Discovery: the index asked for every distribution of the table, engine wheels read in part, each new release judged.

Offline: the index answers come from documents recorded from PyPI on 2026-12-03 (``tests/data/index``) or from
an in-memory index of synthetic wheels served with HTTP range semantics.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import random
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from dgcompat_conformance import dists, index
from dgcompat_conformance.intake import cli as intake_cli
from dgcompat_conformance.intake import discovery
from dgcompat_conformance.surface import extract
from testsupport import fakes

RECORDED = Path(__file__).parent / "data" / "index"
PYPI = "https://pypi.org/simple/"


class Host:
    """An index and file host in memory: PEP 691 documents and files, byte ranges honoured, every request logged."""

    def __init__(self, docs: Mapping[str, Any] | None = None, *, honour_ranges: bool = True) -> None:
        self.docs: dict[str, Any] = dict(docs or {})
        self.files: dict[str, bytes] = {}
        self.requests: list[tuple[str, str | None]] = []
        self.honour_ranges = honour_ranges
        self.down = False

    def __call__(self, url: str, headers: Mapping[str, str]) -> index.Response:
        self.requests.append((url, headers.get("Range")))
        if self.down:
            raise index.IndexError("cannot reach pypi.org: network is unreachable")
        if url in self.docs:
            return index.Response(200, {"content-type": "application/vnd.pypi.simple.v1+json"},
                                  json.dumps(self.docs[url]).encode())
        if url not in self.files:
            return index.Response(404, {}, b"")
        data = self.files[url]
        rng = headers.get("Range")
        if rng is None or not self.honour_ranges:
            return index.Response(200, {}, data)
        start, end = (int(x) for x in rng.removeprefix("bytes=").split("-"))
        return index.Response(206, {"content-range": f"bytes {start}-{end}/{len(data)}"}, data[start:end + 1])

    def served(self) -> int:
        """Bytes of files served so far."""
        total = 0
        for url, rng in self.requests:
            if url in self.files:
                if rng is None or not self.honour_ranges:
                    total += len(self.files[url])
                else:
                    a, b = (int(x) for x in rng.removeprefix("bytes=").split("-"))
                    total += b - a + 1
        return total

    def publish(self, dist: str, version: str, members: Mapping[str, bytes], *, filename: str | None = None) -> str:
        """Add a wheel of ``dist==version`` holding ``members`` (plus its dist-info with a true RECORD)."""
        name = filename or f"{dist.replace('-', '_')}-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"
        data = wheel_bytes(dist, version, members)
        url = f"https://files.example/{name}"
        self.files[url] = data
        doc = self.docs.setdefault(f"{PYPI}{dist}/", {"meta": {"api-version": "1.1"}, "name": dist, "files": []})
        doc["files"].append({"filename": name, "url": url, "size": len(data),
                             "hashes": {"sha256": hashlib.sha256(data).hexdigest()}, "yanked": False})
        return url


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel_bytes(dist: str, version: str, members: Mapping[str, bytes], *, record: Mapping[str, str] | None = None) -> bytes:
    info = f"{dist.replace('-', '_')}-{version}.dist-info"
    files = dict(members)
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode()
    rows = [f"{n},{(record or {}).get(n, 'sha256=' + _b64(d))},{len(d)}" for n, d in files.items()]
    files[f"{info}/RECORD"] = ("\n".join(rows + [f"{info}/RECORD,,"]) + "\n").encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for n, d in files.items():
            zf.writestr(n, d)
    return buf.getvalue()


def recorded_host() -> Host:
    return Host({f"{PYPI}{p.stem}/": json.loads(p.read_text()) for p in RECORDED.glob("*.json")})


def _copy(body: str, padding: int = 0) -> dict[str, bytes]:
    """A vLLM-like wheel: the copy at vllm/third_party/deep_gemm/, plus ``padding`` bytes of engine elsewhere."""
    out: dict[str, bytes] = {}
    if padding:  # the engine's own library, before and after the copy in the archive
        rng = random.Random(padding)
        out["vllm/_C.abi3.so"] = rng.randbytes(padding)
    # The real 2.8.1's BF16 GEMM defaults compiled_dims to 'nk', as the table says (the test fake leaves it empty).
    body = re.sub(r"(def bf16_gemm_nt\(a, b, d, c=None, compiled_dims=)(''|\"\")", r"\1'nk'", body)
    out.update({"vllm/__init__.py": b"", "vllm/third_party/__init__.py": b"",
                "vllm/third_party/deep_gemm/__init__.py": body.encode(),
                "vllm/third_party/deep_gemm/include/deep_gemm/common.cuh": b"// a JIT header\n"})
    if padding:
        out["vllm/_moe_C.abi3.so"] = random.Random(padding + 1).randbytes(padding // 2)
    return out


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DGCOMPAT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


# ---------------------------------------------------------------------------------------------
# The index and range reads
# ---------------------------------------------------------------------------------------------


def test_recorded_pypi_answers() -> None:
    ix = index.PackageIndex(PYPI, recorded_host())
    assert [str(v) for v in ix.versions("vllm")][:3] == ["0.34.0", "0.33.0", "0.32.0"]
    assert ix.wheel("vllm", "0.34.0").filename == "vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl"  # type: ignore[union-attr]
    assert str(ix.versions("sgl-deep-gemm")[0]) == "0.2.5" and "0.2.4rc0" not in map(str, ix.versions("sgl-deep-gemm"))
    assert "0.2.4rc0" in map(str, ix.versions("sgl-deep-gemm", pre=True))
    # tensorrt-llm: PyPI holds only source archives (installer shims); deep-gemm: one sdist, the v1 API.
    assert ix.wheel("tensorrt-llm", "1.2.1") is None and ix.release_files("tensorrt-llm", "1.2.1")[0].kind == "sdist"
    assert [f.kind for f in ix.files("deep-gemm") or []] == ["sdist"]
    assert ix.files("no-such-project") is None


def test_a_wheel_is_read_in_part(cache: Path) -> None:
    host = Host()
    members = _copy(fakes.UP_281, padding=6 << 20)
    url = host.publish("vllm", "0.35.0", members)
    file = index.PackageIndex(PYPI, host).wheel("vllm", "0.35.0")
    assert file is not None and file.size is not None and file.size > 6 << 20
    kept = index.fetch_partial(file, ("vllm/third_party/deep_gemm/",), host)
    names = zipfile.ZipFile(kept.path).namelist()
    assert "vllm/third_party/deep_gemm/__init__.py" in names and "vllm-0.35.0.dist-info/RECORD" in names
    assert "vllm/_C.abi3.so" not in names
    assert host.served() < 1 << 20, host.served()  # the 9 MB of engine libraries were never fetched
    assert kept.source["sha256"] == hashlib.sha256(host.files[url]).hexdigest()
    # Kept: a second call reads nothing.
    before = len(host.requests)
    again = index.fetch_partial(file, ("vllm/third_party/deep_gemm/",), host)
    assert again.path == kept.path and again.fetched == 0 and len(host.requests) == before
    # The surface of the kept files is the copy's.
    assert extract(kept.path)["deep_gemm_version"] == "2.8.1"
    # The dist-info alone (an engine's requirements, for `dgcompat pin --engine`) is kept apart: neither replaces
    # the other.
    meta = index.fetch_partial(file, (), host)
    assert meta.path != kept.path and zipfile.ZipFile(meta.path).namelist() == ["vllm-0.35.0.dist-info/METADATA",
                                                                                 "vllm-0.35.0.dist-info/RECORD"]
    assert "vllm/third_party/deep_gemm/__init__.py" in zipfile.ZipFile(kept.path).namelist()


def test_a_host_that_ignores_ranges_or_a_lying_record_is_refused(cache: Path, tmp_path: Path) -> None:
    host = Host(honour_ranges=False)
    host.publish("vllm", "0.35.0", _copy(fakes.UP_281, padding=2 << 20))
    file = index.PackageIndex(PYPI, host).wheel("vllm", "0.35.0")
    assert file is not None
    with pytest.raises(index.IndexError, match="does not honour range requests"):
        index.fetch_partial(file, ("vllm/third_party/deep_gemm/",), host, directory=tmp_path / "a")
    bad = Host()
    members = _copy(fakes.UP_281)
    data = wheel_bytes("vllm", "0.35.0", members, record={"vllm/third_party/deep_gemm/__init__.py": "sha256=AAAA"})
    bad.files["https://files.example/w.whl"] = data
    lying = index.IndexFile("vllm-0.35.0-cp38-abi3-manylinux_2_28_x86_64.whl", "https://files.example/w.whl",
                            file.version, "wheel", len(data), None, False, ("manylinux_2_28_x86_64",))
    with pytest.raises(index.IndexError, match="disagree with the wheel's RECORD"):
        index.fetch_partial(lying, ("vllm/third_party/deep_gemm/",), bad, directory=tmp_path / "b")


# ---------------------------------------------------------------------------------------------
# Discovery
# ---------------------------------------------------------------------------------------------


def _statuses(reports: list[discovery.DistReport]) -> dict[str, str]:
    return {r.dist: r.status for r in reports}


def test_every_distribution_that_ships_a_deep_gemm_is_in_the_table() -> None:
    assert [d.name for d in dists.DISTRIBUTIONS] == ["sgl-deep-gemm", "sgl-kernel", "sglang-kernel", "vllm",
                                                     "tensorrt-llm", "deep-gemm"]
    vllm = dists.distribution("VLLM")
    assert vllm is not None and vllm.path == "vllm/third_party/deep_gemm/" and vllm.partial
    assert vllm.ships_none("0.19.1") and not vllm.ships_none("0.20.0")
    assert "v1 API" in dists.distribution("deep_gemm").refused["1.0.0"]  # type: ignore[union-attr]


def test_nothing_new_on_the_recorded_index(cache: Path, tmp_path: Path) -> None:
    host = recorded_host()
    reports = discovery.discover(index.PackageIndex(PYPI, host), cpu_tier=False, out_dir=tmp_path)
    assert _statuses(reports) == {"sgl-deep-gemm": "nothing new", "sgl-kernel": "nothing new",
                                  "sglang-kernel": "nothing new", "vllm": "nothing new",
                                  "tensorrt-llm": "not on this index", "deep-gemm": "nothing new"}
    assert discovery.exit_status(reports) == 0
    text = discovery.render(reports, PYPI)
    assert "vllm           nothing new       newest 0.34.0 (recorded through 0.34.0)" in text
    assert "1.0.0 refused: an sdist of DeepGEMM's v1 API" in text
    assert "its wheels are published on https://pypi.nvidia.com" in text
    assert not [u for u, _ in host.requests if not u.startswith(PYPI)]  # listing only: no file was read


def _engine_host() -> Host:
    """vllm 0.34.0 (logits_dtype) and 0.35.0 on an index; the 0.35.0 copy is steered by each test."""
    host = Host()
    host.publish("vllm", "0.34.0", _copy(fakes.UP_281_LOGITS_DTYPE, padding=1 << 20))
    return host


@pytest.fixture
def engine(cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    """An index with vllm 0.34.0 whose copy is recorded as a known build, and a CPU tier that says what it is told."""
    host = _engine_host()
    ix = index.PackageIndex(PYPI, host)
    file = ix.wheel("vllm", "0.34.0")
    assert file is not None
    fp = extract(index.fetch_partial(file, ("vllm/third_party/deep_gemm/",), host).path)["fingerprint"]
    monkeypatch.setattr(discovery, "recorded", lambda: {"vllm-0.34.0": {"dist": "deep-gemm", "version": "2.8.1", **fp}})
    state: dict[str, Any] = {"host": host, "verdict": "PASS", "runs": []}

    def run_wheel(wheel: Path, *, out_dir: Path, timeout: float) -> tuple[str, dict[str, int], list[str], str | None]:
        state["runs"].append(wheel.name)
        failing = [] if state["verdict"] == "PASS" else ["suite/test_stable_indexer.py::test_paged"]
        return state["verdict"], {"passed": 10, "failed": len(failing)}, failing, str(tmp_path / "cert.json")

    state["run_wheel"] = run_wheel
    return state


def _discover(state: dict[str, Any], tmp_path: Path, **kw: Any) -> list[discovery.DistReport]:
    ix = index.PackageIndex(PYPI, state["host"])  # a fresh listing: the test published more since
    return discovery.discover(ix, dists=["vllm"], out_dir=tmp_path, run_wheel=state["run_wheel"], **kw)


def test_a_new_engine_release_with_the_same_copy_is_certified(engine: dict[str, Any], tmp_path: Path) -> None:
    engine["host"].publish("vllm", "0.35.0", _copy(fakes.UP_281_LOGITS_DTYPE, padding=1 << 20))
    reports = _discover(engine, tmp_path)
    (finding,) = reports[0].findings
    assert (finding.version, finding.status) == ("0.35.0", "certified"), finding.lines
    assert engine["runs"] == ["vllm-0.35.0-cp38-abi3-manylinux_2_28_x86_64.whl"]
    assert any("the same build as vllm-0.34.0" in line for line in finding.lines)
    assert any("certified releases of vllm" in r for r in finding.record)
    assert discovery.exit_status(reports) == 3
    assert "read " in discovery.render(reports, PYPI)  # what was fetched is reported


def test_same_version_different_surface_needs_review(engine: dict[str, Any], tmp_path: Path) -> None:
    # vllm 0.35.0 vendors a "2.8.1" without logits_dtype: same version, another surface.
    engine["host"].publish("vllm", "0.35.0", _copy(fakes.UP_281, padding=1 << 20))
    reports = _discover(engine, tmp_path)
    (finding,) = reports[0].findings
    text = "\n".join(finding.lines)
    assert finding.status == "needs review" and discovery.exit_status(reports) == 1
    assert "same version, different surface" in text
    assert "fp8_fp4_mqa_logits: logits_dtype removed" in text
    assert "mqa_logits_dtype" in text  # mapped onto the table's probe


def test_a_failing_cpu_tier_needs_review(engine: dict[str, Any], tmp_path: Path) -> None:
    engine["host"].publish("vllm", "0.35.0", _copy(fakes.UP_281_LOGITS_DTYPE, padding=1 << 20))
    engine["verdict"] = "FAIL"
    (finding,) = _discover(engine, tmp_path)[0].findings
    assert finding.status == "needs review"
    assert "breaking: CPU tier: suite/test_stable_indexer.py::test_paged" in finding.lines


def test_an_engine_release_that_drops_its_copy(engine: dict[str, Any], tmp_path: Path) -> None:
    engine["host"].publish("vllm", "0.35.0", {"vllm/__init__.py": b""})
    reports = _discover(engine, tmp_path)
    (finding,) = reports[0].findings
    assert finding.status == "needs review" and "holds no vllm/third_party/deep_gemm/" in finding.lines[0]
    assert engine["runs"] == []


def test_a_kernel_release_without_deep_gemm_is_recorded_as_such(cache: Path, tmp_path: Path) -> None:
    host = recorded_host()
    host.publish("sglang-kernel", "0.4.11", {"sgl_kernel/big.so": random.Random(3).randbytes(3 << 20),
                                             "sgl_kernel/__init__.py": b""},
                 filename="sglang_kernel-0.4.11-cp310-abi3-manylinux2014_x86_64.whl")
    reports = discovery.discover(index.PackageIndex(PYPI, host), dists=["sglang-kernel"], out_dir=tmp_path)
    (finding,) = reports[0].findings
    assert (finding.version, finding.status) == ("0.4.11", "no deep_gemm")
    assert discovery.exit_status(reports) == 0
    assert host.served() < 1 << 20


def test_an_unreachable_index_is_exit_2(cache: Path, tmp_path: Path) -> None:
    host = recorded_host()
    host.down = True
    reports = discovery.discover(index.PackageIndex(PYPI, host), cpu_tier=False, out_dir=tmp_path)
    assert set(_statuses(reports).values()) == {"not readable"}
    assert discovery.exit_status(reports) == 2
    assert "network is unreachable" in reports[0].note


def test_the_command(engine: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    engine["host"].publish("vllm", "0.35.0", _copy(fakes.UP_281, padding=1 << 20))
    argv = ["conform", "--latest", "--dist", "vllm", "--no-cpu-tier", "--out", str(tmp_path)]
    ix = index.PackageIndex(PYPI, engine["host"])
    assert intake_cli.main_latest(argv, index=ix) == 1
    out = capsys.readouterr().out
    assert "vllm 0.35.0: needs review" in out and "verdict: a new release needs review (exit 1)" in out
    assert intake_cli.main_latest([*argv, "--json"], index=ix) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["exit_status"] == 1 and doc["distributions"][0]["findings"][0]["version"] == "0.35.0"
    # --since re-judges what the table records: 0.34.0 is new again.
    assert intake_cli.main_latest([*argv, "--since", "vllm=0.33.0"], index=ix) == 1
    assert "vllm 0.34.0:" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "where"), [
    (["--dist", "vllmm"], "--dist"),
    (["--since", "vllm"], "--since"),
    (["--since", "vllm=abc"], "--since"),
    (["--version", "0.2.5", "--dist", "vllm"], "--version"),
])
def test_usage_errors(argv: list[str], where: str, capsys: pytest.CaptureFixture[str]) -> None:
    host = Host()
    host.down = True
    assert intake_cli.main_latest(argv, index=index.PackageIndex(PYPI, host)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) >= 1 and where in err[-1]
    assert host.requests == []  # refused before anything was asked
