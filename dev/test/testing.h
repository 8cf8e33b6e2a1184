// testing.h: the few lines every test binary shares. Each check counts as passed or failed; a failed
// one prints where and what was compared. test_summary() prints the line `name: N passed, M failed`
// that dev/test/run_tests.sh adds up, and returns the exit code (non-zero on any failure).
#pragma once
#include <stdio.h>

static int test_passed = 0, test_failed = 0;

#define EXPECT(cond, ...) do { \
    if (cond) { test_passed++; } \
    else { test_failed++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
           fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); } } while (0)

static inline int test_summary(const char* name) {
    printf("%s: %d passed, %d failed\n", name, test_passed, test_failed);
    return test_failed ? 1 : 0;
}
