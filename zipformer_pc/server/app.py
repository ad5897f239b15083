"""The aiohttp application of :mod:`zipformer_pc.server`: connections, the decoding worker, limits.

Threading: the event loop owns every :class:`Session`'s queued audio and
flags; the single worker thread (:class:`Decoder`) owns the streams.  The loop
hands a step's work (audio taken out of the sessions) to the worker and gets
back the messages to send, so no state is shared between the two while a
step runs.  A session dropped during a step is simply not answered.
"""

import asyncio
import gc
import json
import logging
import time
import weakref
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
from aiohttp import WSCloseCode, WSMsgType, web

from zipformer_pc.runtime import subtitles
from zipformer_pc.runtime.recognizer import StreamingRecognizer
from zipformer_pc.runtime.stream import Segment, Stream
from zipformer_pc.runtime.timestamps import TimedWord

log = logging.getLogger("zipformer_pc.server")

STATIC_DIR = Path(__file__).with_name("static")
MIN_RATE, MAX_RATE = 8000, 192000
MAX_ABS_SAMPLE = 10.0  # float32 audio beyond this is not [-1, 1] audio (int16 sent as is, garbage)

# close codes (RFC 6455)
CLOSE_NORMAL = WSCloseCode.OK  # 1000
CLOSE_GOING_AWAY = WSCloseCode.GOING_AWAY  # 1001
CLOSE_UNSUPPORTED = WSCloseCode.UNSUPPORTED_DATA  # 1003
CLOSE_POLICY = WSCloseCode.POLICY_VIOLATION  # 1008
CLOSE_TOO_BIG = WSCloseCode.MESSAGE_TOO_BIG  # 1009
CLOSE_TRY_LATER = WSCloseCode.TRY_AGAIN_LATER  # 1013


@dataclass
class ServerConfig:
    max_connections: int = 64
    max_message_bytes: int = 1 << 20  # 16 s of 16 kHz float32 audio
    idle_timeout: float = 30.0  # seconds without any message from the client
    max_batch: int = 32  # streams per encoder call
    max_pending_seconds: float = 30.0  # undecoded audio per connection before its reads pause
    shutdown_timeout: float = 10.0  # seconds to finish open streams on SIGINT/SIGTERM
    max_hotwords: int = 100  # phrases in a config message's hotword list
    max_hotword_chars: int = 100  # characters of one phrase (its ":bonus" included)

    def __post_init__(self) -> None:
        for name in ("max_connections", "max_message_bytes", "max_batch", "max_hotwords", "max_hotword_chars"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("idle_timeout", "max_pending_seconds", "shutdown_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")


class ProtocolError(Exception):
    """Bad input from a client: reported to it with ``code``, then the connection closes with ``close_code``."""

    def __init__(self, code: str, message: str, close_code: int = CLOSE_POLICY) -> None:
        super().__init__(message)
        self.code, self.message, self.close_code = code, message, close_code


_CLOSE = object()  # outbox marker: close the connection (followed by nothing)


@dataclass
class Session:
    """One connection: its outbox and what the loop queues for the worker."""

    id: int
    ws: web.WebSocketResponse
    sample_rate: int
    stream: Optional[Stream] = None  # created and used by the worker
    pending: List[np.ndarray] = field(default_factory=list)
    pending_samples: int = 0
    got_audio: bool = False
    end_requested: bool = False
    end_sent_to_worker: bool = False
    close_code: int = CLOSE_NORMAL  # after ``done``
    dropped: bool = False
    reported_segments: int = 0  # worker side: finals already sent
    last_final: Optional[dict] = None  # worker side: the newest segment's final as sent (without "time")
    chunks_reported: int = 0  # worker side: chunks covered by the last partial
    outbox: "asyncio.Queue" = field(default_factory=asyncio.Queue)
    drained: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)  # ``done`` queued (or dropped)

    def has_work(self) -> bool:
        return bool(self.pending) or (self.end_requested and not self.end_sent_to_worker)

    def send(self, msg) -> None:
        self.outbox.put_nowait(msg)


def _without_time(msg: dict) -> dict:
    return {k: v for k, v in msg.items() if k != "time"}


