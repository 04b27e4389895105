"""Argument types the commands share: a usage error (exit 2) instead of a nonsensical run."""

from __future__ import annotations

import argparse

__all__ = ["positive_int", "positive_seconds"]


def positive_int(text: str) -> int:
    """A whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number")
    return value


def positive_seconds(text: str) -> float:
    """A finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is not a positive, finite number of seconds")
    return value
