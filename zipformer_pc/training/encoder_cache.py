"""Encoder outputs computed once, for training the heads of a frozen encoder.

Fine-tuning with ``train.py --freeze-encoder true`` runs the same frozen
encoder over the same audio in every epoch and for every system that starts
from the same model (the recipe fine-tunes all of them from the shipped
``norm.pt``).  The encoder is ~90% of a step's cost on a CPU, so the recipe
computes its outputs once (this module) and every training reads them
(``--encoder-cache FILE``): a step then costs only the predictor, joiner and
loss.

The outputs are those of simulated streaming with the decoding configuration
(``--chunk-size``, ``--left-context-frames``; eval mode: no dropout or
feature masking), each utterance followed by its tail silence
(``model.zipformer.add_tail_silence``), so the heads learn on exactly what
they see when decoding and in the exported streaming model.

Usage:
  python -m zipformer_pc.training.encoder_cache --init-from egs/synth/pretrained/norm.pt \\
      --cuts data/synth/fbank/synth_cuts_train_p1.jsonl.gz --output exp/encoder_cache.pt \\
      --chunk-size 32 --left-context-frames 128

The file holds float16 outputs per cut id and what produced them (the
checkpoint's digest, the chunk configuration); ``train.py`` refuses a cache
made from other weights or missing a training cut.
"""

import argparse
import hashlib
import logging
import os
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import torch

from zipformer_pc.features import encoder_frames, tail_padded_frames
from zipformer_pc.layout import DEFAULT_CHUNK_SIZE, DEFAULT_LEFT_CONTEXT_FRAMES
from zipformer_pc.logs import setup_logging
from zipformer_pc.model.zipformer import add_tail_silence
from zipformer_pc.options import str2bool

CACHE_VERSION = 2  # 2: outputs include the tail silence (features.tail_padded_frames)


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def load_frozen_encoder(init_from: Path) -> Tuple[torch.nn.Module, Dict[str, object]]:
    """The encoder of a checkpoint, with the weights ``--init-from`` copies (``model``), in eval mode."""
    from zipformer_pc.model.transducer import build_model
    from zipformer_pc.training.checkpoint import load_checkpoint

    ckpt = load_checkpoint(init_from)
    if "model" not in ckpt or "model_config" not in ckpt:
        raise ValueError(f"{init_from} is not a checkpoint of this project (no model / model_config)")
    model = build_model(ckpt["model_config"])
    weights = {k: v.to(torch.float32) if v.is_floating_point() else v for k, v in ckpt["model"].items()}
    model.load_state_dict(weights)
    return model.encoder.eval(), ckpt["model_config"]["encoder"]


def _batches(cuts: List, max_duration: float) -> List[List]:
    cuts = sorted(cuts, key=lambda c: c.duration)
    out, cur, total = [], [], 0.0
    for c in cuts:
        if cur and total + c.duration > max_duration:
            out.append(cur)
            cur, total = [], 0.0
        cur.append(c)
        total += c.duration
    if cur:
        out.append(cur)
    return out


