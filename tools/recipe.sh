# Sourced by the recipes (egs/synth/run.sh, egs/synth/pretrain.sh,
# egs/librispeech/run.sh, egs/custom/run.sh) after tools/parse_options.sh: the
# project's environment (path.sh), the experiment plan (egs/systems.tsv),
# stage selection, logging, job control and the stages the recipes share.
#
# The recipe sets stage and stop_stage, and before running jobs nj (jobs run
# side by side); dry_run=true (optional) prints commands instead of running
# them and records them in $dry_list.
#
# Options for prepare.sh: a recipe sets pass_to=prepare.sh before it sources
# tools/parse_options.sh, and every prepare.sh option it does not declare
# itself (--voice-set, --train-hours, --gcide-hours, --musan-url, ...) is kept
# in passed_opts and handed to prepare.sh by prepare_data.
#
# The shared stages, one function each ([HOW]: launch's options, below):
#   use_plan LIST                  the plan (egs/systems.tsv) with the systems of LIST ("all" or names)
#                                  selected; copied to $exp_dir/systems.tsv (not in a dry run)
#   for_each_system STAGE CMD...   CMD once per selected system of the plan (of its stage STAGE;
#                                  "-": every stage), with the system's columns as variables
#   read_geometry                  chunk and left: the default streaming geometry (zipformer_pc/layout.py)
#   layout ARGS...                 python3 -m zipformer_pc.layout ARGS: the experiment directory's names
#   prep_default OPTION VALUE      the recipe's default for a prepare.sh option it passes through
#   prep_value OPTION              that option's value as passed through (status 1: not given)
#   prepare_data ARGS...           stage 0: ./prepare.sh ARGS and the options passed through; one of
#                                  ARGS' options passed through as well is an error (check_passed_opts
#                                  ARGS says so before any stage runs)
#   prepare_real DATA_DIR          test_real, recordings of people (prepare.sh --dataset real):
#                                  DATA_DIR/real/fbank/real_cuts_test_real.jsonl.gz
#   find_bpe_dir DIR [BPE_MODEL]   the first DIR/lang_bpe_*/ holding a bpe.model (BPE_MODEL's, when
#                                  given); prints nothing when there is none
#   train_model [HOW] EXP ARGS...  zipformer_pc.training.train --exp-dir EXP ARGS, resumed from EXP's
#                                  newest checkpoint-B.pt (--start-batch B) unless ARGS give
#                                  --start-epoch; EXP/train_cmd.txt holds the command (not in a dry run)
#   decode_model [HOW] EXP ARGS... zipformer_pc.decoding.decode --exp-dir EXP in the geometry $chunk,
#                                  $left, and ARGS: EXP/METHOD/ (recogs, results-*.md, wer-summary-*);
#                                  with --marker FILE TEXT skipped when FILE holds TEXT ("already decoded")
#   export_model [HOW] EXP CHUNK ARGS...  zipformer_pc.export --exp-dir EXP --chunk-size CHUNK
#                                  --left-context-frames $left ARGS: the streaming ONNX files in EXP/onnx
#                                  (or ARGS' --output-dir)
#   measure_rtf [HOW] OUT CUTS N SYSTEMS...      scoring/measure_rtf.py: streaming RTF and accuracy of
#                                  the ONNX runtime (SYSTEMS: --system NAME=DIR[:RESTORE_ONNX] ...) on N
#                                  utterances of CUTS (0: all), 1 and 2 threads, fp32 and int8: OUT.md, OUT.json
#   measure_latency [HOW] OUT CUTS N SYSTEMS...  the same at 1 thread in fp32, with the captions'
#                                  latency and stability (--latency true): OUT.md, OUT.json
#   whisper_rows MODEL OUT_DIR SETS [ARGS...]    Whisper MODEL (scoring/whisper_score.py ARGS) on each
#                                  NAME=CUTS of the comma list SETS: OUT_DIR/ (a set scored there
#                                  already is skipped), logs OUT_DIR-NAME.log; a note, no error, when
#                                  Whisper is not installed (tools/setup_env.sh --whisper)
#   write_results DATA_DIR RESULTS_DIR ARGS...  RESULTS.md (and figures/) in RESULTS_DIR from the
#                                  plan, $exp_dir's decodings and measurements (scoring/make_results.py ARGS)
# HOW, how launch runs a command (any of):
#   --job NAME          in the background, $nj at a time (run_job; wait_jobs waits, and fails when one
#                       failed); without it in the foreground, through run (printed in a dry run)
#   --log FILE          the output goes to FILE (--append: added to it); in the foreground a failure
#                       shows its last 20 lines and stops the recipe ("training failed (see FILE)")
#   --marker FILE TEXT  TEXT goes to FILE when the command succeeded

