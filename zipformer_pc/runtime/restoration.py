"""Label inventory and inference of the punctuation + truecasing restoration model.

This module needs only numpy and sentencepiece (and onnxruntime for
:class:`OnnxRestorer`), so a cascade (ASR N output -> restored P) can be
deployed without torch: it is part of the streaming runtime
(:mod:`zipformer_pc.runtime`).  The torch model, training and export live
in :mod:`zipformer_pc.restoration`.

Labels (Pappagari et al., *Joint prediction of truecasing and punctuation
for conversational speech in low-resource scenarios*): every word of the N
text gets

* a case class: ``LC`` (all lowercase, also words without letters), ``UC``
  (first letter upper, the rest lower: ``Emma``, ``I``, ``Don't``), ``AUC``
  (all letters upper, at least two letters: ``BBC``) or ``MIX`` (any other
  use of capitals: ``McDonald``).  A ``MIX`` word is spelled from a lexicon
  of the mixed-case spellings seen in training (most frequent spelling per
  lowercase word), or as ``UC`` when the word was never seen mixed;
* a punctuation class: the mark that follows the word in P, ``O`` for none,
  over the kept marks of a :class:`~zipformer_pc.text.PunctConfig`
  (default ``. , ?``).

Words are the N words, i.e. :func:`zipformer_pc.text.normalized` of the P
text, so hyphenated words are split (``Well-known,`` gives ``well``/``UC``/``O``
and ``known``/``LC``/``,``) and restored P writes them as two words
(``Well known,``); the metrics split hyphens in every view, so this does not
change any score.  Everything else round-trips:
``apply_labels(labels_from_p(p)) == punctuated(p)`` for hyphen-free P whose
mixed-case words are in the lexicon.

The network sees the sentencepiece pieces of the N words; the case class of
a word is read at its first piece and its punctuation class at its last
piece (the mark follows the end of the word).
"""

import base64
import json
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from zipformer_pc.text import PunctConfig, normalized, scoring_pairs

CASE_CLASSES: Tuple[str, ...] = ("LC", "UC", "AUC", "MIX")
LC, UC, AUC, MIX = range(len(CASE_CLASSES))
NO_MARK = "O"  # name of the "no mark follows" punctuation class

# ONNX metadata keys (the restoration config as JSON, the sentencepiece model in base64).
META_CONFIG = "restore_config"
META_SPM = "spm_model_b64"


def case_class(word: str) -> int:
    """The case class id of a word as written in P."""
    if word == word.lower():
        return LC
    letters = [c for c in word if c.isalpha()]
    if len(letters) > 1 and all(c.isupper() for c in letters):
        return AUC
    if word[0].isupper() and word[1:] == word[1:].lower():
        return UC
    return MIX


def apply_case(word: str, cls: int, mix_lexicon: Mapping[str, str]) -> str:
    """Spell the lowercase ``word`` with case class ``cls``."""
    if cls == LC:
        return word
    if cls == AUC:
        return word.upper()
    if cls == MIX and word in mix_lexicon:
        return mix_lexicon[word]
    return word[:1].upper() + word[1:]


def punct_classes(config: PunctConfig) -> Tuple[str, ...]:
    """Punctuation class names: ``O`` (no mark) then the kept marks."""
    return (NO_MARK,) + tuple(config.keep)


@dataclass
class LabeledLine:
    """One P line as classifier targets over its N words."""

    words: List[str]  # lowercase N words; " ".join(words) == normalized(P)
    case: List[int]
    punct: List[int]


def labels_from_p(text: str, config: PunctConfig) -> Optional[LabeledLine]:
    """Targets of one P (or raw punctuated) line; None when it has no word.

    The text is parsed by :func:`zipformer_pc.text.scoring_pairs` (the same
    parse as P, N and the metrics), so the words are exactly the N text.
    """
    classes = punct_classes(config)
    index = {m: i for i, m in enumerate(classes)}
    words: List[str] = []
    case: List[int] = []
    punct: List[int] = []
    for word, mark in scoring_pairs(text, config):
        words.append(word.lower())
        case.append(case_class(word))
        punct.append(index[mark] if mark else 0)
    if not words:
        return None
    n = normalized(text)
    if " ".join(words) != n:  # the contract of zipformer_pc.text; never expected to fail
        raise AssertionError(f"Label words {' '.join(words)!r} differ from normalized text {n!r}")
    return LabeledLine(words, case, punct)


def apply_labels(
    words: Sequence[str],
    case: Sequence[int],
    punct: Sequence[int],
    classes: Sequence[str],
    mix_lexicon: Mapping[str, str],
) -> str:
    """The P text of lowercase ``words`` with their case and punctuation classes."""
    out = []
    for w, c, p in zip(words, case, punct):
        mark = classes[p] if p else ""
        out.append(apply_case(w, int(c), mix_lexicon) + mark)
    return " ".join(out)


