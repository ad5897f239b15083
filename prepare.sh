#!/usr/bin/env bash
# Data preparation for zipformer-pc, icefall style: numbered stages, each
# calling one script in local/, each guarded by a done marker.
#
# Usage:
#   ./prepare.sh                                   # embedded synthetic corpus, all stages
#   ./prepare.sh --dataset librispeech --stage 0 --stop-stage 3
#
# Options (defaults in brackets):
#   --dataset synth|librispeech   [synth]
#   --stage N --stop-stage M      stages to run [0 .. 100]
#   --data-dir DIR                manifests, features, BPE [data]
#   --dl-dir DIR                  downloads / raw corpora [download]
#   --nj N                        parallel jobs [2]
#
# Planned stages (the data issue fills them in):
#   synth:        0 text corpus (Jane Austen, de-duplicated, questions kept)
#                 1 TTS synthesis with several Debian voices
#                 2 lhotse manifests with P and N references
#                 3 fbank features   4 BPE   5 punctuated-proportion subsets
#   librispeech:  0 manifests from LibriSpeech + LibriSpeech-PC
#                 1 P/N references   2 fbank   3 BPE   4 subsets
set -euo pipefail
cd "$(dirname "$0")"

dataset=synth
stage=0
stop_stage=100
data_dir=data
dl_dir=download
nj=2

. local/parse_options.sh
. ./path.sh

log() { echo "$(date '+%Y-%m-%d %H:%M:%S') (prepare.sh) $*"; }

case "$dataset" in
  synth|librispeech) ;;
  *) echo "prepare.sh: --dataset must be synth or librispeech, not '$dataset'" >&2; exit 2 ;;
esac

log "dataset=$dataset stage=$stage stop_stage=$stop_stage data_dir=$data_dir dl_dir=$dl_dir nj=$nj"
log "No data stage is implemented yet: they arrive with the data-preparation work (see README)."
exit 3
