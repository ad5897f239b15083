"""The server's web page end to end in headless Chromium: a wav file is the microphone
(Chromium's fake capture device), the page streams it and shows P and N.

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

from zipformer_pc.runtime import Resampler, StreamingRecognizer
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


def _chrome(wav, tmpdir):
    """Headless Chromium whose microphone plays ``wav``; its temporary files go to ``tmpdir``."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (pip install selenium)")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
                 f"--use-file-for-fake-audio-capture={wav}", "--autoplay-policy=no-user-gesture-required"):
        opts.add_argument(flag)
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    return webdriver.Chrome(service=Service(DRIVER, env=env), options=opts)


def test_the_page_streams_the_microphone_and_shows_p_and_n(tiny_onnx_model, tmp_path, chrome_tmp):
    speech = np.concatenate([speech_like(1.8, seed=11), np.zeros(16000, np.float32), speech_like(1.4, seed=12)])
    wav = tmp_path / "mic.wav"
    # the file loops; its speech fills most of any SECONDS of it
    played = np.concatenate([speech, np.zeros(16000, np.float32)])
    write_wav(wav, played)

    srv = ServerProcess(tiny_onnx_model)
    driver = None
    try:
        driver = _chrome(wav, chrome_tmp)
        driver.get(f"http://127.0.0.1:{srv.port}/?autostart=1&keep=1&seconds={SECONDS}")
        deadline = time.time() + 120
        while True:
            status = driver.execute_script("return window.zpc.status")
            if status in ("done", "error") or time.time() > deadline:
                break
            time.sleep(0.5)
        state = driver.execute_script("return {status: zpc.status, error: zpc.error, rate: zpc.sampleRate, "
                                      "modes: zpc.modes, finals: zpc.finals, sent: zpc.samplesSent}")
        assert state["status"] == "done", (state, srv.output()[-3000:])
        sent = np.frombuffer(base64.b64decode(driver.execute_script(SENT_AUDIO_JS)), dtype="<f4")
        shown = {m: [li.text for li in driver.find_elements("css selector", f"#finals-{m} li")] for m in ("P", "N")}
        visible = {m: driver.find_element("id", f"pane-{m}").is_displayed() for m in ("P", "N")}
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
    assert shown == {m: [s.text[m] for s in expected] for m in ("P", "N")}
    assert visible == {"P": True, "N": True} and state["modes"] == ["P", "N"]


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
            shown.append({m: [(li.text, li.get_attribute("title"))
                              for li in driver.find_elements("css selector", f"#finals-{m} li")] for m in ("P", "N")})
        segments = driver.execute_script("return zpc.finals.map(f => f.segment)")
    finally:
        if driver is not None:
            driver.quit()
        srv.stop()
    assert shown[0] == {"P": [("Hello there", "0.00-1.50 s")], "N": [("hello there", "0.00-1.50 s")]}
    assert shown[1] == {"P": [("Hello there.", "0.00-1.90 s")], "N": [("hello there", "0.00-1.90 s")]}
    assert shown[2]["P"] == [("Hello there.", "0.00-1.90 s"), ("Yes", "2.50-3.00 s")]
    assert segments == [0, 1]
