"""A streaming recognition service over WebSocket, with a microphone page.

Start it with ``python -m zipformer_pc.server --model-dir DIR --port 6006``
and open ``http://localhost:6006/`` (the page), or stream files with
``python -m zipformer_pc.server.client --url ws://localhost:6006/ws a.wav``.
Like the runtime it serves, nothing here imports torch or lhotse (aiohttp is
the only addition).

One :class:`~zipformer_pc.runtime.StreamingRecognizer` is shared by every
connection; each connection has its own stream.  A single worker thread runs
all the model calls (features, encoder, search), so the asyncio event loop
only moves bytes; in each step the worker takes the audio that arrived for
every connection and runs the ready chunks of all streams together, stacked
into one encoder call (:meth:`StreamingRecognizer.decode_streams`; an int8
encoder runs them one by one, see there).

Routes: ``/ws`` (the protocol below), ``/`` (the page), ``/static/...``,
``/stats`` (JSON counters: open connections and streams, totals, errors by
code) and ``POST /subtitles?format=srt|vtt`` (the subtitles of a stream's
finals, body ``{"finals": [final messages], "duration": seconds}``, cut by
the runtime's cue rules, :mod:`zipformer_pc.runtime.subtitles`; 400 with
``{"error": ...}`` for a bad body: the page's Save SRT).

Protocol (``/ws``)
------------------

Client to server:

* optionally, first, a text message ``{"type": "config", "sample_rate": 44100}``
  (an integer from 8000 to 192000; the default is the model's rate, 16000);
  audio at another rate than the model's is resampled on the server; it may
  carry ``"hotwords": ["Queequeg", "Captain Ahab :2.5"]``, phrases the
  search favours in this stream (the lines of a hotword file,
  :mod:`zipformer_pc.runtime.hotwords`; in place of the server's
  ``--hotwords`` list; ``[]``: none), when the server runs
  ``modified_beam_search``, at most ``--max-hotwords`` phrases of at most
  ``--max-hotword-chars`` characters each;
* binary messages: mono PCM as float32 little-endian samples in [-1, 1]
  (any number of samples per message, up to ``--max-message-bytes``);
* to finish, the text ``done`` or ``{"type": "end"}``: the server decodes what
  is left, sends the last ``final`` and then ``done``, and closes (code 1000).

Server to client (text messages, JSON objects with a ``type``):

* ``{"type": "ready", "sample_rate": 16000, "modes": ["P", "N"], ...}`` when
  the connection is accepted (also: ``max_message_bytes``, ``idle_timeout``,
  and ``hotwords``: ``{"max_phrases": 100, "max_chars": 100}``, or null when
  the server's search cannot use them);
* ``{"type": "partial", "segment": 0, "P": "Hello wor", "N": "hello wor",
  "start": 0.0, "end": 1.28, "time": 1.28, "words": {"P": [...], "N": [...]}}``
  after every step that decoded audio of the stream: the current segment so far;
* ``{"type": "final", ...}`` (the same fields) when a segment ends: an
  endpoint (``--endpoint``, on by default) or the end of the stream.  Final
  segments have increasing ids.  One amendment is possible: a punctuation
  mark the model emits after the endpoint (in the silence that follows,
  before the next segment's first word) belongs to the segment it ends, so
  that segment's ``final`` is sent again with the mark attached (same
  ``segment`` id, its text, ``end`` and ``words`` extended); a client
  replaces the final of that id.  Nothing else of a final changes;
* ``{"type": "done", "segments": n, "audio_seconds": s}`` after the last final;
* ``{"type": "error", "code": "...", "message": "..."}``, then the server
  closes the connection (``fatal`` is true); for an empty binary message
  ``fatal`` is false and the message is skipped (counted in ``/stats``).

There is one text key per output mode of the model (the names of
:mod:`zipformer_pc.modes`: a ``norm`` model gives only ``N``), ``words`` has
per searched mode ``{"word", "start", "end"}`` items with marks attached to
their word, and every time is in seconds from the start of the stream.
``time`` is how much of the stream has been decoded.

Errors (code, then the close code): ``bad_json`` / ``bad_message`` /
``bad_config`` (also: hotwords that are not a list of strings, beyond the
limits, that the model's tokens cannot write, or sent to a greedy-search
server) / ``config_after_audio`` (1008), ``bad_audio`` (1003: the
length is not a multiple of 4 bytes, or the samples are not finite floats
with ``|x| <= 10``: int16 PCM must be converted), ``message_too_big`` (1009),
``too_many_connections`` (1013, sent instead of ``ready``),
``idle_timeout`` (1001: nothing received for ``--idle-timeout`` seconds),
``shutting_down`` (1001).  On SIGINT/SIGTERM the server stops accepting,
finishes every open stream (its last finals and ``done``), closes the
connections with 1001, and exits.
"""

from zipformer_pc.server.app import ServerConfig, create_app

__all__ = ["ServerConfig", "create_app"]
