"""Option parsing helpers shared by the command lines (icefall-style booleans,
the search options that decode.py and the runtime both take)."""

import argparse
import math


def str2bool(v) -> bool:
    """argparse type for icefall-style booleans: true/false, 1/0, yes/no."""
    if isinstance(v, bool):
        return v
    if v.lower() in ("true", "1", "yes", "y"):
        return True
    if v.lower() in ("false", "0", "no", "n"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {v!r}")


def add_blank_penalty_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--blank-penalty", type=float, default=0.0,
                   help="subtracted from the blank logit of every joiner output before the search picks "
                        "(sherpa-onnx's and icefall's blank penalty): > 0 lets tokens out that blank narrowly "
                        "beats on each of several frames, as the marks of P often are for voices unlike "
                        "espeak-ng's (0: none)")


def check_blank_penalty(blank_penalty: float) -> float:
    """``blank_penalty`` as a float; a clear error when it is not a finite number."""
    if not math.isfinite(blank_penalty):
        raise ValueError(f"blank_penalty must be a finite number, got {blank_penalty}")
    return float(blank_penalty)
