#!/usr/bin/env python3
"""Export a trained causal model to ONNX for streaming (onnxruntime / sherpa-onnx).

The library (:func:`export_model`, :func:`check_export`) and the command line
``python -m zipformer_pc.export`` (``zpc-export``; :func:`main`).

Usage:
  python -m zipformer_pc.export --exp-dir egs/synth/exp/conditioned --epoch 30 --avg 5 \
      --tokens data/synth/lang_bpe_256/tokens.txt --chunk-size 32 --left-context-frames 128 [--int8 true]

It writes, into ``--output-dir`` (default ``EXP_DIR/onnx``), with
``SUFFIX = -epoch-E-avg-A-chunk-C-left-L``:

* ``encoder{SUFFIX}.onnx``: one streaming chunk, every state an explicit
  input and output, in the order and layout sherpa-onnx expects of a
  streaming Zipformer2 (``x (N, T, 80)``, 6 caches per layer, the front
  end's cache, ``processed_lens``), plus the metadata it reads;
* ``decoder-{MODE}{SUFFIX}.onnx`` and ``joiner-{MODE}{SUFFIX}.onnx`` for each
  output mode the model produces (``P`` and/or ``N``).  For ``conditioned``
  the mode is baked into the decoder (the joiner is shared: both joiner files
  hold the same weights); for ``two-decoder`` each mode has its own pair.  So
  every ``(encoder, decoder-MODE, joiner-MODE)`` triple is a standard
  transducer that ``sherpa_onnx.OnlineRecognizer.from_transducer`` loads;
* ``tokens.txt`` (copied) and, with ``--int8 true``, ``*.int8.onnx`` files
  (dynamic int8 quantization of every Linear layer, the joiner's output
  layer included).

The joiner takes the encoder output before ``encoder_proj`` (one encoder
output serves every mode's joiner) and the decoder output after
``decoder_proj``.

After writing, the export checks itself: the ONNX encoder (two consecutive
chunks, carried states, batch 1 and 2), decoders and joiners are run on
random input and compared with PyTorch; a mismatch beyond ``--tolerance``
is an error.
"""

import argparse
import logging
import shutil
import warnings
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import torch
import torch.nn as nn
from torch import Tensor

from zipformer_pc.model.loading import load_model_for_inference
from zipformer_pc.features import FBANK_OPTIONS, options_to_metadata
from zipformer_pc.layout import (DEFAULT_CHUNK_SIZE, DEFAULT_LEFT_CONTEXT_FRAMES, checkpoint_tag, export_tag,
                                 int8_name, onnx_file_name)
from zipformer_pc.modes import MODE_NAMES
from zipformer_pc.options import add_checkpoint_options, str2bool

OPSET = 17


class StreamingEncoder(nn.Module):
    """The encoder's ``streaming_forward`` with sherpa-onnx's state layout.

    sherpa-onnx (and icefall's ONNX export) order the states per layer as
    key ``(L, N, K)``, non-linear attention ``(1, N, L, D)``, value 1 and 2
    ``(L, N, V)``, conv 1 and 2 ``(N, C, K_conv // 2)``; then the front
    end's cache ``(N, 128, 3, 19)`` and ``processed_lens (N,)`` int64.  The
    PyTorch encoder keeps batch-first caches and counts processed and valid
    frames separately; in a stream every frame is valid, so both counters
    are ``processed_lens``.
    """

    def __init__(self, encoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, x: Tensor, states: List[Tensor]) -> Tuple[Tensor, List[Tensor]]:
        num_layer_states = len(states) - 2
        ours: List[Tensor] = []
        for i in range(0, num_layer_states, 6):
            key, nonlin, val1, val2, conv1, conv2 = states[i : i + 6]
            ours += [key.transpose(0, 1), nonlin.squeeze(0), val1.transpose(0, 1), val2.transpose(0, 1), conv1, conv2]
        processed_lens = states[-1]
        ours += [states[-2], processed_lens, processed_lens]
        out, _, new = self.encoder.streaming_forward(x, None, ours)
        theirs: List[Tensor] = []
        for i in range(0, num_layer_states, 6):
            key, nonlin, val1, val2, conv1, conv2 = new[i : i + 6]
            theirs += [key.transpose(0, 1), nonlin.unsqueeze(0), val1.transpose(0, 1), val2.transpose(0, 1), conv1, conv2]
        theirs += [new[-3], new[-1]]
        return out, theirs


