#!/usr/bin/env python3
"""Copy the pretrained models of egs/synth/pretrain.sh into egs/synth/pretrained/ and write MODEL_CARD.md.

Usage (stage 5 of egs/synth/pretrain.sh):
  python egs/synth/publish_pretrained.py --exp-dir egs/synth/exp_pretrain --data-dir data_pretrain/synth \\
      --out-dir egs/synth/pretrained --avg 3

Writes into ``--out-dir``:

* the streaming ONNX export of the conditioned model (fp32 and int8
  encoder, decoder and joiner, as ``python -m zipformer_pc.export`` names them) and
  ``tokens.txt``: what ``python -m zipformer_pc.transcribe --model-dir`` and
  sherpa-onnx load;
* ``bpe.model``;
* ``norm.pt`` and ``conditioned.pt``: the averaged weights decoding uses, in
  float16, with their ``model_config``, for ``train.py --init-from``;
* ``MODEL_CARD.md``: data, training, the metrics of stage 3 on test and
  test_ood, the streaming RTF of stage 4, commands and known limits.

``--models conditioned`` publishes only the conditioned model of this run:
the norm model stays as ``--out-dir`` ships it, weights and card lines alike
(a session that trained one model replaces only that one).

``--text-models-only true`` republishes only the token LMs and the question
model: the shipped weights and ONNX files stay (stage 4 of ``pretrain.sh
--text-models-only true`` ran the runtime with them, which is checked), and of
the card only the header's note (with what the runtime table said before),
the two files' rows, the LMs' known limit, the total size and the runtime
table change.

Refuses to publish when the files would exceed ``--max-mb`` (60 MB of
10^6 bytes: the project's budget for shipped models).
"""

import argparse
import filecmp
import gzip
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Tuple

import torch

from zipformer_pc.layout import (DEFAULT_CHUNK_SIZE as CHUNK, DEFAULT_LEFT_CONTEXT_FRAMES as LEFT, decode_suffix,
                                 parse_result_name, result_glob, result_name, whisper_suffix)
from zipformer_pc.lm import LM_PREFIXES
from zipformer_pc.metrics import fmt
from zipformer_pc.options import str2bool
from zipformer_pc.whisper import rtf_note, setup_note
from zipformer_pc.model.loading import averaged_weights, batch_checkpoints, load_checkpoint

ROOT = Path(__file__).resolve().parents[2]
CARD = "MODEL_CARD.md"  # the model card, beside the weights it describes
MODES = {"N": "wer", "P": "pc_wer"}


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--exp-dir", type=Path, required=True)
    p.add_argument("--data-dir", type=Path, required=True, help="DATA_DIR/synth of the corpus")
    p.add_argument("--out-dir", type=Path, required=True)
    p.add_argument("--avg", type=int, default=3)
    p.add_argument("--command", default="bash egs/synth/pretrain.sh --publish true")
    p.add_argument("--train-hours", default="")
    p.add_argument("--text-hours", default="",
                   help="the LMs and the question model learnt the text of a corpus of this size (pretrain.sh "
                        "--text-hours), not --data-dir's references")
    p.add_argument("--lm-gcide-hours", default="0",
                   help="the N LM also learnt ~this many hours of GCIDE text (pretrain.sh --lm-gcide-hours)")
    p.add_argument("--max-mb", type=float, default=60.0, help="budget of the shipped files, in MB of 10^6 bytes")
    p.add_argument("--models", default="norm,conditioned",
                   help="models of --exp-dir to publish; the others keep what --out-dir ships")
    p.add_argument("--real-speech-only", type=str2bool, default=False,
                   help="keep the shipped model and its card, and write (or replace) the card's real-speech "
                        "section: test_real with the runtime (stage 4's runtime-*-test_real.json and .tsv of the "
                        "shipped files) and Whisper base's rows (stage 4's EXP_DIR/whisper_base)")
    p.add_argument("--text-models-only", type=str2bool, default=False,
                   help="copy only the LMs and the question model of --exp-dir into --out-dir (its runtime "
                        "rows measured with --out-dir's ONNX files) and update the card's lines about them")
    return p


def newest_batch(exp: Path) -> int:
    found = batch_checkpoints(exp)
    if not found:
        raise SystemExit(f"No checkpoint-*.pt in {exp}")
    return int(found[0].stem.split("-")[1])


def metrics(exp: Path, desc: str, method: str = "greedy_search", required: bool = True) -> Dict[str, Dict[str, dict]]:
    """{test set: {mode: summary}} from decode.py's wer-summary files for ``desc`` decoded with
    ``method`` (empty when there are none and they are not ``required``)."""
    out: Dict[str, Dict[str, dict]] = {}
    # stage 3 decodes at the export's geometry, modified beam search with 4 paths
    suffix = str(decode_suffix(method, desc, beam_size=4))
    for f in sorted((exp / method).glob(result_glob("wer-summary", suffix=suffix))):
        r = parse_result_name(f.name)
        if r is None or r.suffix != suffix:
            continue
        s = json.loads(f.read_text())
        out.setdefault(s["test_set"], {})[s["mode"]] = s
    if not out and required:
        raise SystemExit(f"No decoding results for {desc} in {exp}/{method}: run stage 3")
    return out


def metric_table(name: str, m: Dict[str, Dict[str, dict]]) -> List[str]:
    rows = [f"| {name} | test set | WER (N) | WER-C | PC-WER | PuncER | CaseER | PER |", "|---|---|---|---|---|---|---|---|"]
    for test, by_mode in m.items():
        n, p = by_mode.get("N", {}), by_mode.get("P", {})
        rows.append(f"| | {test} | {fmt(n.get('wer'))} | {fmt(p.get('wer_c'))} | {fmt(p.get('pc_wer'))} | "
                    f"{fmt(p.get('punc_er'))} | {fmt(p.get('case_er'))} | {fmt(p.get('per'))} |")
    return rows


def speaker_hours(cuts: Path) -> Dict[str, float]:
    """Hours of speech per supervision speaker of a cut manifest."""
    hours: Dict[str, float] = {}
    with gzip.open(cuts, "rt") as f:
        for line in f:
            for sup in json.loads(line).get("supervisions", []):
                name = sup.get("speaker") or "?"
                hours[name] = hours.get(name, 0.0) + float(sup.get("duration", 0.0)) / 3600
    return hours


