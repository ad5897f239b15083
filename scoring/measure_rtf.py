#!/usr/bin/env python3
"""Streaming real-time factor and accuracy of exported ONNX models (the paper's RTF column).

Usage:
  python scoring/measure_rtf.py \
      --system cond_p=egs/synth/exp/cond_p/onnx \
      --system cascade=egs/synth/exp/norm/onnx:data/synth/restore/p1/restore.onnx \
      --cuts data/synth/fbank/synth_cuts_test.jsonl.gz \
      --num-threads 1,2 --int8 false,true --max-utterances 100 \
      --output-md exp/rtf.md --output-json exp/rtf.json

``--system NAME=MODEL_DIR[:RESTORE_ONNX]`` (repeatable): MODEL_DIR holds one
export of ``python -m zipformer_pc.export`` (``encoder*.onnx``, ``decoder-{P,N}*``,
``joiner-{P,N}*``, ``tokens.txt``, and the ``*.int8.onnx`` copies for
``--int8 true``).  With a restoration model (``zipformer_pc.restoration``'s ONNX
export) the system is a cascade: the model's N output is restored to P by
:class:`zipformer_pc.runtime.restoration.OnnxRestorer`, and the restoration time
counts in the RTF.

For every system x ``--num-threads`` x ``--int8`` value, each cut's audio is
streamed through :class:`zipformer_pc.runtime.StreamingRecognizer` in pieces of
``--piece-seconds`` (as from a microphone).  RTF = wall time of feature
extraction + encoder + greedy search (+ restoration) summed over the
utterances, divided by their total audio duration.  Loading the audio is not
timed; one utterance is decoded untimed first (warm-up).  The encoder and the
restoration model use ``--num-threads`` intra-op threads; decoders and joiners
one.

Which modes are searched (``--modes``, the one syntax of every command line,
``zipformer_pc.options``): ``all`` (the default; also empty, or ``both``, this
script's older word) searches every mode a model exports; ``P`` or ``N`` (or a
comma list, ``P,N``) searches only those modes of a two-mode model (the other
mode's metrics are then ``-``).  Single-mode models always search their mode,
and a cascade always searches N.  When a two-mode model searches both, it is
also timed searching only ``--single-mode`` (the same utterances, alternating
with the two-mode run so background load hits both alike): the ``both/single``
column is the ratio of the two RTFs.

The search is the runtime's (``--decoding-method``, ``--beam-size``, the LMs and
the question model of each MODEL_DIR, ``--blank-penalty``: the options of
``python -m zipformer_pc.transcribe``); by default greedy search.

Scores come from the ONNX runtime's own transcripts, via
``zipformer_pc.metrics``: WER from the N output (references:
``supervision.text``), PuncER, CaseER and PC-WER from the P output, on the
utterances that have a P reference (``custom["text_p"]``).  A ``punct`` model's
N output is its P output normalized.

Prints a markdown table and writes it with ``--output-md``; ``--output-json``
gets ``{"rows": [...]}`` with every figure and the command (``scoring/make_results.py``
reads it).

``--latency true`` adds a second table (and ``"latency_rows"`` in the JSON):
for every system that is not a cascade, at the first ``--num-threads`` and
``--int8`` value, how late words and punctuation marks are shown and how
often shown words are revised, per mode (``zipformer_pc.runtime.latency``
defines the figures).  Compare chunk sizes by giving one export per chunk
size as separate systems.
"""

import argparse
import json
import logging
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, NoReturn, Optional, Sequence, Tuple

import numpy as np

from zipformer_pc.logs import setup_logging
from zipformer_pc.metrics import score_corpus
from zipformer_pc.modes import MODE_NAMES, RESTORED_FROM, RUNTIME_ORDER
from zipformer_pc.data.references import get_n, get_p
from zipformer_pc.runtime import StreamingRecognizer, find_model_files
from zipformer_pc.runtime.recognizer import search_kwargs
from zipformer_pc.options import add_modes_option, modes_text, selected_modes, str2bool
from zipformer_pc.options import add_search_options as add_shared_search_options

