"""train.py option defaults per encoder (fast)."""

from zipformer_pc.train import TRAINING_DEFAULTS, apply_training_defaults, get_parser

BASE = ["--train-cuts", "t.jsonl.gz", "--valid-cuts", "v.jsonl.gz", "--bpe-model", "b.model", "--exp-dir", "x"]


def parse(*extra):
    args = get_parser().parse_args(BASE + list(extra))
    return args, apply_training_defaults(args)


def test_each_encoder_gets_its_own_defaults_and_the_command_line_wins():
    tiny, filled = parse("--encoder", "tiny", "--base-lr", "0.02")
    assert tiny.base_lr == 0.02 and "base_lr" not in filled  # given: kept
    for k, v in TRAINING_DEFAULTS["tiny"].items():
        if k != "base_lr":
            assert getattr(tiny, k) == v and filled[k] == v, k
    paper, _ = parse("--encoder", "paper")
    # icefall's LibriSpeech settings for the paper-size model
    assert (paper.loss, paper.spec_augment, paper.warmup_batches, paper.lr_epochs, paper.ctc_loss_scale) == \
        ("auto", True, 500.0, 3.5, 0.0)
    # the two tables differ where the CPU measurements say so
    assert TRAINING_DEFAULTS["tiny"]["loss"] == "pruned" and TRAINING_DEFAULTS["tiny"]["spec_augment"] is False
    # a false boolean given on the command line is not mistaken for "unset"
    on, _ = parse("--encoder", "tiny", "--spec-augment", "true")
    off, _ = parse("--encoder", "paper", "--spec-augment", "false")
    assert on.spec_augment is True and off.spec_augment is False
    assert set(TRAINING_DEFAULTS["tiny"]) == set(TRAINING_DEFAULTS["paper"])