class DecoderForMode(nn.Module):
    """Predictor for one mode: ``y (N, context_size) -> decoder_out (N, joiner_dim)``."""

    def __init__(self, decoder: nn.Module, decoder_proj: nn.Module, mode: int) -> None:
        super().__init__()
        self.decoder = decoder
        self.decoder_proj = decoder_proj
        self.mode = mode

    def forward(self, y: Tensor) -> Tensor:
        mode = self.mode if self.decoder.conditioned else None
        # (N, 1, D): a 3-D input keeps the projection a MatMul (a 2-D one
        # would export as Gemm, which dynamic int8 quantization skips)
        out = self.decoder(y, mode=mode, need_pad=False)[:, -1:]
        return self.decoder_proj(out).squeeze(1)


class JoinerForMode(nn.Module):
    """``(encoder_out (N, C_enc), decoder_out (N, joiner_dim)) -> logit (N, vocab)``."""

    def __init__(self, joiner: nn.Module) -> None:
        super().__init__()
        self.joiner = joiner

    def forward(self, encoder_out: Tensor, decoder_out: Tensor) -> Tensor:
        # 3-D inputs keep every Linear a MatMul, which int8 quantization covers
        enc = self.joiner.encoder_proj(encoder_out.unsqueeze(1))
        return self.joiner(enc, decoder_out.unsqueeze(1), project_input=False).squeeze(1)


def sherpa_init_states(encoder, batch_size: int, chunk_size: int, left_context_frames: int) -> List[Tensor]:
    """Zero states in sherpa-onnx's layout (what :class:`StreamingEncoder` takes)."""
    ours = encoder.get_init_states(batch_size, chunk_size, left_context_frames)
    states: List[Tensor] = []
    for i in range(0, len(ours) - 3, 6):
        key, nonlin, val1, val2, conv1, conv2 = ours[i : i + 6]
        states += [key.transpose(0, 1).contiguous(), nonlin.unsqueeze(0), val1.transpose(0, 1).contiguous(),
                   val2.transpose(0, 1).contiguous(), conv1, conv2]
    return states + [ours[-3], ours[-1]]


def state_names(encoder) -> List[str]:
    names = []
    k = 0
    for stack in encoder.stacks:
        for _ in stack.layers:
            names += [f"cached_key_{k}", f"cached_nonlin_attn_{k}", f"cached_val1_{k}", f"cached_val2_{k}",
                      f"cached_conv1_{k}", f"cached_conv2_{k}"]
            k += 1
    return names + ["embed_states", "processed_lens"]


