#!/usr/bin/env bash
# round_trip.sh: on a GPU, a model exported to Hugging Face's layout and imported again continues
# training (doc/interop.md). It trains the default d6 run (300 steps) into OUT/a, exporting it at the
# end (-export_hf OUT/hf), then checks:
#   1. ./train_gpt -init OUT/hf -steps 0: the imported model's val loss equals the exporter's last val
#      loss bitwise (both printed with 9 significant digits): the same bf16 parameters, the same batches;
#   2. ./train_gpt -init OUT/hf -steps 100 (fresh AdamW): its first loss is more than 2 below the
#      fresh model's first loss (a's step 1, same batch: same seed), so it starts from the trained
#      weights; it keeps learning (the mean loss of its last 10 steps is below that of its first 10);
#      and its final val loss is within 0.05 of a's or below.
# Also build/export_hf on a's checkpoint gives the same model.safetensors as -export_hf (one code path).
# usage: bash dev/interop/round_trip.sh [OUT (default out/interop)]   after make train_gpt build/export_hf
# Prints `round_trip: N passed, M failed` and exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-out/interop}
passed=0; failed=0
expect() {  # expect "what" CONDITION...
    local what=$1; shift
    if "$@"; then passed=$((passed + 1)); echo "ok   $what"; else failed=$((failed + 1)); echo "FAIL $what"; fi
}
lt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }
rm -rf "$out/a" "$out/b" "$out/b0" "$out/hf" "$out/hf2"
mkdir -p "$out"
run=(-val_every 0 -sample_tokens 0)
./train_gpt "${run[@]}" -out "$out/a" -export_hf "$out/hf" > "$out/a.txt" 2>&1
expect "train d6 with -export_hf (log in $out/a.txt)" [ $? = 0 -a -f "$out/hf/model.safetensors" ]
a_first=$(awk '$3 == "train_loss" { print $4; exit }' "$out/a/log.txt")
a_val=$(awk '$3 == "val_loss" { v = $4 } END { print v }' "$out/a/log.txt")

build/export_hf "$out/a" "$out/hf2" > /dev/null
expect "build/export_hf of a's checkpoint writes the same model.safetensors as -export_hf" \
    cmp -s "$out/hf/model.safetensors" "$out/hf2/model.safetensors"

./train_gpt -init "$out/hf" -steps 0 "${run[@]}" -out "$out/b0" > "$out/b0.txt" 2>&1
b0_val=$(sed -n 's/^val loss .*(the weights of -init .*; \(.*\))$/\1/p' "$out/b0.txt")
expect "the imported model's val loss $b0_val equals the exporter's last, $a_val (bitwise, 9 digits)" \
    [ -n "$a_val" -a "$b0_val" = "$a_val" ]

./train_gpt -init "$out/hf" -steps 100 "${run[@]}" -out "$out/b" > "$out/b.txt" 2>&1
expect "train from -init for 100 steps (log in $out/b.txt)" [ $? = 0 ]
b_first=$(awk '$3 == "train_loss" { print $4; exit }' "$out/b/log.txt")
b_head=$(awk '$3 == "train_loss" && ++n <= 10 { s += $4 } END { print s / 10 }' "$out/b/log.txt")
b_tail=$(awk '$3 == "train_loss" { l[++n] = $4 } END { for (i = n - 9; i <= n; i++) s += l[i]; print s / 10 }' "$out/b/log.txt")
b_val=$(awk '$3 == "val_loss" { v = $4 } END { print v }' "$out/b/log.txt")
expect "it starts from the trained weights: first loss $b_first, a fresh model's $a_first" lt "$b_first" "$(awk -v a="$a_first" 'BEGIN { print a - 2 }')"
expect "it keeps learning: mean loss of its last 10 steps $b_tail < of its first 10, $b_head" lt "$b_tail" "$b_head"
expect "its val loss $b_val is within 0.05 of the exporter's $a_val or below" lt "$b_val" "$(awk -v a="$a_val" 'BEGIN { print a + 0.05 }')"

echo "round_trip: $passed passed, $failed failed"
[ "$failed" = 0 ]
