#!/usr/bin/env bash
# Train the shipped models of egs/synth/pretrained/ on a larger synthetic corpus:
# a `norm` model (N only: the seed of the fine-tuning experiments, no P seen)
# and the `conditioned` P+N model users run, started from the norm model.
#
# Training spans sessions: each call trains until the model's total training
# time reaches its budget, resuming from the newest checkpoint-B.pt (training
# time, not wall time: validation is excluded).  Run it in the background:
#   nohup bash egs/synth/pretrain.sh > pretrain.log 2>&1 &
#
# Usage (from the project root):
#   bash egs/synth/pretrain.sh                                   # everything
#   bash egs/synth/pretrain.sh --stage 1 --stop-stage 1 --norm-minutes 300
#   bash egs/synth/pretrain.sh --stage 3 --publish true          # decode, export, copy into egs/synth/pretrained
#   # a fine-tuned run mixed with the weights it started from (WiSE-FT), then stages 3-5 on the mix:
#   python -m zipformer_pc.training.interpolate --exp-dir EXP/conditioned --iter B --avg 1 \
#     --start egs/synth/pretrained/conditioned.pt --weight 0.7 --out-dir EXP_MIX/conditioned
#   bash egs/synth/pretrain.sh --stage 3 --models conditioned --exp-dir EXP_MIX --avg 1 --publish true
#   # new token LMs and question model for the shipped model (its weights and ONNX files as they are):
#   bash egs/synth/pretrain.sh --stage 4 --text-models-only true --text-hours 40 --exp-dir EXP_TEXT --publish true
#   # the shipped model on test_real and Whisper base's rows, into its card (docs/real-speech.md):
#   bash egs/synth/pretrain.sh --stage 4 --real-speech-only true --data-dir DATA --exp-dir EXP_REAL --publish true
#
# Options (defaults in brackets):
#   --stage N --stop-stage M   stages to run [0 .. 5]
#   --data-dir DIR             corpus (kept outside the work tree for long runs) [data_pretrain]
#   --exp-dir DIR              experiments [egs/synth/exp_pretrain]
#   --norm-minutes M           training-time budget of the norm model [240]
#   --cond-minutes M           training-time budget of the conditioned model [240]
#                              (each model's rate cools down towards 0 over the last third of its
#                              budget: train.py's tiny default)
#   --threads N                torch threads of the training process [2]
#   --avg A                    checkpoints (every --save-minutes) averaged for decoding/export [3]
#   --save-minutes M           minutes of training between checkpoints (and validations) [10]
#   --lr-plateau-factor F      multiply the learning rate by F when 3 validations in a row do not
#                              beat the best validation loss by 1% (train.py --lr-plateau-*; the
#                              shipped models' runs made such cuts by hand, each paying; 1: off) [0.4]
#   --publish true|false       stage 5 copies the models into --out-dir [false]
#   --from-shipped true|false  the first call of stages 1-2 continues from the weights in --out-dir
#                              (their architecture, a fresh optimizer); false: the norm model starts
#                              from scratch with today's tiny defaults and the conditioned one from it [true]
#   --out-dir DIR              where stage 5 publishes [egs/synth/pretrained]
#   --seed N                   [42]
#   --models "M ..."           models stages 1-3 and 5 work on; stage 5 keeps the shipped weights and
#                              card lines of the others, e.g. "conditioned" ["norm conditioned"]
#   --latency-chunks "C ..."   chunk sizes whose caption latency stage 4 measures ["16 32 64"]
#   --latency-utts N           test utterances for the latency measurement [50]
#   --text-hours H             stage 4 trains the token LMs and the question model on the training
#                              text of an H-hour corpus of --seed (its text only: prepare.sh stage 0,
#                              local/text_cuts.py) instead of --data-dir's training references; for
#                              a model fine-tuned on a corpus that holds less of the text, or the
#                              same text twice (40: all of Austen, as the shipped models') [""]
#   --lm-gcide-hours G         stage 4's N LM also reads ~G h of Webster's 1913 dictionary text
#                              (prepare.sh --gcide-hours, text only): words beyond Austen's; the P LM
#                              and the question model keep the Austen text [0]
#   --lm-n-prune P             train_lm.py --prune of the N LM (per order: drop n-grams seen at most
#                              this often; more text needs more to stay small) [0,0,1,1,1]
#   --text-models-only true|false  stages 4-5 retrain and republish only the token LMs and the
#                              question model of the models in --out-dir: stage 4 runs the runtime
#                              with --out-dir's ONNX files (no checkpoint needed; no RTF or latency
#                              runs), stage 5 keeps the weights and the card's other tables [false]
#   --real-speech-only true|false  stage 4 runs --out-dir's files on test_real (DATA_DIR/real, made by
#                              stage 0 or prepare.sh --dataset real) and Whisper base on test, test_ood
#                              and test_real (tools/setup_env.sh --whisper); stage 5 writes the card's
#                              real-speech section, nothing else [false]
#   Extra training options for both models: --train-opts "..." [the tiny defaults of train.py]
#
# Passed through to prepare.sh (stage 0): every prepare.sh option this script does not take itself
# (tools/parse_options.sh, pass_to; prepare.sh --help), with these defaults of this script's own:
#   --train-hours H            training speech to synthesize; 40 takes all the Austen text there
#                              is (~38 h), so that few test words are unseen [40]
#   --voice-set default|wide|mixed  training voices (dev, test and test_ood keep the default ones) [mixed]
# and prepare.sh's, e.g. --extra-voices F (share of the training utterances read by the 12 speakers
# of other engines) [0], --kokoro-voices F (by the 24 training speakers of the neural Kokoro-82M
# model) [0], --question-readings K (each training utterance holding a question read K times, by
# other voices) [1], --gcide-hours H (more training text from Webster's 1913 dictionary: vocabulary
# beyond Austen's) [0].  It gives --dataset, --data-dir, --seed, --stop-stage and (when --out-dir
# has one) --bpe-model itself.
#
# Stages:
#   0  corpus: prepare.sh with the options passed through (text, TTS speech,
#      fbank, subsets; the tokenizer of the shipped models when there are any, so that training
#      can continue from them)
#   1  norm model (tiny streaming encoder, N only)
#   2  conditioned model, encoder and predictor/joiner initialised from the norm model
#   3  decode test and test_ood with both models (greedy and modified beam search with 4 paths,
#      simulated streaming chunk 32, left 128)
#   4  ONNX export of the conditioned model (fp32 + int8), its streaming RTF, the
#      latency/stability of its captions per chunk size (extra exports, not shipped), the
#      token LMs lm-P/lm-N.arpa.gz (local/train_lm.py), the question model questions.json.gz
#      (local/train_questions.py) and the runtime's scores with them (greedy and beam search)
#   5  publish: egs/synth/pretrained/ (ONNX, tokens, bpe.model, LMs, question model, fp16 weights
#      of both, MODEL_CARD.md)
set -euo pipefail
cd "$(dirname "$0")/../.."