def encoder_metadata(model, chunk_size: int, left_context_frames: int, model_desc: str) -> Dict[str, str]:
    """What sherpa-onnx reads of a streaming Zipformer2 encoder, plus the
    recipe's feature options (so the runtime needs no other config)."""
    enc = model.encoder
    cfg = enc.config

    def csv(values) -> str:
        return ",".join(str(int(v)) for v in values)

    meta = {
        "model_type": "zipformer2",
        "version": "1",
        "model_author": "zipformer-pc",
        "comment": f"streaming zipformer-pc {model.model_type} model ({model_desc})",
        "transducer_type": model.model_type,
        "modes": ",".join(MODE_NAMES[m] for m in model.trained_modes()),
        "decode_chunk_len": str(2 * chunk_size),
        "T": str(enc.chunk_feature_frames(chunk_size)),
        "chunk_size": str(chunk_size),
        "left_context_frames": str(left_context_frames),
        "num_encoder_layers": csv(cfg.stack_values("num_encoder_layers")),
        "encoder_dims": csv(cfg.stack_values("encoder_dim")),
        "cnn_module_kernels": csv(cfg.stack_values("cnn_module_kernel")),
        "left_context_len": csv(left_context_frames // f for f in cfg.stack_values("downsampling_factor")),
        "query_head_dims": csv(cfg.stack_values("query_head_dim")),
        "value_head_dims": csv(cfg.stack_values("value_head_dim")),
        "num_heads": csv(cfg.stack_values("num_heads")),
        "encoder_out_dim": str(enc.output_dim),
    }
    meta.update(options_to_metadata(FBANK_OPTIONS))
    return meta


def add_metadata(path: Path, meta: Dict[str, str]) -> None:
    import onnx

    m = onnx.load(str(path))
    del m.metadata_props[:]
    for k, v in meta.items():
        p = m.metadata_props.add()
        p.key, p.value = k, str(v)
    onnx.save(m, str(path))


def _quiet_export(*args, **kwargs) -> None:
    """``torch.onnx.export`` (TorchScript exporter) without its tracer and deprecation warnings:
    the traced branches depend only on shapes fixed for an export (chunk size, left context)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=torch.jit.TracerWarning)
        warnings.simplefilter("ignore", category=DeprecationWarning)
        torch.onnx.export(*args, **kwargs)


def export_encoder(model, path: Path, chunk_size: int, left_context_frames: int, desc: str) -> None:
    enc = model.encoder
    wrapper = StreamingEncoder(enc).eval()
    x = torch.zeros(1, enc.chunk_feature_frames(chunk_size), enc.config.feature_dim)
    states = sherpa_init_states(enc, 1, chunk_size, left_context_frames)
    names = state_names(enc)
    dynamic = {"x": {0: "N"}, "encoder_out": {0: "N"}}
    for n, s in zip(names, states):
        batch_axis = 1 if n.startswith(("cached_key", "cached_nonlin", "cached_val")) else 0
        dynamic[n] = {batch_axis: "N"}
        dynamic[f"new_{n}"] = {batch_axis: "N"}
    _quiet_export(
        wrapper, (x, states), str(path), input_names=["x"] + names,
        output_names=["encoder_out"] + [f"new_{n}" for n in names],
        dynamic_axes=dynamic, opset_version=OPSET, dynamo=False,
    )
    add_metadata(path, encoder_metadata(model, chunk_size, left_context_frames, desc))


def export_decoder(model, mode: int, path: Path) -> None:
    name = model.head_for(mode)
    wrapper = DecoderForMode(model.decoders[name], model.joiners[name].decoder_proj, mode).eval()
    y = torch.zeros(1, model.cfg.context_size, dtype=torch.int64)
    _quiet_export(wrapper, (y,), str(path), input_names=["y"], output_names=["decoder_out"],
                      dynamic_axes={"y": {0: "N"}, "decoder_out": {0: "N"}}, opset_version=OPSET, dynamo=False)
    add_metadata(path, {"context_size": str(model.cfg.context_size), "vocab_size": str(model.cfg.vocab_size),
                        "mode": MODE_NAMES[mode]})


def export_joiner(model, mode: int, path: Path) -> None:
    name = model.head_for(mode)
    joiner = model.joiners[name]
    wrapper = JoinerForMode(joiner).eval()
    enc = torch.zeros(1, joiner.encoder_proj.in_features)
    dec = torch.zeros(1, joiner.decoder_proj.out_features)
    _quiet_export(wrapper, (enc, dec), str(path), input_names=["encoder_out", "decoder_out"],
                      output_names=["logit"],
                      dynamic_axes={"encoder_out": {0: "N"}, "decoder_out": {0: "N"}, "logit": {0: "N"}},
                      opset_version=OPSET, dynamo=False)
    add_metadata(path, {"joiner_dim": str(joiner.decoder_proj.out_features),
                        "encoder_out_dim": str(joiner.encoder_proj.in_features), "mode": MODE_NAMES[mode]})


def quantize_int8(src: Path, dst: Path) -> None:
    """Dynamic int8 quantization of every MatMul weight.  The wrappers above
    keep all Linear layers as MatMul (onnxruntime's dynamic quantization does
    not cover Gemm, which is how a Linear on 2-D input exports), so the
    joiner's output layer is quantized too."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the quantizer logs a line per tensor
    try:
        quantize_dynamic(str(src), str(dst), op_types_to_quantize=["MatMul"], weight_type=QuantType.QInt8)
    finally:
        root.setLevel(level)


# ---------------------------------------------------------------------------
# self check


def _session(path: Path):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])


