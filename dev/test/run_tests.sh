#!/usr/bin/env bash
# Runs test binaries and scripts and adds up their `name: N passed, M failed` lines.
# usage: run_tests.sh [--gpu BIN...] [--cpu BIN...]   (GPU suites run only when nvidia-smi finds a GPU)
# This runner alone decides what is skipped: once a GPU is found, every GPU suite runs, and one that
# cannot start CUDA fails. A suite counts as failed when it exits non-zero without reporting a failed
# check (a crash, or CUDA that cannot start: one failed check), and when it exits 0 without a summary
# line or a `SKIPPED` line of its own. The end is a table of each suite's counts, then the total.
set -u
passed=0; failed=0; mode=cpu
have_gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then have_gpu=1; fi
rows=()
for arg in "$@"; do
    case "$arg" in
        --cpu) mode=cpu; continue ;;
        --gpu) mode=gpu; continue ;;
    esac
    name=$(basename "$arg")
    case "$arg" in */asan/*) name="asan/$name" ;; esac  # the same test built with the sanitizers
    if [ "$mode" = gpu ] && [ "$have_gpu" = 0 ]; then
        echo "SKIPPED $name: GPU test, and nvidia-smi finds no GPU on this machine"
        rows+=("$(printf '%-26s %-4s %8s %8s  %s' "$name" gpu - - "skipped: no GPU")")
        continue
    fi
    echo "=== $name"
    log=$(mktemp)
    "$arg" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    line=$(grep -E '^[A-Za-z0-9_./-]+: [0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
    skipped=$(grep -E '^SKIPPED ' "$log" | head -n 1)
    rm -f "$log"
    p=0; f=0; note=""
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
    rows+=("$(printf '%-26s %-4s %8s %8s  %s' "$name" "$mode" "$p" "$f" "$note")")
    passed=$((passed + p)); failed=$((failed + f))
done
echo
printf '%-26s %-4s %8s %8s\n' suite kind passed failed
for r in "${rows[@]}"; do echo "$r"; done
echo "tests: $passed passed, $failed failed"
[ "$failed" = 0 ]