stage=0
stop_stage=5
data_dir=data_pretrain
exp_dir=egs/synth/exp_pretrain
norm_minutes=240
cond_minutes=240
threads=2
avg=3
save_minutes=10
lr_plateau_factor=0.4
publish=false
from_shipped=true
out_dir=egs/synth/pretrained
seed=42
train_opts=""
models="norm conditioned"
latency_chunks="16 32 64"
latency_utts=50
text_hours=""
text_models_only=false
real_speech_only=false
lm_gcide_hours=0
lm_n_prune=0,0,1,1,1
pass_to=prepare.sh  # its options that this script does not declare go to it (stage 0)

cmdline="bash egs/synth/pretrain.sh $*"
. tools/parse_options.sh
. tools/recipe.sh  # path.sh, log, die, run_this, the shared stages
prep_default --train-hours 40
prep_default --voice-set mixed
train_hours=$(prep_value --train-hours)
prep_args=(--dataset synth --data-dir "$data_dir" --seed "$seed" --stop-stage 5)
[ -f "$out_dir/bpe.model" ] && prep_args+=(--bpe-model "$out_dir/bpe.model")
check_passed_opts "${prep_args[@]}"
case "$from_shipped" in true|false) ;; *) die "--from-shipped takes true or false, not '$from_shipped'" ;; esac
case "$text_models_only" in true|false) ;; *) die "--text-models-only takes true or false, not '$text_models_only'" ;; esac
case "$real_speech_only" in true|false) ;; *) die "--real-speech-only takes true or false, not '$real_speech_only'" ;; esac
[ "$real_speech_only" = false ] || [ "$stage" -ge 4 ] ||
  die "--real-speech-only true measures the shipped models: it runs stages 4-5 only (give --stage 4)"