def compute_cache(init_from: Path, cuts_paths: Sequence[Path], output: Path, chunk_size: int,
                  left_context_frames: int, max_duration: float = 200.0) -> Dict[str, object]:
    """Encode every cut of ``cuts_paths`` (ids de-duplicated) and save the cache to ``output``."""
    from lhotse import CutSet, load_manifest_lazy
    from lhotse.dataset.collation import collate_features
    from tqdm import tqdm

    encoder, enc_config = load_frozen_encoder(init_from)
    if not enc_config.get("causal", False) and chunk_size > 0:
        raise ValueError(f"{init_from} has a non-causal encoder: use --chunk-size -1")
    seen: Dict[str, object] = {}
    for p in cuts_paths:
        for c in load_manifest_lazy(p):
            seen.setdefault(c.id, c)
    cuts = list(seen.values())
    if not cuts:
        raise ValueError(f"No cuts in {', '.join(map(str, cuts_paths))}")
    outputs: Dict[str, torch.Tensor] = {}
    total = sum(c.duration for c in cuts)
    with torch.no_grad(), tqdm(total=round(total), unit="s audio", desc="encoder cache", mininterval=10) as bar:
        for batch in _batches(cuts, max_duration):
            feats, lens = collate_features(CutSet.from_cuts(batch))
            feats, lens = add_tail_silence(feats, lens, chunk_size)
            out, out_lens = encoder(feats, lens, chunk_size=chunk_size, left_context_frames=left_context_frames)
            for i, c in enumerate(batch):
                outputs[c.id] = out[i, : int(out_lens[i])].to(torch.float16).clone()
            bar.update(round(sum(c.duration for c in batch)))
    cache = {
        "version": CACHE_VERSION,
        "init_from": str(init_from),
        "init_digest": file_digest(init_from),
        "chunk_size": chunk_size,
        "left_context_frames": left_context_frames,
        "encoder_config": enc_config,
        "outputs": outputs,
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(output.name + ".tmp")
    torch.save(cache, tmp)
    os.replace(tmp, output)
    frames = sum(t.size(0) for t in outputs.values())
    logging.info(f"Wrote {output}: {len(outputs)} cuts, {total / 3600:.2f} h, {frames} encoder frames "
                 f"(chunk {chunk_size}, left context {left_context_frames})")
    return cache


class EncoderCache:
    """Cached encoder outputs, looked up by cut id for a training batch."""

    def __init__(self, path: Path, init_from: Path) -> None:
        if not Path(path).is_file():
            raise FileNotFoundError(f"Encoder cache {path} not found (make it with python -m "
                                    "zipformer_pc.training.encoder_cache)")
        cache = torch.load(path, map_location="cpu", weights_only=False)
        if cache.get("version") != CACHE_VERSION:
            raise ValueError(f"{path}: cache version {cache.get('version')}, expected {CACHE_VERSION}; make it again")
        digest = file_digest(init_from)
        if cache["init_digest"] != digest:
            raise ValueError(f"{path} was computed from {cache['init_from']} (digest {cache['init_digest']}), not "
                             f"from --init-from {init_from} (digest {digest}): make it again")
        self.path = Path(path)
        self.outputs: Dict[str, torch.Tensor] = cache["outputs"]
        self.chunk_size = cache["chunk_size"]
        self.left_context_frames = cache["left_context_frames"]

    def __len__(self) -> int:
        return len(self.outputs)

    def check_covers(self, cut_ids: Sequence[str]) -> None:
        missing = [c for c in cut_ids if c not in self.outputs]
        if missing:
            raise ValueError(f"{self.path} lacks {len(missing)} of {len(cut_ids)} training cuts (e.g. {missing[0]}): "
                             "make it from the training manifests")

    def lookup(self, cut_ids: Sequence[str], feature_lens: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """(encoder_out (N, T', D) float32, zero-padded; encoder_lens (N,)) for the cuts of a batch.
        ``feature_lens`` guards against a cache of other features: the lengths must be the encoder's."""
        outs = [self.outputs[c] for c in cut_ids]
        lens = torch.tensor([o.size(0) for o in outs], dtype=torch.long)
        expected = torch.tensor([encoder_frames(tail_padded_frames(int(n), self.chunk_size)) for n in feature_lens],
                                dtype=torch.long)
        if not torch.equal(lens, expected):
            raise ValueError(f"{self.path}: cached lengths {lens.tolist()} differ from the features' "
                             f"{expected.tolist()} (cuts {list(cut_ids)[:3]}...): a cache of other features")
        out = torch.zeros(len(outs), int(lens.max()), outs[0].size(1))
        for i, o in enumerate(outs):
            out[i, : o.size(0)] = o.float()
        return out, lens


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--init-from", type=Path, required=True, help="The checkpoint whose encoder is frozen")
    p.add_argument("--cuts", type=Path, nargs="+", required=True, help="Training cut manifests")
    p.add_argument("--output", type=Path, required=True)
    p.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE,
                   help="Attention chunk (50 Hz frames) of the decoding")
    p.add_argument("--left-context-frames", type=int, default=DEFAULT_LEFT_CONTEXT_FRAMES)
    p.add_argument("--max-duration", type=float, default=200.0, help="Seconds of audio per encoder batch")
    p.add_argument("--num-threads", type=int, default=1)
    p.add_argument("--force", type=str2bool, default=False, help="Compute even when OUTPUT exists for these weights")
    return p


def main() -> None:
    setup_logging()
    args = get_parser().parse_args()
    torch.set_num_threads(args.num_threads)
    if args.output.is_file() and not args.force:
        try:
            cache = EncoderCache(args.output, args.init_from)
            from lhotse import load_manifest_lazy

            cache.check_covers([c.id for p in args.cuts for c in load_manifest_lazy(p)])
            if (cache.chunk_size, cache.left_context_frames) == (args.chunk_size, args.left_context_frames):
                logging.info(f"{args.output} is up to date ({len(cache)} cuts): nothing to do")
                return
        except (ValueError, KeyError) as e:
            logging.info(f"{args.output} is stale ({e}): computing it again")
    try:
        compute_cache(args.init_from, args.cuts, args.output, args.chunk_size, args.left_context_frames,
                      args.max_duration)
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"encoder_cache: {e}")


if __name__ == "__main__":
    main()
