// hf_files.h: host-only. The files of a Hugging Face export, whichever the model family (llmc/io/hf_model.h;
// dev/interop/dump.h's output directory too): the directory made as mkdir -p does, a
// file written or copied atomically (llmc/core/atomic_file.h: temporary file, fsync, rename), a cJSON value
// written formatted, and the weights' safetensors file from a family's list of tensors (HfTensor); for
// an import (llmc/io/hf_model_import.h), the config.json beside its weights
// (llmc/io/hf_weights.h reads those) and a tensor checked against its HfTensor.
//
// An export's directory appears whole or not at all (HfExportDir): the files are written into a
// temporary directory beside it, <dir>.tmp.XXXXXX, which then takes dir's place. dir may be absent, or
// a directory holding nothing but files an export writes (HF_EXPORT_FILES, of either family): an earlier
// export there is replaced whole, so no file of it (GPT-2's vocab.json beside a Llama config.json) stays
// behind. A directory holding anything else is refused before anything is written (hf_export_check,
// which train_gpt calls at start-up for -export_hf). A failed export removes its temporary directory
// and the parents it created, and leaves dir as it was.
// Errors: 0, or -1 with the message in `err` (hf_check_tensor: in `msg`); nothing exits.
// HF_ERR_LEN holds any of these messages and the safetensors writer's and reader's.
#pragma once
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "../core/atomic_file.h"
#include "safetensors.h"  // cJSON, SAFETENSORS_PATH_MAX, SAFETENSORS_ERR_LEN

#define HF_ERR_LEN (SAFETENSORS_ERR_LEN + 1024)
#define HF_NAME_MAX 96

// One tensor of a model in Hugging Face's layout and where its values are in our fp32 parameter array
// (llmc/io/hf_model.h lists a family's in file order).
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

// --- an export's directory ------------------------------------------------------------------------------

// Every file an export of either family writes: what a directory may hold to be replaced by an export.
static const char* const HF_EXPORT_FILES[] = {"model.safetensors", "config.json", "vocab.json", "merges.txt",
                                             "tokenizer_config.json", "special_tokens_map.json", NULL};

static inline int hf_export_file(const char* name) {
    for (int i = 0; HF_EXPORT_FILES[i]; i++)
        if (strcmp(name, HF_EXPORT_FILES[i]) == 0) return 1;
    return 0;
}

// dir without its trailing slashes into out (n bytes); -1 when it is empty or too long.
static inline int hf_export_path(char* out, size_t n, const char* dir, char* err, size_t errlen) {
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') len--;
    if (len == 0) { snprintf(err, errlen, "an empty path: name the directory to export to"); return -1; }
    if (len + 32 >= n) { snprintf(err, errlen, "%.64s...: a path of %zu bytes, too long", dir, len); return -1; }
    memcpy(out, dir, len);
    out[len] = '\0';
    return 0;
}

// The directory that holds path ("." for a bare name) into out.
static inline void hf_export_parent(char* out, size_t n, const char* path) {
    snprintf(out, n, "%s", path);
    char* slash = strrchr(out, '/');
    if (!slash) snprintf(out, n, ".");
    else if (slash == out) out[1] = '\0';
    else *slash = '\0';
}

