#!/usr/bin/env bash
# test_train_faults_gpu.sh: ./train_gpt meets faults on the GPU (a d6 model, B 4, T 64, a few steps each):
#   1. a bad token id in the second train shard, met mid-run: exit 1 naming the shard, the token and its
#      byte offset, a checkpoint of the last complete step; with the shard replaced, -resume latest
#      finishes the run;
#   2. the same in the second val shard, met by the first evaluation;
#   3. a NaN injected into the gradient at step 3 (LLMC_TEST_NAN_STEP, test-only): the step is logged
#      as skipped, the weights and AdamW state after it are bitwise those after step 2, the run goes on;
#   4. NaNs from step 2 on with -max_bad_steps 3: exit 1 after step 4 with the hint (-lr, -warmup), a
#      checkpoint of step 4 whose tensors are those of step 1; -resume latest without the NaNs goes on;
#   5. a checkpoint write failing after 5000 bytes (LLMC_TEST_CKPT_FAIL_AFTER), and one SIGKILLed there:
#      `latest` still names the previous checkpoint, and -resume latest then writes the next one;
#   6. a checkpoint with a NaN written into its tensors: -resume refuses it (checksum) naming the file.
# Needs a GPU, the starter data (make data) and ./train_gpt; make test runs it only where nvidia-smi
# finds a GPU. Prints `test_train_faults_gpu: N passed, M failed`.
set -u
cd "$(dirname "$0")/../../.." || exit 1
# shellcheck disable=SC2016  # the conditions given to all() are evaluated there, on purpose
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    echo "SKIPPED test_train_faults_gpu: needs a GPU, and nvidia-smi finds none"
    exit 0
fi
bin=./train_gpt
source dev/test/testing.sh
test_begin test_train_faults_gpu  # $tmp: the shards, runs and checkpoints
small=(-depth 6 -b 4 -t 64 -sample_tokens 0 -lr 1e-4)
quiet=(-val_every 0 -val_batches 1)

# run_train OUT_FILE ARGS...: runs the trainer, stdout and stderr to OUT_FILE; sets rc
run_train() { local o=$1; shift; rc=0; "$bin" "$@" > "$o" 2>&1 || rc=$?; }
le32() { printf "\\x$(printf %02x $(($1 & 255)))\\x$(printf %02x $(($1 >> 8 & 255)))\\x$(printf %02x $(($1 >> 16 & 255)))\\x$(printf %02x $(($1 >> 24 & 255)))"; }
# make_shard SRC DST FIRST COUNT: tokens FIRST..FIRST+COUNT-1 of shard SRC as a shard of their own
make_shard() {
    { le32 20240520; le32 1; le32 "$4"; head -c 1012 /dev/zero; } > "$2"
    tail -c +$((1024 + 2 * $3 + 1)) "$1" | head -c $((2 * $4)) >> "$2"
}
# poison SHARD TOKEN: that token's id becomes 65535
poison() { printf '\xff\xff' | dd of="$1" bs=1 seek=$((1024 + 2 * $2)) conv=notrunc status=none; }
tensors_equal() {  # tensors_equal CKPT_A CKPT_B: master, m, v bitwise equal (the last 3·P·4 bytes)
    local n=$((3 * 30357504 * 4))
    cmp -s <(tail -c "$n" "$1") <(tail -c "$n" "$2")
}
tensors_differ() { ! tensors_equal "$@"; }
latest_of() { cat "$1/latest" 2>/dev/null; }
all() {  # all "CONDITION" ...: every condition (a shell test string) holds
    local c
    for c in "$@"; do eval "$c" || return 1; done
}

src=data/starter/starter_train_000000.bin
# 1. a bad token in the second train shard (shuffled order: the seed is picked so it comes second)
mkdir -p "$tmp/train" "$tmp/val"
make_shard "$src" "$tmp/train/a.bin" 0 20000
make_shard "$src" "$tmp/train/b.bin" 20000 20000
cp "$tmp/train/b.bin" "$tmp/b_good.bin"
poison "$tmp/train/b.bin" 12345
for seed in 1 2 3 4 5 6 7 8; do
    rm -rf "$tmp/o1"
    run_train "$tmp/o1.txt" "${small[@]}" "${quiet[@]}" -train "$tmp/train/*.bin" -steps 200 -seed "$seed" -out "$tmp/o1"
    grep -q '^step ' "$tmp/o1.txt" && break  # some steps ran before the bad shard
done
out=$(cat "$tmp/o1.txt")
expect "bad train shard: exit 1 (rc $rc)" [ "$rc" = 1 ]
expect "bad train shard: names the file, the token and its offset: $out" \
    has "$out" "$tmp/train/b.bin: token 12345 (byte offset 25714) has id 65535"
expect "bad train shard: a checkpoint of the last complete step: $out" has "$out" "is saved in $tmp/o1/ckpt_"
ck=$(latest_of "$tmp/o1")
expect "bad train shard: latest names it ($ck)" all '[ -n "$ck" ]' '[ -f "$tmp/o1/$ck" ]'
cp "$tmp/b_good.bin" "$tmp/train/b.bin"
run_train "$tmp/o1b.txt" -resume latest -out "$tmp/o1" -train "$tmp/train/*.bin" -val_every 0 -val_batches 1 -sample_tokens 0
expect "bad train shard replaced: -resume latest finishes (rc $rc): $(tail -3 "$tmp/o1b.txt")" [ "$rc" = 0 ]
expect "bad train shard replaced: a checkpoint of step 200" [ "$(latest_of "$tmp/o1")" = ckpt_00000200.bin ]

