// hf_files.h: host-only. The files of a Hugging Face export, whichever the model family (llmc/io/gpt_hf.h,
// llmc/io/llama_hf.h; dev/interop/dump.h's output directory too): the directory made as mkdir -p does, a
// file written or copied atomically (llmc/core/atomic_file.h: temporary file, fsync, rename), a cJSON value
// written formatted, and the weights' safetensors file from a family's list of tensors (HfTensor); for
// an import (llmc/io/gpt_hf_import.h, llmc/io/llama_hf_import.h), the config.json beside its weights
// (llmc/io/hf_weights.h reads those) and a tensor checked against its HfTensor.
// Errors: 0, or -1 with the message in `err` (hf_check_tensor: in `msg`); nothing exits.
// HF_ERR_LEN holds any of these messages and the safetensors writer's and reader's.
#pragma once
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "../core/atomic_file.h"
#include "safetensors.h"  // cJSON, SAFETENSORS_PATH_MAX, SAFETENSORS_ERR_LEN

#define HF_ERR_LEN (SAFETENSORS_ERR_LEN + 1024)
#define HF_NAME_MAX 96

// One tensor of a model in Hugging Face's layout and where its values are in our fp32 parameter array
// (llmc/io/gpt_hf.h and llmc/io/llama_hf.h list them in file order).
typedef struct {
    char name[HF_NAME_MAX];
    size_t offset;     // of its first element in our parameter array
    int ndim;          // HF's shape: (shape[0]) or (shape[0], shape[1])
    int64_t shape[2];
    int transpose;     // ours is (shape[1], shape[0]), row-major, and HF's its transpose (GPT-2's Conv1D)
} HfTensor;

// dst (cols, rows) = srcᵀ, src (rows, cols); row-major.
static inline void hf_transpose(float* dst, const float* src, int64_t rows, int64_t cols) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) dst[j * rows + i] = src[i * cols + j];
}

// Writes `len` bytes to path atomically (atomic_file.h).
static inline int hf_write_file(const char* path, const void* data, size_t len, char* err, size_t errlen) {
    if (atomic_write_file(path, data, len) != 0) {
        snprintf(err, errlen, "cannot write %s: %s; is the disk full or the directory read-only?", path, strerror(errno));
        return -1;
    }
    return 0;
}

// A JSON value (consumed) written formatted to dir/name.
static inline int hf_write_json(const char* dir, const char* name, cJSON* json, char* err, size_t errlen) {
    char path[ATOMIC_PATH_MAX];
    if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path)) {
        cJSON_Delete(json);
        snprintf(err, errlen, "path too long: %s/%s", dir, name);
        return -1;
    }
    char* text = cJSON_Print(json);
    cJSON_Delete(json);
    if (!text) { snprintf(err, errlen, "%s: out of host memory formatting the JSON", path); return -1; }
    size_t len = strlen(text);
    char* line = (char*)realloc(text, len + 2);  // ends with a newline, as text files do
    if (!line) { free(text); snprintf(err, errlen, "%s: out of host memory", path); return -1; }
    line[len] = '\n';
    int rc = hf_write_file(path, line, len + 1, err, errlen);
    free(line);
    return rc;
}

// Copies src to dst atomically.
static inline int hf_copy_file(const char* src, const char* dst, const char* hint, char* err, size_t errlen) {
    FILE* f = fopen(src, "rb");
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0) {
        snprintf(err, errlen, "cannot open %s (%s): %s", src, strerror(errno), hint);
        if (f) fclose(f);
        return -1;
    }
    size_t len = (size_t)st.st_size;
    char* buf = (char*)malloc(len ? len : 1);
    int ok = buf && fread(buf, 1, len, f) == len;
    fclose(f);
    int rc = ok ? hf_write_file(dst, buf, len, err, errlen) : -1;
    if (!ok) snprintf(err, errlen, "cannot read %s: %s", src, strerror(errno));
    free(buf);
    return rc;
}

// mkdir -p dir.
static inline int hf_make_dir(const char* dir, char* err, size_t errlen) {
    char p[SAFETENSORS_PATH_MAX];
    if (snprintf(p, sizeof(p), "%s", dir) >= (int)sizeof(p)) { snprintf(err, errlen, "path too long: %s", dir); return -1; }
    for (char* s = p + 1;; s++) {
        if (*s != '/' && *s != '\0') continue;
        char keep = *s;
        *s = '\0';
        struct stat st;
        if ((mkdir(p, 0755) != 0 && errno != EEXIST) || stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) {
            snprintf(err, errlen, "cannot create the directory %s: %s", p, errno ? strerror(errno) : "not a directory");
            return -1;
        }
        if (keep == '\0') return 0;
        *s = keep;
    }
}

