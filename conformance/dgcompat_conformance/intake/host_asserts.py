"""Native-contract intake: the host asserts of two releases' native libraries, diffed and mapped.

A release can change what its kernels accept without changing one Python signature: sgl-deep-gemm
0.2.5 requires MX scale factors and bf16 weights for the SM100 indexer, drops 8 heads and widens
SM120's ``block_kv``, all of it visible only as ``DG_HOST_ASSERT`` condition texts in ``_C.so``
(:func:`~dgcompat_conformance.surface.native.host_assert_texts`).

:func:`compare` diffs the condition texts of two releases and maps every added or removed
condition: to the capability the table answers it with (**covered** when the table's answer
differs between the two releases on some architecture, because the change is then already
data), to an entry point dgcompat does not wrap (**outside**), or to **needs review**: the
condition maps to no capability, or to one whose answer did not change. ``dgcompat conform
--latest`` never says "safe" while a change needs review.

    python -m dgcompat_conformance.intake.host_asserts 0.2.3.post2 0.2.5      # releases from the wheel cache
    python -m dgcompat_conformance.intake.host_asserts A.whl path/to/deep_gemm_folder --after-release deep-gemm==2.8.1
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import Version

from dgcompat._tooling import effective_release
from dgcompat.detection import KERNEL_WHEELS, UPSTREAM_NAMES, Release
from dgcompat.table import Capabilities, compute, lookup

from .._args import parse, release_source, returns_status, typed, usage_error
from ..releases import KNOWN_DISTS, VENDORED_FACTS, parse_release, release_problem
from ..surface import SurfaceError, resolve_wheel
from ..surface._sources import read_wheel
from ..surface.native import host_assert_texts

__all__ = ["NativeContract", "AssertChange", "CONTRACT_MAP", "OUTSIDE", "contract_of", "compare", "render",
           "release_for", "latest_findings", "main"]

ARCHES = ("sm90", "sm100", "sm120")


@dataclass(frozen=True)
class NativeContract:
    """The host-assert conditions of one release's native library."""

    release: str
    library: str | None
    asserts: tuple[str, ...]


@dataclass(frozen=True)
class AssertChange:
    """One condition added or removed between two releases, and what covers it."""

    kind: str  # "added" or "removed"
    text: str
    capability: str | None
    status: str  # "covered", "outside" or "needs review"
    reason: str

    def line(self) -> str:
        return f"{self.status:<12} {self.kind:<7} {self.text}  -> {self.reason}"


#: (pattern over the condition text, capability that answers it). First match wins; order from
#: the most specific pattern to the most general.
CONTRACT_MAP: tuple[tuple[str, str], ...] = (
    (r"\bis_mx_sf\b|\bsf_q\b|\bq_sf\b|\bweights\.scalar_type\(\)|\blogits_dtype\b", "indexer_inputs"),
    (r"\bnum_heads\s*==\s*\d", "paged_heads"),
    (r"\bblock_kv\s*==\s*\d", "paged_block_kv"),
    (r"\bnext_n\s*==\s*\d", "paged_native_next_n"),
    (r"\bcontext_lens\.(dim|size)\(", "paged_context_lens"),
    (r"\bclean_logits\b", "mqa_clean_logits"),
    (r"\bmax_seqlen_k\s*>\s*0\b", "mqa_uncompressed"),
    (r"\bmax_seqlen_k\b", "mqa_max_seqlen_k"),
    (r"\bgrouped_layout\b|\bm_indices\b", "contiguous_layout_param"),
)

#: Conditions of entry points dgcompat does not wrap (Mega MoE, mega gate, locality domains,
#: custom epilogues, sparse attention, hyper-connection): their changes cannot affect the surface.
OUTSIDE: tuple[tuple[str, str], ...] = (
    (r"\b(l1|l2)_(weights|acts)|\bshared_l[12]_|\bshared_intermediate_hidden\b|\bintermediate_hidden\b|"
     r"ring_tokens\b|\bring\b|pool_tokens\b|\bexperts?\b|_experts\b|\btopk\b|_topk\b|\bphysical_map\b|"
     r"\bnum_ranks\b|\bl2_lag_units\b|\bwave\b|\bdispatch_registers\b|\bweight_hidden\b|\bkHiddenAlignment\b|"
     r"\bstore_block_m_l[12]\b|\bnum_data_pool_tokens\b|\bnum_tokens_bound\b|\bnum_max_tokens_per_rank\b|"
     r"\bsqrtsoftplus\b|\bscoring_func\b|\buse_trtllm_weights\b|\bmega_gate|\bmega_moe|\bis_sm90_candidate_block_m\b",
     "Mega MoE / mega gate (not wrapped by dgcompat)"),
    (r"\bis_localized\b|\bMLOPart\b|\bnum_domains\b|\bnum_chunk_bytes\b|\btpcs\b|\bfd >= 0\b",
     "locality domains (not wrapped by dgcompat)"),
    (r"\bepilogue_class\b|\bmerged_epilogue_class\b|\bepilogue_type\b|Stochastic rounding|FP8 quantization",
     "custom epilogues (dgcompat passes none)"),
    (r"\bsparse_block_kv\b|\bpage_kv\b|\bnum_kv_pages\b", "sparse MQA logits (not wrapped by dgcompat)"),
    (r"\bhead_splits\b|\(left \+ right\)", "fp8_gemm_nt_skip_head_mid (not wrapped by dgcompat)"),
)


