"""research/mix_grid.py: mixes of fine-tuned runs with their start, measured against the reference export
and picked by the rule "worse on no figure (strictly, or by a paired bootstrap), then the lowest PC-WER"."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import script_module

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "egs/synth/pretrained"
mix_grid = script_module("research/mix_grid.py")


def _row(dev, dev_ood):
    return {"dev": dict(zip(("wer", "pc_wer", "per"), dev)), "dev_ood": dict(zip(("wer", "pc_wer", "per"), dev_ood))}


def test_strictly_the_pick_is_the_lowest_pc_wer_among_mixes_not_worse_anywhere():
    rows = {mix_grid.REFERENCE: _row((2.5, 5.6, 15.7), (43.7, 47.1, 37.8)),
            "1": _row((2.0, 5.0, 15.0), (43.0, 46.0, 37.9)),  # PER of dev_ood 0.1 worse: fails
            "0.7": _row((2.5, 5.5, 15.7), (43.7, 47.0, 37.8)),  # level or better everywhere
            "0.5": _row((2.4, 5.4, 15.6), (43.6, 46.9, 37.7)),  # better everywhere, lowest PC-WER sum
            "0.3": _row((2.4, 5.0, 15.6), (43.6, None, 37.7))}  # a missing figure never passes
    ref = rows[mix_grid.REFERENCE]
    assert [n for n in rows if n != mix_grid.REFERENCE and mix_grid.passes(rows[n], ref)] == ["0.7", "0.5"]
    assert mix_grid.pick(rows) == "0.5"
    del rows["0.5"], rows["0.7"]
    assert mix_grid.pick(rows) is None
    table = mix_grid.table(rows, None)
    assert "| 1 | 2.00 / 5.00 / 15.00 | 43.00 / 46.00 / 37.90+ | no |" in table


def _boot(row, p_worse):
    """``row`` with the bootstrap's shares of resamples where it is worse, per set (wer, pc_wer, per)."""
    for s, ps in p_worse.items():
        row[s]["p_worse"] = dict(zip(("wer", "pc_wer", "per"), ps))
    return row


def test_the_bootstrap_rule_forgives_what_chance_explains_and_wants_a_lower_pc_wer():
    rows = {mix_grid.REFERENCE: _row((2.5, 5.6, 15.7), (43.7, 47.1, 37.8)),
            # dev_ood PER 0.6 higher, but worse in only 80% of resamples: passes, the lowest PC-WER sum
            "0.7": _boot(_row((2.3, 5.1, 15.9), (43.5, 46.2, 38.4)), {"dev": (0.1, 0.02, 0.6), "dev_ood": (0.3, 0.1, 0.8)}),
            # dev WER worse in 97% of resamples: fails
            "1": _boot(_row((2.9, 5.0, 15.0), (43.0, 46.0, 37.0)), {"dev": (0.97, 0.1, 0.1), "dev_ood": (0.1, 0.1, 0.1)}),
            # worse nowhere by chance's measure, but its PC-WER sum is not below the reference's: fails
            "0.5": _boot(_row((2.4, 5.7, 15.6), (43.6, 47.0, 37.7)), {"dev": (0.3, 0.6, 0.4), "dev_ood": (0.4, 0.4, 0.4)})}
    ref = rows[mix_grid.REFERENCE]
    assert mix_grid.worse(rows["0.7"], ref, None) == [("dev", "per"), ("dev_ood", "per")]
    assert mix_grid.worse(rows["0.7"], ref, 0.95) == []
    assert mix_grid.worse(rows["1"], ref, 0.95) == [("dev", "wer")]
    assert [n for n in rows if n != mix_grid.REFERENCE and mix_grid.passes(rows[n], ref, 0.95)] == ["0.7"]
    assert mix_grid.pick(rows, 0.95) == "0.7"
    assert mix_grid.pick(rows) is None  # strictly, each is worse somewhere
    assert mix_grid.pick(rows, 0.75) is None  # 0.7's dev_ood PER (0.8) counts as worse then
    table = mix_grid.table(rows, "0.7", 0.95)
    assert "| 0.7 | 2.30 / 5.10 / 15.90 | 43.50 / 46.20 / 38.40 | yes, picked |" in table
    assert "| 1 | 2.90+ / 5.00 / 15.00 |" in table
    # a share the bootstrap could not give (no mix scores) is worse
    del rows["0.7"]["dev"]["p_worse"]["per"]
    assert mix_grid.worse(rows["0.7"], ref, 0.95) == [("dev", "per")]


