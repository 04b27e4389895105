"""Indexer rules the CPU-tier stand-ins enforce, evaluated from the host asserts of the binary itself.

The conditions compiled into a release's native library (``host_assert_texts``) are parsed with
:mod:`ast` (never executed) and evaluated for each architecture:

- ``block_kv``: the condition over ``arch_major`` and ``block_kv`` only, e.g.
  ``(arch_major == 10 and (block_kv == 32 or block_kv == 64)) or (arch_major == 9 and block_kv == 64)``;
- heads: the condition over ``arch_major`` and ``num_heads`` only where there is one (0.1.4-0.1.5.post3);
  otherwise the unqualified head lists (the ``{32, 64}`` one is the SM90 kernel's, observed on the H200;
  the other one the SM100/SM120 kernels');
- MX scale factors: ``is_mx_sf == (arch_major == 10 or (arch_major == 12 and is_fp4))`` evaluated for
  FP8 (``is_fp4`` false);
- bf16 weights: ``weights.scalar_type() == (arch_major == N ? kBFloat16 : kFloat32)`` (required), or
  ``weights.scalar_type() == kFloat or (arch_major == N and weights.scalar_type() == kBFloat16)`` (allowed),
  with ``weights.scalar_type() != kBFloat16 or logits_dtype == kBFloat16``;
- ``max_seqlen_k > 0``: the ragged logits have only the compressed layout;
- FP4 / MX inputs: whether the binary knows MX scale factors at all (``is_mx_sf`` in its texts), the
  ``is_mx_sf == (...)`` condition also for FP4, ``not is_fp4 or is_mx_sf``, a bare ``not is_mx_sf``, and the
  head dims of ``(not is_fp4 and head_dim == 32) or head_dim == 64 or head_dim == 128``;
- ``logits_dtype == kFloat32 or logits_dtype == kBFloat16``: the logits dtypes the build computes;
- varlen: ``arch_major == 12 or is_varlen == (arch_major == 10)`` (upstream 2.8: SM100's paged logits only
  in the varlen form, SM90's never);
- the SM90 KV-multicast launch: ``_schedule_meta_size == num_sms / num_kv_multicast + 1`` (vLLM 0.34.0's
  2.8.1, whose SM90 kernel also takes next_n 4).

An architecture a condition does not decide keeps the stand-in's earlier default (None here).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["IndexerRules", "rules_from_asserts", "ARCH_MAJOR"]

ARCH_MAJOR: Mapping[str, int] = {"sm90": 9, "sm100": 10, "sm120": 12}
_CANDIDATES: Mapping[str, tuple[int, ...]] = {
    "block_kv": (16, 32, 64, 128, 256, 512), "num_heads": (4, 8, 16, 24, 32, 48, 64, 128),
    "next_n": tuple(range(1, 9)), "is_varlen": (False, True), "head_dim": (16, 32, 64, 96, 128, 256)}
# ScalarType spellings across the builds: torch::kFloat32, torch::kFloat, torch::headeronly::ScalarType::Float.
_F32 = r"[\w:]*(?:kFloat(?:32)?|ScalarType::Float)"
_BF16 = r"[\w:]*(?:kBFloat16|ScalarType::BFloat16)"


@dataclass(frozen=True)
class IndexerRules:
    """Per architecture: allowed block_kv / heads (None = not decided by the binary), MX and bf16 needs."""

    block_kv: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    heads: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    mx_sf: Mapping[str, bool] = field(default_factory=dict)
    bf16_weights: Mapping[str, bool] = field(default_factory=dict)
    sm90_next_n: tuple[int, ...] | None = None
    """The SM90 kernel's native next_n list (``next_n == 1 or next_n == 2 [or next_n == 4]``)."""
    positive_max_seqlen_k: bool = False
    """The ragged MQA logits assert ``max_seqlen_k > 0`` (no uncompressed layout: 0.2.5, upstream 2.8)."""
    sources: tuple[str, ...] = ()
    mx_scales: bool = False
    """The binary knows MX scale factors (``is_mx_sf``): FP4 is told by q's dtype, MX by ``q_sf``. Before them
    (sgl-deep-gemm 0.0.1 - 0.1.5.post3) a ``q_sf`` meant FP4 (upstream 7f2a703 ``is_fp4 = q_sf.has_value()``)."""
    mx_sf_fp4: Mapping[str, bool] = field(default_factory=dict)
    """``is_mx_sf == (...)`` evaluated for FP4 inputs (``mx_sf`` is the FP8 one)."""
    mx_sf_text: str = ""
    fp4_needs_mx: bool = False
    """``not is_fp4 or is_mx_sf``."""
    bare_no_mx: bool = False
    """A bare ``not is_mx_sf`` (no ``is_mx_sf == (...)``): the stand-ins take it to be the SM90 path's, the only
    one without MX kernels (sgl-deep-gemm 0.1.6 - 0.2.3.post2)."""
    bf16_weights_allowed: Mapping[str, bool] = field(default_factory=dict)
    """``weights == kFloat or (arch_major == N and weights == kBFloat16)``: where bf16 weights are accepted."""
    bf16_weights_need_bf16_logits: bool = False
    logits_dtypes: tuple[str, ...] = ()
    """``("float32", "bfloat16")`` where ``logits_dtype == kFloat32 or logits_dtype == kBFloat16`` is asserted."""
    head_dims: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    """``{"fp8": ..., "fp4": ...}`` from the head-dim condition over ``is_fp4`` and ``head_dim``."""
    varlen: Mapping[str, tuple[bool, ...]] = field(default_factory=dict)
    """Per architecture, the ``is_varlen`` values the paged logits accept (upstream 2.8: SM100 True, SM90 False)."""
    kv_multicast: bool = False
    """The SM90 next_n 4 launch runs one task per 2-SM cluster: its schedule has ``num_sms / 2 + 1`` rows."""

    def mx_contract(self, arch: str) -> bool:
        return bool(self.mx_sf.get(arch)) and bool(self.bf16_weights.get(arch))


