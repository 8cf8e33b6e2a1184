#!/usr/bin/env bash
# test_train_dist_gpu.sh: ./train_gpt through its NCCL path on one GPU (d6, B 4, T 64, a few steps each):
#   1. launched as rank 0 of 1 (torchrun-style variables, tcp rendezvous, NCCL with one rank): the log's
#      losses, norms and val losses and the final checkpoint are bitwise those of the plain run;
#   2. the same through the file rendezvous (-nccl_init file:PATH);
#   3. a checkpoint written through the NCCL path resumes in the plain run, bitwise;
#   4. SIGTERM to a launched rank: it finishes the step, writes one checkpoint and exits 0;
#   5. -gpus 2 on a machine with one GPU (two ranks on one GPU, which NCCL refuses): every rank exits
#      within 120 s, never a hang, with an error naming a rank.
# Several GPUs are needed for more (doc/multi_gpu.md); dev/test/dist/test_dist.cu checks N ranks on one GPU
# through the communicator's test double, and dev/test/dist/test_dist_control.c the failure paths on the CPU.
# Needs a GPU, the starter data and ./train_gpt built with NCCL. Prints `test_train_dist_gpu: N passed, M failed`.
set -u
cd "$(dirname "$0")/../../.." || exit 1
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    echo "SKIPPED test_train_dist_gpu: needs a GPU, and nvidia-smi finds none"
    exit 0
fi
bin=./train_gpt
source dev/test/testing.sh
test_begin test_train_dist_gpu  # $tmp: the runs' outputs
# -warmup 10: the 4 steps are all warm-up, whose learning rate does not depend on -steps (3. resumes
# a 2-step run to 4 steps)
base=(-depth 6 -b 4 -t 64 -sample_tokens 0 -keep 1 -warmup 10)
small=("${base[@]}" -val_every 2 -val_batches 3)

# the log's numbers without the timings: step, loss, norm, lr; val losses
numbers() { grep -E '^step [0-9]+ (train_loss|val_loss)' "$1" | sed -E 's/ ms .*//'; }
port() { echo $((20000 + RANDOM % 20000)); }
launched() { env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT="$(port)" "$@"; }

# 1. plain against rank 0 of 1 through NCCL
"$bin" "${small[@]}" -steps 4 -out "$tmp/plain" > "$tmp/plain.txt" 2>&1; rc=$?
expect "plain run exits 0 (rc $rc)" test "$rc" = 0
launched "$bin" "${small[@]}" -steps 4 -out "$tmp/tcp" > "$tmp/tcp.txt" 2>&1; rc=$?
expect "NCCL run (tcp) exits 0 (rc $rc)" test "$rc" = 0
expect "the NCCL run's config table shows the ranks" file_has "$tmp/tcp.txt" "| ranks                | 1 (torchrun)"
expect "the NCCL run's log has 4 steps and 2 val losses" test "$(numbers "$tmp/tcp/log.txt" | wc -l)" = 6
expect "NCCL (tcp) losses, norms, val losses bitwise those of the plain run" \
    diff <(numbers "$tmp/plain/log.txt") <(numbers "$tmp/tcp/log.txt")
expect "NCCL (tcp) checkpoint byte-identical to the plain run's" cmp -s "$tmp/plain/ckpt_00000004.bin" "$tmp/tcp/ckpt_00000004.bin"

# 2. the file rendezvous
launched "$bin" "${small[@]}" -steps 4 -nccl_init "file:$tmp/rdzv" -out "$tmp/file" > "$tmp/file.txt" 2>&1; rc=$?
expect "NCCL run (file) exits 0 (rc $rc)" test "$rc" = 0
expect "NCCL (file) checkpoint byte-identical to the plain run's" cmp -s "$tmp/plain/ckpt_00000004.bin" "$tmp/file/ckpt_00000004.bin"
expect "the rendezvous file is removed" test ! -e "$tmp/rdzv"

# 3. a checkpoint of the NCCL path resumed in the plain run
launched "$bin" "${small[@]}" -steps 2 -out "$tmp/half" > "$tmp/half1.txt" 2>&1
"$bin" -resume latest -out "$tmp/half" -steps 4 -sample_tokens 0 -val_every 2 -val_batches 3 -keep 1 > "$tmp/half2.txt" 2>&1; rc=$?
expect "plain resume of an NCCL checkpoint exits 0 (rc $rc)" test "$rc" = 0
expect "resumed across the paths: checkpoint byte-identical to the plain run's" \
    cmp -s "$tmp/plain/ckpt_00000004.bin" "$tmp/half/ckpt_00000004.bin"

# 4. SIGTERM to a launched rank
# started without the shell function, so that $! is the trainer itself (env execs it)
env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT="$(port)" \
    "$bin" "${base[@]}" -steps 100000 -val_every 0 -val_batches 1 -out "$tmp/term" > "$tmp/term.txt" 2>&1 &
pid=$!
for _ in $(seq 600); do grep -q '^step ' "$tmp/term.txt" 2>/dev/null && break; sleep 0.1; done
kill -TERM "$pid"; wait "$pid"; rc=$?
expect "SIGTERM: exit 0 (rc $rc)" test "$rc" = 0
expect "SIGTERM: stopped by SIGTERM" file_has "$tmp/term.txt" "stopped by SIGTERM"
expect "SIGTERM: one checkpoint written" test "$(grep -c '^checkpoint ' "$tmp/term.txt")" = 1

# 5. two ranks on one GPU: refused by NCCL on every rank, promptly
t0=$SECONDS
timeout 120 "$bin" "${small[@]}" -steps 2 -gpus 2 -nccl_timeout 60 -out "$tmp/two" > "$tmp/two.txt" 2>&1; rc=$?
expect "-gpus 2 on one GPU ends in $((SECONDS - t0)) s, not killed by the 120 s timeout (rc $rc)" test "$rc" != 124
expect "-gpus 2 on one GPU: exit 1 (rc $rc)" test "$rc" = 1
expect "-gpus 2 on one GPU: an error naming a rank" grep -qE '\[rank [01]\] error|rank [01] (failed|exited)' "$tmp/two.txt"
if [ "$failed" != 0 ]; then for f in "$tmp"/*.txt; do echo "--- $f"; tail -n 15 "$f"; done; fi

test_end