def speakers(cuts: Path) -> List[str]:
    """The voices (supervision speakers) of a cut manifest."""
    return sorted(speaker_hours(cuts))


def voices_line(part: str, names: List[str], listed: int = 16) -> str:
    """``* voices of `part`: ...``: every name when there are few, else the count per TTS engine
    (the name's prefix) and a few examples."""
    if len(names) <= listed:
        return f"* voices of `{part}`: {', '.join(names)}"
    engines: Dict[str, int] = {}
    for n in names:
        engines[n.split("-", 1)[0]] = engines.get(n.split("-", 1)[0], 0) + 1
    per_engine = ", ".join(f"{k} {v}" for k, v in sorted(engines.items()))
    step = max(1, len(names) // 8)
    return (f"* voices of `{part}`: {len(names)} ({per_engine}), e.g. {', '.join(names[::step][:8])}")


def is_tts_voice(name: str) -> bool:
    """Whether ``name`` is one of prepare.sh's TTS voices (local/tts.py owns their names); the other
    speakers of a training corpus are people (e.g. ``--dataset games`` or ``custom``)."""
    local = str(Path(__file__).resolve().parents[2] / "local")
    if local not in sys.path:
        sys.path.insert(0, local)
    from tts import voice_by_name

    return voice_by_name(name) is not None


def training_corpus(train_cuts: str, data_dir: Path) -> Tuple[Path, Path]:
    """The cut manifest the conditioned model trained on (its checkpoint's ``--train-cuts``, when that
    file is on this machine; else ``data_dir``'s train cuts) and the ``stats.md`` of its corpus (that
    manifest's corpus folder's, e.g. a ``local/join_corpora.py`` join's; else ``data_dir``'s)."""
    cuts = Path(train_cuts) if train_cuts else None
    if cuts is not None and cuts.is_file():
        stats = cuts.parent.parent / "stats.md"
        return cuts, stats if stats.is_file() else data_dir / "stats.md"
    return data_dir / "fbank" / "synth_cuts_train.jsonl.gz", data_dir / "stats.md"


def people_line(hours: Dict[str, float]) -> str:
    """``* people's speech in it: ...`` (the speakers that are not TTS voices, with their hours), or ''."""
    people = {n: h for n, h in hours.items() if not is_tts_voice(n)}
    if not people:
        return ""
    total = sum(hours.values())
    each = ", ".join(f"{n} {h:.1f} h" for n, h in sorted(people.items()))
    return (f"* people's speech in it: {sum(people.values()):.1f} h of its {total:.1f} h ({each}; "
            "docs/real-speech.md says where each comes from and who transcribed it)")


def marks_note(data_dir: Path) -> str:
    """Which marks the references keep, from prepare.sh's punct_config.json."""
    try:
        cfg = json.loads((data_dir / "punct_config.json").read_text())["synth"]
    except (OSError, KeyError, ValueError):
        return "see the corpus's punct_config.json."
    mapped = ", ".join(f"`{a}` as `{b}`" for a, b in cfg.get("map", {}).items())
    return (f"the model writes only {' '.join(f'`{m}`' for m in cfg['keep'])}" + (f" ({mapped})" if mapped else "")
            + "; other marks are dropped from its references.")


TRAIN_OPTIONS = ("encoder", "max_duration", "base_lr", "lr_batches", "lr_epochs", "warmup_batches", "loss",
                 "ctc_loss_scale", "warm_step", "spec_augment", "convnext_hidden_ratio", "lr_plateau_factor",
                 "lr_plateau_patience", "lr_cooldown_batches", "lr_cooldown_minutes", "seed")
OFF_WHEN_ZERO = ("lr_cooldown_batches", "lr_cooldown_minutes")  # named on the card only when on


def training_story(exp: Path, args: dict) -> List[str]:
    """The options a model was trained with (its last run's) and the schedule
    changes its logs record: new options on resumption, cuts on a validation plateau."""
    opts = " ".join(f"--{k.replace('_', '-')} {args[k]}" for k in TRAIN_OPTIONS
                    if args.get(k) is not None and (args[k] or k not in OFF_WHEN_ZERO))
    out = [f"  options: `{opts}`"] if opts else []
    resumed_at = None
    for log in sorted((exp / "log").glob("log-train-*")):
        for line in log.read_text(errors="replace").splitlines():
            m = re.search(r"Resuming from batch (\d+)", line)
            if m:
                resumed_at = m.group(1)
            m = re.search(r"Resuming with a new schedule: (.*)$", line)
            if m:
                out.append(f"  at batch {resumed_at}: {m.group(1)}")
            m = re.search(r"Plateau at batch (\d+): .*: learning rate (x[\d.]+) \(scale [^,]*, lr ([^)]*)\)", line)
            if m:
                out.append(f"  at batch {m.group(1)}: learning rate {m.group(2)} on a validation plateau "
                           f"(to {m.group(3)})")
    return out


@dataclass
class KeptModel:
    """What an earlier MODEL_CARD.md says of a model published again unchanged."""
    training: List[str]  # its training bullet, with the indented lines under it
    metrics: List[str]  # its metric table (greedy search)
    source: str  # the card its corpus line names: "commit ABC" (the card's own header or, kept before, its
    # corpus line's), or "an earlier commit"
    beam_metrics: List[str] = field(default_factory=list)  # its beam-search table, if the card had one


KEPT_NOTE = "  (kept as the previous publication shipped it"


def kept_corpus_line(name: str, source: str) -> str:
    """The card's Data line of model ``name`` published unchanged: the card of the corpus it trained on."""
    return f"* the {name} model was trained on the corpus of the earlier card ({source}), not necessarily this one"


def kept_card_lines(card: str, name: str) -> KeptModel:
    """The lines of an earlier MODEL_CARD.md about model ``name``."""
    lines = card.splitlines()
    kept = KeptModel([], [], "an earlier commit")
    commit = card_commit(card)
    if commit:
        kept.source = f"commit {commit}"
    corpus_head, corpus_tail = kept_corpus_line(name, "\0").split("\0")
    for i, line in enumerate(lines):
        if line.startswith(corpus_head) and line.endswith(corpus_tail):
            # kept before too: its corpus is still the one that card's line names, not the card's own
            kept.source = line[len(corpus_head):-len(corpus_tail)]
        if line.startswith(f"* **{name}**:"):
            kept.training = [line] + [x for x in _run(lines[i + 1:], lambda x: x.startswith("  "))
                                      if not x.startswith(KEPT_NOTE)]  # main() adds the note once
        if line.startswith(f"| {name} | test set |"):  # greedy search first, then beam search if any
            table = [line] + _run(lines[i + 1:], lambda x: x.startswith("|"))
            if not kept.metrics:
                kept.metrics = table
            elif not kept.beam_metrics:
                kept.beam_metrics = table
    if not kept.training or not kept.metrics:
        raise SystemExit(f"The shipped MODEL_CARD.md has no training bullet or metric table of {name}: "
                         f"publish it with --models including {name}")
    return kept


def _run(lines: List[str], keep) -> List[str]:
    """The leading lines for which ``keep`` holds."""
    got = []
    for x in lines:
        if not keep(x):
            break
        got.append(x)
    return got


def init_source(exp: Path) -> str:
    """Where a model's first training run took its initial weights from (its log), or ''."""
    for log in sorted((exp / "log").glob("log-train-*")):
        m = re.search(r"Initialised \d+ tensors from (\S+)", log.read_text(errors="replace"))
        if m:
            return m.group(1)
    return ""


def card_commit(card: str) -> str:
    """The commit an earlier MODEL_CARD.md names in its header ("(commit abc1234)" or "(commit abc1234; ..."), or ''."""
    m = re.search(r"\(commit (\w+)[;)]", card)
    return m.group(1) if m else ""


def published_from(out: Path, name: str, exp: Path) -> bool:
    """Whether the shipped ``name``.pt came from the run in ``exp`` (a checkpoint at its batch count is there)."""
    shipped = out / f"{name}.pt"
    if not shipped.exists():
        return False
    b = torch.load(shipped, map_location="cpu", weights_only=False).get("batch_idx_train")
    return b is not None and (exp / f"checkpoint-{b}.pt").exists()


STARTED_FROM = "the weights it started from ("


def cut_lineage(how: str) -> str:
    """``how`` (the weights' description) with the description of the weights a mix started from left out.

    ``zipformer_pc.training.interpolate`` writes "x the weights it started from (PATH: how PATH was made)",
    and that was a mix too, so every republication nested one model more: the card keeps PATH and the
    earlier card (named by its commit in the start note) says the rest."""
    out, i = [], 0
    while True:
        j = how.find(STARTED_FROM, i)
        if j < 0:
            return "".join(out) + how[i:]
        k, depth = j + len(STARTED_FROM), 1
        end = k
        while end < len(how) and depth:
            depth += {"(": 1, ")": -1}.get(how[end], 0)
            end += 1
        inner = how[k:end - 1] if depth == 0 else how[k:]
        out.append(how[i:k] + inner.split(": ", 1)[0] + ")")
        i = end


def card_beside(weights: str) -> str:
    """The path, from the project root as ``git show`` wants it, of the model card beside published ``weights``."""
    p = Path(weights)
    if p.is_absolute():
        try:
            p = p.resolve().relative_to(ROOT)
        except ValueError:
            pass
    return (p.parent / CARD).as_posix()


def start_note(name: str, source: str, old_card: str, same_run: bool = False) -> str:
    """Where model ``name`` started (``source``: its first run's --init-from, or ''), for its training bullet.

    ``same_run``: the earlier card describes an earlier point of this very run, so its note (which may
    have been written by hand) still holds.  When the run continued the previously published model of its
    name, the earlier card's bullet says what that one was, and the earlier card (by its commit) the models
    before it: one model back, so the note does not grow with every republication."""
    prev = old_card.splitlines()
    prev_start = next((x.strip() for x in prev if x.strip().startswith(f"The {name} model ")), "")
    if same_run and prev_start:
        return prev_start
    if Path(source).name == f"{name}.pt":
        prev_run = next((x.split(":", 1)[1].strip() for x in prev if x.startswith(f"* **{name}**:")), "")
        commit = card_commit(old_card)
        card = card_beside(source)
        earlier = (" How it started and the models before it: the card published with it"
                   + (f" (its header names commit {commit})" if commit else "")
                   + f", in the history of `{card}` (`git log -p -- {card}`).")
        return (f"The {name} model continued from the previously published {name} model (`{source}`"
                + (f", commit {commit}" if commit else "") + ": its averaged weights, a fresh optimizer and "
                "schedule); the figures above count this run only."
                + (f" That model: {cut_lineage(prev_run)}" if prev_run else "") + earlier)
    if name == "conditioned" and (Path(source).name == "norm.pt" or Path(source).parent.name == "norm"):
        return ("The conditioned model started from the norm model (encoder, predictor, joiner); "
                "the P mode embedding started fresh.")
    if source:  # another run's checkpoint (pretrain.sh does not do this by itself)
        return (f"The {name} model continued from `{source}` (the weights of another run, a fresh "
                "optimizer and schedule); the figures above count this run only.")
    return f"The {name} model was trained from scratch."


RUNTIME_RUNS = ("greedy_search", "modified_beam_search", "modified_beam_search-noq")
# the synthetic test sets (required) and the recordings of people (when prepare.sh --dataset real made them)
REPORT_SETS = ("test", "test_ood", "test_real")
REAL_SET = "test_real"


def measured_sets(exp: Path) -> List[str]:
    """The sets stage 4's runtime must have measured: test and test_ood, and test_real when it was."""
    return [t for t in REPORT_SETS if t != REAL_SET
            or any((exp / f"runtime-{run}-{t}.json").exists() for run in RUNTIME_RUNS)]


def whisper_section(whisper_dir: Path) -> List[str]:
    """Whisper base's rows (stage 4, ``scoring/whisper_score.py``) on the sets it transcribed, or nothing."""
    rows, summaries = [], []
    for t in REPORT_SETS:
        f = {m: whisper_dir / result_name("wer-summary", t, m, whisper_suffix("base")) for m in ("N", "P")}
        if not f["N"].exists():
            continue
        n = json.loads(f["N"].read_text())
        p = json.loads(f["P"].read_text()) if f["P"].exists() else {}
        rtf = "-" if n.get("rtf") is None else f"{n['rtf']:.3f}"
        rows.append(f"| {t} | {fmt(n.get('wer'))} | {fmt(p.get('pc_wer'))} | {fmt(p.get('punc_er'))} | "
                    f"{fmt(p.get('case_er'))} | {fmt(p.get('per'))} | {rtf} |")
        summaries.append(n)
    if not rows:
        return []
    return ["## Whisper base on the same sets", "",
            "The comparison system of the paper: Whisper base (74M parameters, not streaming, trained on 680k h of "
            f"real speech), run by {setup_note(summaries)} (installed by `tools/setup_env.sh --whisper`), its "
            "text scored with our normalization and metrics (`scoring/whisper_score.py`, stage 4).",
            "", "| test set | WER | PC-WER | PuncER | CaseER | PER | RTF (1 thread) |", "|---|---|---|---|---|---|---|",
            *rows, "", rtf_note(summaries), ""]


def real_groups_section(exp: Path, whisper_dir: Path, real_cuts: Path) -> List[str]:
    """test_real per source and kind (a digit list and a sentence are not one figure): this model with
    the runtime's greedy search and beam search, and Whisper base when it ran."""
    from zipformer_pc.data.references import SYNTH_PUNCT
    from zipformer_pc.metrics import score_groups
    from zipformer_pc.transcripts import pair_transcripts, read_groups, read_transcripts

    if not real_cuts.exists():
        return []
    systems = [(f"this model, {run.replace('_', ' ')}", exp / f"runtime-{run}-{REAL_SET}.tsv", True)
               for run in ("greedy_search", "modified_beam_search")]
    systems.append(("Whisper base", {m: whisper_dir / result_name("recogs", REAL_SET, m, whisper_suffix("base"))
                                     for m in ("N", "P")}, False))
    groups = read_groups(str(real_cuts), ["source", "kind"])
    refs = {mode: read_transcripts(str(real_cuts), "ref", mode) for mode in ("N", "P")}  # read once, not per system
    table: Dict[str, Dict[str, Dict[str, dict]]] = {}
    for name, path, runtime in systems:
        for mode in ("N", "P"):
            hyp = path[mode] if isinstance(path, dict) else path
            if not hyp.exists():
                continue
            hyps = read_transcripts(str(hyp), "hyp", mode if runtime else None)
            pairs = pair_transcripts(refs[mode], hyps).triples
            for g, summ in score_groups(pairs, groups, SYNTH_PUNCT).items():
                table.setdefault(g, {}).setdefault(name, {})[mode] = summ
    names = [n for n, _, _ in systems if any(n in by for by in table.values())]
    if not names:
        return []
    lines = [f"### `{REAL_SET}` per source and kind", "",
             "WER (N) / PC-WER (P; `-`: no P reference in the group) per group of utterances.", "",
             "| source/kind | utterances | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for g, by in table.items():
        count = next(iter(next(iter(by.values())).values()))["num_utts"]
        cells = []
        for n in names:
            m = by.get(n, {})
            cells.append(f"{fmt(m.get('N', {}).get('wer'))} / {fmt(m.get('P', {}).get('pc_wer'))}")
        lines.append(f"| {g} | {count} | " + " | ".join(cells) + " |")
    return lines + [""]


def runtime_section(exp: Path) -> List[str]:
    """The ONNX runtime's scores as users run it (``runtime-RUN-SET.json`` of stage 4): greedy
    search, beam search with the token LMs, each with the question model, and beam search without it."""
    runs = [(run, t, json.loads((exp / f"runtime-{run}-{t}.json").read_text()))
            for run in RUNTIME_RUNS for t in REPORT_SETS if t != REAL_SET and (exp / f"runtime-{run}-{t}.json").exists()]
    if not runs:
        return []
    beam = next((r["search"] for run, _, r in runs if r["search"]["decoding_method"] == "modified_beam_search"), None)
    lms = (f" Beam search keeps {beam['beam']} paths and fuses `lm-P.arpa.gz` / `lm-N.arpa.gz` with `--lm-scale "
           f"{beam['lm_scale']:g} --lm-token-bonus {beam['lm_token_bonus']:g}`" if beam and beam.get("lms") else "")
    if lms:
        lodr = beam.get("lodr_scale") or 0
        lms += (f", less `--lodr-scale {lodr:g}` times the log probability of the LODR bigrams `lodr-P.arpa.gz` / "
                "`lodr-N.arpa.gz`." if lodr else ".")
    lms += penalty_note({r["search"].get("blank_penalty") for _, _, r in runs})
    lines = ["The ONNX runtime as users run it (stage 4: `python -m zipformer_pc.transcribe --cuts ...`, fp32, streaming in "
             "0.1 s pieces; `questions.json.gz` on unless `--questions false`)." + lms, "",
             "| test set | search | LMs | question model | WER | PC-WER | PuncER | CaseER | PER | RTF (1 thread) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for run, t, r in runs:
        n, p, search = r["scores"].get("N", {}), r["scores"].get("P", {}), r["search"]
        lines.append(f"| {t} | {search['decoding_method']} | {'yes' if search.get('lms') else 'no'} | "
                     f"{'yes' if search.get('questions') else 'no'} | {fmt(n.get('wer'))} | "
                     f"{fmt(p.get('pc_wer'))} | {fmt(p.get('punc_er'))} | {fmt(p.get('case_er'))} | "
                     f"{fmt(p.get('per'))} | {r['rtf']:.3f} |")
    return lines + [""]


def penalty_note(values) -> str:
    """The blank penalty that produced a table's figures (its runs' ``blank_penalty``: all alike), or ''."""
    values = {float(v) for v in values if v is not None}
    if not values:
        return ""
    return " Blank penalty: " + " / ".join(f"`--blank-penalty {v:g}`" for v in sorted(values)) + "."


def text_source(text_hours: str) -> str:
    """What the LMs and the question model learnt (publish's ``--text-hours``)."""
    return (f"the training text of a {text_hours} h corpus of the same seed (`pretrain.sh --text-hours "
            f"{text_hours}`: its text only, no speech)" if text_hours else "the training references")


def read_gcide(gcide_hours: str) -> bool:
    """Whether the N LM also read GCIDE text (``--lm-gcide-hours``)."""
    return gcide_hours not in ("", "0")


def lm_row(source: str, gcide_hours: str = "0") -> str:
    gcide = (f"; N also of ~{gcide_hours} h of the text of Webster's 1913 dictionary, GCIDE"
             if read_gcide(gcide_hours) else "")
    return ("| `lm-P.arpa.gz`, `lm-N.arpa.gz` | token 5-gram LMs for shallow fusion in modified beam search "
            f"(`local/train_lm.py`), P's cased and punctuated, N's normalized, of {source}{gcide} |")


LM_LIMIT = "* The token LMs know"


def lm_limit(gcide_hours: str = "0") -> str:
    """The card's known limit of the LMs."""
    if not read_gcide(gcide_hours):
        return (f"{LM_LIMIT} the training references only: they help less on other text (`test_ood`) "
                "and pull rare words towards Austen's spellings; `--lm-scale 0` turns them off.")
    return (f"{LM_LIMIT} Austen's text (P) and Austen's and the dictionary's (N): they help less on other text "
            "(`test_ood`), P's pulls rare words towards Austen's spellings; `--lm-scale 0` turns them off.")


LODR_ROW = "| `lodr-P.arpa.gz`, `lodr-N.arpa.gz` |"


def lodr_row(source: str) -> str:
    return (f"{LODR_ROW} token bigrams (`local/train_lm.py --prefix lodr --order 2`) of {source}, the "
            "predictor's internal LM as LODR estimates it: beam search subtracts them from the fusion "
            "(`--lodr-scale`) |")


def text_lm_files(directory: Path) -> List[Path]:
    """The token LMs and LODR bigrams of ``directory`` (``lm-*`` and ``lodr-*.arpa.gz``)."""
    return [f for prefix in LM_PREFIXES for f in sorted(directory.glob(f"{prefix}-*.arpa.gz"))]


def questions_row(source: str) -> str:
    return ("| `questions.json.gz` | the question model: which sentences P ends with `?` instead of `.`, read "
            "from their words (`local/train_questions.py`, `zipformer_pc/questions.py`; the runtime applies it "
            f"unless `--questions false`, sherpa-onnx does not), trained on {source} |")


def staged_mb(staging: Path, max_mb: float) -> float:
    """The size of the files staged for publication (the card aside), refused above ``max_mb``."""
    total = sum(f.stat().st_size for f in staging.iterdir() if f.name != CARD) / 1e6
    if total > max_mb:
        shutil.rmtree(staging)
        raise SystemExit(f"The pretrained files take {total:.2f} MB (of 10^6 bytes), more than --max-mb {max_mb}")
    return total


def install(staging: Path, out: Path, card: List[str]) -> None:
    """Write the card into ``staging`` and put it in the place of ``out``."""
    (staging / CARD).write_text("\n".join(card) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except Exception:
        return "unknown"


RUNTIME_INTRO = "The ONNX runtime as users run it"
TEXT_NOTE = "The token LMs and the question model were republished"


def runtime_block(lines: List[str]) -> Tuple[int, int]:
    """Where a card's runtime section (its paragraph, a blank line, its table) starts and ends (exclusive)."""
    start = next((i for i, x in enumerate(lines) if x.startswith(RUNTIME_INTRO)), None)
    table = None
    if start is not None:
        table = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("|")), None)
    if table is None:
        raise SystemExit("The shipped MODEL_CARD.md has no runtime table: publish the whole model (stages 3-5)")
    return start, table + len(_run(lines[table:], lambda x: x.startswith("|")))


RUNTIME_COLUMNS = ("WER", "PC-WER", "PuncER", "CaseER", "PER")


def runtime_rows(lines: List[str]) -> Dict[str, List[str]]:
    """{"`test set` search [+ LMs] + question model" (or ", no question model"): [WER, PC-WER, PuncER,
    CaseER, PER]} of a runtime table's rows."""
    rows = {}
    for x in lines:
        cells = [c.strip() for c in x.strip().strip("|").split("|")]
        if len(cells) == 10 and cells[0] not in ("test set", "---"):
            search = cells[1] + (" + LMs" if cells[2] == "yes" else "")
            rows[f"`{cells[0]}` {search}" + (" + question model" if cells[3] == "yes" else ", no question model")
                 ] = cells[4:9]
    return rows


def runtime_changes(old: List[str], new: List[str]) -> str:
    """What moved between two runtime tables (RTF aside: it is the machine's), row by row."""
    before, after = runtime_rows(old), runtime_rows(new)
    moved = []
    for row, values in after.items():
        diff = [f"{c} {a} -> {b}" for c, a, b in zip(RUNTIME_COLUMNS, before.get(row, []), values) if a != b]
        if row in before:
            moved.append(f"{row}: " + (", ".join(diff) if diff else "unchanged"))
    return "; ".join(moved)


def republish_text_models(args) -> None:
    """``--text-models-only``: the LMs and the question model of --exp-dir replace --out-dir's, whose
    weights and ONNX files stay; the card's lines about them and its runtime table are rewritten."""
    out, exp = args.out_dir, args.exp_dir / "conditioned"
    onnx_dir = exp / "onnx"
    card_path = out / CARD
    if not card_path.exists():
        raise SystemExit(f"{out} has no MODEL_CARD.md: --text-models-only updates a published model")
    onnx = sorted(out.glob("*.onnx"))
    if not onnx:
        raise SystemExit(f"{out} ships no ONNX files")
    for f in onnx + [out / "tokens.txt"]:  # the runtime table below must describe the files users get
        if not (onnx_dir / f.name).exists() or not filecmp.cmp(f, onnx_dir / f.name, shallow=False):
            raise SystemExit(f"{onnx_dir / f.name} is not the shipped {f}: run pretrain.sh --stage 4 "
                             "--text-models-only true (it measures the runtime with the shipped files)")
    text_models = text_lm_files(onnx_dir) + sorted(onnx_dir.glob("questions.json.gz"))
    if not (onnx_dir / "questions.json.gz").exists():
        raise SystemExit(f"No questions.json.gz in {onnx_dir}: run stage 4")
    newest_model = max(f.stat().st_mtime for f in text_models)
    stale = [run for run in RUNTIME_RUNS for t in measured_sets(exp)
             if not (exp / f"runtime-{run}-{t}.json").exists()
             or (exp / f"runtime-{run}-{t}.json").stat().st_mtime < newest_model]
    if stale:
        raise SystemExit(f"The runtime was not run with these LMs and question model ({', '.join(stale)} missing "
                         "or older): run stage 4")
    lines = card_path.read_text().splitlines()
    start, end = runtime_block(lines)
    runtime = runtime_section(exp)
    while runtime and not runtime[-1]:
        runtime.pop()
    version = json.loads(gzip.decompress((onnx_dir / "questions.json.gz").read_bytes())).get("version")
    source = text_source(args.text_hours)
    gcide = f"; the N LM also on ~{args.lm_gcide_hours} h of GCIDE text" if read_gcide(args.lm_gcide_hours) else ""
    note = (f"{TEXT_NOTE} by `{args.command}` (commit {git_commit()}): trained on {source}"
            f"{gcide}; question model version {version}. The runtime table below was measured again with the "
            "shipped ONNX files; the weights and the other tables are those of the publication above. Against the "
            f"LMs and question model published before: {runtime_changes(lines[start:end], runtime)}.")
    lines[start:end] = runtime
    earlier = next((i for i, x in enumerate(lines) if x.startswith(TEXT_NOTE)), None)
    if earlier is not None:  # an earlier republication's note, and the blank line before it
        del lines[earlier - 1:earlier + 1]
    header = next((i for i, x in enumerate(lines) if x.startswith("Trained by ")), 1)
    lines[header + 1:header + 1] = ["", note]
    lodr = any(f.name.startswith("lodr-") for f in text_models) or any(out.glob("lodr-*.arpa.gz"))
    lines = [x for x in lines if not x.startswith(LODR_ROW)]
    for i, x in enumerate(lines):
        if x.startswith("| `lm-P.arpa.gz`"):
            lines[i:i + 1] = [lm_row(source, args.lm_gcide_hours)] + ([lodr_row(source)] if lodr else [])
        elif x.startswith(LM_LIMIT):
            lines[i] = lm_limit(args.lm_gcide_hours)
        elif x.startswith("| `questions.json.gz`"):
            lines[i] = questions_row(source)
    staging = out.with_name(out.name + ".new")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(out, staging)
    for f in text_models:
        shutil.copy(f, staging / f.name)
    total_mb = staged_mb(staging, args.max_mb)
    install(staging, out, [f"Total {total_mb:.1f} MB." if x.startswith("Total ") and x.endswith(" MB.") else x
                           for x in lines])
    print(f"Republished the LMs and the question model in {out} ({total_mb:.1f} MB)")


REAL_HEADING = "## Real speech and Whisper base"


def real_speech_section(exp_dir: Path, real_cuts: Path) -> List[str]:
    """The card's real-speech block: the runtime on test_real (greedy and beam search), Whisper
    base on every set it transcribed, and test_real per source and kind; empty when nothing was measured."""
    exp = exp_dir / "conditioned"
    runs = [(run, json.loads((exp / f"runtime-{run}-{REAL_SET}.json").read_text()))
            for run in RUNTIME_RUNS if (exp / f"runtime-{run}-{REAL_SET}.json").exists()]
    whisper = whisper_section(exp_dir / "whisper_base")
    if not runs and not whisper:
        return []
    lines = [REAL_HEADING, "",
             "`test_real` holds recordings of people (`prepare.sh --dataset real`: Asterisk's telephone prompts, "
             "ALSA's channel clips, Drascula's voice acting; docs/real-speech.md); this model never heard a "
             "person. The runtime as users run it on it:", ""]
    if runs:
        lines += ["| search | LMs | question model | WER | PC-WER | PuncER | CaseER | PER | RTF (1 thread) |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for run, r in runs:
            n, p, search = r["scores"].get("N", {}), r["scores"].get("P", {}), r["search"]
            lines.append(f"| {search['decoding_method']} | {'yes' if search.get('lms') else 'no'} | "
                         f"{'yes' if search.get('questions') else 'no'} | {fmt(n.get('wer'))} | {fmt(p.get('pc_wer'))} | "
                         f"{fmt(p.get('punc_er'))} | {fmt(p.get('case_er'))} | {fmt(p.get('per'))} | {r['rtf']:.3f} |")
        lines.append("")
    if whisper:
        lines += ["#" + whisper[0]] + whisper[1:]
    lines += real_groups_section(exp, exp_dir / "whisper_base", real_cuts)
    return lines


def republish_real_speech(args) -> None:
    """``--real-speech-only``: the shipped card gets its real-speech block (replacing an earlier one)."""
    card_path = args.out_dir / CARD
    if not card_path.exists():
        raise SystemExit(f"{args.out_dir} has no MODEL_CARD.md: --real-speech-only updates a published model")
    onnx_dir = args.exp_dir / "conditioned" / "onnx"
    for f in sorted(args.out_dir.glob("encoder-*.onnx")):
        if not (onnx_dir / f.name).exists() or not filecmp.cmp(f, onnx_dir / f.name, shallow=False):
            raise SystemExit(f"{onnx_dir / f.name} is not the shipped {f}: measure the shipped files (pretrain.sh "
                             "--stage 4 --real-speech-only true)")
    block = real_speech_section(args.exp_dir, args.data_dir.parent / "real" / "fbank" / f"real_cuts_{REAL_SET}.jsonl.gz")
    if not block:
        raise SystemExit(f"Nothing measured on {REAL_SET} in {args.exp_dir}: run pretrain.sh --stage 4 "
                         "--real-speech-only true")
    block += [f"(Written by `{args.command}` from the measurements of `pretrain.sh --stage 4 --real-speech-only "
              f"true` in the same --exp-dir, commit {git_commit()}.)", ""]
    lines = card_path.read_text().splitlines()
    start = next((i for i, x in enumerate(lines) if x == REAL_HEADING), None)
    if start is not None:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        lines[start:end] = block
    else:
        at = next((i for i, x in enumerate(lines) if x == "## Use"), len(lines))
        lines[at:at] = block
    card_path.write_text("\n".join(lines) + "\n")
    print(f"Updated the real-speech section of {card_path}")


def main() -> None:
    args = get_parser().parse_args()
    if args.real_speech_only:
        return republish_real_speech(args)
    if args.text_models_only:
        republish_text_models(args)
        return
    out = args.out_dir
    fresh = [m for m in args.models.split(",") if m]
    if not fresh or set(fresh) - {"norm", "conditioned"}:
        raise SystemExit(f"--models must list norm and/or conditioned, not {args.models!r}")
    if "conditioned" not in fresh:
        raise SystemExit("The ONNX files are the conditioned model's: --models must include conditioned")
    old_card = out / CARD
    old_text = old_card.read_text() if old_card.exists() else ""
    kept: Dict[str, KeptModel] = {}
    for name in ("norm", "conditioned"):
        if name in fresh:
            continue
        if not (out / f"{name}.pt").exists() or not old_text:
            raise SystemExit(f"{name} is not in --models and {out} ships no {name}.pt with a MODEL_CARD.md")
        kept[name] = kept_card_lines(old_text, name)
    staging = out.with_name(out.name + ".new")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for name in kept:
        shutil.copy(out / f"{name}.pt", staging / f"{name}.pt")
    card: Dict[str, object] = {}
    for name in fresh:
        exp = args.exp_dir / name
        b = newest_batch(exp)
        w = averaged_weights(exp, iteration=b, avg=args.avg)
        last = load_checkpoint(exp / f"checkpoint-{b}.pt")
        half = {k: (v.half() if v.is_floating_point() else v) for k, v in w["model"].items()}
        torch.save({"model": half, "model_config": w["model_config"], "averaged": w["how"],
                    "optimizer_steps": last.get("optimizer_steps"), "batch_idx_train": last["batch_idx_train"]},
                   staging / f"{name}.pt")
        card[name] = {"desc": w["desc"], "how": w["how"], "batches": last["batch_idx_train"],
                      "threads": (last.get("args") or {}).get("num_threads"),
                      "params": sum(v.numel() for v in w["model"].values()),
                      "minutes": last.get("train_seconds", 0) / 60, "audio_hours": last.get("audio_seconds", 0) / 3600,
                      "metrics": metrics(exp, w["desc"]), "args": last.get("args", {}),
                      "beam_metrics": metrics(exp, w["desc"], "modified_beam_search", required=False),
                      "interpolated": last.get("interpolated")}
    onnx_dir = args.exp_dir / "conditioned" / "onnx"
    onnx = sorted(onnx_dir.glob("*.onnx"))
    if not onnx:
        raise SystemExit(f"No ONNX files in {onnx_dir}: run stage 4")
    lms = text_lm_files(onnx_dir)
    questions = sorted(onnx_dir.glob("questions.json.gz"))
    for f in onnx + lms + questions + [onnx_dir / "tokens.txt"]:
        shutil.copy(f, staging / f.name)
    bpe = sorted(args.data_dir.glob("lang_bpe_*/bpe.model"))[0]
    shutil.copy(bpe, staging / "bpe.model")
    total_mb = staged_mb(staging, args.max_mb)
    rtf = (args.exp_dir / "rtf.md").read_text() if (args.exp_dir / "rtf.md").exists() else "(not measured)\n"
    latency = args.exp_dir / "latency.md"
    latency = latency.read_text().split("\n\n")[-1] if latency.exists() else "(not measured)\n"
    train_cuts, stats_file = training_corpus(card["conditioned"]["args"].get("train_cuts", ""), args.data_dir)
    stats = stats_file.read_text() if stats_file.exists() else ""

    source = text_source(args.text_hours)
    lines = ["# Pretrained models: tiny streaming Zipformer transducers on the synthetic corpus", "",
             f"Trained by stages 1-2 of `egs/synth/pretrain.sh` (run in the background for hours, resumed across "
             f"sessions; the options below); decoded, measured and published by `{args.command}` "
             f"(commit {git_commit()}).", "",
             "## Files", "",
             "| file | what |", "|---|---|",
             "| `encoder-*.onnx`, `decoder-*.onnx`, `joiner-*.onnx` (+ `.int8.onnx`) | the conditioned model, "
             f"streaming export (chunk {CHUNK} = {CHUNK * 20} ms, left context {LEFT}), sherpa-onnx layout |",
             "| `tokens.txt`, `bpe.model` | tokens of the ONNX models, sentencepiece model |",
             *([lm_row(source, args.lm_gcide_hours)] if lms else []),
             *([lodr_row(source)] if any(f.name.startswith("lodr-") for f in lms) else []),
             *([questions_row(source)] if questions else []),
             "| `conditioned.pt`, `norm.pt` | averaged PyTorch weights (fp16) for `train.py --init-from` |", "",
             f"Total {total_mb:.1f} MB.", "", "## Training", ""]
    for name in ("norm", "conditioned"):
        if name in kept:
            lines += kept[name].training
            lines.append(f"{KEPT_NOTE}: `{args.models}` was republished)")
            continue
        c = card[name]
        threads = f" at {c['threads']} torch thread(s)" if c.get("threads") else ""
        lines.append(f"* **{name}**: {c['batches']} batches, {c['minutes']:.0f} min of training{threads} on a "
                     f"2-core CPU (validation excluded), {c['audio_hours']:.1f} h of audio seen; "
                     f"weights: {cut_lineage(c['how'])} ({c['desc']}).")
        lines += training_story(args.exp_dir / name, c["args"])
        if c.get("interpolated"):
            others = len(c["interpolated"].get("runs", [])) - 1
            soup = f" and {others} other run(s) fine-tuned from them (a model soup)" if others > 0 else ""
            lines.append(f"  then mixed with the weights it started from (WiSE-FT){soup}, by "
                         f"`{c['interpolated']['command']}`")
        lines.append("  " + start_note(name, init_source(args.exp_dir / name), old_text,
                                       published_from(out, name, args.exp_dir / name)))
    lines += ["",
              f"## Metrics (greedy search, simulated streaming: chunk {CHUNK}, left context {LEFT})", "",
              "Measured by stage 3 of `egs/synth/pretrain.sh` (`zipformer_pc.decoding.decode`), on `test` (the "
              "training voices, held-out Austen text) and `test_ood` (held-out voices, Moby Dick), and `test_real` "
              "(recordings of people, docs/real-speech.md) when `prepare.sh --dataset real` made it."
              + penalty_note(summ.get("blank_penalty") for c in card.values() for key in ("metrics", "beam_metrics")
                             for modes in c[key].values() for summ in modes.values()), ""]
    for name in ("norm", "conditioned"):
        lines += (kept[name].metrics if name in kept else metric_table(name, card[name]["metrics"])) + [""]
    beam = {name: kept[name].beam_metrics if name in kept else metric_table(name, card[name]["beam_metrics"])
            for name in ("norm", "conditioned") if (name in kept and kept[name].beam_metrics)
            or (name in card and card[name]["beam_metrics"])}
    if beam:
        lines += ["Modified beam search with 4 paths (stage 3 too; the runtime's `--decoding-method "
                  "modified_beam_search --beam-size 4`, which searches as sherpa-onnx does):", ""]
        for table in beam.values():
            lines += table + [""]
    lines += runtime_section(args.exp_dir / "conditioned")
    lines += real_speech_section(args.exp_dir,
                                 args.data_dir.parent / "real" / "fbank" / f"real_cuts_{REAL_SET}.jsonl.gz")
    fbank = args.data_dir / "fbank"
    hours = speaker_hours(train_cuts) if train_cuts.exists() else {}
    voices = {"train": sorted(hours)} if hours else {}
    if (fbank / "synth_cuts_test_ood.jsonl.gz").exists():
        voices["test_ood"] = speakers(fbank / "synth_cuts_test_ood.jsonl.gz")
    people = people_line(hours)
    lines += ["## Use", "", "```bash",
              "python -m zipformer_pc.transcribe --model-dir egs/synth/pretrained speech.wav   # prints P and N",
              "python -m zipformer_pc.transcribe --model-dir egs/synth/pretrained --int8 true --output out.tsv wavs/",
              "python -m zipformer_pc.transcribe --model-dir egs/synth/pretrained --decoding-method modified_beam_search "
              "speech.wav   # 4 paths, lm-P/lm-N.arpa.gz fused",
              *(["python -m zipformer_pc.transcribe --model-dir egs/synth/pretrained --questions false speech.wav   "
                 "# P as searched (no question model)"] if questions else []),
              "python -m zipformer_pc.training.train ... --init-from egs/synth/pretrained/norm.pt   # fine-tune",
              "```", "",
              "sherpa-onnx loads `encoder-*.onnx`, `decoder-P-*.onnx` (or `-N-`), `joiner-P-*.onnx` and "
              "`tokens.txt` as a streaming transducer (one mode per recognizer)" +
              ("; it shows P as searched (the question model is ours)." if questions else "."), "",
              "## Streaming RTF (onnxruntime, this machine)", "", rtf.strip(), "",
              "## Caption latency and stability per chunk size", "",
              "From `scoring/measure_rtf.py --latency true` on test utterances fed in 0.1 s pieces "
              "(`zipformer_pc/runtime/latency.py`): delay from a word's end in the final hypothesis to "
              "when it is shown for good (mean / p50 / p90; p90 with compute time); marks after their word; "
              "words that grow after being shown, and revisions (greedy search never revises).", "",
              latency.strip(), "", "## Data", "",
              "Synthetic speech: Debian TTS voices (espeak-ng, flite, festival) reading Jane Austen, with per-utterance "
              "pitch and tempo perturbation (sox); `test_ood` uses other voices reading Moby Dick. "
              "`prepare.sh --voice-set wide` reads the training split with ~580 voices (espeak-ng variants in the "
              "in-domain accents) and mild random band limits, EQ and reverb; `--voice-set mixed` reads 40% of it "
              "so and the rest with the 11 in-domain voices; dev and test keep the 11 in-domain voices. "
              "`prepare.sh --extra-voices F` has a share F of the training utterances read by 12 speakers of other "
              "engines (svox pico, RHVoice, MBROLA, festival's rab and don, Piper: the prefixes pico, rhv, mbr, fest, "
              "piper below), and `local/add_readings.py` adds such readings of the training text to a corpus.", ""]
    if train_cuts.exists():
        lines.append(f"* the conditioned model's training cuts: `{train_cuts}`")
    for part, names in voices.items():
        lines.append(voices_line(part, names))
    if people:
        lines.append(people)
    for name in kept:
        lines.append(kept_corpus_line(name, kept[name].source))
    heard = ("Trained mostly on synthetic speech, with a few hours of people's (above)" if people
             else "Trained on synthetic speech only")
    lines += ["", stats.strip(), "", "## Known limits", "",
              f"* {heard}: on recordings of people (`test_real`, above, when measured; docs/real-speech.md) it is "
              "far worse than on `test`, and worse still with other accents, noise or far-field audio.",
              "* Domain: 19th-century English prose; vocabulary outside it (names, numbers, modern words) is weak.",
              f"* Punctuation: {marks_note(args.data_dir)}",
              f"* The ONNX export is fixed to chunk {CHUNK} ({CHUNK * 20} ms of audio per encoder call) and left "
              f"context {LEFT} "
              "frames; export again for another chunk size (the latency table above shows the trade-off).",
              f"* A tiny model ({card['conditioned']['params'] / 1e6:.1f}M parameters) trained on a CPU for hours, "
              "not a GPU for days.",
              *([lm_limit(args.lm_gcide_hours)] if lms else []),
              *(["* The question model reads words only: a question written as a statement (\"You are coming?\") "
                 "keeps its full stop, and it knows the questions of Austen's prose (its threshold is the best on "
                 "`dev`, where ~30% of the sentences are questions, against ~8% in training)."] if questions else []),
              ""]
    install(staging, out, lines)
    print(f"Published {out} ({total_mb:.1f} MB)")


if __name__ == "__main__":
    main()
