// flags.h: host-only. A program's command-line flags as one table (name, type, destination, default,
// group, help): defaults set, `-name value` pairs parsed with every error named (an unknown flag, a
// missing value, a flag given twice, a value that is not a number or is beyond its type's range: each
// through llmc/core/check.h), values formatted back exactly (a checkpoint records its run's settings as
// text) and looked up by name. The program owns the table, its
// usage text and the checks of the values (train_gpt.cu).
#pragma once
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"

typedef enum { FLAG_INT, FLAG_FLOAT, FLAG_STR } FlagType;
typedef struct {
    const char* name;
    FlagType type;
    void* value;
    const char* def;    // the default, parsed like a command-line value
    const char* group;  // usage() prints the flags grouped by this
    const char* help;
} Flag;
#define MAX_FLAGS 64

// Parses `text` as flag f's value into its destination: 0, or -1 with the reason in err (n bytes),
// "flag -b expects an integer, got "x"" and the like, the value left as it was.
static int flag_parse_(const Flag* f, const char* text, char* err, size_t n) {
    char* end = NULL;
    if (f->type == FLAG_INT) {
        errno = 0;
        long v = strtol(text, &end, 10);
        if (end == text || *end != '\0') {
            snprintf(err, n, "flag %s expects an integer, got \"%s\"", f->name, text);
            return -1;
        }
        if (errno == ERANGE || v < -2147483647L || v > 2147483647L) {
            snprintf(err, n, "flag %s: %s is beyond an int's range [-2147483647, 2147483647]", f->name, text);
            return -1;
        }
        *(int*)f->value = (int)v;
    } else if (f->type == FLAG_FLOAT) {
        float v = strtof(text, &end);
        if (end == text || *end != '\0') {
            snprintf(err, n, "flag %s expects a number, got \"%s\"", f->name, text);
            return -1;
        }
        if (!isfinite(v)) {  // "inf", "nan", or a number too large for a float (strtof gives inf)
            snprintf(err, n, "flag %s: %s is %s", f->name, text,
                     isnan(v) ? "not a number (NaN)" : fabsf(v) == INFINITY && strpbrk(text, "iI")
                     ? "infinite: give a finite number" : "beyond a float's range (at most 3.4e38 in magnitude)");
            return -1;
        }
        *(float*)f->value = v;
    } else {
        *(const char**)f->value = text;
    }
    return 0;
}

// Returns 0, or -1 after printing "error: <the reason><origin>" when `text` is not a valid value of flag
// f; `origin` says where the value came from and what to do (a checkpoint's settings: train_gpt.cu,
// whose caller exits).
static int flag_set(const Flag* f, const char* text, const char* origin) {
    char err[512];
    if (flag_parse_(f, text, err, sizeof(err)) == 0) return 0;
    fprintf(stderr, "error: %s%s\n", err, origin);
    return -1;
}

// Sets the n flags of f to their defaults, then to the values argv gives. Returns 1 when argv asks for
// help (-h or --help: the caller prints its usage), else 0; exits on a bad flag, naming it.
static int flags_parse(const Flag* f, int n, int argc, char** argv) {
    char err[512], hint[512];
    for (int i = 0; i < n; i++)
        if (flag_parse_(&f[i], f[i].def, err, sizeof(err)) != 0)  // a bug: caught at once
            check_failf("the program's flag table gives this flag a bad default; fix the table", "%s (its default)",
                        err);
    int given[MAX_FLAGS] = {0};  // argv index of each flag's value, 0: not given
    for (int a = 1; a < argc; a += 2) {
        if (strcmp(argv[a], "-h") == 0 || strcmp(argv[a], "--help") == 0) return 1;
        int k = -1;
        for (int i = 0; i < n; i++)
            if (strcmp(argv[a], f[i].name) == 0) k = i;
        if (k < 0)
            check_failf("check the flag's spelling: every flag is one dash and a name, followed by its value",
                        "unknown flag \"%s\" (%s -h lists them)", argv[a], argv[0]);
        snprintf(hint, sizeof(hint), "%s: %s (%s -h lists every flag)", argv[a], f[k].help, argv[0]);
        if (a + 1 >= argc)
            check_failf("every flag is followed by its value: -name value", "flag %s needs a value (%s)", argv[a],
                        f[k].help);
        if (given[k])
            check_failf("give each flag once", "flag %s given twice (%s, then %s)", argv[a], argv[given[k]],
                        argv[a + 1]);
        given[k] = a + 1;
        if (flag_parse_(&f[k], argv[a + 1], err, sizeof(err)) != 0) check_failf(hint, "%s", err);
    }
    return 0;
}

// A flag's value as text, exact (floats with 9 significant digits round-trip).
static void flag_format(char* out, size_t n, const Flag* f) {
    if (f->type == FLAG_INT) snprintf(out, n, "%d", *(const int*)f->value);
    else if (f->type == FLAG_FLOAT) snprintf(out, n, "%.9g", *(const float*)f->value);
    else snprintf(out, n, "%s", *(const char* const*)f->value);
}

static const Flag* flag_find(const Flag* f, int n, const char* name) {
    for (int i = 0; i < n; i++)
        if (strcmp(f[i].name, name) == 0) return &f[i];
    return NULL;
}

// argv index of flag `name`, 0 when not given
static int flag_index(int argc, char** argv, const char* name) {
    for (int a = 1; a < argc; a += 2)
        if (strcmp(argv[a], name) == 0) return a;
    return 0;
}

static int flag_given(int argc, char** argv, const char* name) { return flag_index(argc, argv, name) != 0; }
