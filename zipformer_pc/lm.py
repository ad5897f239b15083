"""Token n-gram language models for shallow fusion in modified beam search.

One model per output mode, trained on the token pieces of a corpus's
training references (the P mode's cased and punctuated text, the N mode's
normalized text: ``zipformer_pc.data.references``) with interpolated
Kneser-Ney smoothing (one discount per order, Ney's estimate
``n1 / (n1 + 2 n2)`` from the counts of counts), and stored in the ARPA
format that KenLM, SRILM and kaldilm read and write (log10 probabilities
and backoff weights, four decimals: ``ARPA_DECIMALS``; gzip when the name
ends in ``.gz``).  The words of
the ARPA file are the sentencepiece pieces, so a model is tied to a
tokenizer's pieces, not to its ids.

In search (:meth:`NgramLm.bind`), a path's LM state is its last
``order - 1`` tokens after ``<s>``; ``</s>`` is not scored (a stream has
no known end).

LODR (low-order density ratio, Zheng et al., arXiv 2203.16776): a
transducer's predictor has learnt the token statistics of its training
text, and shallow fusion counts them twice.  A token bigram of that text
(``lodr-MODE.arpa.gz``, ``local/train_lm.py --prefix lodr --order 2``)
stands for that internal LM, and :meth:`BoundLm.with_lodr` subtracts
``lodr_scale`` times its log probability from what fusion adds.
"""

import gzip
import math
from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from zipformer_pc.files import text_writer

BOS, EOS = "<s>", "</s>"
# shallow-fusion weights of beam search (runtime and decode.py), the best on the synthetic
# corpus's dev set with the shipped model and its 5-gram LMs (egs/synth/pretrained/MODEL_CARD.md)
DEFAULT_LM_SCALE = 0.5
DEFAULT_LM_TOKEN_BONUS = 1.0
# ... and with LODR (the lodr-MODE files beside the LMs): the best of a grid on the same dev set; the
# subtracted bigram gives back part of the LM's cost per token, so the scale rises and the bonus falls
DEFAULT_LODR_LM_SCALE = 0.6
DEFAULT_LODR_LM_TOKEN_BONUS = 0.5
DEFAULT_LODR_SCALE = 0.25
LM_PREFIXES = ("lm", "lodr")  # the file names' prefixes: PREFIX-MODE.arpa[.gz]
LOG10 = math.log(10.0)
_NO_PROB = -99.0  # log10 of the <s> unigram (never predicted), as SRILM and KenLM write it
# decimals of the log10 figures in a written ARPA file: a rounding of at most 5e-5 (a probability
# off by 0.012% of itself; the shipped model's beam-search figures on test and test_ood came out
# the same) for a shipped 5-gram file ~19% smaller gzipped than with KenLM's six (5.18 -> 4.21 MB)
ARPA_DECIMALS = 4

Gram = Tuple[str, ...]


