#!/usr/bin/env python3
"""Load on the WebSocket server: many concurrent streams at real time, their speed, latency and correctness.

Usage:
  python benchmarks/server_load.py                                   # random tiny model, 1..32 streams
  python benchmarks/server_load.py --model-dir egs/synth/exp/conditioned/onnx --streams 1,8,32
  python benchmarks/server_load.py --encoder paper --seconds 12 --speed 2
  python benchmarks/server_load.py --model-dir egs/synth/exp/cond_p/onnx --output-md load.md --output-json load.json

For each number of streams in ``--streams``, that many clients connect at
once to a server process (``python -m zipformer_pc.server``, started here) and
each sends its own utterance of ``--seconds`` (synthetic speech-like audio: a
phrase, a pause long enough for an endpoint, another phrase) at ``--speed``
times real time in pieces of ``--piece-seconds``, then ends the stream.
Printed per row:

* aggregate RTF: the server's decoding time (its worker thread: features,
  encoder, search) over the audio it received, from ``/stats``;
* worker load: that time over the wall time of the row (1.0: the worker never
  rests, and the streams start to lag);
* result latency p50/p90/p99 and end latency p50/p99 (see
  ``zipformer_pc/server/client.py``);
* identical: streams whose finals (segment ids, times, P and N text, word
  times) equal the offline runtime's on the same audio; anything lost or
  mixed up between streams shows here.  The exit status is 1 when one differs.

Without ``--model-dir`` a random model (``--encoder`` size, ``conditioned``)
is exported to a temporary directory, its joiners re-weighted to emit on about
``--emit-fraction`` of the frames as a trained model would
(``benchmarks/sherpa_vs_ours.py``).  On a shared machine the figures move
with the other load; the server uses one worker thread (``--num-threads`` of
the encoder).

``--output-md`` writes the table in markdown with the settings (machine,
threads, model, audio) above it and what the columns mean below it;
``--output-json`` writes the same figures (latencies in seconds) and the
command.  Both are written whatever the exit status.
"""

import argparse
import asyncio
import json
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from zipformer_pc.export.random_model import build_random_export, synthetic_utterance
from zipformer_pc.machine import describe_machine
from zipformer_pc.runtime import StreamingRecognizer
from zipformer_pc.runtime.endpoint import EndpointConfig
from zipformer_pc.server.app import Decoder
from zipformer_pc.server.client import percentiles, stream_many

ROOT = Path(__file__).resolve().parents[1]
RATE = 16000


