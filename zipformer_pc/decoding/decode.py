#!/usr/bin/env python3
"""Decode test sets in both output modes and write icefall-style results.

Usage (``python -m zipformer_pc.decode``, ``zpc-decode`` and ``python -m zipformer_pc.decoding.decode`` are
the same command):
  python -m zipformer_pc.decode --exp-dir egs/synth/exp/conditioned --epoch 10 --avg 3 \
      --bpe-model data/synth/lang_bpe_256/bpe.model \
      --test-sets test=data/synth/fbank/synth_cuts_test.jsonl.gz,test_ood=data/synth/fbank/synth_cuts_test_ood.jsonl.gz \
      --decoding-method modified_beam_search --beam-size 4

  # the extras of a model dir, as the runtime takes them: modified beam search fuses its token LMs
  # (lm-P/N.arpa.gz, less the LODR bigrams lodr-P/N.arpa.gz) and P asks its question model (questions.json.gz)
  python -m zipformer_pc.decode ... --decoding-method modified_beam_search --model-dir egs/synth/pretrained
  # ... or the token LMs of local/train_lm.py from another folder (--lm-dir overrides --model-dir's)
  python -m zipformer_pc.decode ... --decoding-method modified_beam_search --lm-dir exp/onnx
  # by default simulated streaming (masked full-utterance forward) at the export's geometry
  # (zipformer_pc.layout: --chunk-size 32 --left-context-frames 128); full context only when asked
  python -m zipformer_pc.decode ... --chunk-size -1
  # true chunk-by-chunk decoding with the encoder's streaming_forward
  python -m zipformer_pc.decode ... --chunk-size 32 --left-context-frames 128 --streaming true
  # cascade: a norm model's N output restored to P by the restoration model (prepare.sh stage 6)
  python -m zipformer_pc.decode --exp-dir egs/synth/exp/norm ... --restore-model data/synth/restore/p1/restore.onnx
  # P's question sentences end with ? (a question model of local/train_questions.py, overriding --model-dir's;
  # --questions false: none)
  python -m zipformer_pc.decode ... --questions exp/onnx/questions.json.gz
  # blank's logit lowered by 1.5 before each search step (the runtime's --blank-penalty; default 1.0)
  python -m zipformer_pc.decode ... --blank-penalty 1.5

Output modes: N and P from ``two-decoder`` (each head) and ``conditioned``
(each mode); P from ``punct`` with N derived by the shared normalization;
N from ``norm`` (and P too with ``--restore-model``: the cascade baseline,
whose restoration time counts in its RTF).  For each test set and mode it writes, under
``EXP_DIR/DECODING_METHOD/``:

* ``recogs-{test}-{mode}-{suffix}.txt``: icefall ``id:\\tref=[...]`` /
  ``id:\\thyp=[...]`` pairs;
* ``errs-{test}-{mode}-{suffix}.txt``: every metric and per-utterance errors;
* ``wer-summary-{test}-{mode}-{suffix}.json``: all metrics (zipformer_pc.metrics);

and ``results-{suffix}.md``: one row per test set with the columns of the
paper's Table I (WER from the N output; PuncER, CaseER, PC-WER from the P
output) plus PER, WER-C and WER-PC.  The decoding RTF (PyTorch, this
machine) is logged and stored in the JSON.
"""

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch

from zipformer_pc.decoding.beam_search import search
from zipformer_pc.features import SILENCE_LOG_MEL
from zipformer_pc.model.zipformer import add_tail_silence
from zipformer_pc.model.loading import load_model_for_inference
from zipformer_pc.data.datamodule import PCAsrDataModule
from zipformer_pc.data.tokenizer import Tokenizer
from zipformer_pc.layout import DEFAULT_CHUNK_SIZE, DEFAULT_LEFT_CONTEXT_FRAMES, decode_suffix, result_name, table_name
from zipformer_pc.metrics import markdown_header, markdown_row, score_corpus, write_error_file
from zipformer_pc.modes import MODE_IDS, MODE_N, MODE_NAMES, MODE_P, RESTORED_FROM, derive, is_derived, \
    output_modes, rules, search_mode_for
from zipformer_pc.options import (DEFAULT_BLANK_PENALTY, add_checkpoint_options, add_modes_option, add_search_options,
                                  check_blank_penalty, modes_text, resolve_fusion, selected_modes, str2bool)
from zipformer_pc.questions import QuestionModel, find_questions
from zipformer_pc.lm import find_lm, lm_files, load_fusion_lms

