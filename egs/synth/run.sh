#!/usr/bin/env bash
# The full recipe on the embedded synthetic corpus (the README's main job):
# data, every model of the papers' tables, decoding, ONNX export, streaming
# RTF and egs/synth/RESULTS.md.
#
# Usage (from the project root; ./run.sh sets up the environment first):
#   bash run.sh                                   # everything, about an hour on 2 CPU cores
#   bash run.sh --quick true                      # tiny corpus and short training: a few minutes
#   bash egs/synth/run.sh --stage 4 --stop-stage 6          # decode, export, tables again
#   bash egs/synth/run.sh --systems cond_p,norm --stage 1   # a subset of the systems
#
# Options (defaults in brackets):
#   --stage N --stop-stage M   stages to run [0 .. 6]
#   --quick true|false         tiny corpus, 1 epoch, results under EXP_DIR only [false]
#   --data-dir DIR             prepared data [data]
#   --exp-dir DIR              experiments [egs/synth/exp]
#   --results-dir DIR          where RESULTS.md and figures/ go [egs/synth; EXP_DIR with --quick]
#   --systems LIST             systems to train/decode (names below) [all]
#   --train-hours H            training speech synthesized by prepare.sh [0.4; --quick: tiny preset]
#   --test-utts N              utterances in test and in test_ood [100; --quick: tiny preset]
#   --encoder NAME             encoder config [tiny]
#   --num-epochs N --avg A     training epochs, checkpoints averaged for decoding [size preset]
#   --max-duration S           seconds of audio per training batch [size preset]
#   --nj N                     jobs run side by side (each with --threads-per-job threads) [2]
#   --threads-per-job N        torch threads per training/decoding job [1]
#   --rtf-utts N               test utterances for the streaming RTF (0: all) [size preset]
#   --seed N                   everything random [42]
#
# Stages:
#   0  data: text, TTS speech, fbank, tokenizer, punctuated-proportion subsets,
#      restoration model and P' references (prepare.sh)
#   1  train the Table I systems: punct_p (punct on P), punct_pauto (punct on P'),
#      norm (the cascade's ASR), twodec_p / twodec_pauto (two-decoder on P+N / P'+N),
#      cond_p / cond_pauto (conditioned on P+N / P'+N)
#   2  train the Table III systems: conditioned with punctuated proportions
#      0.5 0.35 0.2 0.05 from the fixed subsets (cond_pF) and from the paper's
#      random per-batch split (cond_randF)
#   3  train the alpha sweep: cond_p_a0.3, cond_p_a0.7 (cond_p has alpha 0.5)
#   4  decode every system on test (in-domain) and test_ood (held-out voices and
#      text), both modes, greedy search, simulated streaming (chunk 32, left 128);
#      norm also as the cascade (restored by the restoration model)
#   5  export the Table I systems to ONNX (fp32 + int8) and measure the streaming
#      RTF and accuracy of the ONNX runtime (scoring/measure_rtf.py), 1 and 2 threads
#   6  RESULTS.md with every table, significance marks and plots (scoring/make_results.py)
#
# Every stage is idempotent: a finished training (epoch-N.pt present) is not
# run again, an interrupted one resumes from its last epoch; decoding and
# export skip when their outputs exist.
set -euo pipefail
cd "$(dirname "$0")/../.."

stage=0
stop_stage=6
quick=false
data_dir=data
exp_dir=egs/synth/exp
results_dir=""
systems=all
train_hours=""
test_utts=""
encoder=tiny
num_epochs=""
avg=""
max_duration=""
nj=2
threads_per_job=1
rtf_utts=""
seed=42

cmdline="bash egs/synth/run.sh $*"
. tools/parse_options.sh
. tools/recipe.sh

case "$quick" in
  true) size=tiny; def_epochs=1; def_avg=1; def_maxdur=40; def_rtf=6; def_hours=""; def_test="" ;;
  false) size=default; def_epochs=1; def_avg=1; def_maxdur=60; def_rtf=50; def_hours=0.4; def_test=100 ;;
  *) die "--quick must be true or false" ;;
esac
num_epochs=${num_epochs:-$def_epochs}
avg=${avg:-$def_avg}
max_duration=${max_duration:-$def_maxdur}
rtf_utts=${rtf_utts:-$def_rtf}
train_hours=${train_hours:-$def_hours}
test_utts=${test_utts:-$def_test}
if [ -z "$results_dir" ]; then
  if [ "$quick" = true ]; then results_dir=$exp_dir; else results_dir=egs/synth; fi