# 2. a bad token in the second val shard, met by the first evaluation (the val order is sequential)
make_shard data/starter/starter_val_000000.bin "$tmp/val/a.bin" 0 3000
make_shard data/starter/starter_val_000000.bin "$tmp/val/b.bin" 3000 3000
poison "$tmp/val/b.bin" 7
run_train "$tmp/o2.txt" "${small[@]}" -val_every 2 -val_batches -1 -val "$tmp/val/*.bin" -steps 4 -out "$tmp/o2"
out=$(cat "$tmp/o2.txt")
expect "bad val shard: exit 1 (rc $rc)" [ "$rc" = 1 ]
expect "bad val shard: names the file and the offset: $out" has "$out" "$tmp/val/b.bin: token 7 (byte offset 1038)"
expect "bad val shard: checkpoint of step 2: $out" [ "$(latest_of "$tmp/o2")" = ckpt_00000002.bin ]

# 3. one NaN step: skipped, nothing changed, the run goes on
LLMC_TEST_NAN_STEP=3 run_train "$tmp/o3.txt" "${small[@]}" "${quiet[@]}" -steps 5 -ckpt_every 1 -keep 10 -out "$tmp/o3"
expect "NaN at step 3: exit 0 (rc $rc): $(tail -3 "$tmp/o3.txt")" [ "$rc" = 0 ]
expect "NaN at step 3: logged as skipped" grep -q '^step 3 skipped nonfinite' "$tmp/o3/log.txt"
expect "NaN at step 3: printed as skipped" grep -q 'SKIPPED: not finite' "$tmp/o3.txt"
expect "NaN at step 3: master, m, v after step 3 equal those after step 2" \
    tensors_equal "$tmp/o3/ckpt_00000002.bin" "$tmp/o3/ckpt_00000003.bin"
expect "NaN at step 3: step 4 trains (its state differs)" \
    tensors_differ "$tmp/o3/ckpt_00000003.bin" "$tmp/o3/ckpt_00000004.bin"
expect "NaN at step 3: steps 4 and 5 logged with a loss" grep -q '^step 5 train_loss' "$tmp/o3/log.txt"

# 4. NaNs from step 2 on, -max_bad_steps 3: stops after step 4 with the state of step 1
LLMC_TEST_NAN_STEP=2-100 run_train "$tmp/o4.txt" "${small[@]}" "${quiet[@]}" -steps 10 -ckpt_every 1 -keep 10 -max_bad_steps 3 -out "$tmp/o4"
out=$(cat "$tmp/o4.txt")
expect "NaN from step 2: exit 1 (rc $rc)" [ "$rc" = 1 ]
expect "NaN from step 2: says which steps and the hint: $out" has "$out" "steps 2 to 4 had a non-finite loss or gradient norm"
expect "NaN from step 2: the hint names -lr and -warmup" has "$out" "lower -lr (now 0.0001) or raise -warmup"
expect "NaN from step 2: latest is step 4" [ "$(latest_of "$tmp/o4")" = ckpt_00000004.bin ]
expect "NaN from step 2: its tensors are those of step 1" tensors_equal "$tmp/o4/ckpt_00000001.bin" "$tmp/o4/ckpt_00000004.bin"
run_train "$tmp/o4b.txt" -resume latest -out "$tmp/o4" -steps 6
expect "NaN from step 2: -resume latest goes on (rc $rc): $(tail -2 "$tmp/o4b.txt")" [ "$rc" = 0 ]

# 5. a checkpoint write that fails, or is killed, partway
run_train "$tmp/o5.txt" "${small[@]}" "${quiet[@]}" -steps 2 -out "$tmp/o5"
expect "write faults: the first run (rc $rc)" [ "$rc" = 0 ]
LLMC_TEST_CKPT_FAIL_AFTER=5000 run_train "$tmp/o5b.txt" -resume latest -out "$tmp/o5" -steps 4
out=$(cat "$tmp/o5b.txt")
expect "disk full at byte 5000: exit 1 naming the file (rc $rc): $out" \
    all '[ "$rc" = 1 ]' 'has "$out" "$tmp/o5/ckpt_00000004.bin"' 'has "$out" "No space left on device"'
expect "disk full: latest still step 2" [ "$(latest_of "$tmp/o5")" = ckpt_00000002.bin ]
expect "disk full: no ckpt_00000004.bin" [ ! -e "$tmp/o5/ckpt_00000004.bin" ]
LLMC_TEST_CKPT_FAIL_AFTER=5000:kill run_train "$tmp/o5c.txt" -resume latest -out "$tmp/o5" -steps 4
expect "SIGKILL at byte 5000: killed (rc $rc)" [ "$rc" = 137 ]
expect "SIGKILL: latest still step 2" [ "$(latest_of "$tmp/o5")" = ckpt_00000002.bin ]
run_train "$tmp/o5d.txt" -resume latest -out "$tmp/o5" -steps 4
expect "after the faults: -resume latest writes step 4 (rc $rc)" all '[ "$rc" = 0 ]' '[ "$(latest_of "$tmp/o5")" = ckpt_00000004.bin ]'

# 6. a NaN written into a copy of a checkpoint: refused before CUDA starts, naming the file
cp "$tmp/o5/ckpt_00000004.bin" "$tmp/nan.bin"
printf '\x00\x00\xc0\x7f' | dd of="$tmp/nan.bin" bs=1 seek=$(($(stat -c %s "$tmp/nan.bin") - 400)) conv=notrunc status=none
run_train "$tmp/o6.txt" -resume "$tmp/nan.bin" -out "$tmp/o6"
out=$(cat "$tmp/o6.txt")
expect "NaN in a checkpoint copy: refused with the checksum, naming it (rc $rc): $out" \
    all '[ "$rc" = 1 ]' 'has "$out" "$tmp/nan.bin: checksum mismatch"'

test_end
