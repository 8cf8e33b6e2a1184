#!/usr/bin/env bash
# run.sh: runs the harnesses of dev/fuzz/ (built as build/fuzz/<harness> by the Makefile, with the seeds of
# dev/fuzz/make_seeds.sh in build/fuzz/seeds/<name>/). For each harness: first every regression input of
# dev/fuzz/regressions/<name>/, once each, then fuzzing for SECONDS from its seeds and its corpus (<name>:
# the harness's name without fuzz_).
# The known defects of dev/fuzz/known_defects are passed to the harnesses in LLMC_FUZZ_SKIP (fuzz.h).
#   bash dev/fuzz/run.sh [-s SECONDS] [-j JOBS] [--ci] [HARNESS...]   (default: every harness, 30 s, 1 at once)
# The corpus grows in build/fuzz/corpus/<name>/ from run to run; with --ci it starts empty in
# build/fuzz/ci_corpus/<name>/ (dev/test/io/test_fuzz.sh, in `make test`). Scratch files go to /dev/shm.
# A finding is saved under build/fuzz/findings/<name>/ and its reproducer printed:
# `build/fuzz/<harness> FILE` runs it again; a small one belongs in dev/fuzz/regressions/<name>/,
# replayed by every run.
# Each harness ends with one line: its runs, its coverage (cov: edges, ft: features) and corpus size.
set -uo pipefail
cd "$(dirname "$0")/../.."
seconds=30 jobs=1 ci=0
harnesses=()
while [ $# -gt 0 ]; do
    case "$1" in
        -s) seconds=$2; shift 2 ;;
        -j) jobs=$2; shift 2 ;;
        --ci) ci=1; shift ;;
        -*) echo "usage: run.sh [-s SECONDS] [-j JOBS] [--ci] [HARNESS...]" >&2; exit 2 ;;
        *) harnesses+=("$1"); shift ;;
    esac
done
case "$seconds$jobs" in *[!0-9]*) echo "run.sh: -s and -j take whole numbers" >&2; exit 2 ;; esac
if [ ${#harnesses[@]} = 0 ]; then
    for f in dev/fuzz/fuzz_*.c; do harnesses+=("$(basename "$f" .c)"); done
fi
skip=$(sed -e 's/#.*//' dev/fuzz/known_defects | awk 'NF { printf "%s%s", sep, $1; sep = "," }')
export LLMC_FUZZ_SKIP=$skip
# the harnesses' scratch files: in memory where there is /dev/shm (fsync costs nothing there)
scratch_root=$( [ -w /dev/shm ] && echo /dev/shm || echo "$PWD/build/fuzz" )
scratch=$(mktemp -d "$scratch_root/llmc_fuzz_run.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
[ -n "$skip" ] && echo "run.sh: known defects stepped around (dev/fuzz/known_defects): $skip"

# run_one HARNESS: its regressions, then fuzzing; the summary in $scratch/HARNESS.result ("ok ..." or
# "FAIL ...")
run_one() {
    local h=$1 bin=build/fuzz/$1 log=$scratch/$1.log res=$scratch/$1.result name=${1#fuzz_}
    local findings=build/fuzz/findings/$name corpus=build/fuzz/corpus/$name seeds=build/fuzz/seeds/$name
    local opts=(-timeout=60 -rss_limit_mb=3072 -malloc_limit_mb=2048 -print_final_stats=1)
    case "$name" in
        safetensors | hf | tokenizer_files) opts+=(-dict=dev/fuzz/json.dict) ;;
        checkpoint | shard) opts+=(-dict=dev/fuzz/binary.dict) ;;
    esac
    mkdir -p "$findings" "$scratch/$h.tmp"
    [ "$ci" = 1 ] && corpus=build/fuzz/ci_corpus/$name && rm -rf "$corpus"
    mkdir -p "$corpus"
    local regressions=(dev/fuzz/regressions/"$name"/*)
    [ -e "${regressions[0]}" ] || regressions=()
    if [ ${#regressions[@]} -gt 0 ] &&
        ! TMPDIR=$scratch/$h.tmp "$bin" "${opts[@]}" "${regressions[@]}" > "$log" 2>&1; then
        echo "FAIL $h: a regression input fails: see the output above" > "$res"
        return
    fi
    local n_reg=${#regressions[@]}
    TMPDIR=$scratch/$h.tmp "$bin" "${opts[@]}" -max_total_time="$seconds" -artifact_prefix="$findings/" \
        "$corpus" "$seeds" >> "$log" 2>&1
    local rc=$?
    local runs cov ft corp
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$log" | tail -n 1)
    if [ "$rc" = 0 ]; then
        echo "ok   $h: $n_reg regression inputs; ${runs:-?} runs in ${seconds} s, ${cov:-no coverage line}" > "$res"
    else
        local art
        art=$(sed -n "s/.*Test unit written to //p" "$log" | tail -n 1)
        echo "FAIL $h: exit $rc after ${runs:-?} runs, ${cov:-?}; reproduce: $bin ${art:-(no input saved)}" > "$res"
    fi
}

running=0
for h in "${harnesses[@]}"; do
    if [ ! -x "build/fuzz/$h" ]; then
        echo "FAIL $h: build/fuzz/$h is not built (make build/fuzz/$h)" > "$scratch/$h.result"
        continue
    fi
    if [ "$jobs" -le 1 ]; then
        run_one "$h"
    else
        while [ "$running" -ge "$jobs" ]; do wait -n; running=$((running - 1)); done
        run_one "$h" &
        running=$((running + 1))
    fi
done
wait
passed=0 failed=0
for h in "${harnesses[@]}"; do
    line=$(cat "$scratch/$h.result")
    case "$line" in
        ok*) passed=$((passed + 1)) ;;
        *) failed=$((failed + 1))
           echo "--- $h: the end of its output"
           grep -vE '^#[0-9]+|^\s*"' "$scratch/$h.log" | tail -n 40 ;;
    esac
done
for h in "${harnesses[@]}"; do cat "$scratch/$h.result"; done
echo "run.sh: $passed of $((passed + failed)) harnesses without a finding"
[ "$failed" = 0 ]
