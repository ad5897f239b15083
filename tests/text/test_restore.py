"""Punctuation + truecasing restoration: labels, training, lambda, ONNX, P' manifests, CLIs."""

import gzip
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import text_cut

from zipformer_pc.data.references import AUTO_PUNCT_KEY, P_KEY
from zipformer_pc.restoration.apply import cascade_restore
from zipformer_pc.restoration.data import build_mix_lexicon, encode_examples, make_batches, prepare_examples, train_sentencepiece
from zipformer_pc.restoration.evaluate import evaluate_restorer
from zipformer_pc.restoration.export import export_onnx
from zipformer_pc.restoration.model import (
    RestorationConfig,
    RestorationModel,
    Restorer,
    load_restoration_checkpoint,
    make_meta,
    save_restoration_checkpoint,
)
from zipformer_pc.restoration.train import RestorationTrainConfig, restoration_loss, train_model
from zipformer_pc.runtime.restoration import (
    AUC,
    LC,
    MIX,
    UC,
    OnnxRestorer,
    PieceEncoder,
    apply_labels,
    case_class,
    labels_from_p,
    punct_classes,
)
from zipformer_pc.text import DEFAULT_PUNCT, PunctConfig, normalized, punctuated

ROOT = Path(__file__).resolve().parents[2]
TINY = dict(d_model=64, num_layers=2, num_heads=4, ff_dim=128, kernel_size=3, dropout=0.0)

FILLER = ("the house was near river and garden she said we saw it with her father in morning "
          "letter came from town for you long walk after dinner").split()


