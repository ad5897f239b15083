"""Option parsing helpers shared by the command lines (icefall-style booleans,
the search options that decode.py and the runtime both take)."""

import argparse
import math
from typing import Tuple


def str2bool(v) -> bool:
    """argparse type for icefall-style booleans: true/false, 1/0, yes/no."""
    if isinstance(v, bool):
        return v
    if v.lower() in ("true", "1", "yes", "y"):
        return True
    if v.lower() in ("false", "0", "no", "n"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {v!r}")


# Chosen on dev with benchmarks/search_grid.py (docs/decoding-extras.md, "Blank penalty"): 1.0 is best in PC-WER and
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


def add_fusion_options(p: argparse.ArgumentParser, where: str) -> None:
    """``--lm-scale``, ``--lm-token-bonus`` and ``--lodr-scale`` of beam search's LM fusion, left None
    for :func:`resolve_fusion` to fill from what ``where`` (the LMs' folder, as the help names it) holds."""
    from zipformer_pc.lm import fusion_defaults

    lm, bonus, _ = fusion_defaults(False)
    lodr_lm, lodr_bonus, lodr = fusion_defaults(True)
    p.add_argument("--lm-scale", type=float, default=None,
                   help="modified_beam_search adds this times the token LM's log probability (lm-P.arpa.gz, "
                        f"lm-N.arpa.gz in {where}) to each token's score (default: {lodr_lm} with the LODR "
                        f"bigrams lodr-P/N.arpa.gz there too, {lm} with the LMs alone, else 0; 0: no LM)")
    p.add_argument("--lm-token-bonus", type=float, default=None,
                   help="added to each token's score with the LM (it offsets the LM's cost per token, which "
                        f"would otherwise favour dropping words; default: {lodr_bonus} with LODR, else {bonus})")
    p.add_argument("--lodr-scale", type=float, default=None,
                   help=f"with the LM, subtract this times the log probability of the LODR bigram of {where} "
                        f"(lodr-P.arpa.gz, lodr-N.arpa.gz: the training text's) (default: {lodr} when it has "
                        "them, else 0; 0: plain shallow fusion)")


def resolve_fusion(args: argparse.Namespace, has_lm: bool, has_lodr: bool) -> Tuple[float, float, float]:
    """``(lm_scale, lm_token_bonus, lodr_scale)``: the options of :func:`add_fusion_options` as given,
    the defaults (``zipformer_pc.lm.fusion_defaults``) for those left unset: no LM without LMs to fuse,
    LODR's when the bigrams are there too."""
    from zipformer_pc.lm import fusion_defaults

    scale, bonus, lodr = fusion_defaults(has_lm and has_lodr)
    scale = (scale if has_lm else 0.0) if args.lm_scale is None else args.lm_scale
    bonus = bonus if args.lm_token_bonus is None else args.lm_token_bonus
    lodr = (lodr if scale > 0 else 0.0) if args.lodr_scale is None else args.lodr_scale
    return scale, bonus, lodr
