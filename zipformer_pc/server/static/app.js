// The microphone page of zipformer_pc.server: capture, stream, show P and N.
// State is kept in window.zpc (also read by the end-to-end test).
"use strict";

const params = new URLSearchParams(location.search);
const zpc = window.zpc = {
  status: "idle",     // idle | connecting | recording | finishing | done | error
  modes: [],
  finals: [],         // the server's final messages, in order
  partial: null,      // the last partial message
  sampleRate: 0,      // the rate the page sends (the AudioContext's)
  samplesSent: 0,
  sent: params.get("keep") === "1" ? [] : null,  // with ?keep=1: copies of every block sent (tests)
  error: null,
  config: null,       // the config message sent (sample rate, hotwords)
  audioSeconds: null, // from the done message
  saved: null,        // the last file saved: {name, text}
};

const $ = (id) => document.getElementById(id);
let ws = null, ctx = null, media = null, node = null, sink = null;
const limitSeconds = parseFloat(params.get("seconds") || "0");

function setStatus(s, detail) {
  zpc.status = s;
  $("status").textContent = detail ? `${s}: ${detail}` : s;
}

function fail(message) {
  zpc.error = message;
  $("error").textContent = message;
  setStatus("error");
  stopCapture();
  $("start").disabled = false;
  $("stop").disabled = true;
}

// seconds as m:ss.ss (h:mm:ss.ss from an hour)
function fmtTime(t) {
  const cs = Math.round(t * 100);
  const h = Math.floor(cs / 360000), m = Math.floor(cs / 6000) % 60, s = (cs % 6000) / 100;
  const ss = s.toFixed(2).padStart(5, "0");
  return h ? `${h}:${String(m).padStart(2, "0")}:${ss}` : `${m}:${ss}`;
}

function fillItem(li, f, m) {
  li.textContent = "";
  const time = document.createElement("span");
  time.className = "time";
  time.textContent = `${fmtTime(f.start)}\u2013${fmtTime(f.end)}`;
  const text = document.createElement("span");
  text.className = "text";
  text.textContent = f[m] || "";
  li.append(time, " ", text);
  li.title = `${f.start.toFixed(2)}-${f.end.toFixed(2)} s`;
}

// the mode saved: P, or N when the model has no P
function savedMode() {
  return zpc.modes.length && !zpc.modes.includes("P") ? "N" : "P";
}

function transcriptText() {
  const m = savedMode();
  return zpc.finals.map((f) => f[m] || "").filter((t) => t).join("\n") + "\n";
}

function download(name, text, type) {
  zpc.saved = { name, text };
  const url = URL.createObjectURL(new Blob([text], { type: `${type};charset=utf-8` }));
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

function saveText() {
  download("transcript.txt", transcriptText(), "text/plain");
}

// the SRT comes from the server, which cuts the cues by the runtime's rules (zipformer_pc/runtime/subtitles.py)
async function saveSrt() {
  const duration = zpc.audioSeconds !== null ? zpc.audioSeconds
    : (zpc.sampleRate ? zpc.samplesSent / zpc.sampleRate : null);
  try {
    const res = await fetch("/subtitles?format=srt", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ finals: zpc.finals, duration }),
    });
    const body = await res.text();
    if (!res.ok) throw new Error(body);
    download("transcript.srt", body, "application/x-subrip");
  } catch (e) {
    $("error").textContent = `could not make the SRT: ${e.message || e}`;
  }
}

// the hotword box's phrases: one a line, empty and # lines skipped
function hotwordList() {
  return $("hotwords").value.split("\n").map((s) => s.trim()).filter((s) => s && !s.startsWith("#"));
}

function render() {
  for (const m of ["P", "N"]) {
    const pane = $(`pane-${m}`);
    if (zpc.modes.length && !zpc.modes.includes(m)) { pane.classList.add("hidden"); continue; }
    const list = $(`finals-${m}`);
    while (list.children.length < zpc.finals.length) {
      const f = zpc.finals[list.children.length];
      const li = document.createElement("li");
      fillItem(li, f, m);
      list.appendChild(li);
    }
    $(`partial-${m}`).textContent = zpc.partial ? (zpc.partial[m] || "") : "";
  }
  $("save-text").disabled = $("save-srt").disabled = zpc.finals.length === 0;
}

