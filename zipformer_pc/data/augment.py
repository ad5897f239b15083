"""On-the-fly acoustic augmentation: the room, the noise and the channel that
synthetic speech lacks, drawn anew for every cut in every epoch.

Built from lhotse's lazy cut transforms (``reverb_rir``, ``mix``,
``resample``, ``compress``, ``perturb_volume``, ``clip_amplitude``), so an
augmented cut is an ordinary lhotse cut whose audio the data loader decodes
and turns into features with the one feature config.  Per cut, in this order:

1. **room** (probability ``reverb``): convolution with a room impulse response
   from a pool simulated once by lhotse's fast random RIR generator (rooms of
   random size and absorption, :func:`make_rir_pool`), plus any recorded
   responses given as wav files in the pool's folder;
2. **noise** (``noise``): a generated noise (white, pink, brown, mains hum
   with harmonics, a fan: :func:`make_noise_pool`), or another utterance of
   the batch as babble (share ``babble`` of the noisy cuts), at a signal-to-noise
   ratio drawn uniformly from ``snr`` dB;
3. **narrow band** (``phone``): resampled to 8 kHz (a phone line) or 11.025
   kHz (old recordings and games) and back, what such a channel keeps of
   the voice;
4. **codec** (``codec``): through a lossy codec (mp3, opus or gsm);
5. **level** (always): a gain drawn from ``gain_db``, and clipping at a
   random overdrive (``clip``).

Every draw comes from a random generator keyed by the seed, the epoch and the
cut id: a resumed run, or another process, draws what the first did.

The spec string of ``train.py --augment`` sets the probabilities, e.g.
``reverb=0.4,noise=0.4,phone=0.3,codec=0.1`` (unnamed ones keep
:data:`DEFAULTS`; ``default`` alone: all defaults).
"""

import hashlib
import logging
import random
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np

from zipformer_pc.features import SAMPLING_RATE

NOISE_KINDS = ("white", "pink", "brown", "hum", "fan")
CODECS = ("mp3", "opus", "gsm")
PHONE_RATES = (8000, 11025)


@dataclass(frozen=True)
class AugmentConfig:
    reverb: float = 0.4
    noise: float = 0.4
    babble: float = 0.3
    phone: float = 0.25
    codec: float = 0.1
    clip: float = 0.05
    snr_low: float = 5.0
    snr_high: float = 25.0
    gain_low: float = -12.0
    gain_high: float = 6.0


DEFAULTS = AugmentConfig()
_PROBABILITIES = ("reverb", "noise", "babble", "phone", "codec", "clip")


def parse_augment(spec: str) -> Optional[AugmentConfig]:
    """``--augment``'s spec: ``""`` or ``none`` -> None; ``default`` -> :data:`DEFAULTS`;
    ``name=value,...`` -> the defaults with those changed.  Names: the fields of
    :class:`AugmentConfig`; probabilities must lie in [0, 1]."""
    spec = (spec or "").strip()
    if spec in ("", "none", "false"):
        return None
    if spec in ("default", "true"):
        return DEFAULTS
    known = {f.name for f in fields(AugmentConfig)}
    changes = {}
    for item in spec.split(","):
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in known:
            raise ValueError(f"--augment: expected name=value with a name of {', '.join(sorted(known))}, "
                             f"not {item!r}")
        try:
            changes[name] = float(value)
        except ValueError:
            raise ValueError(f"--augment: {name} takes a number, not {value!r}") from None
        if name in _PROBABILITIES and not 0.0 <= changes[name] <= 1.0:
            raise ValueError(f"--augment: {name} is a probability in [0, 1], not {value}")
    cfg = replace(DEFAULTS, **changes)
    if cfg.snr_low > cfg.snr_high or cfg.gain_low > cfg.gain_high:
        raise ValueError("--augment: snr_low/gain_low must not exceed snr_high/gain_high")
    return cfg


def _rng(seed: int, key: str) -> random.Random:
    return random.Random(int.from_bytes(hashlib.sha256(f"{seed}:{key}".encode()).digest()[:8], "little"))


def colored_noise(kind: str, seconds: float, rng: np.random.Generator, rate: int = SAMPLING_RATE) -> np.ndarray:
    """``seconds`` of a generated noise at unit RMS: white, pink (1/f), brown
    (1/f^2), hum (50 or 60 Hz and its harmonics, with a little hiss) or fan
    (low-passed noise with a slow wobble)."""
    n = int(seconds * rate)
    if kind == "hum":
        t = np.arange(n) / rate
        f0 = 50.0 if rng.random() < 0.5 else 60.0
        x = sum(rng.uniform(0.2, 1.0) / k * np.sin(2 * np.pi * f0 * k * t + rng.uniform(0, 2 * np.pi))
                for k in range(1, 8))
        x = x + 0.05 * rng.standard_normal(n)
    else:
        spec = np.fft.rfft(rng.standard_normal(n))
        f = np.fft.rfftfreq(n, 1.0 / rate)
        f[0] = f[1]
        if kind == "pink":
            spec /= np.sqrt(f)
        elif kind == "brown":
            spec /= f
        elif kind == "fan":
            spec /= 1.0 + (f / rng.uniform(200.0, 800.0)) ** 2
        elif kind != "white":
            raise ValueError(f"unknown noise kind {kind!r}")
        x = np.fft.irfft(spec, n)
        if kind == "fan":
            t = np.arange(n) / rate
            x = x * (1.0 + 0.3 * np.sin(2 * np.pi * rng.uniform(0.2, 2.0) * t))
    x = x - x.mean()
    return (x / (np.sqrt(np.mean(x ** 2)) + 1e-12)).astype(np.float32)


