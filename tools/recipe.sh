# Sourced by the recipes (egs/*/run.sh) after tools/parse_options.sh: the
# project's environment (path.sh), the experiment plan (egs/systems.tsv),
# stage selection, logging and job control.
#
# The recipe sets stage and stop_stage, and before running jobs nj (jobs run
# side by side); dry_run=true (optional) prints commands instead of running
# them and records them in $dry_list.

. ./path.sh
recipe=$0  # for messages

log() { echo "$(date '+%Y-%m-%d %H:%M:%S') ($recipe) $*"; }
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
