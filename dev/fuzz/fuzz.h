// fuzz.h: what the libFuzzer harnesses of dev/fuzz/ share (doc/reliability.md says how they run).
//
// A harness is one C file defining LLVMFuzzerTestOneInput, built by clang with
// -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined and linked with -Wl,--wrap=exit
// (the Makefile's build/fuzz/%). It includes the project's headers as they are: nothing in llmc/ knows
// about fuzzing.
//
// Exit. Most readers return -1 with a message, but some code ends the process on bad input (the
// tools' main functions, check.h's check_fail, the encoder's compile of a pattern). Under --wrap=exit
// every call to exit() in the harness goes to __wrap_exit below: inside FUZZ_TRY it jumps back to the
// harness, which sees a refused input and goes on with the next one; anywhere else (libFuzzer's own
// exit at the end of a run) it is the real exit. atexit handlers do not run on such a jump.
//
// Findings. FUZZ_FAIL prints what property broke and aborts: libFuzzer saves the input as a crash
// (as it does for a sanitizer's report, a timeout or a malloc over -malloc_limit_mb).
//
// Known defects. A defect that a harness finds while its fix is not in yet is named in
// dev/fuzz/known_defects by its number; dev/fuzz/run.sh passes the list in LLMC_FUZZ_SKIP, and the
// harness steps around the inputs that show it (fuzz_skip), so that a run goes on to find other things.
//
// Files. Readers take paths: fuzz_dir is a fresh directory for this process (under $TMPDIR), removed
// at exit; fuzz_write puts bytes into a file there.
//
// Parts. A harness that needs several files (or text and settings) reads its input as parts separated
// by FUZZ_SEP; dev/fuzz/make_seeds.sh writes the seeds that way.
#pragma once
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sanitizer/asan_interface.h>
#include <sanitizer/lsan_interface.h>

// --- exit ----------------------------------------------------------------------------------------

static jmp_buf fuzz_exit_jmp;
static volatile int fuzz_exit_armed;
static volatile int fuzz_exit_status;

void __real_exit(int status) __attribute__((noreturn));
void __wrap_exit(int status) __attribute__((noreturn));
void __wrap_exit(int status) {
    if (fuzz_exit_armed) {
        fuzz_exit_armed = 0;
        fuzz_exit_status = status;
        longjmp(fuzz_exit_jmp, 1);
    }
    __real_exit(status);
}

// Runs the statements; `exited` becomes 1 when they called exit() (its status in fuzz_exit_status),
// else 0. Locals that the statements change and that are read afterwards must be volatile.
#define FUZZ_TRY(exited, ...) do {                      \
        fuzz_exit_armed = 1;                            \
        if (setjmp(fuzz_exit_jmp) == 0) {               \
            __VA_ARGS__;                                \
            fuzz_exit_armed = 0;                        \
            (exited) = 0;                               \
        } else {                                        \
            (exited) = 1;                               \
        }                                               \
    } while (0)

// --- findings and known defects ------------------------------------------------------------------

#define FUZZ_FAIL(...) do {                                                       \
        fprintf(stderr, "\nFUZZ FINDING at %s:%d: ", __FILE__, __LINE__);        \
        fprintf(stderr, __VA_ARGS__);                                             \
        fprintf(stderr, "\n");                                                    \
        abort();                                                                  \
    } while (0)

// A refusal's message must name the file it refuses.
#define FUZZ_NAMES(err, path) do {                                                              \
        if (!strstr((err), (path))) FUZZ_FAIL("the message does not name %s: %s", (path), (err)); \
    } while (0)

// Whether known defect n is listed in LLMC_FUZZ_SKIP ("1,5,11"): its inputs are stepped around.
static inline int fuzz_skip(int n) {
    static int parsed = 0, skip[64];
    if (!parsed) {
        parsed = 1;
        const char* s = getenv("LLMC_FUZZ_SKIP");
        for (char* end; s && *s; s = end) {
            long v = strtol(s, &end, 10);
            if (end == s) { end = (char*)s + 1; continue; }
            if (v > 0 && v < 64) skip[v] = 1;
        }
    }
    return n > 0 && n < 64 && skip[n];
}

// --- files ---------------------------------------------------------------------------------------

static char fuzz_dir[1024];

static int fuzz_rm_one(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
    (void)st; (void)flag; (void)ftw;
    return remove(path);
}