fi
[ "$avg" -le "$num_epochs" ] || die "--avg ($avg) must not exceed --num-epochs ($num_epochs)"
mkdir -p "$exp_dir"

dir=$data_dir/synth
fbank=$dir/fbank
chunk=32
left=128

# ------------------------------------------------------------------ systems
# the experiment plan (egs/systems.tsv), shared with egs/librispeech/run.sh
plan_load egs/systems.tsv
plan_select "$systems"
cp egs/systems.tsv "$exp_dir/systems.tsv"  # the plan this run followed

# time_stage N: record the stage's wall time in EXP_DIR/timing.tsv
stage_start=0
begin_stage() { stage_start=$(date +%s); log "Stage $1: $2"; }
end_stage() {
  local t=$(( $(date +%s) - stage_start ))
  { grep -v "^$1	" "$exp_dir/timing.tsv" 2>/dev/null || true; printf '%s\t%s\t%s\n' "$1" "$t" "$2"; } \
    | sort -n > "$exp_dir/timing.tsv.tmp"
  mv "$exp_dir/timing.tsv.tmp" "$exp_dir/timing.tsv"
  log "Stage $1 took $t s"
}

if run_this 0; then
  begin_stage 0 "data preparation (size $size)"
  prep_opts=()
  [ -n "$train_hours" ] && prep_opts+=(--train-hours "$train_hours")
  [ -n "$test_utts" ] && prep_opts+=(--test-utts "$test_utts")
  ./prepare.sh --dataset synth --size "$size" --data-dir "$data_dir" --nj "$nj" --seed "$seed" "${prep_opts[@]}"
  end_stage 0 "data preparation"
fi

bpe_dir=$(ls -d "$dir"/lang_bpe_* 2>/dev/null | head -n 1 || true)
[ -n "$bpe_dir" ] || die "no tokenizer under $dir: run stage 0 first"

# ----------------------------------------------------------------- training
train_system() {
  local exp=$exp_dir/$name
  local manifest=$fbank/synth_cuts_train_$(train_cuts_suffix).jsonl.gz
  [ -f "$manifest" ] || die "$manifest is missing: run stage 0 first"
  local start
  start=$(first_epoch "$exp" "$num_epochs")
  if [ "$start" -gt "$num_epochs" ]; then
    log "  $name: already trained ($num_epochs epochs)"
    return
  fi
  mkdir -p "$exp"
  # shellcheck disable=SC2046
  set -- python3 -m zipformer_pc.training.train --exp-dir "$exp" --encoder "$encoder" \
    --train-cuts "$manifest" --valid-cuts "$fbank/synth_cuts_dev.jsonl.gz" \
    --bpe-model "$bpe_dir/bpe.model" --num-epochs "$num_epochs" --start-epoch "$start" \
    --max-duration "$max_duration" --num-threads "$threads_per_job" --seed "$seed" \
    --valid-interval 100000 --log-interval 50 $(train_options)
  echo "$*" > "$exp/train_cmd.txt"
  run_job "training of $name (epochs $start..$num_epochs)" "$exp/train.log" "" "" "$@"
}

for st in 1 2 3; do
  run_this $st || continue
  case $st in 1) what="Table I systems" ;; 2) what="Table III systems (punctuated proportion)" ;; 3) what="alpha sweep" ;; esac
  begin_stage $st "training the $what: $num_epochs epochs, encoder $encoder, max duration $max_duration s, $nj jobs"
  for s in "${SYSTEMS[@]}"; do
    system_fields "$s"
    [ "$sys_stage" = "$st" ] && is_selected "$name" || continue
    train_system
  done
  wait_jobs
  end_stage $st "training: $what"
done