def make_noise_pool(folder: Path, seed: int, per_kind: int = 3, seconds: float = 40.0) -> List[Path]:
    """Generated noises (``per_kind`` of each of :data:`NOISE_KINDS`) as 16 kHz wav
    files in ``folder``: written once, reused when present."""
    import soundfile as sf

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for kind in NOISE_KINDS:
        for i in range(per_kind):
            p = folder / f"noise-{kind}-{i}.wav"
            if not p.is_file():
                rng = np.random.default_rng([seed, NOISE_KINDS.index(kind), i])
                tmp = p.with_suffix(".tmp.wav")
                sf.write(tmp, 0.1 * colored_noise(kind, seconds, rng), SAMPLING_RATE, subtype="PCM_16")
                tmp.replace(p)
            paths.append(p)
    return paths


def make_rir_pool(folder: Path, seed: int, count: int = 64) -> List[Path]:
    """``count`` room impulse responses simulated by lhotse's fast random RIR
    generator as wav files ``rir-sim-*.wav`` in ``folder`` (written once), and
    every other wav there (recorded responses a user adds)."""
    import soundfile as sf
    from lhotse.augmentation.utils import FastRandomRIRGenerator

    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        p = folder / f"rir-sim-{i:03d}.wav"
        if not p.is_file():
            gen = FastRandomRIRGenerator(sr=SAMPLING_RATE, room_seed=seed * 1000 + i, source_seed=seed * 1000 + i + 1)
            rir = gen(nsource=1)[0].astype(np.float32)
            tmp = p.with_suffix(".tmp.wav")
            sf.write(tmp, rir / (np.abs(rir).max() + 1e-12), SAMPLING_RATE, subtype="FLOAT")
            tmp.replace(p)
    return sorted(p for p in folder.glob("*.wav") if not p.name.endswith(".tmp.wav"))


class Augmenter:
    """Draws and applies the augmentation of each cut of a batch.

    Args:
      config: the probabilities and ranges.
      pool_dir: where the RIR and noise pools live (made on first use).
      seed: the run's seed; with the epoch and the cut id it keys every draw.
    """

    def __init__(self, config: AugmentConfig, pool_dir: Path, seed: int = 42) -> None:
        from lhotse import Recording

        self.config = config
        self.seed = seed
        pool_dir = Path(pool_dir)
        self.rirs = [Recording.from_file(p) for p in make_rir_pool(pool_dir / "rirs", seed)] if config.reverb > 0 else []
        self.noises = ([Recording.from_file(p).to_cut() for p in make_noise_pool(pool_dir / "noise", seed)]
                       if config.noise > 0 else [])
        logging.info(f"Augmentation {config}: {len(self.rirs)} room responses, {len(self.noises)} noises "
                     f"({pool_dir})")

    def __call__(self, cuts: Sequence, epoch: int) -> Tuple[list, List[str]]:
        """The augmented cuts (audio only: their features are dropped) and, per cut,
        what was applied (e.g. ``reverb+noise:pink@12dB+phone``)."""
        from lhotse.utils import fastcopy

        cfg = self.config
        out, what = [], []
        plain = [c.drop_features() for c in cuts]
        for i, cut in enumerate(plain):
            r = _rng(self.seed, f"augment:{epoch}:{cut.id}")
            c, done = cut, []
            if self.rirs and r.random() < cfg.reverb:
                c = c.reverb_rir(rir_recording=self.rirs[r.randrange(len(self.rirs))], affix_id=False)
                done.append("reverb")
            if r.random() < cfg.noise:
                snr = r.uniform(cfg.snr_low, cfg.snr_high)
                others = [j for j in range(len(plain)) if j != i]
                if others and r.random() < cfg.babble:
                    other = plain[others[r.randrange(len(others))]]
                    noise = fastcopy(other.truncate(duration=min(other.duration, c.duration)), supervisions=[])
                    name = "babble"
                elif self.noises:
                    src = self.noises[r.randrange(len(self.noises))]
                    dur = min(c.duration, src.duration)
                    noise = src.truncate(offset=r.uniform(0.0, src.duration - dur), duration=dur)
                    name = noise.recording.id.split("-")[1]
                else:
                    noise = None
                if noise is not None:
                    c = c.mix(noise, snr=snr, preserve_id="left")
                    done.append(f"noise:{name}@{snr:.0f}dB")
            if r.random() < cfg.phone:
                rate = PHONE_RATES[r.randrange(len(PHONE_RATES))]
                c = c.resample(rate).resample(SAMPLING_RATE)
                done.append(f"band{rate}")
            if r.random() < cfg.codec:
                codec = CODECS[r.randrange(len(CODECS))]
                c = c.compress(codec=codec, compression_level=r.uniform(0.5, 0.99))
                done.append(codec)
            gain_db = r.uniform(cfg.gain_low, cfg.gain_high)
            c = c.perturb_volume(10 ** (gain_db / 20), affix_id=False)
            if r.random() < cfg.clip:
                c = c.clip_amplitude(gain_db=r.uniform(3.0, 12.0), affix_id=False)
                done.append("clip")
            out.append(c)
            what.append("+".join(done) or "gain")
        return out, what
