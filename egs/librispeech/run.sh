#!/usr/bin/env bash
# The papers' experiments on LibriSpeech 960 h with LibriSpeech-PC references:
# the plan of egs/synth/run.sh with the paper-size model (~66M parameters, the
# paper's are 70M), 40 epochs, GPU DDP training with fp16.
#
# Usage (from the project root):
#   bash egs/librispeech/run.sh --dry-run true          # check every command's arguments, run nothing
#   bash egs/librispeech/run.sh                         # everything (see the costs below)
#   bash egs/librispeech/run.sh --stage 4 --stop-stage 6
#   bash egs/librispeech/run.sh --systems cond_p,norm --stage 1 --stop-stage 1
#
# STATUS AND COSTS.  This recipe has NOT been run on LibriSpeech here: the
# development machine has 2 CPU cores, no GPU and no LibriSpeech download.  It
# is checked with --dry-run true, which parses the arguments of every command
# it would run (tests/recipes/test_recipes.py), and run through every stage on a tiny
# corpus in LibriSpeech's layout (tests/recipes/test_librispeech_e2e.py: espeak-ng
# speech, LibriSpeech-PC manifests, tiny encoder, 1 epoch on CPU, three
# systems; --world-size 1 --use-fp16 false --vocab-size 100
# --train-extra "--num-threads 1").  The paper trains 70M-parameter models
# for 40 epochs on 4 GPUs; this recipe trains 17 of them (~66M parameters).
#
# TIME PER EPOCH: not measured on a GPU yet.  It comes from the GPU check,
# benchmarks/gpu_check.py (docs/gpu-check.md), which trains this recipe's
# paper-size models on LibriSpeech-shaped batches of --max-duration 1000 in
# fp16 and bf16, in under 8 minutes, importing no lhotse:
#   PYTHONPATH=. python benchmarks/gpu_check.py --out-json gpu_check.json
# Its train rows give "s audio / s" (audio_seconds_per_second, one GPU, the
# whole step); an epoch takes about
#   960 h x 3600 x P / (s audio / s) / world size   seconds,
# with P = 1 (this recipe's default) or 3 (--speed-perturb true, icefall's
# 0.9x/1.1x copies), e.g. 960 x 3600 / 500 / 4 = 1728 s, 29 minutes, if a
# check reported 500 s audio / s (that figure is only an example), 40 epochs
# and 17 models in proportion.  The check's ddp rows say whether DDP costs
# extra on that machine; its oom_scan whether --max-duration 1000 fits.  For
# scale only, icefall's own figure for its 70M Zipformer (4 V100s, fp16,
# ~2900 h per epoch) is about 80 minutes per epoch (icefall PR #672).
# Measured on this 2-core CPU (docs/gpu-check.md, "LibriSpeech-scale costs
# measured on the CPU", with the commands): the plain-PyTorch pruned loss
# (used without k2) on a batch of 50 utterances of 400 encoder frames (16 s)
# and 100 tokens, 500-token vocabulary, takes 6.4 to 9.4 s forward and
# backward on 2 threads (the machine's load varies), 0.8 s of it in its
# lattice recursions, and 1.1 GB at its peak (0.9 GB with --train-extra
# "--lattice-dtype float32"); the training sampler's pass over a 960 h
# manifest (281,241 cuts, 30 buckets, 210000-cut buffer) takes 27 s of one
# core per epoch and 0.6 GB; neither bounds a GPU epoch.  With --musan true
# (the default) the DataLoader reads, mixes and turns into fbank the half of
# the cuts it mixes noise into, about 1,200 s of audio per second of one
# worker thread here: --num-workers N keeps up while N x 2,000 exceeds the
# GPU's s audio / s.  Other stages:
# downloading ~60 GB (+11 GB MUSAN); fbank of ~1000 h on CPU (hours, --prep-nj jobs); the
# restoration model of prepare.sh stage 6 trains on CPU (hours); decoding
# (decode.py --device auto: the first GPU when there is one, else CPU) covers
# 10.5 h of test audio x 2 methods x 18 (17 systems + the cascade),
# --decode-nj jobs side by side (its speed at this model size has not been
# measured; modified beam search runs utterance by utterance); the streaming
# RTF is measured on CPU.
#
# Needs: k2 for the pruned RNN-T loss (without it --loss pruned runs the
# plain-PyTorch pruned loss, zipformer_pc/model/pruned_rnnt.py, timed above on
# a CPU, not yet in a GPU training; --loss full, torchaudio's loss over the whole T x U x 500
# lattice, is slower and much hungrier for memory, so it would likely need a
# smaller --max-duration: untested), CUDA GPUs for --world-size N, optionally
# openai-whisper and its weights.
#
# Options (defaults in brackets):
#   --stage N --stop-stage M      stages to run [0 .. 6]
#   --dry-run true|false          print every command and check that its arguments parse
#                                 (tools/check_args.py); nothing is run or written [false]
#   --data-dir DIR --dl-dir DIR   prepared data [data], downloads [download]
#   --exp-dir DIR                 experiments [egs/librispeech/exp]
#   --results-dir DIR             where RESULTS.md goes [egs/librispeech]
#   --systems LIST                systems to train/decode/export (names below) [all]
#   --parts LIST                  LibriSpeech parts [all seven: dev/test clean/other, the three train parts]
#   --speed-perturb true|false    0.9x/1.1x training copies (prepare.sh) [false]
#   --musan true|false            MUSAN noise and music mixed into half the training cuts at 10-20 dB SNR,
#                                 as icefall does (prepare.sh --musan true downloads it, 11 GB; train.py
#                                 --musan-cuts; a mixed cut's features are computed from its audio) [true]
#   --num-buckets N               duration buckets of the training sampler [30, icefall's]
#   --bucket-buffer-size N        cuts the sampler holds and shuffles over [210000: icefall's 30 x 2000
#                                 plus its 150k shuffle buffer, which lhotse >= 1.20 adds to buffer_size]
#   --vocab-size N                sentencepiece vocabulary (prepare.sh) [500]
#   --prep-nj N                   data preparation jobs [8]
#   --encoder NAME                encoder config of zipformer_pc.training.train [paper]
#   --world-size N                GPUs per training (DDP) [4]
#   --dtype fp32|fp16|bf16        training precision (train.py --dtype): fp16 with loss scaling,
#                                 bf16 (A100, H100 and later) without [fp16]
#   --use-fp16 true|false         older name: true is --dtype fp16, false is --dtype fp32
#   --num-epochs N --avg A        training epochs; checkpoints averaged for decoding/export [40, 15]
#   --max-duration S              seconds of audio per GPU batch [1000]
#   --num-workers N               DataLoader workers per GPU [2]
#   --loss pruned|full|auto       transducer loss of train.py [pruned]
#   --master-port P               DDP port [12354]
#   --decoding-methods LIST       [greedy_search,modified_beam_search]
#   --beam-size N                 modified_beam_search beam [4]
#   --blank-penalty B             decoding's blank penalty (decode.py --blank-penalty): 0 as the
#                                 papers and icefall decode (the runtime's default is 1.0) [0]
#   --chunk-size N --left-context-frames N   streaming decoding/export [32, 128]
#   --decode-nj N                 decoding jobs side by side [4]
#   --decode-threads N            torch threads per decoding job [4]
#   --decode-max-duration S       seconds of audio per decoding batch [600]
#   --rtf-utts N                  test-clean utterances for the streaming RTF (0: all) [200]
#   --whisper-model NAME          Whisper rows (scoring/whisper_score.py) when openai-whisper and
#                                 its weights are local; "" skips them [base]
#   --train-extra "OPTS"          appended to every training command [""]
#   --decode-extra "OPTS"         appended to every decoding command [""]
#   --seed N                      [42]
#
# Passed through to prepare.sh (stage 0): every prepare.sh option this recipe does not take itself
# (tools/parse_options.sh, pass_to), e.g. --musan-url URL (prepare.sh --help).  It gives --dataset,
# --data-dir, --dl-dir, --parts, --speed-perturb, --vocab-size, --proportions, --restore-subsets,
# --nj (--prep-nj), --seed and --musan itself.
#
# Stages:
#   0  data (prepare.sh --dataset librispeech): download LibriSpeech + LibriSpeech-PC, manifests
#      with both references, fbank, BPE (--vocab-size), punctuated-proportion subsets p1 0.5 0.35 0.2 0.05,
#      the restoration model (data/librispeech/restore/p1/restore.onnx) and the P' manifest
#      (fbank/librispeech_cuts_train_pauto_p1.jsonl.gz)
#   1  train the Table I systems: punct_p (punct on P), punct_pauto (punct on P'), norm (the
#      cascade's ASR), twodec_p / twodec_pauto (two-decoder on P+N / P'+N), cond_p / cond_pauto
#      (conditioned on P+N / P'+N)
#   2  train conditioned with punctuated proportions 0.5 0.35 0.2 0.05: fixed subsets (cond_pF)
#      and the paper's random per-batch split on the p1 manifest (cond_randF)
#   3  alpha sweep: cond_p_a0.3, cond_p_a0.7 (cond_p has alpha 0.5)
#   4  decode every system on test-clean and test-other, both modes, greedy and modified beam
#      search, simulated streaming (chunk 32, left context 128); norm also as the cascade
#      (--restore-model); Whisper rows when available
#   5  ONNX export of every system (fp32 + int8); streaming RTF of punct_p, twodec_p, cond_p and
#      the cascade at 1 and 2 threads (scoring/measure_rtf.py)
#   6  RESULTS.md (scoring/make_results.py) and EXP_DIR/decode_tables.md (every decoding table)
#
# Every stage skips finished work (a trained epoch-N.pt, a decoding marker, an
# exported model) and an interrupted training resumes from its last epoch.
set -euo pipefail
cd "$(dirname "$0")/../.."

