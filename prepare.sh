#!/usr/bin/env bash
# Data preparation for zipformer-pc, icefall style: numbered stages, each
# calling one script in local/, each skipped when its done marker holds the
# same options (change an option and the stage runs again).
#
# Usage:
#   ./prepare.sh                                        # embedded synthetic corpus, all stages
#   ./prepare.sh --size tiny --data-dir /tmp/d          # ~70 utterances, for tests
#   ./prepare.sh --dataset librispeech --stage 0 --stop-stage 5 --parts test-clean,train-clean-100
#   ./prepare.sh --dataset real                         # test_real: recordings of people (local/prepare_real.py)
#   ./prepare.sh --dataset custom --custom-dir DIR --bpe-model egs/synth/pretrained/bpe.model
#                                                       # your recordings (local/prepare_custom.py, docs/custom-data.md)
#   ./prepare.sh --dataset games --bpe-model egs/synth/pretrained/bpe.model
#                                                       # game voice acting, transcribed by Whisper base (docs/real-speech.md)
#
# Options (defaults in brackets):
#   --dataset synth|librispeech|real|custom|games   [synth]; real: the test set test_real only
#   --custom-dir DIR              custom: the folder of recordings with its transcript file (Kaldi text +
#                                 wav.scp, NeMo JSON lines or CSV/TSV; local/prepare_custom.py), or that file
#   --stage N --stop-stage M      stages to run [0 .. 100]
#   --data-dir DIR                everything this script writes [data]
#   --dl-dir DIR                  LibriSpeech downloads; real: DIR/real holds unpacked .deb files; games:
#                                 DIR/games the games' .deb files and their speech as wav [download]
#   --pseudo-minutes M            games: stop Whisper after M minutes of a run (the next run goes on; the
#                                 committed local/pseudo_labels/*.tsv are never transcribed again) [no limit]
#   --nj N                        parallel jobs [2]
#   --seed N                      text selection, voices, subsets [42]
#   --voice-seed N                synth: the voice and prosody draws of train only (stage 1), e.g. new
#                                 readings of the same training text; dev and test keep --seed's [--seed]
#   --size default|tiny           synth corpus size preset [default]
#   --voice-set default|wide|mixed  synth train voices: the 11 in-domain ones, or those plus ~570
#                                 espeak-ng variants and wider prosody, or per utterance one of the
#                                 two (40% wide; local/synthesize.py); the dev and test sets keep
#                                 theirs [default]
#   --extra-voices F              synth: share of the training utterances read by 12 speakers of other
#                                 engines (svox pico, RHVoice, MBROLA, festival rab/don, Piper; their
#                                 packages: tools/setup_env.sh); the others are read as without it [0]
#   --kokoro-voices F             synth: share of the training utterances read by 24 speakers of the
#                                 neural Kokoro-82M model (tools/setup_env.sh installs it), drawn
#                                 first; the others are read as without it [0]
#   --kokoro-blends K             synth: K more Kokoro speakers for that share, each a blend of the
#                                 style tables of two or three of its speakers (local/tts.py) [0]
#   --train-hours H               synth training speech, overrides the preset [preset]
#   --question-readings K         synth: each training utterance holding a question is read K times,
#                                 by other voices (train has ~8% questions, dev and test ~30%) [1]
#   --gcide-hours H               synth: ~H more hours of training text from Webster's 1913 dictionary
#                                 (definitions and quotations, Debian dict-gcide): Austen's vocabulary
#                                 misses 16% of test_ood's words [0]
#   --test-utts N                 synth utterances in test and in test_ood, overrides the preset (dev and
#                                 dev_ood: 150, tiny 12) [preset]
#   --vocab-size N                sentencepiece vocabulary [256 synth, 500 librispeech, 120 tiny]
#   --bpe-model FILE              use this trained tokenizer instead of training one (its size is the
#                                 vocabulary), e.g. egs/synth/pretrained/bpe.model to fine-tune the
#                                 shipped models [none]
#   --speed-perturb true|false    add 0.9x/1.1x copies of train [false]
#   --proportions LIST            punctuated proportions [1.0,0.5,0.35,0.2,0.05]
#   --parts LIST                  LibriSpeech parts [dev-clean,dev-other,test-clean,test-other,train-clean-100,train-clean-360,train-other-500]
#   --restore-subsets LIST        train_pF subsets whose P text trains a restoration model [p1]
#   --musan true|false            stage 7: MUSAN's noise and music as cuts for train.py --musan-cuts [false]
#   --musan-url URL               where MUSAN comes from: http(s), file:// or a local path [OpenSLR 17]
#
# Stages, synth:
#   0 text: Jane Austen (in-domain) and Moby Dick (out-of-domain) utterances
#   1 speech: Debian TTS voices; train/dev/test with in-domain voices, test_ood and its dev set dev_ood
#     (other Moby Dick text) with held-out ones; a corpus made before dev_ood gets it added
#   2 fbank features          3 sentencepiece tokenizer on P+N train text
#   4 filter + punctuated-proportion subsets     5 manifest statistics
# Stages, librispeech:
#   0 download LibriSpeech and the LibriSpeech-PC manifests (skipped when present)
#   1 lhotse manifests with LibriSpeech-PC joined     2 fbank features
#   3 tokenizer     4 filter + subsets     5 manifest statistics
# Stages, real (Debian packages with recordings of people and their transcripts; no training split):
#   0 cuts of test_real with P where the transcript is cased and punctuated, counts per source and kind
#     (DATA_DIR/real/test_real.md)     2 fbank features (resampled to 16 kHz)     5 manifest statistics
# Stages, custom (your recordings):
#   0 manifests of train/dev/test, split by speaker when there are 3 or more (DATA_DIR/custom/custom.md)
#   2 fbank features     3 tokenizer     4 filter + subsets     5 manifest statistics
# Stages, games (training speech of people; local/extract_bass.py, extract_fotaq.py, pseudo_label.py):
#   0 the voice acting of Beneath a Steel Sky and Flight of the Amazon Queen as wav (Debian .debs)
#   1 Whisper base's transcripts, the sure ones kept; manifests as custom's stage 0; then 2-5 as custom
# Both synth and librispeech:
#   6 punctuation + truecasing restoration model (cascade baseline) and P' references:
#     restore/pF/ (model, restore.onnx, results.md), fbank/DATASET_cuts_train_pauto_pF.jsonl.gz
#   7 with --musan true: download MUSAN to DL_DIR/musan (11 GB, skipped when present) and write
#     DATA_DIR/musan/musan_cuts.jsonl.gz, 10 s windows of its noise and music without features
#     (local/prepare_musan.py), which training mixes into the audio (zipformer_pc.data.musan)
#
# Outputs under DATA_DIR/DATASET/: manifests/, fbank/ (cuts: DATASET_cuts_SPLIT.jsonl.gz,
# train subsets DATASET_cuts_train_pF.jsonl.gz), lang_bpe_N/ (bpe.model, tokens.txt), subsets/.
set -euo pipefail
cd "$(dirname "$0")"

