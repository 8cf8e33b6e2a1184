# testing.sh: the harness of the shell test scripts (dev/test/*/test_*.sh source it), as testing.h is the
# C tests':
#   test_begin NAME            the counters at zero; $tmp a scratch directory, removed when the script exits
#   expect "what" COMMAND...   one check: passes when COMMAND exits 0, else prints `FAIL what` (and
#                              `ok   what` when it passes, where the script sets test_say_ok=1)
#   has TEXT PART              TEXT contains PART (a fixed string); hasnt: it does not
#   file_has FILE PART         the file contains PART (a fixed string); false when it does not exist
#   test_end                   the summary line `NAME: N passed, M failed` that dev/test/run_tests.sh adds
#                              up; its status is 1 when a check failed (the script's last command)

test_begin() {
    test_name=$1; passed=0; failed=0; test_say_ok=0
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
}

expect() {
    local what=$1; shift
    if "$@"; then
        passed=$((passed + 1))
        if [ "$test_say_ok" = 1 ]; then echo "ok   $what"; fi
    else
        failed=$((failed + 1)); echo "FAIL $what"
    fi
}

# (a pattern match, not printf | grep -q: under pipefail the printf's SIGPIPE, when grep has matched
# and gone, would fail the check)
has() { [[ "$1" == *"$2"* ]]; }
hasnt() { ! has "$@"; }
file_has() { grep -qF -- "$2" "$1" 2>/dev/null; }

test_end() {
    echo "$test_name: $passed passed, $failed failed"
    [ "$failed" = 0 ]
}
