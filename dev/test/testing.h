// testing.h: the few lines every test binary shares. Each check counts as passed or failed; a failed
// one prints where and what was compared. test_summary() prints the line `name: N passed, M failed`
// that dev/test/run_tests.sh adds up, and returns the exit code (non-zero on any failure).
#pragma once
#include <stdio.h>
#include <stdlib.h>

static int test_passed = 0, test_failed = 0;

#define EXPECT(cond, ...) do { \
    if (cond) { test_passed++; } \
    else { test_failed++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
           fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); } } while (0)

static inline int test_summary(const char* name) {
    printf("%s: %d passed, %d failed\n", name, test_passed, test_failed);
    return test_failed ? 1 : 0;
}

// Removes a test's temporary directory and all in it; a warning, not a failure, when it cannot.
static inline void test_remove_dir(const char* dir) {
    char cmd[4200];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
}
