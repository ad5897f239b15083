"""The WebSocket server (zipformer_pc.server) on a tiny exported model, run as a real process:
results equal the offline runtime's, bad input gets a clear error and a clean close while
other streams go on, disconnects and limits leak nothing, SIGTERM finishes open streams."""

import asyncio
import base64
import json
import os
import signal
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from conftest import RULE2, ServerProcess, script_module, speech_like

aiohttp = pytest.importorskip("aiohttp", reason="the server needs aiohttp (bash tools/setup_env.sh installs it)")

from zipformer_pc.runtime import StreamingRecognizer  # noqa: E402
from zipformer_pc.runtime.endpoint import EndpointConfig  # noqa: E402
from zipformer_pc.server.app import Decoder  # noqa: E402
from zipformer_pc.server.client import stream_audio  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MAX_CONNECTIONS, MAX_BYTES, IDLE = 4, 64000, 3.0


@pytest.fixture(scope="module")
def server(tiny_onnx_model):
    # blank penalty 0: the fixture model, trained for seconds, emits on nearly every frame with the
    # default 1.0, and no endpoint would fire (on both sides of the comparison)
    srv = ServerProcess(tiny_onnx_model, "--max-connections", str(MAX_CONNECTIONS), "--max-message-bytes",
                        str(MAX_BYTES), "--idle-timeout", str(IDLE), "--blank-penalty", "0")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def offline(tiny_onnx_model):
    """The offline runtime with the server's endpoint rules: finals as the server words them."""
    rec = StreamingRecognizer.from_dir(tiny_onnx_model, blank_penalty=0.0, endpoint=EndpointConfig.from_options(
        rule2_min_trailing_silence=RULE2))

    def finals(samples: np.ndarray, rate: int):
        return [_comparable(Decoder._segment_message("final", seg, 0.0))
                for seg in rec.recognize_segments(samples, rate)]

    return finals


def _comparable(msg: dict) -> dict:
    return {k: v for k, v in msg.items() if k not in ("type", "time")}


def _utterance(i: int, rate: int = 16000) -> np.ndarray:
    """Speech, a pause long enough for an endpoint, more speech."""
    a, b = speech_like(1.5 + 0.3 * i, seed=i, rate=rate), speech_like(1.2, seed=50 + i, rate=rate)
    return np.concatenate([a, np.zeros(rate, np.float32), b])


async def _stream(url, samples, rate, speed=0.0, piece=0.1):
    async with aiohttp.ClientSession() as http:
        return await stream_audio(http, url, samples, rate, speed=speed, piece_seconds=piece)


async def _exchange(url, steps, read_ready=True):
    """Send ``steps`` (bytes: binary message, str: text message), then read until the server closes."""
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(url, max_msg_size=0) as ws:
            msgs = []
            if read_ready:
                msgs.append(await ws.receive_json(timeout=30))
            for step in steps:
                if isinstance(step, bytes):
                    await ws.send_bytes(step)
                else:
                    await ws.send_str(step)
            async for m in ws:
                if m.type == aiohttp.WSMsgType.TEXT:
                    msgs.append(json.loads(m.data))
            return msgs, ws.close_code


# ---------------------------------------------------------------------------


def test_concurrent_streams_at_any_rate_equal_the_offline_runtime(server, offline):
    rates = [16000, 44100, 8000, 22050]
    audio = [_utterance(i, rate) for i, rate in enumerate(rates)]

    async def main():
        return await asyncio.gather(*(_stream(server.url, x, r, speed=4.0, piece=0.05 + 0.05 * i)
                                      for i, (x, r) in enumerate(zip(audio, rates))))

    results = asyncio.run(main())
    for r, x, rate in zip(results, audio, rates):
        assert r.ok and r.close_code == 1000, (r.errors, r.close_code)
        expected = offline(x, rate)
        assert expected and expected[0]["P"], "the model emits nothing: the comparison would prove little"
        assert [_comparable(f) for f in r.finals] == expected
        assert r.partials > 0 and r.done["segments"] == len(expected)
        assert r.done["audio_seconds"] == pytest.approx(len(x) / rate, abs=0.01)
    assert any(len(r.finals) > 1 for r in results), "no endpoint fired: segments were not exercised"
    for f in results[0].finals:
        assert set(f) >= {"type", "segment", "P", "N", "start", "end", "time", "words"}
        assert set(f["words"]) == {"P", "N"} and all({"word", "start", "end"} <= set(w) for w in f["words"]["P"])
    s = server.wait_idle()
    assert s["completed"] >= 4 and s["internal_errors"] == 0 and s["batch_encoder"] is True