MIN_FRAMES = 64  # pad very short batches so the front end always has input


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_checkpoint_options(p)  # --exp-dir, --epoch, --iter, --avg, --use-averaged-model
    p.add_argument("--bpe-model", default=None,
                   help="the BPE model of the training (default: bpe.model of --model-dir, when it has one)")
    p.add_argument("--test-sets", required=True, help="name=cuts.jsonl.gz[,name=cuts.jsonl.gz...]")
    p.add_argument("--model-dir", type=Path, default=None,
                   help="a model directory as the runtime reads it (an export, egs/synth/pretrained): its token LMs "
                        "(lm-P/N.arpa.gz, fused by modified_beam_search), LODR bigrams (lodr-P/N.arpa.gz) and "
                        "question model (questions.json.gz) are used as the runtime uses them; --lm-dir and "
                        "--questions PATH override them")
    p.add_argument("--lm-dir", default="",
                   help="modified_beam_search fuses the token LMs lm-P.arpa.gz / lm-N.arpa.gz of this dir "
                        "(local/train_lm.py) into the modes it has them for (instead of --model-dir's)")
    add_search_options(p, "--lm-dir or --model-dir", question_paths=True)
    p.add_argument("--max-sym-per-frame", type=int, default=1,
                   help="greedy_search: tokens one frame may emit (1, as the streaming runtimes do)")
    add_modes_option(p, "decoded (those the model has)")
    p.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE,
                   help="Encoder chunk (50 Hz frames), by default the export's; -1 = full context")
    p.add_argument("--left-context-frames", type=int, default=DEFAULT_LEFT_CONTEXT_FRAMES,
                   help="Attention left context (50 Hz frames), by default the export's; -1 = all")
    p.add_argument("--streaming", type=str2bool, default=False,
                   help="Chunk-by-chunk streaming_forward instead of the masked full forward")
    p.add_argument("--max-duration", type=float, default=300.0)
    p.add_argument("--num-threads", type=int, default=2)
    p.add_argument("--device", default="auto", help="auto (cuda:0 when CUDA is available, else cpu), cpu, cuda, cuda:N")
    p.add_argument("--restore-model", default="",
                   help="Cascade: restore P from the N output with this restoration model (.onnx or .pt checkpoint)")
    return p


def fusion_lm_dir(args) -> str:
    """The folder whose token LMs beam search fuses: ``--lm-dir``, else ``--model-dir`` when it has LMs and the
    search is modified_beam_search (as the runtime: greedy search fuses none); "" for none."""
    if args.lm_dir:
        return args.lm_dir
    if args.model_dir is not None and args.decoding_method == "modified_beam_search" and \
            any(find_lm(args.model_dir, m) for m in MODE_NAMES.values()):
        return str(args.model_dir)
    return ""


def question_model_path(args) -> Tuple[Optional[str], bool]:
    """The question model to apply to P and whether it was asked for by path (``--questions PATH``): else the
    one of ``--model-dir`` (as the runtime), unless ``--questions false``; (None, False) for none."""
    if isinstance(args.questions, str):
        return args.questions, True
    if args.questions and args.model_dir is not None:
        found = find_questions(args.model_dir)
        return (str(found) if found is not None else None), False
    return None, False


def pick_device(spec: str) -> torch.device:
    """The device ``--device`` names; a clear error for a name torch rejects or a GPU that is not there."""
    if spec == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(spec)
    except RuntimeError as e:
        raise SystemExit(f"--device {spec!r}: {e}")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit(f"--device {spec}: CUDA is not available on this machine (use --device cpu)")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise SystemExit(f"--device {spec}: only {torch.cuda.device_count()} CUDA device(s)")
    elif dev.type != "cpu":
        raise SystemExit(f"--device {spec}: cpu or cuda expected")
    return dev


def parse_test_sets(spec: str) -> List[Tuple[str, str]]:
    out = []
    for item in spec.split(","):
        if "=" not in item:
            raise SystemExit(f"--test-sets expects name=path items, got {item!r}")
        name, path = item.split("=", 1)
        if not Path(path).is_file():
            raise SystemExit(f"Test set {name}: {path} not found")
        out.append((name, path))
    return out


def encode_utterances(encoder, feats: torch.Tensor, lens: torch.Tensor, chunk: int, left: int,
                      streaming: bool = True):
    """Encoder output of whole utterances followed by their tail silence, as the
    streaming runtime sees them: chunk by chunk (``streaming``) or in one call with
    chunked attention."""
    feats, lens = add_tail_silence(feats, lens, chunk)
    if streaming:
        return streaming_encode(encoder, feats, lens, chunk, left)
    return encoder(feats, lens, chunk_size=chunk, left_context_frames=left)