stage=0
stop_stage=6
dry_run=false
data_dir=data
dl_dir=download
exp_dir=egs/librispeech/exp
results_dir=egs/librispeech
systems=all
parts=dev-clean,dev-other,test-clean,test-other,train-clean-100,train-clean-360,train-other-500
speed_perturb=false
musan=true
num_buckets=30
bucket_buffer_size=210000
vocab_size=500
prep_nj=8
encoder=paper
world_size=4
dtype=""
use_fp16=""
num_epochs=40
avg=15
max_duration=1000
num_workers=2
loss=pruned
master_port=12354
decoding_methods=greedy_search,modified_beam_search
beam_size=4
blank_penalty=0
chunk_size=""           # empty: the default geometry of zipformer_pc/layout.py (after path.sh below)
left_context_frames=""
decode_nj=4
decode_threads=4
decode_max_duration=600
rtf_utts=200
whisper_model=base
train_extra=""
decode_extra=""
seed=42
pass_to=prepare.sh  # its options that this recipe does not declare go to it (stage 0)

cmdline="bash egs/librispeech/run.sh $*"
. tools/parse_options.sh
. tools/recipe.sh
# the streaming geometry (chunk, left) and the names of the experiment directory: zipformer_pc/layout.py
read_geometry
chunk_size=${chunk_size:-$chunk}
left_context_frames=${left_context_frames:-$left}
chunk=$chunk_size left=$left_context_frames

