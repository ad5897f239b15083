"""test_real (local/prepare_real.py, prepare.sh --dataset real) and the on-the-fly
acoustic augmentation of training (zipformer_pc.data.augment)."""

import gzip
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from conftest import local_module, script_module

ROOT = Path(__file__).resolve().parents[2]


pr = local_module("prepare_real")


@pytest.mark.parametrize("text,spoken", [
    ("Please press 1 to mute.", "Please press one to mute."),
    ("press * to toggle pause, press # to enter", "press star to toggle pause, press pound to enter"),
    ('The "quoted" (aside) word.', "The  quoted   aside  word."),
    ("3D audio enabled", None),            # a digit inside a word: not a digit read alone
    ("dial 500 to attempt", None),         # a number of several digits: dropped, not guessed
    ("at $5", None),
])
def test_spoken_form_spells_single_digits_and_keys(text, spoken):
    assert pr.spoken_form(text) == spoken


def test_punctuated_only_when_cased_and_marked():
    from zipformer_pc.data.references import is_punctuated_source

    assert is_punctuated_source("Agent logged in.")
    assert not is_punctuated_source("press one for help")
    assert not is_punctuated_source("Front Center")
    assert not is_punctuated_source("HEY IGOR, HOW IS EVERYTHING GOING?")  # subtitles in capitals


def _tone(path: Path, seconds: float, rate: int):
    t = np.arange(int(seconds * rate)) / rate
    sf.write(path, (0.2 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), rate)


def make_fixture_packages(dl_dir: Path) -> None:
    """Both packages' layouts as prepare_real.py finds them unpacked under --dl-dir."""
    wav_dir = dl_dir / pr.ASTERISK_WAV_PKG / pr.ASTERISK_WAV_DIR
    (wav_dir / "digits").mkdir(parents=True)
    (wav_dir / "letters").mkdir()
    txt = dl_dir / pr.ASTERISK_TXT_PKG / pr.ASTERISK_TXT
    txt.parent.mkdir(parents=True)
    entries = {
        "agent-pass": "Please enter your password, followed by the pound key.",  # sentence, P
        "call-waiting": "Call waiting.",                                          # phrase, P
        "conf-usermenu": "Please press 1 to mute or unmute yourself.",            # digit spelled
        "digits/7": "seven",                                                      # word, N only
        "letters/at": "at [@]",                                                   # the symbol is not said
        "beep": "[this is a simple beep tone]",                                   # dropped: a tone
        "binaural": "3D audio enabled",                                           # dropped: cannot be spelled
        "missing": "No recording for this one.",                                  # dropped: no wav
    }
    with gzip.open(txt, "wt") as f:
        f.write("; Core Asterisk Sounds in English\n\n")
        for name, text in entries.items():
            f.write(f"{name}: {text}\n")
            if name != "missing":
                _tone(wav_dir / f"{name}.wav", 1.2, 8000)
    alsa = dl_dir / pr.ALSA_PKG / pr.ALSA_DIR
    alsa.mkdir(parents=True)
    for name in ("Front_Center", "Rear_Left", "Noise"):
        _tone(alsa / f"{name}.wav", 1.0, 48000)
    dras = dl_dir / pr.DRASCULA_PKG / pr.DRASCULA_DIR
    dras.mkdir(parents=True)
    write_drascula_dat(dras / "drascula.dat", {"text": ["", pr.DRASCULA_FIRST_LINE.decode() + " I'VE SEEN"]})
    (dras / "1.ALS").write_bytes(np.full(11025, 128, dtype=np.uint8).tobytes())


def write_drascula_dat(path: Path, english: dict) -> None:
    """A drascula.dat of the layout ScummVM's tool writes: a header, then per text table
    the count of lines and, per language (two here), a block of u32-length-prefixed lines."""
    import struct

    out = bytearray(b"DRASCULA" + b"\x06\x00" + bytes(20))  # what precedes the text tables
    out += struct.pack(">H", 2)
    for name in pr.DRASCULA_TABLES:
        lines = english.get(name, [""])
        out += struct.pack(">H", len(lines))
        for lang in range(2):
            block = bytearray()
            for line in lines:
                raw = b""  # an empty line is its length alone, as the real file writes line 0
                if line:
                    raw = (line if lang == 0 else line.lower()).encode("latin-1") + b"\0"
                    raw += bytes(-len(raw) % 4)
                block += struct.pack(">I", len(raw) + 4) + raw
            out += struct.pack(">H", len(block)) + block
    path.write_bytes(bytes(out))