// Whether an export can be written to dir, without creating or changing anything: dir is absent (its
// nearest existing ancestor a directory this process may write in) or a directory of export files only
// (and its parent writable, for the temporary directory beside it). -1 with err naming what is wrong.
static inline int hf_export_check(const char* dir, char* err, size_t errlen) {
    char path[SAFETENSORS_PATH_MAX], up[SAFETENSORS_PATH_MAX];
    if (hf_export_path(path, sizeof(path), dir, err, errlen) != 0) return -1;
    struct stat st;
    if (stat(path, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) {
            snprintf(err, errlen, "%.1500s exists and is not a directory; name a new directory, or an earlier export's", path);
            return -1;
        }
        DIR* d = opendir(path);
        if (!d) { snprintf(err, errlen, "cannot list %.1500s: %s", path, strerror(errno)); return -1; }
        const struct dirent* e;
        char stray[256] = "";
        while ((e = readdir(d)) != NULL && !stray[0])
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 && !hf_export_file(e->d_name))
                snprintf(stray, sizeof(stray), "%s", e->d_name);
        closedir(d);
        if (stray[0]) {
            snprintf(err, errlen, "%.1500s holds %.1500s, which no export writes: an export replaces the whole directory, so "
                     "it takes a new or empty one, or an earlier export's; name another directory", path, stray);
            return -1;
        }
        hf_export_parent(up, sizeof(up), path);
    } else if (errno != ENOENT && errno != ENOTDIR) {
        snprintf(err, errlen, "%.1500s: %s", path, strerror(errno));
        return -1;
    } else {  // absent: its nearest existing ancestor must be a directory
        snprintf(up, sizeof(up), "%s", path);
        for (;;) {
            char next[SAFETENSORS_PATH_MAX];
            hf_export_parent(next, sizeof(next), up);
            snprintf(up, sizeof(up), "%s", next);
            if (stat(up, &st) == 0) break;
            if ((errno != ENOENT && errno != ENOTDIR) || strcmp(up, ".") == 0 || strcmp(up, "/") == 0) {
                snprintf(err, errlen, "cannot create %.1500s: %.1500s: %s", path, up, strerror(errno));
                return -1;
            }
        }
        if (!S_ISDIR(st.st_mode)) {
            snprintf(err, errlen, "cannot create %.1500s: %.1500s is not a directory", path, up);
            return -1;
        }
    }
    if (access(up, W_OK | X_OK) != 0) {
        snprintf(err, errlen, "cannot write in %.1500s (%s), where the export %.1500s goes; name a directory you can write to",
                 up, strerror(errno), path);
        return -1;
    }
    return 0;
}

typedef struct {
    char dir[SAFETENSORS_PATH_MAX];  // where the export goes
    char tmp[SAFETENSORS_PATH_MAX + 16];  // <dir>.tmp.XXXXXX beside it: where its files are written
    char made[SAFETENSORS_PATH_MAX]; // the outermost parent of dir that hf_export_begin created ("" none)
} HfExportDir;

// Removes every file in directory path, then the directory. -1 with errno at the first failure.
static inline int hf_remove_dir(const char* path) {
    DIR* d = opendir(path);
    if (!d) return -1;
    const struct dirent* e;
    char file[SAFETENSORS_PATH_MAX + 256];
    int rc = 0;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            int k = snprintf(file, sizeof(file), "%s/%s", path, e->d_name);
            if (k < 0 || (size_t)k >= sizeof(file)) {  // a name that does not fit is not guessed at
                if (rc == 0) { rc = -1; errno = ENAMETOOLONG; }
                continue;
            }
            if (unlink(file) != 0 && rc == 0) rc = -1;
        }
    closedir(d);
    return rc == 0 ? rmdir(path) : -1;
}

