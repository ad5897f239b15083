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


# Chosen on dev with benchmarks/search_grid.py (README "Blank penalty"): 1.0 is best in PC-WER and
# PER for greedy search; beam search with the LMs is level in PC-WER from 0 to 1.0 and best in PER at 1.0.  The default of the runtime (command lines
# and StreamingRecognizer) and of the recipe's decode.py; the search functions themselves take 0.
DEFAULT_BLANK_PENALTY = 1.0


def add_blank_penalty_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--blank-penalty", type=float, default=DEFAULT_BLANK_PENALTY,
                   help="subtracted from the blank logit of every joiner output before the search picks "
                        "(sherpa-onnx's and icefall's blank penalty): > 0 lets tokens out that blank narrowly "
                        "beats on each of several frames, as the marks of P often are for voices unlike "
                        "espeak-ng's (0: none; default: %(default)s, chosen on dev)")


def check_blank_penalty(blank_penalty: float) -> float:
    """``blank_penalty`` as a float; a clear error when it is not a finite number."""
    if not math.isfinite(blank_penalty):
        raise ValueError(f"blank_penalty must be a finite number, got {blank_penalty}")
    return float(blank_penalty)