class NgramLm:
    """A backoff n-gram model: ``probs[gram]`` and ``backoffs[context]`` in natural log."""

    def __init__(self, order: int, probs: Dict[Gram, float], backoffs: Dict[Gram, float]) -> None:
        if order < 1:
            raise ValueError(f"order must be at least 1, got {order}")
        self.order = order
        self.probs = probs
        self.backoffs = backoffs

    def __len__(self) -> int:
        return len(self.probs)

    def counts(self) -> List[int]:
        """The number of n-grams per order, 1..order."""
        c = Counter(len(g) for g in self.probs)
        return [c[n] for n in range(1, self.order + 1)]

    # -- training --------------------------------------------------------

    @classmethod
    def train(cls, sentences: Iterable[Sequence[str]], order: int, vocab: Sequence[str] = (),
              prune: Sequence[int] = ()) -> "NgramLm":
        """Interpolated Kneser-Ney over ``sentences`` (sequences of pieces).

        ``vocab``: pieces that get a unigram probability even when the text
        never has them (the tokenizer's other pieces), so no token of the
        model's vocabulary is impossible.  ``prune``: per order from 1, drop
        the n-grams seen at most that many times (as KenLM's ``--prune``;
        unigrams are never dropped), keeping those that are the context of a
        kept longer one; the backoff weights are then recomputed so every
        context's distribution still sums to one.
        """
        if order < 1:
            raise ValueError(f"order must be at least 1, got {order}")
        if len(prune) > order or any(p < 0 for p in prune):
            raise ValueError(f"prune takes at most {order} non-negative counts, got {list(prune)}")
        raw: List[Counter] = [Counter() for _ in range(order + 1)]
        num = 0
        for sent in sentences:
            toks = [BOS] + list(sent) + [EOS]
            num += 1
            for i in range(len(toks)):
                for n in range(1, order + 1):
                    if i + n > len(toks):
                        break
                    g = tuple(toks[i : i + n])
                    if n == 1 and g[0] == BOS:
                        continue
                    raw[n][g] += 1
        if num == 0:
            raise ValueError("no training sentences")
        # Kneser-Ney's adjusted counts: the highest order and grams that start
        # with <s> keep their counts; the others count their distinct left contexts
        adj: List[Counter] = [Counter() for _ in range(order + 1)]
        adj[order] = raw[order]
        for n in range(order - 1, 0, -1):
            left = Counter(g[1:] for g in raw[n + 1])
            for g, c in raw[n].items():
                adj[n][g] = c if g[0] == BOS else left.get(g, 0)
            adj[n] = Counter({g: c for g, c in adj[n].items() if c > 0})
        words = sorted({g[0] for g in raw[1]} | {v for v in vocab if v not in (BOS,)} | {EOS})
        probs: Dict[Gram, float] = {}
        backoffs: Dict[Gram, float] = {}
        for n in range(1, order + 1):
            cc = Counter(adj[n].values())
            n1, n2 = cc.get(1, 0), cc.get(2, 0)
            d = n1 / (n1 + 2 * n2) if n1 + 2 * n2 > 0 else 0.5
            d = min(max(d, 0.1), 0.9)
            total: Dict[Gram, int] = defaultdict(int)
            types: Dict[Gram, int] = defaultdict(int)
            for g, c in adj[n].items():
                total[g[:-1]] += c
                types[g[:-1]] += 1
            gamma = {h: d * types[h] / total[h] for h in total}
            if n == 1:
                g0 = gamma.get((), 1.0)
                for w in words:
                    c = adj[1].get((w,), 0)
                    p = max(c - d, 0) / total[()] + g0 / len(words) if total[()] else 1.0 / len(words)
                    probs[(w,)] = math.log(p)
            else:
                # (the suffix g[1:] always has an adjusted count: g[0] is a left context of it)
                for g, c in adj[n].items():
                    h = g[:-1]
                    probs[g] = math.log((c - d) / total[h] + gamma[h] * math.exp(probs[g[1:]]))
            if n > 1:
                for h, gm in gamma.items():
                    backoffs[h] = math.log(gm)
        probs[(BOS,)] = _NO_PROB * LOG10
        if any(prune[1:]):
            _prune(probs, backoffs, raw, order, list(prune) + [0] * (order - len(prune)))
        return cls(order, probs, backoffs)

    # -- ARPA ------------------------------------------------------------

    def write_arpa(self, path) -> None:
        path = Path(path)
        by_order: Dict[int, List[Gram]] = defaultdict(list)
        for g in self.probs:
            by_order[len(g)].append(g)
        with text_writer(path) as f:
            f.write("\n\\data\\\n")
            for n in range(1, self.order + 1):
                f.write(f"ngram {n}={len(by_order[n])}\n")
            for n in range(1, self.order + 1):
                f.write(f"\n\\{n}-grams:\n")
                for g in sorted(by_order[n]):
                    line = f"{self.probs[g] / LOG10:.{ARPA_DECIMALS}f}\t{' '.join(g)}"
                    if g in self.backoffs:
                        line += f"\t{self.backoffs[g] / LOG10:.{ARPA_DECIMALS}f}"
                    f.write(line + "\n")
            f.write("\n\\end\\\n")

    @classmethod
    def read_arpa(cls, path) -> "NgramLm":
        path = Path(path)
        opener = gzip.open if path.name.endswith(".gz") else open
        probs: Dict[Gram, float] = {}
        backoffs: Dict[Gram, float] = {}
        declared: Dict[int, int] = {}
        n = 0
        with opener(path, "rt", encoding="utf-8") as f:
            for num, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                if line == "\\data\\":
                    n = 0
                    continue
                if line.startswith("ngram ") and n == 0:
                    k, v = line[6:].split("=")
                    declared[int(k)] = int(v)
                    continue
                if line.startswith("\\") and line.endswith("-grams:"):
                    n = int(line[1:-7])
                    continue
                if line == "\\end\\":
                    break
                if n == 0:
                    raise ValueError(f"{path}:{num}: not an ARPA file ({line[:40]!r})")
                parts = line.split()
                if len(parts) not in (n + 1, n + 2):
                    raise ValueError(f"{path}:{num}: expected a {n}-gram line, got {line[:60]!r}")
                g = tuple(parts[1 : n + 1])
                probs[g] = float(parts[0]) * LOG10
                if len(parts) == n + 2:
                    backoffs[g] = float(parts[-1]) * LOG10
        if not declared:
            raise ValueError(f"{path}: no \\data\\ section: not an ARPA file")
        order = max(declared)
        counts = Counter(len(g) for g in probs)
        for k, v in declared.items():
            if counts[k] != v:
                raise ValueError(f"{path}: the header declares {v} {k}-grams, the file has {counts[k]}")
        return cls(order, probs, backoffs)

    # -- scoring ---------------------------------------------------------

    def logp(self, context: Sequence[str], token: str) -> float:
        """Natural-log probability of ``token`` after ``context`` (pieces; start with ``<s>``)."""
        ctx = tuple(context)[-(self.order - 1):] if self.order > 1 else ()
        return _backoff_logp(self.probs, self.backoffs, ctx, token)

    def bind(self, tokens: Sequence[str]) -> "BoundLm":
        """This model on a tokenizer's ids (``tokens[i]`` is the piece of id i)."""
        return BoundLm(self, tokens)


