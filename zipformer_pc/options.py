"""Option parsing helpers shared by the command lines (icefall-style booleans)."""

import argparse


def str2bool(v) -> bool:
    """argparse type for icefall-style booleans: true/false, 1/0, yes/no."""
    if isinstance(v, bool):
        return v
    if v.lower() in ("true", "1", "yes", "y"):
        return True
    if v.lower() in ("false", "0", "no", "n"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {v!r}")
