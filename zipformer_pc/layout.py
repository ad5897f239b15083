"""The experiment directory's names, in one place: what the training, decoding,
export and scoring code write, and what the recipes and result scripts look for.

* the **checkpoint tag** of the decoded or exported weights: ``iter-B-avg-A``
  (``--iter B --avg A``) or ``epoch-E-avg-A`` (``--epoch E --avg A``), with
  ``-use-averaged-model`` after it only where a caller asks for icefall's mark
  (this project's own files never carry it: the summaries record how the
  weights were averaged);
* the **streaming suffix**: ``chunk-C-left-L`` (attention chunk and left
  context in 50 Hz encoder frames), and nothing at full context
  (``--chunk-size -1``);
* the **export tag** ``TAG-chunk-C-left-L`` and the exported files
  ``encoder-EXPORT_TAG.onnx``, ``decoder-MODE-EXPORT_TAG.onnx``,
  ``joiner-MODE-EXPORT_TAG.onnx``, each also as ``.int8.onnx``;
* the **decoding suffix** of ``zipformer_pc.decoding.decode``:
  ``METHOD-TAG[-beam-K[-lm-S-bonus-B[-lodr-W]]][-max-sym-K][-blank-penalty-X]``
  ``[-chunk-C-left-L][-streaming][-cascade][-questions]``, and the result
  files under ``EXP_DIR/METHOD/``: ``recogs-TEST-MODE-SUFFIX.txt``,
  ``errs-TEST-MODE-SUFFIX.txt``, ``wer-summary-TEST-MODE-SUFFIX.json`` and the
  table ``results-SUFFIX.md`` (``scoring/whisper_score.py`` writes the same
  kinds with the suffix ``whisper-NAME``, its table as ``results-TEST-SUFFIX.md``);
* the **run name** of a system trained with another seed than the recipe's
  first: ``NAME-seedS``;
* the **default streaming geometry**, :data:`DEFAULT_CHUNK_SIZE` and
  :data:`DEFAULT_LEFT_CONTEXT_FRAMES`: what the export, the decoding, the
  benchmarks and the recipes use unless told otherwise.

Standard library only: the bash recipes ask it (``python3 -m zipformer_pc.layout``)::

  python -m zipformer_pc.layout geometry                           # 32 128
  python -m zipformer_pc.layout tag --iter 6311 --avg 1            # iter-6311-avg-1
  python -m zipformer_pc.layout suffix --chunk 32 --left 128       # chunk-32-left-128
  python -m zipformer_pc.layout export-tag --iter 6311 --avg 1     # iter-6311-avg-1-chunk-32-left-128
  python -m zipformer_pc.layout export-name --iter 6311 --avg 1 --role encoder --int8
                                                                   # encoder-iter-6311-avg-1-chunk-32-left-128.int8.onnx
  python -m zipformer_pc.layout result-name --kind wer-summary --test test --mode N --suffix whisper-base
                                                                   # wer-summary-test-N-whisper-base.json
  python -m zipformer_pc.layout run-name cond_p 43 --base-seed 42  # cond_p-seed43
  python -m zipformer_pc.layout parse NAME                         # what NAME is, as JSON
"""

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Sequence, Tuple

#: attention chunk of the streaming model, 50 Hz encoder frames (640 ms of audio)
DEFAULT_CHUNK_SIZE = 32
#: attention left context of the streaming model, 50 Hz encoder frames
DEFAULT_LEFT_CONTEXT_FRAMES = 128
#: ``--chunk-size`` / ``--left-context-frames`` of full context (no streaming)
FULL_CONTEXT = -1

#: the output modes' names in file names (as zipformer_pc.modes.MODE_NAMES)
OUTPUT_MODES = ("N", "P")
#: the searches of decode.py, each a directory of EXP_DIR
DECODING_METHODS = ("greedy_search", "modified_beam_search")
#: per test set and mode result files: kind -> extension
RESULT_KINDS: Dict[str, str] = {"recogs": ".txt", "errs": ".txt", "wer-summary": ".json"}
#: the table of a decoding (one row per test set)
TABLE_KIND = "results"
#: the exported models, each also per mode except the encoder
EXPORT_ROLES = ("encoder", "decoder", "joiner")

_NUM = r"-?(?:inf|nan|\d+(?:\.\d*)?(?:e[+-]?\d+)?)"  # a number as f"{x:g}" writes it
_TAG = r"(?P<kind>iter|epoch)-(?P<number>\d+)-avg-(?P<avg>\d+)(?P<marked>-use-averaged-model)?"
_STREAM = r"chunk-(?P<chunk>\d+)-left-(?P<left>-?\d+)"


