// check.h: the one place that defines error checking.
// Every failing call prints what failed, where (file:line) and a hint for the likely user error,
// then exits non-zero: through check_fail / check_failf below, which llmc/ uses for every error exit
// of its own (the CUDA and cuBLAS(Lt) checks add the failing call's text as an "in" line; NCCL's
// failures are reported by llmc/dist/comm_nccl.cuh with the communicator's last error).
// Host-only code includes this file as it is; the CUDA and cuBLAS(Lt) checks appear only when their
// headers are available (nvcc).
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <stdarg.h>

// The one way out on an error: prints
//   error: <the message>
//     at <file>:<line>
//     hint: <what to do>
// to stderr and exits with EXIT_FAILURE. The lines are printed under stderr's lock, so that a thread's
// message is never interleaved with another's. llmc/dist/dist_report.h relays a rank's last such message
// to the others, from its "error" line on.
#if defined(__GNUC__) || defined(__clang__)
__attribute__((noreturn, format(printf, 4, 5)))
#endif
static inline void check_fail_at_(const char* file, int line, const char* hint, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    flockfile(stderr);
    fputs("error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n  at %s:%d\n  hint: %s\n", file, line, hint);
    funlockfile(stderr);
    va_end(ap);
    exit(EXIT_FAILURE);
}
// check_fail("what failed", "hint"); check_failf("hint", "printf format", ...): the message formatted
#define check_fail(what, hint) check_fail_at_(__FILE__, __LINE__, (hint), "%s", (what))
#define check_failf(hint, ...) check_fail_at_(__FILE__, __LINE__, (hint), __VA_ARGS__)

// --- host: files and memory ------------------------------------------------------------------

static inline FILE* fopen_check_(const char* path, const char* mode, const char* file, int line) {
    FILE* f = fopen(path, mode);
    if (!f)
        check_fail_at_(file, line, "check the path; data files are made by `make data` (see README, Data)",
                       "fopen(\"%s\", \"%s\") failed: %s", path, mode, strerror(errno));
    return f;
}
#define fopen_check(path, mode) fopen_check_((path), (mode), __FILE__, __LINE__)

static inline void fread_check_(void* ptr, size_t size, size_t n, FILE* f, const char* file, int line) {
    size_t got = fread(ptr, size, n, f);
    if (got != n)
        check_fail_at_(file, line, "the file is truncated or not of the expected format; regenerate it",
                       "fread read %zu of %zu items of %zu bytes (%s)", got, n, size,
                       feof(f) ? "unexpected end of file" : strerror(errno));
}
#define fread_check(ptr, size, n, f) fread_check_((ptr), (size), (n), (f), __FILE__, __LINE__)

static inline void fwrite_check_(const void* ptr, size_t size, size_t n, FILE* f, const char* file, int line) {
    if (fwrite(ptr, size, n, f) != n)
        check_fail_at_(file, line, "is the disk full or the output directory read-only?",
                       "fwrite of %zu items of %zu bytes failed: %s", n, size, strerror(errno));
}
#define fwrite_check(ptr, size, n, f) fwrite_check_((ptr), (size), (n), (f), __FILE__, __LINE__)

static inline void fclose_check_(FILE* f, const char* file, int line) {
    if (fclose(f) != 0)
        check_fail_at_(file, line, "a buffered write did not reach the disk; is it full?", "fclose failed: %s",
                       strerror(errno));
}
#define fclose_check(f) fclose_check_((f), __FILE__, __LINE__)

static inline void* malloc_check_(size_t size, const char* file, int line) {
    void* p = malloc(size ? size : 1);
    if (!p)
        check_fail_at_(file, line, "host memory is exhausted; use a smaller batch or model",
                       "malloc of %zu bytes failed", size);
    return p;
}
#define malloc_check(size) malloc_check_((size), __FILE__, __LINE__)

static inline void* calloc_check_(size_t n, size_t size, const char* file, int line) {
    void* p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        check_fail_at_(file, line, "host memory is exhausted; use a smaller batch or model",
                       "calloc of %zu x %zu bytes failed", n, size);
    return p;
}
#define calloc_check(n, size) calloc_check_((n), (size), __FILE__, __LINE__)

static inline void* realloc_check_(void* old, size_t size, const char* file, int line) {
    void* p = realloc(old, size ? size : 1);
    if (!p) check_fail_at_(file, line, "host memory is exhausted", "realloc to %zu bytes failed", size);
    return p;
}
#define realloc_check(old, size) realloc_check_((old), (size), __FILE__, __LINE__)

// --- host: the readers' error text -----------------------------------------------------------
// The file readers (checkpoints, safetensors, Hugging Face exports) do not exit: they return -1 with
// the reason in a buffer of their own. err (size bytes) = "<kind> <path>: " ("<path>: " when kind is
// "") followed by fmt's message, cut to fit.
static inline void err_vformat(char* err, size_t size, const char* kind, const char* path, const char* fmt,
                               va_list ap) {
    int n = snprintf(err, size, "%s%s%s: ", kind, *kind ? " " : "", path);
    if (n < 0 || n >= (int)size) n = 0;
    vsnprintf(err + n, size - (size_t)n, fmt, ap);
}

// --- device: CUDA, cuBLASLt, NCCL ------------------------------------------------------------
#ifdef __CUDACC__
#include <cuda_runtime.h>
#include <cublasLt.h>

static inline void cuda_check_(cudaError_t err, const char* call, const char* file, int line) {
    if (err != cudaSuccess) {
        fprintf(stderr, "error: CUDA %s: %s\n  in %s\n  at %s:%d\n", cudaGetErrorName(err), cudaGetErrorString(err), call, file, line);
        const char* hint = "see the CUDA error above";
        if (err == cudaErrorMemoryAllocation) hint = "out of device memory: lower the batch size (-b) or use activation recompute";
        else if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) hint = "no usable GPU: check nvidia-smi and the driver";
        else if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorUnsupportedPtxVersion)
            hint = "built for another GPU architecture: rebuild with GPU_ARCH=<your sm>, e.g. make clean && make GPU_ARCH=80";
        fprintf(stderr, "  hint: %s\n", hint);
        exit(EXIT_FAILURE);
    }
}
#define cuda_check(call) cuda_check_((call), #call, __FILE__, __LINE__)
// after every kernel launch: catches bad launch configurations at the launch site
#define cuda_check_launch() cuda_check_(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

static inline void cublas_check_(cublasStatus_t st, const char* call, const char* file, int line) {
    if (st != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "error: cuBLAS(Lt) status %d (%s)\n  in %s\n  at %s:%d\n", (int)st, cublasLtGetStatusString(st), call, file, line);
        fprintf(stderr, "  hint: %s\n", st == CUBLAS_STATUS_NOT_SUPPORTED
                ? "no cuBLASLt algorithm for this shape/layout: check that sizes are multiples of 8 and pointers 16-byte aligned"
                : "check the matrix sizes and leading dimensions passed to cuBLASLt");
        exit(EXIT_FAILURE);
    }
}
#define cublas_check(call) cublas_check_((call), #call, __FILE__, __LINE__)
#endif
