"""Your own recordings (docs/custom-data.md): local/prepare_custom.py reads a folder of
recordings in any of three transcript layouts (Kaldi, NeMo JSON lines, CSV/TSV), counts and
skips the bad rows and splits the rest deterministically; egs/custom/run.sh goes from such a
folder to a fine-tuned, scored and exported streaming model."""

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TRAINING_TIMEOUT, local_module, write_text_cuts

from zipformer_pc.text import normalized

ROOT = Path(__file__).resolve().parents[2]
# (text, P reference expected): cased and punctuated text gives P and N, the rest N only
SENTENCES = [
    ("The garden was quiet, and the birds had gone.", True),
    ("the morning train was late again today", False),
    ("Will you walk with me to the village?", True),
    ("she opened the window and looked outside", False),
    ("My brother, who lives in town, came to dinner.", True),
    ("THE LETTER ARRIVED EARLY ON TUESDAY", False),
    ("We waited by the river until it was dark.", True),
    ("the old house stood at the end of the lane", False),
    ("Is there any bread left in the kitchen?", True),
    ("they talked about the weather for an hour", False),
    ("Her sister laughed, then closed the heavy door.", True),
    ("a cold wind came down from the hills", False),
    ("Did the children finish their lessons today?", True),
    ("he carried the basket all the way home", False),
    ("The doctor arrived late, but nobody minded.", True),
    ("the candles burned low in the long evening", False),
    ("Please bring the blue chair into the parlour.", True),
    ("we found a small boat near the bridge", False),
    ("After supper, the family sat by the fire.", True),
    ("the music stopped and everyone went quiet", False),
]
VOICES = ["en-us+m1", "en-us+f2", "en-us+m3", "en-us+f4"]  # four speakers, five utterances each
BAD = {"missing audio file": 1, "unreadable audio": 1, "no words in the text": 1}


def speaker_of(i: int) -> str:
    return f"spk{i // 5}"