def test_drascula_voice_files_are_matched_to_their_subtitle_lines(tmp_path):
    root = tmp_path / pr.DRASCULA_PKG / pr.DRASCULA_DIR
    root.mkdir(parents=True)
    first = pr.DRASCULA_FIRST_LINE.decode() + " I'VE SEEN IN MY LIFE"
    write_drascula_dat(root / "drascula.dat", {
        "text": ["", first, "NOT REALLY", "ROOM 512, PLEASE"],
        "textd": ["", "HEY IGOR, HOW IS EVERYTHING GOING?"],
    })
    texts = pr.drascula_texts(root / "drascula.dat")
    assert texts["text"][1] == first and texts["textd"][1] == "HEY IGOR, HOW IS EVERYTHING GOING?"
    rng = np.random.default_rng(0)
    for name in ("1", "2", "3", "D1", "D7", "S3"):  # D7: no such line; S: no speaker table
        (root / f"{name}.ALS").write_bytes(rng.integers(0, 256, 11025, dtype=np.uint8).tobytes())
    from collections import Counter

    drops = Counter()
    utts = {u["id"]: u for u in pr.collect_drascula(tmp_path, drops)}
    assert sorted(utts) == ["drascula-1", "drascula-2", "drascula-D1"]
    assert utts["drascula-D1"]["refs"]["text"] == "hey igor how is everything going"
    assert "text_p" not in utts["drascula-D1"]["refs"]["custom"]  # capitals only: N
    assert (utts["drascula-D1"]["speaker"], utts["drascula-1"]["speaker"]) == ("drascula-d", "drascula-john")
    assert utts["drascula-2"]["kind"] == "phrase" and utts["drascula-1"]["kind"] == "sentence"
    info = sf.info(str(utts["drascula-1"]["path"]))
    assert info.samplerate == pr.DRASCULA_RATE and info.frames == 11025
    assert drops == Counter({"drascula: a voice file without a subtitle": 1,
                             "drascula: a voice file of no known speaker table": 1,
                             "drascula: numbers or symbols that cannot be spelled": 1})
    # a file of another layout: a clear error, not a stack trace
    (root / "drascula.dat").write_bytes(b"DRASCULA" + bytes(100))
    with pytest.raises(SystemExit, match="not the drascula.dat"):
        pr.drascula_texts(root / "drascula.dat")