class Decoder:
    """The one worker thread running the shared recognizer, and the loop task feeding it."""

    def __init__(self, rec: StreamingRecognizer, cfg: ServerConfig) -> None:
        self.rec, self.cfg = rec, cfg
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="zpc-decoder")
        self.sessions: Dict[int, Session] = {}
        self.live_streams: "weakref.WeakSet[Stream]" = weakref.WeakSet()
        self.wake = asyncio.Event()
        self.task: Optional[asyncio.Task] = None
        self.counters: Counter = Counter()
        self.decode_seconds = 0.0
        self.audio_samples = 0  # at the model's rate

    # -- loop side ----------------------------------------------------------

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(), name="zpc-decoder-loop")

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass
        self.executor.shutdown(wait=True)

    async def open(self, sess: Session) -> None:
        loop = asyncio.get_running_loop()
        sess.stream = await loop.run_in_executor(self.executor, self._new_stream)
        self.sessions[sess.id] = sess

    def _new_stream(self) -> Stream:
        s = self.rec.create_stream()
        self.live_streams.add(s)
        return s

    def feed(self, sess: Session, samples: np.ndarray) -> None:
        sess.pending.append(samples)
        sess.pending_samples += samples.size
        sess.drained.clear()
        self.wake.set()

    def end(self, sess: Session) -> None:
        sess.end_requested = True
        self.wake.set()

    def drop(self, sess: Session) -> None:
        """Forget a session (error, disconnect): its stream is discarded unfinished."""
        if self.sessions.pop(sess.id, None) is not None:
            sess.dropped = True
            sess.stream = None
            sess.pending.clear()
            sess.drained.set()
            sess.done.set()

    async def _run(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            await self._one_step()  # its locals (and the streams they hold) die with it

    async def _one_step(self) -> None:
        work: List[Tuple[Session, Stream, List[np.ndarray], bool]] = []
        for sess in list(self.sessions.values()):
            if sess.has_work() and sess.stream is not None:
                end = sess.end_requested and not sess.end_sent_to_worker
                work.append((sess, sess.stream, sess.pending, end))
                sess.pending, sess.pending_samples = [], 0
                sess.end_sent_to_worker |= end
                sess.drained.set()
        if not work:
            return
        try:
            results = await asyncio.get_running_loop().run_in_executor(self.executor, self._step, work)
        except Exception:  # a bug, not bad input (that is checked on arrival): close the step's connections
            log.exception("decoding step failed; closing its %d connection(s)", len(work))
            self.counters["internal_errors"] += 1
            for sess, _, _, _ in work:
                if not sess.dropped:
                    sess.send({"type": "error", "code": "internal_error", "message": "decoding failed",
                               "fatal": True})
                    sess.send((_CLOSE, WSCloseCode.INTERNAL_ERROR))
                    self.drop(sess)
            return
        for sess, msgs in results:
            if sess.dropped:
                continue
            for m in msgs:
                sess.send(m)
            if msgs and msgs[-1]["type"] == "done":
                self.sessions.pop(sess.id, None)
                sess.stream = None
                sess.send((_CLOSE, sess.close_code))
                sess.done.set()

    # -- worker side -----------------------------------------------------------

    def _step(self, work) -> List[Tuple[Session, List[dict]]]:
        t0 = time.perf_counter()
        rec = self.rec
        chunks_before = [s.num_chunks for _, s, _, _ in work]
        for sess, s, pieces, end in work:
            for x in pieces:
                before = s.num_samples
                s.accept_waveform(sess.sample_rate, x)
                self.audio_samples += s.num_samples - before
            if end:
                before = s.num_samples
                s.input_finished()
                self.audio_samples += s.num_samples - before  # the resampler's tail
        self.counters["chunks"] += rec.decode_streams([s for _, s, _, _ in work], self.cfg.max_batch)
        self.counters["steps"] += 1
        out = []
        for (sess, s, _, end), before in zip(work, chunks_before):
            msgs = []
            segments = rec.finish(s) if end else s.segments
            now = s.frames_done * rec.frame_seconds
            if sess.reported_segments:
                # a mark the model emitted after the endpoint, before the next segment's first word,
                # is moved back into the segment it ends (the offline runtime's result): send that
                # segment's final again, amended
                amended = self._segment_message("final", segments[sess.reported_segments - 1], now)
                if _without_time(amended) != sess.last_final:
                    msgs.append(amended)
                    sess.last_final = _without_time(amended)
            for seg in segments[sess.reported_segments:]:
                msgs.append(self._segment_message("final", seg, now))
                sess.last_final = _without_time(msgs[-1])
            sess.reported_segments = len(segments)
            if end:
                msgs.append({"type": "done", "segments": len(segments), "audio_seconds": round(s.duration, 3)})
            elif s.num_chunks != before:
                msgs.append(self._segment_message("partial", rec.current_segment(s), now))
            out.append((sess, msgs))
        self.decode_seconds += time.perf_counter() - t0
        return out

    @staticmethod
    def _segment_message(kind: str, seg: Segment, now: float) -> dict:
        msg = {"type": kind, "segment": seg.id}
        msg.update(seg.text)
        msg.update({"start": round(seg.start, 3), "end": round(seg.end, 3), "time": round(now, 3),
                    "words": {m: [w.as_dict() for w in ws] for m, ws in seg.words.items()}})
        return msg


class Server:
    """The routes and the per-connection protocol."""

    def __init__(self, rec: StreamingRecognizer, cfg: ServerConfig) -> None:
        self.rec, self.cfg = rec, cfg
        self.decoder: Optional[Decoder] = None
        self.connections: Dict[int, Session] = {}
        self.next_id = 0
        self.closing = False
        self.counters: Counter = Counter()
        self.errors: Counter = Counter()
        self.started = time.time()

    # -- lifecycle -------------------------------------------------------------

    async def on_startup(self, app: web.Application) -> None:
        self.decoder = Decoder(self.rec, self.cfg)
        self.decoder.start()

    async def on_shutdown(self, app: web.Application) -> None:
        """Finish every open stream (their last finals and ``done``), then close with 1001."""
        self.closing = True
        open_sessions = list(self.connections.values())
        if open_sessions:
            log.info("shutting down: finishing %d open stream(s)", len(open_sessions))
        for sess in open_sessions:
            sess.close_code = CLOSE_GOING_AWAY
            if not sess.end_requested and sess.stream is not None:
                self.decoder.end(sess)
        waits = [asyncio.ensure_future(sess.done.wait()) for sess in open_sessions]
        if waits:
            _, late = await asyncio.wait(waits, timeout=self.cfg.shutdown_timeout)
            for w in late:
                w.cancel()
        for sess in open_sessions:
            if not sess.done.is_set():
                log.warning("connection %d: not finished within %.1f s of shutdown, closed", sess.id,
                            self.cfg.shutdown_timeout)
                self.decoder.drop(sess)
                sess.send({"type": "error", "code": "shutting_down", "message": "the server is shutting down",
                           "fatal": True})
                sess.send((_CLOSE, CLOSE_GOING_AWAY))

    async def on_cleanup(self, app: web.Application) -> None:
        if self.decoder is not None:
            await self.decoder.stop()

    # -- routes ------------------------------------------------------------------

    async def index(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC_DIR / "index.html")

    async def stats(self, request: web.Request) -> web.Response:
        """Counters as JSON; ``?gc=1`` collects garbage first (for leak checks)."""
        if request.query.get("gc"):
            gc.collect()
        d = self.decoder
        audio_seconds = d.audio_samples / self.rec.sample_rate if d else 0.0
        body = {
            "connections": len(self.connections),
            "streams": len(d.sessions) if d else 0,
            "live_stream_objects": len(d.live_streams) if d else 0,
            "max_connections": self.cfg.max_connections,
            "accepted": self.counters["accepted"],
            "rejected": self.counters["rejected"],
            "completed": self.counters["completed"],
            "abandoned": self.counters["abandoned"],
            "skipped_empty_messages": self.counters["empty_messages"],
            "errors": dict(self.errors),
            "audio_seconds": round(audio_seconds, 3),
            "decode_seconds": round(d.decode_seconds, 3) if d else 0.0,
            "chunks": d.counters["chunks"] if d else 0,
            "steps": d.counters["steps"] if d else 0,
            "internal_errors": d.counters["internal_errors"] if d else 0,
            "batch_encoder": self.rec.batch_encoder,
            "uptime": round(time.time() - self.started, 1),
        }
        return web.json_response(body)

    async def websocket(self, request: web.Request) -> web.WebSocketResponse:
        # aiohttp's own limit is a backstop: up to it, an oversized message gets our clear error
        ws = web.WebSocketResponse(max_msg_size=2 * self.cfg.max_message_bytes + 1024, heartbeat=None)
        await ws.prepare(request)
        if self.closing or len(self.connections) >= self.cfg.max_connections:
            code, why = (("shutting_down", "the server is shutting down") if self.closing else
                         ("too_many_connections", f"the server is at its limit of {self.cfg.max_connections} "
                                                  "connections; try again later"))
            self.counters["rejected"] += 1
            self.errors[code] += 1
            log.warning("rejected a connection from %s: %s", request.remote, code)
            await self._send_quietly(ws, {"type": "error", "code": code, "message": why, "fatal": True})
            await ws.close(code=CLOSE_GOING_AWAY if self.closing else CLOSE_TRY_LATER, message=code.encode())
            return ws
        self.next_id += 1
        sess = Session(self.next_id, ws, self.rec.sample_rate)
        self.connections[sess.id] = sess
        self.counters["accepted"] += 1
        sender = asyncio.ensure_future(self._sender(sess))
        try:
            await self.decoder.open(sess)
            sess.send({"type": "ready", "sample_rate": self.rec.sample_rate,
                       "modes": list(self.rec.transcript([])), "max_message_bytes": self.cfg.max_message_bytes,
                       "idle_timeout": self.cfg.idle_timeout, "hotwords": self._hotword_limits()})
            outcome = await self._receive(sess)
            if outcome == "ended":
                await sess.done.wait()
                if not sess.dropped:
                    self.counters["completed"] += 1
            elif outcome == "disconnected":
                self.counters["abandoned"] += 1
                log.info("connection %d: client went away mid-stream; stream discarded", sess.id)
        except ProtocolError as e:
            self.errors[e.code] += 1
            log.warning("connection %d: %s: %s", sess.id, e.code, e.message)
            sess.send({"type": "error", "code": e.code, "message": e.message, "fatal": True})
            sess.send((_CLOSE, e.close_code))
        finally:
            self.decoder.drop(sess)
            sess.send((_CLOSE, CLOSE_GOING_AWAY))  # a no-op when a close is queued before it
            try:
                await asyncio.wait_for(sender, timeout=15)  # cancels the sender on timeout
            except asyncio.TimeoutError:
                log.warning("connection %d: could not close within 15 s", sess.id)
            self.connections.pop(sess.id, None)
        return ws

    # -- per connection ------------------------------------------------------------

    async def _receive(self, sess: Session) -> str:
        """Read the client's messages until it ends the stream ("ended") or goes away ("disconnected")."""
        ws = sess.ws
        limit = self.cfg.max_pending_seconds
        while True:
            if sess.pending_samples > limit * sess.sample_rate:
                await sess.drained.wait()  # the worker is behind: stop reading until it catches up
            if sess.end_requested:  # the shutdown asked for the end
                return "ended"
            try:
                msg = await ws.receive(timeout=self.cfg.idle_timeout)
            except asyncio.TimeoutError:
                raise ProtocolError("idle_timeout", f"nothing received for {self.cfg.idle_timeout:g} s",
                                    CLOSE_GOING_AWAY) from None
            if msg.type == WSMsgType.BINARY:
                self._audio(sess, msg.data)
            elif msg.type == WSMsgType.TEXT:
                if self._text(sess, msg.data):
                    return "ended"
            elif msg.type == WSMsgType.ERROR and isinstance(msg.data, Exception) and \
                    getattr(msg.data, "code", None) == CLOSE_TOO_BIG:
                self.errors["message_too_big"] += 1  # aiohttp's backstop closed it already
                log.warning("connection %d: message_too_big: %s", sess.id, msg.data)
                return "closed"
            else:  # CLOSE, CLOSING, CLOSED, ERROR
                return "ended" if sess.end_requested else "disconnected"

    def _audio(self, sess: Session, data: bytes) -> None:
        if sess.end_requested:
            raise ProtocolError("bad_message", "audio after the end of the stream")
        if len(data) > self.cfg.max_message_bytes:
            raise ProtocolError("message_too_big", f"{len(data)} bytes in one message, more than the limit of "
                                f"{self.cfg.max_message_bytes}; send smaller pieces", CLOSE_TOO_BIG)
        if not data:
            self.counters["empty_messages"] += 1
            log.info("connection %d: empty audio message skipped", sess.id)
            sess.send({"type": "error", "code": "empty_message", "message": "an empty audio message was skipped",
                       "fatal": False})
            return
        if len(data) % 4:
            raise ProtocolError("bad_audio", f"an audio message of {len(data)} bytes: expected float32 samples "
                                "(4 bytes each, little-endian)", CLOSE_UNSUPPORTED)
        x = np.frombuffer(data, dtype="<f4")
        if not np.isfinite(x).all():
            raise ProtocolError("bad_audio", "audio samples must be finite float32 numbers", CLOSE_UNSUPPORTED)
        peak = float(np.abs(x).max())
        if peak > MAX_ABS_SAMPLE:
            raise ProtocolError("bad_audio", f"audio samples must be float32 in [-1, 1], got |x| up to {peak:.3g} "
                                "(16-bit PCM must be converted to float first)", CLOSE_UNSUPPORTED)
        sess.got_audio = True
        self.decoder.feed(sess, x.astype(np.float32))

    def _text(self, sess: Session, data: str) -> bool:
        """A control message; True when it ends the stream."""
        if len(data) > self.cfg.max_message_bytes:
            raise ProtocolError("message_too_big", f"a text message of {len(data)} characters, more than the limit "
                                f"of {self.cfg.max_message_bytes}", CLOSE_TOO_BIG)
        if data.strip() == "done":
            self.decoder.end(sess)
            return True
        try:
            msg = json.loads(data)
        except ValueError as e:
            raise ProtocolError("bad_json", f"a text message that is not JSON ({e}); send "
                                '{"type": "config", ...}, {"type": "end"} or "done"') from None
        if not isinstance(msg, dict) or msg.get("type") not in ("config", "end"):
            raise ProtocolError("bad_message", 'expected a JSON object with "type" "config" or "end"')
        if msg["type"] == "end":
            self.decoder.end(sess)
            return True
        if sess.got_audio:
            raise ProtocolError("config_after_audio", "the config message must come before any audio")
        unknown = set(msg) - {"type", "sample_rate", "hotwords"}
        if unknown:
            raise ProtocolError("bad_config", f"unknown config key(s): {', '.join(sorted(unknown))}")
        if "hotwords" in msg:
            self._hotwords(sess, msg["hotwords"])
        rate = msg.get("sample_rate", sess.sample_rate)
        if isinstance(rate, float) and rate.is_integer():
            rate = int(rate)
        if not isinstance(rate, int) or isinstance(rate, bool) or not MIN_RATE <= rate <= MAX_RATE:
            raise ProtocolError("bad_config", f"sample_rate must be an integer from {MIN_RATE} to {MAX_RATE}, "
                                f"got {rate!r}")
        sess.sample_rate = rate
        return False

    def _hotword_limits(self) -> Optional[dict]:
        """What the ready message says of hotwords: their limits, or None when the search cannot use them."""
        if self.rec.decoding_method != "modified_beam_search":
            return None
        return {"max_phrases": self.cfg.max_hotwords, "max_chars": self.cfg.max_hotword_chars}

    def _hotwords(self, sess: Session, items) -> None:
        """The config's hotword list: checked, then the stream's own (in place of the server's)."""
        cfg = self.cfg
        if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
            raise ProtocolError("bad_config", 'hotwords must be a list of strings (phrases, e.g. ["Queequeg", '
                                '"Captain Ahab :2.5"])')
        if items and self._hotword_limits() is None:
            raise ProtocolError("bad_config", f"this server decodes with {self.rec.decoding_method}, which cannot use "
                                "hotwords (they need modified_beam_search: start the server with --decoding-method "
                                "modified_beam_search)")
        if len(items) > cfg.max_hotwords:
            raise ProtocolError("bad_config", f"{len(items)} hotwords, more than the limit of {cfg.max_hotwords}")
        for x in items:
            if len(x) > cfg.max_hotword_chars:
                raise ProtocolError("bad_config", f"a hotword of {len(x)} characters ({x[:40]!r}...), more than "
                                    f"the limit of {cfg.max_hotword_chars}")
        try:
            self.rec.set_hotwords(sess.stream, items)
        except ValueError as e:
            raise ProtocolError("bad_config", f"bad hotwords: {e}") from None
        if items:
            log.info("connection %d: %d hotword(s)", sess.id, len(items))

    async def subtitles(self, request: web.Request) -> web.Response:
        """``POST /subtitles?format=srt|vtt``: the subtitles of a stream's finals (the JSON body
        ``{"finals": [final messages], "duration": seconds}``), with the runtime's cue rules
        (:mod:`zipformer_pc.runtime.subtitles`); 400 with ``{"error": ...}`` for a bad request."""
        fmt = request.query.get("format", "srt")
        try:
            if fmt not in subtitles.SUBTITLE_FORMATS:
                raise ValueError(f"format must be one of {', '.join(subtitles.SUBTITLE_FORMATS)}, got {fmt!r}")
            body = await request.json()
            segments, duration = finals_to_segments(body)
            text = subtitles.render(fmt, "", duration, segments, {})
        except web.HTTPException:
            raise
        except (ValueError, TypeError, KeyError) as e:
            msg = f"bad request: {e}" if not isinstance(e, KeyError) else f"bad request: a final without {e}"
            return web.json_response({"error": msg}, status=400)
        content_type = "application/x-subrip" if fmt == "srt" else "text/vtt"
        return web.Response(text=text, content_type=content_type, charset="utf-8")

    async def _sender(self, sess: Session) -> None:
        """Send the session's outbox in order; a close marker closes the connection."""
        ws = sess.ws
        while True:
            item = await sess.outbox.get()
            if isinstance(item, tuple) and item[0] is _CLOSE:
                if not ws.closed:
                    try:
                        await ws.close(code=item[1])
                    except (ConnectionError, RuntimeError):
                        pass
                return
            if not await self._send_quietly(ws, item):
                # the peer is gone: keep draining until the close marker so nothing waits on us
                continue

    @staticmethod
    async def _send_quietly(ws: web.WebSocketResponse, msg: dict) -> bool:
        if ws.closed:
            return False
        try:
            await ws.send_str(json.dumps(msg, ensure_ascii=False))
            return True
        except (ConnectionError, RuntimeError):
            return False


def finals_to_segments(body) -> Tuple[List[Segment], float]:
    """The segments of the final messages in ``{"finals": [...], "duration": s}`` (the page's), and the
    duration (default: the last final's end); ``ValueError`` for anything else."""
    if not isinstance(body, dict) or not isinstance(body.get("finals"), list):
        raise ValueError('expected a JSON object {"finals": [final messages], "duration": seconds}')
    segments = []
    for f in body["finals"]:
        if not isinstance(f, dict) or not isinstance(f.get("words"), dict):
            raise ValueError("each final must be a final message with its words")
        words = {}
        for mode, ws in f["words"].items():
            if not isinstance(ws, list):
                raise ValueError(f"the words of mode {mode!r} must be a list")
            words[mode] = [TimedWord(str(w["word"]), float(w["start"]), float(w["end"])) for w in ws]
        text = {m: str(f.get(m, "")) for m in words}
        segments.append(Segment(int(f.get("segment", len(segments))), float(f["start"]), float(f["end"]), text,
                                words))
    duration = body.get("duration")
    duration = float(duration) if duration is not None else max((s.end for s in segments), default=0.0)
    if not np.isfinite(duration) or duration < 0:
        raise ValueError(f"duration must be a number of seconds, got {body.get('duration')!r}")
    return segments, duration


def create_app(rec: StreamingRecognizer, cfg: Optional[ServerConfig] = None) -> web.Application:
    """The aiohttp application serving ``rec`` (run it with ``aiohttp.web.run_app``)."""
    cfg = cfg or ServerConfig()
    server = Server(rec, cfg)
    app = web.Application(client_max_size=cfg.max_message_bytes)  # the bodies of POST /subtitles
    app["server"] = server
    app.router.add_get("/", server.index)
    app.router.add_get("/ws", server.websocket)
    app.router.add_get("/stats", server.stats)
    app.router.add_post("/subtitles", server.subtitles)
    app.router.add_static("/static/", STATIC_DIR)
    app.on_startup.append(server.on_startup)
    app.on_shutdown.append(server.on_shutdown)
    app.on_cleanup.append(server.on_cleanup)
    return app
