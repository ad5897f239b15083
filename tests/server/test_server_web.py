"""The server's web page end to end in headless Chromium: a wav file is the microphone
(Chromium's fake capture device), the page streams it and shows P and N with each final's
times, saves the transcript as text and as SRT (the server's cue rules), and sends the
hotwords typed in its box.

The fixture model is random, so "the expected words" are what the offline runtime
makes of the very audio the page sent (the page keeps a copy with ``?keep=1``): the
finals shown must equal them exactly.  That the page sent the wav (and not silence or
noise) is checked by finding the loud pieces of what it sent in the wav.  Chromium
loops the file, and the capture may begin anywhere in it; the page stops after
``seconds=`` of audio.
"""

import base64
import os
import shutil
import tempfile
import time

import numpy as np
import pytest
from conftest import RULE2, ServerProcess, speech_like, write_wav

from zipformer_pc.runtime import Resampler, StreamingRecognizer, subtitles
from zipformer_pc.runtime.endpoint import EndpointConfig

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
DRIVER = shutil.which("chromedriver")
SECONDS = 5.0  # of audio the page sends

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="needs chromium and chromium-driver "
                       "(apt-get install chromium chromium-driver; tools/setup_env.sh does it as root)"),
]

SENT_AUDIO_JS = """
const parts = window.zpc.sent;
let n = 0;
for (const p of parts) n += p.length;
const all = new Float32Array(n);
let o = 0;
for (const p of parts) { all.set(p, o); o += p.length; }
const bytes = new Uint8Array(all.buffer);
let s = "";
for (let i = 0; i < bytes.length; i += 8192) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 8192));
return btoa(s);
"""


def _best_match(signal: np.ndarray, template: np.ndarray) -> float:
    """The highest normalized correlation of ``template`` with any stretch of ``signal``."""
    n = len(signal) + len(template)
    size = 1 << (n - 1).bit_length()
    corr = np.fft.irfft(np.fft.rfft(signal, size) * np.conj(np.fft.rfft(template, size)), size)
    corr = corr[: len(signal) - len(template) + 1]
    energy = np.concatenate([[0.0], np.cumsum(signal.astype(np.float64) ** 2)])
    window = np.sqrt(np.maximum(energy[len(template):] - energy[: -len(template)], 1e-12))
    return float((corr / (window * np.linalg.norm(template))).max())


def _share_found(sent: np.ndarray, source: np.ndarray, piece: int = 4000) -> tuple:
    """How many quarter-second pieces of ``sent`` carry sound, and the share of them found almost
    sample for sample (normalized correlation > 0.9) somewhere in ``source`` played twice (the
    fake device loops it).  Pieces of what was sent, not one template of the source: however late
    the page's capture starts in the file, what it sent is in there; and on a loaded machine a
    dropped or repeated buffer only spoils the pieces across that seam (a one-second template of
    the source matched 0.63 in a CI run).  Silence has no loud piece; noise matches none."""
    looped = np.concatenate([source, source])
    starts = [s for s in range(0, len(sent) - piece + 1, piece)
              if np.sqrt(np.mean(sent[s:s + piece] ** 2)) > 0.02]
    found = sum(_best_match(looped, sent[s:s + piece]) > 0.9 for s in starts)
    return len(starts), found / max(len(starts), 1)


