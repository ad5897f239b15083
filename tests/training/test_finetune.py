"""Fine-tuning as the main job does it: the init checkpoint's sizes, a frozen encoder, the encoder
cache, the batch budget and the shipped tokenizer."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import TRAINING_TIMEOUT

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def train_cmd(corpus: Path, exp_dir: Path, *extra: str, subset: str = "p0.5"):
    return [sys.executable, "-m", "zipformer_pc.training.train", "--exp-dir", str(exp_dir),
            "--train-cuts", str(corpus / "fbank" / f"synth_cuts_train_{subset}.jsonl.gz"),
            "--valid-cuts", str(corpus / "fbank" / "synth_cuts_dev.jsonl.gz"),
            "--bpe-model", str(corpus / "lang_bpe_120" / "bpe.model"), "--max-duration", "40",
            "--log-interval", "1", "--valid-interval", "1000", "--tensorboard", "false", "--num-threads", "1", *extra]


def run(cmd):
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=TRAINING_TIMEOUT)
    assert r.returncode == 0, r.stderr[-4000:]
    return r
SHIPPED_BPE = ROOT / "egs" / "synth" / "pretrained" / "bpe.model"


@pytest.fixture(scope="module")
def seed_ckpt(tiny_corpus, tmp_path_factory) -> Path:
    """A norm model whose encoder differs from the tiny default (no ConvNeXt block), as the shipped one."""
    exp = tmp_path_factory.mktemp("seed")
    run(train_cmd(tiny_corpus, exp, "--model-type", "norm", "--num-epochs", "1", "--max-batches", "2",
                  "--save-every-n", "2", "--convnext-hidden-ratio", "0", "--decoder-dim", "64", "--joiner-dim", "64"))
    return exp / "checkpoint-2.pt"


def fails(cmd):
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=TRAINING_TIMEOUT)
    assert r.returncode != 0, r.stderr[-2000:]
    return r.stderr


def test_init_from_takes_the_sizes_of_the_init_model(tiny_corpus, tmp_path, seed_ckpt):
    # no --convnext-hidden-ratio or --decoder-dim given: the init checkpoint's sizes are used
    r = run(train_cmd(tiny_corpus, tmp_path, "--model-type", "conditioned", "--num-epochs", "1", "--max-batches", "1",
                      "--save-every-n", "1", "--init-from", str(seed_ckpt), "--init-modules", "encoder,decoders,joiners"))
    assert "its encoder and predictor/joiner sizes are used" in r.stderr
    ck = torch.load(tmp_path / "checkpoint-1.pt", weights_only=False)
    assert ck["model_config"]["encoder"]["convnext_hidden_ratio"] == 0
    assert ck["model_config"]["head"]["decoder_dim"] == 64 and ck["model_config"]["head"]["model_type"] == "conditioned"
    # another tokenizer: refused with the reason, before any training
    # (the --bpe-model given last replaces train_cmd's)
    err = fails(train_cmd(tiny_corpus, tmp_path / "bad", "--init-from", str(seed_ckpt), "--max-batches", "1",
                          "--bpe-model", str(SHIPPED_BPE)))
    assert "has 120 tokens" in err and "256" in err


def test_frozen_encoder_trains_the_heads_only(tiny_corpus, tmp_path, seed_ckpt):
    r = run(train_cmd(tiny_corpus, tmp_path, "--model-type", "conditioned", "--num-epochs", "1", "--max-batches", "2",
                      "--save-every-n", "2", "--init-from", str(seed_ckpt), "--init-modules",
                      "encoder,decoders,joiners,simple_am_proj,simple_lm_proj", "--freeze-encoder", "true"))
    assert "--freeze-encoder: the encoder is not trained" in r.stderr
    init = torch.load(seed_ckpt, weights_only=False)["model"]
    ft = torch.load(tmp_path / "checkpoint-2.pt", weights_only=False)["model"]
    enc = [k for k in ft if k.startswith("encoder.")]
    assert enc and all(torch.equal(ft[k], init[k]) for k in enc)
    assert not torch.equal(ft["joiners.main.output_linear.weight"], init["joiners.main.output_linear.weight"])


@pytest.mark.slow
def test_encoder_cache_holds_the_streaming_encoder_outputs_and_replaces_the_encoder(tiny_corpus, tmp_path, seed_ckpt):
    from lhotse import CutSet, load_manifest_lazy
    from lhotse.dataset.collation import collate_features

    from zipformer_pc.decoding.decode import encode_utterances
    from zipformer_pc.features import encoder_frames, tail_padded_frames
    from zipformer_pc.training.encoder_cache import EncoderCache, load_frozen_encoder

    train = tiny_corpus / "fbank" / "synth_cuts_train_p1.jsonl.gz"
    cache_path = tmp_path / "cache.pt"
    cmd = [sys.executable, "-m", "zipformer_pc.training.encoder_cache", "--init-from", str(seed_ckpt),
           "--cuts", str(train), "--output", str(cache_path), "--chunk-size", "32", "--left-context-frames", "128"]
    run(cmd)
    assert "is up to date" in run(cmd).stderr  # idempotent

    # the cached outputs are what decoding sees: the encoder run alone on each cut and its tail
    # silence, chunk by chunk (chunk 32, left 128), as the streaming runtime runs it
    cache = EncoderCache(cache_path, seed_ckpt)
    encoder, _ = load_frozen_encoder(seed_ckpt)
    cuts = list(load_manifest_lazy(train))
    for cut in cuts[:3]:
        feats, lens = collate_features(CutSet.from_cuts([cut]))
        with torch.no_grad():
            out, out_lens = encode_utterances(encoder, feats, lens, 32, 128, streaming=True)
        assert int(out_lens[0]) == encoder_frames(tail_padded_frames(int(lens[0]), 32)) > encoder_frames(int(lens[0]))
        got, got_lens = cache.lookup([cut.id], lens)
        assert int(got_lens[0]) == int(out_lens[0])
        torch.testing.assert_close(got[0], out[0], atol=2e-2, rtol=1e-2)  # float16 storage

    common = ("--model-type", "conditioned", "--num-epochs", "1", "--max-batches", "2", "--save-every-n", "2",
              "--init-from", str(seed_ckpt), "--init-modules", "encoder,decoders,joiners,simple_am_proj,simple_lm_proj",
              "--freeze-encoder", "true")
    r = run(train_cmd(tiny_corpus, tmp_path / "ft", *common, "--encoder-cache", str(cache_path), subset="p1"))
    assert "the encoder does not run in training" in r.stderr
    ck = torch.load(tmp_path / "ft" / "checkpoint-2.pt", weights_only=False)["model"]
    init = torch.load(seed_ckpt, weights_only=False)["model"]
    assert all(torch.equal(ck[k], init[k]) for k in ck if k.startswith("encoder."))

    # a cache of other weights, a cache that lacks training cuts, a cache without a frozen encoder: refused
    other = tmp_path / "other.pt"
    run(train_cmd(tiny_corpus, tmp_path / "other", "--model-type", "norm", "--num-epochs", "1", "--max-batches", "1",
                  "--save-every-n", "1", "--convnext-hidden-ratio", "0", "--decoder-dim", "64", "--joiner-dim", "64",
                  "--seed", "7"))
    (tmp_path / "other" / "checkpoint-1.pt").rename(other)
    err = fails(train_cmd(tiny_corpus, tmp_path / "x1", "--model-type", "conditioned", "--max-batches", "1",
                          "--init-from", str(other), "--freeze-encoder", "true", "--encoder-cache", str(cache_path),
                          subset="p1"))
    assert "--encoder-cache:" in err and "make it again" in err
    dev_cache = tmp_path / "dev_cache.pt"
    run([*cmd[:6], str(tiny_corpus / "fbank" / "synth_cuts_dev.jsonl.gz"), "--output", str(dev_cache)])
    err = fails(train_cmd(tiny_corpus, tmp_path / "x2", "--model-type", "conditioned", "--max-batches", "1",
                          "--init-from", str(seed_ckpt), "--freeze-encoder", "true", "--encoder-cache", str(dev_cache),
                          subset="p1"))
    assert "lacks" in err and "training cuts" in err
    err = fails(train_cmd(tiny_corpus, tmp_path / "x3", "--model-type", "conditioned", "--max-batches", "1",
                          "--init-from", str(seed_ckpt), "--encoder-cache", str(cache_path), subset="p1"))
    assert "--encoder-cache needs --freeze-encoder true" in err


def test_the_batch_budget_ends_with_a_checkpoint_and_a_finished_run_does_nothing(tiny_corpus, tmp_path):
    # the tiny corpus has ~6 batches of 40 s per epoch: 9 batches cross an epoch end
    args = ("--model-type", "norm", "--num-epochs", "100", "--max-batches", "9", "--save-every-n", "4",
            "--valid-at-epoch-end", "false")
    r = run(train_cmd(tiny_corpus, tmp_path, *args))
    assert "Reached --max-batches 9: stopping" in r.stderr
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*.pt")) == [
        "checkpoint-4.pt", "checkpoint-8.pt", "checkpoint-9.pt"]
    assert "validation: off (--valid-at-epoch-end false)" in r.stderr  # the epoch end computed no validation loss
    r = run(train_cmd(tiny_corpus, tmp_path, *args, "--start-batch", "9"))
    assert "Reached --max-batches 9 already: nothing to do" in r.stderr
    assert torch.load(tmp_path / "checkpoint-9.pt", weights_only=False)["batch_idx_train"] == 9


def test_train_bpe_can_reuse_a_trained_tokenizer(tiny_corpus, tmp_path):
    import sentencepiece as spm

    lang = tmp_path / "lang"
    run([sys.executable, "local/train_bpe.py", "--cuts", str(tiny_corpus / "fbank" / "synth_cuts_train.jsonl.gz"),
         "--lang-dir", str(lang), "--bpe-model", str(SHIPPED_BPE)])
    assert (lang / "bpe.model").read_bytes() == SHIPPED_BPE.read_bytes()
    sp = spm.SentencePieceProcessor(model_file=str(SHIPPED_BPE))
    tokens = (lang / "tokens.txt").read_text().splitlines()
    assert len(tokens) == sp.get_piece_size() and tokens[0] == "<blk> 0"
    assert tokens == (ROOT / "egs" / "synth" / "pretrained" / "tokens.txt").read_text().splitlines()
    err = fails([sys.executable, "local/train_bpe.py", "--cuts", str(tiny_corpus / "fbank" / "synth_cuts_train.jsonl.gz"),
                 "--lang-dir", str(tmp_path / "l2"), "--bpe-model", str(tmp_path / "missing.model")])
    assert "--bpe-model" in err and "does not exist" in err
