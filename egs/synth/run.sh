#!/usr/bin/env bash
# The full recipe on the embedded synthetic corpus (the README's main job):
# data, every model of the papers' tables, decoding, ONNX export, streaming
# RTF and egs/synth/RESULTS.md.
#
# Usage (from the project root; ./run.sh sets up the environment first):
#   bash run.sh                                   # everything, within an hour on 2 CPU cores
#   bash run.sh --quick true                      # tiny corpus and a few batches: a few minutes
#   bash egs/synth/run.sh --stage 4 --stop-stage 6          # decode, export, tables again
#   bash egs/synth/run.sh --systems cond_p,norm --stage 1   # a subset of the systems
#   bash egs/synth/run.sh --num-batches 800 --num-seeds 3 --exp-dir ~/exp_long --publish true
#                                                 # the long run behind the committed RESULTS.md
#
# Protocol: every system starts from the shipped normalized model
# ($init_dir/norm.pt: encoder, predictor and joiner; new tokens, the P mode
# and a second decoder's weights start as the N decoder's or fresh) and is
# fine-tuned on its own data for --num-batches batches: the realistic setting
# of the paper (a normalized ASR exists, punctuated data is scarce) at a CPU
# budget.  By default the encoder stays frozen (the heads learn; a step costs
# about a tenth); --freeze-encoder false fine-tunes everything, --from-scratch true
# is the papers' protocol (random start, the corpus's own tokenizer; GPUs).
#
# Options (defaults in brackets):
#   --stage N --stop-stage M   stages to run [0 .. 6]
#   --quick true|false         tiny corpus, a few batches, for tests [false]
#   --data-dir DIR             prepared data [data]
#   --exp-dir DIR              experiments [egs/synth/exp]
#   --publish true|false       write RESULTS.md and figures/ to egs/synth (the committed results) [false:
#                              EXP_DIR]
#   --results-dir DIR          where RESULTS.md and figures/ go, overrides --publish
#   --test-real true|false     also decode test_real, recordings of people (prepare.sh --dataset real,
#                              docs/real-speech.md), report it beside Table II, and add Whisper base's
#                              rows to every table when tools/setup_env.sh --whisper installed it
#                              [true; quick: false]
#   --systems LIST             systems to train/decode (names below) [all]
#   --from-scratch true|false  random initialisation and the corpus's own tokenizer [false]
#   --init-dir DIR             the models fine-tuning starts from (norm.pt, bpe.model) [egs/synth/pretrained]
#   --freeze-encoder true|false  fine-tune the predictor/joiner only [true; false with --from-scratch]
#   --num-batches N            training batches per system (the budget) [size preset]
#   --avg A                    decoding averages the weights over the last A of the 4 checkpoint
#                              intervals of each run [2]
#   --max-duration S           seconds of audio per training batch [60]
#   --blank-penalty B          decoding's blank penalty (decode.py --blank-penalty) for the tables: 0 as
#                              the papers and icefall decode (the runtime's default is 1.0) [0]
#   --base-lr LR               peak learning rate [0.045]
#   --num-seeds K              train the proportion systems (Table III and cond_p) with K seeds:
#                              --seed, --seed+1, ...; the tables show mean +- std [1]
#   --encoder NAME             encoder config (from scratch) [tiny]
#   --nj N                     jobs run side by side (each with --threads-per-job threads) [2]
#   --threads-per-job N        torch threads per training/decoding job [1]
#   --rtf-utts N               test utterances for the streaming RTF (0: all) [size preset]
#   --latency-chunks "C ..."   chunk sizes whose caption latency and stability stage 5 measures on cond_p
#                              (empty: none) ["16 32 64"]
#   --latency-utts N           test utterances for the latency measurement (0: all) [50; quick: 2]
#   --load-streams LIST        concurrent streams of the server load benchmark on cond_p, 8 s of audio
#                              each (empty: skip) [1,4,8,16,32; quick: 1,2 of 3 s]
#   --seed N                   the corpus and the first seed of every system [42]
#
# Passed through to prepare.sh (stage 0): every prepare.sh option this recipe does not take itself
# (tools/parse_options.sh, pass_to), e.g.
#   --train-hours H            training speech synthesized by prepare.sh [2; quick: its tiny preset]
#   --test-utts N              utterances in test and in test_ood [100; quick: its tiny preset]
#   --voice-set, --extra-voices, --kokoro-voices, --question-readings, --gcide-hours ...  (prepare.sh --help)
# It sets --dataset, --size, --data-dir, --nj, --seed and (fine-tuning) --bpe-model itself.
#
# Stages:
#   0  data: text, TTS speech, fbank, the tokenizer (the shipped one unless
#      --from-scratch), punctuated-proportion subsets, restoration model and
#      P' references (prepare.sh)
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
#      RTF and accuracy of the ONNX runtime (scoring/measure_rtf.py), 1 and 2 threads;
#      the caption latency and stability of cond_p per chunk size (fp32 exports at the
#      other chunk sizes beside the shipped 32: cond_p/onnx_chunkC), and the streaming
#      server under load with cond_p (benchmarks/server_load.py)
#   6  RESULTS.md with every table, significance marks and plots (scoring/make_results.py)
#
# Every stage is idempotent: a finished training (checkpoint-N.pt present) is
# not run again, an interrupted one resumes from its newest checkpoint;
# decoding and export skip when their outputs exist.
set -euo pipefail
cd "$(dirname "$0")/../.."

