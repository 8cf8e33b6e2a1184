#!/usr/bin/env bash
# Runs test binaries and adds up their `name: N passed, M failed` lines.
# usage: run_tests.sh [--gpu BIN...] [--cpu BIN...]   (GPU binaries run only when a GPU is present)
# A binary that exits non-zero without reporting a failure counts as one failed check.
set -u
passed=0; failed=0; mode=cpu
have_gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then have_gpu=1; fi
for arg in "$@"; do
    case "$arg" in
        --cpu) mode=cpu; continue ;;
        --gpu) mode=gpu; continue ;;
    esac
    name=$(basename "$arg")
    if [ "$mode" = gpu ] && [ "$have_gpu" = 0 ]; then
        echo "SKIPPED $name: GPU test, and nvidia-smi finds no GPU on this machine"
        continue
    fi
    echo "=== $name"
    log=$(mktemp)
    "$arg" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    line=$(grep -E '^[A-Za-z0-9_./-]+: [0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
    rm -f "$log"
    p=0; f=0
    if [ -n "$line" ]; then
        p=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed/\1/')
        f=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed/\2/')
    fi
    if [ "$rc" != 0 ] && [ "$f" = 0 ]; then
        echo "FAIL $name: exit code $rc without a failed check (crash?)"; f=1
    fi
    passed=$((passed + p)); failed=$((failed + f))
done
echo "tests: $passed passed, $failed failed"
[ "$failed" = 0 ]
