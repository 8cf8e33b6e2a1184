#!/usr/bin/env bash
# test_train_llama_gpu.sh: ./train_gpt -model llama on the GPU, llama-30m (235.0M parameters, 30.2M without
# the embedding and LM head tables) on the starter shards in o200k_base, B 8, T 256:
#   1. 30 steps: exit 0; the config table shows the family, the size, the encoding and the parameters;
#      the first step's loss is near ln(200019) = 12.21 (the untrained model's), the mean of the last five
#      is at least 2 below it; a val loss and a sample decoded with o200k_base are printed; -export_hf
#      writes config.json (LlamaForCausalLM, vocab 200019, <|endoftext|> 199999) and model.safetensors,
#      which -init (the family, size and encoding from the file) reads back to the exporter's val loss;
#   2. resume: 20 steps against 10 steps, then -resume latest to 20 (-warmup 10: the first 10 steps are
#      all warm-up, whose learning rate does not depend on -steps): the logs' losses, norms and val losses,
#      the sample at the end and the final checkpoint are bitwise those of the uninterrupted run, and the
#      checkpoint's settings name -model llama, -size llama-30m and -encoding o200k_base.
# On failure the end of every run's output is printed. Needs a GPU, the shards of `make
# data-starter-o200k` and ./train_gpt. Prints `test_train_llama_gpu: N passed, M failed`.
set -u
cd "$(dirname "$0")/../../.." || exit 1
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    echo "SKIPPED test_train_llama_gpu: needs a GPU, and nvidia-smi finds none"
    exit 0
fi
bin=./train_gpt
source dev/test/testing.sh
test_begin test_train_llama_gpu  # $tmp: the runs' outputs
same() { [ -n "$1" ] && [ "$1" = "$2" ]; }  # same A B: A is not empty and B is A
all_in() { local f=$1; shift; for p in "$@"; do file_has "$f" "$p" || return 1; done; }  # all_in FILE PART...
# the log's numbers without the timings: step, loss, norm, lr; val losses
numbers() { grep -E '^step [0-9]+ (train_loss|val_loss)' "$1" 2>/dev/null | sed -E 's/ ms .*//'; }
train_loss() { awk -v s="$2" '$1 == "step" && $2 == s && $3 == "train_loss" { print $4 }' "$1" 2>/dev/null; }
if ! ls data/starter_o200k/starter_train_*.bin > /dev/null 2>&1; then
    echo "FAIL no shards in data/starter_o200k/: run make data-starter-o200k"
    echo "test_train_llama_gpu: 0 passed, 1 failed"
    exit 1
fi
base=(-model llama -b 8 -t 256 -val_batches 3)

# 1. 30 steps, a sample, the export
"$bin" "${base[@]}" -steps 30 -warmup 5 -val_every 10 -sample_tokens 32 -keep 0 -export_hf "$tmp/hf" -out "$tmp/run" \
    > "$tmp/run.txt" 2>&1; rc=$?
expect "30 steps exit 0 (rc $rc)" test "$rc" = 0
expect "the table names the family and size" file_has "$tmp/run.txt" "| model                | Llama-style llama-30m: 10 layers, 512 channels, FFN 1536"
expect "the table names the encoding" file_has "$tmp/run.txt" "| encoding             | o200k_base, <|endoftext|> 199999"
expect "the table counts the parameters" file_has "$tmp/run.txt" "| parameters           | 235022848; 30157312 without the two tables"
expect "the data are the o200k_base starter shards" file_has "$tmp/run.txt" "data/starter_o200k/starter_train_*.bin"
first=$(train_loss "$tmp/run/log.txt" 1)
last5=$(for s in 26 27 28 29 30; do train_loss "$tmp/run/log.txt" "$s"; done | awk '{ t += $1; n++ } END { if (n == 5) printf "%.4f", t / n }')
echo "train loss: step 1 ${first:-none}, mean of steps 26-30 ${last5:-none} (ln 200019 = 12.2062)"
expect "step 1's loss is near ln(200019): ${first:-none}" awk -v a="${first:-0}" 'BEGIN { exit !(a > 11.9 && a < 12.7) }'
expect "the loss falls: mean of the last 5 steps ${last5:-none} at least 2 below step 1's ${first:-none}" \
    awk -v a="${first:-0}" -v b="${last5:-99}" 'BEGIN { exit !(b < a - 2.0) }'
