#!/usr/bin/env bash
# test_train_flags.sh: ./train_gpt's flags and bad input, without a GPU (every check below fails before
# the GPU is touched). Each bad command must exit 1 with an error naming the flag or file (one flag per
# message; a repeated flag is an error); -h must list every flag of the table in train_gpt.cu; a refused
# run creates nothing on disk; a bad launch environment or a rendezvous that does not complete is refused
# naming the variable or the wait. Prints `test_train_flags: N passed, M failed`.
set -u
cd "$(dirname "$0")/../.."
bin=./train_gpt
passed=0; failed=0

# expect_error "what" "message fragment" args...: exit status 1 and the fragment on stderr
expect_error() {
    local what=$1 frag=$2; shift 2
    local err rc
    err=$("$bin" "$@" 2>&1 >/dev/null); rc=$?
    if [ "$rc" = 1 ] && printf '%s' "$err" | grep -qF -- "$frag"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1)); echo "FAIL $what: rc $rc, stderr: $err"
    fi
}

help=$("$bin" -h); rc=$?
if [ "$rc" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL -h exits $rc"; fi
# every flag declared in the table appears in the usage text
for flag in $(grep -oE '^\s*\{"-[a-z_]+"' train_gpt.cu | grep -oE '\-[a-z_]+'); do
    if printf '%s' "$help" | grep -qE -- "^\s*$flag\s"; then passed=$((passed + 1))
    else failed=$((failed + 1)); echo "FAIL -h does not list $flag"; fi
done

expect_error "unknown flag" 'unknown flag "-nope"' -nope 1
expect_error "missing value" "flag -b needs a value" -b
expect_error "not an integer" 'flag -b expects an integer, got "x"' -b x
expect_error "not a number" 'flag -lr expects a number' -lr fast
expect_error "bad head" "-head foo: choose fused, blocks, chunks or unfused" -head foo
expect_error "bad recompute" "-recompute 2: choose 0 or 1" -recompute 2
expect_error "bad profile" "-profile 2: choose 0 or 1" -profile 2
expect_error "bad head scratch" "-head_scratch 0" -head_scratch 0
expect_error "bad schedule" "-schedule step: choose cosine or linear" -schedule step
expect_error "steps 0 without resume" "-steps 0" -steps 0
expect_error "no train shards" "no shard file matches the pattern nothere/*.bin" -train 'nothere/*.bin'

# each bad value gets a message for its own flag only
expect_error "beta1 out of range" "-beta1 1.5: must be in [0, 1)" -beta1 1.5
err=$("$bin" -beta1 1.5 2>&1 >/dev/null)
if printf '%s' "$err" | grep -qE -- '-beta2|-wd|-clip|-eps'; then failed=$((failed + 1)); echo "FAIL -beta1 1.5 names other flags: $err"
else passed=$((passed + 1)); fi
expect_error "beta2 out of range" "-beta2 -0.5: must be in [0, 1)" -beta2 -0.5
expect_error "negative clip" "-clip -1: the clipping norm" -clip -1
expect_error "negative warmup" "-warmup -3: warm-up steps" -warmup -3
expect_error "val_batches 0" "-val_batches 0: must be 1 or more" -val_batches 0
expect_error "max_bad_steps 0" "-max_bad_steps 0: must be 1 or more" -max_bad_steps 0
# a repeated flag is refused, naming both values
expect_error "repeated flag" "flag -b given twice (4, then 8)" -b 4 -b 8
# a directory matched as a shard is reported as one
expect_error "directory as a shard" "data/starter: a directory, not a shard file" -train data/starter

# one scratch directory for the cases below that write files
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_train_flags.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# nothing is created on disk before validation passes
for args in "-train nothere/*.bin" "-val_batches 100000" "-beta1 2" "-b 4 -b 8" "-resume $tmp/none.bin"; do
    rm -rf "$tmp/out"
    # shellcheck disable=SC2086  # the words of $args are separate flags
    "$bin" $args -out "$tmp/out" >/dev/null 2>&1
    if [ -e "$tmp/out" ]; then failed=$((failed + 1)); echo "FAIL $args: $tmp/out was created by a refused run"
    else passed=$((passed + 1)); fi
done
rm -rf "$tmp/out"

# uint32 shards (make_shards --encoding cl100k_base/o200k_base; llm.c's Llama-3 layout): ids below
# GPT-2's 50257 load (both loaders pass, then -val_batches is refused); an id >= 50257 is refused at
# start-up, naming the file and --encoding gpt2.
le32() { printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($1 & 255)) $(($1 >> 8 & 255)) $(($1 >> 16 & 255)) $(($1 >> 24 & 255)); }
u32_shard() {  # u32_shard FILE N LAST_ID: N ids, all 0 but the last
    { printf %b "$(le32 20240801)$(le32 7)$(le32 "$2")"; head -c $((253 * 4 + 4 * ($2 - 1))) /dev/zero
      printf %b "$(le32 "$3")"; } > "$1"
}
u32_shard "$tmp/small.bin" 1000 50256
u32_shard "$tmp/big.bin" 1000 50257
if [ "$(stat -c %s "$tmp/small.bin")" = $((1024 + 4 * 1000)) ]; then passed=$((passed + 1))
else failed=$((failed + 1)); echo "FAIL the test's uint32 shard has $(stat -c %s "$tmp/small.bin") bytes"; fi
expect_error "uint32 shard, ids < 50257" "the val split $tmp/small.bin holds 3 batches" \
    -train "$tmp/small.bin" -val "$tmp/small.bin" -b 4 -t 64 -val_batches 100000