METRICS = ("wer", "punc_er", "case_er", "pc_wer")
LATENCY_COLUMNS = ("system", "chunk ms", "mode", "words", "word delay ms (mean / p50 / p90)",
                   "+ compute (p90)", "marks", "mark delay ms (mean / p90)", "extensions / word",
                   "revisions / word")
MD_COLUMNS = ("system", "model type", "threads", "precision", "RTF", "both/single", "WER", "PuncER", "CaseER",
              "PC-WER")


@dataclass
class System:
    name: str
    model_dir: Path
    restore: Optional[Path] = None

    @property
    def cascade(self) -> bool:
        return self.restore is not None


@dataclass
class Utterance:
    uid: str
    samples: np.ndarray
    rate: int
    ref_n: str
    ref_p: Optional[str]

    @property
    def duration(self) -> float:
        return len(self.samples) / self.rate


def fail(msg: str) -> NoReturn:
    raise SystemExit(f"measure_rtf.py: error: {msg}")


def parse_system(spec: str) -> System:
    """``NAME=MODEL_DIR[:RESTORE_ONNX]``; the directory and the file must exist."""
    name, sep, rest = spec.partition("=")
    name = name.strip()
    if not sep or not name or not rest:
        fail(f"--system {spec!r}: expected NAME=MODEL_DIR or NAME=MODEL_DIR:RESTORE_ONNX")
    model_dir, restore = rest, None
    if ":" in rest:
        model_dir, restore = rest.rsplit(":", 1)
        if not model_dir or not restore:
            fail(f"--system {spec!r}: empty model directory or restoration model around ':'")
    sysm = System(name, Path(model_dir), Path(restore) if restore else None)
    if not sysm.model_dir.is_dir():
        fail(f"--system {name}: model directory {sysm.model_dir} does not exist")
    if sysm.restore is not None and not sysm.restore.is_file():
        fail(f"--system {name}: restoration model {sysm.restore} does not exist")
    return sysm


def parse_list(value: str, convert, what: str) -> list:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        fail(f"{what}: empty list")
    try:
        out = [convert(v) for v in items]
    except (ValueError, argparse.ArgumentTypeError) as e:
        fail(f"{what} {value!r}: {e}")
    if len(set(out)) != len(out):
        fail(f"{what} {value!r}: repeated value")
    return out


def load_utterances(cuts_path: str, max_utterances: int) -> List[Utterance]:
    from lhotse import load_manifest_lazy

    if not Path(cuts_path).is_file():
        fail(f"--cuts {cuts_path} does not exist")
    utts: List[Utterance] = []
    for cut in load_manifest_lazy(cuts_path):
        if max_utterances > 0 and len(utts) >= max_utterances:
            break
        if not cut.has_recording:
            fail(f"--cuts: cut {cut.id} has no recording (the RTF needs the audio)")
        sups = cut.supervisions
        ps = [get_p(s) for s in sups]
        audio = cut.load_audio()
        utts.append(Utterance(
            uid=cut.id,
            samples=np.ascontiguousarray(audio.mean(axis=0) if audio.shape[0] > 1 else audio[0], dtype=np.float32),
            rate=int(cut.sampling_rate),
            ref_n=" ".join(get_n(s) for s in sups),
            ref_p=" ".join(ps) if sups and all(p is not None for p in ps) else None,  # type: ignore[arg-type]
        ))
    if not utts:
        fail(f"--cuts {cuts_path}: no cut")
    return utts


def check_systems(systems: Sequence[System], precisions: Sequence[bool]) -> Dict[Tuple[str, bool], Dict[str, Path]]:
    """Every system's files for every precision, or a clear error before anything is timed."""
    names = [s.name for s in systems]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        fail(f"--system names must be unique: {', '.join(dup)} repeated")
    files: Dict[Tuple[str, bool], Dict[str, Path]] = {}
    for s in systems:
        for int8 in precisions:
            try:
                f = find_model_files(s.model_dir, int8)
            except FileNotFoundError as e:
                hint = " (export with --int8 true)" if int8 else ""
                fail(f"--system {s.name}: {e}{hint}")
            missing = [p for p in f.values() if not p.is_file()]
            if missing:
                fail(f"--system {s.name}: missing {', '.join(map(str, missing))}")
            modes = {k.split("-", 1)[1] for k in f if k.startswith("decoder-")}
            if not modes:
                fail(f"--system {s.name}: {s.model_dir} has no decoder-P/decoder-N + joiner pair")
            if s.cascade and "N" not in modes:
                fail(f"--system {s.name}: a cascade restores the N output, but {s.model_dir} has no decoder-N/joiner-N")
            files[(s.name, int8)] = f
        if s.cascade:
            from zipformer_pc.runtime.restoration import OnnxRestorer

            try:
                OnnxRestorer(str(s.restore))
            except Exception as e:  # onnxruntime raises its own types for a file that is no ONNX model
                fail(f"--system {s.name}: {s.restore}: {e}")
    return files


