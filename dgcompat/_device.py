"""Every question dgcompat asks of the CUDA device, each safe where CUDA is compiled in but unusable.

A CUDA build of torch on a machine without a usable driver or GPU (most CI runners, or
``CUDA_VISIBLE_DEVICES=""`` on a GPU host) raises on most CUDA calls, and a call that initializes
CUDA creates a context before the engine's first kernel (which breaks workers forked afterwards). So:

- nothing here initializes CUDA: the device is asked only once the process has initialized CUDA
  itself (:func:`initialized`), or through NVML, which needs no context;
- the capture-status query is made only for calls on CUDA tensors (:func:`capture_probe`): a CPU
  tensor cannot be under capture, and a CUDA tensor proves CUDA usable;
- each answer that cannot change is decided once, and a failure is an answer (None), never an error.

torch is read from ``sys.modules``: callers have imported it (every question concerns tensors or a
process that already uses torch); without torch every answer is "nothing known".
"""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["MODEL_SMS", "initialized", "sm_count", "arch", "nvml_arch", "capture_probe", "capture_id", "reset"]

#: The SM count assumed where CUDA is not initialized (an H200's; the reference backend models that device).
MODEL_SMS = 132


def _torch() -> Any:
    return sys.modules.get("torch")


def initialized() -> bool:
    """Whether this process has initialized CUDA through torch (never initializes it; False without torch)."""
    torch = _torch()
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_initialized())
    except Exception:  # noqa: BLE001 - a broken CUDA setup answers "not initialized"
        return False


def sm_count() -> int:
    """The current CUDA device's SM count once CUDA is initialized, else :data:`MODEL_SMS`."""
    if initialized():
        torch = _torch()
        try:
            return int(torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count)
        except Exception:  # noqa: BLE001, S110 - initialized but unusable: the model's count
            pass
    return MODEL_SMS


def arch() -> str | None:
    """The current device's ``smXY`` once CUDA is initialized, else NVML's answer (:func:`nvml_arch`), else None."""
    if initialized():
        try:
            major, minor = _torch().cuda.get_device_capability()
        except Exception:  # noqa: BLE001 - a broken CUDA setup must not break planning
            return None
        return f"sm{major}{minor}"
    return nvml_arch()


@functools.lru_cache(maxsize=1)
def nvml_arch() -> str | None:
    """The one compute capability of every GPU NVML sees (no CUDA context), or None (decided once)."""
    try:
        import pynvml  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            found = {pynvml.nvmlDeviceGetCudaComputeCapability(pynvml.nvmlDeviceGetHandleByIndex(i))
                     for i in range(pynvml.nvmlDeviceGetCount())}
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no driver, no permission: no answer
        return None
    if len(found) != 1:
        return None  # mixed GPUs: which one the engine uses is known only once CUDA is initialized
    major, minor = found.pop()
    return f"sm{major}{minor}"


def _never() -> bool:
    return False


#: device type -> the function telling whether its current stream is being captured (decided once per type).
_PROBES: dict[str, Callable[[], bool]] = {}


def capture_probe(device: Any) -> Callable[[], bool]:
    """The capture-status query for calls on tensors of ``device``: torch's for CUDA, a constant False for
    every other device type. Called with a device a tensor lives on, so CUDA is usable whenever the CUDA
    query is handed out; the query itself creates no context."""
    kind = device.type
    probe = _PROBES.get(kind)
    if probe is None:
        probe = _torch()._C._cuda_isCurrentStreamCapturing if kind == "cuda" else _never
        _PROBES[kind] = probe
    return probe


_CU: list[Any] = []  # [cuStreamGetCaptureInfo, or None where libcuda is absent]


def capture_id() -> int | None:
    """The CUDA driver's id of the capture underway on the current stream (None if unavailable).

    Only called while :func:`capture_probe` says a capture is underway (CUDA is usable then).
    ``cuStreamGetCaptureInfo`` is called with every optional out-pointer NULL past the id, which
    matches each of its ABI revisions.
    """
    if not _CU:
        try:
            fn = ctypes.CDLL("libcuda.so.1").cuStreamGetCaptureInfo
            fn.restype = ctypes.c_int
            _CU.append(fn)
        except (OSError, AttributeError):
            _CU.append(None)
    fn = _CU[0]
    if fn is None:
        return None
    status = ctypes.c_int(0)
    cid = ctypes.c_ulonglong(0)
    try:
        handle = ctypes.c_void_p(_torch().cuda.current_stream().cuda_stream)
        err = fn(handle, ctypes.byref(status), ctypes.byref(cid), None, None, None, None)
    except Exception:  # noqa: BLE001 - any failure: the caller falls back to its own count
        return None
    return int(cid.value) if err == 0 and status.value == 1 else None


def reset() -> None:
    """Forget every decided answer (tests)."""
    nvml_arch.cache_clear()
    _PROBES.clear()