// values fp32 in our order -> path, a safetensors file (fp32, metadata {"format": "pt"}) of the n
// tensors t, in that order, each transposed where t says. Also writes gradients: they have the
// parameters' layout (dev/interop/).
static inline int hf_write_safetensors(const char* path, const HfTensor* t, int n, const float* values, char* err,
                                       size_t errlen) {
    if (n < 1) { snprintf(err, errlen, "%s: no tensors to write", path); return -1; }
    size_t largest = 0;  // of the transposed tensors: the scratch
    for (int i = 0; i < n; i++) {
        size_t count = (size_t)t[i].shape[0] * (size_t)t[i].shape[1];
        if (t[i].transpose && count > largest) largest = count;
    }
    SafetensorsTensor* st = (SafetensorsTensor*)calloc((size_t)n, sizeof(SafetensorsTensor));
    float* scratch = (float*)malloc((largest ? largest : 1) * sizeof(float));
    if (!st || !scratch) {
        snprintf(err, errlen, "%s: out of host memory", path);
        free(st); free(scratch);
        return -1;
    }
    for (int i = 0; i < n; i++) safetensors_tensor(&st[i], t[i].name, ST_F32, t[i].ndim, t[i].shape);
    const char* const meta[] = {"format", "pt", NULL};
    SafetensorsWriter w;
    int rc = safetensors_writer_open(&w, path, st, n, meta);
    for (int i = 0; i < n && rc == 0; i++) {
        const float* src = values + t[i].offset;
        size_t count = (size_t)t[i].shape[0] * (size_t)(t[i].ndim == 2 ? t[i].shape[1] : 1);
        if (t[i].transpose) {
            hf_transpose(scratch, src, t[i].shape[1], t[i].shape[0]);
            src = scratch;
        }
        rc = safetensors_writer_append(&w, src, count * sizeof(float));
    }
    if (rc == 0) rc = safetensors_writer_close(&w);
    if (rc != 0) snprintf(err, errlen, "%s", w.err);
    free(scratch); free(st);
    return rc;
}

// --- import: the files read back --------------------------------------------------------------------

// The config.json beside the weights file or index `weights`, parsed into *json; *json is NULL when there
// is none. -1 (message in err) when it is not a JSON object of at most 64 KiB.
static inline int hf_read_config(const char* weights, cJSON** json, char* path, size_t n, char* err, size_t errlen) {
    snprintf(path, n, "%s", weights);
    char* slash = strrchr(path, '/');
    snprintf(slash ? slash + 1 : path, n - (size_t)(slash ? slash + 1 - path : 0), "config.json");
    *json = NULL;
    FILE* f = fopen(path, "rb");
    if (!f) return 0;
    char buf[1 << 16];
    size_t len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[len] = '\0';
    cJSON* j = cJSON_Parse(buf);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        snprintf(err, errlen, "%s beside it is not a JSON object (or longer than 64 KiB)", path);
        return -1;
    }
    *json = j;
    return 0;
}

// The index of the first value of v (n values) that is not finite, or n when all are. By the bits, so
// that -ffast-math (nvcc's --use_fast_math) cannot drop the test.
static inline size_t hf_first_nonfinite(const float* v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &v[i], sizeof(b));
        if ((b & 0x7f800000u) == 0x7f800000u) return i;
    }
    return n;
}

// An import's check of tensor t's values v (in the file's layout, numel of t) as read: -1 when one is NaN
// or infinite, msg naming the tensor, the element (and its row and column) and the value. A model
// trained from such weights is NaN from its first step; the checkpoint reader refuses them too.
static inline int hf_check_finite(const SafetensorsTensor* t, const float* v, char* msg, size_t n) {
    size_t count = (size_t)safetensors_numel(t), i = hf_first_nonfinite(v, count);
    if (i == count) return 0;
    char at[96] = "";
    if (t->ndim == 2 && t->shape[1] > 0)
        snprintf(at, sizeof(at), " (row %lld, column %lld)", (long long)(i / (size_t)t->shape[1]),
                 (long long)(i % (size_t)t->shape[1]));
    snprintf(msg, n, "tensor \"%s\": element %zu%s of %zu is %g: not finite; the weights are damaged or had "
             "diverged; start from a good copy", t->name, i, at, count, (double)v[i]);
    return -1;
}

// Checks tensor t of an import against want's shape and the dtypes an import reads (F32, BF16 or F16,
// which safetensors_read_f32 converts exactly). -1 when it differs, msg saying how: the shape "expected"
// (or what the caller's word for it is), shape_hint, when not empty, in parentheses after it.
static inline int hf_check_tensor(const SafetensorsTensor* t, const HfTensor* want, const char* expected,
                                  const char* shape_hint, char* msg, size_t n) {
    char s1[160], s2[160];
    int same = t->ndim == want->ndim;
    for (int d = 0; d < t->ndim && same; d++) same = t->shape[d] == want->shape[d];
    if (!same) {
        snprintf(msg, n, "tensor \"%s\": shape %s, %s %s%s%s%s", t->name,
                 safetensors_shape_text(s1, sizeof(s1), t->ndim, t->shape), expected,
                 safetensors_shape_text(s2, sizeof(s2), want->ndim, want->shape), shape_hint[0] ? " (" : "", shape_hint,
                 shape_hint[0] ? ")" : "");
        return -1;
    }
    if (t->dtype != ST_F32 && t->dtype != ST_BF16 && t->dtype != ST_F16) {
        snprintf(msg, n, "tensor \"%s\": dtype %s, expected F32, BF16 or F16", t->name, safetensors_dtype_name(t->dtype));
        return -1;
    }
    return 0;
}
