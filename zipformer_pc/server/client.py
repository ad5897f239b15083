"""Stream wav files to the recognition server (:mod:`zipformer_pc.server`) and report finals and latency.

Usage:
  # one file at real time
  python -m zipformer_pc.server.client --url ws://localhost:6006/ws talk.wav
  # a folder over 8 concurrent connections, 4x faster than real time, finals saved as JSON lines
  python -m zipformer_pc.server.client --url ws://localhost:6006/ws --connections 8 --speed 4 \\
      --output finals.jsonl wavs/
  # phrases the server's beam search favours (a server started with --decoding-method modified_beam_search)
  python -m zipformer_pc.server.client --url ws://localhost:6006/ws --hotwords names.txt talk.wav

Each file is sent at its own sample rate (declared in a config message; the
server resamples) in pieces of ``--piece-seconds``, paced at ``--speed`` times
real time (0: as fast as the connection takes it), then ``{"type": "end"}``.
Finals are printed as they arrive; at the end come the latency percentiles:

* result latency: for each partial or final, the wall time from sending the
  audio up to the message's ``time`` (how far the stream was decoded) to
  receiving the message; a chunk's own duration (0.64 s for chunk size 32) is
  not in it: the chunk's audio had to be sent first;
* end latency: from sending the end to receiving ``done``.
"""

import argparse
import asyncio
import bisect
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from zipformer_pc.modes import RUNTIME_ORDER
from zipformer_pc.runtime.audio import read_wav, wav_files


@dataclass
class StreamResult:
    """What one connection got back for one piece of audio."""

    name: str
    audio_seconds: float
    finals: List[dict] = field(default_factory=list)
    partials: int = 0
    latencies: List[float] = field(default_factory=list)  # result latencies, seconds
    end_latency: Optional[float] = None  # seconds from the end message to ``done``
    done: Optional[dict] = None
    errors: List[dict] = field(default_factory=list)
    close_code: Optional[int] = None
    seconds_sent: float = 0.0
    amended: int = 0  # finals sent again with a late mark attached (they replace the earlier one)
    cut_short: bool = False  # the server finished the stream before the client's end (its shutdown)

    @property
    def ok(self) -> bool:
        return self.done is not None and not self.cut_short and not any(e.get("fatal", True) for e in self.errors)

    def transcript(self) -> Dict[str, str]:
        """The finals' text per mode, joined by spaces (as the runtime's ``transcript``)."""
        modes = [k for k in RUNTIME_ORDER if any(k in f for f in self.finals)]
        return {m: " ".join(f[m] for f in self.finals if f.get(m)) for m in modes}


async def stream_audio(http, url: str, samples: np.ndarray, rate: int, name: str = "", speed: float = 1.0,
                       piece_seconds: float = 0.1,
                       on_final: Optional[Callable[[str, dict], None]] = None,
                       hotwords: Optional[List[str]] = None) -> StreamResult:
    """Send ``samples`` (float, mono, at ``rate``) over one connection of the aiohttp
    ``http`` client session, with ``hotwords`` (phrases as lines of a hotword file) in the
    config message when given; returns the finals and latencies."""
    import aiohttp

    res = StreamResult(name, len(samples) / rate)
    sent: List[Tuple[float, float]] = []  # (audio seconds sent so far, wall time)
    t_end: List[float] = []
    async with http.ws_connect(url, max_msg_size=0, autoping=True) as ws:
        first = await ws.receive()
        if first.type != aiohttp.WSMsgType.TEXT:
            res.errors.append({"code": "no_ready", "message": f"got {first.type!r} instead of ready", "fatal": True})
            res.close_code = ws.close_code
            return res
        ready = json.loads(first.data)
        if ready.get("type") != "ready":
            res.errors.append(ready)
            await ws.receive()  # the close
            res.close_code = ws.close_code
            return res
        if rate != ready["sample_rate"] or hotwords is not None:
            config = {"type": "config", "sample_rate": int(rate)}
            if hotwords is not None:
                config["hotwords"] = list(hotwords)
            await ws.send_str(json.dumps(config))

        async def send() -> None:
            step = max(1, int(round(piece_seconds * rate)))
            t0 = time.perf_counter()
            for i in range(0, len(samples), step):
                piece = np.asarray(samples[i : i + step], dtype="<f4")
                await ws.send_bytes(piece.tobytes())
                sent.append(((i + piece.size) / rate, time.perf_counter()))
                if speed > 0:
                    delay = t0 + sent[-1][0] / speed - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
            await ws.send_str(json.dumps({"type": "end"}))
            t_end.append(time.perf_counter())

        sender = asyncio.ensure_future(send())
        try:
            async for msg in ws:
                if msg.type != aiohttp.WSMsgType.TEXT:
                    continue
                now = time.perf_counter()
                m = json.loads(msg.data)
                kind = m.get("type")
                if kind in ("partial", "final"):
                    covered = [s for s, _ in sent]
                    i = bisect.bisect_left(covered, m["time"] - 1e-6)
                    if i < len(sent):
                        res.latencies.append(now - sent[i][1])
                    elif t_end:  # the tail padded after the end
                        res.latencies.append(now - t_end[0])
                    if kind == "partial":
                        res.partials += 1
                    else:
                        if res.finals and res.finals[-1].get("segment") == m.get("segment"):
                            res.finals[-1] = m  # amended: a late mark attached to that segment
                            res.amended += 1
                        else:
                            res.finals.append(m)
                        if on_final is not None:
                            on_final(name, m)
                elif kind == "done":
                    res.done = m
                    if t_end:
                        res.end_latency = now - t_end[0]
                    else:
                        res.cut_short = True
                elif kind == "error":
                    res.errors.append(m)
        finally:
            if not sender.done():
                sender.cancel()
            try:
                await sender
            except (asyncio.CancelledError, ConnectionError, RuntimeError):
                pass
    res.close_code = ws.close_code
    res.seconds_sent = sent[-1][0] if sent else 0.0
    return res