def default_geometry() -> Tuple[int, int]:
    """(chunk size, left context frames) of the streaming model."""
    return DEFAULT_CHUNK_SIZE, DEFAULT_LEFT_CONTEXT_FRAMES


# ------------------------------------------------------------ checkpoint tags


@dataclass(frozen=True)
class CheckpointTag:
    """The weights a tag names: ``kind`` ``iter`` (``--iter number``) or ``epoch``
    (``--epoch number``), ``avg`` (``--avg``), ``marked``: the tag carries ``-use-averaged-model``."""

    kind: str
    number: int
    avg: int
    marked: bool = False

    def __str__(self) -> str:
        return checkpoint_tag(**({"iteration": self.number} if self.kind == "iter" else {"epoch": self.number}),
                              avg=self.avg, mark_averaged=self.marked)


def checkpoint_tag(epoch: int = 0, iteration: int = 0, avg: int = 1, mark_averaged: bool = False) -> str:
    """``iter-B-avg-A`` when ``iteration`` > 0, else ``epoch-E-avg-A`` (as ``--iter`` wins over
    ``--epoch`` in decoding and export); ``mark_averaged`` appends ``-use-averaged-model``."""
    if avg < 1:
        raise ValueError(f"--avg must be >= 1, got {avg}")
    if iteration > 0:
        tag = f"iter-{iteration}-avg-{avg}"
    elif epoch > 0:
        tag = f"epoch-{epoch}-avg-{avg}"
    else:
        raise ValueError("a checkpoint tag needs --iter B > 0 or --epoch E > 0")
    return tag + ("-use-averaged-model" if mark_averaged else "")


def parse_checkpoint_tag(text: str) -> CheckpointTag:
    """The :class:`CheckpointTag` of ``iter-B-avg-A`` / ``epoch-E-avg-A`` (ValueError otherwise)."""
    m = re.fullmatch(_TAG, text)
    if m is None:
        raise ValueError(f"not a checkpoint tag (iter-B-avg-A or epoch-E-avg-A): {text!r}")
    return _tag_of(m)


def _tag_of(m: "re.Match") -> CheckpointTag:
    return CheckpointTag(m.group("kind"), int(m.group("number")), int(m.group("avg")), bool(m.group("marked")))


# ----------------------------------------------------------- streaming suffix


def streaming_suffix(chunk_size: int = DEFAULT_CHUNK_SIZE,
                     left_context_frames: int = DEFAULT_LEFT_CONTEXT_FRAMES) -> str:
    """``chunk-C-left-L``; the empty string at full context (``chunk_size`` <= 0)."""
    if chunk_size <= 0:
        return ""
    return f"chunk-{chunk_size}-left-{left_context_frames}"


def parse_streaming_suffix(text: str) -> Tuple[int, int]:
    """(chunk size, left context frames) of ``chunk-C-left-L``; ``""`` is full context (-1, -1)."""
    if text == "":
        return FULL_CONTEXT, FULL_CONTEXT
    m = re.fullmatch(_STREAM, text)
    if m is None:
        raise ValueError(f"not a streaming suffix (chunk-C-left-L): {text!r}")
    return int(m.group("chunk")), int(m.group("left"))


# ------------------------------------------------------------------- exports


def export_tag(tag: str, chunk_size: int = DEFAULT_CHUNK_SIZE,
               left_context_frames: int = DEFAULT_LEFT_CONTEXT_FRAMES) -> str:
    """``TAG-chunk-C-left-L``: what every exported file of the weights ``tag`` is named after
    (the export is streaming only: full context is refused)."""
    if chunk_size <= 0 or left_context_frames < 0:
        raise ValueError("a streaming export needs chunk size > 0 and left context frames >= 0")
    return f"{tag}-{streaming_suffix(chunk_size, left_context_frames)}"


def onnx_file_name(role: str, export_tag_: str = "", int8: bool = False) -> str:
    """``ROLE-EXPORT_TAG.onnx`` (``ROLE.onnx`` without a tag; ``.int8.onnx`` with ``int8``);
    ``role`` is ``encoder``, ``decoder-MODE`` or ``joiner-MODE``."""
    _check_role(role)
    return role + (f"-{export_tag_}" if export_tag_ else "") + (".int8.onnx" if int8 else ".onnx")


