#!/usr/bin/env bash
# multi_gpu_scaling.sh: how ./train_gpt's throughput scales over the GPUs of one machine. A measurement,
# not a test: it prints markdown to paste into doc/results.md (the GPU count and name, the commit, the
# date, a table per part and the exact commands).
#   bash scripts/multi_gpu_scaling.sh d12   GPT-2 d12 (124M), B 64 per GPU, T 1024, fused head (the
#       default), 6 steps at 1, 2, 4 and 8 GPUs (those the machine has): tokens/s as the range of the
#       per-step figure over steps 4-6, the efficiency
#       tokens/s(N) / (N x tokens/s(1)) of the means over steps 4-6 (the target: 95% or more at 8 GPUs),
#       the memory in use after step 1; then the largest count again with -profile 1: the GPU time per
#       step by kind, whose "grad reduce: exposed" line is the communication the backward waits for
#   bash scripts/multi_gpu_scaling.sh d48   GPT-2 d48 (1.5B), B 16 per GPU, T 1024: memory per GPU and
#       tokens/s at 1 GPU and at the largest count, there with ZeRO-1 (the default) and without it
#       (-zero 0: the optimizer state whole on every GPU)
#   bash scripts/multi_gpu_scaling.sh       both
# Each part fits in 10 minutes even when every run reaches its deadline and the 20 s grace after it
# (timeout: 90 s a d12 run, five of them; 175 s a d48 run, three); both together usually do as well. The tables show the optimizer state per GPU (the
# trainer's `memory per GPU:` line) beside the memory in use.
# Memory in use is the trainer's `memory: ... in use on the GPU after the first step`, which rank 0
# prints for its own GPU. Logs stay in out/multi_gpu_scaling/. NCCL's variables are left as the
# machine sets them. Needs ./train_gpt built with NCCL and the starter data (make data); the GPUs are
# those nvidia-smi lists (CUDA_VISIBLE_DEVICES, if set, must show as many).
set -u
cd "$(dirname "$0")/.." || exit 1
part=${1:-all}
case "$part" in
    d12 | d48 | all) ;;
    *) echo "usage: bash scripts/multi_gpu_scaling.sh [d12 | d48]" >&2; exit 2 ;;
esac
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "$gpus" -lt 1 ]; then
    echo "SKIPPED multi_gpu_scaling: needs a GPU, nvidia-smi finds none"
    exit 0
fi
bin=./train_gpt
if [ ! -x "$bin" ]; then
    echo "error: $bin is not built (make train_gpt, with NCCL)" >&2
    exit 1
