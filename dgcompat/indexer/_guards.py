"""The repeat call's metadata check: q, weights and kv_cache have exactly the planned type, dtype, device, sizes, strides."""

from __future__ import annotations

import sys
from typing import Any
from typing import Callable

from ._state import STATE

__all__ = ["same_metadata", "tensor_guards", "probe_tensor_guards"]


def same_metadata(*ts: Any) -> Callable[..., bool]:
    """``f(*xs)``: whether ``xs`` have exactly the type, dtype, device, sizes and strides of ``ts``.

    torch's C++ tensor guard where it is present and behaves as checked (:func:`tensor_guards`): one call
    for every tensor, about the cost of two attribute reads; the same comparison in Python otherwise.
    Neither keeps ``ts`` alive.
    """
    guards = tensor_guards()
    if guards is not None:
        check: Callable[..., bool] = guards(*ts, dynamic_dims_sizes=[list(t.shape) for t in ts],
                                            dynamic_dims_strides=[list(t.stride()) for t in ts]).check
        return check
    metas = tuple((type(t), t.shape, t.stride(), t.dtype, t.device) for t in ts)

    def same(*xs: Any) -> bool:
        return len(xs) == len(metas) and all(
            type(x) is m[0] and x.shape == m[1] and x.stride() == m[2] and x.dtype is m[3] and x.device == m[4]
            for x, m in zip(xs, metas))
    return same


def tensor_guards() -> Any:
    """torch's tensor guard class where it is usable (probed once), else None."""
    if not STATE.tensor_guards_probed:
        STATE.tensor_guards = probe_tensor_guards()
        STATE.tensor_guards_probed = True
    return STATE.tensor_guards


def probe_tensor_guards() -> Any:
    """``torch._C._dynamo.guards.TensorGuards`` if it checks exactly what dgcompat relies on (tried on CPU
    tensors: same metadata passes; another dtype, size, stride, device type or a non-tensor fails)."""
    torch = sys.modules["torch"]
    try:
        cls = torch._C._dynamo.guards.TensorGuards
        a = torch.empty(2, 3)
        check = cls(a, dynamic_dims_sizes=[[2, 3]], dynamic_dims_strides=[[3, 1]]).check
        ok = (check(torch.empty(2, 3)) is True and check(torch.empty(3, 2).t()) is False
              and check(torch.empty(2, 4)[:, :3]) is False and check(torch.empty(2, 2)) is False
              and check(torch.empty(2, 3, dtype=torch.float64)) is False
              and check(torch.empty(2, 3, device="meta")) is False and check(None) is False)
    except Exception:  # absent or changed: the Python comparison
        return None
    return cls if ok else None