def int8_name(name: str) -> str:
    """The int8 copy's name of the exported ``X.onnx``: ``X.int8.onnx``."""
    if not name.endswith(".onnx") or name.endswith(".int8.onnx"):
        raise ValueError(f"not an fp32 ONNX file name: {name!r}")
    return name[: -len(".onnx")] + ".int8.onnx"


def export_file_names(export_tag_: str, modes: Sequence[str] = OUTPUT_MODES, int8: bool = False) -> Dict[str, str]:
    """Role (``encoder``, ``decoder-P``, ``joiner-P``, ...) -> file name of one export."""
    roles = ["encoder"] + [f"{r}-{m}" for m in modes for r in ("decoder", "joiner")]
    return {r: onnx_file_name(r, export_tag_, int8) for r in roles}


def export_glob(role: str = "encoder", int8: bool = False) -> str:
    """A glob of the exported files of ``role``; the fp32 glob ``encoder-*.onnx`` matches the int8
    copies too: tell them apart with :func:`parse_export_name`."""
    _check_role(role)
    return f"{role}-*" + (".int8.onnx" if int8 else ".onnx")


@dataclass(frozen=True)
class ExportName:
    """An exported file: ``role`` (``encoder``, ``decoder``, ``joiner``), ``mode`` (None for the
    encoder), the weights' ``tag``, the streaming geometry and whether it is the int8 copy."""

    role: str
    mode: Optional[str]
    tag: str
    chunk_size: int
    left_context_frames: int
    int8: bool

    @property
    def export_tag(self) -> str:
        return export_tag(self.tag, self.chunk_size, self.left_context_frames)

    @property
    def name(self) -> str:
        role = self.role if self.mode is None else f"{self.role}-{self.mode}"
        return onnx_file_name(role, self.export_tag, self.int8)


def parse_export_name(name: str) -> ExportName:
    """The :class:`ExportName` of ``encoder-TAG-chunk-C-left-L[.int8].onnx`` or
    ``decoder-MODE-...`` / ``joiner-MODE-...`` (ValueError otherwise)."""
    modes = "|".join(OUTPUT_MODES)
    m = re.fullmatch(rf"(?P<role>encoder|(?:decoder|joiner)-(?:{modes}))-(?P<tag>{_TAG})-{_STREAM}"
                     r"(?P<int8>\.int8)?\.onnx", name)
    if m is None:
        raise ValueError(f"not an exported model file (encoder-TAG-chunk-C-left-L.onnx, ...): {name!r}")
    role, _, mode = m.group("role").partition("-")
    return ExportName(role, mode or None, m.group("tag"), int(m.group("chunk")), int(m.group("left")),
                      bool(m.group("int8")))


def _check_role(role: str) -> None:
    base, _, mode = role.partition("-")
    if base not in EXPORT_ROLES or (base == "encoder") != (mode == "") or (mode and mode not in OUTPUT_MODES):
        raise ValueError(f"export role: encoder, decoder-MODE or joiner-MODE (MODE in {OUTPUT_MODES}), not {role!r}")


# ------------------------------------------------------------ decode results


@dataclass(frozen=True)
class DecodeSuffix:
    """What a decoding of ``zipformer_pc.decoding.decode`` was; ``str()`` gives its suffix.
    ``beam_size`` (modified beam search), ``lm_scale`` / ``lm_token_bonus`` (token LMs fused),
    ``lodr_scale``, ``max_sym_per_frame`` (greedy search, when not 1) and ``blank_penalty``
    (when not decode.py's default) are None where the suffix does not name them."""

    method: str
    tag: str
    beam_size: Optional[int] = None
    lm_scale: Optional[float] = None
    lm_token_bonus: Optional[float] = None
    lodr_scale: Optional[float] = None
    max_sym_per_frame: Optional[int] = None
    blank_penalty: Optional[float] = None
    chunk_size: int = FULL_CONTEXT
    left_context_frames: int = FULL_CONTEXT
    streaming: bool = False
    cascade: bool = False
    questions: bool = False

    def __str__(self) -> str:
        s = f"{self.method}-{self.tag}"
        if self.beam_size is not None:
            s += f"-beam-{self.beam_size}"
            if self.lm_scale is not None:
                s += f"-lm-{self.lm_scale:g}-bonus-{self.lm_token_bonus:g}"
                if self.lodr_scale is not None:
                    s += f"-lodr-{self.lodr_scale:g}"
        if self.max_sym_per_frame is not None:
            s += f"-max-sym-{self.max_sym_per_frame}"
        if self.blank_penalty is not None:
            s += f"-blank-penalty-{self.blank_penalty:g}"
        stream = streaming_suffix(self.chunk_size, self.left_context_frames)
        s += f"-{stream}" if stream else ""
        return s + "-streaming" * self.streaming + "-cascade" * self.cascade + "-questions" * self.questions

    @property
    def checkpoint(self) -> CheckpointTag:
        return parse_checkpoint_tag(self.tag)


