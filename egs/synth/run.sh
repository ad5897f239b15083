#!/usr/bin/env bash
# The full recipe on the embedded synthetic corpus (the README's main job).
#
# Usage (from the project root; ./run.sh sets up the environment first):
#   bash run.sh
#   bash run.sh --quick true            # a tiny corpus: minutes, for a first look
#   bash egs/synth/run.sh --stage 0 --stop-stage 0
#
# Options (defaults in brackets):
#   --stage N --stop-stage M   stages to run [0 .. 100]
#   --quick true|false         tiny corpus and models [false]
#   --data-dir DIR             prepared data [data]
#   --exp-dir DIR              experiments and results [egs/synth/exp]
#   --nj N                     parallel jobs [2]
#   --seed N                   everything random [42]
#
# Stages:
#   0  data: text, TTS speech, fbank, tokenizer, punctuated-proportion subsets (prepare.sh)
#   (training of every Table I / III configuration, decoding, ONNX export and
#    streaming RTF are added by later work)
set -euo pipefail
cd "$(dirname "$0")/../.."

stage=0
stop_stage=100
quick=false
data_dir=data
exp_dir=egs/synth/exp
nj=2
seed=42

. local/parse_options.sh
. ./path.sh

log() { echo "$(date '+%Y-%m-%d %H:%M:%S') (egs/synth/run.sh) $*"; }

size=default
case "$quick" in
  true) size=tiny ;;
  false) ;;
  *) echo "egs/synth/run.sh: --quick must be true or false" >&2; exit 2 ;;
esac
mkdir -p "$exp_dir"

if [ "$stage" -le 0 ] && [ "$stop_stage" -ge 0 ]; then
  log "Stage 0: data preparation (size $size)"
  ./prepare.sh --dataset synth --size "$size" --data-dir "$data_dir" --nj "$nj" --seed "$seed"
fi

log "Done. Prepared data: $data_dir/synth (statistics in $data_dir/synth/stats.md)."
log "Restoration model (cascade, P'): $data_dir/synth/restore/p1 (results.md). Training, decoding, export and the results tables of every configuration are not part of this recipe yet."