class _Unsupported(ValueError):
    pass


def _eval(node: ast.AST, env: Mapping[str, int | bool]) -> int | bool:
    """Evaluate the small C++-in-Python subset (and/or/not, ==, names, ints, parentheses)."""
    if isinstance(node, ast.Expression):
        return _eval(node.body, env)
    if isinstance(node, ast.BoolOp):
        values = [bool(_eval(v, env)) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _eval(node.operand, env)
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq):
        return _eval(node.left, env) == _eval(node.comparators[0], env)
    if isinstance(node, ast.Name) and node.id in env:
        return env[node.id]
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, bool)):
        return node.value
    raise _Unsupported(ast.dump(node)[:80])


def _names(text: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text)) - {"and", "or", "not"}


def _parse(text: str) -> ast.Expression | None:
    try:
        return ast.parse(text, mode="eval")
    except SyntaxError:
        return None


def _arch_sets(asserts: Iterable[str], var: str) -> tuple[dict[str, tuple[int, ...]], list[str]]:
    out: dict[str, tuple[int, ...]] = {}
    used: list[str] = []
    for text in asserts:
        if _names(text) != {"arch_major", var}:
            continue
        tree = _parse(text)
        if tree is None:
            continue
        try:
            sets = {arch: tuple(v for v in _CANDIDATES[var] if _eval(tree, {"arch_major": major, var: v}))
                    for arch, major in ARCH_MAJOR.items()}
        except _Unsupported:
            continue
        used.append(text)
        for arch, values in sets.items():
            out[arch] = tuple(sorted(set(out.get(arch, values)) & set(values)))
    return out, used


def _plain_sets(asserts: Iterable[str], var: str) -> list[tuple[int, ...]]:
    found = []
    for text in asserts:
        if _names(text) != {var}:
            continue
        tree = _parse(text)
        if tree is None:
            continue
        try:
            found.append(tuple(v for v in _CANDIDATES[var] if _eval(tree, {var: v})))
        except _Unsupported:
            continue
    return found


def _heads(asserts: list[str]) -> tuple[dict[str, tuple[int, ...]], list[str]]:
    qualified, used = _arch_sets(asserts, "num_heads")
    if qualified:
        return {a: v for a, v in qualified.items() if v}, used
    plain = [s for s in _plain_sets(asserts, "num_heads") if len(s) > 1]
    sm90 = [s for s in plain if s == (32, 64)]
    other = [s for s in plain if s != (32, 64)]
    out: dict[str, tuple[int, ...]] = {}
    if sm90:
        out["sm90"] = (32, 64)
    if len(other) == 1:
        out["sm100"] = out["sm120"] = other[0]
    return out, []