def decode_suffix(method: str, tag: str, beam_size: int = 4, lm_scale: Optional[float] = None,
                  lm_token_bonus: float = 0.0, lodr_scale: float = 0.0, max_sym_per_frame: int = 1,
                  blank_penalty: Optional[float] = None, chunk_size: int = DEFAULT_CHUNK_SIZE,
                  left_context_frames: int = DEFAULT_LEFT_CONTEXT_FRAMES, streaming: bool = False,
                  cascade: bool = False, questions: bool = False) -> DecodeSuffix:
    """The suffix decode.py gives the files of a decoding, from its options: the beam (and the
    LMs, ``lm_scale`` None when none are fused; LODR when ``lodr_scale`` > 0) of modified beam
    search, greedy search's ``max_sym_per_frame`` when not 1, ``blank_penalty`` (None: decode.py's
    default, not named), the streaming geometry (``chunk_size`` <= 0: full context) and the
    variants.  ``str()`` of the result is the suffix."""
    if method not in DECODING_METHODS:
        raise ValueError(f"decoding method: one of {DECODING_METHODS}, not {method!r}")
    parse_checkpoint_tag(tag)
    beam = method == "modified_beam_search"
    lm = beam and lm_scale is not None
    return DecodeSuffix(
        method, tag, beam_size=beam_size if beam else None, lm_scale=lm_scale if lm else None,
        lm_token_bonus=lm_token_bonus if lm else None, lodr_scale=lodr_scale if lm and lodr_scale > 0 else None,
        max_sym_per_frame=max_sym_per_frame if not beam and max_sym_per_frame != 1 else None,
        blank_penalty=blank_penalty, chunk_size=chunk_size if chunk_size > 0 else FULL_CONTEXT,
        left_context_frames=left_context_frames if chunk_size > 0 else FULL_CONTEXT,
        streaming=streaming, cascade=cascade, questions=questions)


_DECODE = re.compile(
    rf"(?P<method>{'|'.join(DECODING_METHODS)})-(?P<tag>{_TAG})"
    rf"(?:-beam-(?P<beam>\d+)(?:-lm-(?P<lm>{_NUM})-bonus-(?P<bonus>{_NUM})(?:-lodr-(?P<lodr>{_NUM}))?)?)?"
    r"(?:-max-sym-(?P<maxsym>\d+))?"
    rf"(?:-blank-penalty-(?P<penalty>{_NUM}))?"
    rf"(?:-{_STREAM})?(?P<streaming>-streaming)?(?P<cascade>-cascade)?(?P<questions>-questions)?")


def parse_decode_suffix(text: str) -> DecodeSuffix:
    """The :class:`DecodeSuffix` of a suffix decode.py writes (ValueError otherwise)."""
    m = _DECODE.fullmatch(text)
    if m is None:
        raise ValueError(f"not a decoding suffix (METHOD-TAG[-beam-K...][-chunk-C-left-L]...): {text!r}")
    g = m.groupdict()
    num = (lambda k: None if g[k] is None else float(g[k]))
    chunk = int(g["chunk"]) if g["chunk"] is not None else FULL_CONTEXT
    left = int(g["left"]) if g["left"] is not None else FULL_CONTEXT
    return DecodeSuffix(g["method"], g["tag"], beam_size=None if g["beam"] is None else int(g["beam"]),
                        lm_scale=num("lm"), lm_token_bonus=num("bonus"), lodr_scale=num("lodr"),
                        max_sym_per_frame=None if g["maxsym"] is None else int(g["maxsym"]),
                        blank_penalty=num("penalty"), chunk_size=chunk, left_context_frames=left,
                        streaming=bool(g["streaming"]), cascade=bool(g["cascade"]), questions=bool(g["questions"]))


def whisper_suffix(model: str) -> str:
    """The suffix of scoring/whisper_score.py's files for a Whisper model (``whisper-base``)."""
    return f"whisper-{model}"


def whisper_store_name(suffix: str, test: str) -> str:
    """scoring/whisper_score.py's text of Whisper per utterance of a test set with its audio digests
    (``whisper-base-test_real.tsv``, read back by ``--reuse``); ``suffix`` from :func:`whisper_suffix`."""
    return f"{suffix}-{test}.tsv"


