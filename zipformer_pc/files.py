"""Writing text files whose bytes depend on their content only."""

import contextlib
import gzip
import io
from pathlib import Path
from typing import Iterator, TextIO, Union


@contextlib.contextmanager
def text_writer(path: Union[str, Path]) -> Iterator[TextIO]:
    """Open ``path`` for writing UTF-8 text; a name ending in ``.gz`` is gzip-compressed with
    neither a time stamp nor a file name in the header, so the same text gives the same bytes on
    every run (a regenerated but unchanged file is no change to commit or to re-check)."""
    path = Path(path)
    if not path.name.endswith(".gz"):
        with open(path, "w", encoding="utf-8") as f:
            yield f
        return
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz, \
            io.TextIOWrapper(gz, encoding="utf-8") as f:
        yield f
