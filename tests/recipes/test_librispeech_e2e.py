"""egs/librispeech/run.sh end to end, every stage, on a tiny LibriSpeech look-alike.

The corpus is built here: LibriSpeech's tree (part/speaker/chapter folders,
``SPK-CHAP.trans.txt`` in upper case without punctuation, FLAC) with espeak-ng
reading a few dozen short sentences, and LibriSpeech-PC's manifests (NeMo JSON
lines, cased and punctuated text; a few utterances dropped, as PC dropped some).
Two training parts (the recipe combines them, as for LibriSpeech's three). The
recipe then runs with its smallest settings through data preparation
(the restoration model included), training of a conditioned, a norm (the
cascade's ASR) and a two-decoder system, decoding, ONNX export, the streaming
RTF and RESULTS.md, which must name LibriSpeech's test sets.
"""

import json
import re
import subprocess
from pathlib import Path

import pytest
from conftest import TRAINING_TIMEOUT, local_module, write_librispeech_tree

ROOT = Path(__file__).resolve().parents[2]

# LibriSpeech-PC text of each utterance; LibriSpeech's transcript is derived
# from it as LibriSpeech writes it (upper case, no punctuation, "Mr." spelt out).
SENTENCES = [
    "The rain stopped before noon.",
    "She opened the window, and the room grew cold.",
    "Where did you put the old letters?",
    "Mr. Brown walked slowly to the station.",
    "The children laughed at the little dog.",
    "We waited for an hour, but nobody came.",
    "Is the river deep enough to swim in?",
    "He told me the story twice.",
    "The garden was full of yellow flowers.",
    "Why would anyone leave so early?",
    "My brother bought a new coat in town.",
    "The ship sailed north through the night.",
    "They sat by the fire, talking quietly.",
    "Could you carry this basket for me?",
    "The old man smiled and shook his head.",
    "Her voice was soft, almost a whisper.",
    "The bells rang out across the valley.",
    "Did the doctor come this morning?",
    "I have never seen such a bright moon.",
    "The horses were tired after the long ride.",
    "Mr. Green wrote a short note to his sister.",
    "The bread was warm, and the butter melted.",
    "What time does the last train leave?",
    "A cold wind blew from the sea.",
    "The teacher read the names aloud.",
    "We found the key under a stone.",
    "How many people live in that house?",
    "The candle burned down to the table.",
    "He ran back home, shouting for help.",
    "The lake was calm and very clear.",
    "She kept the ring in a small box.",
    "Are you sure the door is locked?",
    "The farmer counted his sheep at dusk.",
    "Snow covered the roofs of the village.",
    "They sang together, loudly and badly.",
    "The captain looked at the dark sky.",
    "Who left the lamp burning all night?",
    "The clock in the hall struck nine.",
    "I will write to you next week.",
    "The road turned sharply near the bridge.",
    # dev-clean
    "The cat slept on the warm stones.",
    "Where is the nearest village?",
    "He closed the book, and sighed.",
    "The boat drifted towards the shore.",
    "Mr. White answered the letter at once.",
    "The leaves fell softly in the yard.",
    # test-clean
    "The mother called her son inside.",
    "Did you hear the thunder last night?",
    "The soldiers marched along the road.",
    "She poured the tea, and waited.",
    "The birds flew over the green hills.",
    "Who knocked at the gate so late?",
    # test-other
    "The shop on the corner was closed.",
    "Why is the water so cold today?",
    "He found an old map in the attic.",
    "The wind shook the tall trees.",
    "Mr. Black sold his horse, reluctantly.",
    "The children ran down to the beach.",
]

