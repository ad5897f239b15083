"""egs/synth/pretrain.sh end to end on the tiny corpus: norm, conditioned from norm, decode, export, publish."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import TRAINING_TIMEOUT

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_pretrain_recipe_trains_both_models_and_publishes_them(tiny_corpus, tmp_path):
    exp, out = tmp_path / "exp", tmp_path / "pretrained"
    cmd = ["bash", "egs/synth/pretrain.sh", "--stage", "1", "--data-dir", str(tiny_corpus.parent),
           "--exp-dir", str(exp), "--norm-minutes", "0.1", "--cond-minutes", "0.1", "--save-minutes", "0.05",
           "--avg", "1", "--threads", "1", "--publish", "true", "--out-dir", str(out), "--latency-chunks", "16 32",
           "--train-opts", "--max-duration 20 --log-interval 1000"]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=TRAINING_TIMEOUT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # the conditioned model started from the norm model's last checkpoint
    cond_log = "".join(p.read_text() for p in (exp / "conditioned" / "log").glob("log-train-*"))
    assert "Initialised" in cond_log and "norm/checkpoint-" in cond_log
    names = {p.name for p in out.iterdir()}
    assert {"MODEL_CARD.md", "tokens.txt", "bpe.model", "norm.pt", "conditioned.pt"} <= names
    assert any(n.startswith("encoder-") and n.endswith(".int8.onnx") for n in names)
    assert any(n.startswith("joiner-") and not n.endswith(".int8.onnx") for n in names)
    card = (out / "MODEL_CARD.md").read_text()
    assert "| | test | " in card and "| | test_ood | " in card and "Streaming RTF" in card
    # greedy search, then modified beam search: a metric table of each model for each
    assert card.count("| norm | test set |") == card.count("| conditioned | test set |") == 2
    beam_tables = card.split("Modified beam search with 4 paths")[1].split("## Use")[0]
    assert "| norm | test set |" in beam_tables and "| conditioned | test set |" in beam_tables
    # the token LMs and the question model of stage 4 are shipped, and the runtime is scored with
    # them: greedy and beam search as users run them, and beam search without the question model
    assert {"lm-P.arpa.gz", "lm-N.arpa.gz", "lodr-P.arpa.gz", "lodr-N.arpa.gz", "questions.json.gz"} <= names
    runtime = card.split("The ONNX runtime as users run it")[1].split("## Use")[0]
    assert "--lm-scale 0.6 --lm-token-bonus 0.5`, less `--lodr-scale 0.25`" in runtime, runtime  # LODR's defaults
    assert "| `lodr-P.arpa.gz`, `lodr-N.arpa.gz` | token bigrams" in card
    for t in ("test", "test_ood"):
        for row in ("greedy_search | no | yes", "modified_beam_search | yes | yes", "modified_beam_search | yes | no"):
            assert f"| {t} | {row} |" in runtime, (t, row, runtime)
    assert "`questions.json.gz` | the question model" in card and "--questions false" in card
    assert "N's normalized, of the training references |" in card and "trained on the training references" in card
    latency = card.split("## Caption latency")[1]
    assert "| chunk-32 | 640 | P |" in latency and "| chunk-16 | 320 | N |" in latency, latency
    assert not any(n.startswith("onnx_chunk") for n in names)  # measured, not shipped
    assert not (out.parent / (out.name + ".new")).exists()
    w = torch.load(out / "conditioned.pt", weights_only=False)
    assert w["model_config"]["head"]["model_type"] == "conditioned"
    assert all(v.dtype == torch.float16 for v in w["model"].values() if v.is_floating_point())
    assert f"({sum(v.numel() for v in w['model'].values()) / 1e6:.1f}M parameters)" in card  # counted
    # republishing only the conditioned model keeps the shipped norm weights and card lines
    norm_bytes = (out / "norm.pt").read_bytes()
    norm_table = card[card.index("| norm | test set |"):].split("\n\n")[0]
    norm_beam_table = beam_tables[beam_tables.index("| norm | test set |"):].split("\n\n")[0]
    for _ in range(2):  # twice: a kept model's lines must not pile up
        again = subprocess.run(
            [sys.executable, "egs/synth/publish_pretrained.py", "--exp-dir", str(exp), "--data-dir", str(tiny_corpus),
             "--out-dir", str(out), "--avg", "1", "--models", "conditioned"],
            cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr[-3000:]
    assert (out / "norm.pt").read_bytes() == norm_bytes
    card2 = (out / "MODEL_CARD.md").read_text()
    assert norm_table in card2 and "(kept as the previous publication shipped it" in card2
    assert card2.index(norm_table) < card2.index("Modified beam search") < card2.rindex(norm_beam_table)
    assert card2.count("* **norm**:") == 1 and "* **conditioned**:" in card2
    assert card2.count("(kept as the previous publication") == 1
    bad = subprocess.run(
        [sys.executable, "egs/synth/publish_pretrained.py", "--exp-dir", str(exp), "--data-dir", str(tiny_corpus),
         "--out-dir", str(out), "--avg", "1", "--models", "norm"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "must include conditioned" in bad.stderr
    assert not (out.parent / (out.name + ".new")).exists()
    # a run mixed with the weights it started from (zipformer_pc.training.interpolate) is published as the
    # mix; its decoding results are the run's here (the same file names), since only the card is checked
    wise, out_w = tmp_path / "wise", tmp_path / "pretrained_wise"
    b = max(int(p.stem.split("-")[1]) for p in (exp / "conditioned").glob("checkpoint-*.pt"))
    mix = subprocess.run(
        [sys.executable, "-m", "zipformer_pc.training.interpolate", "--exp-dir", str(exp / "conditioned"),
         "--iter", str(b), "--start", str(out / "conditioned.pt"), "--weight", "0.5",
         "--out-dir", str(wise / "conditioned")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert mix.returncode == 0, mix.stderr[-3000:]
    for f in (exp / "conditioned").iterdir():
        if f.is_dir() and f.name not in ("log", "tensorboard"):
            shutil.copytree(f, wise / "conditioned" / f.name)
        elif f.name.startswith("runtime-"):
            shutil.copy(f, wise / "conditioned" / f.name)
    shutil.copytree(out, out_w)
    pub = subprocess.run(
        [sys.executable, "egs/synth/publish_pretrained.py", "--exp-dir", str(wise), "--data-dir", str(tiny_corpus),
         "--out-dir", str(out_w), "--avg", "1", "--models", "conditioned"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert pub.returncode == 0, pub.stderr[-3000:]
    card_w = (out_w / "MODEL_CARD.md").read_text()
    assert f"weights: 0.5 x the run's iter-{b}-avg-1 (mean of the weights after each of batches" in card_w
    assert "then mixed with the weights it started from (WiSE-FT), by `python -m zipformer_pc.training.interpolate" \
        in card_w
    assert card_w.count("* **norm**:") == 1 and torch.load(out_w / "conditioned.pt", weights_only=False)["averaged"] \
        .startswith("0.5 x the run's")
    # the published weights seed a fine-tuning run
    ft = subprocess.run(
        [sys.executable, "-m", "zipformer_pc.training.train", "--exp-dir", str(tmp_path / "ft"), "--model-type", "punct",
         "--train-cuts", str(tiny_corpus / "fbank" / "synth_cuts_train_p1.jsonl.gz"),
         "--valid-cuts", str(tiny_corpus / "fbank" / "synth_cuts_dev.jsonl.gz"),
         "--bpe-model", str(out / "bpe.model"), "--init-from", str(out / "norm.pt"), "--max-batches", "1",
         "--max-duration", "20", "--num-threads", "1", "--tensorboard", "false"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert ft.returncode == 0 and "Initialised" in ft.stderr, ft.stderr[-3000:]
    # a second call has nothing left to train: both budgets are spent
    again = subprocess.run(cmd[:2] + ["--stage", "1", "--stop-stage", "2"] + cmd[4:], cwd=ROOT,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Reached --max-minutes" in again.stderr
    # on a new machine (an empty experiment dir) training continues from the shipped weights
    exp2 = tmp_path / "exp2"
    assert cmd[12] == "--save-minutes"
    fresh = subprocess.run(cmd[:2] + ["--stage", "1", "--stop-stage", "2", "--data-dir", str(tiny_corpus.parent),
                                      "--exp-dir", str(exp2), "--norm-minutes", "0.02", "--cond-minutes", "0.02"]
                           + cmd[12:],
                           cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert fresh.returncode == 0, fresh.stdout[-3000:] + fresh.stderr[-3000:]
    for name in ("norm", "conditioned"):
        log = "".join(p.read_text() for p in (exp2 / name / "log").glob("log-train-*"))
        assert "Initialised" in log and f"{out / name}.pt" in log, (name, log[-2000:])
        assert '"warm_step": 0' in log, "a shipped model continues without the loss warm-up"
        assert "starting from the shipped" in fresh.stdout + fresh.stderr
    # --from-shipped false: a norm model from scratch with today's defaults, whatever is shipped
    exp3 = tmp_path / "exp3"
    scratch = subprocess.run(cmd[:2] + ["--stage", "1", "--stop-stage", "1", "--models", "norm", "--from-shipped",
                                        "false", "--data-dir", str(tiny_corpus.parent), "--exp-dir", str(exp3),
                                        "--norm-minutes", "0.02"] + cmd[12:],
                             cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert scratch.returncode == 0, scratch.stdout[-3000:] + scratch.stderr[-3000:]
    log = "".join(p.read_text() for p in (exp3 / "norm" / "log").glob("log-train-*"))
    assert "Initialised" not in log and "starting from the shipped" not in scratch.stdout + scratch.stderr
    assert '"warm_step": 0' not in log
    bad = subprocess.run(cmd[:2] + ["--stage", "1", "--from-shipped", "yes"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode != 0 and "--from-shipped takes true or false" in bad.stdout + bad.stderr
    # --text-hours: the text models learn from the text of a corpus made without speech, refused (before
    # the export) when that text holds sentences of the corpus's dev or test sets, as here: the tiny
    # corpus's dev and test are not those of the default sizes
    onnx_files = sorted(p.name for p in (exp / "conditioned" / "onnx").iterdir())
    leak = subprocess.run(cmd[:2] + ["--stage", "4", "--stop-stage", "4", "--data-dir", str(tiny_corpus.parent),
                                     "--exp-dir", str(exp), "--text-hours", "40"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert leak.returncode != 0 and "are texts of --held-out" in leak.stderr, leak.stderr[-3000:]
    assert (exp / "text-40h" / "synth" / "text" / "train.jsonl").is_file()
    assert sorted(p.name for p in (exp / "conditioned" / "onnx").iterdir()) == onnx_files  # untouched