def fusion_defaults(lodr: bool) -> Tuple[float, float, float]:
    """Beam search's default ``(lm_scale, lm_token_bonus, lodr_scale)`` with or without LODR files."""
    if lodr:
        return DEFAULT_LODR_LM_SCALE, DEFAULT_LODR_LM_TOKEN_BONUS, DEFAULT_LODR_SCALE
    return DEFAULT_LM_SCALE, DEFAULT_LM_TOKEN_BONUS, 0.0


def find_lm(directory, mode: str, prefix: str = "lm") -> Optional[Path]:
    """The token LM of output mode ``mode`` in ``directory`` (``PREFIX-MODE.arpa.gz`` or ``.arpa``;
    prefix ``lm`` for fusion, ``lodr`` for its low-order bigram), if any."""
    if prefix not in LM_PREFIXES:
        raise ValueError(f"prefix must be one of {', '.join(LM_PREFIXES)}, not {prefix!r}")
    for name in (f"{prefix}-{mode}.arpa.gz", f"{prefix}-{mode}.arpa"):
        if (Path(directory) / name).exists():
            return Path(directory) / name
    return None


def _prune(probs: Dict[Gram, float], backoffs: Dict[Gram, float], raw: List[Counter], order: int,
           limits: List[int]) -> None:
    """Drop rare n-grams of orders 2.. (in place) and renormalize the backoff weights."""
    keep: set = set()
    for n in range(order, 1, -1):
        for g, c in raw[n].items():
            if c > limits[n - 1] or g in keep:
                keep.add(g[:-1])
                keep.add(g)
            else:
                probs.pop(g, None)
    children: Dict[Gram, List[str]] = defaultdict(list)
    for g in probs:
        if len(g) > 1:
            children[g[:-1]].append(g[-1])
    backoffs.clear()
    # shortest contexts first: a context's lower-order probabilities are final by then
    for h in sorted(children, key=len):
        kids = children[h]
        here = sum(math.exp(probs[h + (w,)]) for w in kids)
        lower = sum(math.exp(_backoff_logp(probs, backoffs, h[1:], w)) for w in kids)
        if here < 1.0 and lower < 1.0:
            backoffs[h] = math.log((1.0 - here) / (1.0 - lower))