def result_name(kind: str, test: str, mode: str, suffix: object) -> str:
    """``KIND-TEST-MODE-SUFFIX.EXT``: ``recogs`` / ``errs`` (``.txt``) or ``wer-summary``
    (``.json``) of one test set and output mode; ``suffix`` a :class:`DecodeSuffix` or a string."""
    if kind not in RESULT_KINDS:
        raise ValueError(f"result kind: one of {tuple(RESULT_KINDS)}, not {kind!r}")
    if mode not in OUTPUT_MODES:
        raise ValueError(f"output mode: one of {OUTPUT_MODES}, not {mode!r}")
    return f"{kind}-{test}-{mode}-{suffix}{RESULT_KINDS[kind]}"


def table_name(suffix: object, test: Optional[str] = None) -> str:
    """The table of a decoding: ``results-SUFFIX.md`` (decode.py: every test set in one table) or,
    with ``test``, ``results-TEST-SUFFIX.md`` (scoring/whisper_score.py: one per test set)."""
    return f"{TABLE_KIND}-{test}-{suffix}.md" if test is not None else f"{TABLE_KIND}-{suffix}.md"


def result_glob(kind: str, test: str = "*", mode: str = "*", suffix: str = "*") -> str:
    """A glob of result files (``recogs-TEST-MODE-*.txt`` and the like; ``*`` for what is not given).
    A test set's name may hold ``-``: check what matches with :func:`parse_result_name`."""
    if kind == TABLE_KIND:
        return f"{TABLE_KIND}-{suffix}.md"
    if kind not in RESULT_KINDS:
        raise ValueError(f"result kind: one of {tuple(RESULT_KINDS) + (TABLE_KIND,)}, not {kind!r}")
    return f"{kind}-{test}-{mode}-{suffix}{RESULT_KINDS[kind]}"


@dataclass(frozen=True)
class ResultName:
    """A per test set and mode result file: ``kind``, ``test``, ``mode``, ``suffix`` (the string)
    and ``decode``: the parsed suffix when decode.py wrote it (None for others, e.g. Whisper's)."""

    kind: str
    test: str
    mode: str
    suffix: str
    decode: Optional[DecodeSuffix]

    @property
    def name(self) -> str:
        return result_name(self.kind, self.test, self.mode, self.suffix)


def parse_result_name(name: str) -> Optional[ResultName]:
    """The :class:`ResultName` of ``recogs-``, ``errs-`` or ``wer-summary-TEST-MODE-SUFFIX.EXT``, or None.
    Where a test set's name could end at more than one ``-N-`` / ``-P-``, the split whose suffix
    decode.py could have written wins."""
    for kind, ext in sorted(RESULT_KINDS.items(), key=lambda kv: -len(kv[0])):
        if not (name.startswith(kind + "-") and name.endswith(ext)):
            continue
        body = name[len(kind) + 1: -len(ext)]
        splits = []
        for m in re.finditer(rf"(?=-([{''.join(OUTPUT_MODES)}])-)", body):
            test, mode, suffix = body[: m.start()], m.group(1), body[m.start() + 3:]
            if test and suffix:
                splits.append((test, mode, suffix))
        if not splits:
            return None
        for test, mode, suffix in splits:
            try:
                return ResultName(kind, test, mode, suffix, parse_decode_suffix(suffix))
            except ValueError:
                continue
        test, mode, suffix = splits[0]
        return ResultName(kind, test, mode, suffix, None)
    return None


def parse_table_name(name: str) -> Optional[DecodeSuffix]:
    """The decoding of decode.py's table ``results-SUFFIX.md``, or None."""
    if not (name.startswith(TABLE_KIND + "-") and name.endswith(".md")):
        return None
    try:
        return parse_decode_suffix(name[len(TABLE_KIND) + 1: -len(".md")])
    except ValueError:
        return None


# ----------------------------------------------------------------- run names


def run_name(name: str, seed: int, base_seed: int) -> str:
    """The directory of system ``name`` trained with ``seed``: ``name`` for the recipe's first
    seed ``base_seed``, ``NAME-seedS`` for the others."""
    return name if seed == base_seed else f"{name}-seed{seed}"


def run_names(name: str, base_seed: int, num_seeds: int) -> List[str]:
    """The runs of a system trained with ``num_seeds`` seeds from ``base_seed`` on."""
    return [run_name(name, base_seed + i, base_seed) for i in range(num_seeds)]