dataset=synth
stage=0
stop_stage=100
data_dir=data
dl_dir=download
nj=2
seed=42
voice_seed=""
size=default
voice_set=default
extra_voices=0
kokoro_voices=0
kokoro_blends=0
question_readings=1
gcide_hours=0
train_hours=""
test_utts=""
vocab_size=""
bpe_model=""
speed_perturb=false
proportions=1.0,0.5,0.35,0.2,0.05
parts=dev-clean,dev-other,test-clean,test-other,train-clean-100,train-clean-360,train-other-500
restore_subsets=p1
custom_dir=""
pseudo_minutes=-1
musan=false
musan_url=https://www.openslr.org/resources/17/musan.tar.gz

. tools/parse_options.sh
. ./path.sh

. tools/log.sh

case "$dataset" in
  synth|librispeech|real|custom|games) ;;
  *) echo "prepare.sh: --dataset must be synth, librispeech, real, custom or games, not '$dataset'" >&2; exit 2 ;;
esac
case "$size" in
  default) dev_utts=150; preset_test=300; preset_hours=2.0; preset_vocab=256 ;;
  tiny) dev_utts=12; preset_test=12; preset_hours=0.06; preset_vocab=120 ;;
  *) echo "prepare.sh: --size must be default or tiny, not '$size'" >&2; exit 2 ;;
esac
case "$musan" in
  true|false) ;;
  *) echo "prepare.sh: --musan must be true or false, not '$musan'" >&2; exit 2 ;;
