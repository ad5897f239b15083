"""How a lhotse supervision carries the two references of an utterance.

One convention for every corpus (it round-trips through lhotse manifests):

* ``supervision.text``: the N reference (always present), produced by
  :func:`zipformer_pc.text.normalized`;
* ``supervision.custom["text_p"]``: the P reference, produced by
  :func:`zipformer_pc.text.punctuated` from the raw punctuated source; absent
  when the utterance has no punctuated reference (LibriSpeech utterances that
  LibriSpeech-PC dropped, or utterances withheld by a punctuated-proportion
  subset);
* ``supervision.custom["text_raw"]``: the raw punctuated source, kept so a
  different punctuation config can be applied later without going back to
  the corpus; removed together with ``text_p`` when P is withheld;
* ``supervision.custom["text_p_auto"]``: an automatically punctuated P'
  reference when one has been produced (cascade / P' experiments).

P' is spelt ``auto_punct`` in code (``AUTO_PUNCT_KEY``, ``--use-auto-punct``,
``local/add_auto_punct.py``); the stored names ``text_p_auto`` and the
``pauto`` of manifest and system names (``*_cuts_train_pauto_p1``,
``cond_pauto``) are kept so prepared data and results stay readable.

The punctuation config used for a corpus is recorded by the preparation
stage next to its manifests (``punct_config.json``).
"""

import re
from typing import Any, Dict, Iterable, Iterator, Optional

from zipformer_pc.text import DEFAULT_PUNCT, PunctConfig, normalized, punctuated

P_KEY = "text_p"
RAW_KEY = "text_raw"
AUTO_PUNCT_KEY = "text_p_auto"

# The synthetic corpus maps "!" to "." (a sentence end the voices pause at);
# everything else follows LibriSpeech-PC's ". , ?".
SYNTH_PUNCT = PunctConfig(keep=(".", ",", "?"), mapping={"!": "."})


def is_punctuated_source(text: str) -> bool:
    """Whether a raw transcript is written as P (capitals and at least one mark) and
    can give a P reference, or is a bare word list (lowercase, no marks, or all
    capitals like a subtitle track) that gives N only."""
    return (bool(re.search(r"[A-Z]", text)) and bool(re.search(r"[a-z]", text))
            and bool(re.search(r"[.,?!;:]", text)))


def reference_fields(
    raw_punctuated: Optional[str],
    raw_normalized: Optional[str] = None,
    config: PunctConfig = DEFAULT_PUNCT,
) -> Dict[str, Any]:
    """The ``text`` and ``custom`` of a supervision from its raw transcripts.

    ``raw_punctuated`` is the book/LibriSpeech-PC text (None when there is
    none); ``raw_normalized`` is a separate normalized transcript (e.g.
    LibriSpeech's own, which spells ``Mr.`` as ``MISTER``).  When it is
    absent, N is derived from the punctuated text.
    """
    if raw_punctuated is None and raw_normalized is None:
        raise ValueError("An utterance needs at least one transcript")
    n_src = raw_normalized if raw_normalized is not None else raw_punctuated
    out: Dict[str, Any] = {"text": normalized(n_src), "custom": {}}
    if raw_punctuated is not None:
        p = punctuated(raw_punctuated, config)
        if p:
            out["custom"] = {P_KEY: p, RAW_KEY: raw_punctuated}
    return out


def get_n(sup) -> str:
    return sup.text or ""


def get_p(sup, use_auto_punct: bool = False) -> Optional[str]:
    """The P reference of a supervision, or None. ``use_auto_punct`` reads P' instead."""
    custom = sup.custom or {}
    return custom.get(AUTO_PUNCT_KEY if use_auto_punct else P_KEY)


def get_raw(sup) -> Optional[str]:
    """The raw punctuated source of a supervision's P reference, or None."""
    return (sup.custom or {}).get(RAW_KEY)


_SPEED_SUFFIX = re.compile(r"_sp\d+(\.\d+)?$")


class SupervisionsOnce:
    """The supervisions of the cut manifests ``paths``, each utterance once:
    speed-perturbed copies (cut ids ending in ``_spF``) are skipped and
    counted in ``copies`` (text models such as the token LMs should not read
    an utterance three times).  Iterate after construction; needs lhotse."""

    def __init__(self, paths: Iterable[str]) -> None:
        self.paths = list(paths)
        self.copies = 0
        self.cuts = 0

    def __iter__(self) -> Iterator[Any]:
        from lhotse import load_manifest_lazy

        seen = set()
        self.copies = self.cuts = 0
        for path in self.paths:
            for cut in load_manifest_lazy(path):
                key = _SPEED_SUFFIX.sub("", cut.id)
                if key in seen:
                    self.copies += 1
                    continue
                seen.add(key)
                self.cuts += 1
                yield from cut.supervisions


def any_auto_punct(cuts) -> bool:
    """Whether any supervision of ``cuts`` (an iterable of cuts) carries a P' reference."""
    return any(get_p(s, use_auto_punct=True) is not None for c in cuts for s in c.supervisions)


def has_p(cut) -> bool:
    return all(get_p(s) is not None for s in cut.supervisions) and len(cut.supervisions) > 0


def withhold_p(cut):
    """A copy of ``cut`` whose supervisions keep only their N reference."""
    from copy import deepcopy

    new = deepcopy(cut)
    for s in new.supervisions:
        if s.custom:
            s.custom.pop(P_KEY, None)
            s.custom.pop(RAW_KEY, None)
    return new
