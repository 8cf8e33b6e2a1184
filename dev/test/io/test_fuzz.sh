#!/usr/bin/env bash
# test_fuzz.sh: the fuzzers of dev/fuzz/ in `make test` (doc/reliability.md), and the machinery they rely on.
#   - dev/fuzz/run.sh --ci: every harness replays its regression inputs, then fuzzes for FUZZ_CI_SECONDS
#     (default 10, its start included) from a fresh corpus; one check per harness, none may find anything;
#   - an input on which the code under test calls exit() comes back to the harness (fuzz.h's --wrap=exit):
#     fuzz_make_shards on a document of invalid UTF-8, which make_shards refuses with exit(1), ends well;
#   - every defect that dev/fuzz/known_defects lists is shown by its regression inputs
#     (dev/fuzz/regressions/*/defectNN_*) when the harness steps around the other known ones only, and is
#     stepped around when it is listed too (LLMC_FUZZ_SKIP): the inputs reproduce the defect, and a finding
#     stops a run.
# Needs the harnesses and the seeds (make builds them for `make test`).
# Prints `test_fuzz: N passed, M failed`.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source dev/test/testing.sh
test_begin test_fuzz

missing=""
for f in dev/fuzz/fuzz_*.c; do
    h=$(basename "$f" .c)
    [ -x "build/fuzz/$h" ] || missing="$missing build/fuzz/$h"
done
[ -f build/fuzz/seeds/.complete ] || missing="$missing build/fuzz/seeds/.complete"
expect "the harnesses and seeds are built (missing:$missing; \`make$missing\`)" [ -z "$missing" ]
if [ -n "$missing" ]; then test_end; exit; fi

# --- the harnesses, a few seconds each ----------------------------------------------------------------
out=$(bash dev/fuzz/run.sh --ci -s "${FUZZ_CI_SECONDS:-10}" 2>&1)
echo "$out"
for f in dev/fuzz/fuzz_*.c; do
    h=$(basename "$f" .c)
    expect "$h: its regressions replayed and a short run without a finding" has "$out" "ok   $h:"
done

# --- exit() comes back to the harness ------------------------------------------------------------------
printf '\x00\x00\x00\x00\x00\n--8<--\nvalid text\n--8<--\nthen \xc3\x28 not UTF-8' > "$tmp/exits"
mkdir -p "$tmp/scratch"
rc=0
log=$(LLMC_FUZZ_VERBOSE=1 TMPDIR=$tmp/scratch build/fuzz/fuzz_make_shards "$tmp/exits" 2>&1) || rc=$?
expect "make_shards refuses the invalid document (its message: $(echo "$log" | grep -m1 error))" has "$log" "invalid UTF-8"
expect "after make_shards' exit(1) the harness goes on and ends well (rc $rc)" [ "$rc" = 0 ]
expect "the harness reports the input run (output: $(echo "$log" | tail -n 3))" has "$log" "Executed $tmp/exits"

# --- the known defects: shown by their regression inputs, stepped around when listed ------------------
known=$(sed -e 's/#.*//' dev/fuzz/known_defects | awk 'NF { print $1 }')
all=$(echo $known | tr ' ' ',')
for n in $known; do
    others=$(echo $known | tr ' ' '\n' | grep -vx "$n" | paste -sd, -)
    nn=$(printf '%02d' "$n")
    inputs=(dev/fuzz/regressions/*/defect"${nn}"_*)
    [ -e "${inputs[0]}" ] || continue
    h=fuzz_$(basename "$(dirname "${inputs[0]}")")
    rc=0
    log=$(LLMC_FUZZ_SKIP=$others TMPDIR=$tmp/scratch "build/fuzz/$h" -malloc_limit_mb=2048 "${inputs[@]}" 2>&1) || rc=$?
    expect "defect $n: $h finds it in ${inputs[*]}, the other known ones stepped around (rc $rc)" [ "$rc" != 0 ]
    rc=0
    log=$(LLMC_FUZZ_SKIP=$all TMPDIR=$tmp/scratch "build/fuzz/$h" -malloc_limit_mb=2048 "${inputs[@]}" 2>&1) || rc=$?
    expect "defect $n: stepped around with LLMC_FUZZ_SKIP=$all (rc $rc: $(echo "$log" | grep -m1 -E 'FINDING|ERROR|runtime error'))" [ "$rc" = 0 ]
done

test_end