def _max_rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / max(1e-6, float(np.abs(b).max())))


@torch.no_grad()
def check_export(model, files: Dict[str, Path], chunk_size: int, left_context_frames: int,
                 tolerance: float = 1e-3, seed: int = 0) -> Dict[str, float]:
    """Compare the ONNX files with PyTorch on random input; returns the
    relative errors and raises ``RuntimeError`` when one exceeds ``tolerance``."""
    g = torch.Generator().manual_seed(seed)
    errors: Dict[str, float] = {}
    enc = model.encoder
    wrapper = StreamingEncoder(enc).eval()
    sess = _session(files["encoder"])
    for batch in (1, 2):
        states = sherpa_init_states(enc, batch, chunk_size, left_context_frames)
        onnx_states = [s.numpy() for s in states]
        worst = 0.0
        for _ in range(2):
            x = torch.randn(batch, enc.chunk_feature_frames(chunk_size), enc.config.feature_dim, generator=g)
            out, states = wrapper(x, states)
            feeds = {"x": x.numpy()}
            feeds.update({i.name: s for i, s in zip(sess.get_inputs()[1:], onnx_states)})
            res = sess.run(None, feeds)
            onnx_states = res[1:]
            worst = max(worst, _max_rel_err(res[0], out.numpy()))
            worst = max(worst, max(_max_rel_err(a, b.numpy()) for a, b in zip(onnx_states, states)
                                   if b.is_floating_point() and b.numel() > 0))
            if not all(np.array_equal(a, b.numpy()) for a, b in zip(onnx_states, states) if not b.is_floating_point()):
                raise RuntimeError("ONNX encoder: integer states differ from PyTorch")
        errors[f"encoder_batch{batch}"] = worst
    for mode in model.trained_modes():
        m = MODE_NAMES[mode]
        name = model.head_for(mode)
        y = torch.randint(0, model.cfg.vocab_size, (3, model.cfg.context_size), generator=g)
        dec = DecoderForMode(model.decoders[name], model.joiners[name].decoder_proj, mode).eval()
        ref = dec(y).numpy()
        got = _session(files[f"decoder-{m}"]).run(None, {"y": y.numpy()})[0]
        errors[f"decoder-{m}"] = _max_rel_err(got, ref)
        joiner = model.joiners[name]
        e = torch.randn(3, joiner.encoder_proj.in_features, generator=g)
        d = torch.from_numpy(ref)
        ref_logit = JoinerForMode(joiner).eval()(e, d).numpy()
        got_logit = _session(files[f"joiner-{m}"]).run(None, {"encoder_out": e.numpy(), "decoder_out": ref})[0]
        errors[f"joiner-{m}"] = _max_rel_err(got_logit, ref_logit)
    bad = {k: v for k, v in errors.items() if not v <= tolerance}
    if bad:
        raise RuntimeError(f"ONNX export differs from PyTorch beyond tolerance {tolerance}: {bad}")
    return errors


# ---------------------------------------------------------------------------


