"""One module renders every generated page and table (dgcompat_conformance.report); each page in the repository
is current, its command writes exactly it, and every cell goes through the one text check."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from dgcompat_conformance import cli, pins, report
from dgcompat_conformance._text import UnsafeTextError
from dgcompat_conformance.certificate import COMMITTED, load
from dgcompat_conformance.gpu import runner

ROOT = Path(__file__).resolve().parent.parent
WING = ROOT / "conformance" / "dgcompat_conformance"


@pytest.mark.parametrize("page", report.PAGES, ids=[p.path for p in report.PAGES])
def test_each_generated_page_is_current(page: report.Page) -> None:
    doc = (ROOT / page.path).read_text()
    assert doc == page.render(), f"{page.path} is stale: `{page.command}`"


def test_every_generated_page_is_in_the_list() -> None:
    """A page saying it is generated is one of report.PAGES (so the test above keeps it current)."""
    generated = {str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md") if "Generated from" in p.read_text()}
    assert generated == {p.path for p in report.PAGES}


def test_the_commands_write_the_pages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each page's command, as its header names it, writes exactly what the test above compares."""
    assert cli.main(["table", "--markdown"]) == 0
    assert capsys.readouterr().out == report.capabilities_page()
    assert pins.main(["--docs"]) == 0
    assert capsys.readouterr().out == report.compatibility_page()
    assert runner.main(["--table", "--docs", str(tmp_path / "gpu.md")]) == 0
    assert (tmp_path / "gpu.md").read_text() == report.gpu_compatibility_page()


def test_no_other_wing_module_renders_a_markdown_table() -> None:
    """Control included: report.py itself holds table rules; no other module of the wing does."""
    offenders = [str(path.relative_to(WING)) for path in sorted(WING.rglob("*.py")) if "|---" in path.read_text("utf-8")]
    assert offenders == ["report.py"]


def test_the_run_tables_print_one_line_per_certificate_whatever_it_holds() -> None:
    gpu = load(COMMITTED / "gpu-0.1.4.json")
    hostile = replace(gpu, release="0.1.4\u2028evilpkg==6.6.6", subject="x\ny\x85z", verdict="incomplete: a\rb")
    text = report.gpu_run_table([hostile, gpu], {"0.1.4": "gpu-0.1.4.json"})
    assert len(text.splitlines()) == 3 and "gpu-0.1.4.json" in text
    assert all(line.isprintable() for line in text.splitlines())


def test_the_upstream_table_escapes_notes_and_refuses_a_broken_id() -> None:
    rows = [report.UpstreamRow("test_a.py::test_x", "pass", "fail", "a | b <!-- c\nd" + "e" * 300)]
    text = report.upstream_table(rows)
    lines = text.splitlines()
    assert len(lines) == 3 and lines[2].startswith("| `test_a.py::test_x` | pass | fail | a \\| b &lt;!-- c d")
    assert lines[2].endswith("... |") and len(lines[2]) < 300
    with pytest.raises(UnsafeTextError, match="test id"):
        report.upstream_table([report.UpstreamRow("test_a.py::test_x\u2028evil", "pass", "pass", "")])