def _backoff_logp(probs: Dict[Gram, float], backoffs: Dict[Gram, float], ctx: Gram, token: str) -> float:
    acc = 0.0
    for k in range(len(ctx), -1, -1):
        h = ctx[len(ctx) - k:]
        p = probs.get(h + (token,))
        if p is not None:
            return acc + p
        acc += backoffs.get(h, 0.0)
    return acc + _NO_PROB * LOG10


class BoundLm:
    """An :class:`NgramLm` over token ids: the log probabilities of every token
    after a state at once (cached per state), as beam search scores them.

    A state is a tuple of at most ``order - 1`` ids, ``-1`` standing for ``<s>``.
    """

    def __init__(self, lm: NgramLm, tokens: Sequence[str], cache_size: int = 4096) -> None:
        self.order = lm.order
        ids = {t: i for i, t in enumerate(tokens)}
        ids[BOS] = -1
        vocab = len(tokens)
        missing = [t for g in lm.probs for t in g if t not in ids and t != EOS]
        if missing:
            raise ValueError(f"the LM has pieces the tokenizer lacks (another tokenizer's LM?): {sorted(set(missing))[:5]}")
        self.unigram = np.full(vocab, _NO_PROB * LOG10)
        children: Dict[Tuple[int, ...], Tuple[List[int], List[float]]] = defaultdict(lambda: ([], []))
        # every piece but </s> has an id now (checked above); </s> is never scored and ends grams only
        for g, p in lm.probs.items():
            if g[-1] in (EOS, BOS):
                continue
            key = tuple(ids[t] for t in g[:-1])
            if not key:
                self.unigram[ids[g[-1]]] = p
            else:
                children[key][0].append(ids[g[-1]])
                children[key][1].append(p)
        self.children = {h: (np.array(i, dtype=np.int64), np.array(p)) for h, (i, p) in children.items()}
        self.backoffs = {tuple(ids[t] for t in h): b for h, b in lm.backoffs.items() if EOS not in h}
        self.initial = (-1,) if self.order > 1 else ()
        self._cache: Dict[Tuple[int, ...], np.ndarray] = {}
        self._cache_size = cache_size

    def fusion(self, states: Sequence[Tuple[int, ...]], scale: float, bonus: float,
               skip: Sequence[int] = ()) -> np.ndarray:
        """What shallow fusion adds to the token scores of paths in ``states``,
        (len(states), vocab): ``scale * log P_LM + bonus``, and 0 for the ids in
        ``skip`` (blank and ``<unk>``, which emit nothing; negative ids ignored)."""
        out = np.stack([self.scores(s) for s in states]) * scale + bonus
        out[:, [i for i in skip if i >= 0]] = 0.0
        return out

    def with_lodr(self, low: "BoundLm", lodr_scale: float) -> "LodrLm":
        """This LM in fusion with ``low`` (the LODR bigram) subtracted ``lodr_scale`` times."""
        return LodrLm(self, low, lodr_scale)

    def next_state(self, state: Tuple[int, ...], token: int) -> Tuple[int, ...]:
        if self.order == 1:
            return ()
        return (state + (token,))[-(self.order - 1):]

    def state_after(self, tokens: Sequence[int]) -> Tuple[int, ...]:
        """The state after ``<s>`` and ``tokens``."""
        if self.order == 1:
            return ()
        return (self.initial + tuple(tokens[-(self.order - 1):]))[-(self.order - 1):]

    def scores(self, state: Tuple[int, ...]) -> np.ndarray:
        """Natural-log probability of every token id after ``state``."""
        vec = self._cache.get(state)
        if vec is not None:
            return vec
        vec = self.unigram
        for k in range(1, len(state) + 1):
            h = state[len(state) - k:]
            kids = self.children.get(h)
            b = self.backoffs.get(h, 0.0)
            if kids is None and b == 0.0:
                continue
            vec = vec + b
            if kids is not None:
                vec[kids[0]] = kids[1]
        if len(self._cache) >= self._cache_size:
            self._cache.clear()
        self._cache[state] = vec
        return vec


