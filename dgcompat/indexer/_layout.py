"""The one decision of how a paged call is launched (native ``(B, next_n)`` or flat), and the launch lengths.

:func:`launch_layout` decides the layout, :func:`lens_recipe` / :func:`make_launch_lens` which lengths
tensor the kernel gets; both the schedule builder and the launch use them, so the schedule is always
built from the very tensor the kernel reads.
"""

from __future__ import annotations

from typing import Any

from .._checks import bad
from ._state import STATE

__all__ = ["launch_layout", "lens_recipe", "make_launch_lens", "row_lengths", "clamp1", "shape_of_rows", "lens_only",
           "hint_key"]


def launch_layout(dims: str, native_n: tuple[int, ...], form: str, n: int, per_row_table: bool, varlen: bool) -> str:
    """``"native"`` (q ``(B, next_n, H, D)``) or ``"flat"`` (one query row per token).

    ``dims``: the release's ``paged_context_lens`` (``"1d"``, ``"2d"``; ``"any"`` = ``"2d"``); ``form``:
    the caller's lengths, ``"seq"`` ``(B,)``, ``"rows"`` ``(B, next_n)`` or ``"flat"`` ``(B*next_n, 1)``.
    Native needs one block-table row per sequence (a per-row table is launched flat, as is), a
    ``next_n`` the architecture launches, and lengths the release's form expresses exactly (the
    1-D form cannot carry arbitrary per-row lengths, so ``(B, next_n)`` goes flat there).
    """
    if n == 1 or form == "flat" or per_row_table or varlen or n not in native_n:
        return "flat"
    if dims == "1d" and form == "rows":
        return "flat"
    return "native"


def lens_recipe(layout: str, form: str, b: int, n: int, dims: str) -> tuple[Any, ...]:
    """How the launch lengths are made from the caller's (a hashable key; see :func:`make_launch_lens`)."""
    if layout == "native":
        if form == "seq":
            return ("as-is",) if dims == "1d" else ("row-lens", b, n, "2d")
        return ("row-max", b, n)
    if form == "seq" and n > 1:
        return ("row-lens", b, n, "1d" if dims == "1d" else "flat")
    return ("view", "1d" if dims == "1d" else "2d")


def make_launch_lens(lens: Any, recipe: tuple[Any, ...]) -> Any:
    """The lengths tensor the kernel (and its schedule) gets, made by ``recipe``:

    - ``as-is``: native launch on a 1-D release, ``(B,)`` as given;
    - ``row-lens``: each query row's causal length ``ctx - next_n + 1 + j`` of ``(B,)`` lengths, as
      ``(B, next_n)`` (native, 2-D release), ``(B*next_n,)`` (flat, 1-D release) or ``(B*next_n, 1)``;
    - ``row-max``: native ``(B, next_n)`` on a 2-D release with every column the row's longest length
      (the kernels size every row of a sequence by its last column; the positions computed past a
      row's own length are unspecified, like every position past it);
    - ``view``: one length per query row, a view of the caller's tensor (no copy).
    Derived lengths are clamped to >= 1 (the kernels need every row to see a position).
    """
    kind = recipe[0]
    if kind == "as-is":
        return lens
    if kind == "view":
        return lens.view(-1) if recipe[1] == "1d" else lens.view(-1, 1)
    b, n = recipe[1], recipe[2]
    if kind == "row-max":
        return lens.amax(dim=1, keepdim=True).expand(b, n).contiguous()
    per_row = clamp1(row_lengths(lens, b, n, "seq"))
    return per_row.view(b, n) if recipe[3] == "2d" else per_row if recipe[3] == "1d" else per_row.view(-1, 1)


def row_lengths(lens: Any, b: int, n: int, form: str) -> Any:
    """int32 ``(b*n,)`` visible length of each query row, in query-row order (may be <= 0)."""
    if form == "seq" and n > 1:
        import torch

        offs = torch.arange(1 - n, 1, device=lens.device, dtype=lens.dtype)
        return (lens.view(-1, 1) + offs).view(-1)
    return lens.view(-1)


def clamp1(t: Any) -> Any:
    return t.clamp_min(1)


def shape_of_rows(fn: str, q: Any, lens: Any) -> tuple[int, int, str]:
    """(B, next_n, form) from q and the lengths; form is "seq" (B,), "rows" (B, next_n) or "flat" (B*n, 1)."""
    rows = q.shape[0] * q.shape[1] if q.dim() == 4 else q.shape[0]
    if lens.dim() == 1:
        b = lens.shape[0]
        if q.dim() == 4:
            if q.shape[0] != b:
                raise bad(fn, "context_lens", f"1-D lengths with one entry per sequence: ({q.shape[0]},)", lens)
            return b, q.shape[1], "seq"
        if b == 0 or rows % b:
            raise bad(fn, "context_lens", f"1-D lengths whose count divides the {rows} query rows", lens)
        return b, rows // b, "seq"
    n0, n1 = lens.shape
    if n1 == 1 and n0 == rows:
        b = q.shape[0] if q.dim() == 4 else rows
        return b, (rows // b if b else 1), "flat"
    if n0 * n1 != rows or (q.dim() == 4 and (q.shape[0], q.shape[1]) != (n0, n1)):
        want = f"({q.shape[0]}, {q.shape[1]}) or ({rows}, 1)" if q.dim() == 4 else f"(B, next_n) with B*next_n = {rows}"
        raise bad(fn, "context_lens", f"2-D lengths of shape {want} matching q", lens)
    return n0, n1, "rows"


def lens_only(lens: Any) -> tuple[int, int, str]:
    """(B, next_n, form) from the lengths alone (what the schedule builder knows); next_n of 1-D
    lengths is what the last launch with such lengths had."""
    if lens.dim() == 1:
        return lens.shape[0], STATE.hints.get((1, 0), (1, False))[0], "seq"
    n0, n1 = lens.shape
    if n1 == 1:
        return n0, 1, "flat"
    return n0, n1, "rows"


def hint_key(lens: Any) -> tuple[int, int]:
    return (1, 0) if lens.dim() == 1 else (2, lens.shape[1])