esac
case "$voice_set" in
  default|wide|mixed) ;;
  *) echo "prepare.sh: --voice-set must be default, wide or mixed, not '$voice_set'" >&2; exit 2 ;;
esac
check_share() {
  awk -v f="$2" 'BEGIN { exit !(f ~ /^([0-9]*[.])?[0-9]+$/ && f <= 1) }' \
    || { echo "prepare.sh: --$1 is a share of the training utterances (0..1), not '$2'" >&2; exit 2; }
}
check_share extra-voices "$extra_voices"
check_share kokoro-voices "$kokoro_voices"
[[ "$kokoro_blends" =~ ^[0-9]+$ ]] \
  || { echo "prepare.sh: --kokoro-blends is a number of speakers (0 or more), not '$kokoro_blends'" >&2; exit 2; }
[ "$kokoro_blends" = 0 ] || [ "$kokoro_voices" != 0 ] \
  || { echo "prepare.sh: --kokoro-blends adds speakers to the --kokoro-voices share: give that share too" >&2; exit 2; }
[ -z "$voice_seed" ] || [[ "$voice_seed" =~ ^[0-9]+$ ]] \
  || { echo "prepare.sh: --voice-seed is a non-negative integer, not '$voice_seed'" >&2; exit 2; }
[ -n "$train_hours" ] || train_hours=$preset_hours
[ -n "$test_utts" ] || test_utts=$preset_test
ood_utts=$test_utts
if [ -n "$bpe_model" ]; then
  [ -f "$bpe_model" ] || { echo "prepare.sh: --bpe-model $bpe_model does not exist" >&2; exit 2; }
  bpe_model=$(cd "$(dirname "$bpe_model")" && pwd)/$(basename "$bpe_model")
  vocab_size=$(python3 -c "import sys, sentencepiece as s; print(s.SentencePieceProcessor(model_file=sys.argv[1]).get_piece_size())" "$bpe_model")
fi
if [ -z "$vocab_size" ]; then
  if [ "$dataset" = librispeech ]; then vocab_size=500; else vocab_size=$preset_vocab; fi
fi

dir=$data_dir/$dataset
mkdir -p "$dir"
python3 - "$dir/punct_config.json" <<'EOF'
import json, sys
from zipformer_pc.data.references import SYNTH_PUNCT
from zipformer_pc.text import DEFAULT_PUNCT
cfg = {"synth": {"keep": list(SYNTH_PUNCT.keep), "map": dict(SYNTH_PUNCT.mapping)},
       "librispeech": {"keep": list(DEFAULT_PUNCT.keep), "map": dict(DEFAULT_PUNCT.mapping)}}
json.dump(cfg, open(sys.argv[1], "w"), indent=1)
EOF

# run_stage N NAME OPTIONS: true when stage N is selected and its marker does
# not already record OPTIONS; the caller runs the stage then calls mark_done.
in_range() { [ "$stage" -le "$1" ] && [ "$stop_stage" -ge "$1" ]; }
run_stage() {
  local n=$1 name=$2 opts=$3
  in_range "$n" || return 1
  local marker=$dir/.done.$name
  if [ -f "$marker" ] && [ "$(cat "$marker")" = "$opts" ]; then
    log "Stage $n ($name): already done with the same options, skipping"
    return 1
  fi
  log "Stage $n: $name"
  return 0
}
mark_done() { echo "$2" > "$dir/.done.$1"; }

bpe_dir=$dir/lang_bpe_$vocab_size

