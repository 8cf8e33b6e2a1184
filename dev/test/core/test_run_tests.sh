#!/usr/bin/env bash
# test_run_tests.sh: dev/test/run_tests.sh's verdicts, on stub suites and on the real GPU suites with
# CUDA made unable to start. Checks: when nvidia-smi lists a GPU (a stub here) and CUDA cannot start
# (CUDA_VISIBLE_DEVICES empty), build/test_attention and build/test_layers each fail, and so does the
# run; a suite exiting 0 without a summary line fails; a crash counts as one failed check; the table
# lists each suite's own counts beside the total; without a GPU the GPU suites are listed as skipped;
# with -j 3 the same verdicts and table, three one-second suites running at once (each starts before
# the first ends), each suite's output whole; a bad -j is refused.
# Prints `test_run_tests: N passed, M failed`.
set -u
cd "$(dirname "$0")/../../.." || exit 1
source dev/test/testing.sh
test_begin test_run_tests
matches() { grep -qE -- "$2" <<< "$1"; }  # matches TEXT REGEX: a line of TEXT matches
stub() {  # stub NAME BODY: an executable script in $tmp/bin
    mkdir -p "$tmp/bin"
    printf '#!/bin/sh\n%s\n' "$2" > "$tmp/bin/$1"; chmod +x "$tmp/bin/$1"
}
stub gpu_smi 'echo "GPU 0: Stub GPU (UUID: GPU-0)"'
mkdir -p "$tmp/gpu"; cp "$tmp/bin/gpu_smi" "$tmp/gpu/nvidia-smi"
stub nogpu_smi 'exit 9'
mkdir -p "$tmp/nogpu"; cp "$tmp/bin/nogpu_smi" "$tmp/nogpu/nvidia-smi"
stub suite_a 'echo "suite_a: 3 passed, 0 failed"'
stub suite_b 'echo "suite_b: 5 passed, 1 failed"; exit 1'
stub silent 'echo "no GPU, skipped"'
stub crash 'kill -SEGV $$'

# stub suites: counts per suite, the total, the verdicts
rc=0; out=$(PATH="$tmp/nogpu:$PATH" bash dev/test/run_tests.sh --cpu "$tmp/bin/suite_a" "$tmp/bin/suite_b" \
            "$tmp/bin/silent" "$tmp/bin/crash" --gpu "$tmp/bin/suite_a" 2>&1) || rc=$?
expect "stub suites: the run fails (rc $rc)" [ "$rc" = 1 ]
expect "stub suites: the total: $out" matches "$out" '^tests: 8 passed, 3 failed$'
expect "stub suites: suite_a's row" matches "$out" '^suite_a +cpu +3 +0'
expect "stub suites: suite_b's row" matches "$out" '^suite_b +cpu +5 +1'
expect "stub suites: exit 0 without a summary fails" matches "$out" '^silent +cpu +0 +1 +no summary'
expect "stub suites: a crash is one failed check" matches "$out" '^crash +cpu +0 +1 +exit'
expect "stub suites: no GPU: the GPU suite is listed as skipped" matches "$out" '^suite_a +gpu +- +- +skipped: no GPU'

# -j: suites at once, the same verdicts and table (in the order given), each output whole
# slowN: writes when it starts and ends (ns), a second apart
for k in 1 2 3; do
    stub "slow$k" "date +%s%N > $tmp/slow$k.start; echo 'slow$k starts'; sleep 1; date +%s%N > $tmp/slow$k.end
echo 'slow$k: $k passed, $((k / 3)) failed'; exit $((k / 3))"
done
rc=0; out=$(PATH="$tmp/nogpu:$PATH" bash dev/test/run_tests.sh -j 3 --cpu "$tmp/bin/slow1" "$tmp/bin/slow2" \
            "$tmp/bin/slow3" "$tmp/bin/suite_a" "$tmp/bin/silent" "$tmp/bin/crash" --gpu "$tmp/bin/suite_a" 2>&1) || rc=$?
expect "-j 3: the run fails (rc $rc)" [ "$rc" = 1 ]
expect "-j 3: the total: $out" matches "$out" '^tests: 9 passed, 3 failed$'
first_end=$(cat "$tmp"/slow*.end 2>/dev/null | sort -n | head -n 1)
last_start=$(cat "$tmp"/slow*.start 2>/dev/null | sort -n | tail -n 1)
before() { [ -n "$1" ] && [ -n "$2" ] && [ "$1" -lt "$2" ]; }  # before A B: times A < B, both known
expect "-j 3: the three slow suites ran at once (the last started before the first ended)" \
    before "$last_start" "$first_end"
table=$(printf '%s\n' "$out" | sed -n '/^suite  *kind/,$p' | awk '{ print $1 }' | tr '\n' ' ')
expect "-j 3: the table in the order given: $table" [ "$table" = "suite slow1 slow2 slow3 suite_a silent crash suite_a tests: " ]
expect "-j 3: slow3's row" matches "$out" '^slow3 +cpu +3 +1'
expect "-j 3: exit 0 without a summary fails" matches "$out" '^silent +cpu +0 +1 +no summary'
expect "-j 3: a crash is one failed check" matches "$out" '^crash +cpu +0 +1 +exit'
expect "-j 3: each suite's output whole, after its header" \
    matches "$(printf '%s\n' "$out" | grep -A2 '^=== slow2$' | tr '\n' '|')" '^=== slow2\|slow2 starts\|slow2: 2 passed'
for bad in 0 x ''; do
    rc=0; err=$(bash dev/test/run_tests.sh -j $bad --cpu "$tmp/bin/suite_a" 2>&1) || rc=$?
    expect "-j '$bad' refused (rc $rc): $err" [ "$rc" = 2 ]
done

# the real GPU suites, a GPU listed, CUDA unable to start
if [ -x build/test_attention ] && [ -x build/test_layers ]; then
    rc=0; out=$(PATH="$tmp/gpu:$PATH" CUDA_VISIBLE_DEVICES="" bash dev/test/run_tests.sh \
                --gpu build/test_attention build/test_layers 2>&1) || rc=$?
    expect "CUDA cannot start: the run fails (rc $rc): $out" [ "$rc" = 1 ]
    expect "CUDA cannot start: test_attention fails" matches "$out" '^test_attention +gpu +0 +1'
    expect "CUDA cannot start: test_layers fails" matches "$out" '^test_layers +gpu +0 +1'
    expect "CUDA cannot start: the suites say so" matches "$out" 'test_attention: CUDA cannot start'
else
    failed=$((failed + 1)); echo "FAIL build/test_attention or build/test_layers not built (make test builds them)"
fi
test_end
