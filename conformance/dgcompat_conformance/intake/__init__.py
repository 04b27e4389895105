"""New-release intake: hold the capability table against extracted surfaces, and judge a new release.

Three questions are answered here, all from surfaces (:func:`dgcompat_conformance.surface.extract`), never by
importing deep_gemm:

* **Does the table tell the truth?** :data:`SURFACE_CLAIMS` computes, for every capability whose
  answer a surface shows, what the surface says; :func:`check_table` compares that with what
  :func:`dgcompat.table.compute` answers for the same release. :func:`check_calls` checks that
  every call dgcompat's adapters make (:data:`STABLE_USES`: which parameters they pass by
  position and by keyword) fits the release's signatures.
* **What does a change between two releases touch?** :func:`map_changes` maps each
  :class:`~dgcompat_conformance.surface.Change` onto the table rows that cover it (:data:`ROW_TOUCHES`) and
  sorts it into ``handled``, ``drift`` (unhandled drift: something dgcompat relies on changed and
  no row covers it, or the covering row disagrees with the new surface), ``new-row`` (a change
  in something dgcompat calls that does not break its calls but no row records),
  ``compatible`` (cannot affect dgcompat's calls) or ``irrelevant`` (a symbol dgcompat never
  calls).
* **Is the newest release on the index safe?** :func:`latest` resolves it, diffs it against the
  newest certified release, checks the table and the call shapes, runs the CPU tier and returns
  a :class:`Verdict`: ``safe``, ``safe with new rows needed`` or ``breaking``.
  :func:`main_latest` is the ``dgcompat conform --latest`` command.

One module per question: :mod:`.claims` (what a surface claims, the table against it),
:mod:`.calls` (the calls dgcompat declares in :mod:`dgcompat._calls`, against the signatures),
:mod:`.mapping` (changes onto rows), :mod:`.newest` (the index, the baseline, the CPU tier, the
verdict), :mod:`.discovery` (every distribution of the discovery table) and :mod:`.cli` (the command);
:mod:`._surface` reads a surface's records.
"""

from __future__ import annotations

from .calls import STABLE_USES, UpstreamCall, check_calls, diff_surfaces, intake_symbols
from .claims import NOT_SURFACE_VISIBLE, SURFACE_CLAIMS, capabilities_of, check_table, check_torch, release_of
from .cli import build_latest_parser, main_latest
from .mapping import RELEASE_TOUCHES, ROW_TOUCHES, STATUSES, MappedChange, map_changes, mapped_to_json, render_mapped
from .newest import (
    VERDICTS,
    CpuTier,
    IntakeError,
    Verdict,
    index_versions,
    latest,
    newest_certified,
    newest_on_index,
    run_cpu_tier,
)

__all__ = [
    "SURFACE_CLAIMS",
    "NOT_SURFACE_VISIBLE",
    "UpstreamCall",
    "STABLE_USES",
    "ROW_TOUCHES",
    "RELEASE_TOUCHES",
    "STATUSES",
    "MappedChange",
    "IntakeError",
    "CpuTier",
    "Verdict",
    "VERDICTS",
    "release_of",
    "capabilities_of",
    "check_table",
    "check_calls",
    "check_torch",
    "intake_symbols",
    "diff_surfaces",
    "map_changes",
    "render_mapped",
    "mapped_to_json",
    "index_versions",
    "newest_on_index",
    "newest_certified",
    "run_cpu_tier",
    "latest",
    "build_latest_parser",
    "main_latest",
]