def parse_run_name(run: str) -> Tuple[str, Optional[int]]:
    """(system name, seed) of ``NAME-seedS``; (``run``, None) for a run of the first seed."""
    m = re.fullmatch(r"(?P<name>.+)-seed(?P<seed>\d+)", run)
    return (m.group("name"), int(m.group("seed"))) if m else (run, None)


# --------------------------------------------------------------- command line


def describe(name: str) -> Dict[str, object]:
    """What ``name`` is (a file name, a tag, a suffix or a run name), for ``parse``."""
    for what, parse in (("checkpoint_tag", parse_checkpoint_tag), ("streaming_suffix", parse_streaming_suffix),
                        ("export", parse_export_name), ("decode_suffix", parse_decode_suffix)):
        try:
            got = parse(name)
        except ValueError:
            continue
        if what == "streaming_suffix":
            return {"what": what, "chunk_size": got[0], "left_context_frames": got[1]}
        return {"what": what, **asdict(got)}
    res = parse_result_name(name)
    if res is not None:
        return {"what": "result", **asdict(res)}
    table = parse_table_name(name)
    if table is not None:
        return {"what": "table", "decode": asdict(table)}
    base, seed = parse_run_name(name)
    return {"what": "run_name", "name": base, "seed": seed}


def _add_tag_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tag", default=None, help="a checkpoint tag (instead of --iter/--epoch and --avg)")
    p.add_argument("--iter", type=int, default=0)
    p.add_argument("--epoch", type=int, default=0)
    p.add_argument("--avg", type=int, default=1)
    p.add_argument("--use-averaged-model", action="store_true", help="mark the tag -use-averaged-model")


def _add_geometry_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--chunk", "--chunk-size", dest="chunk", type=int, default=DEFAULT_CHUNK_SIZE)
    p.add_argument("--left", "--left-context-frames", dest="left", type=int, default=DEFAULT_LEFT_CONTEXT_FRAMES)


def _tag_of_args(args) -> str:
    if args.tag is not None:
        parse_checkpoint_tag(args.tag)
        return args.tag
    return checkpoint_tag(args.epoch, args.iter, args.avg, args.use_averaged_model)


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m zipformer_pc.layout", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("geometry", help="the default chunk size and left context frames: 'C L'")
    _add_tag_options(sub.add_parser("tag", help="a checkpoint tag"))
    _add_geometry_options(sub.add_parser("suffix", help="the streaming suffix (empty at full context)"))
    for cmd, what in (("export-tag", "the export tag TAG-chunk-C-left-L"), ("export-name", "an exported file")):
        e = sub.add_parser(cmd, help=what)
        _add_tag_options(e)
        _add_geometry_options(e)
        if cmd == "export-name":
            e.add_argument("--role", default="encoder", help="encoder, decoder-MODE or joiner-MODE")
            e.add_argument("--int8", action="store_true")
    r = sub.add_parser("result-name", help="a per test set and mode result file")
    r.add_argument("--kind", required=True, choices=tuple(RESULT_KINDS))
    r.add_argument("--test", required=True)
    r.add_argument("--mode", required=True, choices=OUTPUT_MODES)
    r.add_argument("--suffix", required=True)
    n = sub.add_parser("run-name", help="a system's run directory for a seed")
    n.add_argument("name")
    n.add_argument("seed", type=int)
    n.add_argument("--base-seed", type=int, required=True, help="the recipe's first seed")
    sub.add_parser("parse", help="what a name is, as JSON").add_argument("name")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = get_parser().parse_args(argv)
    try:
        if args.command == "geometry":
            print(DEFAULT_CHUNK_SIZE, DEFAULT_LEFT_CONTEXT_FRAMES)
        elif args.command == "tag":
            print(_tag_of_args(args))
        elif args.command == "suffix":
            print(streaming_suffix(args.chunk, args.left))
        elif args.command == "export-tag":
            print(export_tag(_tag_of_args(args), args.chunk, args.left))
        elif args.command == "export-name":
            print(onnx_file_name(args.role, export_tag(_tag_of_args(args), args.chunk, args.left), args.int8))
        elif args.command == "result-name":
            print(result_name(args.kind, args.test, args.mode, args.suffix))
        elif args.command == "run-name":
            print(run_name(args.name, args.seed, args.base_seed))
        else:
            print(json.dumps(describe(args.name)))
    except ValueError as e:
        print(f"zipformer_pc.layout {args.command}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
