#!/usr/bin/env bash
# run_gpt2.sh DEPTH [extra train_gpt flags]: the run recipe for GPT-2 d12 (124M), d24 (350M),
# d36 (774M) or d48 (1.56B) on llm.c-format shards (FineWeb shards made by llm.c's scripts load as
# they are: point DATA at them). Checkpoints every 1000 steps; Ctrl-C and `-resume latest` continue.
#
# Napkin math (tokens ≈ 20 x parameters; 524,288 tokens per step; time at the MFU that d12 reaches on
# one H100, ~43% of the datasheet's 989 TFLOP/s (the H200's too): 528k tok/s for d12, doc/results.md
# (commit e86ab82, 2026-12-06, `./train_gpt -depth 12 -b 64 -t 1024 -steps 8 -val_every 0
# -sample_tokens 0 -keep 0`); the other sizes' times are extrapolations at the same MFU, not
# measurements):
#   depth  params  tokens  steps   B (T=1024) x accumulation   FLOPs (6·N·tokens)  one H100 or H200
#   d12    124M    2.5B     4,750  64 x 8                      1.9e18              ~1.3 h
#   d24    350M    7.0B    13,350  32 x 16                     1.5e19              ~10 h
#   d36    774M    15.5B   29,550  16 x 32                     7.2e19              ~2.1 days
#   d48    1.56B   31B     59,200  8 x 64                      2.9e20              ~8.3 days
# The starter corpus (3.5M tokens) is far too small for these: it is for d6 and for trying things.
set -euo pipefail
cd "$(dirname "$0")/.."
depth=${1:?usage: bash scripts/run_gpt2.sh 12|24|36|48 [extra train_gpt flags]}; shift
DATA=${DATA:-data/fineweb10B}
case "$depth" in
    12) B=64; steps=4750; lr=6e-4 ;;
    24) B=32; steps=13350; lr=3e-4 ;;
    36) B=16; steps=29550; lr=2.5e-4 ;;
    48) B=8; steps=59200; lr=2e-4 ;;
    *) echo "error: depth $depth: choose 12, 24, 36 or 48 (d6 is ./train_gpt's default)" >&2; exit 2 ;;
esac
ls $DATA/*train*.bin >/dev/null 2>&1 || {
    echo "error: no train shards in $DATA/; make them with llm.c's FineWeb script, or set DATA=dir (data/debian for ~28M tokens: make data-debian)" >&2; exit 1; }
[ -x ./train_gpt ] || make train_gpt
exec ./train_gpt -depth "$depth" -t 1024 -b "$B" -total_batch 524288 -steps "$steps" -lr "$lr" \
    -warmup 700 -schedule cosine -final_lr_frac 0.0 -wd 0.1 -val_every 250 -val_batches 20 \
    -sample_every 1000 -ckpt_every 1000 -keep 2 -train "$DATA/*train*.bin" -val "$DATA/*val*.bin" \
    -out "out/gpt2_d$depth" "$@"
