"""A context graph for contextual biasing (hotwords) in modified beam search.

The phrases to favour, each a sequence of token ids with a bonus per token,
make an Aho-Corasick automaton over token ids: a trie of the phrases whose
nodes are the partial matches, with *failure* links to the longest proper
suffix of a node that is also a partial match.  A beam-search path carries
one node (its state); every token it emits moves the state, and its score
changes by what :meth:`ContextGraph.forward` says:

* a token that continues a partial match earns its bonus at once, so a path
  that has begun a phrase keeps its place in the beam while it spells it out;
* when the match fails, the bonus of the tokens matched so far is taken back
  (the state falls back to the longest suffix that is still a partial match,
  whose tokens earn their bonus again);
* a phrase is matched as whole words: its bonus is kept for good (*banked*)
  once the token after its last one is a *boundary* (a word start, a mark,
  an apostrophe: ``Queequeg's``, ``Queequeg,``), or the segment ends there.
  A token that goes on with the word instead (``Queequeg`` + ``ood``) takes
  the bonus back as any failed match does.  Every phrase that ends there is
  banked, the suffixes' too (``Moby Dick`` and ``Dick``).

So at any point a path's total bonus is what it banked plus what it holds
for matches not yet complete (:meth:`ContextGraph.pending`; a path that stops
emitting keeps holding it, a path that completes a phrase banks the same
amount), and the paths are compared without the held part when the best one
is picked (:meth:`ContextGraph.finalize`: a phrase begun but not finished is
no evidence).  The design is that of icefall's and sherpa-onnx's context
graphs (Aho-Corasick, the partial bonus given per token and taken back on
failure), plus the word boundary; the code is the project's own, numpy and
pure Python.

For the search, :meth:`ContextGraph.rows` gives per state the bonus and the
next state of every token of the vocabulary at once (computed on first use,
then cached), so beam search can add the bonus to its whole score matrix
before it prunes, as it adds the LM's (the runtime does so for the tokens
that take a path deep enough into a phrase, and adds the rest after pruning:
``zipformer_pc.runtime.recognizer.HOTWORD_PRUNE_DEPTH``).
"""

from collections import deque
from typing import Iterable, List, Optional, Sequence, Tuple

import numpy as np

ROOT = 0