# part -> (speaker, chapter, espeak-ng voice, rate, pitch, utterances)
LAYOUT = {
    "train-clean-100": [("103", "1240", "en-us+m1", 175, 45, 5), ("103", "1241", "en-us+m1", 175, 45, 5),
                        ("1034", "121119", "en-gb+f2", 170, 60, 5), ("1034", "121120", "en-gb+f2", 170, 60, 5),
                        ("1040", "133433", "en-gb-scotland+m3", 175, 40, 5),
                        ("1040", "133434", "en-gb-scotland+m3", 175, 40, 5)],
    # a second training part: the recipe combines them (LibriSpeech 960 h has three)
    "train-clean-360": [("1069", "133699", "en-us-nyc+f3", 180, 55, 5), ("1069", "133709", "en-us-nyc+f3", 180, 55, 5)],
    "dev-clean": [("1272", "128104", "en-gb-x-rp+m7", 170, 35, 3), ("1462", "170138", "en-gb+f4", 165, 65, 3)],
    "test-clean": [("1089", "134686", "en-029+m4", 170, 50, 3), ("121", "121726", "en-us+klatt2", 175, 50, 3)],
    "test-other": [("1688", "142285", "en-us+m1", 185, 30, 3), ("2033", "164914", "en-gb+f2", 160, 70, 3)],
}
# utterances LibriSpeech-PC dropped: N only
PC_DROPPED = {"1034-121119-0002", "1069-133709-0004", "121-121726-0001"}


def librispeech_transcript(pc_text: str) -> str:
    text = pc_text.replace("Mr.", "Mister")
    return re.sub(r"[^A-Za-z' ]", "", text).upper()


def corpus_parts() -> dict:
    """``{part: [(utt id, transcript, PC text or None)]}`` over SENTENCES, in order."""
    sentences = iter(SENTENCES)
    parts = {}
    for part, chapters in LAYOUT.items():
        utts = []
        for spk, chap, _, _, _, n in chapters:
            for i in range(n):
                pc = next(sentences)
                utt_id = f"{spk}-{chap}-{i:04d}"
                utts.append((utt_id, librispeech_transcript(pc), None if utt_id in PC_DROPPED else pc))
        parts[part] = utts
    assert next(sentences, None) is None
    return parts


def build_corpus(root: Path) -> tuple:
    """The LibriSpeech tree and LibriSpeech-PC manifests under ``root`` (espeak-ng speech)."""
    tts = local_module("tts")
    voices = {(spk, chap): tts.Voice(f"ls-{spk}", "espeak-ng", v, rate, pitch)
              for chapters in LAYOUT.values() for spk, chap, v, rate, pitch, _ in chapters}
    synth = tts.Synthesizer()

    def render(path, utt_id, text):
        spk, chap, _ = utt_id.split("-")
        voice = voices[(spk, chap)]
        synth.render(voice, text, str(path), rate=voice.rate, pitch=voice.pitch)

    try:
        return write_librispeech_tree(root, corpus_parts(), render)
    finally:
        synth.close()


def recog_ids(path: Path) -> set:
    """Utterance ids of a decode.py ``recogs-*`` file."""
    return {line.split(":\t", 1)[0] for line in path.read_text().splitlines() if ":\tref=" in line}