// Removes path and everything under it (silently: it may not exist).
static inline void fuzz_rm_rf(const char* path) {
    nftw(path, fuzz_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void fuzz_dir_remove(void) {
    if (fuzz_dir[0]) fuzz_rm_rf(fuzz_dir);
}

// Makes fuzz_dir once per process; path = fuzz_dir/name.
static inline const char* fuzz_path(char* path, size_t n, const char* name) {
    if (!fuzz_dir[0]) {
        const char* t = getenv("TMPDIR");
        snprintf(fuzz_dir, sizeof(fuzz_dir), "%s/llmc_fuzz.XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(fuzz_dir)) { perror(fuzz_dir); abort(); }
        atexit(fuzz_dir_remove);
    }
    snprintf(path, n, "%s/%s", fuzz_dir, name);
    return path;
}

static inline void fuzz_write(const char* path, const void* data, size_t n) {
    FILE* f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) { perror(path); abort(); }
}

static inline unsigned char* fuzz_read(const char* path, size_t* n) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    struct stat st;
    fstat(fileno(f), &st);
    *n = (size_t)st.st_size;
    unsigned char* b = (unsigned char*)malloc(*n + 1);
    if (!b || fread(b, 1, *n, f) != *n) { perror(path); abort(); }
    fclose(f);
    b[*n] = 0;
    return b;
}

static inline int fuzz_exists(const char* path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

// --- parts ---------------------------------------------------------------------------------------

#define FUZZ_SEP "\n--8<--\n"
#define FUZZ_SEP_LEN (sizeof(FUZZ_SEP) - 1)
#define FUZZ_MAX_PARTS 16

typedef struct {
    const uint8_t* at[FUZZ_MAX_PARTS];
    size_t len[FUZZ_MAX_PARTS];
    int n;
} FuzzParts;

// data split on FUZZ_SEP into at most FUZZ_MAX_PARTS parts (the last one keeps any further separators).
static inline void fuzz_parts(FuzzParts* p, const uint8_t* data, size_t size) {
    p->n = 0;
    for (;;) {
        const uint8_t* s = p->n + 1 < FUZZ_MAX_PARTS ? (const uint8_t*)memmem(data, size, FUZZ_SEP, FUZZ_SEP_LEN) : NULL;
        p->at[p->n] = data;
        p->len[p->n] = s ? (size_t)(s - data) : size;
        p->n++;
        if (!s) return;
        size -= (size_t)(s - data) + FUZZ_SEP_LEN;
        data = s + FUZZ_SEP_LEN;
    }
}

// --- numbers in text -------------------------------------------------------------------------------
// The JSON harnesses add one mutation to libFuzzer's own (LLVMFuzzerCustomMutator): a number written in
// the input replaced by an edge value, so that sizes, counts and offsets meet their limits more often
// than random digits would.

size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

static const char* const fuzz_edges[] = {
    "0", "1", "-1", "2", "3", "4", "7", "8", "16", "255", "256", "65535", "65536", "1000000", "536870912",
    "1073741823", "1073741824", "1073741825", "2147483647", "2147483648", "-2147483649", "4294967295",
    "4294967296", "9007199254740992", "9007199254740993", "18446744073709551616", "1e300", "-1e300", "1e-300", "0.5",
    "1.5", "1e5", "-0"};

// One ASCII number of data (a run of digits, with a sign, '.', 'e') replaced by an edge value, picked by
// seed; the new size, or 0 when there is no number or no room.
static inline size_t fuzz_mutate_number(uint8_t* data, size_t size, size_t max_size, unsigned seed) {
    size_t count = 0;
    for (size_t i = 0; i < size; i++)
        if (data[i] >= '0' && data[i] <= '9' && (i == 0 || !strchr("0123456789.eE+-", data[i - 1]))) count++;
    if (count == 0) return 0;
    size_t pick = seed % count, at = 0, k = 0;
    for (size_t i = 0; i < size; i++)
        if (data[i] >= '0' && data[i] <= '9' && (i == 0 || !strchr("0123456789.eE+-", data[i - 1])) && k++ == pick) {
            at = i;
            break;
        }
    if (at > 0 && data[at - 1] == '-') at--;
    size_t end = at + 1;
    while (end < size && strchr("0123456789.eE+-", data[end])) end++;
    const char* v = fuzz_edges[(seed / 7) % (sizeof(fuzz_edges) / sizeof(fuzz_edges[0]))];
    size_t vn = strlen(v), new_size = size - (end - at) + vn;
    if (new_size > max_size) return 0;
    memmove(data + at + vn, data + end, size - end);
    memcpy(data + at, v, vn);
    return new_size;
}

#ifdef FUZZ_MUTATE_NUMBERS
size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned seed);
size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned seed) {
    if (seed % 4 == 0) {
        size_t n = fuzz_mutate_number(data, size, max_size, seed / 4);
        if (n) return n;
    }
    return LLVMFuzzerMutate(data, size, max_size);
}
#endif

// --- cJSON's input -------------------------------------------------------------------------------
// cJSON releases up to 1.7.17 read the byte after a buffer given to cJSON_ParseWithLength. The library
// is not instrumented, so AddressSanitizer would not see that read: the harnesses that link cJSON are
// also linked with -Wl,--wrap=cJSON_ParseWithLength, and the byte after every such buffer must be
// memory the caller owns.
#ifdef FUZZ_WRAP_CJSON
#include <cjson/cJSON.h>
cJSON* __real_cJSON_ParseWithLength(const char* value, size_t buffer_length);
cJSON* __wrap_cJSON_ParseWithLength(const char* value, size_t buffer_length);
cJSON* __wrap_cJSON_ParseWithLength(const char* value, size_t buffer_length) {
    if (value && __asan_address_is_poisoned(value + buffer_length))
        FUZZ_FAIL("cJSON_ParseWithLength(%p, %zu): the byte after the buffer is not the caller's memory, and cJSON "
                  "up to 1.7.17 reads it", (const void*)value, buffer_length);
    return __real_cJSON_ParseWithLength(value, buffer_length);
}
#endif