class PieceEncoder:
    """Sentencepiece pieces of word sequences between ``<s>`` and ``</s>``, with each word's end pieces.

    The two boundary symbols are ids ``P`` and ``P + 1`` for a sentencepiece
    model of ``P`` pieces (so any sentencepiece model works, e.g. the ASR's);
    they tell the encoder where the utterance starts and ends (the first
    word is capitalised, the last one ends with a mark).
    """

    def __init__(self, spm_model: bytes) -> None:
        import sentencepiece as spm

        self.model_bytes = spm_model
        self.sp = spm.SentencePieceProcessor(model_proto=spm_model)
        self.bos_id = self.sp.get_piece_size()
        self.eos_id = self.bos_id + 1

    @property
    def vocab_size(self) -> int:
        """Embedding table size: the pieces plus ``<s>`` and ``</s>``."""
        return self.sp.get_piece_size() + 2

    def encode(self, words: Sequence[str]) -> Tuple[List[int], List[int], List[int]]:
        """Ids ``<s> pieces </s>`` of a word sequence, and the first and last piece index of every word."""
        ids: List[int] = [self.bos_id]
        first: List[int] = []
        last: List[int] = []
        for pieces in self.sp.encode(list(words)):
            first.append(len(ids))
            ids.extend(pieces)
            last.append(len(ids) - 1)
        ids.append(self.eos_id)
        return ids, first, last


def pad_batch(seqs: Sequence[Sequence[int]], pad: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    """``(tokens (B, T) int64, lengths (B,) int64)`` of a batch of id lists."""
    lengths = np.array([len(s) for s in seqs], dtype=np.int64)
    tokens = np.full((len(seqs), int(lengths.max())), pad, dtype=np.int64)
    for i, s in enumerate(seqs):
        tokens[i, : len(s)] = s
    return tokens, lengths


class BaseRestorer:
    """Restores case and punctuation of N text; subclasses provide the network.

    Args:
      spm_model: the serialized sentencepiece model.
      meta: the restoration config (:meth:`meta` of a checkpoint): ``punct_keep``,
        ``punct_map``, ``mix_lexicon``, ``max_words``.
    """

    def __init__(self, spm_model: bytes, meta: Mapping[str, object]) -> None:
        self.encoder = PieceEncoder(spm_model)
        self.config = PunctConfig(keep=tuple(meta["punct_keep"]), mapping=dict(meta["punct_map"]))  # type: ignore[arg-type]
        self.classes = punct_classes(self.config)
        self.mix_lexicon: Dict[str, str] = dict(meta["mix_lexicon"])  # type: ignore[arg-type]
        self.max_words = int(meta["max_words"])  # type: ignore[arg-type]

    def logits(self, tokens: np.ndarray, lengths: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """Per-piece ``(case (B, T, 4), punct (B, T, P))`` logits."""
        raise NotImplementedError

    def predict(self, word_lists: Sequence[Sequence[str]], batch_size: int = 64) -> List[Tuple[List[int], List[int]]]:
        """``(case ids, punct ids)`` of every word sequence.

        Sequences longer than ``max_words`` words are cut into consecutive
        windows of ``max_words`` words (the training lines are shorter, and
        attention cost grows with the square of the length); each window is
        restored on its own, as if it were an utterance.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        segments: List[Tuple[int, Sequence[str]]] = []
        for i, words in enumerate(word_lists):
            for s in range(0, len(words), self.max_words):
                segments.append((i, words[s : s + self.max_words]))
        encoded = [self.encoder.encode(words) for _, words in segments]
        out: List[Tuple[List[int], List[int]]] = [([], []) for _ in word_lists]
        seg_labels: List[Tuple[List[int], List[int]]] = [([], []) for _ in segments]
        # Longest first, so a batch holds sequences of similar length.
        order = sorted(range(len(segments)), key=lambda k: -len(encoded[k][0]))
        for b in range(0, len(order), batch_size):
            idx = order[b : b + batch_size]
            tokens, lengths = pad_batch([encoded[k][0] for k in idx])
            case_logits, punct_logits = self.logits(tokens, lengths)
            for row, k in enumerate(idx):
                _, first, last = encoded[k]
                seg_labels[k] = (
                    case_logits[row, first].argmax(-1).tolist(),
                    punct_logits[row, last].argmax(-1).tolist(),
                )
        for (i, _), (c, p) in zip(segments, seg_labels):
            out[i][0].extend(c)
            out[i][1].extend(p)
        return out

    def restore(self, lines: Sequence[str], batch_size: int = 64) -> List[str]:
        """P text of each line of N text (input is normalized first; a line with no word gives "")."""
        if isinstance(lines, str):
            raise TypeError("restore() takes a list of lines, not one string")
        word_lists = []
        for i, line in enumerate(lines):
            if not isinstance(line, str):
                raise TypeError(f"restore(): line {i} is {type(line).__name__}, not str")
            word_lists.append(normalized(line).split())
        labels = self.predict(word_lists, batch_size)
        return [
            apply_labels(words, c, p, self.classes, self.mix_lexicon)
            for words, (c, p) in zip(word_lists, labels)
        ]


class OnnxRestorer(BaseRestorer):
    """The exported model run by onnxruntime; the .onnx file carries the tokenizer and config.

    Args:
      path: the file written by :func:`zipformer_pc.restoration.export.export_onnx`.
      num_threads: onnxruntime intra-op threads.
    """

    def __init__(self, path: str, num_threads: int = 1) -> None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = num_threads
        opts.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
        props = self.session.get_modelmeta().custom_metadata_map
        if META_CONFIG not in props or META_SPM not in props:
            raise ValueError(f"{path}: not a restoration model export (no {META_CONFIG}/{META_SPM} metadata)")
        super().__init__(base64.b64decode(props[META_SPM]), json.loads(props[META_CONFIG]))

    def logits(self, tokens: np.ndarray, lengths: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        case, punct = self.session.run(["case_logits", "punct_logits"], {"tokens": tokens, "lengths": lengths})
        return case, punct
