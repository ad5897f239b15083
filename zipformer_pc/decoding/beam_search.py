"""Transducer search for one output mode: batched greedy and modified beam search.

Both emit at most one non-blank token per encoder frame by default, as
icefall's and sherpa-onnx's decoders do, so greedy search equals modified beam
search with ``beam=1``.  The training losses (torchaudio's and k2's "regular"
RNN-T) allow several tokens on one frame; a model that packs tokens that way
(e.g. one that has memorised a few utterances and emits each at its start)
needs ``max_sym_per_frame > 1`` in greedy search to be decoded faithfully.

The mode selects the head: for ``two-decoder`` its own predictor and joiner,
for ``conditioned`` the shared predictor fed with that mode's embedding.

``blank_penalty`` is subtracted from the blank logit of every joiner output
before either search picks, as in the runtime (``--blank-penalty``).
"""

from dataclasses import dataclass
from typing import Dict, List, Tuple

import torch

from zipformer_pc.options import check_blank_penalty


@dataclass
class Head:
    """The pieces of a model that produce one output mode."""

    decoder: torch.nn.Module
    joiner: torch.nn.Module
    mode: int
    blank_id: int
    context_size: int

    @classmethod
    def of(cls, model, mode: int) -> "Head":
        name = model.head_for(mode)
        return cls(model.decoders[name], model.joiners[name], mode, model.cfg.blank_id, model.cfg.context_size)

    def decoder_proj(self, contexts: torch.Tensor) -> torch.Tensor:
        """(B, context_size) token ids -> (B, joiner_dim) projected predictor output."""
        mode = self.mode if self.decoder.conditioned else None
        out = self.decoder(contexts, mode=mode, need_pad=False)[:, -1]
        return self.joiner.decoder_proj(out)

    def logits(self, enc_proj: torch.Tensor, dec_proj: torch.Tensor, blank_penalty: float = 0.0) -> torch.Tensor:
        out = self.joiner(enc_proj, dec_proj, project_input=False)
        if blank_penalty:
            out[..., self.blank_id] -= blank_penalty
        return out


@torch.no_grad()
def greedy_search_batch(
    model, encoder_out: torch.Tensor, encoder_lens: torch.Tensor, mode: int, max_sym_per_frame: int = 1,
    blank_penalty: float = 0.0,
) -> List[List[int]]:
    """Batched greedy search.

    Args:
      encoder_out: (N, T, C); encoder_lens: (N,).
      max_sym_per_frame: tokens one frame may emit before the search moves
        on (1: the modified topology, as the streaming runtimes do).
    Returns:
      token ids per utterance.
    """
    if max_sym_per_frame < 1:
        raise ValueError(f"max_sym_per_frame must be >= 1, got {max_sym_per_frame}")
    blank_penalty = check_blank_penalty(blank_penalty)
    head = Head.of(model, mode)
    n, t_max, _ = encoder_out.shape
    dev = encoder_out.device
    enc_proj = head.joiner.encoder_proj(encoder_out)
    contexts = torch.full((n, head.context_size), head.blank_id, dtype=torch.long, device=dev)
    dec_proj = head.decoder_proj(contexts)
    hyps: List[List[int]] = [[] for _ in range(n)]
    for t in range(t_max):
        active = encoder_lens > t
        if not bool(active.any()):
            break
        for _ in range(max_sym_per_frame):
            y = head.logits(enc_proj[:, t], dec_proj, blank_penalty).argmax(dim=-1)
            emit = (y != head.blank_id) & active
            if not bool(emit.any()):
                break
            idx = emit.nonzero(as_tuple=True)[0]
            for i in idx.tolist():
                hyps[i].append(int(y[i]))
            contexts[idx] = torch.cat([contexts[idx, 1:], y[idx].unsqueeze(1)], dim=1)
            dec_proj[idx] = head.decoder_proj(contexts[idx])
            active = emit  # only rows that just emitted may emit again on this frame
    return hyps