[ "$text_models_only" = false ] || [ "$stage" -ge 4 ] ||
  die "--text-models-only true keeps the shipped models: it runs stages 4-5 only (give --stage 4)"

dir=$data_dir/synth
fbank=$dir/fbank
read_geometry  # chunk, left
out=$out_dir
mkdir -p "$exp_dir"
for m in $models; do
  case "$m" in norm|conditioned) ;; *) die "--models takes norm and/or conditioned, not '$m'" ;; esac
done
wants() { [[ " $models " == *" $1 "* ]]; }

if run_this 0; then
  log "Stage 0: corpus with $train_hours h of training speech in $dir"
  prepare_data "${prep_args[@]}"
  log "Stage 0: the real-speech test set test_real in $data_dir/real"
  prepare_real "$data_dir"
fi
# recordings of people (prepare.sh --dataset real): decoded and reported beside the synthetic sets
real_cuts=$data_dir/real/fbank/real_cuts_test_real.jsonl.gz
bpe_dir=$(find_bpe_dir "$dir")
[ -n "$bpe_dir" ] || die "no tokenizer under $dir: run stage 0 first"


# train NAME MODEL_TYPE MINUTES EXTRA...: train until MINUTES of training time, resuming
train() {
  local name=$1 mtype=$2 minutes=$3; shift 3
  local exp=$exp_dir/$name b
  b=$(newest_checkpoint "$exp")
  log "Stage: $name ($mtype), until $minutes min of training${b:+, resuming from checkpoint-$b.pt}"
  # shellcheck disable=SC2086
  train_model "$exp" --model-type "$mtype" --encoder tiny \
    --train-cuts "$fbank/synth_cuts_train_p1.jsonl.gz" --valid-cuts "$fbank/synth_cuts_dev.jsonl.gz" \
    --bpe-model "$bpe_dir/bpe.model" --num-epochs 1000 --max-minutes "$minutes" \
    --save-every-minutes "$save_minutes" --save-every-n 1000000000 --keep-last-k 12 \
    --valid-interval 1000000000 --lr-plateau-factor "$lr_plateau_factor" --lr-plateau-patience 3 \
    --num-threads "$threads" --seed "$seed" "$@" $train_opts
}

# On a new machine (no checkpoint of our own yet) training continues from the
# committed weights of $out_dir when they exist: a fresh optimizer and schedule
# on the shipped averaged weights, without the loss warm-up of a model trained
# from scratch (--warm-step 0; resumption keeps it).
shipped_init() {
  local name=$1
  [ "$from_shipped" = true ] || return 0
  if [ -z "$(newest_checkpoint "$exp_dir/$name")" ] && [ -f "$out_dir/$name.pt" ]; then
    log "No checkpoint in $exp_dir/$name: starting from the shipped $out_dir/$name.pt" >&2
    echo --init-from "$out_dir/$name.pt" --init-modules all --warm-step 0
  fi
}

if run_this 1 && wants norm; then
  # shellcheck disable=SC2046
  train norm norm "$norm_minutes" $(shipped_init norm)
fi