is_int() { case "$1" in ''|*[!0-9]*) return 1 ;; *) return 0 ;; esac; }
for v in stage stop_stage vocab_size num_epochs avg world_size decode_nj decode_threads rtf_utts prep_nj num_workers seed \
    num_buckets bucket_buffer_size; do
  is_int "${!v}" || die "--${v//_/-} must be a non-negative integer, not '${!v}'"
done
[ "$stage" -le "$stop_stage" ] || die "--stage ($stage) is after --stop-stage ($stop_stage): nothing to do"
for v in dry_run speed_perturb musan; do
  case "${!v}" in true|false) ;; *) die "--${v//_/-} must be true or false, not '${!v}'" ;; esac
done
case "$use_fp16" in true|false|"") ;; *) die "--use-fp16 must be true or false, not '$use_fp16'" ;; esac
case "$dtype" in
  "") if [ "$use_fp16" = false ]; then dtype=fp32; else dtype=fp16; fi ;;
  fp32|fp16|bf16)
    if [ -n "$use_fp16" ] && [ "$use_fp16" != "$([ "$dtype" = fp16 ] && echo true || echo false)" ]; then
      die "--use-fp16 $use_fp16 contradicts --dtype $dtype (--use-fp16 true is --dtype fp16): give one of them"
    fi ;;
  *) die "--dtype must be fp32, fp16 or bf16, not '$dtype'" ;;