def modes_to_search(available: Sequence[str], cascade: bool, requested: Optional[Sequence[str]]) -> List[str]:
    """Mode names to search: a cascade searches what its restoration reads (N); ``requested``
    (``--modes`` parsed: the names given, None for all) picks among a two-mode model's ``available``
    modes (a single-mode model searches its mode whatever is asked)."""
    if cascade:
        return sorted({MODE_NAMES[src] for src in RESTORED_FROM.values()})
    if len(available) > 1:
        return selected_modes(requested, available) or list(available)
    return list(available)


def score(utts: Sequence[Utterance], hyps: Dict[str, Dict[str, str]]) -> Dict[str, object]:
    """WER from N, the P metrics from P (utterances with a P reference); None where no output/reference."""
    out: Dict[str, object] = {k: None for k in METRICS}
    n_pairs = [(u.uid, u.ref_n, hyps[u.uid]["N"]) for u in utts if "N" in hyps[u.uid]]
    p_pairs = [(u.uid, u.ref_p, hyps[u.uid]["P"]) for u in utts if "P" in hyps[u.uid] and u.ref_p is not None]
    if n_pairs:
        out["wer"] = score_corpus(n_pairs).summary()["wer"]
    if p_pairs:
        summ = score_corpus(p_pairs).summary()
        for k in ("punc_er", "case_er", "pc_wer"):
            out[k] = summ[k]
    out["num_utts_n"] = len(n_pairs)
    out["num_utts_p"] = len(p_pairs)
    return out


def run_config(system: System, files: Dict[str, Path], threads: int, int8: bool, utts: Sequence[Utterance],
               args: argparse.Namespace) -> Dict[str, object]:
    available = [m for m in RUNTIME_ORDER if f"decoder-{m}" in files]
    modes = modes_to_search(available, system.cascade, args.modes)
    precision = "int8" if int8 else "fp32"
    search = search_kwargs(args, system.model_dir)
    rec = StreamingRecognizer(files, num_threads=threads, modes=modes, **search)
    single: Optional[StreamingRecognizer] = None
    single_mode = None
    if len(modes) > 1:
        single_mode = args.single_mode
        single = StreamingRecognizer(files, num_threads=threads, modes=[single_mode], **search)
    restorer = None
    if system.cascade:
        from zipformer_pc.runtime.restoration import OnnxRestorer

        restorer = OnnxRestorer(str(system.restore), num_threads=threads)
    model_type = rec.transducer_type or "?"
    if restorer is not None:
        model_type = f"{model_type} + restoration"
    logging.info("%s (%s), %d thread(s), %s: searching %s%s", system.name, model_type, threads, precision,
                 "+".join(modes), f"; also {single_mode} alone" if single else "")

    def decode(r: StreamingRecognizer, u: Utterance, restore: bool) -> Tuple[Dict[str, str], float]:
        t0 = time.perf_counter()
        res = r.recognize(u.samples, u.rate, args.piece_seconds)
        if restore:
            res["P"] = restorer.restore([res["N"]])[0]  # type: ignore[union-attr]
        return res, time.perf_counter() - t0

    for _ in range(args.warmup):  # untimed: first-run allocations, caches
        decode(rec, utts[0], restorer is not None)
        if single is not None:
            decode(single, utts[0], False)

    hyps: Dict[str, Dict[str, str]] = {}
    wall = wall_single = audio = 0.0
    for i, u in enumerate(utts, 1):
        # alternate which run goes first, so a load change hits both alike
        if single is not None and i % 2 == 0:
            _, dt = decode(single, u, False)
            wall_single += dt
        hyps[u.uid], dt = decode(rec, u, restorer is not None)
        wall += dt
        if single is not None and i % 2 == 1:
            _, dt = decode(single, u, False)
            wall_single += dt
        audio += u.duration
        if i % args.log_interval == 0 or i == len(utts):
            logging.info("  %d/%d utterances, %.1f s audio, RTF %.4f%s", i, len(utts), audio, wall / audio,
                         f", {single_mode} alone {wall_single / audio:.4f}" if single else "")
    row: Dict[str, object] = {
        "system": system.name,
        "model_type": model_type,
        "transducer_type": rec.transducer_type,
        "model_dir": str(system.model_dir),
        "restore_model": str(system.restore) if system.restore else None,
        "encoder": str(files["encoder"]),
        "num_threads": threads,
        "int8": int8,
        "precision": precision,
        "modes_searched": modes,
        "num_utts": len(utts),
        "audio_seconds": audio,
        "wall_seconds": wall,
        "rtf": wall / audio,
        "single_mode": single_mode,
        "rtf_single": wall_single / audio if single else None,
        "both_single_ratio": wall / wall_single if single and wall_single > 0 else None,
    }
    row.update(score(utts, hyps))
    row["hyps"] = hyps  # per utterance and mode: make_results compares them with the PyTorch decoding
    logging.info("  -> RTF %.4f%s; WER %s, PuncER %s, CaseER %s, PC-WER %s", row["rtf"],
                 f" (both/single {row['both_single_ratio']:.3f})" if row["both_single_ratio"] else "",
                 *(_fmt(row[k]) for k in METRICS))
    return row