if run_this 2 && wants conditioned; then
  # the first call starts from the shipped conditioned model if there is one,
  # else from the norm model; later calls resume their own checkpoints
  read -r -a init <<< "$(shipped_init conditioned)"
  if [ ${#init[@]} -eq 0 ] && [ -z "$(newest_checkpoint "$exp_dir/conditioned")" ]; then
    nb=$(newest_checkpoint "$exp_dir/norm")
    [ -n "$nb" ] || die "the norm model has no checkpoint: run stage 1 first"
    init=(--init-from "$exp_dir/norm/checkpoint-$nb.pt" --init-modules all)
  fi
  train conditioned conditioned "$cond_minutes" "${init[@]}"
fi

test_sets="test=$fbank/synth_cuts_test.jsonl.gz,test_ood=$fbank/synth_cuts_test_ood.jsonl.gz"
runtime_sets="test=$fbank/synth_cuts_test.jsonl.gz test_ood=$fbank/synth_cuts_test_ood.jsonl.gz"
if [ -f "$real_cuts" ]; then
  test_sets="$test_sets,test_real=$real_cuts"
  runtime_sets="$runtime_sets test_real=$real_cuts"
else
  log "No $real_cuts (prepare.sh --dataset real --data-dir $data_dir): test_real is not measured"
fi
if run_this 3; then
  for name in $models; do
    b=$(newest_checkpoint "$exp_dir/$name")
    [ -n "$b" ] || die "$name has no checkpoint: run stages 1-2"
    for method in greedy_search modified_beam_search; do
      log "Stage 3: decoding $name (--iter $b --avg $avg, $method)"
      decode_model "$exp_dir/$name" --iter "$b" --avg "$avg" --bpe-model "$bpe_dir/bpe.model" \
        --test-sets "$test_sets" --decoding-method $method --beam-size 4 --num-threads "$threads"
    done
  done
fi

# corpus_text DIR HOURS GCIDE_HOURS: the training text of a corpus of --seed made without speech
# (prepare.sh stage 0) as DIR/synth_cuts_train_text.jsonl.gz, refused when it holds a sentence of
# dev, test, test_ood or dev_ood (when the corpus has it)
corpus_text() {
  ./prepare.sh --dataset synth --data-dir "$1" --train-hours "$2" --gcide-hours "$3" --seed "$seed" --stop-stage 0
  local held=("$fbank"/synth_cuts_{dev,test,test_ood}.jsonl.gz)
  [ -f "$fbank/synth_cuts_dev_ood.jsonl.gz" ] && held+=("$fbank/synth_cuts_dev_ood.jsonl.gz")
  python3 local/text_cuts.py --text "$1/synth/text/train.jsonl" --out "$1/synth_cuts_train_text.jsonl.gz" \
    --held-out "${held[@]}"
}

# Whisper base on every set (tools/recipe.sh), for --real-speech-only true and the normal stage 4
whisper_base() { whisper_rows base "$exp_dir/whisper_base" "${runtime_sets// /,}" --punct-map '!>.'; }
if run_this 4 && [ "$real_speech_only" = true ]; then
  [ -f "$real_cuts" ] || die "no $real_cuts: run prepare.sh --dataset real --data-dir $data_dir"
  log "Stage 4: the shipped files of $out_dir on test_real (--real-speech-only)"
  rm -rf "$exp_dir/conditioned/onnx"
  mkdir -p "$exp_dir/conditioned/onnx"
  cp "$out_dir"/*.onnx "$out_dir"/tokens.txt "$out_dir"/bpe.model "$out_dir"/*.arpa.gz "$out_dir"/questions.json.gz \
    "$exp_dir/conditioned/onnx/"
  for method in greedy_search modified_beam_search; do
    python3 -m zipformer_pc.transcribe --model-dir "$exp_dir/conditioned/onnx" --cuts "$real_cuts" \
      --decoding-method "$method" --beam-size 4 \
      --output "$exp_dir/conditioned/runtime-$method-test_real.tsv" \
      --scores-json "$exp_dir/conditioned/runtime-$method-test_real.json" \
      > "$exp_dir/conditioned/runtime-$method-test_real.log"
  done
  whisper_base
elif run_this 4; then
  b=
  if [ "$text_models_only" = false ]; then
    b=$(newest_checkpoint "$exp_dir/conditioned")
    [ -n "$b" ] || die "the conditioned model has no checkpoint: run stage 2"
  fi
  # the text of the token LMs and the question model (below), checked first: it may be refused
  text_cuts=$fbank/synth_cuts_train.jsonl.gz
  if [ -n "$text_hours" ]; then
    text_dir=$exp_dir/text-${text_hours}h
    log "Stage 4: the training text of a $text_hours h corpus (seed $seed, no speech) in $text_dir"
    corpus_text "$text_dir" "$text_hours" 0
    text_cuts=$text_dir/synth_cuts_train_text.jsonl.gz
  fi
  lm_n_cuts=$text_cuts
  if [ "$lm_gcide_hours" != 0 ]; then
    gcide_dir=$exp_dir/text-${text_hours:-$train_hours}h-gcide-${lm_gcide_hours}h
    log "Stage 4: the N LM's text, the same Austen text and ~$lm_gcide_hours h of GCIDE's, in $gcide_dir"
    corpus_text "$gcide_dir" "${text_hours:-$train_hours}" "$lm_gcide_hours"
    lm_n_cuts=$gcide_dir/synth_cuts_train_text.jsonl.gz
  fi
  rm -rf "$exp_dir/conditioned/onnx"
  bpe=$bpe_dir/bpe.model
  if [ "$text_models_only" = true ]; then
    log "Stage 4: the shipped ONNX files of $out_dir (--text-models-only)"
    ls "$out_dir"/*.onnx > /dev/null 2>&1 || die "$out_dir ships no ONNX files"
    mkdir -p "$exp_dir/conditioned/onnx"
    cp "$out_dir"/*.onnx "$out_dir/tokens.txt" "$out_dir/bpe.model" "$exp_dir/conditioned/onnx/"
    bpe=$out_dir/bpe.model
  else
    log "Stage 4: ONNX export of the conditioned model (--iter $b --avg $avg) and streaming RTF"
    export_model "$exp_dir/conditioned" "$chunk" --iter "$b" --avg "$avg" --tokens "$bpe_dir/tokens.txt" \
      --int8 true --output-dir "$exp_dir/conditioned/onnx"
    measure_rtf "$exp_dir/rtf" "$fbank/synth_cuts_test.jsonl.gz" 100 --system "conditioned=$exp_dir/conditioned/onnx"
  fi
  log "Stage 4: token LMs (beam-search fusion) and the question model of the training references ($text_cuts)"
  python3 local/train_lm.py --cuts "$text_cuts" --bpe-model "$bpe" --modes P \
    --out-dir "$exp_dir/conditioned/onnx"
  python3 local/train_lm.py --cuts "$lm_n_cuts" --bpe-model "$bpe" --modes N --prune "$lm_n_prune" \
    --out-dir "$exp_dir/conditioned/onnx"
  # LODR: token bigrams of the Austen training text (the predictor's internal LM), subtracted in fusion
  python3 local/train_lm.py --cuts "$text_cuts" --bpe-model "$bpe" --prefix lodr --order 2 --prune "" \
    --out-dir "$exp_dir/conditioned/onnx"
  python3 local/train_questions.py --cuts "$text_cuts" \
    --dev-cuts "$fbank/synth_cuts_dev.jsonl.gz" --out "$exp_dir/conditioned/onnx/questions.json.gz" --seed "$seed"
  # the runtime as users run it (the question model on; beam search fuses the LMs), and beam search
  # without the question model (P as searched, as sherpa-onnx shows it)
  for run in greedy_search modified_beam_search modified_beam_search-noq; do
    method=${run%-noq}
    questions=true
    [ "$run" = "$method" ] || questions=false
    log "Stage 4: the runtime on $(for ts in $runtime_sets; do printf '%s ' "${ts%%=*}"; done)($method, --questions $questions)"
    for ts in $runtime_sets; do
      t=${ts%%=*}
      python3 -m zipformer_pc.transcribe --model-dir "$exp_dir/conditioned/onnx" --cuts "${ts#*=}" \
        --decoding-method "$method" --beam-size 4 --questions "$questions" \
        --output "$exp_dir/conditioned/runtime-$run-$t.tsv" --scores-json "$exp_dir/conditioned/runtime-$run-$t.json" \
        > "$exp_dir/conditioned/runtime-$run-$t.log"
    done
  done
  # Whisper base, the comparison system, on the same sets (when tools/setup_env.sh --whisper installed it)
  whisper_base
  if [ "$text_models_only" = false ]; then
    # latency and stability of the captions per chunk size (exports at 16 and 64 beside the shipped 32)
    systems=(--system "chunk-$chunk=$exp_dir/conditioned/onnx")
    for c in $latency_chunks; do
      [ "$c" = "$chunk" ] && continue
      rm -rf "$exp_dir/conditioned/onnx_chunk$c"
      export_model "$exp_dir/conditioned" "$c" --iter "$b" --avg "$avg" --tokens "$bpe_dir/tokens.txt" --int8 false \
        --output-dir "$exp_dir/conditioned/onnx_chunk$c"
      systems+=(--system "chunk-$c=$exp_dir/conditioned/onnx_chunk$c")
    done
    measure_latency "$exp_dir/latency" "$fbank/synth_cuts_test.jsonl.gz" "$latency_utts" "${systems[@]}"
  fi
fi

if run_this 5; then
  if [ "$publish" != true ]; then
    log "Stage 5 skipped: give --publish true to copy the models into $out"
  else
    log "Stage 5: publishing into $out"
    python3 egs/synth/publish_pretrained.py --exp-dir "$exp_dir" --data-dir "$dir" --out-dir "$out" \
      --avg "$avg" --command "$cmdline" --train-hours "$train_hours" --text-hours "$text_hours" \
      --lm-gcide-hours "$lm_gcide_hours" --models "${models// /,}" --text-models-only "$text_models_only" \
      --real-speech-only "$real_speech_only"
  fi
fi
log "Done (stages $stage..$stop_stage)."
