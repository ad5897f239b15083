"""The one logging set-up of the package's commands and of the repository's scripts.

Every command and script calls :func:`setup_logging` first thing in its ``main``, so that
every log line, whichever program wrote it, reads ``TIME LEVEL [FILE] MESSAGE``, ``FILE``
being the file of the logging call (``2026-12-05 11:35:01,123 INFO [decode.py] Decoding
test``).  The shell scripts' ``log`` (``tools/log.sh``) writes the same time stamp.
"""

import logging
import sys
from pathlib import Path
from typing import List, Optional, Union

FORMAT = "%(asctime)s %(levelname)s [%(filename)s] %(message)s"


def setup_logging(level: Union[int, str] = "INFO", tag: Optional[str] = None, log_file: Optional[Path] = None,
                  stderr: bool = True, file_mode: str = "a", force: bool = False) -> None:
    """Log ``level`` and above in :data:`FORMAT` to stderr and/or ``log_file``.

    ``tag`` follows the file name inside the brackets (``[train.py rank 0]``); ``file_mode``
    ``"w"`` starts ``log_file`` afresh.  Like :func:`logging.basicConfig`, whose wrapper this
    is, a second call does nothing unless ``force`` (which replaces the handlers of the
    first: a training run that opens its own log file)."""
    fmt = FORMAT if tag is None else FORMAT.replace("%(filename)s", f"%(filename)s {tag}")
    handlers: List[logging.Handler] = []
    if stderr:
        handlers.append(logging.StreamHandler(sys.stderr))
    if log_file is not None:
        handlers.append(logging.FileHandler(log_file, mode=file_mode))
    if isinstance(level, str):
        level = level.upper()
    logging.basicConfig(format=fmt, level=level, handlers=handlers or None, force=force)