BAD_INPUTS = {
    # name: (messages after ready, error code, close code)
    "odd_length_audio": ([b"\x00" * 5], "bad_audio", 1003),
    "int16_audio": ([(speech_like(0.5, seed=3) * 32767).astype("<i2").tobytes()], "bad_audio", 1003),
    "nan_audio": ([np.array([0.1, np.nan, 0.2, 0.0], "<f4").tobytes()], "bad_audio", 1003),
    "malformed_json": (["{oops"], "bad_json", 1008),
    "json_not_an_object": (["[1, 2]"], "bad_message", 1008),
    "unknown_message_type": (['{"type": "start"}'], "bad_message", 1008),
    "sample_rate_too_low": (['{"type": "config", "sample_rate": 1234}'], "bad_config", 1008),
    "sample_rate_not_a_number": (['{"type": "config", "sample_rate": "16k"}'], "bad_config", 1008),
    "unknown_config_key": (['{"type": "config", "sample_rate": 16000, "format": "s16le"}'], "bad_config", 1008),
    "hotwords_on_a_greedy_server": (['{"type": "config", "hotwords": ["w6"]}'], "bad_config", 1008),
    "config_after_audio": ([np.zeros(160, "<f4").tobytes(), '{"type": "config", "sample_rate": 8000}'],
                           "config_after_audio", 1008),
    "oversized_message": ([b"\x00" * (MAX_BYTES + 4)], "message_too_big", 1009),
    "oversized_text": (["{" + " " * MAX_BYTES + "}"], "message_too_big", 1009),
}


def test_bad_input_gets_a_clear_error_while_other_streams_go_on(server, offline):
    before = server.wait_idle()
    good = [_utterance(7), _utterance(8, 44100)]

    async def main():
        goods = [_stream(server.url, good[0], 16000, speed=3.0), _stream(server.url, good[1], 44100, speed=3.0)]
        bads = [_exchange(server.url, steps) for steps, _, _ in BAD_INPUTS.values()]
        # one bad connection at a time next to the 2 good ones: 3 of MAX_CONNECTIONS, with room
        # for one the server has not yet counted as gone
        good_task = asyncio.gather(*goods)
        out = [await bad for bad in bads]
        return await good_task, out

    good_results, bad_results = asyncio.run(main())
    for (name, (_, code, close)), (msgs, close_code) in zip(BAD_INPUTS.items(), bad_results):
        assert msgs[0]["type"] == "ready", name
        errors = [m for m in msgs if m["type"] == "error"]
        assert len(errors) == 1 and errors[0]["code"] == code and errors[0]["fatal"] is True, (name, msgs)
        assert errors[0]["message"], name
        assert close_code == close, (name, close_code)
    for r, x, rate in zip(good_results, good, (16000, 44100)):
        assert r.ok, r.errors
        assert [_comparable(f) for f in r.finals] == offline(x, rate)
    after = server.wait_idle()
    for _, code, _ in BAD_INPUTS.values():
        assert after["errors"].get(code, 0) > before["errors"].get(code, 0), code
    assert after["internal_errors"] == 0


def test_a_message_beyond_the_hard_limit_is_closed_by_aiohttp(server):
    msgs, close_code = asyncio.run(_exchange(server.url, [b"\x00" * (2 * MAX_BYTES + 4096)]))
    assert msgs[0]["type"] == "ready" and close_code == 1009
    server.wait_idle()


def test_an_empty_audio_message_is_skipped_and_counted(server, offline):
    before = server.wait_idle()
    x = _utterance(2)
    pieces = [x[k : k + 4000].astype("<f4").tobytes() for k in range(0, len(x), 4000)]
    steps = pieces[:2] + [b""] + pieces[2:] + ["done"]
    msgs, close_code = asyncio.run(_exchange(server.url, steps))
    assert close_code == 1000
    assert [m["code"] for m in msgs if m["type"] == "error"] == ["empty_message"]
    assert [m for m in msgs if m["type"] == "error"][0]["fatal"] is False
    assert [_comparable(m) for m in msgs if m["type"] == "final"] == offline(x, 16000)
    assert msgs[-1]["type"] == "done"
    after = server.wait_idle()
    assert after["skipped_empty_messages"] == before["skipped_empty_messages"] + 1