def test_weight_sets_and_sets_are_checked():
    assert mix_grid.parse_weights(["0.7", "1"], 1) == [(0.7,), (1.0,)]
    assert mix_grid.parse_weights(["0.4,0.2"], 2) == [(0.4, 0.2)]
    for bad, runs, msg in [(["0.4"], 2, "1 weight"), (["0.7,0.5"], 2, "sum to at most 1"), (["-0.1"], 1, "within"),
                           (["a"], 1, "not a comma-separated"), (["0.5", "0.5"], 1, "twice")]:
        with pytest.raises(SystemExit, match=msg):
            mix_grid.parse_weights(bad, runs)
    with pytest.raises(SystemExit, match="NAME=MANIFEST"):
        mix_grid.parse_sets(["dev.jsonl.gz"])
    with pytest.raises(SystemExit, match="does not exist"):
        mix_grid.parse_sets(["dev=/nonexistent/dev.jsonl.gz"])


def _fake_run(exp: Path, model: dict, config: dict, batches: int = 10) -> None:
    """A fine-tuning run's one checkpoint whose running mean is ``model`` (--iter B --avg 1: these weights)."""
    exp.mkdir(parents=True)
    torch.save({"model": model, "model_avg": model, "model_avg_batches": batches, "batch_idx_train": batches,
                "optimizer_steps": batches, "model_config": config, "args": {"keep_last_k": 0}},
               exp / f"checkpoint-{batches}.pt")


@pytest.mark.slow
def test_mixes_of_the_shipped_weights_are_measured_against_the_shipped_export(tiny_corpus, tmp_path):
    shipped = torch.load(SHIPPED / "conditioned.pt", map_location="cpu", weights_only=False)
    same = {k: v.float() if v.is_floating_point() else v for k, v in shipped["model"].items()}
    g = torch.Generator().manual_seed(0)
    noisy = {k: v + v.std().nan_to_num() * torch.randn(v.shape, generator=g) if v.is_floating_point() and v.numel() > 1
             else v for k, v in same.items()}
    _fake_run(tmp_path / "noisy", noisy, shipped["model_config"])
    _fake_run(tmp_path / "same", same, shipped["model_config"])
    fbank = tiny_corpus / "fbank"
    out = tmp_path / "grid.json"
    cmd = [sys.executable, "research/mix_grid.py", "--exp-dir", str(tmp_path / "noisy"), str(tmp_path / "same"),
           "--iter", "10", "10", "--weights", "1,0", "0,1", "--start", str(SHIPPED / "conditioned.pt"),
           "--cuts", f"dev={fbank / 'synth_cuts_dev.jsonl.gz'}", f"test={fbank / 'synth_cuts_test.jsonl.gz'}",
           "--max-utts", "4", "--work-dir", str(tmp_path / "work"), "--output-json", str(out)]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["rule"] == {"rule": "bootstrap", "confidence": 0.95, "resamples": 1000, "seed": 0}
    rows = res["rows"]
    assert list(rows) == [mix_grid.REFERENCE, "1/0", "0/1"]
    ref = rows[mix_grid.REFERENCE]
    # the shipped export transcribes the tiny corpus's in-domain voices: a figure random weights cannot give
    assert ref["dev"]["wer"] < 50 and ref["test"]["wer"] < 50
    # the noised run alone is far worse and does not pass; the shipped weights alone (fp16 -> fp32) read
    # as the shipped export does, within a word or two
    assert rows["1/0"]["dev"]["wer"] > ref["dev"]["wer"] + 20
    assert not mix_grid.passes(rows["1/0"], ref)
    assert not mix_grid.passes(rows["1/0"], ref, 0.95)
    assert rows["1/0"]["dev"]["p_worse"]["wer"] > 0.95  # four utterances, each far worse
    assert "p_worse" not in ref["dev"]
    assert abs(rows["0/1"]["dev"]["wer"] - ref["dev"]["wer"]) < 5
    assert res["pick"] in (None, "0/1")
    assert res["search"]["decoding_method"] == "modified_beam_search" and res["search"]["lm_scale"] > 0
    onnx = tmp_path / "work" / "mix-0-1" / "onnx"
    assert {"lm-P.arpa.gz", "lm-N.arpa.gz", "questions.json.gz"} <= {p.name for p in onnx.iterdir()}
    ck = torch.load(tmp_path / "work" / "mix-1-0" / "model" / "checkpoint-10.pt", map_location="cpu",
                    weights_only=False)
    assert ck["interpolated"]["weights"] == [1.0, 0.0]
    assert "| 1/0 |" in r.stdout and "Pick:" in r.stdout
    # the hypotheses of every model and set, as the runtime writes them, for scoring/score.py --compare
    for d in ("reference", "mix-1-0", "mix-0-1"):
        lines = (tmp_path / "work" / d / "hyps-dev.tsv").read_text().splitlines()
        assert len(lines) == 8 and {ln.split("\t")[1] for ln in lines} == {"P", "N"}


