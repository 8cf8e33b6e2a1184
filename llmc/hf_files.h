// hf_files.h: host-only. The files of a Hugging Face export, whichever the model family (llmc/gpt_hf.h,
// llmc/llama_hf.h; dev/interop/dump.h's output directory too): the directory made as mkdir -p does, a
// file written or copied atomically (llmc/atomic_file.h: temporary file, fsync, rename), a cJSON value
// written formatted. Errors: 0, or -1 with the message in `err`; nothing exits. HF_ERR_LEN holds any of
// these messages and the safetensors writer's and reader's.
#pragma once
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "atomic_file.h"
#include "safetensors.h"  // cJSON, SAFETENSORS_PATH_MAX, SAFETENSORS_ERR_LEN

#define HF_ERR_LEN (SAFETENSORS_ERR_LEN + 1024)

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
    char path[SAFETENSORS_PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
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