def run_latency(system: System, files: Dict[str, Path], threads: int, utts: Sequence[Utterance],
                args: argparse.Namespace) -> List[Dict[str, object]]:
    """Latency and stability rows (one per searched mode) of one system."""
    from zipformer_pc.runtime.latency import analyse, summarize, trace

    rec = StreamingRecognizer(files, num_threads=threads)
    chunk_ms = rec.decode_chunk_len * 1000 * rec.frame_shift / rec.sample_rate
    logging.info("%s: latency and stability over %d utterances (chunk %.0f ms, pieces of %.2f s)", system.name,
                 len(utts), chunk_ms, args.piece_seconds)
    trace(rec, utts[0].samples, utts[0].rate, args.piece_seconds)  # warm-up
    summary = summarize([analyse(trace(rec, u.samples, u.rate, args.piece_seconds)) for u in utts])
    return [dict(system=system.name, chunk_ms=chunk_ms, mode=m, num_threads=threads, **fig)
            for m, fig in summary.items()]


def latency_table(rows: Sequence[Dict[str, object]]) -> str:
    lines = ["| " + " | ".join(LATENCY_COLUMNS) + " |", "|" + "---|" * len(LATENCY_COLUMNS)]
    for r in rows:
        marks = int(r["marks"])  # type: ignore[arg-type]
        cells = [str(r["system"]), f"{r['chunk_ms']:.0f}", str(r["mode"]), str(r["words"]),
                 " / ".join(f"{r[f'delays_{q}_ms']:.0f}" for q in ("mean", "p50", "p90")),
                 f"{r['delays_rt_p90_ms']:.0f}", str(marks),
                 " / ".join(f"{r[f'mark_delays_{q}_ms']:.0f}" for q in ("mean", "p90")) if marks else "-",
                 f"{r['extensions_per_word']:.3f}", f"{r['revisions_per_word']:.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _fmt(x: Optional[float], digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def markdown_table(rows: Sequence[Dict[str, object]]) -> str:
    lines = ["| " + " | ".join(MD_COLUMNS) + " |", "|" + "---|" * len(MD_COLUMNS)]
    for r in rows:
        cells = [str(r["system"]), str(r["model_type"]), str(r["num_threads"]), str(r["precision"]),
                 _fmt(r["rtf"], 3), _fmt(r["both_single_ratio"], 2)]  # type: ignore[arg-type]
        cells += [_fmt(r[k]) for k in METRICS]  # type: ignore[arg-type]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--system", action="append", default=[], metavar="NAME=MODEL_DIR[:RESTORE_ONNX]",
                   help="a system to measure (repeatable); with a restoration ONNX it is a cascade")
    p.add_argument("--cuts", required=True, help="lhotse cuts with recordings (the references are scored)")
    p.add_argument("--num-threads", default="1", help="comma list of encoder intra-op thread counts [1]")
    p.add_argument("--int8", default="false", help="comma list of true/false: fp32 and/or int8 models [false]")
    add_modes_option(p, "searched by two-mode models")
    p.add_argument("--single-mode", default="P", choices=["P", "N"],
                   help="when a two-mode model searches both modes, it is also timed searching only this mode [P]")
    add_shared_search_options(p, "each MODEL_DIR")
    p.add_argument("--max-utterances", type=int, default=0, help="use the first N cuts (0: all) [0]")
    p.add_argument("--piece-seconds", type=float, default=0.1, help="audio per accept_waveform call [0.1]")
    p.add_argument("--warmup", type=int, default=1, help="untimed decodes of the first utterance per run [1]")
    p.add_argument("--log-interval", type=int, default=25, help="log every this many utterances [25]")
    p.add_argument("--latency", type=str2bool, default=False,
                   help="also measure how late words and marks are shown and how often they are revised [false]")
    p.add_argument("--output-md", type=Path, default=None, help="write the markdown table(s) here")
    p.add_argument("--output-json", type=Path, default=None, help="write every figure here")
    return p


