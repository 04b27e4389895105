"""bench/results keeps only what a document cites, and every result says which dgcompat produced it."""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path

import pytest

from testsupport import record

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"

#: A cited name: a file name of a result, possibly with ``{a,b}`` alternatives and ``*``, as the documents
#: write them (``bench/results/h200-host-bundled-{1,2}.json``, ``h200-warmup-case-*.json``).
_CITED = re.compile(r"[\w.*{},-]+\.(?:json|txt|md)\b}?")


def _expand(pattern: str) -> list[str]:
    """``a{b,c}d`` -> ``[abd, acd]`` (nested and repeated groups too)."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if m is None:
        return [pattern]
    return [x for alt in m.group(1).split(",") for x in _expand(pattern[:m.start()] + alt + pattern[m.end():])]


def uncited(names: list[str], documents: list[str]) -> list[str]:
    """The names no document cites (a citation may use brace alternatives and ``*``)."""
    patterns = [p for text in documents for token in _CITED.findall(text) for p in _expand(token)]
    return [n for n in names if not any(fnmatch.fnmatchcase(n, p.rsplit("/", 1)[-1]) for p in patterns)]


def _documents() -> list[str]:
    return [p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]]


def _provenance(path: Path) -> dict[str, str]:
    """The version and commit a result records: the first keys of a JSON result, the first object of a JSON-lines
    result, the first line (``dgcompat <version>, commit <commit>``) of a text result."""
    text = path.read_text()
    if path.suffix == ".json" or text.startswith("{"):
        first = json.loads(text) if path.suffix == ".json" else json.loads(text.splitlines()[0])
        return {k: first[k] for k in ("dgcompat_version", "dgcompat_commit") if k in first}
    m = re.match(r"#? ?dgcompat (\S+), commit (.+)\n", text)
    return {"dgcompat_version": m.group(1), "dgcompat_commit": m.group(2)} if m else {}


def test_every_result_is_cited_by_a_document() -> None:
    names = sorted(p.name for p in RESULTS.iterdir())
    assert names, "bench/results is empty"
    assert uncited(names, _documents()) == []


def test_the_citation_check_finds_an_uncited_result() -> None:
    docs = ["raw data: `bench/results/h200-host-bundled-{1,2}.json`", "(`bench/results/h200-warmup-case-*.json`)",
            "`h200-warmup-gpu{.json,-summary.txt}`"]
    names = ["h200-host-bundled-1.json", "h200-host-bundled-2.json", "h200-host-bundled-3.json",
             "h200-warmup-case-0.1.4.json", "h200-warmup-gpu-summary.txt", "h200-warmup-gpu.md"]
    assert uncited(names, docs) == ["h200-host-bundled-3.json", "h200-warmup-gpu.md"]


@pytest.mark.parametrize("name", sorted(p.name for p in RESULTS.iterdir()))
def test_every_result_records_version_and_commit(name: str) -> None:
    got = _provenance(RESULTS / name)
    assert set(got) == {"dgcompat_version", "dgcompat_commit"}, f"{name}: {got}"
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", got["dgcompat_version"]), got
    assert got["dgcompat_commit"].strip(), got


def test_writers_stamp_the_running_version_and_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dgcompat

    monkeypatch.setenv("DGCOMPAT_SOURCE_COMMIT", "0123abcd")
    out = record.write_json(tmp_path / "r" / "x.json", {"cases": [1], "dgcompat_commit": "kept"})
    data = json.loads(out.read_text())
    assert list(data)[:2] == ["dgcompat_version", "dgcompat_commit"]
    assert data == {"dgcompat_version": dgcompat.__version__, "dgcompat_commit": "kept", "cases": [1]}
    text = tmp_path / "t.txt"
    text.write_text(record.header() + "\n\nrows\n")
    assert _provenance(text) == {"dgcompat_version": dgcompat.__version__, "dgcompat_commit": "0123abcd"}


def test_a_checkout_records_its_git_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    if not (ROOT / ".git").exists():
        pytest.fail("the tests run from a git checkout (CI clones the repository)")
    monkeypatch.delenv("DGCOMPAT_SOURCE_COMMIT", raising=False)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert record.provenance()["dgcompat_commit"] in (head, f"{head}+dirty")