. ./path.sh
recipe=$0  # for messages

. tools/log.sh
die() { echo "$recipe: $*" >&2; exit 2; }
run_this() { [ "$stage" -le "$1" ] && [ "$stop_stage" -ge "$1" ]; }

# ------------------------------------------------------------------ the plan
# plan_load FILE: SYSTEMS gets one tab-separated row per system, PLAN_NAMES the names.
plan_load() {
  local line
  SYSTEMS=()
  PLAN_NAMES=()
  [ -f "$1" ] || die "$1 is missing"
  while IFS= read -r line; do
    case "$line" in '' | '#'* | name$'\t'*) continue ;; esac
    SYSTEMS+=("$line")
    PLAN_NAMES+=("${line%%$'\t'*}")
  done < "$1"
}

# plan_select LIST: "all" or a comma list of names (an unknown name is an error).
plan_select() {
  local n
  if [ "$1" = all ]; then
    selected=" ${PLAN_NAMES[*]} "
    return 0
  fi
  selected=" ${1//,/ } "
  for n in $selected; do
    case " ${PLAN_NAMES[*]} " in *" $n "*) ;; *) die "unknown system '$n' (known: ${PLAN_NAMES[*]})" ;; esac
  done
}
is_selected() { case "$selected" in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# system_fields ROW: the columns of a plan row as variables.
system_fields() {
  IFS=$'\t' read -r name sys_stage model_type refs subset punct_proportion alpha init tables rtf label \
    description <<< "$1"
}

# The training manifest of the current system, after the corpus's stem
# (SUFFIX of STEM_SUFFIX.jsonl.gz): pF, or pauto_pF for P' references.
train_cuts_suffix() {
  case "$refs" in "P'"*) echo "pauto_$subset" ;; *) echo "$subset" ;; esac
}

# The training options the plan gives the current system.
train_options() {
  local o=(--model-type "$model_type" --alpha "$alpha")
  case "$refs" in "P'"*) o+=(--use-auto-punct true) ;; esac
  [ "$punct_proportion" = - ] || o+=(--punct-proportion "$punct_proportion")
  echo "${o[*]}"
}

# newest_checkpoint EXP: B of the newest checkpoint-B.pt in EXP (empty when none).
newest_checkpoint() { { ls "$1"/checkpoint-*.pt 2>/dev/null || true; } | sed 's/.*checkpoint-\([0-9]*\)\.pt/\1/' | sort -n | tail -n 1; }

# first_epoch EXP NUM_EPOCHS: the epoch a training resumes at (1 when no
# epoch-E.pt is there; NUM_EPOCHS + 1 when it is finished).
first_epoch() {
  local e
  for ((e = $2; e >= 1; e--)); do
    if [ -f "$1/epoch-$e.pt" ]; then echo $((e + 1)); return 0; fi
  done
  echo 1
}

# ------------------------------------------------------------- job control
quoted() {
  local a out="" q="'"
  for a in "$@"; do
    if [[ -n "$a" && "$a" =~ ^[A-Za-z0-9_./=:,+@%-]+$ ]]; then out+="$a "; else out+="'${a//$q/$q\\$q$q}' "; fi
  done
  echo "${out% }"
}

