"""The option groups the command lines share, so that one option means one thing everywhere.

* :func:`add_checkpoint_options`: which weights of an experiment directory
  (``--exp-dir``, ``--epoch``, ``--iter``, ``--avg``, ``--use-averaged-model``):
  ``zipformer_pc.decode`` and ``zipformer_pc.export``;
* :func:`add_search_options`: the search (``--decoding-method``, ``--beam-size``, the LM
  fusion's ``--lm-scale`` / ``--lm-token-bonus`` / ``--lodr-scale``, ``--blank-penalty``,
  ``--questions``): decode, the runtime (``zipformer_pc.transcribe``, ``zipformer_pc.serve``,
  which add ``--hotwords``) and ``scoring/measure_rtf.py``;
* :func:`add_modes_option`: ``--modes``, one syntax everywhere (:func:`parse_modes_option`):
  a comma list of output modes in any order (``P,N``, ``N``, ``P``); empty or ``all``: every
  mode the model has (``both`` is an alias of ``all``, measure_rtf's old word);
* icefall-style booleans (:func:`str2bool`).
"""

import argparse
import math
from pathlib import Path
from typing import Optional, Tuple, Union

#: the searches (as zipformer_pc.layout.DECODING_METHODS names their result folders)
DECODING_METHODS = ("greedy_search", "modified_beam_search")
#: the output modes' names, in the runtime's order (as zipformer_pc.modes.RUNTIME_ORDER)
MODE_NAMES = ("P", "N")
#: ``--modes`` words for every mode the model has (``both``: scoring/measure_rtf.py's old word)
ALL_MODES = ("", "all", "both")


def str2bool(v) -> bool:
    """argparse type for icefall-style booleans: true/false, 1/0, yes/no."""
    if isinstance(v, bool):
        return v
    if v.lower() in ("true", "1", "yes", "y"):
        return True
    if v.lower() in ("false", "0", "no", "n"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {v!r}")


# Chosen on dev with research/search_grid.py (docs/decoding-extras.md, "Blank penalty"): 1.0 is best in PC-WER and
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


# ------------------------------------------------------------------- checkpoints


def add_checkpoint_options(p: argparse.ArgumentParser) -> None:
    """``--exp-dir`` and the weights in it to use: ``--epoch E`` or ``--iter B`` (wins), ``--avg A``,
    ``--use-averaged-model`` (:func:`zipformer_pc.model.loading.averaged_weights`)."""
    g = p.add_argument_group("checkpoint", "which weights of the experiment directory (zipformer_pc.model.loading)")
    g.add_argument("--exp-dir", required=True, type=Path, help="the training's experiment directory")
    g.add_argument("--epoch", type=int, default=0, help="the weights at the end of this epoch (epoch-E.pt)")
    g.add_argument("--iter", type=int, default=0,
                   help="the weights of checkpoint-B.pt instead of an epoch's (> 0 wins over --epoch)")
    g.add_argument("--avg", type=int, default=1, help="average over this many epochs / checkpoints back")
    g.add_argument("--use-averaged-model", type=str2bool, default=True,
                   help="the exact mean of the weights after every batch of the interval (false: the plain "
                        "mean of the checkpoints' final weights, icefall's)")


# ------------------------------------------------------------------------ search


def questions_arg(v: str) -> Union[bool, str]:
    """argparse type of decode's ``--questions``: true / false (the model dir's question model or
    none), or the path of a question model."""
    try:
        return str2bool(v)
    except argparse.ArgumentTypeError:
        if not v:
            raise argparse.ArgumentTypeError("expected true, false or the path of a question model") from None
        return v


def add_search_options(p: argparse.ArgumentParser, where: str = "the model dir", question_paths: bool = False) -> None:
    """``--decoding-method``, ``--beam-size``, the LM fusion options (:func:`add_fusion_options`, the LMs of
    ``where``), ``--blank-penalty`` and ``--questions`` (true / false; with ``question_paths`` also the path
    of a question model, which overrides the model dir's)."""
    g = p.add_argument_group("search", "the search per mode and what it adds (LMs, blank penalty, questions)")
    g.add_argument("--decoding-method", choices=DECODING_METHODS, default="greedy_search",
                   help="search per mode (modified_beam_search: as sherpa-onnx's, --beam-size paths)")
    g.add_argument("--beam-size", type=int, default=4, help="paths of modified_beam_search")
    add_fusion_options(g, where)
    add_blank_penalty_option(g)
    help_ = (f"use the question model of {where} (questions.json.gz, when it has one): P ends the sentences it "
             "reads as questions with ? (false: P as searched)")
    if question_paths:
        g.add_argument("--questions", type=questions_arg, default=True, help=help_ + "; or the path of a "
                       "question model (local/train_questions.py) to use instead")
    else:
        g.add_argument("--questions", type=str2bool, default=True, help=help_)


# ------------------------------------------------------------------------- modes


def parse_modes_option(spec: str) -> Optional[Tuple[str, ...]]:
    """The modes ``--modes`` names, in the order given (``"N,P"`` -> ``("N", "P")``); None for every mode
    the model has (``""``, ``all``, ``both``).  ValueError for anything else (an unknown or repeated mode)."""
    text = spec.strip()
    if text.lower() in ALL_MODES:
        return None
    names = [m.strip().upper() for m in text.split(",")]
    bad = [m for m in names if m not in MODE_NAMES]
    if bad or len(set(names)) != len(names):
        why = f"unknown mode {bad[0]!r}" if bad else "a mode named twice"
        raise ValueError(f"{why} in {spec!r}: give a comma list of {' and '.join(MODE_NAMES)} in any order "
                         f"(P,N, N, P), or all (also empty or both) for every mode the model has")
    return tuple(names)


def modes_type(spec: str) -> Optional[Tuple[str, ...]]:
    """argparse type of ``--modes`` (:func:`parse_modes_option`; a clear usage error otherwise)."""
    try:
        return parse_modes_option(spec)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_modes_option(p: argparse.ArgumentParser, what: str = "searched") -> None:
    """``--modes``: the output modes ``what`` (the parsed value: a tuple of names in the order given, None
    for all)."""
    p.add_argument("--modes", type=modes_type, default="all",
                   help=f"output modes {what}: a comma list of P and N in any order (P,N, N, P); all (or empty; "
                        "both, the old word) for every mode the model has (default: all)")


def selected_modes(wanted: Optional[Tuple[str, ...]], available) -> list:
    """The modes of ``available`` that ``--modes`` (parsed: ``wanted``) picks, in ``wanted``'s order
    (all of ``available`` when ``wanted`` is None)."""
    if wanted is None:
        return list(available)
    return [m for m in wanted if m in available]


def modes_text(wanted: Optional[Tuple[str, ...]]) -> str:
    """``--modes`` as written back (``P,N``, or ``all``)."""
    return "all" if wanted is None else ",".join(wanted)