def _raw_connect(port: int) -> socket.socket:
    """A WebSocket handshake on a plain socket (to vanish without a close frame)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(4096)
    assert head.startswith(b"HTTP/1.1 101"), head
    return s


def _raw_frame(payload: bytes, opcode: int = 2) -> bytes:
    n = len(payload)
    head = bytes([0x80 | opcode])
    head += bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + n.to_bytes(2, "big")
    mask = os.urandom(4)
    body = (np.frombuffer(payload, np.uint8) ^ np.resize(np.frombuffer(mask, np.uint8), n)).tobytes()
    return head + mask + body


def test_abrupt_disconnects_mid_utterance_leak_nothing(server, offline):
    before = server.wait_idle()
    socks = []
    for i in range(3):
        s = _raw_connect(server.port)
        x = _utterance(i)[: 16000 * (i + 1)].astype("<f4")
        for k in range(0, len(x), 1600):
            s.sendall(_raw_frame(x[k : k + 1600].tobytes()))
        socks.append(s)
    time.sleep(1.0)  # let the server decode some of it
    assert server.stats()["streams"] == 3
    for i, s in enumerate(socks):
        if i == 0:  # a reset rather than a FIN
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()
    after = server.wait_idle()
    assert after["abandoned"] == before["abandoned"] + 3
    # and it still serves
    r = asyncio.run(_stream(server.url, _utterance(5), 16000))
    assert r.ok and [_comparable(f) for f in r.finals] == offline(_utterance(5), 16000)
    server.wait_idle()


def test_too_many_connections_are_refused_clearly(server):
    before = server.wait_idle()

    async def main():
        async with aiohttp.ClientSession() as http:
            held = [await http.ws_connect(server.url) for _ in range(MAX_CONNECTIONS)]
            for ws in held:
                assert (await ws.receive_json(timeout=30))["type"] == "ready"
            extra = await http.ws_connect(server.url)
            refusal = await extra.receive_json(timeout=30)
            await extra.receive()
            refused_code = extra.close_code
            # one leaves: there is room again
            await held[0].send_str("done")
            assert (await held[0].receive_json(timeout=30))["type"] == "done"
            await held[0].receive()
            for _ in range(100):  # the server counts it gone once the close handshake is over
                if (await asyncio.to_thread(server.stats))["connections"] < MAX_CONNECTIONS:
                    break
                await asyncio.sleep(0.1)
            again = await http.ws_connect(server.url)
            ready = await again.receive_json(timeout=30)
            for ws in held[1:] + [again]:
                await ws.close()
            return refusal, refused_code, ready

    refusal, refused_code, ready = asyncio.run(main())
    assert refusal["type"] == "error" and refusal["code"] == "too_many_connections", refusal
    assert str(MAX_CONNECTIONS) in refusal["message"] and refused_code == 1013
    assert ready["type"] == "ready"
    after = server.wait_idle()
    assert after["rejected"] == before["rejected"] + 1


def test_an_idle_connection_is_closed(server):
    t0 = time.time()
    msgs, close_code = asyncio.run(_exchange(server.url, [np.zeros(1600, "<f4").tobytes()]))
    waited = time.time() - t0
    assert [m["type"] for m in msgs][0] == "ready"
    assert msgs[-1]["type"] == "error" and msgs[-1]["code"] == "idle_timeout" and close_code == 1001
    assert IDLE <= waited < IDLE + 10
    server.wait_idle()


def test_the_page_and_its_scripts_are_served(server):
    for path, marker in (("/", b'id="finals-P"'), ("/static/app.js", b"getUserMedia"),
                         ("/static/capture-worklet.js", b"registerProcessor")):
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=10) as r:
            assert r.status == 200 and marker in r.read(), path


@pytest.mark.slow
def test_sigterm_finishes_open_streams_then_exits(tiny_onnx_model, offline):
    srv = ServerProcess(tiny_onnx_model, "--blank-penalty", "0")  # as the offline fixture
    audio = [_utterance(3), _utterance(4, 44100)]
    rates = [16000, 44100]
    try:
        async def client(x, rate, started):
            async with aiohttp.ClientSession() as http:
                async with http.ws_connect(srv.url) as ws:
                    assert (await ws.receive_json(timeout=30))["type"] == "ready"
                    await ws.send_str(json.dumps({"type": "config", "sample_rate": rate}))
                    await ws.send_bytes(x.astype("<f4").tobytes())
                    msgs = []
                    async for m in ws:
                        msg = json.loads(m.data)
                        msgs.append(msg)
                        if msg["type"] == "partial":
                            started.set()
                    return msgs, ws.close_code

        async def main():
            flags = [asyncio.Event(), asyncio.Event()]
            tasks = [asyncio.ensure_future(client(x, r, f)) for x, r, f in zip(audio, rates, flags)]
            for f in flags:
                await asyncio.wait_for(f.wait(), 60)
            srv.proc.send_signal(signal.SIGTERM)  # no end message: the server must finish the streams itself
            return await asyncio.gather(*tasks)

        results = asyncio.run(main())
        assert srv.proc.wait(timeout=60) == 0
    finally:
        srv.stop()
    for (msgs, close_code), x, rate in zip(results, audio, rates):
        assert close_code == 1001 and msgs[-1]["type"] == "done", (close_code, msgs[-1:])
        assert [_comparable(m) for m in msgs if m["type"] == "final"] == offline(x, rate)
    assert "finishing 2 open stream(s)" in srv.output()


@pytest.mark.slow
def test_the_load_benchmark_checks_every_stream(tiny_onnx_model, tmp_path, capsys, monkeypatch):
    server_load = script_module("benchmarks/server_load.py")
    md, js = tmp_path / "out" / "load.md", tmp_path / "out" / "load.json"
    argv = ["--model-dir", str(tiny_onnx_model), "--streams", "1,3", "--seconds", "3", "--speed", "0",
            "--output-md", str(md), "--output-json", str(js)]
    status = server_load.main(argv)
    out = capsys.readouterr().out
    rows = [ln.split() for ln in out.splitlines() if ln.split() and ln.split()[0] in ("1", "3")]
    assert status == 0 and [r[-1] for r in rows] == ["1/1", "3/3"], out
    assert "server log:" not in out  # removed after a clean run

    # the same rows in the JSON and the markdown table, with the settings and what the columns mean
    info = json.loads(js.read_text())
    assert info["command"] == "python benchmarks/server_load.py " + " ".join(argv)
    assert (info["num_threads"], info["seconds"], info["speed"], info["precision"]) == (1, 3.0, 0.0, "fp32")
    assert [(r["streams"], r["identical"], r["leftover"]) for r in info["rows"]] == [(1, 1, None), (3, 3, None)]
    for r, printed in zip(info["rows"], rows):
        assert r["audio_seconds"] == pytest.approx(3 * r["streams"], abs=0.5) and r["agg_rtf"] > 0
        assert 0 < r["result_latency"]["p50"] <= r["result_latency"]["p99"] and r["end_latency"]["p50"] > 0
        assert printed[:4] == [str(r["streams"]), f"{r['audio_seconds']:.1f}", f"{r['wall_seconds']:.1f}",
                               f"{r['agg_rtf']:.3f}"]
    text = md.read_text()
    assert f"encoder with 1 intra-op thread(s)) serving the fp32 model `{tiny_onnx_model}` on " in text
    assert f"{os.cpu_count()} cores" in text and "3 s of speech-like audio" in text
    assert "as fast as the server takes it" in text  # --speed 0
    table = [ln for ln in text.splitlines() if ln.startswith("| ")]
    assert table[0] == ("| streams | audio s | wall s | agg RTF | worker load | result latency ms (p50 / p90 / p99) "
                        "| end latency ms (p50 / p99) | identical |")
    for line, r in zip(table[1:], info["rows"]):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[0] == str(r["streams"]) and cells[3] == f"{r['agg_rtf']:.3f}"
        assert cells[5].split(" / ")[0] == f"{r['result_latency']['p50'] * 1000:.0f}"
        assert cells[-1] == f"{r['streams']}/{r['streams']}"
    assert len(table) == 3 and "worker load: that time over the row's wall time" in text

    # a stream whose finals differ from the offline runtime's: exit status 1, the tables say so
    monkeypatch.setattr(server_load, "offline_finals", lambda rec, x: [])
    assert server_load.main(argv[:3] + ["1", "--seconds", "2", "--speed", "0", "--output-md", str(md),
                                        "--output-json", str(js)]) == 1
    assert [r["identical"] for r in json.loads(js.read_text())["rows"]] == [0]
    assert md.read_text().splitlines()[4].endswith("| 0/1 |")
    # the server's log is kept and named when something went wrong
    log = Path(capsys.readouterr().out.split("server log: ")[1].split()[0])
    assert "serving on" in log.read_text()
    log.unlink()



def test_the_load_benchmark_waits_for_the_streams_to_go_before_calling_them_leftover(monkeypatch):
    """A stream the decoder thread lets go of a moment late is not a leftover; one that stays is."""
    server_load = script_module("benchmarks/server_load.py")
    idle = {"connections": 0, "streams": 0, "live_stream_objects": 0}
    late = [dict(idle, live_stream_objects=1)] * 3 + [idle]
    monkeypatch.setattr(server_load, "_stats", lambda port: late.pop(0))
    assert server_load._stats_after_row(0, timeout=5.0) == idle and not late
    monkeypatch.setattr(server_load, "_stats", lambda port: dict(idle, streams=1))
    after = server_load._stats_after_row(0, timeout=0.3)
    assert after["streams"] == 1 and server_load._leftover(after)

def test_the_documented_server_commands_parse(tmp_path):
    """The server page's commands (docs/server.md, its first block; the README's quick start has the
    same two): every command's options exist (tools/check_args.py)."""
    import re
    import subprocess
    import sys

    page = (ROOT / "docs" / "server.md").read_text(encoding="utf-8")
    block = re.search(r"```bash\n(.*?)```", page, flags=re.S).group(1)
    commands = [ln for ln in block.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert len(commands) == 3 and {c.split()[2] for c in commands[:2]} == {"zipformer_pc.serve",
                                                                           "zipformer_pc.server.client"}
    cmds = tmp_path / "cmds.txt"
    cmds.write_text("\n".join(commands) + "\n")
    r = subprocess.run([sys.executable, "tools/check_args.py", "--commands-file", str(cmds)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_final_is_sent_again_when_a_late_mark_is_attached_to_its_segment():
    """The recognizer moves a mark emitted after an endpoint back into the segment it ends
    (``_reattach_leading_marks``); the server had already sent that segment's final, and the
    mark was lost to the client (the load benchmark's finals differed from the offline runtime's
    on a trained model). Now the amended final is sent again, under the same segment id."""
    from zipformer_pc.runtime.stream import Segment
    from zipformer_pc.server.app import Decoder, ServerConfig, Session

    class Stream:  # what the worker step reads of a stream
        num_samples, num_chunks, frames_done, duration, segments = 0, 0, 0, 0.0, []

        def accept_waveform(self, rate, x):
            self.num_samples += len(x)

    script = [
        lambda s: s.segments.append(Segment(0, 0.0, 1.0, {"P": "Yes", "N": "yes"})),  # the endpoint
        lambda s: (setattr(s.segments[0], "end", 1.2), s.segments[0].text.update(P="Yes.")),  # late "."
        lambda s: None,  # silence
        lambda s: s.segments.append(Segment(1, 1.2, 2.0, {"P": "No", "N": "no"})),
    ]

    class Rec:
        frame_seconds = 0.04

        def decode_streams(self, streams, max_batch):
            for s in streams:
                script[s.num_chunks](s)
                s.num_chunks += 1
                s.frames_done += 16
            return len(streams)

        def current_segment(self, s):
            return Segment(len(s.segments), 0.0, 0.0, {"P": "", "N": ""})

    dec = Decoder(Rec(), ServerConfig())
    try:
        sess = Session(id=0, ws=None, sample_rate=16000, stream=Stream())
        finals = []
        for _ in script:
            for sess_, msgs in dec._step([(sess, sess.stream, [np.zeros(160, np.float32)], False)]):
                finals += [(m["segment"], m["P"], m["end"]) for m in msgs if m["type"] == "final"]
        assert finals == [(0, "Yes", 1.0), (0, "Yes.", 1.2), (1, "No", 2.0)]
    finally:
        dec.executor.shutdown()


def test_hotword_lists_in_the_config_are_checked(tiny_onnx_model):
    """A config's hotwords become the stream's own list (in place of the server's) when they are a
    list of strings within the limits that the model's tokens can write; else a clear bad_config."""
    from zipformer_pc.server.app import ProtocolError, Server, ServerConfig, Session

    rec = StreamingRecognizer.from_dir(tiny_onnx_model, decoding_method="modified_beam_search",
                                       hotwords=["w3"])
    srv = Server(rec, ServerConfig(max_hotwords=2, max_hotword_chars=12))
    assert srv._hotword_limits() == {"max_phrases": 2, "max_chars": 12}

    def config(hotwords):
        sess = Session(1, None, 16000, stream=rec.create_stream())
        srv._text(sess, json.dumps({"type": "config", "sample_rate": 16000, "hotwords": hotwords}))
        return sess.stream.contexts

    got = config(["w6 :4", "w3x5"])
    assert set(got) == {"P", "N"} and got["N"].num_phrases == 2
    assert config([]) == {} and rec.create_stream().contexts["N"].num_phrases == 1  # the server's list
    for bad, why in (("w6", "a list of strings"), ([1, 2], "a list of strings"), (["w6", "w3", "w0"], "limit of 2"),
                     (["w6 w3 w0 w6 w3"], "limit of 12"), (["w6 :x"], "must be a number"),
                     (["W7"], "cannot be written"), (["--"], "no words")):
        with pytest.raises(ProtocolError, match=why) as e:
            config(bad)
        assert e.value.code == "bad_config", bad
    greedy = Server(StreamingRecognizer.from_dir(tiny_onnx_model), ServerConfig())
    assert greedy._hotword_limits() is None
    with pytest.raises(ProtocolError, match="modified_beam_search"):
        greedy._hotwords(Session(1, None, 16000, stream=greedy.rec.create_stream()), ["w6"])


def test_the_subtitles_of_a_streams_finals(server, tiny_onnx_model):
    """POST /subtitles turns the finals a client got into SRT or WebVTT with the runtime's cue rules
    (the page's Save SRT); a bad request gets a 400 that says why."""
    from zipformer_pc.runtime import subtitles

    x = _utterance(1)
    r = asyncio.run(_stream(server.url, x, 16000))
    assert r.ok and r.finals
    rec = StreamingRecognizer.from_dir(tiny_onnx_model, blank_penalty=0.0, endpoint=EndpointConfig.from_options(
        rule2_min_trailing_silence=RULE2))
    segments = rec.recognize_segments(x, 16000)

    def post(body, fmt="srt"):
        req = urllib.request.Request(f"http://127.0.0.1:{server.port}/subtitles?format={fmt}",
                                     data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, resp.headers["Content-Type"], resp.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.headers["Content-Type"], e.read().decode()

    duration = r.done["audio_seconds"]
    status, kind, srt = post({"finals": r.finals, "duration": duration})
    assert status == 200 and kind.startswith("application/x-subrip")
    assert srt == subtitles.render("srt", "", duration, segments, {}) and srt.startswith("1\n00:00:")
    status, kind, vtt = post({"finals": r.finals, "duration": duration}, "vtt")
    assert status == 200 and kind.startswith("text/vtt") and vtt == subtitles.render("vtt", "", duration, segments, {})
    for body, fmt, why in (({"finals": r.finals}, "txt", "format must be one of srt, vtt"),
                           ([1], "srt", "expected a JSON object"),
                           ({"finals": [{"segment": 0}]}, "srt", "with its words"),
                           ({"finals": [{"words": {"P": [{"word": "a"}]}, "start": 0, "end": 1}]}, "srt",
                            "without 'start'"),
                           ({"finals": r.finals, "duration": -1}, "srt", "duration must be")):
        status, kind, text = post(body, fmt)
        assert status == 400 and why in json.loads(text)["error"], (body, text)