class ContextGraph:
    """Aho-Corasick automaton of token-id phrases with a bonus per matched token.

    Args:
      phrases: ``(token_ids, bonus_per_token, text)`` per phrase; a token
        shared by phrases with a common prefix earns the largest of their
        bonuses; ``text`` names the phrase in :meth:`matches` and :meth:`find`.
      vocab_size: the token ids run from 0 to ``vocab_size - 1``.
      boundary: per token id, whether it ends the word before it (a word
        start, a mark); None: every token does (a phrase is complete with
        its last token).
    """

    def __init__(self, phrases: Iterable[Tuple[Sequence[int], float, str]], vocab_size: int,
                 boundary: Optional[Sequence[bool]] = None) -> None:
        if vocab_size < 1:
            raise ValueError(f"vocab_size must be positive, got {vocab_size}")
        self.vocab_size = vocab_size
        self.boundary = (np.ones(vocab_size, dtype=bool) if boundary is None
                         else np.asarray(boundary, dtype=bool).reshape(-1))
        if self.boundary.size != vocab_size:
            raise ValueError(f"boundary has {self.boundary.size} entries, vocab_size is {vocab_size}")
        children: List[dict] = [{}]
        arc: List[float] = [0.0]  # the bonus of the token that leads to the node
        depth: List[int] = [0]
        self.phrase: List[Optional[str]] = [None]  # the phrase that ends at the node, if any
        self.num_phrases = 0
        for ids, bonus, text in phrases:
            ids = [int(t) for t in ids]
            if not ids:
                raise ValueError(f"the phrase {text!r} has no tokens")
            if not np.isfinite(bonus) or bonus <= 0:
                raise ValueError(f"the phrase {text!r}: its bonus per token must be a positive number, got {bonus}")
            bad = [t for t in ids if not 0 <= t < vocab_size]
            if bad:
                raise ValueError(f"the phrase {text!r}: token ids {bad} outside 0..{vocab_size - 1}")
            node = ROOT
            for t in ids:
                nxt = children[node].get(t)
                if nxt is None:
                    nxt = len(children)
                    children[node][t] = nxt
                    children.append({})
                    arc.append(float(bonus))
                    depth.append(depth[node] + 1)
                    self.phrase.append(None)
                else:
                    arc[nxt] = max(arc[nxt], float(bonus))
                node = nxt
            if self.phrase[node] is None:
                self.num_phrases += 1
            self.phrase[node] = text
        self.children = children
        n = len(children)
        self.depths = np.asarray(depth, dtype=np.int64)
        # score: the bonus a path at the node holds (its arcs' bonuses summed from the root), computed
        # after every phrase is in, so a prefix shared with a later phrase of a larger bonus counts
        # that bonus in every node below it too
        self.score = np.zeros(n)
        self.fail = np.zeros(n, dtype=np.int64)
        self.done = np.zeros(n)  # banked at a boundary after the node: every phrase that ends there
        self.output = np.full(n, -1, dtype=np.int64)  # the nearest proper suffix that ends a phrase
        queue = deque([ROOT])
        while queue:  # breadth first: a node's failure target is shallower, so done before it
            node = queue.popleft()
            for t, child in children[node].items():
                self.score[child] = self.score[node] + arc[child]
                if node != ROOT:
                    f = int(self.fail[node])
                    while f != ROOT and t not in children[f]:
                        f = int(self.fail[f])
                    self.fail[child] = children[f].get(t, ROOT)
                f = int(self.fail[child])
                self.output[child] = f if self.phrase[f] is not None else self.output[f]
                own = self.score[child] if self.phrase[child] is not None else 0.0
                self.done[child] = own + self.done[f]
                queue.append(child)
        self._rows: dict = {}

    def __len__(self) -> int:
        """The number of states (the root included)."""
        return len(self.children)

    # -- one token at a time ---------------------------------------------------

    def next_state(self, state: int, token: int) -> int:
        """The state after ``token``: the child, else the child of the longest suffix that has one,
        else the root."""
        node = state
        while True:
            child = self.children[node].get(token)
            if child is not None:
                return child
            if node == ROOT:
                return ROOT
            node = int(self.fail[node])

    def forward(self, state: int, token: int) -> Tuple[float, int]:
        """``(bonus, next state)`` for a path in ``state`` that emits ``token``: the next state's held
        bonus less this one's, plus, when ``token`` is a boundary, the phrases that end at ``state``."""
        nxt = self.next_state(state, token)
        banked = self.done[state] if self.boundary[token] else 0.0
        return float(self.score[nxt] - self.score[state] + banked), nxt

    def finalize(self, state: int) -> float:
        """The bonus of a path that ends in ``state`` (the segment ends): the held bonus given back,
        the phrases that end there banked."""
        return float(self.done[state] - self.score[state])

    def pending(self, state: int) -> float:
        """What a path in ``state`` holds and has not earned yet (``-finalize``)."""
        return -self.finalize(state)

    def state_after(self, tokens: Sequence[int], state: int = ROOT) -> int:
        for t in tokens:
            state = self.next_state(state, int(t))
        return state

    def total_bonus(self, tokens: Sequence[int]) -> Tuple[float, int]:
        """``(bonus, state)`` of a path of ``tokens`` from the root: what :meth:`forward` gave it, summed."""
        total, state = 0.0, ROOT
        for t in tokens:
            b, state = self.forward(state, int(t))
            total += b
        return total, state

    def matches(self, state: int) -> List[str]:
        """The phrases that end at ``state``: its own, then those of its suffixes, longest first."""
        out = []
        node = state if self.phrase[state] is not None else int(self.output[state])
        while node > ROOT:
            out.append(self.phrase[node])
            node = int(self.output[node])
        return out

    def find(self, tokens: Sequence[int]) -> List[Tuple[int, str]]:
        """Every whole-word phrase occurrence in ``tokens`` (followed by a boundary or the end):
        ``(index of its last token, phrase)``, in order."""
        found, state = [], ROOT
        for i, t in enumerate(tokens):
            if self.boundary[int(t)]:
                found += [(i - 1, p) for p in self.matches(state)]
            state = self.next_state(state, int(t))
        return found + [(len(tokens) - 1, p) for p in self.matches(state)]

    # -- the whole vocabulary at once (beam search) --------------------------------

    def rows(self, state: int) -> Tuple[np.ndarray, np.ndarray]:
        """``(bonus, next_state)`` of every token from ``state``, arrays of ``vocab_size`` (cached)."""
        got = self._rows.get(state)
        if got is not None:
            return got
        if state == ROOT:
            nxt = np.zeros(self.vocab_size, dtype=np.int64)
        else:  # the failure target's transitions, overridden by the node's own children
            nxt = self.rows(int(self.fail[state]))[1].copy()
        for t, child in self.children[state].items():
            nxt[t] = child
        bonus = self.score[nxt] - self.score[state] + np.where(self.boundary, self.done[state], 0.0)
        self._rows[state] = (bonus, nxt)
        return bonus, nxt

    def fusion(self, states: Sequence[int], skip: Sequence[int] = ()) -> Tuple[np.ndarray, np.ndarray]:
        """``(bonus, next_state)``, each ``(len(states), vocab_size)``, for paths in ``states``; the
        ids in ``skip`` (blank, ``<unk>``: they emit nothing) get 0 and keep the state."""
        bonus = np.stack([self.rows(s)[0] for s in states])
        nxt = np.stack([self.rows(s)[1] for s in states])
        skip = [i for i in skip if 0 <= i < self.vocab_size]
        if skip:
            bonus[:, skip] = 0.0
            nxt[:, skip] = np.asarray(states, dtype=np.int64)[:, None]
        return bonus, nxt