def synthetic_sentences(n: int, seed: int):
    """P lines with a trivially learnable pattern: what/who ... ?, else ... .; first word and Emma capitalised."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        question = rng.random() < 0.5
        first = rng.choice(["what", "who"] if question else ["then", "so", "later", "there"])
        words = [first] + rng.sample(FILLER, rng.randint(3, 7))
        if rng.random() < 0.5:
            words.insert(rng.randint(1, len(words)), "emma")
        words = [w.capitalize() if w == "emma" else w for w in words]
        words[0] = words[0].capitalize()
        out.append(" ".join(words) + ("?" if question else "."))
    return out


@pytest.fixture(scope="module")
def trained():
    """A tiny model trained on the synthetic pattern: (restorer, held-out P lines, spm model, meta)."""
    torch.set_num_threads(1)
    train_lines = synthetic_sentences(400, seed=1)
    test_lines = synthetic_sentences(40, seed=2)
    train_ex, _ = prepare_examples(train_lines, DEFAULT_PUNCT)
    spm_model = train_sentencepiece([" ".join(e.words) for e in train_ex], 60)
    meta = make_meta(DEFAULT_PUNCT, build_mix_lexicon(train_lines, DEFAULT_PUNCT))
    cfg = RestorationConfig(vocab_size=PieceEncoder(spm_model).vocab_size, **TINY)
    model, _ = train_model(train_ex, [], spm_model, meta, cfg,
                           RestorationTrainConfig(epochs=12, batch_size=16, lr=3e-3, warmup_steps=20, seed=7, log_interval=10**6))
    return Restorer(model, spm_model, meta), test_lines, spm_model, meta


# ---------------------------------------------------------------- labels


def test_case_classes():
    assert [case_class(w) for w in ["emma", "Emma", "I", "BBC", "McDonald", "Don't", "1st", "OK's"]] == \
        [LC, UC, UC, AUC, MIX, UC, LC, MIX]


@pytest.mark.parametrize("p", [
    "Why does not Perry see her?",
    "Well, Mister Knightley, I don't know. It is the BBC, said McDonald.",
    "o'clock, then. What? Yes.",
    "A 3rd time, and NATO's men came.",
])
def test_labels_round_trip(p):
    ex = labels_from_p(p, DEFAULT_PUNCT)
    assert " ".join(ex.words) == normalized(p)
    lexicon = build_mix_lexicon([p], DEFAULT_PUNCT)
    assert apply_labels(ex.words, ex.case, ex.punct, punct_classes(DEFAULT_PUNCT), lexicon) == punctuated(p)


def test_labels_follow_the_punct_config_and_split_hyphens():
    config = PunctConfig(keep=(".", ",", "?", "!"))
    ex = labels_from_p('"Stop!" he cried; a well-known fact.', config)
    assert punct_classes(config) == ("O", ".", ",", "?", "!")
    assert ex.words == ["stop", "he", "cried", "a", "well", "known", "fact"]
    assert ex.punct == [4, 0, 0, 0, 0, 0, 1]
    # Hyphenated words come back as two words (the metrics split them in every view).
    assert apply_labels(ex.words, ex.case, ex.punct, punct_classes(config), {}) == "Stop! he cried a well known fact."
    # With the default config "!" is not a class: no label, and it is not mapped either.
    assert labels_from_p("Stop! he cried.", DEFAULT_PUNCT).punct == [0, 0, 1]


def test_bad_training_lines_are_skipped_and_counted():
    examples, stats = prepare_examples(["", "   ", "?! ... --", "Hello there."], DEFAULT_PUNCT)
    assert [" ".join(e.words) for e in examples] == ["hello there"]
    assert (stats.lines, stats.kept, stats.skipped_empty, stats.skipped_no_words) == (4, 1, 2, 1)
    with pytest.raises(ValueError, match="No training lines"):
        train_model([], [], b"", {}, RestorationConfig(vocab_size=10), RestorationTrainConfig())


def test_bad_config_is_rejected():
    with pytest.raises(ValueError, match="lambda"):
        RestorationTrainConfig(lam=1.5)
    with pytest.raises(ValueError, match="multiple of num_heads"):
        RestorationConfig(vocab_size=10, d_model=30, num_heads=4)


# ---------------------------------------------------------------- model


def test_padding_does_not_change_the_logits():
    torch.manual_seed(0)
    model = RestorationModel(RestorationConfig(vocab_size=20, **TINY)).eval()
    tokens = torch.randint(0, 20, (1, 9))
    padded = torch.cat([tokens, torch.randint(0, 20, (1, 5))], dim=1)
    with torch.no_grad():
        a = model(tokens, torch.tensor([9]))
        b = model(padded, torch.tensor([9]))
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y[:, :9], atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_model_learns_the_pattern(trained):
    restorer, test_lines, _, _ = trained
    inputs = [normalized(p) for p in test_lines]
    assert all(x == x.lower() for x in inputs)
    hyps = restorer.restore(inputs)
    exact = sum(h == p for h, p in zip(hyps, test_lines))
    assert exact >= 0.9 * len(test_lines), list(zip(hyps, test_lines))[:5]
    r = evaluate_restorer(restorer, [(f"u{i}", p) for i, p in enumerate(test_lines)])
    assert r["case_macro_f1"] > 95 and r["punct_macro_f1"] > 95
    assert r["punc_er"] < 5 and r["case_er"] < 5
    assert r["case"]["AUC"]["support"] == 0 and r["case"]["AUC"]["f1"] is None  # not in the macro average


@pytest.mark.slow
def test_restore_handles_bad_input_and_long_lines(trained):
    restorer = trained[0]
    assert restorer.restore(["", "?! ...", "What, Emma?"]) == ["", "", restorer.restore(["what emma"])[0]]
    with pytest.raises(TypeError, match="list of lines"):
        restorer.restore("what emma")
    with pytest.raises(TypeError, match="line 1"):
        restorer.restore(["what", None])
    long = " ".join(["then the house was near"] * 100)  # 500 words > max_words: restored in windows
    assert normalized(restorer.restore([long])[0]) == long


@pytest.mark.slow
def test_cascade_restore_keeps_ids_and_order(trained):
    restorer = trained[0]
    hyps = {"b": "who saw emma", "a": "", "c": "then she said"}
    out = cascade_restore(hyps, restorer)
    assert list(out) == ["b", "a", "c"]
    assert out["a"] == "" and out["b"] == restorer.restore(["who saw emma"])[0]


def _tiny_setup():
    lines = synthetic_sentences(64, seed=3)
    examples, _ = prepare_examples(lines, DEFAULT_PUNCT)
    spm_model = train_sentencepiece([" ".join(e.words) for e in examples], 60)
    meta = make_meta(DEFAULT_PUNCT, {})
    cfg = RestorationConfig(vocab_size=PieceEncoder(spm_model).vocab_size, **TINY)
    return examples, spm_model, meta, cfg


@pytest.mark.parametrize("lam,frozen,trained_head", [(1.0, "punct_head", "case_head"), (0.0, "case_head", "punct_head")])
def test_lambda_extremes_train_one_head_only(lam, frozen, trained_head):
    torch.set_num_threads(1)
    examples, spm_model, meta, cfg = _tiny_setup()
    batch = make_batches(encode_examples(examples, PieceEncoder(spm_model), 200), 16, None)[0]
    model = RestorationModel(cfg)
    loss, info = restoration_loss(model, batch, lam)
    loss.backward()
    assert all(p.grad is None for p in getattr(model, frozen).parameters())
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in getattr(model, trained_head).parameters())
    assert set(info) == {"loss", "case" if lam == 1.0 else "punct"}

    train_cfg = RestorationTrainConfig(lam=lam, epochs=2, batch_size=16, seed=5, warmup_steps=5, log_interval=10**6)
    torch.manual_seed(train_cfg.seed)
    init = RestorationModel(cfg).state_dict()  # train_model initialises from the same seed
    trained_model, _ = train_model(examples, [], spm_model, meta, cfg, train_cfg)
    after = trained_model.state_dict()
    for name in init:
        if name.startswith(frozen + "."):
            assert torch.equal(init[name], after[name]), name
        if name.startswith(trained_head + "."):
            assert not torch.equal(init[name], after[name]), name


def test_training_is_reproducible_and_checkpoint_reloads(tmp_path):
    torch.set_num_threads(1)
    examples, spm_model, meta, cfg = _tiny_setup()
    train_cfg = RestorationTrainConfig(epochs=2, batch_size=16, seed=11, warmup_steps=5, log_interval=10**6)
    a, _ = train_model(examples, examples[:8], spm_model, meta, cfg, train_cfg, exp_dir=tmp_path)
    b, _ = train_model(examples, examples[:8], spm_model, meta, cfg, train_cfg)
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), name
    assert (tmp_path / "best-valid-loss.pt").is_file() and (tmp_path / "last.pt").is_file()
    model, spm2, meta2, info = load_restoration_checkpoint(str(tmp_path / "best-valid-loss.pt"))
    assert spm2 == spm_model and meta2 == meta and "valid" in info
    lines = [" ".join(e.words) for e in examples[:10]]
    assert Restorer(model, spm2, meta2).restore(lines) == Restorer(a, spm_model, meta).restore(lines)


def test_load_checkpoint_rejects_other_files(tmp_path):
    torch.save({"model": {}}, tmp_path / "x.pt")
    with pytest.raises(ValueError, match="not a restoration checkpoint"):
        load_restoration_checkpoint(str(tmp_path / "x.pt"))


# ---------------------------------------------------------------- ONNX


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    restorer, _, spm_model, meta = trained
    d = tmp_path_factory.mktemp("restore_onnx")
    save_restoration_checkpoint(d / "model.pt", restorer.model, spm_model, meta, {})
    diff = export_onnx(str(d / "model.pt"), str(d / "restore.onnx"))
    return d, diff


@pytest.mark.slow
def test_onnx_matches_torch(trained, exported):
    restorer, test_lines, _, _ = trained
    d, diff = exported
    assert diff <= 1e-4
    onnx_restorer = OnnxRestorer(str(d / "restore.onnx"))
    inputs = [normalized(p) for p in test_lines] + ["", "who"]
    assert onnx_restorer.restore(inputs, batch_size=7) == restorer.restore(inputs, batch_size=5)
    enc = PieceEncoder(restorer.encoder.model_bytes)
    from zipformer_pc.runtime.restoration import pad_batch

    tokens, lengths = pad_batch([enc.encode(x.split())[0] for x in inputs[:6]])
    for t, o in zip(restorer.logits(tokens, lengths), onnx_restorer.logits(tokens, lengths)):
        for row, n in enumerate(lengths):
            np.testing.assert_allclose(t[row, :n], o[row, :n], atol=1e-4)


@pytest.mark.slow
def test_onnx_check_fails_loudly(exported):
    d, _ = exported
    with pytest.raises(RuntimeError, match="differ"):
        export_onnx(str(d / "model.pt"), str(d / "bad.onnx"), atol=-1.0)  # no difference can pass
    with pytest.raises(ValueError, match="not a restoration model export"):
        import onnx

        proto = onnx.load(str(d / "restore.onnx"))
        del proto.metadata_props[:]
        onnx.save(proto, str(d / "plain.onnx"))
        OnnxRestorer(str(d / "plain.onnx"))


# ---------------------------------------------------------------- scripts


def _write_cuts(path: Path) -> None:
    from lhotse import CutSet

    texts = [("Who saw Emma?", "who saw emma"), (None, "then she said it"), ("Hi.", ""), ("Then so.", "then so")]
    CutSet.from_cuts(text_cut(f"c{i}", n, {P_KEY: p, "source": "x"} if p else None)
                     for i, (p, n) in enumerate(texts)).to_file(path)


def _run(*args, **kw):
    return subprocess.run([sys.executable, *map(str, args)], cwd=ROOT, capture_output=True, text=True, timeout=120, **kw)


@pytest.mark.slow
def test_add_auto_punct_is_reproducible_and_keeps_true_p(exported, tmp_path):
    from lhotse import load_manifest

    d, _ = exported
    _write_cuts(tmp_path / "in.jsonl.gz")
    outs = []
    for k, model in enumerate([("--checkpoint", d / "model.pt"), ("--checkpoint", d / "model.pt"), ("--onnx", d / "restore.onnx")]):
        out = tmp_path / f"out{k}.jsonl.gz"
        r = _run("local/add_auto_punct.py", *model, "--cuts-in", tmp_path / "in.jsonl.gz", "--cuts-out", out,
                 "--chunk-size", "3")
        assert r.returncode == 0, r.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] == outs[2]  # byte-identical; ONNX gives the same P' as torch
    assert "skipped_no_words 1" in r.stderr and "cuts 4" in r.stderr
    src = load_manifest(tmp_path / "in.jsonl.gz")
    new = load_manifest(tmp_path / "out0.jsonl.gz")
    assert [c.id for c in new] == [c.id for c in src]
    for a, b in zip(src, new):
        sa, sb = a.supervisions[0], b.supervisions[0]
        assert (sa.text, (sa.custom or {}).get(P_KEY)) == (sb.text, (sb.custom or {}).get(P_KEY))
        if sa.text:
            assert normalized(sb.custom[AUTO_PUNCT_KEY]) == sa.text
            assert sb.custom[AUTO_PUNCT_KEY][0].isupper()
        else:
            assert AUTO_PUNCT_KEY not in (sb.custom or {})
        da, db = a.to_dict(), b.to_dict()
        da["supervisions"][0].pop("custom", None)
        db["supervisions"][0].pop("custom", None)
        assert da == db
    with gzip.open(tmp_path / "out0.jsonl.gz", "rt") as f:
        assert len([json.loads(line) for line in f]) == 4


@pytest.mark.slow
def test_restore_text_cli(exported, tmp_path):
    d, _ = exported
    (tmp_path / "in.txt").write_text("u1 who saw emma\nu2\nu3\t?!\nu4 then she said\n")
    r = _run("-m", "zipformer_pc.restoration.apply", "--onnx", d / "restore.onnx", "--has-ids", "true",
             "--input", tmp_path / "in.txt", "--output", tmp_path / "out.txt")
    assert r.returncode == 0, r.stderr
    lines = (tmp_path / "out.txt").read_text().splitlines()
    assert [ln.split("\t")[0] for ln in lines] == ["u1", "u2", "u3", "u4"]
    assert lines[1] == "u2\t" and lines[2] == "u3\t"
    assert normalized(lines[0].split("\t")[1]) == "who saw emma"
    assert "2 of 4 line(s) have no word" in r.stderr
    r = _run("-m", "zipformer_pc.restoration.apply", "--checkpoint", d / "model.pt", input="who saw emma\n")
    assert r.returncode == 0 and normalized(r.stdout) == "who saw emma" and r.stdout.endswith("\n")


@pytest.mark.slow
def test_train_cli_writes_checkpoint_and_table(tmp_path):
    (tmp_path / "train.txt").write_text("\n".join(synthetic_sentences(80, seed=4)) + "\n\n?!\n")
    (tmp_path / "test.txt").write_text("\n".join(synthetic_sentences(10, seed=5)) + "\n")
    exp = tmp_path / "exp"
    r = _run("-m", "zipformer_pc.restoration.train", "--train-text", tmp_path / "train.txt", "--exp-dir", exp,
             "--test-sets", f"t={tmp_path / 'test.txt'}", "--epochs", "1", "--d-model", "32", "--num-layers", "1",
             "--ff-dim", "64", "--vocab-size", "60", "--lambda", "0.3")
    assert r.returncode == 0, r.stderr
    assert "skipped 1 empty and 1 without any word" in r.stderr
    md = (exp / "results.md").read_text()
    assert "| class | support | precision | recall | F1 |" in md and "Question Mark" in md and "lambda=0.3" in md
    assert (exp / "best-valid-loss.pt").is_file() and len((exp / "restored-t.txt").read_text().splitlines()) == 10
