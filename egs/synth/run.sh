#!/usr/bin/env bash
# The full recipe on the embedded synthetic corpus (the README's main job).
#
# Usage (from the project root; run.sh sets up the environment first):
#   bash run.sh
#   bash egs/synth/run.sh --stage 0 --stop-stage 0
#
# Options (defaults in brackets):
#   --stage N --stop-stage M   stages to run [0 .. 100]
#   --exp-dir DIR              where results go [egs/synth/exp]
#
# Stages:
#   0  check the text normalization and scoring toolkit on bundled examples
#   (data preparation, training of every Table I / III configuration,
#    decoding, ONNX export and streaming RTF are added by later work)
set -euo pipefail
cd "$(dirname "$0")/../.."

stage=0
stop_stage=100
exp_dir=egs/synth/exp

. local/parse_options.sh
. ./path.sh

log() { echo "$(date '+%Y-%m-%d %H:%M:%S') (egs/synth/run.sh) $*"; }

mkdir -p "$exp_dir"

if [ "$stage" -le 0 ] && [ "$stop_stage" -ge 0 ]; then
  log "Stage 0: scoring toolkit on local/examples"
  python3 local/score.py --ref local/examples/ref.txt --hyp local/examples/hyp.txt \
    --name "example hyp" --errs-file "$exp_dir/errs-example.txt"
  python3 local/score.py --ref local/examples/ref.txt --hyp local/examples/hyp.txt \
    --json > "$exp_dir/wer-summary-example.json"
  log "Wrote $exp_dir/errs-example.txt and $exp_dir/wer-summary-example.json"
fi

log "Done. Data preparation, training, decoding and export stages are not part of this recipe yet."