@pytest.fixture
def chrome_tmp():
    """A short directory for Chromium's temporary files, removed after the test (Chromium leaves
    its socket directory in TMPDIR when the driver ends it).  Not ``tmp_path``: under pytest-xdist
    that path is long enough to push the socket's path past the 108-byte limit of Unix sockets,
    and Chromium then fails to start."""
    d = tempfile.mkdtemp(prefix="zpc-chr-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _chrome(wav, tmpdir, downloads=None):
    """Headless Chromium whose microphone plays ``wav``; its temporary files go to ``tmpdir``, the
    files the page saves to ``downloads``."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (pip install selenium)")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
                 f"--use-file-for-fake-audio-capture={wav}", "--autoplay-policy=no-user-gesture-required"):
        opts.add_argument(flag)
    if downloads is not None:
        opts.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                               "download.prompt_for_download": False})
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    driver = webdriver.Chrome(service=Service(DRIVER, env=env), options=opts)
    if downloads is not None:
        driver.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    return driver


def _wait_done(driver, seconds=120):
    deadline = time.time() + seconds
    while True:
        status = driver.execute_script("return window.zpc.status")
        if status in ("done", "error") or time.time() > deadline:
            return status
        time.sleep(0.5)


def _shown(driver):
    """Per mode, each final as the page shows it: (its time, its text)."""
    return {m: [(li.find_element("css selector", ".time").text, li.find_element("css selector", ".text").text)
                for li in driver.find_elements("css selector", f"#finals-{m} li")] for m in ("P", "N")}


def _clock(t):
    """The page's m:ss.ss."""
    cs = round(t * 100)
    return f"{cs // 6000}:{cs % 6000 / 100:05.2f}"


def _saved(driver, button, downloads, name):
    """Press a save button; the file it downloads (and what the page says it saved)."""
    path = downloads / name
    if path.exists():
        path.unlink()
    driver.find_element("id", button).click()
    deadline = time.time() + 30
    while not path.exists() and time.time() < deadline:
        time.sleep(0.2)
    saved = driver.execute_script("return window.zpc.saved")
    assert path.exists(), (button, saved, driver.execute_script("return document.getElementById('error').textContent"))
    time.sleep(0.3)  # written at once (a small blob), but let Chromium close it
    return path.read_text(encoding="utf-8"), saved


def test_the_page_streams_the_microphone_shows_p_and_n_with_times_and_saves_them(tiny_onnx_model, tmp_path,
                                                                                   chrome_tmp):
    speech = np.concatenate([speech_like(1.8, seed=11), np.zeros(16000, np.float32), speech_like(1.4, seed=12)])
    wav = tmp_path / "mic.wav"
    # the file loops; its speech fills most of any SECONDS of it
    played = np.concatenate([speech, np.zeros(16000, np.float32)])
    write_wav(wav, played)

    downloads = tmp_path / "downloads"
    downloads.mkdir()
    srv = ServerProcess(tiny_onnx_model)
    driver = None
    try:
        driver = _chrome(wav, chrome_tmp, downloads)
        driver.get(f"http://127.0.0.1:{srv.port}/?autostart=1&keep=1&seconds={SECONDS}")
        _wait_done(driver)
        state = driver.execute_script("return {status: zpc.status, error: zpc.error, rate: zpc.sampleRate, "
                                      "modes: zpc.modes, finals: zpc.finals, sent: zpc.samplesSent, "
                                      "config: zpc.config, seconds: zpc.audioSeconds}")
        assert state["status"] == "done", (state, srv.output()[-3000:])
        sent = np.frombuffer(base64.b64decode(driver.execute_script(SENT_AUDIO_JS)), dtype="<f4")
        shown = _shown(driver)
        visible = {m: driver.find_element("id", f"pane-{m}").is_displayed() for m in ("P", "N")}
        text_file, text_saved = _saved(driver, "save-text", downloads, "transcript.txt")
        srt_file, srt_saved = _saved(driver, "save-srt", downloads, "transcript.srt")
    finally:
        if driver is not None:
            driver.quit()
        srv.stop()

    rate = int(state["rate"])
    assert len(sent) == state["sent"] == round(SECONDS * rate)
    # what was sent is the wav's speech, almost sample for sample
    r = Resampler(rate, 16000)
    at16k = np.concatenate([r.process(sent), r.flush()])
    loud, share = _share_found(at16k, played)
    assert loud >= 6 and share >= 0.75, (loud, share)

    rec = StreamingRecognizer.from_dir(tiny_onnx_model, endpoint=EndpointConfig.from_options(
        rule2_min_trailing_silence=RULE2))
    expected = rec.recognize_segments(sent, rate)
    assert expected and expected[0].text["P"], "the model emits nothing: the comparison would prove little"
    assert [(f["segment"], f["P"], f["N"]) for f in state["finals"]] == \
        [(s.id, s.text["P"], s.text["N"]) for s in expected]
    # each final with its start and end
    assert shown == {m: [(f"{_clock(s.start)}\u2013{_clock(s.end)}", s.text[m]) for s in expected]
                     for m in ("P", "N")}
    assert visible == {"P": True, "N": True} and state["modes"] == ["P", "N"]
    assert state["config"] == {"type": "config", "sample_rate": rate}  # no hotwords typed: none sent
    # the saved files: P's finals a line each, and the SRT the runtime's cue rules make of the segments
    assert text_saved == {"name": "transcript.txt", "text": text_file}
    assert text_file == "".join(s.text["P"] + "\n" for s in expected)
    assert srt_saved == {"name": "transcript.srt", "text": srt_file}
    assert srt_file == subtitles.render("srt", "", state["seconds"], expected, {}) and srt_file.startswith("1\n")


def test_the_page_replaces_an_amended_final_text_and_time(tiny_onnx_model, tmp_path, chrome_tmp):
    """The server sends a segment's final again when a late mark joins it (same segment id):
    the page shows the amended text and time in place of the first, and appends new segments."""
    wav = tmp_path / "silence.wav"
    write_wav(wav, np.zeros(16000, np.float32))
    srv = ServerProcess(tiny_onnx_model)
    driver = None
    final = dict(type="final", segment=0, start=0.0, end=1.5, P="Hello there", N="hello there")
    amended = dict(final, end=1.9, P="Hello there.")
    second = dict(type="final", segment=1, start=2.5, end=3.0, P="Yes", N="yes")
    try:
        driver = _chrome(wav, chrome_tmp)
        driver.get(f"http://127.0.0.1:{srv.port}/")
        shown = []
        for msg in (final, amended, second):
            driver.execute_script("onMessage({data: JSON.stringify(arguments[0])});", msg)
            shown.append(_shown(driver))
        segments = driver.execute_script("return zpc.finals.map(f => f.segment)")
        clock = driver.execute_script("return [0, 59.996, 61.5, 3725.25].map(fmtTime)")
    finally:
        if driver is not None:
            driver.quit()
        srv.stop()
    assert shown[0] == {"P": [("0:00.00\u20130:01.50", "Hello there")], "N": [("0:00.00\u20130:01.50", "hello there")]}
    assert shown[1] == {"P": [("0:00.00\u20130:01.90", "Hello there.")], "N": [("0:00.00\u20130:01.90", "hello there")]}
    assert shown[2]["P"] == [("0:00.00\u20130:01.90", "Hello there."), ("0:02.50\u20130:03.00", "Yes")]
    assert segments == [0, 1]
    assert clock == ["0:00.00", "1:00.00", "1:01.50", "1:02:05.25"]


def test_the_hotwords_typed_reach_the_server(tiny_onnx_model, tmp_path, chrome_tmp):
    """The phrases of the hotword box go in the config message, and the finals are those of the
    offline runtime decoding the same audio with them (which differ from those without)."""
    played = np.concatenate([speech_like(2.5, seed=21), np.zeros(16000, np.float32)])
    wav = tmp_path / "mic.wav"
    write_wav(wav, played)
    hotwords = ["w45x8x8x8 :4", "w27 w27 w27 w27 :3"]
    srv = ServerProcess(tiny_onnx_model, "--decoding-method", "modified_beam_search")
    driver = None
    try:
        driver = _chrome(wav, chrome_tmp)
        driver.get(f"http://127.0.0.1:{srv.port}/?keep=1&seconds=3")
        box = driver.find_element("id", "hotwords")
        box.send_keys("\n".join(["# names", *hotwords, ""]))
        driver.find_element("id", "start").click()
        _wait_done(driver)
        state = driver.execute_script("return {status: zpc.status, error: zpc.error, rate: zpc.sampleRate, "
                                      "finals: zpc.finals, config: zpc.config}")
        note = driver.find_element("id", "hotwords-note").text
        sent = np.frombuffer(base64.b64decode(driver.execute_script(SENT_AUDIO_JS)), dtype="<f4")
    finally:
        if driver is not None:
            driver.quit()
        srv.stop()
    assert state["status"] == "done", (state, srv.output()[-3000:])
    rate = int(state["rate"])
    assert state["config"] == {"type": "config", "sample_rate": rate, "hotwords": hotwords}
    assert note == "2 hotword(s) sent" and "connection 1: 2 hotword(s)" in srv.output()
    rec = StreamingRecognizer.from_dir(tiny_onnx_model, decoding_method="modified_beam_search",
                                       endpoint=EndpointConfig.from_options(rule2_min_trailing_silence=RULE2))

    def offline(words):
        s = rec.create_stream(hotwords=words)
        s.accept_waveform(rate, sent)
        s.input_finished()
        return [(seg.id, seg.text["P"], seg.text["N"]) for seg in rec.finish(s)]

    with_them, without = offline(hotwords), offline([])
    assert with_them != without, "the hotwords change nothing here: the comparison would prove little"
    assert [(f["segment"], f["P"], f["N"]) for f in state["finals"]] == with_them
