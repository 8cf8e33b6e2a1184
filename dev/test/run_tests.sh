#!/usr/bin/env bash
# Runs test binaries and scripts and adds up their `name: N passed, M failed` lines.
# usage: run_tests.sh [-j N] [--gpu BIN...] [--cpu BIN...]   (GPU suites run only when nvidia-smi finds a GPU)
# This runner alone decides what is skipped: once a GPU is found, every GPU suite runs, and one that
# cannot start CUDA fails. A suite counts as failed when it exits non-zero without reporting a failed
# check (a crash, or CUDA that cannot start: one failed check), and when it exits 0 without a summary
# line or a `SKIPPED` line of its own. The end is a table of each suite's counts, then the total.
# -j N: up to N suites at once (default 1: one by one, each one's output as it comes). With more, each
# suite's output is printed whole when it ends, in the order they end; the table keeps the order given.
# GPU suites run at once share the GPU: faster on a large one, but their timings are not measurements.
set -u
jobs=1
if [ "${1:-}" = -j ]; then
    jobs=${2:-}
    case "$jobs" in
        '' | *[!0-9]* | 0) echo "run_tests.sh: -j ${jobs:-(missing)}: a number of suites at once, 1 or more" >&2; exit 2 ;;
    esac
    shift 2
fi
passed=0; failed=0; mode=cpu
have_gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then have_gpu=1; fi
paths=(); names=(); kinds=()
for arg in "$@"; do
    case "$arg" in
        --cpu) mode=cpu; continue ;;
        --gpu) mode=gpu; continue ;;
    esac
    name=$(basename "$arg")
    case "$arg" in */asan/*) name="asan/$name" ;; esac  # the same test built with the sanitizers
    paths+=("$arg"); names+=("$name"); kinds+=("$mode")
done
logs=$(mktemp -d "${TMPDIR:-/tmp}/run_tests.XXXXXX")
trap 'rm -rf "$logs"' EXIT
rows=()

# tally I RC: suite I's counts from its output ($logs/I.log) and exit status, into rows[I] and the totals
tally() {
    local i=$1 rc=$2 name=${names[$1]} log=$logs/$1.log line skipped p=0 f=0 note=""
    line=$(grep -E '^[A-Za-z0-9_./-]+: [0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
    skipped=$(grep -E '^SKIPPED ' "$log" | head -n 1)
    if [ -n "$line" ]; then
        p=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed/\1/')
        f=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed/\2/')
    fi
    if [ "$rc" != 0 ] && [ "$f" = 0 ]; then
        echo "FAIL $name: exit code $rc without a failed check (crash, or CUDA cannot start?)"; f=1; note="exit $rc"
    elif [ "$rc" = 0 ] && [ -z "$line" ] && [ -z "$skipped" ]; then
        echo "FAIL $name: exit 0 without a summary line"; f=1; note="no summary"
    elif [ -z "$line" ] && [ -n "$skipped" ]; then
        note="skipped by itself"
    fi
    rows[$i]=$(printf '%-26s %-4s %8s %8s  %s' "$name" "${kinds[$i]}" "$p" "$f" "$note")
    passed=$((passed + p)); failed=$((failed + f))
}

# skipped I: a GPU suite on a machine without a GPU (its row says so); else false
skipped() {
    [ "${kinds[$1]}" = gpu ] && [ "$have_gpu" = 0 ] || return 1
    echo "SKIPPED ${names[$1]}: GPU test, and nvidia-smi finds no GPU on this machine"
    rows[$1]=$(printf '%-26s %-4s %8s %8s  %s' "${names[$1]}" gpu - - "skipped: no GPU")
}

# report_ended: the output and counts of every suite that has ended and is not reported yet
declare -A reported=()
report_ended() {
    local i
    for i in "${!paths[@]}"; do
        if [ -f "$logs/$i.rc" ] && [ -z "${reported[$i]:-}" ]; then
            reported[$i]=1
            echo "=== ${names[$i]}"
            cat "$logs/$i.log"
            tally "$i" "$(cat "$logs/$i.rc")"
        fi
    done
}

if [ "$jobs" = 1 ]; then
    for i in "${!paths[@]}"; do
        skipped "$i" && continue
        echo "=== ${names[$i]}"
        "${paths[$i]}" 2>&1 | tee "$logs/$i.log"
        tally "$i" "${PIPESTATUS[0]}"
    done
else
    running=0
    for i in "${!paths[@]}"; do
        skipped "$i" && continue
        while [ "$running" -ge "$jobs" ]; do
            wait -n
            running=$((running - 1))
            report_ended
        done
        # the status file appears once the suite has ended (written aside, then renamed)
        ( "${paths[$i]}" > "$logs/$i.log" 2>&1; echo $? > "$logs/$i.rc.tmp"; mv "$logs/$i.rc.tmp" "$logs/$i.rc" ) &
        running=$((running + 1))
    done
    wait
    report_ended
fi
echo
printf '%-26s %-4s %8s %8s\n' suite kind passed failed
for i in "${!paths[@]}"; do echo "${rows[$i]}"; done
echo "tests: $passed passed, $failed failed"
[ "$failed" = 0 ]