_BF16_RE = re.compile(r"^weights\.scalar_type\(\) == \(arch_major == (\d+) \? [\w:]*BFloat16 : [\w:]*Float(?:32)?\)$")
_BF16_ALLOWED_RE = re.compile(
    rf"^weights\.scalar_type\(\) == {_F32} or \(arch_major == (\d+) and weights\.scalar_type\(\) == {_BF16}\)$")
_BF16_LOGITS_RE = re.compile(rf"^weights\.scalar_type\(\) != {_BF16} or logits_dtype == {_BF16}$")
_LOGITS_RE = re.compile(rf"^logits_dtype == {_F32} or logits_dtype == {_BF16}$")


def _head_dims(texts: Iterable[str]) -> tuple[dict[str, tuple[int, ...]], list[str]]:
    for text in texts:
        if _names(text) != {"is_fp4", "head_dim"}:
            continue
        tree = _parse(text)
        if tree is None:
            continue
        try:
            dims = {fmt: tuple(d for d in _CANDIDATES["head_dim"] if _eval(tree, {"is_fp4": fp4, "head_dim": d}))
                    for fmt, fp4 in (("fp8", False), ("fp4", True))}
        except _Unsupported:
            continue
        return dims, [text]
    return {}, []


def rules_from_asserts(asserts: Iterable[str]) -> IndexerRules:
    """The indexer rules a release's host asserts state (see the module docstring)."""
    texts = sorted(set(asserts))
    block_kv, used = _arch_sets(texts, "block_kv")
    heads, used_heads = _heads(texts)
    varlen, used_varlen = _arch_sets(texts, "is_varlen")
    head_dims, used_dims = _head_dims(texts)
    mx: dict[str, bool] = {}
    mx_fp4: dict[str, bool] = {}
    mx_text = ""
    bf16: dict[str, bool] = {}
    bf16_allowed: dict[str, bool] = {}
    sources = list(used) + used_heads + used_varlen + used_dims
    for text in texts:
        if _names(text) == {"is_mx_sf", "arch_major", "is_fp4"} and text.startswith("is_mx_sf =="):
            tree = _parse(text)
            if tree is None or not isinstance(tree.body, ast.Compare):
                continue
            try:
                mx, mx_fp4 = ({arch: bool(_eval(tree.body.comparators[0], {"arch_major": major, "is_fp4": fp4}))
                               for arch, major in ARCH_MAJOR.items()} for fp4 in (False, True))
            except _Unsupported:
                continue
            mx_text = text
            sources.append(text)
        m = _BF16_RE.match(text)
        if m:
            bf16 = {arch: major == int(m.group(1)) for arch, major in ARCH_MAJOR.items()}
            sources.append(text)
        m = _BF16_ALLOWED_RE.match(text)
        if m:
            bf16_allowed = {arch: major == int(m.group(1)) for arch, major in ARCH_MAJOR.items()}
            sources.append(text)
    # The SM90 kernel packs next_n * heads into one WGMMA: its list is the only multi-value one
    # (SM100's paths assert next_n == 1 for varlen, or take any next_n >= 1).
    lists = sorted({s for s in _plain_sets(texts, "next_n") if len(s) > 1})
    sm90_next_n = lists[0] if len(lists) == 1 else None
    positive = "max_seqlen_k > 0" in texts
    if positive:
        sources.append("max_seqlen_k > 0")
    flags = {}
    for key, text in (("fp4_needs_mx", "not is_fp4 or is_mx_sf"), ("bare_no_mx", "not is_mx_sf")):
        flags[key] = text in texts
        if flags[key]:
            sources.append(text)
    need_bf16_logits = [t for t in texts if _BF16_LOGITS_RE.match(t)]
    logits = [t for t in texts if _LOGITS_RE.match(t)]
    multicast = [t for t in texts if "num_sms / num_kv_multicast" in t]
    sources += need_bf16_logits + logits + multicast
    return IndexerRules(
        dict(block_kv), heads, mx, bf16, sm90_next_n, positive, tuple(sources),
        mx_scales=any("is_mx_sf" in t for t in texts), mx_sf_fp4=mx_fp4, mx_sf_text=mx_text,
        fp4_needs_mx=flags["fp4_needs_mx"], bare_no_mx=flags["bare_no_mx"] and not mx,
        bf16_weights_allowed=bf16_allowed, bf16_weights_need_bf16_logits=bool(need_bf16_logits),
        logits_dtypes=("float32", "bfloat16") if logits else (), head_dims=head_dims,
        varlen={a: tuple(bool(v) for v in vs) for a, vs in varlen.items()}, kv_multicast=bool(multicast))
