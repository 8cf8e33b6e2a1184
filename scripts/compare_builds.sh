#!/usr/bin/env bash
# compare_builds.sh: builds of ./train_gpt measured side by side on one GPU, as doc/results.md's and
# doc/log.md's comparisons are: the same flags for each, ROUNDS rounds of one run of each build in the
# order given, so that a drift of the GPU's clocks or temperature falls on all of them. A measurement,
# not a test: it prints markdown to paste into doc/log.md, and into doc/results.md where it replaces a
# current figure (the GPU, the date, a row per build and the exact commands). Logs stay in out/compare_builds/ (COMPARE_DIR=... for another folder). BINARY and
# COMPARE_DIR are taken from the directory it is called in; the runs run in the repo's root, so paths in
# the trainer's flags are from there. The GPU named is the first that nvidia-smi lists.
#   bash scripts/compare_builds.sh [-rounds N] [-from S] LABEL=BINARY... [-- TRAINER FLAGS]
#     LABEL=BINARY  a build and its name in the table (a commit, say): 40c26ae=../old/train_gpt
#     -rounds N     runs of each build (default 2)
#     -from S       the first step whose tokens/s count (default 2: step 1 includes cuBLASLt's warm-up)
#     TRAINER FLAGS the flags of every run, instead of the default GPT-2 d12 set: -depth 12 -b 64
#                   -t 1024 -steps 6 -val_every 0 -val_batches 1 -sample_tokens 0 -keep 0 (the script
#                   adds -out, one folder a run)
# e.g. two commits built in two worktrees, at -recompute 1:
#   bash scripts/compare_builds.sh 40c26ae=../old/train_gpt 3387cbb=./train_gpt -- -depth 12 -b 64 \
#       -t 1024 -steps 6 -val_every 0 -val_batches 1 -sample_tokens 0 -keep 0 -recompute 1
# A row: tokens/s as the range of the per-step figure over steps S..last, one range a run; the mean
# ms a step over those steps, one a run; the memory in use after step 1 (the trainer's line). A run
# that fails shows as failed, with the end of its output on stderr, and the script exits 1.
set -u
usage="usage: bash scripts/compare_builds.sh [-rounds N] [-from S] LABEL=BINARY... [-- TRAINER FLAGS]"
rounds=2; from=2; labels=(); bins=()
flags=(-depth 12 -b 64 -t 1024 -steps 6 -val_every 0 -val_batches 1 -sample_tokens 0 -keep 0)
while [ $# -gt 0 ]; do
    case "$1" in
        -rounds | -from)
            if [ $# -lt 2 ] || ! [[ "$2" =~ ^[1-9][0-9]*$ ]]; then
                echo "error: $1 needs a whole number of 1 or more${2+, got '$2'}" >&2; echo "$usage" >&2; exit 2
            fi
            [ "$1" = -rounds ] && rounds=$2 || from=$2
            shift 2 ;;
        --) shift; flags=("$@"); break ;;
        *=*)
            label=${1%%=*}; bin=${1#*=}
            if [ -z "$label" ] || ! [[ "$label" =~ ^[A-Za-z0-9._-]+$ ]]; then
                echo "error: '$1': the label (before =) must be letters, digits, '.', '_' or '-'" >&2; exit 2
            fi
            if [ ! -x "$bin" ] || [ -d "$bin" ]; then
                echo "error: '$1': $bin is not an executable (build it: make train_gpt)" >&2; exit 2
            fi
            for l in ${labels[@]+"${labels[@]}"}; do
                [ "$l" = "$label" ] && { echo "error: the label $label is given twice" >&2; exit 2; }
            done
            labels+=("$label"); bins+=("$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"); shift ;;
        *) echo "error: '$1': expected LABEL=BINARY, -rounds N, -from S or --" >&2; echo "$usage" >&2; exit 2 ;;
    esac
done
if [ ${#labels[@]} -lt 1 ]; then echo "error: no build given" >&2; echo "$usage" >&2; exit 2; fi
for f in ${flags[@]+"${flags[@]}"}; do
    if [ "$f" = -out ]; then
        echo "error: the flags must not set -out: the script gives each run its own" >&2; exit 2
    fi
done
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
if [ -z "$gpu" ]; then echo "SKIPPED compare_builds: needs a GPU, nvidia-smi finds none"; exit 0; fi
dir=${COMPARE_DIR:-out/compare_builds}
mkdir -p "$dir" || exit 2
dir=$(cd "$dir" && pwd)
cd "$(dirname "$0")/.." || exit 2  # the builds run in the repo's root, where the default data is

# run I R: round R of build I; appends to the build's cells (rng, ms, mem) and sets bad on a failure
declare -a rng ms mem
bad=0
run() {
    local i=$1 r=$2 name="${labels[$1]}_r$2"
    rm -rf "${dir:?}/$name"
    local rc=0
    "${bins[$i]}" ${flags[@]+"${flags[@]}"} -out "$dir/$name" > "$dir/$name.txt" 2>&1 || rc=$?
    local cell_rng cell_ms cell_mem
    read -r cell_rng cell_ms < <(awk -v from="$from" '
        $1 == "step" && $3 == "train_loss" && $2 >= from {
            t = m = ""
            for (f = 4; f < NF; f++) { if ($f == "tok_s") t = $(f + 1); if ($f == "ms") m = $(f + 1) }
            if (t == "" || m == "") next
            k++; s += m; if (k == 1 || t < lo) lo = t; if (k == 1 || t > hi) hi = t }
        END { if (k > 0) printf "%.1fk–%.1fk %.1f\n", lo / 1000, hi / 1000, s / k; else print "- -" }' \
        "$dir/$name/log.txt" 2>/dev/null || echo "- -")
    cell_mem=$(sed -nE 's/^memory: ([0-9.]+) MiB of .* after the first step$/\1/p' "$dir/$name.txt" |
               awk '{ printf "%.0f\n", $1 }' | sed -E ':a; s/([0-9])([0-9]{3})($|,)/\1,\2\3/; ta')
    if [ "$rc" != 0 ] || [ "$cell_rng" = - ]; then
        bad=1; cell_rng="failed (exit $rc)"; cell_ms=-
        echo "note: ${labels[$i]} round $r failed (exit $rc; no step from $from logged?): its output ends:" >&2
        tail -n 15 "$dir/$name.txt" >&2
    fi
    rng[$i]+="${rng[$i]:+, }$cell_rng"
    ms[$i]+="${ms[$i]:+, }$cell_ms"
    [ -n "$cell_mem" ] && cell_mem="$cell_mem MiB" || cell_mem=-
    mem[$i]+="${mem[$i]:+, }$cell_mem"
}
for ((r = 1; r <= rounds; r++)); do
    for i in "${!labels[@]}"; do run "$i" "$r"; done
done

echo "Measured on $(date -u +%Y-%m-%d) on one $gpu, the builds in one run, $rounds round(s) of one run"
echo "of each in turn; tokens/s is the range over steps $from to the last, one range a run:"
echo
echo "| build | tokens/s | ms a step | in use after step 1 |"
echo "|---|---|---|---|"
for i in "${!labels[@]}"; do
    echo "| ${labels[$i]} | ${rng[$i]} | ${ms[$i]} | ${mem[$i]} |"
done
echo
echo "Commands:"
for i in "${!labels[@]}"; do echo "- ${labels[$i]}: \`${bins[$i]} ${flags[*]-}\`"; done
exit "$bad"