if [ "$dataset" = synth ]; then
  splits="train dev test test_ood dev_ood"

  # text_rules: the version of the text preparation's rules; a corpus made by older rules is made
  # again (2: titles without their period, "Mr Elliot", spelt out as the voices read them)
  opts="hours=$train_hours dev=$dev_utts test=$test_utts ood=$ood_utts seed=$seed text_rules=2"
  # recorded only when not 1, so that existing corpora stay done
  [ "$question_readings" = 1 ] || opts="$opts question_readings=$question_readings"
  [ "$gcide_hours" = 0 ] || opts="$opts gcide_hours=$gcide_hours"
  text_args=(--out-dir "$dir/text" --train-hours "$train_hours" --dev-utts "$dev_utts" --test-utts "$test_utts"
    --ood-utts "$ood_utts" --dev-ood-utts "$dev_utts" --seed "$seed" --train-question-readings "$question_readings"
    --gcide-hours "$gcide_hours")
  if run_stage 0 text "$opts"; then
    python3 local/prepare_synth_text.py "${text_args[@]}"
    mark_done text "$opts"
  elif in_range 0 && [ ! -f "$dir/text/dev_ood.jsonl" ]; then
    # a corpus made before dev_ood: its text only (the other splits are left as they are)
    log "Stage 0: adding dev_ood to a corpus made without it"
    python3 local/prepare_synth_text.py "${text_args[@]}" --splits dev_ood
  fi

  opts="$opts nj=$nj"
  # recorded only when not the default, so that existing corpora stay done
  [ "$voice_set" = default ] || opts="$opts voice_set=$voice_set"
  [ "$extra_voices" = 0 ] || opts="$opts extra_voices=$extra_voices"
  [ "$kokoro_voices" = 0 ] || opts="$opts kokoro_voices=$kokoro_voices"
  [ "$kokoro_blends" = 0 ] || opts="$opts kokoro_blends=$kokoro_blends"
  [ -z "$voice_seed" ] || [ "$voice_seed" = "$seed" ] || opts="$opts voice_seed=$voice_seed"
  synthesize() {
    local split=$1 voices=train vset=default extra=0 kokoro=0 blends=0 vseed=$seed
    case "$split" in test_ood|dev_ood) voices=ood ;; esac
    # the wide voice set reads train only: the dev and test sets keep their voices (comparable metrics)
    [ "$split" = train ] && { vset=$voice_set; extra=$extra_voices; kokoro=$kokoro_voices; blends=$kokoro_blends
                              vseed=${voice_seed:-$seed}; }
    python3 local/synthesize.py --text "$dir/text/$split.jsonl" --voices $voices --voice-set $vset \
      --extra-voices "$extra" --kokoro-voices "$kokoro" --kokoro-blends "$blends" --split "$split" \
      --audio-dir "$dir/audio/$split" --manifest-dir "$dir/manifests" --nj "$nj" --seed "$vseed"
  }
  if run_stage 1 speech "$opts"; then
    for split in $splits; do synthesize "$split"; done
    mark_done speech "$opts"
  elif in_range 1 && [ ! -f "$dir/manifests/synth_recordings_dev_ood.jsonl.gz" ]; then
    log "Stage 1: adding dev_ood to a corpus made without it"
    synthesize dev_ood
  fi
fi

