"""The fake releases, stand-ins and fake JIT of testsupport/: each written module is its parts joined, and
every part is a real module of its package that some written module uses."""

from __future__ import annotations

from pathlib import Path

import pytest

from testsupport import fake_jit, fakes, parts, stand_in

ROOT = Path(__file__).resolve().parent.parent / "testsupport"

SOURCES = {
    **{f"fakes:{name}": body for name, (_dist, _version, body) in fakes.FAMILIES.items()},
    **{f"stand_in:{version}": stand_in.source(version) for version in stand_in.RELEASES},
    "fake_jit:0.1.4": fake_jit.source("0.1.4"),
}


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_each_written_module_compiles_as_one_module(name: str) -> None:
    compile(SOURCES[name], name, "exec")


def test_every_part_is_used() -> None:
    for package in ("fakes", "stand_in", "fake_jit"):
        for path in sorted((ROOT / package).glob("*.py")):
            if path.name == "__init__.py":
                continue
            text = path.read_text("utf-8")
            assert any(text in body for body in SOURCES.values()), f"testsupport/{package}/{path.name} is used nowhere"


def test_a_part_with_a_future_import_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "probe_parts"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "first.py").write_text("x = 1\n")
    (pkg / "second.py").write_text("from __future__ import annotations\ny = x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "x = 1" in parts.joined("probe_parts", "first")
    with pytest.raises(ValueError, match=r"probe_parts\.second has a __future__ import"):
        parts.joined("probe_parts", "first", "second")
