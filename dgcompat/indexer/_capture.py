"""Whether a paged call is being captured into a CUDA graph, and which capture: the capture token.

The questions themselves are :attr:`~dgcompat.indexer._state.IndexerState.probe` (the capture-status
query of a device type, :func:`dgcompat._device.capture_probe`: only CUDA tensors ask CUDA) and
``driver_id`` (the driver's capture id).
"""

from __future__ import annotations

from typing import Any

from ._state import STATE

__all__ = ["capture_state"]


def capture_state(device: Any) -> Any:
    """None outside CUDA-graph capture, else a token naming the capture underway on the current stream.

    Only a call on CUDA tensors asks CUDA anything (a CPU tensor cannot be under capture), so a CUDA build
    of torch without a usable driver or device is never queried; the question itself creates no context.
    """
    if not STATE.probe(device)():
        STATE.was_capturing = False
        return None
    if not STATE.was_capturing:
        # A new capture began since the last call dgcompat saw outside one (the token's fallback when the
        # driver's capture id is unavailable; back-to-back captures without an eager call share it).
        STATE.epoch += 1
        STATE.was_capturing = True
    cid = STATE.driver_id()
    return ("capture", cid if cid is not None else STATE.epoch)
