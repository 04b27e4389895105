"""The GPU runner's output: whole lines from any thread (:func:`say`) and long text cut to one line (:func:`short`)."""

from __future__ import annotations

import threading

__all__ = ["say", "short"]

_print_lock = threading.Lock()


def say(text: str) -> None:
    """Print ``text`` and flush, one caller at a time (subjects run in threads side by side)."""
    with _print_lock:
        print(text, flush=True)


def short(text: str, limit: int = 800) -> str:
    """``text`` on one line (whitespace runs folded), cut to ``limit`` characters with ``...``."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