def utterance(seconds: float, seed: int) -> np.ndarray:
    """About ``seconds`` of audio: a phrase, 1.5 s of silence, another phrase."""
    first = max(0.6, 0.55 * (seconds - 1.5))
    second = max(0.6, seconds - 1.5 - first)
    return np.concatenate([synthetic_utterance(first, seed), np.zeros(int(1.5 * RATE), np.float32),
                           synthetic_utterance(second, 1000 + seed)])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stats(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats?gc=1", timeout=30) as r:
        return json.loads(r.read())


def _leftover(stats: dict) -> bool:
    return bool(stats["streams"] or stats["live_stream_objects"] or stats["connections"])


def _stats_after_row(port: int, timeout: float = 5.0) -> dict:
    """The server's counters once its connections and streams are gone, or after ``timeout``
    seconds.  The decoder thread lets go of the last step's streams a moment after the loop
    has sent their results (the executor drops its work item after setting the future), and on
    a busy machine that moment can come after the client's next request."""
    deadline = time.time() + timeout
    while True:
        s = _stats(port)
        if not _leftover(s) or time.time() > deadline:
            return s
        time.sleep(0.1)


def start_server(model_dir: Path, port: int, args: argparse.Namespace, log) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "zipformer_pc.server", "--model-dir", str(model_dir), "--host", "127.0.0.1",
           "--port", str(port), "--max-connections", str(max(args.streams) + 1), "--int8", str(args.int8).lower(),
           "--num-threads", str(args.num_threads), "--idle-timeout", "120"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 300
    while True:
        try:
            _stats(port)
            return proc
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                raise SystemExit(f"server_load.py: the server did not start (log: {log.name})")
            time.sleep(0.5)


def offline_finals(rec: StreamingRecognizer, x: np.ndarray) -> List[dict]:
    return [_comparable(Decoder._segment_message("final", seg, 0.0)) for seg in rec.recognize_segments(x, RATE)]


def _comparable(msg: dict) -> dict:
    return {k: v for k, v in msg.items() if k not in ("type", "time")}


def _ms(ps: Dict[str, float], key: str) -> str:
    return f"{ps[key] * 1000:.0f}" if key in ps else "-"


def text_row(r: dict) -> str:
    """A row as printed (the columns of the printed header)."""
    lat, end = r["result_latency"], r["end_latency"]
    return (f"{r['streams']:>7} {r['audio_seconds']:>8.1f} {r['wall_seconds']:>7.1f} {r['agg_rtf']:>8.3f} "
            f"{r['worker_load']:>7.2f} {_ms(lat, 'p50'):>8} {_ms(lat, 'p90'):>6} {_ms(lat, 'p99'):>6} "
            f"{_ms(end, 'p50'):>8} {_ms(end, 'p99'):>6}  {r['identical']}/{r['streams']}")


MD_COLUMNS = ("streams", "audio s", "wall s", "agg RTF", "worker load", "result latency ms (p50 / p90 / p99)",
              "end latency ms (p50 / p99)", "identical")
COLUMNS_NOTE = ("agg RTF: the server's decoding time (its worker thread: features, encoder, search) over the audio "
                "it received; worker load: that time over the row's wall time (near 1.0 the worker never rests and "
                "the streams start to lag). Result latency: from sending the audio up to a partial's or final's "
                "time to receiving that message (a chunk's own duration is not in it); end latency: from sending "
                "a stream's end to its `done`; identical: streams whose finals (segments, times, P and N text) "
                "equal the offline runtime's on the same audio.")


def markdown(info: dict) -> str:
    """The table of ``info["rows"]``: the settings above it, what the columns mean below it."""
    speed = f"{info['speed']:g}x real time" if info["speed"] else "as fast as the server takes it"
    lines = [f"The server (`python -m zipformer_pc.server`, one worker thread for all streams, encoder with "
             f"{info['num_threads']} intra-op thread(s)) serving the {info['precision']} model {info['model']} on "
             f"{info['machine']}. Each stream: {info['seconds']:g} s of speech-like audio (a phrase, a pause, a "
             f"phrase) sent at {speed} in {info['piece_seconds']:g} s pieces. Offline runtime RTF "
             f"{info['offline_rtf']:.3f} (one stream at a time, the benchmark's process).", "",
             "| " + " | ".join(MD_COLUMNS) + " |", "|" + "---|" * len(MD_COLUMNS)]
    for r in info["rows"]:
        lat, end = r["result_latency"], r["end_latency"]
        cells = [str(r["streams"]), f"{r['audio_seconds']:.1f}", f"{r['wall_seconds']:.1f}", f"{r['agg_rtf']:.3f}",
                 f"{r['worker_load']:.2f}", " / ".join(_ms(lat, k) for k in ("p50", "p90", "p99")),
                 f"{_ms(end, 'p50')} / {_ms(end, 'p99')}", f"{r['identical']}/{r['streams']}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", COLUMNS_NOTE]
    lines += [f"\nLeft over on the server after the {r['streams']}-stream row: {r['leftover']}"
              for r in info["rows"] if r["leftover"]]
    return "\n".join(lines) + "\n"


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path, default=None, help="an existing export (default: a random model)")
    p.add_argument("--int8", action="store_true", help="serve the int8 models (the encoder then runs unbatched)")
    p.add_argument("--encoder", default="tiny", help="encoder config of the random model [tiny]")
    p.add_argument("--emit-fraction", type=float, default=0.15, help="frames the random model emits on [0.15]")
    p.add_argument("--streams", default="1,4,8,16,32", help="comma list of concurrent stream counts")
    p.add_argument("--seconds", type=float, default=8.0, help="audio per stream [8]")
    p.add_argument("--speed", type=float, default=1.0, help="times real time (0: as fast as possible) [1]")
    p.add_argument("--piece-seconds", type=float, default=0.1, help="audio per message [0.1]")
    p.add_argument("--num-threads", type=int, default=1, help="the server's encoder threads [1]")
    p.add_argument("--keep-dir", type=Path, default=None, help="export the random model here and keep it")
    p.add_argument("--output-md", type=Path, default=None, help="write the table (markdown) with its settings here")
    p.add_argument("--output-json", type=Path, default=None, help="write every figure and the command here")
    return p