esac
[ "$avg" -ge 1 ] && [ "$avg" -le "$num_epochs" ] || die "--avg ($avg) must be between 1 and --num-epochs ($num_epochs)"
[ "$decode_nj" -ge 1 ] || die "--decode-nj must be at least 1"

# ------------------------------------------------------------ one command runner
# Every command of the recipe (python and prepare.sh) goes through run/run_job
# (tools/recipe.sh); decoding runs --decode-nj jobs side by side.
# Dry run: the command is printed and recorded; at the end tools/check_args.py
# checks every recorded command's arguments in one process (one torch import
# instead of dozens) without running any of them, and nothing is written.
dry_list=""
if [ "$dry_run" = true ]; then
  dry_list=$(mktemp "${TMPDIR:-/tmp}/librispeech_dry_run.XXXXXX")
  trap 'rm -f "$dry_list"' EXIT
fi
nj=$decode_nj
# real runs only: a file the next stage needs
need() { [ "$dry_run" = true ] || [ -e "$1" ] || die "$1 is missing: $2"; }

# ------------------------------------------------------------------ data paths
dir=$data_dir/librispeech
fbank=$dir/fbank
bpe_dir=$dir/lang_bpe_$vocab_size
restore_onnx=$dir/restore/p1/restore.onnx
musan_cuts=$data_dir/musan/musan_cuts.jsonl.gz
# prepare.sh stage 4 combines several training parts into librispeech_cuts_train;
# a single part keeps its own name
train_parts=()
train_hours=0  # per epoch, for the results' budget note (LibriSpeech's part sizes, rounded; measured in stage 6)
for p in ${parts//,/ }; do
  case "$p" in
    train-clean-100) train_hours=$((train_hours + 100)) ;;
    train-clean-360) train_hours=$((train_hours + 360)) ;;
    train-other-500) train_hours=$((train_hours + 500)) ;;
  esac
  case "$p" in train-*) train_parts+=("$p") ;; esac
done
[ "$speed_perturb" = true ] && train_hours=$((train_hours * 3))
[ ${#train_parts[@]} -gt 0 ] || die "--parts has no training part"
if [ ${#train_parts[@]} -eq 1 ]; then train_stem=librispeech_cuts_${train_parts[0]}; else train_stem=librispeech_cuts_train; fi
case ",$parts," in *,dev-clean,*) ;; *) die "--parts must include dev-clean (the validation set)" ;; esac
valid_cuts=$fbank/librispeech_cuts_dev-clean.jsonl.gz
tests=()
for t in test-clean test-other; do case ",$parts," in *,$t,*) tests+=("$t") ;; esac; done
[ ${#tests[@]} -gt 0 ] || die "--parts has neither test-clean nor test-other"
test_sets=""
for t in "${tests[@]}"; do test_sets="$test_sets${test_sets:+,}$t=$fbank/librispeech_cuts_$t.jsonl.gz"; done

# the options stage 0 gives prepare.sh (any other of its options passes through)
prep_args=(--dataset librispeech --data-dir "$data_dir" --dl-dir "$dl_dir" --parts "$parts"
  --speed-perturb "$speed_perturb" --vocab-size "$vocab_size" --proportions 1.0,0.5,0.35,0.2,0.05
  --restore-subsets p1 --nj "$prep_nj" --seed "$seed" --musan "$musan")
check_passed_opts "${prep_args[@]}"

# --------------------------------------------------------------------- systems
# the experiment plan (egs/systems.tsv), shared with egs/synth/run.sh
use_plan "$systems"
[ "$dry_run" = true ] && log "Dry run: commands are printed and their arguments checked; nothing runs."

# ------------------------------------------------------------------- stage 0
if run_this 0; then
  log "Stage 0: data preparation (prepare.sh --dataset librispeech)"
  prepare_data "${prep_args[@]}"
fi

# -------------------------------------------------------------- stages 1 to 3
train_system() {
  local exp=$exp_dir/$name manifest=$fbank/${train_stem}_$(train_cuts_suffix).jsonl.gz start=1
  need "$manifest" "run stage 0 first"
  need "$bpe_dir/bpe.model" "run stage 0 first"
  local musan_opts=()
  if [ "$musan" = true ]; then
    need "$musan_cuts" "run stage 0 first (prepare.sh --musan true), or give --musan false"
    musan_opts=(--musan-cuts "$musan_cuts")
  fi
  if [ "$dry_run" = false ]; then
    start=$(first_epoch "$exp" "$num_epochs")
    if [ "$start" -gt "$num_epochs" ]; then log "  $name: already trained ($num_epochs epochs)"; return 0; fi
  fi
  log "  training $name (epochs $start..$num_epochs; log: $exp/log/)"
  # shellcheck disable=SC2046,SC2086
  train_model "$exp" --encoder "$encoder" \
    --train-cuts "$manifest" --valid-cuts "$valid_cuts" --bpe-model "$bpe_dir/bpe.model" \
    --world-size "$world_size" --dtype "$dtype" --num-epochs "$num_epochs" --start-epoch "$start" \
    --max-duration "$max_duration" --num-workers "$num_workers" --loss "$loss" \
    --num-buckets "$num_buckets" --bucket-buffer-size "$bucket_buffer_size" "${musan_opts[@]}" \
    --master-port "$master_port" --seed "$seed" $(train_options) $train_extra
}

for st in 1 2 3; do
  run_this $st || continue
  case $st in
    1) what="Table I systems" ;; 2) what="punctuated-proportion systems" ;; 3) what="alpha sweep" ;;
  esac
  log "Stage $st: training the $what ($encoder encoder, $num_epochs epochs, $world_size GPUs, $dtype)"
  for_each_system "$st" train_system