class LodrLm:
    """Shallow fusion with a low-order density ratio: a :class:`BoundLm` whose
    fusion scores are ``scale * log P_LM + bonus - lodr_scale * log P_low``,
    ``low`` being a low-order LM of the transducer's training text (a token
    bigram).  Searches use it as a :class:`BoundLm` (the same states: the
    low LM's context is the end of the LM's, so its order must not be
    higher)."""

    def __init__(self, lm: BoundLm, low: BoundLm, lodr_scale: float) -> None:
        if lodr_scale < 0:
            raise ValueError(f"lodr_scale must not be negative, got {lodr_scale}")
        if low.order > lm.order:
            raise ValueError(f"the LODR LM's order ({low.order}) is higher than the LM's ({lm.order})")
        self.lm, self.low, self.lodr_scale = lm, low, lodr_scale
        self.order = lm.order

    def fusion(self, states: Sequence[Tuple[int, ...]], scale: float, bonus: float,
               skip: Sequence[int] = ()) -> np.ndarray:
        out = self.lm.fusion(states, scale, bonus, skip)
        keep = self.low.order - 1
        low = np.stack([self.low.scores(s[len(s) - keep:] if keep else ()) for s in states]) * self.lodr_scale
        low[:, [i for i in skip if i >= 0]] = 0.0
        return out - low

    def next_state(self, state: Tuple[int, ...], token: int) -> Tuple[int, ...]:
        return self.lm.next_state(state, token)

    def state_after(self, tokens: Sequence[int]) -> Tuple[int, ...]:
        return self.lm.state_after(tokens)


def lm_files(directory, modes: Sequence[str]) -> Dict[str, Path]:
    """The LM files of ``directory`` for ``modes``, by name: ``{"lm-P": path, "lodr-P": path, ...}``."""
    files = {}
    for mode in modes:
        for prefix in LM_PREFIXES:
            path = find_lm(directory, mode, prefix)
            if path is not None:
                files[f"{prefix}-{mode}"] = path
    return files


def load_fusion_lms(files: Mapping[str, Path], modes: Sequence[str], tokens: Sequence[str],
                    lodr_scale: float = 0.0) -> Dict[str, Union[BoundLm, "LodrLm"]]:
    """The fusion LM of each mode of ``modes`` that has an ``lm-MODE`` file in ``files``
    (:func:`lm_files`' names), bound to ``tokens``; with ``lodr_scale > 0`` each with its
    ``lodr-MODE`` bigram subtracted (:meth:`BoundLm.with_lodr`), which must then be there
    (FileNotFoundError otherwise). Beam search's one loader: the runtime and decode.py."""
    lms: Dict[str, Union[BoundLm, LodrLm]] = {
        m: NgramLm.read_arpa(files[f"lm-{m}"]).bind(tokens) for m in modes if f"lm-{m}" in files}
    if lodr_scale > 0:
        missing = [m for m in lms if f"lodr-{m}" not in files]
        if missing:
            raise FileNotFoundError(f"LODR scale {lodr_scale:g} but no lodr-MODE.arpa[.gz] for the modes "
                                    f"{','.join(missing)} (local/train_lm.py --prefix lodr writes them)")
        lms = {m: lm.with_lodr(NgramLm.read_arpa(files[f"lodr-{m}"]).bind(tokens), lodr_scale)
               for m, lm in lms.items()}
    return lms