def main(argv=None) -> List[Dict[str, object]]:
    args = get_parser().parse_args(argv)
    command = "python scoring/measure_rtf.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    setup_logging()
    if not args.system:
        fail("give at least one --system NAME=MODEL_DIR[:RESTORE_ONNX]")
    if args.piece_seconds <= 0:
        fail("--piece-seconds must be positive")
    systems = [parse_system(s) for s in args.system]
    threads = parse_list(args.num_threads, int, "--num-threads")
    if any(t < 1 for t in threads):
        fail(f"--num-threads {args.num_threads!r}: thread counts must be >= 1")
    precisions = parse_list(args.int8, str2bool, "--int8")
    files = check_systems(systems, precisions)
    utts = load_utterances(args.cuts, args.max_utterances)
    total = sum(u.duration for u in utts)
    logging.info("%d utterances (%.1f s of audio, %d with a P reference) from %s; pieces of %.2f s",
                 len(utts), total, sum(u.ref_p is not None for u in utts), args.cuts, args.piece_seconds)
    rows = []
    for s in systems:
        for t in threads:
            for int8 in precisions:
                rows.append(run_config(s, files[(s.name, int8)], t, int8, utts, args))
    table = markdown_table(rows)
    latency_rows: List[Dict[str, object]] = []
    if args.latency:
        for s in systems:
            if s.cascade:
                logging.info("%s: a cascade; latency is measured on transducer outputs only", s.name)
                continue
            latency_rows += run_latency(s, files[(s.name, precisions[0])], threads[0], utts, args)
        table += "\n\n" + latency_table(latency_rows)
    print(table, flush=True)
    if args.output_md:
        args.output_md.parent.mkdir(parents=True, exist_ok=True)
        args.output_md.write_text(table + "\n", encoding="utf-8")
        logging.info("Wrote %s", args.output_md)
    if args.output_json:
        args.output_json.parent.mkdir(parents=True, exist_ok=True)
        info = {"command": command, "cuts": str(args.cuts), "num_utts": len(utts), "audio_seconds": total,
                "piece_seconds": args.piece_seconds, "modes": modes_text(args.modes), "single_mode": args.single_mode,
                "search": {"decoding_method": args.decoding_method, "beam_size": args.beam_size,
                           "blank_penalty": args.blank_penalty, "questions": args.questions},
                "rows": rows, "latency_rows": latency_rows}
        args.output_json.write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
        logging.info("Wrote %s", args.output_json)
    return rows


if __name__ == "__main__":
    main()