stage=0
stop_stage=6
quick=false
data_dir=data
exp_dir=egs/synth/exp
publish=false
results_dir=""
test_real=""
systems=all
from_scratch=false
init_dir=egs/synth/pretrained
freeze_encoder=""
num_batches=""
avg=2
max_duration=60
base_lr=0.045
num_seeds=1
encoder=tiny
nj=2
threads_per_job=1
blank_penalty=0
rtf_utts=""
latency_chunks="16 32 64"
latency_utts=""
declare load_streams  # no value: unset means the size preset, an empty value means none
seed=42
pass_to=prepare.sh  # its options that this recipe does not declare go to it (stage 0)

cmdline="bash egs/synth/run.sh $*"
call_start=$(date +%s)  # before this call writes anything (book_dead_calls below)
. tools/parse_options.sh
. tools/recipe.sh

is_bool() { [ "$1" = true ] || [ "$1" = false ]; }
is_bool "$quick" || die "--quick must be true or false"
is_bool "$publish" || die "--publish must be true or false"
is_bool "$from_scratch" || die "--from-scratch must be true or false"
[ -z "$freeze_encoder" ] || is_bool "$freeze_encoder" || die "--freeze-encoder must be true or false"
# presets: corpus size and budget per system
if [ "$quick" = true ]; then
  size=tiny; def_batches=8; def_rtf=6
  def_latency=2; def_streams=1,2; load_seconds=3; test_real=${test_real:-false}
else
  size=default; def_batches=400; def_rtf=50
  prep_default --train-hours 2
  prep_default --test-utts 100
  def_latency=50; def_streams=1,4,8,16,32; load_seconds=8; test_real=${test_real:-true}
fi
is_bool "$test_real" || die "--test-real must be true or false"
if [ "$from_scratch" = true ]; then
  freeze_encoder=${freeze_encoder:-false}
  [ "$freeze_encoder" = false ] || die "--freeze-encoder true needs a trained encoder: not with --from-scratch true"
else
  freeze_encoder=${freeze_encoder:-true}
  for f in norm.pt bpe.model; do
    [ -f "$init_dir/$f" ] || die "$init_dir/$f is missing: fine-tuning starts from the shipped models (or use --from-scratch true)"
  done
fi
num_batches=${num_batches:-$def_batches}
rtf_utts=${rtf_utts:-$def_rtf}
latency_utts=${latency_utts:-$def_latency}
load_streams=${load_streams-$def_streams}
[[ "$num_batches" =~ ^[0-9]+$ ]] && [ "$num_batches" -ge 4 ] || die "--num-batches must be a number >= 4, not '$num_batches'"
[[ "$num_seeds" =~ ^[0-9]+$ ]] && [ "$num_seeds" -ge 1 ] || die "--num-seeds must be a number >= 1, not '$num_seeds'"
[[ "$avg" =~ ^[0-9]+$ ]] && [ "$avg" -ge 1 ] && [ "$avg" -le 4 ] || die "--avg must be 1, 2, 3 or 4 (of the 4 checkpoint intervals), not '$avg'"
[[ "$latency_chunks" =~ ^[0-9\ ]*$ ]] || die "--latency-chunks must be chunk sizes separated by spaces, not '$latency_chunks'"
[[ "$latency_utts" =~ ^[0-9]+$ ]] || die "--latency-utts must be a number (0: all), not '$latency_utts'"
[[ "$load_streams" =~ ^[0-9,]*$ ]] || die "--load-streams must be a comma list of stream counts, not '$load_streams'"
# four checkpoints per run: batches N/4, N/2, 3N/4 and N (the last is always saved)
save_every=$(( (num_batches + 3) / 4 ))
if [ -z "$results_dir" ]; then
  if [ "$publish" = true ]; then results_dir=egs/synth; else results_dir=$exp_dir; fi