expect_error "uint32 shard, id 50257 (file)" "$tmp/big.bin: token 999 (byte offset 5020) has id 50257" \
    -train "$tmp/big.bin" -val "$tmp/small.bin" -b 4 -t 64
expect_error "uint32 shard, id 50257 (encoding)" "encoding does not match the model" \
    -train "$tmp/small.bin" -val "$tmp/big.bin" -b 4 -t 64
expect_error "uint32 shard, id 50257 (hint)" "--encoding gpt2" -train "$tmp/big.bin" -b 4 -t 64

# -init: its file is read before the GPU is touched. A safetensors file of GPT-2 names but no layers
# and 16 channels: not a GPT-2 size.
json='{"wte.weight":{"dtype":"F32","shape":[2,16],"data_offsets":[0,128]},"wpe.weight":{"dtype":"F32","shape":[2,16],"data_offsets":[128,256]}}'
# the 8-byte little-endian header length (< 256 here), the header, the data
{ printf "\\$(printf %03o ${#json})"; printf '\0\0\0\0\0\0\0%s' "$json"; head -c 256 /dev/zero; } > "$tmp/m.safetensors"
expect_error "-init, no such file" "-init $tmp/none: safetensors $tmp/none: cannot open" -init "$tmp/none"
expect_error "-init of a directory without model.safetensors" "no such file in the directory $tmp" -init "$tmp"
expect_error "-init, not a GPT-2 size" "a model of 0 layers and 16 channels, not one of GPT-2's sizes" -init "$tmp/m.safetensors"
expect_error "-init with -depth" "which is not what -depth gives" -init "$tmp/m.safetensors" -depth 6
expect_error "-init and -resume" "-resume continues a run, -init starts one from weights" -init "$tmp/m.safetensors" -resume latest

# multi-GPU flags and launch environments: refused before the GPU is touched. The ranks meet before
# the data is read, so a rank whose partner never comes fails within -nccl_timeout, naming the wait.
expect_error "-gpus 0" "-gpus 0: GPUs of this machine" -gpus 0
expect_error "-nccl_init bad" "-nccl_init udp: choose tcp or file:PATH" -nccl_init udp
expect_error "-nccl_init file: without a path" "-nccl_init file:: choose tcp or file:PATH" -nccl_init file:
expect_error "-nccl_timeout 0" "-nccl_timeout 0: seconds, 1 or more" -nccl_timeout 0
# expect_env_error "what" "fragment" VAR=VALUE... -- args...: the same, with these variables set
expect_env_error() {
    local what=$1 frag=$2; shift 2
    local vars=()
    while [ "$1" != "--" ]; do vars+=("$1"); shift; done
    shift
    local err rc
    err=$(env "${vars[@]}" "$bin" "$@" 2>&1 >/dev/null); rc=$?
    if [ "$rc" = 1 ] && printf '%s' "$err" | grep -qF -- "$frag"; then passed=$((passed + 1))
    else failed=$((failed + 1)); echo "FAIL $what: rc $rc, stderr: $err"; fi
}
port=$((20000 + RANDOM % 20000))
expect_env_error "RANK without WORLD_SIZE" "RANK is set but WORLD_SIZE is not" RANK=0 --
expect_env_error "RANK out of range" "RANK" RANK=2 WORLD_SIZE=2 --
expect_env_error "-gpus under a launcher" "-gpus 4: this process was started by a launcher" RANK=0 WORLD_SIZE=2 -- -gpus 4
expect_env_error "-device under a launcher" "-device 1: each rank of a multi-GPU run takes the GPU of its local rank" \
    RANK=0 WORLD_SIZE=2 -- -device 1
expect_env_error "-total_batch over GPUs" "-total_batch 256 is not a multiple of B*T*GPUs = 4*64*2" RANK=0 WORLD_SIZE=2 -- \
    -b 4 -t 64 -total_batch 256
expect_env_error "ranks on several machines without MASTER_ADDR" "set MASTER_ADDR to rank 0's host" \
    RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 --
t0=$SECONDS
expect_env_error "rank 0 alone (tcp)" "rank 0 waited 2 s for 1 of 2 ranks to connect to 127.0.0.1:$port" \
    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port -- -nccl_timeout 2
expect_env_error "rank 1 alone (tcp)" "rank 1 waited 2 s for rank 0 at 127.0.0.1:$port" \
    RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port -- -nccl_timeout 2
expect_env_error "rank 1 alone (file)" "rank 1 waited 2 s" OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 -- \
    -nccl_init "file:$tmp/rdzv" -nccl_timeout 2
if [ $((SECONDS - t0)) -le 30 ]; then passed=$((passed + 1))
else failed=$((failed + 1)); echo "FAIL the three 2 s rendezvous timeouts took $((SECONDS - t0)) s"; fi

echo "test_train_flags: $passed passed, $failed failed"
[ "$failed" = 0 ]
