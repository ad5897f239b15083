"""decode.py on a tiny trained model: methods, modes, streaming, awkward cuts, results files."""

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from zipformer_pc.decoding.beam_search import greedy_search_batch, modified_beam_search
from zipformer_pc.training.checkpoint import load_model_for_inference
from zipformer_pc.modes import MODE_N, MODE_P

from conftest import make_it_emit

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def decode(trained_tiny_model, corpus, *extra, test_sets=None):
    exp_dir, epoch = trained_tiny_model
    test_sets = test_sets or f"test={corpus / 'fbank' / 'synth_cuts_test.jsonl.gz'}"
    cmd = [sys.executable, "-m", "zipformer_pc.decoding.decode", "--exp-dir", str(exp_dir), "--epoch", str(epoch),
           "--avg", "2", "--bpe-model", str(corpus / "lang_bpe_120" / "bpe.model"), "--test-sets", test_sets, *extra]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    return r


@pytest.mark.parametrize("method", ["greedy_search", "modified_beam_search"])
def test_each_method_and_mode_writes_results(trained_tiny_model, tiny_corpus, method):
    exp_dir, epoch = trained_tiny_model
    penalty = ("--blank-penalty", "1.5") if method == "modified_beam_search" else ()
    r = decode(trained_tiny_model, tiny_corpus, "--decoding-method", method, "--beam-size", "2", *penalty)
    assert "| test set | WER | PuncER | CaseER | PC-WER | PER | WER-C | WER-PC |" in r.stdout
    expected = "cuda:0" if torch.cuda.is_available() else "cpu"
    assert f"Decoding on {expected}" in r.stderr  # --device auto
    out = exp_dir / method
    for mode in ("N", "P"):
        summ = list(out.glob(f"wer-summary-test-{mode}-{method}-*.json"))
        assert summ, f"no summary for mode {mode}"
        s = json.loads(summ[0].read_text())
        assert s["mode"] == mode and s["num_utts"] == 12 and s["rtf"] > 0
        assert s["blank_penalty"] == (1.5 if penalty else 1.0)  # the default, 1.0, adds no suffix
        recogs = list(out.glob(f"recogs-test-{mode}-{method}-*.txt"))[0].read_text().splitlines()
        assert len(recogs) == 2 * 12 and recogs[0].split("\t")[1].startswith("ref=")
        assert list(out.glob(f"errs-test-{mode}-{method}-*.txt"))[0].read_text().startswith("%WER")
    assert list(out.glob(f"results-{method}-*.md"))
    if not penalty:
        assert not list(out.glob("*blank-penalty*")), list(out.glob("*blank-penalty*"))
    else:  # the runtime's option; its effect is tested in test_onnx and test_model
        assert list(out.glob(f"results-{method}-*-blank-penalty-1.5*.md"))
        r = subprocess.run([sys.executable, "-m", "zipformer_pc.decoding.decode", "--exp-dir", str(exp_dir),
                            "--epoch", str(epoch), "--bpe-model", "x", "--test-sets", "t=x", "--blank-penalty", "nan"],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert r.returncode != 0 and "--blank-penalty: blank_penalty must be a finite number" in r.stderr, r.stderr


def first_test_features(corpus, n=3):
    """Padded features (N, T, 80) and their lengths of the corpus's first ``n`` test cuts."""
    from lhotse import load_manifest
    from lhotse.dataset.collation import collate_features

    return collate_features(load_manifest(corpus / "fbank" / "synth_cuts_test.jsonl.gz").subset(first=n))


def test_greedy_equals_beam_search_with_beam_one(trained_tiny_model, tiny_corpus):
    exp_dir, epoch = trained_tiny_model
    model = load_model_for_inference(exp_dir, epoch, 2)
    feats, lens = first_test_features(tiny_corpus)
    make_it_emit(model, feats[0, : lens[0]])  # the fixture model emits (nearly) nothing: equal empty outputs prove nothing
    with torch.no_grad():
        enc, enc_lens = model.encoder(feats, lens)
    for mode in (MODE_N, MODE_P):
        greedy = greedy_search_batch(model, enc, enc_lens, mode)
        assert all(len(h) >= 5 for h in greedy), greedy  # emissions to agree on
        assert greedy == modified_beam_search(model, enc, enc_lens, mode, beam=1)


def test_true_streaming_matches_simulated_streaming(trained_tiny_model, tiny_corpus):
    """The encoder outputs of the two ways agree on test utterances, and decode.py's files of the two are
    the same (the fixture model emits little, so the files alone would prove the plumbing only)."""
    from zipformer_pc.decoding.decode import encode_utterances

    exp_dir, epoch = trained_tiny_model
    model = load_model_for_inference(exp_dir, epoch, 2)
    feats, lens = first_test_features(tiny_corpus)
    with torch.no_grad():
        sim, sim_lens = encode_utterances(model.encoder, feats, lens, 32, 64, streaming=False)
        real, real_lens = encode_utterances(model.encoder, feats, lens, 32, 64, streaming=True)
    assert torch.equal(sim_lens, real_lens) and sim_lens.min() > 10
    for i, n in enumerate(sim_lens.tolist()):
        torch.testing.assert_close(real[i, :n], sim[i, :n], atol=2e-4, rtol=1e-3)
    decode(trained_tiny_model, tiny_corpus, "--chunk-size", "32", "--left-context-frames", "64")
    decode(trained_tiny_model, tiny_corpus, "--chunk-size", "32", "--left-context-frames", "64", "--streaming", "true")
    for mode in ("N", "P"):
        sim = list((exp_dir / "greedy_search").glob(f"recogs-test-{mode}-*-chunk-32-left-64.txt"))[0]
        real = list((exp_dir / "greedy_search").glob(f"recogs-test-{mode}-*-chunk-32-left-64-streaming.txt"))[0]
        assert sim.read_text() == real.read_text()


def test_empty_short_and_long_cuts_decode(trained_tiny_model, tiny_corpus, tmp_path):
    from lhotse import CutSet, load_manifest

    cuts = list(load_manifest(tiny_corpus / "fbank" / "synth_cuts_test.jsonl.gz"))
    tiny = cuts[0].truncate(duration=0.02).with_id("tiny-cut")  # 2 feature frames
    short = cuts[1].truncate(duration=0.3).with_id("short-cut")
    long = cuts[2]
    for c in cuts[3:8]:
        long = long.append(c)  # several utterances back to back: longer than any training cut
    long = long.with_id("long-cut")
    path = tmp_path / "odd.jsonl.gz"
    CutSet.from_cuts([tiny, short, long]).to_file(path)
    r = decode(trained_tiny_model, tiny_corpus, test_sets=f"odd={path}")
    assert "| odd |" in r.stdout
    for extra in (("--chunk-size", "16", "--left-context-frames", "32", "--streaming", "true"),):
        decode(trained_tiny_model, tiny_corpus, *extra, test_sets=f"odd={path}")


def test_cascade_restores_the_n_output_of_a_norm_model(tiny_corpus, tmp_path):
    """--restore-model: the norm model's N output, restored by prepare.sh stage 6's model, is the P output."""
    from zipformer_pc.training.checkpoint import save_checkpoint
    from zipformer_pc.data.tokenizer import Tokenizer
    from zipformer_pc.model.transducer import HeadConfig, build_model, make_model_config

    vocab = Tokenizer(str(tiny_corpus / "lang_bpe_120" / "bpe.model")).vocab_size
    torch.manual_seed(0)
    cfg = make_model_config("tiny", {}, HeadConfig(model_type="norm", vocab_size=vocab, decoder_dim=64, joiner_dim=64))
    model = build_model(cfg)
    with torch.no_grad():  # untrained: make it emit, so the restoration has words to work on
        model.joiners["main"].output_linear.bias[0] = -5.0
    # the bias edit stands in for training: the checkpoint says one update was made
    # (decoding refuses weights that never saw a training step)
    save_checkpoint(tmp_path / "epoch-1.pt", {"model": model.state_dict(), "model_config": cfg,
                                             "batch_idx_train": 1, "optimizer_steps": 1})
    restore = tiny_corpus / "restore" / "p1" / "restore.onnx"
    assert restore.is_file(), "prepare.sh stage 6 did not export the restoration model"
    cmd = [sys.executable, "-m", "zipformer_pc.decoding.decode", "--exp-dir", str(tmp_path), "--epoch", "1", "--avg", "1",
           "--use-averaged-model", "false", "--bpe-model", str(tiny_corpus / "lang_bpe_120" / "bpe.model"),
           "--test-sets", f"test={tiny_corpus / 'fbank' / 'synth_cuts_test.jsonl.gz'}", "--restore-model", str(restore)]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    assert "Model: cascade" in r.stdout
    out = tmp_path / "greedy_search"
    summ = json.loads(next(out.glob("wer-summary-test-P-*cascade.json")).read_text())
    assert summ["model_type"] == "cascade" and summ["punc_er"] is not None
    recogs = next(out.glob("recogs-test-P-*cascade.txt")).read_text()
    n_recogs = next(out.glob("recogs-test-N-*cascade.txt")).read_text()
    from zipformer_pc.runtime.restoration import OnnxRestorer

    def hyps(text):
        return {line.split(":")[0]: " ".join(ast.literal_eval(line.split("hyp=")[1])) for line in text.splitlines() if "\thyp=" in line}

    hyp_p, hyp_n = hyps(recogs), hyps(n_recogs)
    assert hyp_p.keys() == hyp_n.keys() and len(hyp_p) == 12 and hyp_p != hyp_n
    ids = sorted(hyp_n)
    assert [hyp_p[i] for i in ids] == OnnxRestorer(str(restore)).restore([hyp_n[i] for i in ids])
    # refusing a cascade on a model that is not norm
    bad = [c if c != str(tmp_path) else str(tmp_path / "nope") for c in cmd]
    cfg["head"]["model_type"] = "punct"
    save_checkpoint(tmp_path / "p" / "epoch-1.pt", {"model": build_model(cfg).state_dict(), "model_config": cfg,
                                                   "batch_idx_train": 1, "optimizer_steps": 1})
    bad[bad.index(str(tmp_path / "nope"))] = str(tmp_path / "p")
    r = subprocess.run(bad, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode != 0 and "norm model" in r.stderr


def test_device_choice_and_its_errors():
    from zipformer_pc.decoding.decode import pick_device

    assert pick_device("cpu") == torch.device("cpu")
    assert pick_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    for bad in ("tpu", "cuda:notanumber"):
        with pytest.raises(SystemExit, match="--device"):
            pick_device(bad)
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit, match="CUDA is not available"):
            pick_device("cuda")
    else:
        with pytest.raises(SystemExit, match="CUDA device"):
            pick_device(f"cuda:{torch.cuda.device_count()}")


def test_beam_search_fuses_a_token_lm(trained_tiny_model, tiny_corpus, tmp_path):
    """With an LM, modified beam search scores each token with it too: an LM that
    knows only two pieces the search never chose without it (every other one
    has log10 probability -99) makes it emit those and nothing else.  decode.py --lm-dir fuses lm-MODE.arpa.gz into
    the modes it has one for and names the fusion in its result files."""
    from zipformer_pc.data.tokenizer import Tokenizer
    from zipformer_pc.lm import NgramLm

    exp_dir, epoch = trained_tiny_model
    model = load_model_for_inference(exp_dir, epoch, 2)
    tok = Tokenizer(str(tiny_corpus / "lang_bpe_120" / "bpe.model"))
    pieces = tok.pieces
    torch.manual_seed(0)
    feats, lens = torch.randn(2, 500, 80), torch.tensor([500, 420])
    enc, enc_lens = model.encoder(feats, lens)
    plain = modified_beam_search(model, enc, enc_lens, MODE_P, beam=4, unk_id=tok.unk_id)
    emitted = {i for h in plain for i in h}
    assert emitted, plain
    allowed = [pieces[i] for i in range(3, len(pieces)) if i not in emitted][:2]  # pieces it never chose
    lm = NgramLm.train([allowed * 3, allowed[::-1]], 2)
    lm.write_arpa(tmp_path / "lm-P.arpa.gz")
    fused = modified_beam_search(model, enc, enc_lens, MODE_P, beam=4, unk_id=tok.unk_id, lm=lm.bind(pieces),
                                 lm_scale=1.0, lm_token_bonus=20.0)
    assert all(fused) and {pieces[i] for h in fused for i in h} <= set(allowed), fused
    # LODR with the LM itself as the bigram, at the LM's weight and no bonus: the search without the LM
    bound = lm.bind(pieces)
    assert modified_beam_search(model, enc, enc_lens, MODE_P, beam=4, unk_id=tok.unk_id,
                                lm=bound.with_lodr(bound, 1.0), lm_scale=1.0, lm_token_bonus=0.0) == plain

    decode(trained_tiny_model, tiny_corpus, "--decoding-method", "modified_beam_search", "--lm-dir", str(tmp_path))
    out = exp_dir / "modified_beam_search"
    assert list(out.glob("results-modified_beam_search-*-lm-0.5-bonus-1*.md"))
    assert not list(out.glob("*-lodr-*"))
    lm.write_arpa(tmp_path / "lodr-P.arpa.gz")  # LODR bigrams in the dir: the runtime's LODR defaults
    decode(trained_tiny_model, tiny_corpus, "--decoding-method", "modified_beam_search", "--lm-dir", str(tmp_path))
    assert list(out.glob("results-modified_beam_search-*-lm-0.6-bonus-0.5-lodr-0.25*.md"))
    r = subprocess.run([sys.executable, "-m", "zipformer_pc.decoding.decode", "--exp-dir", str(exp_dir), "--epoch",
                        str(epoch), "--bpe-model", "x", "--test-sets", "t=x", "--lm-dir", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "--lm-dir needs --decoding-method modified_beam_search" in r.stderr


def test_questions_rewrite_the_p_output_as_the_runtime_does(trained_tiny_model, tiny_corpus, tmp_path, monkeypatch):
    """--questions applies a question model (zipformer_pc.questions) to the P hypotheses before
    scoring, in files of their own; N is untouched, and a run without P is refused.  (The tiny
    model's P output need not end a sentence, so its hypotheses get one: "... Do you like it.")"""
    from zipformer_pc.decoding import decode as decode_module
    from zipformer_pc.questions import QuestionModel

    exp_dir, epoch = trained_tiny_model
    QuestionModel({"f1=do": 3.0}, -1.0).save(tmp_path / "questions.json.gz")  # "do ..." is a question
    real = decode_module.decode_set

    def with_a_question(*args, **kwargs):
        res = real(*args, **kwargs)
        res["hyps"][MODE_P] = {c: f"{h} Do you like it. It is late." for c, h in res["hyps"][MODE_P].items()}
        return res

    monkeypatch.setattr(decode_module, "decode_set", with_a_question)
    out = tmp_path / "exp"
    shutil.copytree(exp_dir, out, ignore=shutil.ignore_patterns("greedy_search", "modified_beam_search"))
    argv = ["decode", "--exp-dir", str(out), "--epoch", str(epoch), "--avg", "2", "--bpe-model",
            str(tiny_corpus / "lang_bpe_120" / "bpe.model"), "--test-sets",
            f"test={tiny_corpus / 'fbank' / 'synth_cuts_test.jsonl.gz'}"]

    def hyps(mode):
        (f,) = (out / "greedy_search").glob(f"recogs-test-{mode}-greedy_search-*.txt")
        f.rename(f.with_suffix(".seen"))
        return f.name, {line.split(":\t")[0]: " ".join(ast.literal_eval(line.split("hyp=")[1]))
                        for line in f.with_suffix(".seen").read_text().splitlines() if "\thyp=" in line}

    monkeypatch.setattr(sys, "argv", argv)
    decode_module.main()
    _, plain_p = hyps("P")
    _, plain_n = hyps("N")
    monkeypatch.setattr(sys, "argv", argv + ["--questions", str(tmp_path / "questions.json.gz")])
    decode_module.main()
    name, asked_p = hyps("P")
    assert name.endswith("-questions.txt") and hyps("N")[1] == plain_n
    assert all(h.endswith("Do you like it. It is late.") for h in plain_p.values())
    assert asked_p == {c: h.replace("Do you like it.", "Do you like it?") for c, h in plain_p.items()}
    (summ,) = (out / "greedy_search").glob("wer-summary-test-P-greedy_search-*-questions.json")
    assert json.loads(summ.read_text())["questions"] == str(tmp_path / "questions.json.gz")
    monkeypatch.setattr(sys, "argv", argv + ["--modes", "N", "--questions", str(tmp_path / "questions.json.gz")])
    with pytest.raises(SystemExit, match="no P mode is decoded"):
        decode_module.main()
