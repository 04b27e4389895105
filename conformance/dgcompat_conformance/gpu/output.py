"""The GPU runner's output: whole lines from any thread (:func:`say`)."""

from __future__ import annotations

import threading

__all__ = ["say"]

_print_lock = threading.Lock()


def say(text: str) -> None:
    """Print ``text`` and flush, one caller at a time (subjects run in threads side by side)."""
    with _print_lock:
        print(text, flush=True)