fi
mkdir -p "$exp_dir"

dir=$data_dir/synth
fbank=$dir/fbank
# the streaming geometry (chunk, left) and the names of the experiment directory: zipformer_pc/layout.py
read_geometry
# prepare.sh's options that stage 0 gives (fine-tuning keeps the shipped models' token ids: their
# tokenizer, not a new one)
prep_args=(--dataset synth --size "$size" --data-dir "$data_dir" --nj "$nj" --seed "$seed")
[ "$from_scratch" = true ] || prep_args+=(--bpe-model "$init_dir/bpe.model")
check_passed_opts "${prep_args[@]}"

# ------------------------------------------------------------------ systems
# the experiment plan (egs/systems.tsv), shared with egs/librispeech/run.sh
use_plan "$systems"

# stage times in EXP_DIR/timing.tsv (tools/recipe.sh), with those of calls that died
book_dead_calls

if run_this 0; then
  begin_stage 0 "data preparation (size $size)" "data preparation"
  prepare_data "${prep_args[@]}"
  [ "$test_real" = false ] || prepare_real "$data_dir"
  end_stage 0
fi

if [ "$from_scratch" = true ]; then bpe_dir=$(find_bpe_dir "$dir"); else bpe_dir=$(find_bpe_dir "$dir" "$init_dir/bpe.model"); fi
[ -n "$bpe_dir" ] || die "no suitable tokenizer under $dir (fine-tuning needs $init_dir/bpe.model's): run stage 0 first"

# ------------------------------------------------------------------- runs
# A system trained with seed S (S > --seed) lives in EXP_DIR/NAME-seedS.
run_name() { layout run-name "$name" "$1" --base-seed "$seed"; }
# the seeds of the current system: --num-seeds of them for the proportion systems
seeds_of() {
  local k=1 i
  case ",$tables," in *,III,*) k=$num_seeds ;; esac
  for ((i = 0; i < k; i++)); do echo $((seed + i)); done
}
protocol="fine-tuned from $init_dir/norm.pt"
[ "$freeze_encoder" = true ] && protocol="$protocol (encoder frozen: predictor and joiner trained)"
[ "$from_scratch" = true ] && protocol="trained from a random initialisation"

# ----------------------------------------------------------------- training
train_system() {
  local sd=$1 exp
  exp=$exp_dir/$(run_name "$sd")
  local manifest=$fbank/synth_cuts_train_$(train_cuts_suffix).jsonl.gz
  [ -f "$manifest" ] || die "$manifest is missing: run stage 0 first"
  local b
  b=$(newest_checkpoint "$exp")
  if [ -n "$b" ] && [ "$b" -ge "$num_batches" ]; then
    log "  $(run_name "$sd"): already trained ($b batches)"
    return
  fi
  local extra=()
  local freeze=false
  if [ "$from_scratch" = false ] && [ "$init" != - ]; then
    extra+=(--init-from "$init_dir/$init" --init-modules all --warm-step 0)
    freeze=$freeze_encoder
    # the frozen encoder's outputs, computed once for every system (stage 1)
    [ "$freeze" = true ] && extra+=(--encoder-cache "$(encoder_cache "$init")")
  fi
  # shellcheck disable=SC2046
  train_model --job "training of $(run_name "$sd") (${b:-0}..$num_batches batches)" --log "$exp/train.log" "$exp" \
    --encoder "$encoder" --train-cuts "$manifest" --valid-cuts "$fbank/synth_cuts_dev.jsonl.gz" \
    --bpe-model "$bpe_dir/bpe.model" --num-epochs 1000 --max-batches "$num_batches" \
    --save-every-n "$save_every" --keep-last-k 8 --max-duration "$max_duration" --base-lr "$base_lr" \
    --freeze-encoder "$freeze" --num-threads "$threads_per_job" --seed "$sd" \
    --valid-interval 1000000000 --valid-at-epoch-end false --log-interval 20 $(train_options) "${extra[@]}"
}
# train_seeds: every seed of the current system
train_seeds() { local sd; for sd in $(seeds_of); do train_system "$sd"; done; }