function onMessage(event) {
  const msg = JSON.parse(event.data);
  if (msg.type === "ready") {
    zpc.modes = msg.modes;
    const config = { type: "config", sample_rate: zpc.sampleRate };
    const hotwords = hotwordList();
    if (hotwords.length && msg.hotwords) {
      config.hotwords = hotwords;
      $("hotwords-note").textContent = `${hotwords.length} hotword(s) sent`;
    } else if (hotwords.length) {
      $("hotwords-note").textContent = "hotwords not sent: this server does not run modified beam search";
    }
    zpc.config = config;
    ws.send(JSON.stringify(config));
    setStatus("recording");
    startCapture().catch((e) => fail(`audio capture failed: ${e}`));
  } else if (msg.type === "partial") {
    zpc.partial = msg;
  } else if (msg.type === "final") {
    const last = zpc.finals.length - 1;
    if (last >= 0 && zpc.finals[last].segment === msg.segment) {
      zpc.finals[last] = msg;  // amended: a late punctuation mark attached to that segment
      for (const m of ["P", "N"]) {
        const item = $(`finals-${m}`).children[last];
        if (item) { fillItem(item, msg, m); }  // its text and its time
      }
    } else {
      zpc.finals.push(msg);
      zpc.partial = null;
    }
  } else if (msg.type === "done") {
    zpc.audioSeconds = msg.audio_seconds;
    setStatus("done", `${msg.segments} segment(s), ${msg.audio_seconds.toFixed(1)} s`);
    $("start").disabled = false;
  } else if (msg.type === "error") {
    if (msg.fatal === false) { console.warn("server:", msg.message); return; }
    fail(`server error ${msg.code}: ${msg.message}`);
  }
  render();
}

function send(block) {
  if (!ws || ws.readyState !== WebSocket.OPEN || zpc.status !== "recording") return;
  let x = block;
  if (limitSeconds > 0) {
    const left = Math.round(limitSeconds * zpc.sampleRate) - zpc.samplesSent;
    if (left <= 0) return;
    if (x.length > left) x = x.slice(0, left);
  }
  ws.send(x.buffer.byteLength === x.length * 4 ? x.buffer : x.slice().buffer);
  zpc.samplesSent += x.length;
  if (zpc.sent) zpc.sent.push(x.slice());
  if (limitSeconds > 0 && zpc.samplesSent >= Math.round(limitSeconds * zpc.sampleRate)) stop();
}

async function startCapture() {
  const source = ctx.createMediaStreamSource(media);
  const blockSize = Math.max(128, Math.round(zpc.sampleRate / 10) & ~127);  // about 0.1 s
  sink = ctx.createGain();
  sink.gain.value = 0;
  sink.connect(ctx.destination);
  if (ctx.audioWorklet) {
    await ctx.audioWorklet.addModule("/static/capture-worklet.js");
    node = new AudioWorkletNode(ctx, "capture-processor", { processorOptions: { blockSize } });
    node.port.onmessage = (e) => send(e.data);
  } else {  // older browsers
    node = ctx.createScriptProcessor(4096, 1, 1);
    node.onaudioprocess = (e) => send(new Float32Array(e.inputBuffer.getChannelData(0)));
  }
  source.connect(node);
  node.connect(sink);
  if (ctx.state === "suspended") await ctx.resume();
}

function stopCapture() {
  if (node) { node.disconnect(); if (node.port) node.port.onmessage = null; node = null; }
  if (media) { media.getTracks().forEach((t) => t.stop()); media = null; }
  if (ctx) { ctx.close(); ctx = null; }
}

async function start() {
  $("start").disabled = true;
  $("error").textContent = "";
  zpc.finals = []; zpc.partial = null; zpc.samplesSent = 0; zpc.error = null;
  zpc.config = null; zpc.audioSeconds = null;
  $("hotwords-note").textContent = "";
  if (zpc.sent) zpc.sent = [];
  for (const m of ["P", "N"]) { $(`finals-${m}`).innerHTML = ""; }
  render();
  setStatus("connecting");
  try {
    media = await navigator.mediaDevices.getUserMedia({
      audio: { channelCount: 1, echoCancellation: false, noiseSuppression: false, autoGainControl: false },
    });
  } catch (e) {
    fail(`no microphone: ${e}`);
    return;
  }
  ctx = new AudioContext();
  zpc.sampleRate = ctx.sampleRate;
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  ws = new WebSocket(`${proto}//${location.host}/ws`);
  ws.binaryType = "arraybuffer";
  ws.onmessage = onMessage;
  ws.onclose = (e) => {
    if (zpc.status === "recording" || zpc.status === "finishing" || zpc.status === "connecting") {
      fail(`connection closed (${e.code}${e.reason ? ": " + e.reason : ""})`);
    }
    ws = null;
  };
  $("stop").disabled = false;
}

function stop() {
  $("stop").disabled = true;
  stopCapture();
  if (ws && ws.readyState === WebSocket.OPEN) {
    setStatus("finishing");
    ws.send(JSON.stringify({ type: "end" }));
  } else {
    setStatus("idle");
    $("start").disabled = false;
  }
}

$("start").onclick = start;
$("stop").onclick = stop;
$("save-text").onclick = saveText;
$("save-srt").onclick = saveSrt;
if (params.get("autostart") === "1") start();
