// flags.h: host-only. A program's command-line flags as one table (name, type, destination, default,
// group, help): defaults set, `-name value` pairs parsed with every error named (an unknown flag, a
// missing value, a flag given twice, a value that is not a number or is beyond its type's range), values
// formatted back exactly (a
// checkpoint records its run's settings as text) and looked up by name. The program owns the table, its
// usage text and the checks of the values (train_gpt.cu).
#pragma once
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

// Returns 0, or -1 with a message when `text` is not a valid value of flag f; `origin` says where the
// value came from when not from the command line ("" there).
static int flag_set(const Flag* f, const char* text, const char* origin) {
    char* end = NULL;
    if (f->type == FLAG_INT) {
        errno = 0;
        long v = strtol(text, &end, 10);
        if (end == text || *end != '\0') {
            fprintf(stderr, "error: flag %s expects an integer, got \"%s\"%s\n", f->name, text, origin);
            return -1;
        }
        if (errno == ERANGE || v < -2147483647L || v > 2147483647L) {
            fprintf(stderr, "error: flag %s: %s is beyond an int's range [-2147483647, 2147483647]%s\n", f->name, text,
                    origin);
            return -1;
        }
        *(int*)f->value = (int)v;
    } else if (f->type == FLAG_FLOAT) {
        float v = strtof(text, &end);
        if (end == text || *end != '\0') {
            fprintf(stderr, "error: flag %s expects a number, got \"%s\"%s\n", f->name, text, origin);
            return -1;
        }
        if (!isfinite(v)) {  // "inf", "nan", or a number too large for a float (strtof gives inf)
            fprintf(stderr, "error: flag %s: %s is %s%s\n", f->name, text,
                    isnan(v) ? "not a number (NaN)" : fabsf(v) == INFINITY && strpbrk(text, "iI")
                    ? "infinite: give a finite number" : "beyond a float's range (at most 3.4e38 in magnitude)", origin);
            return -1;
        }
        *(float*)f->value = v;
    } else {
        *(const char**)f->value = text;
    }
    return 0;
}

// Sets the n flags of f to their defaults, then to the values argv gives. Returns 1 when argv asks for
// help (-h or --help: the caller prints its usage), else 0; exits on a bad flag, naming it.
static int flags_parse(const Flag* f, int n, int argc, char** argv) {
    for (int i = 0; i < n; i++)
        if (flag_set(&f[i], f[i].def, " (its default)") != 0) exit(EXIT_FAILURE);  // a bug: caught at once
    int given[MAX_FLAGS] = {0};  // argv index of each flag's value, 0: not given
    for (int a = 1; a < argc; a += 2) {
        if (strcmp(argv[a], "-h") == 0 || strcmp(argv[a], "--help") == 0) return 1;
        int k = -1;
        for (int i = 0; i < n; i++)
            if (strcmp(argv[a], f[i].name) == 0) k = i;
        if (k < 0) {
            fprintf(stderr, "error: unknown flag \"%s\" (%s -h lists them)\n", argv[a], argv[0]);
            exit(EXIT_FAILURE);
        }
        if (a + 1 >= argc) {
            fprintf(stderr, "error: flag %s needs a value (%s)\n", argv[a], f[k].help);
            exit(EXIT_FAILURE);
        }
        if (given[k]) {
            fprintf(stderr, "error: flag %s given twice (%s, then %s)\n  hint: give each flag once\n", argv[a],
                    argv[given[k]], argv[a + 1]);
            exit(EXIT_FAILURE);
        }
        given[k] = a + 1;
        if (flag_set(&f[k], argv[a + 1], "") != 0) exit(EXIT_FAILURE);
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
