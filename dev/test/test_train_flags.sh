#!/usr/bin/env bash
# test_train_flags.sh: ./train_gpt's flags and bad input, without a GPU (every check below fails before
# the GPU is touched). Each bad command must exit 1 with an error naming the flag or file; -h must list
# every flag of the table in train_gpt.cu. Prints `test_train_flags: N passed, M failed`.
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

echo "test_train_flags: $passed passed, $failed failed"
[ "$failed" = 0 ]