// Checks dir (hf_export_check), creates its missing parents and the temporary directory beside it. A
// dir that is a symbolic link to a directory stands for that directory.
static inline void hf_export_abort(HfExportDir* x);
static inline int hf_export_begin(HfExportDir* x, const char* dir, char* err, size_t errlen) {
    memset(x, 0, sizeof(*x));
    if (hf_export_check(dir, err, errlen) != 0) return -1;
    hf_export_path(x->dir, sizeof(x->dir), dir, err, errlen);
    struct stat st;
    char up[SAFETENSORS_PATH_MAX];
    if (lstat(x->dir, &st) == 0 && S_ISLNK(st.st_mode)) {
        if (!realpath(x->dir, up)) {
            snprintf(err, errlen, "cannot resolve the link %.1500s: %s", x->dir, strerror(errno));
            return -1;
        }
        snprintf(x->dir, sizeof(x->dir), "%s", up);
    }
    hf_export_parent(up, sizeof(up), x->dir);
    if (stat(up, &st) != 0) {  // mkdir -p of the parent, remembering the outermost directory made
        for (char* s = up + 1;; s++) {
            if (*s != '/' && *s != '\0') continue;
            char keep = *s;
            *s = '\0';
            if (mkdir(up, 0755) == 0) {
                if (!x->made[0]) snprintf(x->made, sizeof(x->made), "%s", up);
            } else if (errno != EEXIST) {
                snprintf(err, errlen, "cannot create the directory %.1500s: %s", up, strerror(errno));
                hf_export_abort(x);
                return -1;
            }
            *s = keep;
            if (keep == '\0') break;
        }
    }
    snprintf(x->tmp, sizeof(x->tmp), "%s.tmp.XXXXXX", x->dir);
    int made_tmp = mkdtemp(x->tmp) != NULL;  // mode 0700, and never an existing path or link
    if (!made_tmp || chmod(x->tmp, 0755) != 0) {
        snprintf(err, errlen, "cannot create a directory beside %.1500s: %s", x->dir, strerror(errno));
        if (!made_tmp) x->tmp[0] = '\0';
        hf_export_abort(x);
        return -1;
    }
    return 0;
}

// Gives up an export: its temporary directory is removed, and the parents hf_export_begin created (the
// ones left empty). dir is as it was.
static inline void hf_export_abort(HfExportDir* x) {
    if (x->tmp[0]) hf_remove_dir(x->tmp);
    x->tmp[0] = '\0';
    if (!x->made[0]) return;
    char up[SAFETENSORS_PATH_MAX];
    hf_export_parent(up, sizeof(up), x->dir);
    while (strlen(up) >= strlen(x->made) && rmdir(up) == 0) {  // innermost first, up to the first one made
        char next[SAFETENSORS_PATH_MAX];
        hf_export_parent(next, sizeof(next), up);
        snprintf(up, sizeof(up), "%s", next);
    }
}

// Puts the finished export in place: the temporary directory takes dir's name. An earlier export in dir
// (export files only: checked again) is swapped out in one step where the file system can
// (renameat2's RENAME_EXCHANGE), else emptied first, then removed. On failure the temporary directory is
// left to hf_export_abort.
static inline int hf_export_commit(HfExportDir* x, char* err, size_t errlen) {
    struct stat st;
    if (stat(x->dir, &st) == 0) {
        if (hf_export_check(x->dir, err, errlen) != 0) return -1;  // changed since the start
        int swapped = 0;
#ifdef SYS_renameat2
        swapped = syscall(SYS_renameat2, AT_FDCWD, x->tmp, AT_FDCWD, x->dir, 2 /* RENAME_EXCHANGE */) == 0;
#endif
        if (swapped) {  // the earlier export now has the temporary name; the new one is in place
            if (hf_remove_dir(x->tmp) != 0)
                fprintf(stderr, "warning: the export is in %s, but the earlier one, moved to %s, could not be "
                        "removed (%s): remove it by hand\n", x->dir, x->tmp, strerror(errno));
            x->tmp[0] = '\0';
            atomic_sync_dir_of(x->dir);
            return 0;
        }
        DIR* d = opendir(x->dir);  // no exchange here: the earlier export's files removed, then the rename
        const struct dirent* e;
        char file[SAFETENSORS_PATH_MAX + 256];
        while (d && (e = readdir(d)) != NULL)
            if (hf_export_file(e->d_name)) {
                snprintf(file, sizeof(file), "%s/%s", x->dir, e->d_name);
                unlink(file);
            }
        if (d) closedir(d);
    }
    if (rename(x->tmp, x->dir) != 0) {
        snprintf(err, errlen, "cannot rename %.1500s to %.1500s: %s", x->tmp, x->dir, strerror(errno));
        return -1;
    }
    x->tmp[0] = '\0';
    atomic_sync_dir_of(x->dir);
    return 0;
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
