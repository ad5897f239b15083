#!/usr/bin/env bash
# Your own recordings: a folder of audio files with a transcript file in, a
# streaming model fine-tuned on them out, with its scores (docs/custom-data.md).
#
# Usage (from the project root, after bash tools/setup_env.sh):
#   bash egs/custom/run.sh --custom-dir ~/my_recordings                    # 30 min of training on a CPU
#   bash egs/custom/run.sh --custom-dir ~/cv/en/validated.tsv --minutes 120 --augment default
#   bash egs/custom/run.sh --stage 2 --exp-dir egs/custom/exp              # decode and export again
#   .venv/bin/python -m zipformer_pc.transcribe --model-dir egs/custom/exp/onnx YOUR.wav
#
# Options (defaults in brackets):
#   --stage N --stop-stage M   stages to run [0 .. 3]
#   --data-dir DIR             prepared data go to DIR/custom [data]
#   --exp-dir DIR              the fine-tuned model, its scores and its ONNX export [egs/custom/exp]
#   --output-dir DIR           the ONNX model for zipformer_pc.transcribe --model-dir [EXP_DIR/onnx]
#   --init-dir DIR             the model fine-tuning starts from (conditioned.pt, bpe.model) [egs/synth/pretrained]
#   --minutes M                training time (validation excluded); checkpoints every M/4 [30]
#   --max-batches N            also stop after N training batches (0: no limit) [0]
#   --max-duration S           seconds of audio per batch (train.py) [train.py's]
#   --base-lr LR               peak learning rate (train.py) [train.py's]
#   --augment SPEC             on-the-fly acoustic augmentation (train.py --augment, e.g. default) [none]
#   --freeze-encoder true|false  train the predictor and joiner only [false]
#   --train-opts "..."         more train.py options [""]
#   --avg A                    decoding and export average the weights over the last A checkpoint
#                              intervals (all of them when there are fewer) [2]
#   --int8 true|false          also export the int8 model [true]
#   --threads N                torch threads (prepare.sh --nj, training, decoding) [2]
#   --seed N                   the train/dev/test split and training [42]
#
# Passed through to prepare.sh (stage 0): every prepare.sh option this recipe does not take itself
# (tools/parse_options.sh, pass_to; prepare.sh --help), above all
#   --custom-dir DIR           the recordings: a folder with a Kaldi (text + wav.scp), NeMo (JSON lines)
#                              or CSV/TSV (path,text[,speaker]) transcript, or that file (stage 0)
# It gives --dataset, --data-dir, --bpe-model, --proportions, --seed, --nj and --stop-stage itself.
#
# Stages:
#   0  data: prepare.sh --dataset custom with the shipped tokenizer: train/dev/test manifests (by
#      speaker when there are 3 or more speakers, 5% each held out), fbank, filter; DATA_DIR/custom/custom.md
#   1  fine-tune INIT_DIR/conditioned.pt (every module) on the train part for --minutes; resumes from
#      its newest checkpoint, and a finished run does nothing
#   2  decode the test part, both modes (greedy search, simulated streaming: chunk 32, left 128), with the
#      shipped model and the fine-tuned one: EXP_DIR/scores.md (WER on N, PC-WER on P ...)
#   3  ONNX export (chunk 32, left 128, fp32 and int8) into --output-dir
set -euo pipefail
cd "$(dirname "$0")/../.."

stage=0
stop_stage=3
data_dir=data
exp_dir=egs/custom/exp
output_dir=""
init_dir=egs/synth/pretrained
minutes=30
max_batches=0
max_duration=""
base_lr=""
augment=""
freeze_encoder=false
train_opts=""
avg=2
int8=true
threads=2
seed=42
pass_to=prepare.sh  # its options that this recipe does not declare go to it (stage 0)

. tools/parse_options.sh
. tools/recipe.sh  # path.sh, log, die, run_this, the shared stages