def export_model(model, output_dir: Path, tokens: Path, chunk_size: int, left_context_frames: int,
                 suffix: str = "", int8: bool = False, tolerance: float = 1e-3, desc: str = "") -> Dict[str, Path]:
    """Export ``model`` (eval mode, causal encoder) and check it; returns the written files by role
    (``encoder``, ``decoder-P``, ``joiner-P``, ... and ``tokens``; ``*.int8`` keys with ``int8``), named by
    :func:`zipformer_pc.layout.onnx_file_name` after ``suffix``: ``-EXPORT_TAG`` or empty (``encoder.onnx``)."""
    if not model.encoder.config.causal:
        raise ValueError("streaming export needs a causal encoder (trained with --causal true)")
    model.encoder._check_chunk(chunk_size, left_context_frames)
    if chunk_size <= 0 or left_context_frames < 0:
        raise ValueError("streaming export needs --chunk-size > 0 and --left-context-frames >= 0")
    vocab = sum(1 for line in open(tokens, encoding="utf-8") if line.strip())
    if vocab != model.cfg.vocab_size:
        raise ValueError(f"{tokens} lists {vocab} tokens but the model has vocab_size {model.cfg.vocab_size}")
    output_dir.mkdir(parents=True, exist_ok=True)
    tag = suffix[1:] if suffix.startswith("-") else suffix  # "-EXPORT_TAG" (zipformer_pc.layout.export_tag)
    files: Dict[str, Path] = {"encoder": output_dir / onnx_file_name("encoder", tag)}
    logging.info("Exporting the encoder (chunk %d, left context %d) to %s", chunk_size, left_context_frames,
                 files["encoder"])
    export_encoder(model, files["encoder"], chunk_size, left_context_frames, desc)
    for mode in model.trained_modes():
        m = MODE_NAMES[mode]
        files[f"decoder-{m}"] = output_dir / onnx_file_name(f"decoder-{m}", tag)
        files[f"joiner-{m}"] = output_dir / onnx_file_name(f"joiner-{m}", tag)
        export_decoder(model, mode, files[f"decoder-{m}"])
        export_joiner(model, mode, files[f"joiner-{m}"])
    errors = check_export(model, files, chunk_size, left_context_frames, tolerance)
    logging.info("ONNX vs PyTorch max relative errors: %s",
                 ", ".join(f"{k} {v:.1e}" for k, v in errors.items()))
    files["tokens"] = output_dir / "tokens.txt"
    if Path(tokens).resolve() != files["tokens"].resolve():
        shutil.copyfile(tokens, files["tokens"])
    if int8:
        for role in [r for r in files if r != "tokens"]:
            dst = files[role].with_name(int8_name(files[role].name))
            quantize_int8(files[role], dst)
            files[f"{role}.int8"] = dst
        logging.info("Wrote int8 models")
    for role, path in files.items():
        logging.info("  %-14s %s (%.1f MB)", role, path, path.stat().st_size / 1e6)
    return files


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_checkpoint_options(p)  # --exp-dir, --epoch, --iter, --avg, --use-averaged-model
    p.add_argument("--tokens", required=True, type=Path, help="lang_bpe_N/tokens.txt")
    p.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE, help="Decoding chunk in 50 Hz encoder frames")
    p.add_argument("--left-context-frames", type=int, default=DEFAULT_LEFT_CONTEXT_FRAMES,
                   help="Attention left context, 50 Hz frames")
    p.add_argument("--output-dir", type=Path, default=None, help="Default: EXP_DIR/onnx")
    p.add_argument("--int8", type=str2bool, default=False, help="Also write dynamically quantized int8 models")
    p.add_argument("--tolerance", type=float, default=1e-3, help="Max relative ONNX vs PyTorch error")
    return p


def main(argv=None) -> None:
    args = get_parser().parse_args(argv)
    from zipformer_pc.logs import setup_logging

    setup_logging()
    torch.set_num_threads(1)
    try:
        model = load_model_for_inference(args.exp_dir, args.epoch, args.avg, args.iter, args.use_averaged_model)
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"Cannot load the model to export: {e}")
    tag = checkpoint_tag(args.epoch, args.iter, args.avg)
    if args.chunk_size <= 0 or args.left_context_frames < 0:
        raise SystemExit("streaming export needs --chunk-size > 0 and --left-context-frames >= 0")
    suffix = "-" + export_tag(tag, args.chunk_size, args.left_context_frames)
    out = args.output_dir or args.exp_dir / "onnx"
    export_model(model, out, args.tokens, args.chunk_size, args.left_context_frames, suffix=suffix,
                 int8=args.int8, tolerance=args.tolerance, desc=f"{model.desc}, {tag}")
    logging.info("Done: %s", out)


if __name__ == "__main__":
    main()