@torch.no_grad()
def modified_beam_search(
    model, encoder_out: torch.Tensor, encoder_lens: torch.Tensor, mode: int, beam: int = 4, unk_id: int = -1,
    lm=None, lm_scale: float = 0.0, lm_token_bonus: float = 0.0, blank_penalty: float = 0.0,
) -> List[List[int]]:
    """Beam search with at most one symbol per frame, as the runtime's
    (``zipformer_pc.runtime.recognizer``) and sherpa-onnx's: hypotheses with
    equal token sequences are merged (their probabilities added), ``unk_id``
    is read as blank, and the result is the hypothesis with the best log
    probability per token (the predictor's context counted).  With ``lm`` (a
    :class:`zipformer_pc.lm.BoundLm`) and ``lm_scale > 0``, every non-blank
    token also scores ``lm_scale * log P_LM + lm_token_bonus`` before the
    hypotheses are pruned (shallow fusion)."""
    if beam < 1:
        raise ValueError(f"beam must be >= 1, got {beam}")
    blank_penalty = check_blank_penalty(blank_penalty)
    fuse = lm is not None and lm_scale > 0
    head = Head.of(model, mode)
    out: List[List[int]] = []
    for i in range(encoder_out.size(0)):
        enc_proj = head.joiner.encoder_proj(encoder_out[i, : int(encoder_lens[i])])
        # hypothesis: token tuple -> log probability
        hyps: Dict[Tuple[int, ...], float] = {(): 0.0}
        cache: Dict[Tuple[int, ...], torch.Tensor] = {}

        def dec(ys: Tuple[int, ...]) -> torch.Tensor:
            ctx = ((head.blank_id,) * head.context_size + ys)[-head.context_size:]
            if ctx not in cache:
                cache[ctx] = head.decoder_proj(torch.tensor([ctx], dtype=torch.long, device=encoder_out.device))[0]
            return cache[ctx]

        for t in range(enc_proj.size(0)):
            keys = list(hyps)
            d = torch.stack([dec(k) for k in keys])
            logp = head.logits(enc_proj[t].expand(len(keys), -1), d, blank_penalty).log_softmax(dim=-1)
            if fuse:
                fused = lm.fusion([lm.state_after(k) for k in keys], lm_scale, lm_token_bonus, (head.blank_id, unk_id))
                logp = logp + torch.from_numpy(fused).to(logp)
            scores = logp + torch.tensor([hyps[k] for k in keys], device=logp.device).unsqueeze(1)
            vocab = scores.size(1)
            top = scores.flatten().topk(min(beam, scores.numel()))
            new: Dict[Tuple[int, ...], float] = {}
            for s, flat in zip(top.values.tolist(), top.indices.tolist()):
                k, tok = keys[flat // vocab], flat % vocab
                ys = k if tok in (head.blank_id, unk_id) else k + (tok,)
                new[ys] = float(torch.logaddexp(torch.tensor(new[ys]), torch.tensor(s))) if ys in new else s
            hyps = new
        out.append(list(max(hyps.items(), key=lambda kv: kv[1] / (head.context_size + len(kv[0])))[0]))
    return out


def search(
    model, encoder_out, encoder_lens, mode: int, method: str, beam: int = 4, max_sym_per_frame: int = 1,
    blank_penalty: float = 0.0, **beam_opts,
) -> List[List[int]]:
    """``beam_opts``: ``unk_id`` and the LM fusion of :func:`modified_beam_search`."""
    if method == "greedy_search":
        return greedy_search_batch(model, encoder_out, encoder_lens, mode, max_sym_per_frame, blank_penalty)
    if method == "modified_beam_search":
        return modified_beam_search(model, encoder_out, encoder_lens, mode, beam, blank_penalty=blank_penalty,
                                    **beam_opts)
    raise ValueError(f"Unknown decoding method {method!r}: greedy_search or modified_beam_search")