is_bool() { [ "$1" = true ] || [ "$1" = false ]; }
is_bool "$int8" || die "--int8 must be true or false"
is_bool "$freeze_encoder" || die "--freeze-encoder must be true or false"
[[ "$minutes" =~ ^[0-9]*\.?[0-9]+$ ]] || die "--minutes must be a number of minutes, not '$minutes'"
[[ "$max_batches" =~ ^[0-9]+$ ]] || die "--max-batches must be a number (0: no limit), not '$max_batches'"
awk -v m="$minutes" 'BEGIN { exit !(m > 0) }' || die "--minutes must be above 0"
[[ "$avg" =~ ^[0-9]+$ ]] && [ "$avg" -ge 1 ] || die "--avg must be a number >= 1, not '$avg'"
for f in conditioned.pt bpe.model; do
  [ -f "$init_dir/$f" ] || die "$init_dir/$f is missing: fine-tuning starts from the shipped model"
done
output_dir=${output_dir:-$exp_dir/onnx}
dir=$data_dir/custom
fbank=$dir/fbank
read_geometry  # chunk, left
# the shipped tokenizer: fine-tuning keeps the shipped model's token ids; P is kept on every cut that has it
prep_args=(--dataset custom --data-dir "$data_dir" --bpe-model "$init_dir/bpe.model" --proportions 1.0
  --seed "$seed" --nj "$threads" --stop-stage 5)
check_passed_opts "${prep_args[@]}"
mkdir -p "$exp_dir"

if run_this 0; then
  custom_dir=$(prep_value --custom-dir) && [ -n "$custom_dir" ] ||
    die "stage 0 needs --custom-dir DIR: the folder of your recordings and their transcript"
  log "Stage 0: data from $custom_dir into $dir"
  prepare_data "${prep_args[@]}"
fi

bpe_dir=$(find_bpe_dir "$dir" "$init_dir/bpe.model")
[ -n "$bpe_dir" ] || die "no data prepared with $init_dir/bpe.model under $dir: run stage 0 first"

if run_this 1; then
  manifest=$fbank/custom_cuts_train_p1.jsonl.gz
  [ -f "$manifest" ] || die "$manifest is missing: run stage 0 first"
  data_id=$(cat "$dir/.done.subsets")  # the data's identity: folder, transcripts' hash, seed
  b=$(newest_checkpoint "$exp_dir")
  if [ -n "$b" ] && [ "$(cat "$exp_dir/data.txt" 2>/dev/null)" != "$data_id" ]; then
    die "$exp_dir holds a model fine-tuned on other data: give another --exp-dir (or remove its checkpoints)"
  fi
  echo "$data_id" > "$exp_dir/data.txt"
  save_minutes=$(awk -v m="$minutes" 'BEGIN { printf "%g", m / 4 }')
  save_n=1000000000
  [ "$max_batches" -gt 0 ] && save_n=$(( (max_batches + 3) / 4 ))
  extra=()
  [ -n "$max_duration" ] && extra+=(--max-duration "$max_duration")
  [ -n "$base_lr" ] && extra+=(--base-lr "$base_lr")
  [ -n "$augment" ] && extra+=(--augment "$augment")
  # the duration buckets of the sampler (10) need as many cuts: a smaller train part is read without
  [ "$(gzip -cd "$manifest" | wc -l)" -ge 10 ] || extra+=(--num-buckets 1)
  log "Stage 1: fine-tuning $init_dir/conditioned.pt for $minutes min${b:+, resuming from checkpoint-$b.pt}" \
    "(log: $exp_dir/train.log)"
  # shellcheck disable=SC2086
  train_model --log "$exp_dir/train.log" --append "$exp_dir" --model-type conditioned --encoder tiny \
    --train-cuts "$manifest" --valid-cuts "$fbank/custom_cuts_dev.jsonl.gz" --bpe-model "$bpe_dir/bpe.model" \
    --init-from "$init_dir/conditioned.pt" --init-modules all --warm-step 0 --freeze-encoder "$freeze_encoder" \
    --num-epochs 1000 --max-minutes "$minutes" --max-batches "$max_batches" --save-every-minutes "$save_minutes" \
    --save-every-n "$save_n" --keep-last-k 0 --valid-interval 1000000000 --num-threads "$threads" \
    --seed "$seed" "${extra[@]}" $train_opts
  grep -E "Reached|Validation|validation" "$exp_dir/train.log" | tail -n 3 || true
