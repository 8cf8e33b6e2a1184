#!/usr/bin/env bash
# compare_heads.sh: device memory and throughput of the fused and the unfused LM head over batch sizes.
#   bash scripts/compare_heads.sh run  [DIR]   on a GPU: trains a few steps per (head, B), writes DIR/heads.tsv
#   bash scripts/compare_heads.sh plot [DIR]   anywhere: DIR/heads.png from the table (installs gnuplot-nox)
# TRAINER=PATH runs another build than ./train_gpt (paths from the repo's root, where the runs run).
# Model: GPT-2 124M (d12), T=1024 (DEPTH, T, STEPS, BATCHES override). For each head, B grows along the list
# until a run fails to start (out of memory); then the batches between the last that ran and that one are
# bisected until they are at most REFINE apart (default 8; 0: the list alone), so that the largest B that
# fits is known to within REFINE. Each head's rows come in increasing B. Memory is what the trainer reports
# in use on the GPU after the first step; tok/s and MFU (%; - where the trainer knows no peak for the GPU) are
# its averages over steps 2..STEPS.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}; dir=${2:-out/compare_heads}
# the starter val split holds fewer than 192x1024 tokens: the one val batch comes from the train shards
VAL=${VAL:-"data/starter/starter_train_*.bin"}
DEPTH=${DEPTH:-12}; T=${T:-1024}; STEPS=${STEPS:-4}; BATCHES=${BATCHES:-"16 32 64 128 192 256 320 384 448"}
REFINE=${REFINE:-8}
case "$REFINE" in
    ''|*[!0-9]*) echo "error: REFINE=$REFINE: expected a whole number of sequences (0: no bisection)" >&2; exit 2 ;;
esac

# one run of head $1 at batch $2: its row appended to the table; fails as the trainer does
one() {
    local head=$1 B=$2 log="$dir/${1}_b$2.log" mem tok mfu
    if ! "${TRAINER:-./train_gpt}" -depth "$DEPTH" -t "$T" -b "$B" -steps "$STEPS" -warmup 1 -val_every 0 -val_batches 1 \
         -sample_tokens 0 -keep 0 -head "$head" -out "$dir/run_${head}_b$B" -val "$VAL" > "$log" 2>&1; then
        echo "$head B=$B: did not run ($(grep -m1 -i error "$log" || tail -n 1 "$log"))"
        return 1
    fi
    mem=$(sed -n 's/^memory: \([0-9.]*\) MiB of .* after the first step$/\1/p' "$log")
    tok=$(sed -n 's/^average step .* ms, \([0-9]*\) tok\/s.*/\1/p' "$log")
    mfu=$(sed -n 's/^average step .*, MFU \([0-9.]*\)%.*/\1/p' "$log")
    printf '%s\t%s\t%s\t%s\t%s\n' "$head" "$B" "$mem" "$tok" "${mfu:--}" | tee -a "$dir/heads.tsv.tmp"
}

run() {
    mkdir -p "$dir"
    [ -n "${TRAINER:-}" ] || [ -x ./train_gpt ] || make train_gpt
    printf 'head\tB\tmem_MiB\ttok_s\tmfu\n' > "$dir/heads.tsv.tmp"
    for head in fused unfused; do
        local ok=0 bad=0 mid
        for B in $BATCHES; do
            if one "$head" "$B"; then ok=$B; else bad=$B; break; fi
        done
        # the largest B that fits, to within REFINE: bisect between the last that ran and the first that did not
        while [ "$REFINE" -gt 0 ] && [ "$ok" -gt 0 ] && [ "$bad" -gt $((ok + REFINE)) ]; do
            mid=$(( (ok + bad) / 2 ))
            if one "$head" "$mid"; then ok=$mid; else bad=$mid; fi
        done
    done
    mv "$dir/heads.tsv.tmp" "$dir/heads.tsv"
    summary
}

summary() {
    awk -F'\t' 'NR > 1 { if ($3 > 0) { max[$1] = $2 } }
        END { for (h in max) printf "largest batch that fits, %s head: B=%d (%d tokens)\n", h, max[h], max[h] * '"$T"' }' "$dir/heads.tsv"
}

plot() {
    [ -f "$dir/heads.tsv" ] || { echo "error: $dir/heads.tsv not found; run \`bash $0 run $dir\` on a GPU first" >&2; exit 1; }
    command -v gnuplot >/dev/null || { apt-get update -qq && apt-get install -y -qq gnuplot-nox; }
    for h in fused unfused; do awk -F'\t' -v h=$h '$1 == h' "$dir/heads.tsv" > "$dir/$h.dat"; done
    gnuplot <<GP
set terminal pngcairo size 1000,420 font ",11"
set output "$dir/heads.png"
set multiplot layout 1,2 title "LM head: fused vs unfused, GPT-2 d$DEPTH, T=$T, one GPU"
set logscale x 2; set xlabel "batch size B (sequences of $T tokens)"; set grid
set key top left
set ylabel "GPU memory in use after step 1 (GiB)"
plot "$dir/fused.dat" using 2:(\$3/1024) with linespoints lw 2 title "fused", \
     "$dir/unfused.dat" using 2:(\$3/1024) with linespoints lw 2 title "unfused"
set ylabel "throughput (thousand tokens/s)"
plot "$dir/fused.dat" using 2:(\$4/1000) with linespoints lw 2 title "fused", \
     "$dir/unfused.dat" using 2:(\$4/1000) with linespoints lw 2 title "unfused"
unset multiplot
GP
    echo "$dir/heads.png"
    summary
}

case "$mode" in
    run) run ;;
    plot) plot ;;
    *) echo "usage: bash scripts/compare_heads.sh run|plot [DIR]" >&2; exit 2 ;;
esac