def _read_folder(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.so")) if p.is_file()}


def _choose(shared: dict[str, bytes]) -> tuple[str | None, bytes | None]:
    """The library holding the deep_gemm ops: ``_C*`` first, then ``deep_gemm_cpp*``."""
    def rank(name: str) -> tuple[int, str]:
        base = name.rsplit("/", 1)[-1]
        return (0 if base.startswith("_C") else 1 if base.startswith("deep_gemm_cpp") else 2, name)

    for name in sorted(shared, key=rank):
        return name, shared[name]
    return None, None


def contract_of(source: str | Path, *, download: bool = False) -> NativeContract:
    """The host asserts of a release: a version in the wheel cache, a wheel file or a deep_gemm folder."""
    path = Path(source)
    if path.is_dir():
        name, data = _choose(_read_folder(path))
        label = str(path)
    elif path.exists() and path.suffix != ".whl":
        raise SurfaceError(f"{source}: expected a .whl file or a deep_gemm folder")
    else:
        wheel = path if path.suffix == ".whl" else resolve_wheel(str(source), download=download)
        files = read_wheel(wheel)
        name, data = _choose(dict(files.shared_objects))
        label = str(source)
    if data is None:
        raise SurfaceError(f"{source}: no native library to read host asserts from")
    return NativeContract(label, name, host_assert_texts(data))


#: The distributions a contract's table release may name (upstream DeepGEMM too).
RELEASE_DISTS: tuple[str, ...] = (*KNOWN_DISTS, *UPSTREAM_NAMES)


def release_for(text: str) -> Release:
    """``0.2.5`` (sgl-deep-gemm), ``sglang-kernel==0.4.2``, ``deep-gemm==2.8.1`` or ``vllm-0.33.0`` -> a Release.

    A ValueError names what was expected: an unknown distribution, or a release the wing does not
    know (:func:`~dgcompat_conformance.releases.release_problem`), is never read as another one.
    """

    spec = parse_release(text, dists=RELEASE_DISTS)
    problem = release_problem(spec.dist, spec.version)
    if problem is not None:
        raise ValueError(problem)
    if spec.vendored:
        facts = VENDORED_FACTS[spec.id]
        return Release("deep-gemm", Version(facts.deep_gemm), "vendored", "stable-abi", None, None, None, None, None,
                       True, owner=f"{spec.dist} {spec.version}")
    dist = spec.dist
    source = "sgl-deep-gemm" if dist == "sgl-deep-gemm" else "bundled" if dist in KERNEL_WHEELS else "upstream"
    return Release(dist, Version(spec.version), source, "unknown", None, None, None, None, None, True)


def _caps(rel: Release) -> dict[str, Capabilities]:
    return {arch: compute(rel, backend="deep_gemm", arch=arch) for arch in ARCHES}


def _classify(kind: str, text: str, before: dict[str, Capabilities], after: dict[str, Capabilities],
              rel_after: Release) -> AssertChange:
    for pattern, note in OUTSIDE:
        if re.search(pattern, text):
            return AssertChange(kind, text, None, "outside", note)
    for pattern, capability in CONTRACT_MAP:
        if not re.search(pattern, text):
            continue
        changed = [a for a in ARCHES if getattr(before[a], capability) != getattr(after[a], capability)]
        if changed:
            dist, version = effective_release(rel_after, "deep_gemm")
            row = lookup(capability, dist, version)
            shown = ", ".join(f"{a}: {getattr(before[a], capability)!r} -> {getattr(after[a], capability)!r}"
                              for a in changed)
            return AssertChange(kind, text, capability, "covered",
                                f"{capability} ({shown}; row {row.dist} {row.releases or 'all'}: {row.since})")
        return AssertChange(kind, text, capability, "needs review",
                            f"maps to {capability}, but the table answers the same for both releases")
    return AssertChange(kind, text, None, "needs review", "no capability row maps this condition")


def compare(before: NativeContract, after: NativeContract, rel_before: Release, rel_after: Release) -> list[AssertChange]:
    """Every condition added or removed from ``before`` to ``after``, classified (removed first)."""
    old, new = set(before.asserts), set(after.asserts)
    caps_before, caps_after = _caps(rel_before), _caps(rel_after)
    out = [_classify("removed", t, caps_before, caps_after, rel_after) for t in sorted(old - new)]
    out += [_classify("added", t, caps_before, caps_after, rel_after) for t in sorted(new - old)]
    return out


def render(before: NativeContract, after: NativeContract, changes: Sequence[AssertChange]) -> str:
    counts: dict[str, int] = {}
    for c in changes:
        counts[c.status] = counts.get(c.status, 0) + 1
    lines = [
        f"native contract: {before.release} ({before.library}, {len(before.asserts)} host asserts) -> "
        f"{after.release} ({after.library}, {len(after.asserts)} host asserts)",
        "changes: " + (", ".join(f"{counts[s]} {s}" for s in ("covered", "outside", "needs review") if s in counts)
                       or "none"),
    ]
    for status in ("needs review", "covered", "outside"):
        group = [c for c in changes if c.status == status]
        if group:
            lines.append(f"{status}:")
            lines += [f"  {c.kind:<7} {c.text}\n          -> {c.reason}" for c in group]
    return "\n".join(lines) + "\n"


@dataclass
class Findings:
    """What the native contract adds to ``conform --latest``'s verdict."""

    changes: list[AssertChange] = field(default_factory=list)
    breaking: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def latest_findings(baseline: str, newest: str) -> Findings:
    """The native-contract part of ``conform --latest`` (wheels from the cache the surfaces came from).

    A change that needs review is breaking (the verdict is never "safe" with one); a contract
    that cannot be read is a note (never "safe" either).
    """
    found = Findings()
    if baseline == newest:
        return found
    try:
        before, after = contract_of(baseline), contract_of(newest)
        rel_before, rel_after = release_for(baseline), release_for(newest)
    except (SurfaceError, OSError, ValueError) as exc:
        found.notes.append(f"native contract: not compared ({exc}); review the host asserts before deploying")
        return found
    found.changes = compare(before, after, rel_before, rel_after)
    found.breaking = [f"native contract: needs review: {c.kind} `{c.text}` ({c.reason})"
                      for c in found.changes if c.status == "needs review"]
    return found


@returns_status
def main(argv: Sequence[str] | None = None) -> int:
    """Print the native-contract report of two releases; exit 1 when a change needs review."""
    p = argparse.ArgumentParser(prog="python -m dgcompat_conformance.intake.host_asserts", description=__doc__.split("\n\n")[0])
    p.add_argument("before", type=release_source, help="version in the wheel cache, wheel file or deep_gemm folder")
    p.add_argument("after", type=release_source, help="version in the wheel cache, wheel file or deep_gemm folder")
    p.add_argument("--before-release", type=typed(release_for),
                   help="release the table is read for (default: from BEFORE)")
    p.add_argument("--after-release", type=typed(release_for),
                   help="release the table is read for (default: from AFTER)")
    p.add_argument("--json", action="store_true")
    ns = parse(p, argv)
    contracts: list[NativeContract] = []
    for name, source in (("before", ns.before), ("after", ns.after)):
        try:
            contracts.append(contract_of(source))
        except (SurfaceError, OSError, ValueError) as exc:
            return usage_error(p, f"argument {name}: {exc}")
    before, after = contracts
    releases: list[Release] = []
    for name, source, given in (("before", ns.before, ns.before_release), ("after", ns.after, ns.after_release)):
        if given is not None:
            releases.append(given)
            continue
        try:
            releases.append(release_for(source))
        except ValueError as exc:
            return usage_error(p, f"argument {name}: {source!r} names no release the table can be read for "
                                  f"({exc}); give --{name}-release V, dist==V or vllm-V")
    rel_before, rel_after = releases
    changes = compare(before, after, rel_before, rel_after)
    if ns.json:
        doc: dict[str, Any] = {"before": before.release, "after": after.release,
                               "changes": [c.__dict__ for c in changes]}
        print(json.dumps(doc, indent=2))
    else:
        sys.stdout.write(render(before, after, changes))
    return 1 if any(c.status == "needs review" for c in changes) else 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
