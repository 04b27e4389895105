"""The one check of text that dgcompat writes where another program reads it: requirement lines and generated docs.

Certificates, distribution metadata and device names travel between machines and teams; none of
their text may turn into something the reader of a pin or a generated page acts on. What each
reader acts on:

* a **line break**: every character :meth:`str.splitlines` splits on (:data:`LINE_BREAKS`: ``\\n``
  ``\\r`` ``\\v`` ``\\f`` ``\\x1c`` ``\\x1d`` ``\\x1e`` ``\\x85`` ``\\u2028`` ``\\u2029``); pip reads a
  requirements file with it. Text written on one line must hold none, nor any other character
  Python does not print as itself (controls, format characters such as bidi overrides, separators
  other than the space);
* in a **requirements file**: a line starting with ``-`` is an option (``--extra-index-url``,
  ``-r``), ``#`` starts a comment anywhere, and a trailing ``\\`` joins the next line. A line dgcompat
  writes is either a comment (``# `` then one line of text) or one requirement that
  :class:`packaging.requirements.Requirement` reads back as exactly the name and specifier meant;
* in **Markdown**: ``|`` ends a table cell (``\\`` before it changes what it means, differently in
  different readers) and ``<!--`` opens a comment that hides the rest of the page.

:func:`line_problem` is the test (the certificate schema applies it to every field that is
printed); :func:`one_line`, :func:`comment`, :func:`requirement`, :func:`requirement_lines` and
:func:`cell` refuse with :class:`UnsafeTextError` naming what was refused; :func:`flatten` and :func:`short`
fold free text (a test's message, a traceback) onto one line for a page, and :func:`page` joins a page's lines
after checking that it splits back into exactly them. :mod:`dgcompat_conformance.report` renders every page
and table with these.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet

__all__ = ["LINE_BREAKS", "UnsafeTextError", "line_problem", "one_line", "flatten", "short", "comment", "requirement",
           "requirement_lines", "cell", "page"]

#: Every character :meth:`str.splitlines` (and so pip's requirement-file reader) ends a line at.
LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"


class UnsafeTextError(ValueError):
    """Text that would not stay what it was meant to be where dgcompat writes it."""


def _describe(ch: str) -> str:
    name = unicodedata.name(ch, "")
    kind = "a line break" if ch in LINE_BREAKS else "a character that does not print as itself"
    return f"U+{ord(ch):04X}{f' {name}' if name else ''} ({kind})"


def line_problem(text: object, limit: int | None = None) -> str | None:
    """Why ``text`` is not one printable line (at most ``limit`` characters), or None when it is."""
    if not isinstance(text, str):
        return f"is {type(text).__name__}, expected a string"
    if limit is not None and len(text) > limit:
        return f"is {len(text)} characters long, expected at most {limit}"
    bad = next((ch for ch in text if not ch.isprintable()), None)
    return None if bad is None else f"holds {_describe(bad)}"


def one_line(text: object, what: str, limit: int | None = None) -> str:
    """``text`` if it is one printable line; else :class:`UnsafeTextError` naming ``what``."""
    problem = line_problem(text, limit)
    if problem is not None:
        raise UnsafeTextError(f"{what} {str(text)[:60]!r} {problem}, expected one printable line")
    assert isinstance(text, str)
    return text


def flatten(text: object) -> str:
    """Free text on one line: every run of characters that do not print as themselves (line breaks,
    tabs, controls) becomes one space; the ends are stripped."""
    out: list[str] = []
    for ch in str(text):
        if ch.isprintable():
            out.append(ch)
        elif out and out[-1] != " ":
            out.append(" ")
    return "".join(out).strip()


def short(text: object, limit: int = 800) -> str:
    """Free text on one line (:func:`flatten`, every whitespace run then one space), cut to ``limit`` characters
    with ``...``."""
    folded = " ".join(flatten(text).split())
    return folded if len(folded) <= limit else folded[: limit - 3] + "..."


def comment(text: str, what: str = "comment") -> str:
    """``# text`` for a requirements file: one printable line that does not end with ``\\``."""
    one_line(text, what)
    if text.endswith("\\"):
        raise UnsafeTextError(f"{what} {text[:60]!r} ends with a backslash, which joins the next line in pip")
    return f"# {text}"


def requirement(name: str, specifier: str = "") -> str:
    """``name`` + ``specifier`` as a requirement line, checked to read back as exactly that.

    ``specifier``: a PEP 440 specifier set (``==0.1.4``, ``>=2.9``, ``==2.11.*``) or empty. Raises
    :class:`UnsafeTextError` when the line would read as an option, a comment, a URL, a marker, extras
    or another name or specifier than these.
    """
    line = f"{name}{specifier}"
    one_line(line, "requirement")
    try:
        wanted = SpecifierSet(specifier)
    except InvalidSpecifier:
        raise UnsafeTextError(f"requirement {line[:60]!r}: {specifier[:60]!r} is not a version specifier") from None
    if line.startswith("-") or "#" in line or line.endswith("\\"):
        raise UnsafeTextError(f"requirement {line[:60]!r} would read as an option, a comment or a continued line")
    try:
        parsed = Requirement(line)
    except InvalidRequirement as exc:
        raise UnsafeTextError(f"requirement {line[:60]!r} is not a requirement: {exc}") from None
    if (parsed.name != name or parsed.specifier != wanted or parsed.url or parsed.marker is not None
            or parsed.extras):
        raise UnsafeTextError(f"requirement {line[:60]!r} reads as {str(parsed)[:80]!r}, not {name!r} {specifier!r}")
    return line


def requirement_lines(lines: Iterable[str]) -> list[str]:
    """``lines`` as they go into a requirements file, checked: each is a comment (``#``) or a requirement
    (:func:`requirement`'s rules), and together they split back into exactly these lines.

    Raises :class:`UnsafeTextError` naming the first line that is neither.
    """
    out = list(lines)
    for line in out:
        if line.startswith("#"):
            comment(line[1:], "comment line")
            continue
        one_line(line, "requirement")
        try:
            parsed = Requirement(line)
        except InvalidRequirement as exc:
            raise UnsafeTextError(f"requirement {line[:60]!r} is not a requirement: {exc}") from None
        if requirement(parsed.name, str(parsed.specifier)) != line:
            raise UnsafeTextError(f"requirement {line[:60]!r} is not written as a name and a specifier alone")
    if "\n".join(out).splitlines() != out:
        raise UnsafeTextError("the lines do not split back into themselves")
    return out


def cell(text: object, what: str, *, free: bool = False) -> str:
    """``text`` for a Markdown page, on one line, ``|`` escaped and ``<!--`` defused.

    Identity fields (a release, a device, a verdict) must already be one printable line
    (:class:`UnsafeTextError` otherwise); ``free`` text (a message, a traceback) is :func:`flatten`\\ ed.
    """
    shown = flatten(text) if free else one_line(str(text), what)
    # A backslash right before a pipe would escape the escape in some readers (GFM reads ``\\|`` as an escaped
    # pipe, CommonMark as a backslash and a cell border): a space keeps both readings the same.
    shown = re.sub(r"\\+(?=\|)", lambda m: m.group(0) + " ", shown)
    return shown.replace("|", "\\|").replace("<!--", "&lt;!--")


def page(lines: Iterable[str], what: str) -> str:
    """``lines`` as one page (each ends with ``\\n``), refused with :class:`UnsafeTextError` unless it splits back
    into exactly these lines (a field that held a line break would add one)."""
    out = list(lines)
    text = "\n".join(out) + "\n"
    if text.splitlines() != out:
        raise UnsafeTextError(f"{what} would not split back into the lines rendered")
    return text
