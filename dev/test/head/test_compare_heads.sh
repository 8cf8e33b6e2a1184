#!/usr/bin/env bash
# test_compare_heads.sh: scripts/compare_heads.sh run with a stand-in for train_gpt (TRAINER=, no GPU
# needed). The stand-in prints the trainer's memory line and its closing `average step` line, tok/s and
# MFU made from B and the head so that each row shows which run it came from, and fails as an out-of-
# memory run does above a batch size per head. Checks: one heads.tsv row per (head, B) that ran, with
# memory, tok/s and MFU parsed from that run's lines; each head stops at its first failing B, the failure
# named; the summary's largest batches; DEPTH, T, STEPS and the head reach the trainer; a trainer that
# prints no MFU (a GPU without a known peak) gets '-' in that column; the bisection between the list's
# last B that ran and its first that did not (REFINE), its rows in order, and REFINE=0 and a bad REFINE.
# Prints `test_compare_heads: N passed, M failed`.
set -uo pipefail
cd "$(dirname "$0")/../../.."
script=$PWD/scripts/compare_heads.sh
source dev/test/testing.sh
test_begin test_compare_heads

# the stand-in: fails above MAX_fused / MAX_unfused; memory 100·B MiB (+7 unfused), tok/s 1000·B (+1
# unfused), MFU B/4 % (+0.5 unfused), no MFU when NO_MFU is set
cat > "$tmp/trainer" <<'STUB'
#!/bin/bash
echo "$*" >> "$STUB_ARGS"
while [ $# -gt 0 ]; do
    case "$1" in -b) B=$2 ;; -head) head=$2 ;; esac
    shift
done
max=$MAX_fused; extra=0
[ "$head" = unfused ] && { max=$MAX_unfused; extra=1; }
if [ "$B" -gt "$max" ]; then echo "error: cudaMalloc: out of memory (B = $B)"; exit 1; fi
echo "step 1/3 | loss 10.9"
echo "memory: $((100 * B + 7 * extra)).5 MiB of 81559.0 MiB in use on the GPU after the first step"
mfu=", MFU $((B / 4)).$((5 * extra))%"
[ -n "${NO_MFU:-}" ] && mfu=
echo "average step 123.4 ms, $((1000 * B + extra)) tok/s$mfu (steps 2..3)"
STUB
chmod +x "$tmp/trainer"
run() {
    : > "$tmp/args"
    rm -rf "$tmp/out"
    out=$(TRAINER="$tmp/trainer" STUB_ARGS="$tmp/args" DEPTH=24 T=512 STEPS=3 BATCHES="16 32 64 128 256" \
          bash "$script" run "$tmp/out" 2>&1)
    rc=$?
}

MAX_fused=64 MAX_unfused=32 run
tsv=$(cat "$tmp/out/heads.tsv" 2>/dev/null)
expect "a run: exit 0 (rc $rc; $out)" [ "$rc" = 0 ]
expect "the table's header names its five columns ($tsv)" has "$tsv" "$(printf 'head\tB\tmem_MiB\ttok_s\tmfu')"
expect "fused B=16: memory, tok/s and MFU of that run ($tsv)" has "$tsv" "$(printf 'fused\t16\t1600.5\t16000\t4.0')"
expect "fused B=64 ($tsv)" has "$tsv" "$(printf 'fused\t64\t6400.5\t64000\t16.0')"
expect "unfused B=32, its own figures ($tsv)" has "$tsv" "$(printf 'unfused\t32\t3207.5\t32001\t8.5')"
expect "fused stops at its first failing B: no row for 128 or 256 ($tsv)" \
    bash -c '! printf "%s" "$1" | grep -qP "^fused\t(128|256)\t"' _ "$tsv"
expect "unfused stops at 64 ($tsv)" bash -c '! printf "%s" "$1" | grep -qP "^unfused\t(64|128)\t"' _ "$tsv"
expect "five rows: fused 16 32 64, unfused 16 32 ($tsv)" [ "$(printf '%s\n' "$tsv" | wc -l)" = 6 ]
expect "the failure is named with the trainer's error ($out)" has "$out" "fused B=128: did not run (error: cudaMalloc: out of memory (B = 128))"
expect "the largest fused batch ($out)" has "$out" "largest batch that fits, fused head: B=64 (32768 tokens)"
expect "the largest unfused batch ($out)" has "$out" "largest batch that fits, unfused head: B=32 (16384 tokens)"
args=$(head -n 1 "$tmp/args")
expect "DEPTH, T, STEPS and the head reach the trainer ($args)" \
    has "$args" "-depth 24 -t 512 -b 16 -steps 3 -warmup 1 -val_every 0 -val_batches 1 -sample_tokens 0 -keep 0 -head fused"
expect "the runs' logs stay in the folder given" test -s "$tmp/out/unfused_b64.log"
expect "no temporary table left" test ! -e "$tmp/out/heads.tsv.tmp"

# the bisection: fused fits 100 (the list stops at 64 < 100 < 128), unfused 40 (32 < 40 < 64)
MAX_fused=100 MAX_unfused=40 run
tsv=$(cat "$tmp/out/heads.tsv" 2>/dev/null)
rows=$(printf '%s\n' "$tsv" | tail -n +2 | cut -f 1,2 | tr '\t\n' ': ')
expect "bisected to within 8: fused 96, unfused 40, the rows in increasing B ($rows)" \
    [ "$rows" = "fused:16 fused:32 fused:64 fused:96 unfused:16 unfused:32 unfused:40 " ]
expect "the largest fused batch, bisected ($out)" has "$out" "largest batch that fits, fused head: B=96 (49152 tokens)"
expect "the largest unfused batch, bisected ($out)" has "$out" "largest batch that fits, unfused head: B=40 (20480 tokens)"
tried=$(grep -o -- '-b [0-9]* .*-head fused' "$tmp/args" | cut -d' ' -f2 | tr '\n' ' ')
expect "fused tried the list to 128, then 96, 112, 104 ($tried)" [ "$tried" = "16 32 64 128 96 112 104 " ]
expect "a bisected run's figures are its own ($tsv)" has "$tsv" "$(printf 'fused\t96\t9600.5\t96000\t24.0')"
REFINE=0 MAX_fused=100 MAX_unfused=40 run
expect "REFINE=0: the list alone, fused 64 ($out)" has "$out" "largest batch that fits, fused head: B=64 (32768 tokens)"
REFINE=x run
expect "a bad REFINE: exit 2, named (rc $rc; $out)" bash -c '[ "$1" = 2 ] && [[ "$2" == *"REFINE=x: expected a whole number"* ]]' _ "$rc" "$out"

NO_MFU=1 MAX_fused=16 MAX_unfused=16 run
tsv=$(cat "$tmp/out/heads.tsv" 2>/dev/null)
expect "no MFU printed: '-' in its column, tok/s still read ($tsv)" has "$tsv" "$(printf 'fused\t16\t1600.5\t16000\t-')"

test_end