def table_rows(md: str, heading: str) -> dict:
    """The rows of the table(s) in the ``## `` section whose title starts with ``heading``:
    ``{first cell: [cells of each row with that first cell]}``."""
    section = md[md.index("\n" + heading):]
    section = section[:section.find("\n## ", 1) if "\n## " in section[1:] else len(section)]
    rows = {}
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith("| system"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows.setdefault(cells[0], []).append(cells)
    return rows


SYSTEMS = ("cond_p", "norm", "twodec_p")  # conditioned, the cascade's ASR, two-decoder
TESTS = ("test-clean", "test-other")


@pytest.mark.slow
def test_librispeech_recipe_end_to_end(tmp_path):
    from lhotse import load_manifest

    from zipformer_pc.data.references import get_n, get_p

    build_corpus(tmp_path / "download")
    data, exp, results = tmp_path / "data", tmp_path / "exp", tmp_path / "results"
    # the smallest settings on one CPU; one torch thread per training (train.py's default of 2 is
    # several times slower when other jobs share the 2 cores); the recipe's own --loss pruned
    cmd = ["bash", "egs/librispeech/run.sh", "--data-dir", str(data), "--dl-dir", str(tmp_path / "download"),
           "--exp-dir", str(exp), "--results-dir", str(results),
           "--parts", "dev-clean,test-clean,test-other,train-clean-100,train-clean-360", "--systems", ",".join(SYSTEMS),
           "--vocab-size", "100", "--prep-nj", "2", "--musan", "false", "--encoder", "tiny", "--world-size", "1", "--use-fp16", "false",
           "--num-epochs", "1", "--avg", "1", "--max-duration", "60", "--num-workers", "0",
           "--train-extra", "--num-threads 1", "--decode-nj", "2", "--decode-threads", "1",
           "--decode-max-duration", "60", "--rtf-utts", "3"]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=TRAINING_TIMEOUT)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    out = r.stdout + r.stderr
    lib = data / "librispeech"
    fbank = lib / "fbank"

    # stage 0: nothing downloaded (the tree is there); both references joined per utterance
    assert "All LibriSpeech parts present" in out and "LibriSpeech-PC manifests present" in out
    join = json.loads((lib / "manifests" / "pc_join.json").read_text())
    assert join["parts"]["train-clean-100"] == {"utterances": 30, "with_p": 29, "without_p": 1}
    assert join["parts"]["train-clean-360"] == {"utterances": 10, "with_p": 9, "without_p": 1}
    assert join["parts"]["test-clean"] == {"utterances": 6, "with_p": 5, "without_p": 1}
    # one training manifest over both parts, and its punctuated-proportion subsets
    train = {c.id: c.supervisions[0] for c in load_manifest(fbank / "librispeech_cuts_train.jsonl.gz")}
    assert len(train) == 40
    assert all(c.has_features for c in load_manifest(fbank / "librispeech_cuts_test-other.jsonl.gz"))
    # N from LibriSpeech's transcript, P from LibriSpeech-PC's text
    assert get_n(train["103-1240-0003"]) == "mister brown walked slowly to the station"
    assert get_p(train["103-1240-0003"]) == "Mr. Brown walked slowly to the station."
    assert get_p(train["1034-121119-0002"]) is None
    assert (lib / "lang_bpe_100" / "bpe.model").is_file() and (lib / "lang_bpe_100" / "tokens.txt").is_file()
    for f in ("1", "0.5", "0.35", "0.2", "0.05"):
        assert len(load_manifest(fbank / f"librispeech_cuts_train_p{f}.jsonl.gz")) == 40, f
    stats = (lib / "stats.md").read_text()
    for part in ("dev-clean", *TESTS, "train-clean-100", "train-clean-360"):
        assert f"librispeech_cuts_{part}.jsonl.gz" in stats, part
    # the restoration model (cascade, P'), scored on LibriSpeech's test sets, and the P' manifest
    assert (lib / "restore" / "p1" / "restore.onnx").is_file()
    assert all(t in (lib / "restore" / "p1" / "results.md").read_text() for t in TESTS)
    pauto = load_manifest(fbank / "librispeech_cuts_train_pauto_p1.jsonl.gz")
    assert len(pauto) == 40 and all(get_p(c.supervisions[0], use_auto_punct=True) for c in pauto)

    # stage 1: the three systems, trained by the commands the plan gives them
    for name, model_type in zip(SYSTEMS, ("conditioned", "norm", "two-decoder")):
        assert (exp / name / "epoch-1.pt").is_file(), name
        train_cmd = (exp / name / "train_cmd.txt").read_text()
        assert f"--model-type {model_type}" in train_cmd and "--encoder tiny" in train_cmd
        assert "--loss pruned" in train_cmd and "--world-size 1" in train_cmd and "--num-threads 1" in train_cmd
        assert "librispeech_cuts_train_p1.jsonl.gz" in train_cmd
    assert not (exp / "punct_p").exists()

    # stage 4: both modes (N only for norm, P and N for its cascade) on both test sets, both methods;
    # the utterance LibriSpeech-PC dropped has an N reference only
    test_ids = {t: {c.id for c in load_manifest(fbank / f"librispeech_cuts_{t}.jsonl.gz")} for t in TESTS}
    for method in ("greedy_search", "modified_beam_search"):
        for name, variant in (("cond_p", ""), ("twodec_p", ""), ("norm", ""), ("norm", "-cascade")):
            dec = exp / name / method
            for t in TESTS:
                for mode in ("N", "P"):
                    found = [p for p in dec.glob(f"recogs-{t}-{mode}-*.txt")
                             if p.stem.endswith("-cascade") == bool(variant)]
                    if name == "norm" and not variant and mode == "P":
                        assert not found
                        continue
                    assert len(found) == 1, (name, variant, method, t, mode)
                    ids = recog_ids(found[0])
                    expected = test_ids[t] - ({"121-121726-0001"} if mode == "P" else set())
                    assert ids == expected, (found[0], ids ^ expected)

    # stage 5: ONNX exports (fp32 + int8, the heads of each model type) and the streaming RTF
    heads = {"cond_p": ("N", "P"), "twodec_p": ("N", "P"), "norm": ("N",)}
    for name, modes in heads.items():
        onnx = exp / name / "onnx"
        for stem in ["encoder"] + [f"{part}-{m}" for m in modes for part in ("decoder", "joiner")]:
            for ext in (".onnx", ".int8.onnx"):
                assert (onnx / f"{stem}-epoch-1-avg-1-chunk-32-left-128{ext}").is_file(), (name, stem, ext)
        assert (onnx / "tokens.txt").is_file()
    assert not (exp / "norm" / "onnx" / "decoder-P-epoch-1-avg-1-chunk-32-left-128.onnx").exists()
    rtf = json.loads((exp / "rtf.json").read_text())
    assert rtf["num_utts"] == 3 and "test-clean" in rtf["cuts"]
    assert {row["system"] for row in rtf["rows"]} == {"cond_p", "twodec_p", "cascade"}
    assert len(rtf["rows"]) == 3 * 4  # 1 and 2 threads, fp32 and int8
    assert all(0 < float(row["rtf"]) < 100 for row in rtf["rows"])

    # stage 6: RESULTS.md on LibriSpeech's own test sets
    md = (results / "RESULTS.md").read_text()
    assert md.startswith("# Results: LibriSpeech")
    assert "## Table I: `test-clean` (LibriSpeech test-clean)" in md
    assert "## Table II: `test-other` (LibriSpeech test-other)" in md
    assert "`test`" not in md and "test_ood" not in md
    assert "### `test-clean`" in md and "### `test-other`" in md
    for heading, with_rtf in (("## Table I", True), ("## Table II", False)):
        rows = table_rows(md, heading)
        for label, refs in (("conditioned", "P+N"), ("two-decoder", "P+N"),
                            ("cascade: norm + restoration", "N (+ text)")):
            cells = next(c for c in rows[label] if c[1] == refs)
            assert cells[2].endswith("M") and float(cells[2][:-1]) > 0, cells
            metrics = cells[4:] if with_rtf else cells[3:]
            assert len(metrics) == 7, cells
            if with_rtf:
                assert float(cells[3]) > 0, cells  # the ONNX RTF of stage 5
            for value in metrics:  # WER, PuncER, CaseER, PC-WER, PER, WER-C, WER-PC
                assert 0 <= float(value.rstrip("*")) <= 1000, cells
        # systems not selected are there, without numbers
        assert all(c == "-" for c in rows["punct"][0][2:])
    # the budget note measures the speech trained on (40 short utterances), not the part's nominal 100 h
    hours = re.search(r"saw ([\d.]+) h of speech", md)
    assert hours and 0 < float(hours.group(1)) < 0.1, md[:2000]
    missing = md.split("## Missing outputs")[1]
    assert "punct_p on test-clean" in missing and "cond_p on" not in missing
    assert (results / "figures" / "proportion.png").is_file()
    tables = (exp / "decode_tables.md").read_text()
    assert all(f"| {t} |" in tables for t in TESTS)