expect "a val loss at step 30" grep -sqE '^step 30 val_loss [0-9.]+$' "$tmp/run/log.txt"
expect "a sample at the end" grep -q '^sample (step 30): ' "$tmp/run.txt"
expect "MFU is printed where the GPU's peak is known" grep -qE '\| MFU +[0-9.]+%|peak bf16 +\| unknown' "$tmp/run.txt"
expect "-export_hf: config.json says LlamaForCausalLM" file_has "$tmp/hf/config.json" '"LlamaForCausalLM"'
expect "-export_hf: config.json has vocab_size 200019" grep -sqE '"vocab_size":[[:space:]]*200019' "$tmp/hf/config.json"
expect "-export_hf: config.json has eos_token_id 199999" grep -sqE '"eos_token_id":[[:space:]]*199999' "$tmp/hf/config.json"
# 234,976,768 parameters without the padded rows, 939.9 MB in fp32
expect "-export_hf: model.safetensors of the fp32 weights" test "$(stat -c %s "$tmp/hf/model.safetensors" 2>/dev/null || echo 0)" -gt 939907072
# the export read back by -init (no -model: the family, size and encoding from the file): the same
# weights, so the val loss of the same batches is the exporter's last, bitwise
"$bin" -init "$tmp/hf" -b 8 -t 256 -val_batches 3 -steps 0 -sample_tokens 0 -out "$tmp/init" \
    > "$tmp/init.txt" 2>&1; rc=$?
expect "-init of the export, -steps 0: exit 0 (rc $rc)" test "$rc" = 0
expect "-init of the export: the table names the family, size and encoding" \
    all_in "$tmp/init.txt" "Llama-style llama-30m" "o200k_base, <|endoftext|> 199999"
want=$(awk '$1 == "step" && $2 == 30 && $3 == "val_loss" { print $4 }' "$tmp/run/log.txt" 2>/dev/null)
got=$(sed -nE 's/^val loss [0-9.]+ \(the weights of -init .*; ([^)]+)\)$/\1/p' "$tmp/init.txt" 2>/dev/null)
expect "-init of the export: val loss ${got:-none}, bitwise the exporter's at step 30, ${want:-none}" \
    same "$want" "$got"

# 2. 20 steps uninterrupted, against 10 + resume + 10
small=("${base[@]}" -warmup 10 -val_every 5 -sample_tokens 16 -keep 1)
"$bin" "${small[@]}" -steps 20 -out "$tmp/full" > "$tmp/full.txt" 2>&1; rc=$?
expect "20 steps exit 0 (rc $rc)" test "$rc" = 0
"$bin" "${small[@]}" -steps 10 -out "$tmp/half" > "$tmp/half1.txt" 2>&1; rc=$?
expect "10 steps exit 0 (rc $rc)" test "$rc" = 0
# the flags a checkpoint does not keep (evaluation, sampling, output) are given again
"$bin" -resume latest -steps 20 -val_every 5 -val_batches 3 -sample_tokens 16 -keep 1 -out "$tmp/half" \
    > "$tmp/half2.txt" 2>&1; rc=$?
expect "-resume latest to step 20 exit 0 (rc $rc)" test "$rc" = 0
expect "the resumed run took the family from the checkpoint" file_has "$tmp/half2.txt" "Llama-style llama-30m"
expect "the logs have 20 steps and 4 val losses" test "$(numbers "$tmp/half/log.txt" | wc -l)" = 24
expect "resumed: losses, norms, val losses bitwise those of the uninterrupted run" \
    same "$(numbers "$tmp/full/log.txt")" "$(numbers "$tmp/half/log.txt")"
if ! same "$(numbers "$tmp/full/log.txt")" "$(numbers "$tmp/half/log.txt")"; then
    diff <(numbers "$tmp/full/log.txt") <(numbers "$tmp/half/log.txt") | head -n 10
fi
# the sample is the last output of a run, and may span lines
sample_of() { sed -n '/^sample (step 20): /,$p' "$1" 2>/dev/null; }
expect "resumed: the sample at step 20 is the uninterrupted run's" same "$(sample_of "$tmp/full.txt")" "$(sample_of "$tmp/half2.txt")"
expect "resumed: the checkpoint of step 20 is byte-identical" cmp -s "$tmp/full/ckpt_00000020.bin" "$tmp/half/ckpt_00000020.bin"
expect "the checkpoint's settings name the model, size, encoding and RoPE base" \
    grep -qaF -- "-model llama -size llama-30m -encoding o200k_base -rope_theta 500000 -b 8 -t 256" \
    <(head -c 2048 "$tmp/half/ckpt_00000020.bin" 2>/dev/null)
if [ "$failed" != 0 ]; then for f in "$tmp"/*.txt; do echo "--- $f"; tail -n 25 "$f"; done; fi

test_end
