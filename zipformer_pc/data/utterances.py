"""The text utterances of ``local/prepare_synth_text.py``: JSON lines, one utterance each, with
an ``id`` and its raw punctuated ``text_raw`` (``DATA_DIR/synth/text/SPLIT.jsonl``).

Read by ``local/text_cuts.py`` (the text as cuts without speech) and ``research/ood_factors.py``
(the test texts read by other voices)."""

import json
from pathlib import Path
from typing import Iterator


def read_utterances(path: Path) -> Iterator[dict]:
    """The utterances of ``path`` in order (blank lines skipped); a line that is not one exits
    with its file and line number."""
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                utt = json.loads(line)
                if not isinstance(utt.get("id"), str) or not isinstance(utt.get("text_raw"), str):
                    raise ValueError("no 'id' and 'text_raw' strings")
            except (ValueError, AttributeError) as e:
                raise SystemExit(f"{path}:{n}: not an utterance of prepare_synth_text.py ({e})") from None
            yield utt