def test_a_model_decoded_before_with_the_same_key_is_scored_again_not_decoded(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from zipformer_pc.runtime import utterances

    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "encoder.onnx").write_bytes(b"weights")
    (model_dir / "tokens.txt").write_text("<blk> 0\n")
    manifest = tmp_path / "dev.jsonl.gz"
    manifest.write_bytes(b"cuts")
    utts = [utterances.Utterance(f"u{i}", lambda: None, ref_n="hello world", ref_p="Hello world.") for i in range(3)]
    said = {"u0": "hello world", "u1": "hello word", "u2": "yellow"}
    calls = []

    def fake_decode(rec, us, **kw):
        calls.append(len(us))
        return SimpleNamespace(decoded=[utterances.Decoded(u, {"P": said[u.uid].capitalize() + ".",
                                                                "N": said[u.uid]}) for u in us])

    monkeypatch.setattr(mix_grid.StreamingRecognizer, "from_dir", staticmethod(lambda *a, **k: object()))
    monkeypatch.setattr(utterances, "decode", fake_decode)
    args = mix_grid.get_parser().parse_args(["--exp-dir", "x", "--iter", "1", "--weights", "1", "--cuts", "d=y",
                                             "--work-dir", str(tmp_path), "--decoding-method", "greedy_search"])
    out = tmp_path / "reference"
    key = mix_grid.decoding_key(args, model_dir, {"dev": manifest})
    first, _ = mix_grid.measure(args, model_dir, {"dev": utts}, out, cache_key=key)
    assert calls == [3] and json.loads((out / "key.json").read_text()) == key
    (model_dir / "MODEL_CARD.md").write_text("# a card, rewritten: the hypotheses stay valid\n")
    again, scores = mix_grid.measure(args, model_dir, {"dev": utts}, out, cache_key=mix_grid.decoding_key(
        args, model_dir, {"dev": manifest}))
    assert calls == [3] and again == first and first["dev"]["wer"] == pytest.approx(100 * 3 / 6)
    assert scores["dev"]["N"].summary()["wer"] == first["dev"]["wer"]
    # another search, other weights, or no key: decoded again
    args.decoding_method = "modified_beam_search"
    mix_grid.measure(args, model_dir, {"dev": utts}, out, cache_key=mix_grid.decoding_key(
        args, model_dir, {"dev": manifest}))
    assert calls == [3, 3]
    (model_dir / "encoder.onnx").write_bytes(b"other weights")
    mix_grid.measure(args, model_dir, {"dev": utts}, out, cache_key=mix_grid.decoding_key(
        args, model_dir, {"dev": manifest}))
    mix_grid.measure(args, model_dir, {"dev": utts}, out)
    assert calls == [3, 3, 3, 3] and not (out / "key.json").exists()
