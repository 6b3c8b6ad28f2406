"""argparse value types shared by the sweep's and the cluster's options."""

from __future__ import annotations

import argparse


def int_list(text: str) -> tuple[int, ...]:
    """ "1,2,4" -> (1, 2, 4); a clear argparse error for anything else or an empty list."""
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one value")
    return values
