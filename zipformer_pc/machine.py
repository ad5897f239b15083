"""One line describing the machine a measurement ran on (RESULTS.md, benchmark tables).

Reads ``/proc`` where it can (Linux) and falls back to :mod:`platform`; imports
nothing heavy.
"""

import os
import platform
from pathlib import Path


def describe_machine() -> str:
    """``CPU model, N cores, M GiB RAM, GPUs, OS release``."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                mem = f", {int(line.split()[1]) / 1024 / 1024:.0f} GiB RAM"
                break
    except OSError:
        pass
    gpus = sorted(Path("/proc/driver/nvidia/gpus").glob("*")) if Path("/proc/driver/nvidia/gpus").is_dir() else []
    gpu = f"{len(gpus)} NVIDIA GPU(s)" if gpus else "no GPU"
    return f"{cpu}, {os.cpu_count()} cores{mem}, {gpu}, {platform.system()} {platform.release()}"