async def stream_many(url: str, items: Sequence[Tuple[str, np.ndarray, int]], connections: int = 1,
                      speed: float = 1.0, piece_seconds: float = 0.1,
                      on_final: Optional[Callable[[str, dict], None]] = None,
                      hotwords: Optional[List[str]] = None) -> List[StreamResult]:
    """``items`` (name, samples, rate) over ``connections`` concurrent connections, each taking
    the next item when it is done; results in the order of ``items``."""
    import aiohttp

    queue: "asyncio.Queue" = asyncio.Queue()
    for k, item in enumerate(items):
        queue.put_nowait((k, item))
    results: List[Optional[StreamResult]] = [None] * len(items)

    async def worker(http) -> None:
        while not queue.empty():
            k, (name, samples, rate) = queue.get_nowait()
            try:
                results[k] = await stream_audio(http, url, samples, rate, name, speed, piece_seconds, on_final,
                                                hotwords)
            except (aiohttp.ClientError, ConnectionError, asyncio.TimeoutError) as e:
                r = StreamResult(name, len(samples) / rate)
                r.errors.append({"code": "connection_failed", "message": str(e), "fatal": True})
                results[k] = r

    async with aiohttp.ClientSession() as http:
        await asyncio.gather(*(worker(http) for _ in range(max(1, connections))))
    return [r for r in results if r is not None]


def percentiles(values: Sequence[float], qs=(50, 90, 99)) -> Dict[str, float]:
    if not values:
        return {}
    return {f"p{q}": float(np.percentile(np.asarray(values), q)) for q in qs}


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="+", help="wav files or folders of wav files")
    p.add_argument("--url", default="ws://localhost:6006/ws")
    p.add_argument("--connections", type=int, default=1, help="concurrent connections")
    p.add_argument("--speed", type=float, default=1.0, help="times real time (0: as fast as possible)")
    p.add_argument("--piece-seconds", type=float, default=0.1, help="audio per message")
    p.add_argument("--output", type=Path, default=None, help="write every final as a JSON line here")
    p.add_argument("--quiet", action="store_true", help="print only the summary")
    p.add_argument("--hotwords", type=Path, default=None,
                   help="phrases the server's beam search should favour, one a line ('Queequeg :2.5': its own bonus "
                        "per token; '#' lines are comments), sent in the config message")
    return p


def _fmt(ps: Dict[str, float]) -> str:
    return " ".join(f"{k} {v * 1000:.0f} ms" for k, v in ps.items()) or "-"


def main(argv=None) -> int:
    args = get_parser().parse_args(argv)
    items = []
    try:
        paths = wav_files(args.inputs)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for path in paths:
        try:
            samples, rate = read_wav(str(path))
        except (ValueError, OSError) as e:
            print(f"skipping {path}: {e}", file=sys.stderr)
            continue
        items.append((path.stem, samples, rate))
    if not items:
        print("no audio to send", file=sys.stderr)
        return 1
    hotwords = None
    if args.hotwords is not None:
        lines = args.hotwords.read_text(encoding="utf-8").splitlines()
        hotwords = [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]

    def show(name: str, m: dict) -> None:
        if not args.quiet:
            texts = "  ".join(f"{k}: {m[k]}" for k in RUNTIME_ORDER if k in m)
            print(f"{name} [{m['segment']}] {m['start']:.2f}-{m['end']:.2f}  {texts}", flush=True)

    t0 = time.perf_counter()
    results = asyncio.run(stream_many(args.url, items, args.connections, args.speed, args.piece_seconds, show,
                                      hotwords))
    wall = time.perf_counter() - t0
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            for r in results:
                for m in r.finals:
                    f.write(json.dumps({"id": r.name, **m}, ensure_ascii=False) + "\n")
    failed = [r for r in results if not r.ok]
    for r in failed:
        if r.cut_short:
            why = f"cut short by the server after {r.seconds_sent:.1f} of {r.audio_seconds:.1f} s"
        else:
            why = f"failed: {r.errors or 'no done message'}"
        print(f"{r.name}: {why} (close code {r.close_code})", file=sys.stderr)
    audio = sum(r.audio_seconds for r in results)
    print(f"{len(results) - len(failed)}/{len(results)} streams done, {audio:.1f} s of audio in {wall:.1f} s "
          f"over {args.connections} connection(s)")
    print(f"result latency: {_fmt(percentiles([x for r in results for x in r.latencies]))}")
    print(f"end latency: {_fmt(percentiles([r.end_latency for r in results if r.end_latency is not None]))}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