fi

# the newest checkpoint, and the intervals averaged: --avg, or all of them when there are fewer
pick_weights() {
  b=$(newest_checkpoint "$exp_dir")
  [ -n "$b" ] || die "no checkpoint in $exp_dir: run stage 1 first"
  local n
  n=$(find "$exp_dir" -maxdepth 1 -name 'checkpoint-*.pt' | wc -l)
  a=$avg
  [ "$n" -gt "$avg" ] || a=$n
}

if run_this 2; then
  pick_weights
  test_cuts=$fbank/custom_cuts_test.jsonl.gz
  [ -f "$test_cuts" ] || die "$test_cuts is missing: run stage 0 first"
  log "Stage 2: decoding the test part (greedy search, chunk $chunk, left $left) with the shipped and the" \
    "fine-tuned model (checkpoint-$b.pt, --avg $a)"
  # the shipped weights as a checkpoint of their own, decoded the same way
  shipped=$exp_dir/shipped
  mkdir -p "$shipped"
  ib=$(python3 -c "import sys, torch; print(int(torch.load(sys.argv[1], map_location='cpu', weights_only=False)['batch_idx_train']))" \
    "$init_dir/conditioned.pt")
  rm -f "$shipped"/checkpoint-*.pt
  ln -sf "$(realpath "$init_dir/conditioned.pt")" "$shipped/checkpoint-$ib.pt"
  decode() {  # decode EXP_DIR LOG WEIGHTS...
    local exp=$1 logf=$2; shift 2
    decode_model --log "$logf" "$exp" "$@" --bpe-model "$bpe_dir/bpe.model" --test-sets "test=$test_cuts" \
      --decoding-method greedy_search --num-threads "$threads"
  }
  newest_results() { ls -t "$1"/greedy_search/results-*.md | sed -n 1p; }  # the table decode.py just wrote
  decode "$shipped" "$exp_dir/decode-shipped.log" --iter "$ib" --avg 1 --use-averaged-model false
  decode "$exp_dir" "$exp_dir/decode.log" --iter "$b" --avg "$a"
  {
    echo "# Scores on the held-out test part ($test_cuts)"
    echo
    echo "WER on the N output; PC-WER, PuncER, CaseER and PER on the P output (utterances with a P reference)."
    echo
    echo "## Before: the shipped model ($init_dir/conditioned.pt)"
    echo
    cat "$(newest_results "$shipped")"
    echo
    echo "## After: fine-tuned ($exp_dir, checkpoint-$b.pt, --avg $a)"
    echo
    cat "$(newest_results "$exp_dir")"
  } > "$exp_dir/scores.md"
  cat "$exp_dir/scores.md"
fi

if run_this 3; then
  pick_weights
  names=(export-name --iter "$b" --avg "$a" --chunk "$chunk" --left "$left")  # zipformer_pc/layout.py
  fp32=$(python3 -m zipformer_pc.layout "${names[@]}") && q8=$(python3 -m zipformer_pc.layout "${names[@]}" --int8) ||
    die "python3 -m zipformer_pc.layout ${names[*]} failed"
  if [ -f "$output_dir/$fp32" ] && { [ "$int8" = false ] || [ -f "$output_dir/$q8" ]; }; then
    log "Stage 3: $output_dir already holds the export of checkpoint-$b.pt (--avg $a)"
  else
    log "Stage 3: ONNX export of checkpoint-$b.pt (--avg $a, chunk $chunk, left $left) into $output_dir"
    # one model per folder: the files of an earlier export go
    rm -f "$output_dir"/encoder-*.onnx "$output_dir"/decoder-*.onnx "$output_dir"/joiner-*.onnx
    export_model --log "$exp_dir/export.log" "$exp_dir" "$chunk" --iter "$b" --avg "$a" \
      --tokens "$bpe_dir/tokens.txt" --int8 "$int8" --output-dir "$output_dir"
  fi
  log "Transcribe with it:"
  echo "  .venv/bin/python -m zipformer_pc.transcribe --model-dir $output_dir YOUR.wav"
fi
log "Done (stages $stage..$stop_stage)."
