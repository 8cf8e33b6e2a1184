#!/usr/bin/env bash
# test_compare_builds.sh: scripts/compare_builds.sh with stand-ins for train_gpt and nvidia-smi (no GPU
# needed). Each stand-in build logs its label to an order file and writes the trainer's log lines (per
# step: ms and tok_s) and its memory line. Checks: the builds run in turn, round by round; a row's
# ranges, mean ms and memory come from steps -from..last of each run (numbers chosen so that any other
# step changes them); the flags after -- reach the builds instead of the defaults, with -out added; a
# build that fails shows as failed and the script exits 1; bad arguments (no '=', a missing binary, a
# label twice, -out among the flags, -rounds 0) exit 2 naming what was wrong; no GPU: SKIPPED, exit 0;
# no memory line: '-' in its run's place; a relative binary and log folder are the caller's.
# Prints `test_compare_builds: N passed, M failed`.
set -uo pipefail
cd "$(dirname "$0")/../../.."
script=$PWD/scripts/compare_builds.sh
source dev/test/testing.sh
test_begin test_compare_builds

# a stand-in build: LABEL, the tok_s of steps 1..4, the ms of steps 1..4, memory MiB, exit code
stub() {
    cat > "$tmp/$1" <<STUB
#!/bin/bash
echo "$1" >> "$tmp/order"
echo "\$*" > "$tmp/args_$1"
out=
while [ \$# -gt 0 ]; do [ "\$1" = -out ] && out=\$2; shift; done
mkdir -p "\$out"
t=($2); m=($3)
for s in 1 2 3 4; do
    echo "step \$s train_loss 5.0 norm 1.0 lr 1.0000e-03 ms \${m[\$((s - 1))]} tok_s \${t[\$((s - 1))]}" >> "\$out/log.txt"
    echo "step \$s/4 | \${t[\$((s - 1))]} tok/s"
    [ \$s = 1 ] && [ -n "$4" ] && echo "memory: $4.4 MiB of 143771.0 MiB in use on the GPU after the first step"
done
exit $5
STUB
    chmod +x "$tmp/$1"
}
stub alpha "900000 500000 520000 510000" "300.0 100.0 110.0 120.0" 22181 0
stub beta "900000 600000 640000 620000" "300.0 90.0 95.0 100.0" 1234567 0
stub broken "1 2 3 4" "1 1 1 1" 100 3
stub nomem "900000 500000 520000 510000" "300.0 100.0 110.0 120.0" "" 0
mkdir -p "$tmp/bin"
printf '#!/bin/sh\necho "NVIDIA H200"\n' > "$tmp/bin/nvidia-smi"; chmod +x "$tmp/bin/nvidia-smi"
run() { out=$(PATH="$tmp/bin:$PATH" COMPARE_DIR="$tmp/logs" bash "$script" "$@" 2> "$tmp/err"); rc=$?; err=$(cat "$tmp/err"); }

: > "$tmp/order"
run alpha="$tmp/alpha" beta="$tmp/beta"
expect "two builds: exit 0 (rc $rc; $err)" [ "$rc" = 0 ]
expect "two builds, two rounds: run in turn (order: $(tr '\n' ' ' < "$tmp/order"))" \
    [ "$(tr '\n' ' ' < "$tmp/order")" = "alpha beta alpha beta " ]
expect "alpha's row: steps 2-4, two runs, mean ms, memory with a separator ($out)" \
    has "$out" "| alpha | 500.0k–520.0k, 500.0k–520.0k | 110.0, 110.0 | 22,181 MiB, 22,181 MiB |"
expect "beta's row ($out)" has "$out" "| beta | 600.0k–640.0k, 600.0k–640.0k | 95.0, 95.0 | 1,234,567 MiB, 1,234,567 MiB |"
expect "the GPU's name and the rounds in the header ($out)" has "$out" "on one NVIDIA H200, the builds in one run, 2 round(s)"
expect "the default flags with -out added reach the build ($(cat "$tmp/args_alpha"))" \
    has "$(cat "$tmp/args_alpha")" "-depth 12 -b 64 -t 1024 -steps 6 -val_every 0 -val_batches 1 -sample_tokens 0 -keep 0 -out $tmp/logs/alpha_r2"
expect "the commands listed ($out)" has "$out" "- alpha: \`$tmp/alpha -depth 12 -b 64"

: > "$tmp/order"
run -rounds 1 -from 3 alpha="$tmp/alpha" -- -depth 6 -steps 4
expect "-rounds 1: one run ($(tr '\n' ' ' < "$tmp/order"))" [ "$(tr '\n' ' ' < "$tmp/order")" = "alpha " ]
expect "-from 3: steps 3-4 ($out)" has "$out" "| alpha | 510.0k–520.0k | 115.0 | 22,181 MiB |"
expect "the flags after -- instead of the defaults ($(cat "$tmp/args_alpha"))" \
    [ "$(cat "$tmp/args_alpha")" = "-depth 6 -steps 4 -out $tmp/logs/alpha_r1" ]

run -rounds 1 alpha="$tmp/alpha" broken="$tmp/broken"
expect "a failing build: exit 1 (rc $rc)" [ "$rc" = 1 ]
expect "a failing build: its cell says failed ($out)" has "$out" "| broken | failed (exit 3) | - |"
expect "a failing build: a note on stderr ($err)" has "$err" "broken round 1 failed (exit 3"
expect "a failing build: the others still measured ($out)" has "$out" "| alpha | 500.0k–520.0k |"

run -rounds 2 nomem="$tmp/nomem"
expect "no memory line: '-' in each run's place ($out)" has "$out" "| nomem | 500.0k–520.0k, 500.0k–520.0k | 110.0, 110.0 | -, - |"

out=$(cd "$tmp" && PATH="$tmp/bin:$PATH" COMPARE_DIR=rel_logs bash "$script" -rounds 1 alpha=./alpha 2>&1); rc=$?
expect "a relative binary and COMPARE_DIR, from the caller's directory: exit 0 (rc $rc; $out)" [ "$rc" = 0 ]
expect "a relative COMPARE_DIR: the logs there" test -s "$tmp/rel_logs/alpha_r1/log.txt"

run alpha
expect "no '=': exit 2 (rc $rc; $err)" [ "$rc" = 2 ]
run alpha="$tmp/nothing"
expect "a missing binary: exit 2 naming it (rc $rc; $err)" \
    bash -c '[ "$1" = 2 ] && printf "%s" "$2" | grep -qF "nothing is not an executable"' _ "$rc" "$err"
run alpha="$tmp/alpha" alpha="$tmp/beta"
expect "a label twice: exit 2 (rc $rc; $err)" bash -c '[ "$1" = 2 ] && printf "%s" "$2" | grep -qF "given twice"' _ "$rc" "$err"
run alpha="$tmp/alpha" -- -steps 4 -out x
expect "-out among the flags: exit 2 (rc $rc; $err)" bash -c '[ "$1" = 2 ] && printf "%s" "$2" | grep -qF "must not set -out"' _ "$rc" "$err"
run -rounds 0 alpha="$tmp/alpha"
expect "-rounds 0: exit 2 (rc $rc; $err)" [ "$rc" = 2 ]
run
expect "no build: exit 2 (rc $rc; $err)" bash -c '[ "$1" = 2 ] && printf "%s" "$2" | grep -qF "no build given"' _ "$rc" "$err"

printf '#!/bin/sh\nexit 9\n' > "$tmp/bin/nvidia-smi"
: > "$tmp/order"
run alpha="$tmp/alpha"
expect "no GPU: SKIPPED, exit 0, nothing run (rc $rc; $out)" \
    bash -c '[ "$1" = 0 ] && printf "%s" "$2" | grep -q "^SKIPPED" && [ ! -s "$3" ]' _ "$rc" "$out" "$tmp/order"

test_end
