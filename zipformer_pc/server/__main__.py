"""``python -m zipformer_pc.serve`` (also ``python -m zipformer_pc.server``, ``zpc-serve``): serve an
exported model over WebSocket, with the microphone page at ``/``.

Usage:
  python -m zipformer_pc.serve --model-dir egs/synth/exp/conditioned/onnx --port 6006
  # then open http://localhost:6006/ or run
  python -m zipformer_pc.server.client --url ws://localhost:6006/ws some.wav

The protocol is in ``zipformer_pc/server/__init__.py`` (and docs/server.md).
"""

import argparse
import logging
import sys
from pathlib import Path

from aiohttp import web

from zipformer_pc.logs import setup_logging
from zipformer_pc.options import add_modes_option, str2bool
from zipformer_pc.runtime.endpoint import EndpointConfig, add_endpoint_options
from zipformer_pc.runtime.recognizer import StreamingRecognizer, add_search_options, search_kwargs
from zipformer_pc.server.app import ServerConfig, create_app


def get_parser() -> argparse.ArgumentParser:
    d = ServerConfig()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path, required=True, help="an export of python -m zipformer_pc.export")
    p.add_argument("--int8", type=str2bool, default=False, help="use the *.int8.onnx models")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=6006)
    p.add_argument("--num-threads", type=int, default=1, help="encoder intra-op threads")
    add_modes_option(p, "searched (those exported)")
    add_search_options(p)
    add_endpoint_options(p, True, "each stream")
    p.add_argument("--batch-encoder", type=str2bool, default=None,
                   help="stack ready streams into one encoder call (default: true for fp32, false for int8, "
                        "whose per-call quantization would make results depend on batch-mates)")
    p.add_argument("--max-batch", type=int, default=d.max_batch, help="streams per encoder call")
    p.add_argument("--max-connections", type=int, default=d.max_connections,
                   help="more are told so (error too_many_connections) and closed")
    p.add_argument("--max-message-bytes", type=int, default=d.max_message_bytes, help="largest audio message")
    p.add_argument("--idle-timeout", type=float, default=d.idle_timeout,
                   help="seconds without a message before a connection is closed")
    p.add_argument("--max-pending-seconds", type=float, default=d.max_pending_seconds,
                   help="undecoded audio per connection before the server stops reading from it")
    p.add_argument("--shutdown-timeout", type=float, default=d.shutdown_timeout,
                   help="seconds to finish open streams on SIGINT/SIGTERM")
    p.add_argument("--max-hotwords", type=int, default=d.max_hotwords,
                   help="phrases in a client's hotword list (its config message) at most")
    p.add_argument("--max-hotword-chars", type=int, default=d.max_hotword_chars,
                   help="characters of one phrase of a client's hotword list at most")
    return p


def main(argv=None) -> None:
    args = get_parser().parse_args(argv)
    setup_logging()
    cfg = ServerConfig(max_connections=args.max_connections, max_message_bytes=args.max_message_bytes,
                       idle_timeout=args.idle_timeout, max_batch=args.max_batch,
                       max_pending_seconds=args.max_pending_seconds, shutdown_timeout=args.shutdown_timeout,
                       max_hotwords=args.max_hotwords, max_hotword_chars=args.max_hotword_chars)
    endpoint = EndpointConfig.from_args(args)
    modes = list(args.modes) if args.modes else None  # None: every mode exported
    try:  # --hotwords FILE: every stream's list unless its client sends its own
        rec = StreamingRecognizer.from_dir(args.model_dir, args.int8, num_threads=args.num_threads, modes=modes,
                                           endpoint=endpoint, batch_encoder=args.batch_encoder,
                                           **search_kwargs(args, args.model_dir))
    except (ValueError, OSError) as e:
        sys.exit(f"error: {e}")
    logging.info("model %s (%s, modes %s, %s, batched encoder %s); serving on http://%s:%d/ (WebSocket /ws)",
                 args.model_dir, rec.transducer_type or "?", ",".join(rec.search_modes), rec.decoding_method,
                 rec.batch_encoder,
                 args.host, args.port)
    web.run_app(create_app(rec, cfg), host=args.host, port=args.port, print=None,
                shutdown_timeout=cfg.shutdown_timeout + 5)


if __name__ == "__main__":
    main()