def main(argv=None) -> int:
    args = get_parser().parse_args(argv)
    command = "python benchmarks/server_load.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    try:
        args.streams = sorted({int(n) for n in args.streams.split(",") if n.strip()})
    except ValueError:
        raise SystemExit(f"server_load.py: --streams must be a comma list of integers, got {args.streams!r}")
    if not args.streams or args.streams[0] < 1 or args.seconds <= 0 or args.speed < 0:
        raise SystemExit("server_load.py: --streams, --seconds must be positive, --speed not negative")
    audio = [utterance(args.seconds, seed) for seed in range(max(args.streams))]
    tmp: Optional[Path] = None
    if args.model_dir is not None:
        model_dir = args.model_dir
        model = f"`{model_dir}`"
    else:
        model_dir = args.keep_dir or Path(tempfile.mkdtemp(prefix="server_load_"))
        tmp = None if args.keep_dir else model_dir
        t0 = time.perf_counter()
        desc, params = build_random_export(model_dir, audio[0], args.encoder, emit_fraction=args.emit_fraction)
        print(f"exported {desc} ({params / 1e6:.1f}M parameters) in {time.perf_counter() - t0:.0f} s", flush=True)
        model = f"{desc} ({params / 1e6:.1f}M parameters)"
    port = _free_port()
    log = open(Path(tempfile.gettempdir()) / f"server_load_{port}.log", "w")
    rows: List[dict] = []
    try:
        # the server's defaults: endpoint rules on, sherpa-onnx's values
        rec = StreamingRecognizer.from_dir(model_dir, args.int8, endpoint=EndpointConfig())
        t0 = time.perf_counter()
        expected = [offline_finals(rec, x) for x in audio]
        offline_rtf = (time.perf_counter() - t0) / (len(audio) * len(audio[0]) / RATE)
        del rec
        proc = start_server(model_dir, port, args, log)
        print(f"model {model_dir}{' (int8)' if args.int8 else ''}; {args.seconds:g} s per stream at "
              f"{args.speed:g}x real time in {args.piece_seconds:g} s pieces; offline runtime RTF "
              f"{offline_rtf:.3f} (one stream, this process); segments per stream: "
              f"{', '.join(str(len(e)) for e in expected[:8])}{', ...' if len(expected) > 8 else ''}", flush=True)
        print(f"{'streams':>7} {'audio s':>8} {'wall s':>7} {'agg RTF':>8} {'worker':>7} "
              f"{'lat p50':>8} {'p90':>6} {'p99':>6} {'end p50':>8} {'p99':>6}  identical")
        bad = 0
        try:
            for n in args.streams:
                before = _stats(port)
                items = [(f"s{i}", audio[i], RATE) for i in range(n)]
                t0 = time.perf_counter()
                results = asyncio.run(stream_many(f"ws://127.0.0.1:{port}/ws", items, connections=n,
                                                  speed=args.speed, piece_seconds=args.piece_seconds))
                wall = time.perf_counter() - t0
                after = _stats_after_row(port)
                decode = after["decode_seconds"] - before["decode_seconds"]
                seconds = after["audio_seconds"] - before["audio_seconds"]
                same = sum(r.ok and [_comparable(f) for f in r.finals] == expected[i] for i, r in enumerate(results))
                bad += n - same
                leftover = after if _leftover(after) else None
                rows.append({"streams": n, "audio_seconds": seconds, "wall_seconds": wall,
                             "agg_rtf": decode / max(seconds, 1e-9), "worker_load": decode / wall,
                             "result_latency": percentiles([x for r in results for x in r.latencies]),
                             "end_latency": percentiles([r.end_latency for r in results if r.end_latency is not None]),
                             "identical": same, "leftover": leftover})
                print(text_row(rows[-1]), flush=True)
                if leftover:
                    print(f"  leftover after the row: {after}")
                    bad += 1
            print("latencies in ms; agg RTF = server decoding time / audio; worker = that time / wall time")
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    finally:
        log.close()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    # the server's log is kept only when something went wrong (an exception above keeps it too)
    if bad:
        print(f"server log: {log.name}")
    else:
        Path(log.name).unlink()
    info = {"command": command, "machine": describe_machine(), "model": model, "model_dir": str(model_dir),
            "precision": "int8" if args.int8 else "fp32", "num_threads": args.num_threads, "seconds": args.seconds,
            "speed": args.speed, "piece_seconds": args.piece_seconds, "offline_rtf": offline_rtf,
            "segments_per_stream": [len(e) for e in expected], "rows": rows}
    for path, text in ((args.output_md, markdown(info)), (args.output_json, json.dumps(info, indent=1) + "\n")):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