fi
dir=out/multi_gpu_scaling
mkdir -p "$dir"
counts=()
for n in 1 2 4 8; do [ "$n" -le "$gpus" ] && counts+=("$n"); done
max=${counts[${#counts[@]} - 1]}
common=(-t 1024 -steps 6 -val_every 0 -val_batches 1 -sample_tokens 0 -keep 0)

# measure NAME N LIMIT ARGS...: one run of the trainer on N GPUs (-gpus N when N > 1), at most LIMIT s,
# output in $dir/NAME.txt and $dir/NAME/log.txt. Sets cmd (the command), rc, lo, hi and mean (tokens/s
# of steps 4-6; "-" when missing), mem (MiB in use after step 1) and opt (MiB of optimizer state per GPU).
measure() {
    local name=$1 n=$2 limit=$3; shift 3
    local args=("$@")
    [ "$n" -gt 1 ] && args+=(-gpus "$n")
    args+=(-out "$dir/$name")
    cmd="./train_gpt ${args[*]}"
    rm -rf "${dir:?}/$name"
    rc=0
    timeout --foreground -k 20 "$limit" "$bin" "${args[@]}" > "$dir/$name.txt" 2>&1 || rc=$?
    read -r lo hi mean < <(awk '
        $3 == "train_loss" && $2 >= 4 && $2 <= 6 { k++; s += $NF; if (k == 1 || $NF < lo) lo = $NF; if ($NF > hi) hi = $NF }
        END { if (k == 3) print lo, hi, s / k; else print "- - -" }' "$dir/$name/log.txt" 2>/dev/null || echo "- - -")
    mem=$(sed -nE 's/^memory: ([0-9.]+) MiB of .* after the first step$/\1/p' "$dir/$name.txt")
    opt=$(sed -nE 's/^memory per GPU: .*optimizer \(master, m, v\) ([0-9.]+) MiB.*/\1/p' "$dir/$name.txt")
    if [ "$rc" != 0 ]; then
        echo "note: $name failed (exit $rc$([ "$rc" = 124 ] && echo ": the ${limit} s deadline")): $cmd" >&2
        tail -n 15 "$dir/$name.txt" >&2
    fi
}
# number X FORMAT SCALE: X / SCALE printed with FORMAT, or "-" when X is "-" or empty
number() { awk -v x="$1" -v f="$2" -v s="$3" 'BEGIN { if (x == "-" || x == "") print "-"; else printf f "\n", x / s }'; }
k() { number "$1" "%.0fk" 1000; }       # tokens/s: 516342 -> 516k
gib() { number "$1" "%.1f GiB" 1024; }  # from MiB
mib() { number "$1" "%.0f MiB" 1; }
commas() { local IFS=, s; s="$*"; echo "${s//,/, }"; }  # commas 1 2 4: "1, 2, 4"
span() { if [ "$1" = - ]; then echo -; else echo "$(k "$1")–$(k "$2")"; fi; }
efficiency() {  # efficiency MEAN_N N MEAN_1: MEAN_N / (N x MEAN_1) in percent
    awk -v a="$1" -v n="$2" -v b="$3" 'BEGIN { if (a == "-" || b == "-") print "-"; else printf "%.1f%%\n", 100 * a / (n * b) }'
}
# table MODEL ARGS LIMIT COUNT...: runs MODEL (a name: d12, d48) with ARGS (one string) at each COUNT and
# prints the table and the commands. The efficiency's base is the run at 1 GPU, or TABLE_ONE (the mean
# tokens/s of another table's 1-GPU run) when COUNT has no 1; one_gpu is left set to the base.
table() {
    local model=$1 margs=$2 limit=$3; shift 3
    local n one=${TABLE_ONE:--} rows=() cmds=()
    for n in "$@"; do
        # shellcheck disable=SC2086  # margs: flags, split on purpose
        measure "${model}_$n" "$n" "$limit" $margs "${common[@]}"
        [ "$n" = 1 ] && one=$mean
        rows+=("| $n | $(span "$lo" "$hi") | $(efficiency "$mean" "$n" "$one") | $(gib "$mem") | $(mib "$opt") |")
        cmds+=("- \`$cmd\`$([ "$rc" != 0 ] && echo " (failed: exit $rc)")")
    done
    echo
    echo "| GPUs | tokens/s, steps 4–6 | efficiency | in use after step 1 (rank 0) | optimizer state per GPU |"
    echo "|---|---|---|---|---|"
    printf '%s\n' "${rows[@]}"
    echo
    echo "Efficiency: tokens/s(N) / (N · tokens/s(1)), of the means over steps 4–6 (the target: 95% or more at"
    echo "8 GPUs). Commands:"
    printf '%s\n' "${cmds[@]}"
    one_gpu=$one
}

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && commit="$commit (with uncommitted changes)"
name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
echo "Measured on $(date +%Y-%m-%d) on $gpus × $name at commit $commit, with"
echo "\`bash scripts/multi_gpu_scaling.sh $part\`."

if [ "$part" != d48 ]; then
    echo
    echo "**d12 (GPT-2 124M), B = 64 per GPU, T = 1024, fused head, at $(commas "${counts[@]}") GPUs.**"
    table d12 "-depth 12 -b 64" 90 "${counts[@]}"
    if [ "$max" -gt 1 ]; then
        measure "d12_${max}_profile" "$max" 90 -depth 12 -b 64 "${common[@]}" -profile 1
        echo
        # "  grad reduce: exposed   1.50   1.4%   5" (ms per step, share, calls) and "  total   111.00"
        exposed=$(awk '$1 == "grad" && $2 == "reduce:" && $3 == "exposed" { print $4 " ms (" $5 ")" }' "$dir/d12_${max}_profile.txt")
        total=$(awk '$1 == "total" { print $2 " ms" }' "$dir/d12_${max}_profile.txt")
        echo "The GPU time per step at $max GPUs, \`$cmd\`$([ "$rc" != 0 ] && echo " (failed: exit $rc)"):"
        echo "grad reduce: exposed ${exposed:-(no such line)} of ${total:-(no total)} per step."
        echo '```'
        sed -n '/^profile: /,$p' "$dir/d12_${max}_profile.txt"
        echo '```'
    else
        echo
        echo "One GPU only: no communication to profile."
    fi
fi
if [ "$part" != d12 ]; then
    echo
    d48_counts=(1)
    [ "$max" -gt 1 ] && d48_counts+=("$max")
    echo "**d48 (GPT-2 1.5B), B = 16 per GPU, T = 1024, fused head, at $(commas "${d48_counts[@]}") GPUs.**"
    table d48 "-depth 48 -b 16" 175 "${d48_counts[@]}"
    if [ "$max" -gt 1 ]; then
        echo
        echo "**The same without ZeRO-1 (\`-zero 0\`: master weights and AdamW state whole on every GPU) at $max GPUs.**"
        TABLE_ONE=$one_gpu table d48_zero0 "-depth 48 -b 16 -zero 0" 175 "$max"
    fi
fi