if [ "$dataset" = librispeech ]; then
  splits=${parts//,/ }

  if run_stage 0 download "parts=$parts"; then
    python3 local/download_librispeech.py --dl-dir "$dl_dir" --parts "$parts"
    mark_done download "parts=$parts"
  fi

  if run_stage 1 manifests "parts=$parts"; then
    python3 local/prepare_librispeech.py --corpus-dir "$dl_dir/LibriSpeech" --pc-dir "$dl_dir/LibriSpeech-PC" \
      --output-dir "$dir/manifests" --parts "$parts" --nj "$nj"
    mark_done manifests "parts=$parts"
  fi
fi

if [ "$dataset" = real ]; then
  # a test set only (never trained on): its cuts, features and counts, then done
  if run_stage 0 manifests "sources=asterisk,alsa,drascula"; then
    python3 local/prepare_real.py --dl-dir "$dl_dir/real" --manifest-dir "$dir/manifests" | tee "$dir/test_real.md"
    mark_done manifests "sources=asterisk,alsa,drascula"
  fi
  opts="$(cat "$dir/.done.manifests" 2>/dev/null || true)"
  if run_stage 2 fbank "$opts"; then
    python3 local/compute_fbank.py --manifest-dir "$dir/manifests" --prefix real --split test_real \
      --output-dir "$dir/fbank" --num-threads "$nj"
    mark_done fbank "$opts"
  fi
  if in_range 5; then
    log "Stage 5: manifest statistics"
    python3 local/manifest_stats.py "$dir/fbank/real_cuts_test_real.jsonl.gz" | tee "$dir/stats.md"
  fi
  log "Done: $dir (test_real: $dir/fbank/real_cuts_test_real.jsonl.gz)"
  exit 0
fi

if [ "$dataset" = games ]; then
  # people's voices for training: the voice acting of two freeware games in Debian (no speaker of
  # test_real among their actors), transcribed by Whisper base; then as a custom corpus
  games_dl=$dl_dir/games
  if run_stage 0 audio "games=bass,fotaq"; then
    bass_deb=$(python3 local/debs.py fetch beneath-a-steel-sky "$games_dl")
    fotaq_deb=$(python3 local/debs.py fetch flight-of-the-amazon-queen "$games_dl")
    python3 local/extract_bass.py --deb "$bass_deb" --output-dir "$games_dl/bass"
    python3 local/extract_fotaq.py --deb "$fotaq_deb" --output-dir "$games_dl/fotaq"
    mark_done audio "games=bass,fotaq"
  fi
  if in_range 1; then
    # resumable: each run goes on where the last stopped (--pseudo-minutes M: a time-box per run);
    # the committed transcripts of local/pseudo_labels/ are not made again
    labels=()
    for f in local/pseudo_labels/*.tsv; do [ -f "$f" ] && labels+=(--labels "$f"); done
    log "Stage 1: transcripts by Whisper base (bash tools/setup_env.sh --whisper)"
    python3 local/pseudo_label.py --manifest "$games_dl/bass/manifest.tsv" --speaker bass \
      --manifest "$games_dl/fotaq/manifest.tsv" --speaker fotaq --output "$dir/pseudo.tsv" \
      --max-minutes "$pseudo_minutes" --seed "$seed" ${labels[@]+"${labels[@]}"}
  fi
  custom_dir=$dir/pseudo.tsv
fi

if [ "$dataset" = custom ] || [ "$dataset" = games ]; then
  # your recordings: train/dev/test manifests here, then the common stages 2-5 (no restoration model)
  splits="train dev test"
  mstage=0  # the manifests' stage: 1 for the games, after their transcripts
  [ "$dataset" = custom ] || mstage=1
  if in_range $mstage; then
    [ -n "$custom_dir" ] || { echo "prepare.sh: --dataset custom needs --custom-dir DIR" >&2; exit 2; }
    [ -e "$custom_dir" ] || { echo "prepare.sh: --custom-dir $custom_dir does not exist" >&2; exit 2; }
    custom_dir=$(realpath "$custom_dir")
    # the marker holds a hash of the transcript files: edit them and the data is prepared again
    opts="custom_dir=$custom_dir transcripts=$(python3 local/prepare_custom.py --custom-dir "$custom_dir" --fingerprint true) seed=$seed"
  fi
  if in_range $mstage && run_stage $mstage manifests "$opts"; then
    python3 local/prepare_custom.py --custom-dir "$custom_dir" --manifest-dir "$dir/manifests" --seed "$seed" \
      --prefix "$dataset" | tee "$dir/$dataset.md"
    mark_done manifests "$opts"
  fi
  [ "$stop_stage" -le 5 ] || stop_stage=5
fi

# ---------------------------------------------------------------- common stages
opts="$(cat "$dir/.done.speech" "$dir/.done.manifests" 2>/dev/null | tr '\n' ' ' || true) speed_perturb=$speed_perturb"
fbank() {
  local split=$1 sp=false
  case "$split" in train|train-*) sp=$speed_perturb ;; esac
  python3 local/compute_fbank.py --manifest-dir "$dir/manifests" --prefix "$dataset" --split "$split" \
    --output-dir "$dir/fbank" --speed-perturb "$sp" --num-threads "$nj"
}
if run_stage 2 fbank "$opts"; then
  for split in $splits; do fbank "$split"; done
  mark_done fbank "$opts"
elif [ "$dataset" = synth ] && in_range 2 && [ ! -f "$dir/fbank/synth_cuts_dev_ood.jsonl.gz" ]; then
  log "Stage 2: adding dev_ood to a corpus made without it"
  fbank dev_ood
fi

train_cuts=()
for split in $splits; do
  case "$split" in train|train-*) train_cuts+=("$dir/fbank/${dataset}_cuts_${split}.jsonl.gz") ;; esac
done
if [ ${#train_cuts[@]} -eq 0 ]; then
  echo "prepare.sh: no training split among: $splits" >&2; exit 2
fi

opts="$(cat "$dir/.done.fbank" 2>/dev/null || true) vocab=$vocab_size"
bpe_opts=()
if [ -n "$bpe_model" ]; then
  opts="$opts bpe_model=$(md5sum < "$bpe_model" | cut -c1-12)"
  bpe_opts=(--bpe-model "$bpe_model")
fi
if run_stage 3 bpe "$opts"; then
  python3 local/train_bpe.py --cuts "${train_cuts[@]}" --lang-dir "$bpe_dir" --vocab-size "$vocab_size" "${bpe_opts[@]}"
  mark_done bpe "$opts"
fi

opts="$(cat "$dir/.done.bpe" 2>/dev/null || true) proportions=$proportions seed=$seed"
if run_stage 4 subsets "$opts"; then
  all_train=${train_cuts[0]}
  if [ ${#train_cuts[@]} -gt 1 ]; then
    # LibriSpeech: one train manifest over all training parts
    all_train=$dir/fbank/${dataset}_cuts_train.jsonl.gz
    python3 -c "import sys; from lhotse import combine, load_manifest_lazy as L; combine(*[L(p) for p in sys.argv[2:]]).to_file(sys.argv[1])" \
      "$all_train" "${train_cuts[@]}"
  fi
  python3 local/make_subsets.py --cuts "$all_train" --bpe-model "$bpe_dir/bpe.model" \
    --proportions "$proportions" --subset-dir "$dir/subsets" --seed "$seed"
  mark_done subsets "$opts"
fi

if [ "$stage" -le 5 ] && [ "$stop_stage" -ge 5 ]; then
  log "Stage 5: manifest statistics"
  stats=()
  for split in $splits; do stats+=("$dir/fbank/${dataset}_cuts_${split}.jsonl.gz"); done
  python3 local/manifest_stats.py "${stats[@]}" | tee "$dir/stats.md"
fi

opts="$(cat "$dir/.done.subsets" 2>/dev/null || true) restore_subsets=$restore_subsets seed=$seed"
if run_stage 6 restore "$opts"; then
  # the manifests of stage 4 share this stem (one train part keeps its own name)
  train_stem=${dataset}_cuts_train
  [ ${#train_cuts[@]} -eq 1 ] && train_stem=$(basename "${train_cuts[0]}" .jsonl.gz)
  if [ "$dataset" = synth ]; then dev=dev; tests="test test_ood"; else dev=dev-clean; tests="test-clean test-other"; fi
  valid_args=(--valid-fraction 0.05)
  [ -f "$dir/fbank/${dataset}_cuts_${dev}.jsonl.gz" ] && valid_args=(--valid-cuts "$dir/fbank/${dataset}_cuts_${dev}.jsonl.gz")
  test_sets=""
  for t in $tests; do
    f=$dir/fbank/${dataset}_cuts_${t}.jsonl.gz
    [ -f "$f" ] && test_sets="$test_sets${test_sets:+,}$t=$f"
  done
  for sub in ${restore_subsets//,/ }; do
    exp=$dir/restore/$sub
    # trained on the P text of the training cuts that keep P in this subset only
    # (never on dev/test text: dev picks the checkpoint, test sets are only scored)
    python3 -m zipformer_pc.restoration.train --train-cuts "$dir/fbank/${train_stem}_${sub}.jsonl.gz" \
      "${valid_args[@]}" --test-sets "$test_sets" --exp-dir "$exp" --seed "$seed" --num-threads 1
    python3 -m zipformer_pc.restoration.export --checkpoint "$exp/best-valid-loss.pt" --output "$exp/restore.onnx"
    # P' for every filtered training cut, beside its true P (custom text_p_auto)
    python3 local/add_auto_punct.py --onnx "$exp/restore.onnx" --num-threads "$nj" \
      --cuts-in "$dir/fbank/${train_stem}_filtered.jsonl.gz" \
      --cuts-out "$dir/fbank/${train_stem}_pauto_${sub}.jsonl.gz"
  done
  mark_done restore "$opts"
fi

if [ "$musan" = true ] && in_range 7; then
  opts="url=$musan_url parts=noise,music window=10"
  marker=$data_dir/musan/.done.musan
  if [ -f "$marker" ] && [ "$(cat "$marker")" = "$opts" ]; then
    log "Stage 7 (musan): already done with the same options, skipping"
  else
    log "Stage 7: MUSAN noise and music cuts"
    python3 local/prepare_musan.py --dl-dir "$dl_dir" --output-dir "$data_dir/musan" --url "$musan_url" \
      --parts noise,music --window 10
    echo "$opts" > "$marker"
  fi
fi

log "Done: $dir"