# run CMD...: run it, or with dry_run=true print it and record it in $dry_list.
run() {
  if [ "${dry_run:-false}" = true ]; then
    local line
    line=$(quoted "$@")
    echo "[dry-run] $line"
    echo "$line" >> "$dry_list"
    return 0
  fi
  "$@"
}

# done_as MARKER TEXT: the step that writes MARKER finished with these options.
done_as() { [ "${dry_run:-false}" = false ] && [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }

# run_job NAME LOGFILE MARKER TEXT CMD...: CMD in the background (at most $nj
# at a time), its output in LOGFILE; on success TEXT goes to MARKER (no
# marker: give "" ""). wait_jobs waits for them all and fails if one failed.
job_pids=()
job_names=()
run_job() {
  local name=$1 logf=$2 marker=$3 want=$4
  shift 4
  if [ "${dry_run:-false}" = true ]; then
    run "$@"
    return 0
  fi
  while [ "$(jobs -rp | wc -l)" -ge "$nj" ]; do wait -n || true; done
  log "  start $name (log: $logf)"
  ( "$@" > "$logf" 2>&1 && { [ -z "$marker" ] || echo "$want" > "$marker"; } ) &
  job_pids+=($!)
  job_names+=("$name")
}
wait_jobs() {
  local i failed=0
  for i in "${!job_pids[@]}"; do
    wait "${job_pids[$i]}" || { echo "$recipe: ${job_names[$i]} failed (see its log)" >&2; failed=1; }
  done
  job_pids=()
  job_names=()
  [ "$failed" -eq 0 ] || exit 1
}

# ------------------------------------------------------------- stage times
# EXP_DIR/timing.tsv gets a row per stage and call of the recipe
# (stage, seconds, description), summed by make_results.py into the wall time
# of the run.  A stage in progress is a "running" row with its start time: when
# a call dies in it (a session's end), the next call books that stage's time up
# to the last file the dead call wrote under EXP_DIR, so a run resumed across
# sessions reports all its time.
# The recipe sets exp_dir, and call_start=$(date +%s) before it writes anything.
stage_start=0
book_dead_calls() {
  local f=$exp_dir/timing.tsv st secs desc state start last
  [ -f "$f" ] && grep -q "$(printf '\trunning\t')" "$f" || return 0
  while IFS=$'\t' read -r st secs desc state start; do
    if [ "$state" = running ]; then
      last=$(find "$exp_dir" -type f -newermt "@$start" ! -newermt "@$call_start" -printf '%T@\n' 2>/dev/null \
             | sort -n | tail -n 1)
      last=${last%.*}
      secs=$(( ${last:-$start} - start ))
      state=interrupted
      log "Stage $st of an earlier call was interrupted: $secs s booked (up to its last write under $exp_dir)" >&2
    fi
    printf '%s\t%s\t%s%s\n' "$st" "$secs" "$desc" "${state:+$(printf '\t%s' "$state")}"
  done < "$f" > "$f.tmp"
  mv "$f.tmp" "$f"
}
# begin_stage N LOG_TEXT DESCRIPTION ... end_stage N
begin_stage() {
  stage_start=$(date +%s)
  log "Stage $1: $2"
  printf '%s\t0\t%s\trunning\t%s\n' "$1" "$3" "$stage_start" >> "$exp_dir/timing.tsv"
}
end_stage() {
  local t=$(( $(date +%s) - stage_start ))
  awk -F'\t' -v OFS='\t' -v st="$1" -v start="$stage_start" -v t="$t" \
    '$1 == st && $4 == "running" && $5 == start { print $1, t, $3; next } { print }' \
    "$exp_dir/timing.tsv" > "$exp_dir/timing.tsv.tmp"
  mv "$exp_dir/timing.tsv.tmp" "$exp_dir/timing.tsv"
  log "Stage $1 took $t s"
}

# -------------------------------------------------------- the shared stages
# (described at the top of this file)
layout() { python3 -m zipformer_pc.layout "$@"; }
read_geometry() { read -r chunk left < <(layout geometry) || die "python3 -m zipformer_pc.layout geometry failed"; }

use_plan() {
  plan_load egs/systems.tsv
  plan_select "$1"
  if [ "${dry_run:-false}" = false ]; then
    mkdir -p "$exp_dir"
    cp egs/systems.tsv "$exp_dir/systems.tsv"  # the plan this run followed
  fi
}
for_each_system() {
  local st=$1 s
  shift
  for s in "${SYSTEMS[@]}"; do
    system_fields "$s"
    is_selected "$name" && { [ "$st" = - ] || [ "$sys_stage" = "$st" ]; } || continue
    "$@"
  done
}

prep_value() {
  local i found=1
  PREP_VALUE=""
  for ((i = 0; i < ${#passed_opts[@]}; i += 2)); do
    [ "${passed_opts[$i]}" = "$1" ] && { PREP_VALUE=${passed_opts[$((i + 1))]}; found=0; }
  done
  echo "$PREP_VALUE"
  return $found
}
prep_default() { prep_value "$1" > /dev/null || [ -z "$2" ] || passed_opts+=("$1" "$2"); }
check_passed_opts() {
  local i a
  for ((i = 0; i < ${#passed_opts[@]}; i += 2)); do
    for a in "$@"; do
      [ "$a" != "${passed_opts[$i]}" ] ||
        die "${passed_opts[$i]} is not passed through to prepare.sh: this recipe gives it itself"
    done
  done
}
prepare_data() {
  check_passed_opts "$@"
  run ./prepare.sh "$@" "${passed_opts[@]}"
}
prepare_real() { run ./prepare.sh --dataset real --data-dir "$1" --dl-dir "$1/download"; }

find_bpe_dir() {
  local d
  for d in "$1"/lang_bpe_*; do
    [ -f "$d/bpe.model" ] || continue
    if [ -z "${2:-}" ] || cmp -s "$d/bpe.model" "$2"; then echo "$d"; return 0; fi
  done
}

# launch_opts ARGS...: the HOW options at the start of ARGS in the array LAUNCH (a stage function
# shifts them off), its --job name and --marker in LAUNCH_JOB, LAUNCH_MARKER and LAUNCH_TEXT
launch_opts() {
  LAUNCH=()
  LAUNCH_JOB=""
  LAUNCH_MARKER=""
  LAUNCH_TEXT=""
  while :; do
    case "${1:-}" in
      --job) LAUNCH_JOB=$2; LAUNCH+=("$1" "$2"); shift 2 ;;
      --log) LAUNCH+=("$1" "$2"); shift 2 ;;
      --append) LAUNCH+=("$1"); shift ;;
      --marker) LAUNCH_MARKER=$2; LAUNCH_TEXT=$3; LAUNCH+=("$1" "$2" "$3"); shift 3 ;;
      *) return 0 ;;
    esac
  done
}
# launch WHAT [HOW] CMD...: CMD as HOW says; WHAT names it in a failure ("WHAT failed (see LOG)")
launch() {
  local what=$1
  shift
  launch_opts "$@"
  shift ${#LAUNCH[@]}
  local job=$LAUNCH_JOB marker=$LAUNCH_MARKER want=$LAUNCH_TEXT logf="" append=false i
  for ((i = 0; i < ${#LAUNCH[@]}; i++)); do
    case "${LAUNCH[$i]}" in --log) logf=${LAUNCH[$((i + 1))]} ;; --append) append=true ;; esac
  done
  if [ -n "$job" ]; then
    run_job "$job" "${logf:-/dev/null}" "$marker" "$want" "$@"
    return 0
  fi
  if [ "${dry_run:-false}" = true ]; then
    run "$@"
    return 0
  fi
  if [ -z "$logf" ]; then
    "$@" || exit $?
  elif [ "$append" = true ]; then
    "$@" >> "$logf" 2>&1 || { tail -n 20 "$logf" >&2; die "$what failed (see $logf)"; }
  else
    "$@" > "$logf" 2>&1 || { tail -n 20 "$logf" >&2; die "$what failed (see $logf)"; }
  fi
  [ -z "$marker" ] || echo "$want" > "$marker"
}

train_model() {
  launch_opts "$@"
  local how=("${LAUNCH[@]}") exp b
  shift ${#how[@]}
  exp=$1
  shift
  set -- python3 -m zipformer_pc.training.train --exp-dir "$exp" "$@"
  if [[ " $* " != *" --start-epoch "* ]]; then
    b=$(newest_checkpoint "$exp")
    [ -z "$b" ] || set -- "$@" --start-batch "$b"
  fi
  if [ "${dry_run:-false}" = false ]; then
    mkdir -p "$exp"
    echo "$*" > "$exp/train_cmd.txt"
  fi
  launch training "${how[@]}" "$@"
}

decode_model() {
  launch_opts "$@"
  local how=("${LAUNCH[@]}") job=$LAUNCH_JOB marker=$LAUNCH_MARKER want=$LAUNCH_TEXT exp
  shift ${#how[@]}
  exp=$1
  shift
  if [ -n "$marker" ] && done_as "$marker" "$want"; then
    log "  ${job#decoding of }: already decoded"
    return 0
  fi
  launch decoding "${how[@]}" python3 -m zipformer_pc.decoding.decode --exp-dir "$exp" \
    --chunk-size "$chunk" --left-context-frames "$left" "$@"
}

export_model() {
  launch_opts "$@"
  local how=("${LAUNCH[@]}") exp c
  shift ${#how[@]}
  exp=$1 c=$2
  shift 2
  launch export "${how[@]}" python3 -m zipformer_pc.export --exp-dir "$exp" --chunk-size "$c" \
    --left-context-frames "$left" "$@"
}

measure_rtf() {
  launch_opts "$@"
  local how=("${LAUNCH[@]}") out cuts n
  shift ${#how[@]}
  out=$1 cuts=$2 n=$3
  shift 3
  launch "RTF measurement" "${how[@]}" python3 scoring/measure_rtf.py "$@" --cuts "$cuts" --num-threads 1,2 \
    --int8 false,true --max-utterances "$n" --output-md "$out.md" --output-json "$out.json"
}
measure_latency() {
  launch_opts "$@"
  local how=("${LAUNCH[@]}") out cuts n
  shift ${#how[@]}
  out=$1 cuts=$2 n=$3
  shift 3
  launch "latency measurement" "${how[@]}" python3 scoring/measure_rtf.py "$@" --cuts "$cuts" --num-threads 1 \
    --int8 false --max-utterances "$n" --latency true --output-md "$out.md" --output-json "$out.json"
}

whisper_rows() {
  local model=$1 out=$2 sets=$3 ts t rc cmd
  shift 3
  for ts in ${sets//,/ }; do
    t=${ts%%=*}
    cmd=(python3 scoring/whisper_score.py --cuts "${ts#*=}" --test-name "$t" --model "$model" --output-dir "$out" "$@")
    # Whisper's stored text of the same audio (scoring/whisper_store/) is scored instead of transcribing again
    [ ! -d scoring/whisper_store ] || cmd+=(--reuse scoring/whisper_store)
    if [ "${dry_run:-false}" = true ]; then
      run "${cmd[@]}"
      continue
    fi
    [ -f "$out/$(layout result-name --kind wer-summary --test "$t" --mode N --suffix "whisper-$(basename "$model" .pt)")" ] &&
      continue
    rc=0
    "${cmd[@]}" > "$out-$t.log" 2>&1 || rc=$?
    case $rc in
      0) ;;
      3|4) log "  Whisper rows skipped (bash tools/setup_env.sh --whisper installs faster-whisper and its model)"; break ;;
      *) die "scoring/whisper_score.py failed on $t (exit $rc): $out-$t.log" ;;
    esac
  done
}

write_results() {
  local data=$1 results=$2
  shift 2
  [ "${dry_run:-false}" = true ] || mkdir -p "$results"
  run python3 scoring/make_results.py --plan egs/systems.tsv --exp-dir "$exp_dir" --data-dir "$data" \
    --results-dir "$results" "$@"
}