@pytest.fixture(scope="module")
def recordings(tmp_path_factory) -> Path:
    """ROOT/audio/uttNN.wav: the 20 sentences read by espeak-ng, 4 voices; plus extra.wav (read,
    given an empty transcript below) and broken.wav (not audio)."""
    if shutil.which("espeak-ng") is None:
        pytest.fail("espeak-ng is missing: tools/setup_env.sh installs it")
    root = tmp_path_factory.mktemp("custom_recordings")
    audio = root / "audio"
    audio.mkdir()
    for i, (text, _) in enumerate(SENTENCES):
        subprocess.run(["espeak-ng", "-v", VOICES[i // 5], "-w", str(audio / f"utt{i:02d}.wav"), text],
                       check=True, capture_output=True, timeout=60)
    subprocess.run(["espeak-ng", "-v", "en-us", "-w", str(audio / "extra.wav"), "one more sentence"],
                   check=True, capture_output=True, timeout=60)
    (audio / "broken.wav").write_text("this is not audio\n")
    return root


def write_kaldi(root: Path, utt2spk: bool = True) -> Path:
    """text + wav.scp (absolute paths) + utt2spk with two speakers."""
    d = root / "kaldi"
    d.mkdir(exist_ok=True)
    ids = [f"utt{i:02d}" for i in range(len(SENTENCES))]
    text = [f"{u} {t}" for u, (t, _) in zip(ids, SENTENCES)] + ["bad-missing hello there", "bad-broken hello there",
                                                                "bad-empty"]
    scp = [f"{u} {root / 'audio' / (u + '.wav')}" for u in ids] + [
        f"bad-missing {root / 'audio' / 'missing.wav'}", f"bad-broken {root / 'audio' / 'broken.wav'}",
        f"bad-empty {root / 'audio' / 'extra.wav'}"]
    (d / "text").write_text("\n".join(text) + "\n")
    (d / "wav.scp").write_text("\n".join(scp) + "\n")
    if utt2spk:
        (d / "utt2spk").write_text("".join(f"{u} {'a' if i < 10 else 'b'}\n" for i, u in enumerate(ids)))
    return d


def write_nemo(root: Path) -> Path:
    """manifest.json: NeMo JSON lines, audio paths relative to the manifest's folder, with speakers."""
    d = root / "nemo"
    d.mkdir(exist_ok=True)
    lines = [dict(audio_filepath=f"../audio/utt{i:02d}.wav", text=t, duration=2.0, speaker=speaker_of(i))
             for i, (t, _) in enumerate(SENTENCES)]
    lines += [dict(audio_filepath="../audio/missing.wav", text="Hello there.", duration=1.0),
              dict(audio_filepath="../audio/broken.wav", text="Hello there.", duration=1.0),
              dict(audio_filepath="../audio/extra.wav", text="", duration=1.0)]
    (d / "manifest.json").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return d


def write_csv(root: Path) -> Path:
    """data.csv: path,text,speaker with a header (quoted texts with commas), relative paths."""
    import csv

    d = root / "csv"
    d.mkdir(exist_ok=True)
    with open(d / "data.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "text", "speaker"])
        for i, (t, _) in enumerate(SENTENCES):
            w.writerow([f"../audio/utt{i:02d}.wav", t, speaker_of(i)])
        w.writerows([["../audio/missing.wav", "Hello there.", "x"], ["../audio/broken.wav", "Hello there.", "x"],
                     ["../audio/extra.wav", " ", "x"]])
    return d


def prepare(custom: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "local/prepare_custom.py", "--custom-dir", str(custom),
                           "--manifest-dir", str(out), *extra], cwd=ROOT, capture_output=True, text=True, timeout=300)


def supervisions(out: Path) -> dict:
    """{split: [supervision dicts]} of the manifests written to ``out``."""
    got = {}
    for split in ("train", "dev", "test"):
        with gzip.open(out / f"custom_supervisions_{split}.jsonl.gz", "rt") as f:
            got[split] = [json.loads(line) for line in f]
        with gzip.open(out / f"custom_recordings_{split}.jsonl.gz", "rt") as f:
            assert sorted(json.loads(line)["id"] for line in f) == sorted(s["id"] for s in got[split])
    return got


def check_references(sups: dict) -> None:
    every = {s["id"]: s for part in sups.values() for s in part}
    assert sorted(every) == [f"utt{i:02d}" for i in range(len(SENTENCES))]
    for i, (text, punctuated) in enumerate(SENTENCES):
        s = every[f"utt{i:02d}"]
        assert s["text"] == normalized(text)
        custom = s.get("custom") or {}
        assert ("text_p" in custom) == punctuated, (text, custom)
        if punctuated:
            assert custom["text_p"] == text
        assert s["duration"] > 1.0


@pytest.mark.parametrize("layout", ["kaldi", "nemo", "csv"])
def test_each_layout_is_found_read_and_split_with_its_bad_rows_counted(recordings, tmp_path, layout):
    custom = {"kaldi": write_kaldi, "nemo": write_nemo, "csv": write_csv}[layout](recordings)
    out = tmp_path / "manifests"
    r = prepare(custom, out)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads((out / "custom_prep.json").read_text())
    assert report["layout"] == layout
    assert report["skipped"] == BAD
    assert report["with_p"] == sum(p for _, p in SENTENCES)
    assert f"layout {layout}" in r.stdout and "| all | 20 | 10 |" in r.stdout
    assert "missing audio file: 1" in r.stdout
    sups = supervisions(out)
    check_references(sups)
    speakers = {part: {s["speaker"] for s in items} for part, items in sups.items()}
    if layout == "kaldi":  # two speakers: by utterance, 5% held out each (one utterance)
        assert report["split"] == "by utterance (2 speaker(s), fewer than 3)"
        assert [len(sups[p]) for p in ("train", "dev", "test")] == [18, 1, 1]
    else:  # four speakers: whole speakers held out, none of them in train
        assert report["split"].startswith("by speaker (4 speakers: 2 train, 1 dev, 1 test)")
        assert len(speakers["test"]) == len(speakers["dev"]) == 1
        assert not (speakers["test"] | speakers["dev"]) & speakers["train"]
        assert [len(sups[p]) for p in ("train", "dev", "test")] == [10, 5, 5]
    assert all(s["custom"]["layout"] == layout for part in sups.values() for s in part)

    # the same seed draws the same split, another seed another one
    again = prepare(custom, tmp_path / "again")
    assert again.returncode == 0
    assert supervisions(tmp_path / "again") == sups
    other = prepare(custom, tmp_path / "other", "--seed", "3")
    assert other.returncode == 0
    assert {s["id"] for s in supervisions(tmp_path / "other")["test"]} != {s["id"] for s in sups["test"]}


def test_common_voice_tables_read_their_clips_folder_and_skip_unvalidated_clips(recordings, tmp_path):
    cv = tmp_path / "cv"
    (cv / "clips").mkdir(parents=True)
    for i in range(6):
        shutil.copy(recordings / "audio" / f"utt{i:02d}.wav", cv / "clips" / f"utt{i:02d}.wav")
    rows = ["client_id\tpath\tsentence\tup_votes"]
    rows += [f"c{i % 3}\tutt{i:02d}.wav\t{SENTENCES[i][0]}\t2" for i in range(5)]
    (cv / "validated.tsv").write_text("\n".join(rows) + "\n")
    (cv / "invalidated.tsv").write_text(f"client_id\tpath\tsentence\nc9\tutt05.wav\t{SENTENCES[5][0]}\n")
    r = prepare(cv, tmp_path / "m")
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads((tmp_path / "m" / "custom_prep.json").read_text())
    assert report["layout"] == "csv" and list(report["files"]) == ["validated.tsv"]
    assert sum(report["utterances"].values()) == 5 and report["split"].startswith("by speaker (3 speakers")
    # the transcript file itself may be named
    r = prepare(cv / "validated.tsv", tmp_path / "m2")
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads((tmp_path / "m2" / "custom_prep.json").read_text())["files"] == {
        "validated.tsv": {"rows": 5, "kept": 5, "skipped": 0}}


def test_no_layout_or_too_few_utterances_is_a_clear_error(recordings, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("nothing here\n")
    r = prepare(empty, tmp_path / "m")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "no transcript file" in r.stderr and "wav.scp" in r.stderr and "audio_filepath" in r.stderr
    r = prepare(tmp_path / "nowhere", tmp_path / "m")
    assert r.returncode != 0 and "does not exist" in r.stderr and "Traceback" not in r.stderr
    two = tmp_path / "two"
    two.mkdir()
    (two / "t.csv").write_text(f"path,text\n{recordings / 'audio' / 'utt00.wav'},a b\n"
                               f"{recordings / 'audio' / 'utt01.wav'},c d\n")
    r = prepare(two, tmp_path / "m")
    assert r.returncode != 0 and "need at least 3" in r.stderr and "Traceback" not in r.stderr


def test_the_split_is_by_speaker_from_three_speakers_and_deterministic():
    pc = local_module("prepare_custom")
    utts = [dict(id=f"u{i:03d}", speaker=f"s{i % 7}") for i in range(140)]
    assign, how = pc.split_utterances(utts, seed=1)
    assert how.startswith("by speaker (7 speakers")
    by_part = {p: {u["speaker"] for u in utts if assign[u["id"]] == p} for p in ("train", "dev", "test")}
    assert all(by_part.values()) and not (by_part["dev"] | by_part["test"]) & by_part["train"]
    assert pc.split_utterances(utts, seed=1) == (assign, how)
    # a speaker above 1.5 times the share is taken only when no smaller one is left
    big = [dict(id=f"b{i}", speaker="big") for i in range(50)] + [dict(id=f"m{i}", speaker=f"m{i % 5}") for i in range(10)]
    assign, _ = pc.split_utterances(big, seed=0)
    assert all(assign[f"b{i}"] == "train" for i in range(50))
    # unnamed speakers, or two: by utterance, one utterance each at least
    assign, how = pc.split_utterances([dict(id=f"u{i}", speaker=None) for i in range(4)], seed=0)
    assert how == "by utterance (no speakers given)" and sorted(assign.values()) == ["dev", "test", "train", "train"]


def test_a_one_cut_test_set_is_read(tmp_path):
    """Decoding and validation read a set of one cut (a held-out part may be that small)."""
    from zipformer_pc.data.datamodule import PCAsrDataModule

    path = write_text_cuts(tmp_path / "one.jsonl.gz", [("only", "hello world", "Hello world.")])
    dm = PCAsrDataModule(tokenizer=None, max_duration=30.0)
    batches = list(dm.test_dataloader(str(path)).sampler)
    assert [[c.id for c in b] for b in batches] == [["only"]]


@pytest.mark.slow
def test_run_sh_fine_tunes_scores_and_exports_a_model_of_your_recordings(recordings, tmp_path):
    """egs/custom/run.sh on the NeMo layout with a budget of 3 batches: data with the shipped
    tokenizer, fine-tuning from the shipped conditioned model, both models scored on the held-out
    test speaker, an ONNX export that python -m zipformer_pc.transcribe transcribes a wav with."""
    custom = write_nemo(recordings)
    data, exp = tmp_path / "data", tmp_path / "exp"
    r = subprocess.run(["bash", "egs/custom/run.sh", "--custom-dir", str(custom), "--data-dir", str(data),
                        "--exp-dir", str(exp), "--max-batches", "3", "--minutes", "5", "--int8", "false"],
                       cwd=ROOT, capture_output=True, text=True, timeout=TRAINING_TIMEOUT)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    assert "by speaker (4 speakers" in (data / "custom" / "custom.md").read_text()
    assert (data / "custom" / "lang_bpe_256" / "bpe.model").read_bytes() == \
        (ROOT / "egs" / "synth" / "pretrained" / "bpe.model").read_bytes()
    log = (exp / "train.log").read_text()
    assert "Initialised" in log and "conditioned.pt" in log and "Reached --max-batches 3" in log
    scores = (exp / "scores.md").read_text()
    assert scores.count("| test |") == 2 and "WER" in scores and "PC-WER" in scores
    assert "## Before: the shipped model" in scores and "## After: fine-tuned" in scores
    assert "-m zipformer_pc.transcribe --model-dir" in r.stdout
    onnx = exp / "onnx"
    for part in ("encoder", "decoder-P", "joiner-P", "decoder-N", "joiner-N"):
        assert len(list(onnx.glob(f"{part}-iter-3-avg-*-chunk-32-left-128.onnx"))) == 1, part
    out = tmp_path / "out.tsv"
    wav = recordings / "audio" / "utt00.wav"
    t = subprocess.run([sys.executable, "-m", "zipformer_pc.transcribe", "--model-dir", str(onnx), "--output", str(out),
                        str(wav)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert t.returncode == 0, t.stderr[-3000:]
    modes = {line.split("\t")[1] for line in out.read_text().splitlines()}
    assert modes == {"P", "N"}

    # a second call finds everything done: no new training, the same export
    r = subprocess.run(["bash", "egs/custom/run.sh", "--custom-dir", str(custom), "--data-dir", str(data),
                        "--exp-dir", str(exp), "--max-batches", "3", "--minutes", "5", "--int8", "false",
                        "--stop-stage", "1"], cwd=ROOT, capture_output=True, text=True, timeout=TRAINING_TIMEOUT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "already done with the same options" in r.stdout and "Reached --max-batches 3 already" in r.stdout