def streaming_encode(encoder, feats: torch.Tensor, lens: torch.Tensor, chunk: int, left: int):
    """Run ``encoder.streaming_forward`` chunk by chunk over whole utterances
    (frames beyond ``lens`` are masked: :func:`encode_utterances` adds the tail
    silence the runtime runs over)."""
    n = feats.size(0)
    shift = encoder.chunk_shift_frames(chunk)
    need = encoder.chunk_feature_frames(chunk)
    t = feats.size(1)
    num_chunks = max(1, -(-max(t - (need - shift), 1) // shift))
    total = (num_chunks - 1) * shift + need
    feats = torch.nn.functional.pad(feats, (0, 0, 0, total - t), value=SILENCE_LOG_MEL)
    states = encoder.get_init_states(n, chunk, left, device=feats.device)  # on the GPU when decoding there
    outs = []
    for c in range(num_chunks):
        piece = feats[:, c * shift : c * shift + need]
        piece_lens = (lens - c * shift).clamp(min=0, max=need)
        out, _, states = encoder.streaming_forward(piece, piece_lens, states)
        outs.append(out)
    out = torch.cat(outs, dim=1)
    out_lens = encoder.output_lengths(lens)
    return out[:, : int(out_lens.max())] if out_lens.max() > 0 else out[:, :1], out_lens


def beam_opts(args, tokenizer, lm) -> Dict[str, object]:
    if args.decoding_method != "modified_beam_search":
        return {}
    return {"unk_id": tokenizer.unk_id, "lm": lm, "lm_scale": args.lm_scale, "lm_token_bonus": args.lm_token_bonus}


def load_lms(lm_dir: str, tokenizer, modes: List[str], lodr_scale: float = 0.0) -> Dict[str, object]:
    """The token LMs of ``lm_dir`` per mode name, bound to the tokenizer's pieces (with their
    LODR bigrams subtracted ``lodr_scale`` times when it is above 0): :func:`zipformer_pc.lm.load_fusion_lms`."""
    files = lm_files(lm_dir, modes)
    try:
        lms = load_fusion_lms(files, modes, tokenizer.pieces, lodr_scale)
    except FileNotFoundError as e:
        raise SystemExit(f"--lodr-scale {lodr_scale:g}, {lm_dir}: {e}")
    for m in lms:
        logging.info(f"Mode {m}: fusing {files[f'lm-{m}']}"
                     + (f", LODR less {lodr_scale:g} x {files[f'lodr-{m}']}" if lodr_scale > 0 else ""))
    return lms


def decode_set(model, tokenizer, cuts_path: str, args, modes: List[int], restorer=None,
               lms: Optional[Dict[str, object]] = None) -> Dict[str, object]:
    lms = lms or {}
    dl = PCAsrDataModule(tokenizer, args.max_duration).test_dataloader(cuts_path)
    hyps: Dict[int, Dict[str, str]] = {m: {} for m in modes}
    refs_n: Dict[str, str] = {}
    refs_p: Dict[str, Optional[str]] = {}
    audio = 0.0
    elapsed = 0.0
    device = next(model.parameters()).device
    for batch in dl:
        feats, lens = batch["features"], batch["feature_lens"]
        if feats.size(1) < MIN_FRAMES:
            feats = torch.nn.functional.pad(feats, (0, 0, 0, MIN_FRAMES - feats.size(1)), value=SILENCE_LOG_MEL)
        t0 = time.perf_counter()
        feats, lens = feats.to(device), lens.to(device)
        enc, enc_lens = encode_utterances(model.encoder, feats, lens, args.chunk_size, args.left_context_frames,
                                          streaming=args.streaming)
        for m in modes:
            if restorer is not None and m in RESTORED_FROM:
                continue  # the cascade's P comes from its N output below
            searched = search_mode_for(model.model_type, m)
            ids = search(model, enc, enc_lens, searched, args.decoding_method, args.beam_size, args.max_sym_per_frame,
                         args.blank_penalty, **beam_opts(args, tokenizer, lms.get(MODE_NAMES[searched])))
            derived = is_derived(model.model_type, m)
            for cid, h in zip(batch["cut_ids"], ids):
                text = tokenizer.decode(h)
                hyps[m][cid] = derive(m, text) if derived else text
        if restorer is not None:
            from zipformer_pc.restoration.apply import cascade_restore

            for m, source in RESTORED_FROM.items():
                if m in modes:
                    batch_src = {cid: hyps[source][cid] for cid in batch["cut_ids"]}
                    hyps[m].update(cascade_restore(batch_src, restorer))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        elapsed += time.perf_counter() - t0
        audio += sum(batch["durations"])
        for cid, n, p in zip(batch["cut_ids"], batch["texts_n"], batch["texts_p"]):
            refs_n[cid] = n
            refs_p[cid] = p
    return {"hyps": hyps, "refs_n": refs_n, "refs_p": refs_p, "audio_sec": audio, "decode_sec": elapsed}


def write_recogs(path: Path, pairs: List[Tuple[str, str, str]]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for cid, ref, hyp in sorted(pairs):
            f.write(f"{cid}:\tref={ref.split()!r}\n{cid}:\thyp={hyp.split()!r}\n")


def main(argv=None) -> None:
    from zipformer_pc.logs import setup_logging

    setup_logging()
    args = get_parser().parse_args(argv)
    if args.model_dir is not None and not args.model_dir.is_dir():
        raise SystemExit(f"--model-dir {args.model_dir}: not a directory")
    if args.bpe_model is None:
        if args.model_dir is None or not (args.model_dir / "bpe.model").is_file():
            raise SystemExit("give --bpe-model (or a --model-dir that holds bpe.model)")
        args.bpe_model = str(args.model_dir / "bpe.model")
    lm_dir = fusion_lm_dir(args)
    lodr_files = bool(lm_dir) and any(find_lm(lm_dir, m, "lodr") for m in MODE_NAMES.values())
    args.lm_scale, args.lm_token_bonus, args.lodr_scale = resolve_fusion(args, bool(lm_dir), lodr_files)
    if lm_dir and not args.lm_dir and args.lm_scale <= 0:
        lm_dir = ""  # the model dir's LMs, turned off with --lm-scale 0 (as the runtime)
    if args.lm_dir and (args.decoding_method != "modified_beam_search" or args.lm_scale <= 0):
        raise SystemExit("--lm-dir needs --decoding-method modified_beam_search and --lm-scale > 0")
    if args.lodr_scale < 0 or (args.lodr_scale > 0 and not lm_dir):
        raise SystemExit("--lodr-scale takes a weight >= 0, and above 0 it needs --lm-dir (or LMs in --model-dir)")
    try:
        check_blank_penalty(args.blank_penalty)
    except ValueError as e:
        raise SystemExit(f"--blank-penalty: {e}")
    torch.set_num_threads(args.num_threads)
    tests = parse_test_sets(args.test_sets)
    device = pick_device(args.device)
    try:
        model = load_model_for_inference(Path(args.exp_dir), args.epoch, args.avg, args.iter, args.use_averaged_model)
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"Cannot load the model to decode: {e}")
    model.to(device)
    logging.info(f"Decoding on {device}")
    tokenizer = Tokenizer(args.bpe_model)
    if args.streaming and args.chunk_size <= 0:
        raise SystemExit("--streaming true needs --chunk-size > 0")
    if args.chunk_size > 0 and not model.encoder.config.causal:
        raise SystemExit(f"{args.exp_dir} has a non-causal encoder: it decodes at full context only "
                         "(give --chunk-size -1)")
    if args.max_sym_per_frame < 1:
        raise SystemExit(f"--max-sym-per-frame must be >= 1, got {args.max_sym_per_frame}")
    available = output_modes(model.model_type)
    restorer = None
    if args.restore_model:
        if not rules(model.model_type).restorable:
            raise SystemExit(f"--restore-model makes a cascade from a norm model, not a {model.model_type} model")
        from zipformer_pc.restoration.model import load_restorer

        path = args.restore_model
        restorer = load_restorer(onnx=path, num_threads=args.num_threads) if path.endswith(".onnx") else \
            load_restorer(checkpoint=path, num_threads=args.num_threads)
        available = output_modes(model.model_type, cascade=True)
    modes = [MODE_IDS[n] for n in selected_modes(args.modes, [MODE_NAMES[m] for m in available])]
    if restorer is not None and any(RESTORED_FROM.get(m) not in (None, *modes) for m in modes):
        modes = list(available)  # the cascade's P needs its N output
    if not modes:
        raise SystemExit(f"A {model.model_type} model has none of the modes {modes_text(args.modes)}")
    model_name = "cascade" if restorer is not None else model.model_type
    questions = None
    questions_path, asked = question_model_path(args)
    if questions_path is not None and MODE_P not in modes:
        if asked:
            raise SystemExit("--questions rewrites the P output, and no P mode is decoded")
        questions_path = None  # the model dir's, and no P decoded (as the runtime)
    if questions_path is not None:
        try:
            questions = QuestionModel.load(questions_path)
        except (OSError, ValueError) as e:
            raise SystemExit(f"--questions: {e}")
        logging.info(f"P: sentences that {questions_path} reads as questions end with ? "
                     f"(threshold {questions.threshold:.2f})")
    lms: Dict[str, object] = {}
    if lm_dir:
        lms = load_lms(lm_dir, tokenizer, [MODE_NAMES[search_mode_for(model.model_type, m)] for m in modes],
                       args.lodr_scale)
        if not lms and args.lm_dir:
            raise SystemExit(f"--lm-dir {args.lm_dir} has no lm-P.arpa.gz / lm-N.arpa.gz for the modes decoded")
    suffix = str(decode_suffix(  # the file names (zipformer_pc.layout); every summary records the penalty
        args.decoding_method, model.desc, beam_size=args.beam_size, lm_scale=args.lm_scale if lms else None,
        lm_token_bonus=args.lm_token_bonus, lodr_scale=args.lodr_scale, max_sym_per_frame=args.max_sym_per_frame,
        blank_penalty=None if args.blank_penalty == DEFAULT_BLANK_PENALTY else args.blank_penalty,
        chunk_size=args.chunk_size, left_context_frames=args.left_context_frames, streaming=args.streaming,
        cascade=restorer is not None, questions=questions is not None))
    out_dir = Path(args.exp_dir) / args.decoding_method
    out_dir.mkdir(parents=True, exist_ok=True)

    rows = []
    for name, path in tests:
        res = decode_set(model, tokenizer, path, args, modes, restorer, lms)
        if questions is not None:
            res["hyps"][MODE_P] = {c: questions.rewrite_text(h) for c, h in res["hyps"][MODE_P].items()}
        rtf = res["decode_sec"] / max(res["audio_sec"], 1e-9)
        logging.info(f"{name}: {len(res['refs_n'])} utterances, {res['audio_sec']:.1f} s audio, RTF {rtf:.3f}")
        summaries: Dict[int, Dict[str, object]] = {}
        for m in modes:
            tag = MODE_NAMES[m]
            if m == MODE_N:
                pairs = [(c, res["refs_n"][c], h) for c, h in res["hyps"][m].items()]
            else:
                pairs = [(c, res["refs_p"][c], h) for c, h in res["hyps"][m].items() if res["refs_p"][c] is not None]
                missing = len(res["hyps"][m]) - len(pairs)
                if missing:
                    logging.info(f"{name}: {missing} utterances have no P reference and are not scored in mode P")
                if not pairs:
                    logging.warning(f"{name}: no P reference: mode P not scored")
                    continue
            score = score_corpus(pairs)
            summ = score.summary()
            summ.update({"rtf": rtf, "test_set": name, "mode": tag, "model_type": model_name, "checkpoint": model.desc,
                         "averaged": model.averaged, "blank_penalty": args.blank_penalty})
            if restorer is not None:
                summ["restore_model"] = args.restore_model
            if questions is not None and m == MODE_P:
                summ["questions"] = questions_path
            summaries[m] = summ
            write_recogs(out_dir / result_name("recogs", name, tag, suffix), pairs)
            write_error_file(str(out_dir / result_name("errs", name, tag, suffix)), pairs, score)
            (out_dir / result_name("wer-summary", name, tag, suffix)).write_text(json.dumps(summ, indent=1) + "\n")
            logging.info(f"{name} mode {tag}: WER {summ['wer']:.2f}" + (
                f", PC-WER {summ['pc_wer']:.2f}, PuncER {summ['punc_er']}" if m == MODE_P else ""))
        if summaries:
            row: Dict[str, object] = dict(summaries.get(MODE_P) or summaries[MODE_N])
            if MODE_N in summaries:
                row["wer"] = summaries[MODE_N]["wer"]  # the paper's WER column: the N output
            if MODE_P not in summaries:
                for k in ("punc_er", "case_er", "pc_wer", "per", "wer_c", "wer_pc"):
                    row[k] = None
            rows.append((name, row))
    table = [f"Model: {model_name} ({args.exp_dir}, {model.desc}: {model.averaged}), {suffix}, "
             f"blank penalty {args.blank_penalty:g}", "", markdown_header("test set")]
    table += [markdown_row(n, r) for n, r in rows]
    text = "\n".join(table) + "\n"
    (out_dir / table_name(suffix)).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