# encoder_cache INIT: the cache of the frozen encoder of $init_dir/INIT
encoder_cache() { echo "$exp_dir/encoder_cache-${1%.pt}.pt"; }
# make_encoder_caches: run by the first training stage of the call (its time counts there)
make_encoder_caches() {
  [ "$from_scratch" = false ] && [ "$freeze_encoder" = true ] || return 0
  for_each_system - make_encoder_cache
}
make_encoder_cache() {
  [ "$init" != - ] || return 0
  local cache want
  cache=$(encoder_cache "$init")
  want="$(md5sum < "$init_dir/$init" | cut -c1-12) $(md5sum < "$fbank/synth_cuts_train_p1.jsonl.gz" | cut -c1-12)"
  done_as "$cache.ok" "$want" && return 0
  log "Encoder outputs of the frozen $init_dir/$init for every training cut (once for all systems): $cache"
  python3 -m zipformer_pc.training.encoder_cache --init-from "$init_dir/$init" \
    --cuts "$fbank/synth_cuts_train_p1.jsonl.gz" --output "$cache" --chunk-size $chunk \
    --left-context-frames $left --num-threads $((nj * threads_per_job)) --force true
  echo "$want" > "$cache.ok"
}

caches_made=false
for st in 1 2 3; do
  run_this $st || continue
  case $st in 1) what="Table I systems" ;; 2) what="Table III systems (punctuated proportion)" ;; 3) what="alpha sweep" ;; esac
  begin_stage $st "training the $what: $num_batches batches of $max_duration s each, $protocol, $nj jobs" \
    "training: $what"
  if [ "$caches_made" = false ]; then make_encoder_caches; caches_made=true; fi
  for_each_system "$st" train_seeds
  wait_jobs
  end_stage $st
done

# ----------------------------------------------------------------- decoding
test_sets="test=$fbank/synth_cuts_test.jsonl.gz,test_ood=$fbank/synth_cuts_test_ood.jsonl.gz"
real_cuts=$data_dir/real/fbank/real_cuts_test_real.jsonl.gz
result_sets=(--test-set "test=in-domain: Jane Austen text, training voices"
  --test-set "test_ood=out-of-domain: Moby Dick text, held-out voices")
if [ "$test_real" = true ]; then
  [ -f "$real_cuts" ] || run_this 0 || die "$real_cuts is missing: run stage 0 (or give --test-real false)"
  test_sets="$test_sets,test_real=$real_cuts"
  result_sets+=(--test-set "test_real=real speech: recordings of people (docs/real-speech.md)"
    --stats "$data_dir/real/stats.md")
fi
restore_onnx=$dir/restore/p1/restore.onnx
weights=(--iter "$num_batches" --avg "$avg")
checkpoint=$(layout tag --iter "$num_batches" --avg "$avg")
# decode_system: every seed of the current system, and norm also as the cascade
decode_system() {
  local sd exp extra tag variants
  for sd in $(seeds_of); do
    exp=$exp_dir/$(run_name "$sd")
    [ -f "$exp/checkpoint-$num_batches.pt" ] || die "$(run_name "$sd") is not trained ($exp/checkpoint-$num_batches.pt missing): run stages 1-3"
    variants=("")
    [ "$model_type" = norm ] && variants+=("--restore-model $restore_onnx")
    for extra in "${variants[@]}"; do
      tag=$(run_name "$sd"); [ -n "$extra" ] && tag=${tag}_cascade
      # shellcheck disable=SC2086
      decode_model --job "decoding of $tag" --log "$exp/decode${extra:+-cascade}.log" \
        --marker "$exp/.done.decode${extra:+-cascade}" \
        "$checkpoint chunk=$chunk left=$left blank-penalty=$blank_penalty test_real=$test_real" \
        "$exp" "${weights[@]}" --bpe-model "$bpe_dir/bpe.model" --test-sets "$test_sets" \
        --decoding-method greedy_search --blank-penalty "$blank_penalty" --num-threads "$threads_per_job" $extra
    done
  done
}
if run_this 4; then
  begin_stage 4 "decoding (greedy search, simulated streaming: chunk $chunk, left context $left)" "decoding"
  for_each_system - decode_system
  wait_jobs
  # Whisper base, the papers' comparison system, on the same sets (tools/setup_env.sh --whisper installs it)
  [ "$test_real" = false ] || whisper_rows base "$exp_dir/whisper_base" "$test_sets" --punct-map '!>.'
  end_stage 4
fi