def test_prepare_sh_builds_test_real_with_both_references(tmp_path):
    """prepare.sh --dataset real on the packages' files: lhotse cuts at 16 kHz, P where the
    transcript is cased and punctuated, N by the one normalization, kinds and sources,
    the counts per source and kind, and every drop counted by its reason."""
    from lhotse import load_manifest

    dl = tmp_path / "dl"
    make_fixture_packages(dl / "real")  # prepare.sh's --dl-dir DIR: the packages under DIR/real
    data = tmp_path / "data"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    r = subprocess.run(["bash", "prepare.sh", "--dataset", "real", "--data-dir", str(data), "--dl-dir", str(dl)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    report = (data / "real" / "test_real.md").read_text()
    assert "test_real: 8 utterances (3 with a punctuated reference)" in report
    assert "| drascula | sentence | 1 | 1 |" in report
    assert "| asterisk | sentence | 2 | 1 |" in report and "| asterisk | word | 2 | 1 |" in report
    assert "| asterisk | phrase | 1 | 1 |" in report and "| alsa | phrase | 2 | 1 |" in report
    assert "a tone or silence, not speech ([...], <...>, (...)): 1" in report
    assert "numbers or symbols that cannot be spelled: 1" in report
    assert "transcript without a recording: 1" in report and "Noise.wav (no speech): 1" in report
    cuts = {c.id: c for c in load_manifest(data / "real" / "fbank" / "real_cuts_test_real.jsonl.gz")}
    assert len(cuts) == 8 and all(c.has_features and c.sampling_rate == 16000 for c in cuts.values())
    s = cuts["asterisk-agent-pass"].supervisions[0]
    assert s.text == "please enter your password followed by the pound key"
    assert s.custom["text_p"] == "Please enter your password, followed by the pound key."
    assert (s.custom["source"], s.custom["kind"], s.speaker) == ("asterisk", "sentence", "asterisk-allison")
    assert cuts["asterisk-conf-usermenu"].supervisions[0].custom["text_p"] == \
        "Please press one to mute or unmute yourself."
    for uid, n in [("asterisk-digits-7", "seven"), ("asterisk-letters-at", "at"), ("alsa-Front_Center", "front center")]:
        sup = cuts[uid].supervisions[0]
        assert sup.text == n and "text_p" not in (sup.custom or {}), uid
    # the grouping the scores report per source and kind
    from zipformer_pc.transcripts import read_groups

    groups = read_groups(str(data / "real" / "fbank" / "real_cuts_test_real.jsonl.gz"), ["source", "kind"])
    assert groups["asterisk-digits-7"] == "asterisk/word" and groups["alsa-Rear_Left"] == "alsa/phrase"


# ------------------------------------------------------------- augmentation


def test_parse_augment():
    from zipformer_pc.data.augment import DEFAULTS, parse_augment

    assert parse_augment("") is None and parse_augment("none") is None
    assert parse_augment("default") == DEFAULTS
    cfg = parse_augment("reverb=0.9, phone=0")
    assert cfg.reverb == 0.9 and cfg.phone == 0.0 and cfg.noise == DEFAULTS.noise
    for bad in ("reverb", "loud=1", "noise=2", "phone=x", "snr_low=30"):
        with pytest.raises(ValueError):
            parse_augment(bad)


def _speech_cuts(tmp_path: Path, n: int = 4):
    from lhotse import CutSet, Recording, SupervisionSegment

    rng = np.random.default_rng(0)
    cuts = []
    for i in range(n):
        wav = tmp_path / f"u{i}.wav"
        seconds = 1.0 + 0.5 * i
        t = np.arange(int(16000 * seconds)) / 16000
        x = 0.3 * np.sin(2 * np.pi * (150 + 40 * i) * t) * (1 + np.sin(2 * np.pi * 3 * t)) \
            + 0.01 * rng.standard_normal(t.size)
        sf.write(wav, x.astype(np.float32), 16000)
        rec = Recording.from_file(wav, recording_id=f"u{i}")
        cut = rec.to_cut()
        cut.supervisions = [SupervisionSegment(id=f"u{i}", recording_id=f"u{i}", start=0, duration=rec.duration,
                                               text=f"word {i}", custom={"text_p": f"Word {i}."})]
        cuts.append(cut)
    return CutSet.from_cuts(cuts)


def test_augmenter_draws_per_cut_and_epoch_and_keeps_the_references(tmp_path):
    from zipformer_pc.data.augment import Augmenter, parse_augment

    cuts = list(_speech_cuts(tmp_path))
    cfg = parse_augment("reverb=1,noise=1,babble=0.5,phone=0.5,codec=0.3,clip=0.3")
    aug = Augmenter(cfg, tmp_path / "pool", seed=3)
    assert len(list((tmp_path / "pool" / "rirs").glob("rir-sim-*.wav"))) == 64
    a1, what1 = aug(cuts, epoch=0)
    a2, what2 = Augmenter(cfg, tmp_path / "pool", seed=3)(cuts, epoch=0)  # the pool is reused
    assert what1 == what2 and all(w.startswith("reverb+noise:") for w in what1)
    assert aug(cuts, epoch=1)[1] != what1
    for plain, c, w in zip(cuts, a1, what1):
        audio = c.load_audio()
        assert audio.shape[-1] == plain.recording.num_samples and np.isfinite(audio).all(), w
        assert c.id == plain.id and c.sampling_rate == 16000
        # babble lends its audio, not its words
        assert [s.text for s in c.supervisions] == [s.text for s in plain.supervisions], w
        assert not np.allclose(audio, plain.load_audio()), w
    np.testing.assert_array_equal(a1[0].load_audio(), a2[0].load_audio())


def test_dataset_computes_features_of_the_augmented_audio(tmp_path):
    from lhotse.dataset.collation import collate_features

    from zipformer_pc.data.augment import Augmenter, parse_augment
    from zipformer_pc.data.dataset import PCAsrDataset
    from zipformer_pc.data.tokenizer import Tokenizer
    from zipformer_pc.features import lhotse_fbank

    cuts = _speech_cuts(tmp_path)
    cuts = cuts.compute_and_store_features(lhotse_fbank(), storage_path=tmp_path / "feats")
    tok = Tokenizer(str(ROOT / "egs" / "synth" / "pretrained" / "bpe.model"))
    plain = PCAsrDataset(tok)[cuts]
    # nothing drawn but the level: the features equal the stored ones shifted by the gain (log-mel)
    quiet = Augmenter(parse_augment("reverb=0,noise=0,phone=0,codec=0,clip=0,gain_low=0,gain_high=0"),
                      tmp_path / "pool", seed=1)
    same = PCAsrDataset(tok, augment=quiet)[cuts]
    assert same["texts_n"] == plain["texts_n"] and same["texts_p"] == plain["texts_p"]
    assert torch_equal_lens(same, plain)
    f0, _ = collate_features(cuts.sort_by_duration(ascending=False))
    assert abs(float((same["features"] - f0).abs().mean())) < 0.05
    loud = PCAsrDataset(tok, augment=Augmenter(parse_augment("default"), tmp_path / "pool", seed=1))[cuts]
    assert torch_equal_lens(loud, plain) and float((loud["features"] - f0).abs().mean()) > 0.1


def torch_equal_lens(a, b) -> bool:
    return a["feature_lens"].tolist() == b["feature_lens"].tolist() and a["features"].shape == b["features"].shape


# ------------------------------------------------------------- reporting


def _real_report_fixture(tmp_path: Path):
    """A test_real manifest of three cuts (two groups), the runtime's output on it, and
    Whisper base's summaries and transcripts, laid out as pretrain.sh stage 4 writes them."""
    import json

    from lhotse import CutSet, MonoCut, SupervisionSegment

    refs = {"a1": ("asterisk", "sentence", "please enter your password", "Please enter your password."),
            "a2": ("asterisk", "word", "seven", None),
            "d1": ("drascula", "sentence", "hey igor how is everything going", None)}
    cuts = []
    for uid, (source, kind, n, p) in refs.items():
        custom = {"source": source, "kind": kind, **({"text_p": p} if p else {})}
        cuts.append(MonoCut(id=uid, start=0, duration=1.0, channel=0, supervisions=[
            SupervisionSegment(id=uid, recording_id=uid, start=0, duration=1.0, text=n, speaker="s", custom=custom)]))
    real = tmp_path / "data" / "real" / "fbank" / "real_cuts_test_real.jsonl.gz"
    real.parent.mkdir(parents=True)
    CutSet.from_cuts(cuts).to_file(real)
    exp = tmp_path / "exp"
    cond = exp / "conditioned"
    cond.mkdir(parents=True)
    (cond / "runtime-greedy_search-test_real.tsv").write_text(
        "a1\tP\tPlease enter your pass word.\na1\tN\tplease enter your pass word\na2\tN\tseven\n"
        "d1\tN\they igor how is everything going\n")
    (cond / "runtime-greedy_search-test_real.json").write_text(json.dumps({
        "scores": {"N": {"wer": 20.0}, "P": {"pc_wer": 30.0, "punc_er": 0.0, "case_er": 0.0, "per": 0.0}},
        "search": {"decoding_method": "greedy_search", "lms": False, "questions": True}, "rtf": 0.05}))
    wb = exp / "whisper_base"
    wb.mkdir()
    for t, wer in (("test", 4.0), ("test_real", 10.0)):
        (wb / f"wer-summary-{t}-N-whisper-base.json").write_text(json.dumps({"wer": wer, "rtf": 0.8}))
        (wb / f"wer-summary-{t}-P-whisper-base.json").write_text(json.dumps(
            {"wer": 3.0, "pc_wer": 12.5, "punc_er": 40.0, "case_er": 25.0, "per": 35.0, "wer_c": 5.0, "wer_pc": 12.5}))
    (wb / "recogs-test_real-N-whisper-base.txt").write_text(
        "a1\tplease enter your password\na2\t7\nd1\they igor how is everything going\n")
    (wb / "recogs-test_real-P-whisper-base.txt").write_text("a1\tPlease enter your password.\n")
    return exp, real


def test_the_card_reports_test_real_per_group_and_whisper_base(tmp_path):
    pub = script_module("egs/synth/publish_pretrained.py")
    exp, real = _real_report_fixture(tmp_path)
    block = pub.real_speech_section(exp, real)
    text = "\n".join(block)
    assert block[0] == pub.REAL_HEADING
    assert "| greedy_search | no | yes | 20.00 | 30.00 |" in text
    assert "| test | 4.00 | 12.50 | 40.00 | 25.00 | 35.00 | 0.800 |" in text  # Whisper rows, every set run
    assert "| test_real | 10.00 | 12.50 |" in text
    # per source and kind, scored here from the transcripts: our "pass word" is 2 errors of 4 words
    assert "| asterisk/sentence | 1 | 50.00 / " in text and "| asterisk/word | 1 | 0.00 / - | 100.00 / - |" in text
    assert "| drascula/sentence | 1 | 0.00 / - | 0.00 / - |" in text
    # nothing measured: no section
    assert pub.real_speech_section(tmp_path / "nothing", real) == []


def test_results_tables_carry_whisper_base_rows(tmp_path):
    from zipformer_pc.scoring import make_results as mr

    exp, _ = _real_report_fixture(tmp_path)
    s = mr.whisper_summary(exp, "test_real")
    assert (s["wer"], s["pc_wer"], s["rtf"]) == (10.0, 12.5, 0.8)
    assert mr.whisper_summary(exp, "test_ood") is None