done

# ------------------------------------------------------------------- stage 4
# decode_system: the current system with every method (norm also as the cascade)
decode_system() {
  local exp=$exp_dir/$name method variant extra tag variants=("")
  need "$exp/epoch-$num_epochs.pt" "$name is not trained: run stages 1-3"
  if [ "$model_type" = norm ]; then
    need "$restore_onnx" "the restoration model comes from stage 0"
    variants+=("cascade")
  fi
  for method in ${decoding_methods//,/ }; do
    for variant in "${variants[@]}"; do
      extra=()
      [ "$method" = modified_beam_search ] && extra+=(--beam-size "$beam_size")
      [ -n "$variant" ] && extra+=(--restore-model "$restore_onnx")
      tag=$name${variant:+_$variant}
      # shellcheck disable=SC2086
      decode_model --job "decoding of $tag ($method)" --log "$exp/decode-$method${variant:+-$variant}.log" \
        --marker "$exp/.done.decode-$method${variant:+-$variant}" \
        "epoch=$num_epochs avg=$avg chunk=$chunk_size left=$left_context_frames beam=$beam_size blank-penalty=$blank_penalty tests=$test_sets" \
        "$exp" --epoch "$num_epochs" --avg "$avg" --use-averaged-model true --bpe-model "$bpe_dir/bpe.model" \
        --test-sets "$test_sets" --decoding-method "$method" --blank-penalty "$blank_penalty" \
        --max-duration "$decode_max_duration" --num-threads "$decode_threads" "${extra[@]}" $decode_extra
    done
  done
}
if run_this 4; then
  log "Stage 4: decoding (${decoding_methods//,/ }; chunk $chunk_size, left context $left_context_frames; epoch $num_epochs avg $avg)"
  need "$bpe_dir/bpe.model" "run stage 0 first"
  for_each_system - decode_system
  wait_jobs
  # Whisper's rows (scoring/whisper_score.py), when it is installed
  [ -z "$whisper_model" ] ||
    whisper_rows "$whisper_model" "$exp_dir/whisper_$(basename "$whisper_model" .pt)" "$test_sets" \
      --num-threads "$decode_threads"
fi

# ------------------------------------------------------------------- stage 5
# export_system: the current system to ONNX, and its row of the RTF table
export_system() {
  local exp=$exp_dir/$name
  need "$exp/epoch-$num_epochs.pt" "$name is not trained: run stages 1-3"
  if [ "$dry_run" = false ] && [ -f "$exp/onnx/$encoder_int8" ]; then
    log "  $name: already exported"
  else
    log "  exporting $name"
    export_model "$exp" "$chunk_size" --epoch "$num_epochs" --avg "$avg" --tokens "$bpe_dir/tokens.txt" --int8 true
  fi
  # one row per architecture (the plan's rtf column): P' and Table III variants stream like their P twins
  [ "$rtf" = - ] && return 0
  if [ "$model_type" = norm ]; then rtf_systems+=(--system "$rtf=$exp/onnx:$restore_onnx")
  else rtf_systems+=(--system "$rtf=$exp/onnx"); fi
}
if run_this 5; then
  encoder_int8=$(layout export-name --epoch "$num_epochs" --avg "$avg" --chunk "$chunk_size" \
    --left "$left_context_frames" --role encoder --int8) || die "the ONNX export streams: it needs --chunk-size > 0"
  log "Stage 5: ONNX export (chunk $chunk_size, left context $left_context_frames, fp32 + int8) and streaming RTF"
  need "$bpe_dir/tokens.txt" "run stage 0 first"
  rtf_systems=()
  for_each_system - export_system
  if [ ${#rtf_systems[@]} -gt 0 ]; then
    [ "$dry_run" = true ] || [ -f scoring/measure_rtf.py ] || die "scoring/measure_rtf.py does not exist yet"
    log "  streaming RTF on $rtf_utts utterances of ${tests[0]} (nothing else should run meanwhile)"
    measure_rtf "$exp_dir/rtf" "$fbank/librispeech_cuts_${tests[0]}.jsonl.gz" "$rtf_utts" "${rtf_systems[@]}"
  fi
fi

# ------------------------------------------------------------------- stage 6
if run_this 6; then
  log "Stage 6: results"
  [ "$dry_run" = true ] || [ -f scoring/make_results.py ] || die "scoring/make_results.py does not exist yet"
  method=${decoding_methods##*,}
  test_descs=()
  for t in "${tests[@]}"; do test_descs+=(--test-set "$t=LibriSpeech $t"); done
  if [ "$dry_run" = false ] && [ -f "$fbank/${train_stem}_p1.jsonl.gz" ]; then
    # the budget note: the speech actually trained on per epoch (the filtered training cuts,
    # speed-perturbed copies included), not the parts' nominal sizes
    train_hours=$(python3 -c "import sys; from lhotse import load_manifest_lazy as L
print(f'{sum(c.duration for c in L(sys.argv[1])) / 3600:.3f}')" "$fbank/${train_stem}_p1.jsonl.gz")
  fi
  write_results "$dir" "$results_dir" "${test_descs[@]}" --corpus "LibriSpeech ($parts)" \
    --decoding-method "$method" --num-epochs "$num_epochs" --avg "$avg" --encoder "$encoder" \
    --max-duration "$max_duration" --seed "$seed" --train-hours "$train_hours" --command "$cmdline"
  if [ "$dry_run" = false ]; then
    # decode.py's own tables, whatever the test-set names
    out=$exp_dir/decode_tables.md
    : > "$out"
    for f in "$exp_dir"/*/*/results-*.md "$exp_dir"/whisper_*/results-*.md; do
      [ -f "$f" ] && { cat "$f"; echo; } >> "$out"
    done
    log "  every decoding table: $out"
  fi
fi

if [ "$dry_run" = true ]; then
  log "Checking the arguments of $(grep -c . "$dry_list") commands (tools/check_args.py)"
  # scripts written in parallel with this recipe may not exist yet: reported and skipped
  if python3 tools/check_args.py --allow-missing scoring/measure_rtf.py,scoring/make_results.py,scoring/whisper_score.py \
      --commands-file "$dry_list"; then
    log "Dry run OK: every command's arguments parse (nothing was run)"
    exit 0
  fi
  echo "egs/librispeech/run.sh: dry run FAILED: some commands' arguments do not parse (FAIL lines above)" >&2
  exit 1
fi
log "Done (stages $stage..$stop_stage)."