# ----------------------------------------------------------------- decoding
test_sets="test=$fbank/synth_cuts_test.jsonl.gz,test_ood=$fbank/synth_cuts_test_ood.jsonl.gz"
restore_onnx=$dir/restore/p1/restore.onnx
if run_this 4; then
  begin_stage 4 "decoding (greedy search, simulated streaming: chunk $chunk, left context $left)"
  for s in "${SYSTEMS[@]}"; do
    system_fields "$s"
    is_selected "$name" || continue
    exp=$exp_dir/$name
    [ -f "$exp/epoch-$num_epochs.pt" ] || die "$name is not trained ($exp/epoch-$num_epochs.pt missing): run stages 1-3"
    variants=("")
    [ "$model_type" = norm ] && variants+=("--restore-model $restore_onnx")
    for extra in "${variants[@]}"; do
      tag=$name; [ -n "$extra" ] && tag=${name}_cascade
      marker=$exp/.done.decode${extra:+-cascade}
      want="epoch=$num_epochs avg=$avg chunk=$chunk left=$left"
      if done_as "$marker" "$want"; then
        log "  $tag: already decoded"; continue
      fi
      # shellcheck disable=SC2086
      run_job "decoding of $tag" "$exp/decode${extra:+-cascade}.log" "$marker" "$want" \
        python3 -m zipformer_pc.decoding.decode --exp-dir "$exp" --epoch "$num_epochs" --avg "$avg" \
        --bpe-model "$bpe_dir/bpe.model" --test-sets "$test_sets" --decoding-method greedy_search \
        --chunk-size $chunk --left-context-frames $left --num-threads "$threads_per_job" $extra
    done
  done
  wait_jobs
  end_stage 4 "decoding"
fi

# ------------------------------------------------------- ONNX export and RTF
suffix=epoch-$num_epochs-avg-$avg-chunk-$chunk-left-$left
if run_this 5; then
  begin_stage 5 "ONNX export (chunk $chunk, left context $left, fp32 + int8) and streaming RTF"
  rtf_systems=()
  for s in "${SYSTEMS[@]}"; do
    system_fields "$s"
    [ "$sys_stage" = 1 ] && is_selected "$name" || continue
    exp=$exp_dir/$name
    if [ -f "$exp/onnx/encoder-$suffix.int8.onnx" ]; then
      log "  $name: already exported"
    else
      run_job "export of $name" "$exp/export.log" "" "" python3 export/export_onnx.py --exp-dir "$exp" \
        --epoch "$num_epochs" --avg "$avg" --tokens "$bpe_dir/tokens.txt" \
        --chunk-size $chunk --left-context-frames $left --int8 true
    fi
    # one row per architecture (the plan's rtf column): the P' variants stream exactly like their P twins
    [ "$rtf" = - ] && continue
    if [ "$model_type" = norm ]; then rtf_systems+=(--system "$rtf=$exp/onnx:$restore_onnx")
    else rtf_systems+=(--system "$rtf=$exp/onnx"); fi
  done
  wait_jobs
  if [ ${#rtf_systems[@]} -gt 0 ]; then
    # alone on the machine: nothing else runs while the RTF is measured
    log "  streaming RTF on $rtf_utts test utterances (log: $exp_dir/rtf.log)"
    python3 scoring/measure_rtf.py "${rtf_systems[@]}" --cuts "$fbank/synth_cuts_test.jsonl.gz" \
      --num-threads 1,2 --int8 false,true --max-utterances "$rtf_utts" \
      --output-md "$exp_dir/rtf.md" --output-json "$exp_dir/rtf.json" > "$exp_dir/rtf.log" 2>&1 \
      || { tail -n 20 "$exp_dir/rtf.log" >&2; die "RTF measurement failed (see $exp_dir/rtf.log)"; }
    cat "$exp_dir/rtf.md"
  fi
  end_stage 5 "ONNX export and streaming RTF"
fi

# ------------------------------------------------------------------ results
if run_this 6; then
  begin_stage 6 "results tables and plots"
  mkdir -p "$results_dir"
  python3 scoring/make_results.py --plan egs/systems.tsv --exp-dir "$exp_dir" --data-dir "$dir" \
    --results-dir "$results_dir" --test-set "test=in-domain: Jane Austen text, training voices" \
    --test-set "test_ood=out-of-domain: Moby Dick text, held-out voices" --num-epochs "$num_epochs" --avg "$avg" --encoder "$encoder" --max-duration "$max_duration" \
    --command "$cmdline" --size "$size" --seed "$seed" --train-hours "$train_hours"
  end_stage 6 "results"
  cat "$results_dir/RESULTS.md" | sed -n '/^## Table I/,/^## Table II/p' | head -n -1
fi

log "Done (stages $stage..$stop_stage)."
[ -f "$results_dir/RESULTS.md" ] && log "Results: $results_dir/RESULTS.md"
if [ -d "$exp_dir/cond_p/onnx" ]; then
  log "Streaming model (conditioned, both modes): $exp_dir/cond_p/onnx. Stream a wav file through it:"
  echo "  .venv/bin/python export/onnx_streaming.py --model-dir $exp_dir/cond_p/onnx --int8 true YOUR.wav"
fi
