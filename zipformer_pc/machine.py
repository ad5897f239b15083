"""One line describing the machine a measurement ran on (RESULTS.md, benchmark tables), and the
process's peak resident memory for the benchmarks that measure it (Linux).

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


def reset_peak_rss() -> int:
    """The resident memory now, in bytes, with the peak (VmHWM) reset to it (Linux's clear_refs 5;
    ru_maxrss would not do: a child process inherits its parent's)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    return _status_kb("VmRSS") * 1024


def peak_rss() -> int:
    """The peak resident memory (VmHWM) since :func:`reset_peak_rss`, in bytes."""
    return _status_kb("VmHWM") * 1024


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0