# ------------------------------------------------------- ONNX export and RTF
encoder_int8=$(layout export-name --tag "$checkpoint" --chunk "$chunk" --left "$left" --role encoder --int8)
# export_system: the current (Table I) system to ONNX, and its row of the RTF table
export_system() {
  local exp=$exp_dir/$name
  if [ -f "$exp/onnx/$encoder_int8" ]; then
    log "  $name: already exported"
  else
    export_model --job "export of $name" --log "$exp/export.log" "$exp" "$chunk" "${weights[@]}" \
      --tokens "$bpe_dir/tokens.txt" --int8 true
  fi
  # one row per architecture (the plan's rtf column): the P' variants stream exactly like their P twins
  [ "$rtf" = - ] && return 0
  if [ "$model_type" = norm ]; then rtf_systems+=(--system "$rtf=$exp/onnx:$restore_onnx")
  else rtf_systems+=(--system "$rtf=$exp/onnx"); fi
}
if run_this 5; then
  begin_stage 5 "ONNX export (chunk $chunk, left context $left, fp32 + int8), streaming RTF, latency and load" \
    "ONNX export, streaming RTF, latency and load"
  rtf_systems=()
  for_each_system 1 export_system
  # latency and load are measured on cond_p, at every chunk size of the latency table:
  # fp32 exports beside the chunk-32 one
  cond=$exp_dir/cond_p
  if ! is_selected cond_p && [ -n "$latency_chunks$load_streams" ]; then
    log "  cond_p is not among --systems: no latency or load measurement"
    latency_chunks=""; load_streams=""
  fi
  latency_systems=()
  for c in $latency_chunks; do
    if [ "$c" = "$chunk" ]; then latency_systems+=(--system "chunk-$c=$cond/onnx"); continue; fi
    out=$cond/onnx_chunk$c
    latency_systems+=(--system "chunk-$c=$out")
    if [ -f "$out/$(layout export-name --tag "$checkpoint" --chunk "$c" --left "$left")" ]; then
      log "  cond_p at chunk $c: already exported"
    else
      rm -rf "$out"  # another checkpoint's export: one encoder per directory
      export_model --job "export of cond_p at chunk $c" --log "$cond/export-chunk$c.log" "$cond" "$c" \
        "${weights[@]}" --tokens "$bpe_dir/tokens.txt" --output-dir "$out"
    fi
  done
  wait_jobs
  if [ ${#rtf_systems[@]} -gt 0 ]; then
    # alone on the machine: nothing else runs while the RTF is measured
    log "  streaming RTF on $rtf_utts test utterances (log: $exp_dir/rtf.log)"
    measure_rtf --log "$exp_dir/rtf.log" "$exp_dir/rtf" "$fbank/synth_cuts_test.jsonl.gz" "$rtf_utts" "${rtf_systems[@]}"
    cat "$exp_dir/rtf.md"
  fi
  if [ ${#latency_systems[@]} -gt 0 ]; then
    log "  caption latency and stability at chunk sizes $latency_chunks on $latency_utts test utterances" \
      "(log: $exp_dir/latency.log)"
    measure_latency --log "$exp_dir/latency.log" "$exp_dir/latency" "$fbank/synth_cuts_test.jsonl.gz" "$latency_utts" \
      "${latency_systems[@]}"
    cat "$exp_dir/latency.md"
  fi
  if [ -n "$load_streams" ]; then
    # exit status 1: a stream's finals differ from the offline runtime's (lost or mixed up)
    log "  server load: $load_streams concurrent streams of $load_seconds s (log: $exp_dir/load.log)"
    python3 benchmarks/server_load.py --model-dir "$cond/onnx" --streams "$load_streams" --seconds "$load_seconds" \
      --output-md "$exp_dir/load.md" --output-json "$exp_dir/load.json" > "$exp_dir/load.log" 2>&1 \
      || { tail -n 20 "$exp_dir/load.log" >&2; die "server load benchmark failed (see $exp_dir/load.log)"; }
    cat "$exp_dir/load.md"
  fi
  end_stage 5
fi

# ------------------------------------------------------------------ results
if run_this 6; then
  begin_stage 6 "results tables and plots" "results"
  write_results "$dir" "$results_dir" "${result_sets[@]}" --checkpoint "$checkpoint" \
    --training "$protocol, $num_batches batches of at most $max_duration s of audio (peak learning rate $base_lr)" \
    --encoder "$encoder" --num-seeds "$num_seeds" --command "$cmdline" --size "$size" --seed "$seed"
  end_stage 6
  cat "$results_dir/RESULTS.md" | sed -n '/^## Table I/,/^## Table II/p' | head -n -1
fi

log "Done (stages $stage..$stop_stage)."
[ -f "$results_dir/RESULTS.md" ] && log "Results: $results_dir/RESULTS.md"
if [ -d "$exp_dir/cond_p/onnx" ]; then
  log "Streaming model (conditioned, both modes): $exp_dir/cond_p/onnx. Stream a wav file through it:"
  echo "  .venv/bin/python -m zipformer_pc.transcribe --model-dir $exp_dir/cond_p/onnx --int8 true YOUR.wav"
fi
