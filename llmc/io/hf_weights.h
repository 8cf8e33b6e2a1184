// hf_weights.h: host-only. The weights of a Hugging Face model, read by an import (llmc/io/hf_model_import.h)
// as one set of tensors however they are stored:
//   - a safetensors file, named by its path;
//   - a directory holding model.safetensors;
//   - a directory holding model.safetensors.index.json and the files it names (or the index's own path):
//     a model split into model-0000N-of-M.safetensors files, as transformers' save_pretrained writes one
//     larger than its max_shard_size.
// A directory holding both model.safetensors and an index is read as model.safetensors, as transformers
// reads it. config.json is looked for beside w->path (the file or the index).
//
// The index is a JSON object whose "weight_map" maps each tensor's name to the file that holds it, a
// file name in the index's directory; its other members (the "metadata" with total_size) are not read.
// Refused, with a message naming the index or the file: an index that is not such an object, is empty or
// over 64 MiB; a file name that is not a plain name in that directory (a '/', "." or ".."); a file that is
// missing or is not a valid safetensors file (llmc/io/safetensors.h's checks); a tensor the map places in a
// file that does not hold it; a tensor a file holds that the map places elsewhere or not at all (so no
// tensor is in two files, and none is named twice). Each file is opened once and its header read on
// open; the tensors' data is read when asked for.
// Errors: 0, or -1 with the message in w->err; a failed call leaves every file closed.
#pragma once
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "hf_files.h"  // HF_ERR_LEN
#include "safetensors.h"

#define HF_WEIGHTS_FILE "model.safetensors"
#define HF_WEIGHTS_INDEX "model.safetensors.index.json"
#define HF_WEIGHTS_INDEX_MAX (64u << 20)  // bytes of the index

typedef struct {
    SafetensorsReader* files;           // (num_files): the one file, or the index's in the order it names them
    int num_files;
    const SafetensorsTensor** tensors;  // (num_tensors): every file's tensors, file by file, in header order
    int num_tensors;
    char path[SAFETENSORS_PATH_MAX + 32];  // the safetensors file or the index: what messages name
    char err[HF_ERR_LEN];
} HfWeights;

static inline void hf_weights_close(HfWeights* w) {
    for (int i = 0; i < w->num_files; i++) safetensors_close(&w->files[i]);
    free(w->files);
    free(w->tensors);
    w->files = NULL;
    w->tensors = NULL;
    w->num_files = w->num_tensors = 0;
}

static inline int hf_weights_fail(HfWeights* w, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int hf_weights_fail(HfWeights* w, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    err_vformat(w->err, sizeof(w->err), "", w->path, fmt, ap);
    va_end(ap);
    hf_weights_close(w);
    return -1;
}

// Opens the safetensors file at path as w's next file; -1 (its reader's message in w->err) when it
// cannot be read.
static inline int hf_weights_add_file(HfWeights* w, const char* path) {
    SafetensorsReader* files = (SafetensorsReader*)realloc(w->files, (size_t)(w->num_files + 1) * sizeof(*files));
    if (!files) return hf_weights_fail(w, "out of host memory");
    w->files = files;
    SafetensorsReader* r = &w->files[w->num_files];
    if (safetensors_open(r, path) != 0) {
        snprintf(w->err, sizeof(w->err), "%s", r->err);
        hf_weights_close(w);
        return -1;
    }
    w->num_files++;
    return 0;
}

// w->tensors: every file's tensors, file by file.
static inline int hf_weights_list(HfWeights* w) {
    int n = 0;
    for (int i = 0; i < w->num_files; i++) n += w->files[i].num_tensors;
    w->tensors = (const SafetensorsTensor**)calloc(n > 0 ? (size_t)n : 1, sizeof(*w->tensors));
    if (!w->tensors) return hf_weights_fail(w, "out of host memory");
    for (int i = 0; i < w->num_files; i++)
        for (int k = 0; k < w->files[i].num_tensors; k++) w->tensors[w->num_tensors++] = &w->files[i].tensors[k];
    return 0;
}

// The file name that path ends with.
static inline const char* hf_weights_base(const char* path) {
    const char* slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

// The index at w->path, its weight_map checked against the files it names (see the top of this file).
static inline int hf_weights_open_index(HfWeights* w) {
    FILE* f = fopen(w->path, "rb");
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0) {
        int e = errno;
        if (f) fclose(f);
        return hf_weights_fail(w, "cannot open: %s", strerror(e));
    }
    if ((uint64_t)st.st_size > HF_WEIGHTS_INDEX_MAX) {
        fclose(f);
        return hf_weights_fail(w, "%lld bytes, more than an index of safetensors files has (at most %u)",
                               (long long)st.st_size, HF_WEIGHTS_INDEX_MAX);
    }
    size_t len = (size_t)st.st_size;
    char* text = (char*)malloc(len + 1);  // 0-terminated for cJSON, as safetensors_open's header
    int ok = text && fread(text, 1, len, f) == len;
    fclose(f);
    if (ok) text[len] = '\0';
    cJSON* index = ok ? cJSON_ParseWithLength(text, len) : NULL;
    free(text);
    if (!ok) return hf_weights_fail(w, "cannot read: %s", strerror(errno));
    const cJSON* map = cJSON_GetObjectItemCaseSensitive(index, "weight_map");
    const char* bad = !cJSON_IsObject(index) ? "is not a JSON object"
                      : !cJSON_IsObject(map) ? "has no \"weight_map\" object (tensor name -> file name)"
                      : !map->child          ? "has an empty \"weight_map\""
                                             : NULL;
    if (bad) {
        cJSON_Delete(index);
        return hf_weights_fail(w, "%s: not an index of safetensors files as transformers writes one", bad);
    }
    char dir[SAFETENSORS_PATH_MAX], file[SAFETENSORS_PATH_MAX + 256], msg[SAFETENSORS_PATH_MAX + 512];
    snprintf(dir, sizeof(dir), "%.*s", (int)(hf_weights_base(w->path) - w->path), w->path);  // "" or ".../"
    msg[0] = '\0';
    // every entry: its file opened (once), and the tensor in it
    for (const cJSON* e = map->child; e && !msg[0]; e = e->next) {
        const char* name = cJSON_IsString(e) ? e->valuestring : NULL;
        if (!name || !name[0] || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
            snprintf(msg, sizeof(msg), "weight_map: tensor \"%.256s\" is mapped to %s, expected the name of a file "
                     "in the index's directory", e->string, name ? "a path" : "something other than a string");
            break;
        }
        snprintf(file, sizeof(file), "%s%s", dir, name);
        int k = 0;
        while (k < w->num_files && strcmp(w->files[k].path, file) != 0) k++;
        if (k == w->num_files) {
            if (hf_weights_add_file(w, file) != 0) {  // the file's reader's message names the file
                cJSON_Delete(index);
                snprintf(msg, sizeof(msg), "%.4000s", w->err);
                snprintf(w->err, sizeof(w->err), "%.4000s (one of the files that %.2000s names)", msg, w->path);
                return -1;
            }
        }
        if (!safetensors_find(&w->files[k], e->string))
            snprintf(msg, sizeof(msg), "weight_map places tensor \"%.256s\" in %s, which does not hold it", e->string,
                     name);
    }
    // every tensor of every file: placed in that file by the map
    for (int k = 0; k < w->num_files && !msg[0]; k++) {
        const SafetensorsReader* r = &w->files[k];
        for (int i = 0; i < r->num_tensors && !msg[0]; i++) {
            const cJSON* e = cJSON_GetObjectItemCaseSensitive(map, r->tensors[i].name);
            if (!e || strcmp(e->valuestring, hf_weights_base(r->path)) != 0)
                snprintf(msg, sizeof(msg), "%s holds tensor \"%.256s\", which weight_map %s%.256s%s",
                         hf_weights_base(r->path), r->tensors[i].name, e ? "places in " : "does not name",
                         e ? e->valuestring : "", e ? " (a tensor in two files, or named twice)" : "");
        }
    }
    cJSON_Delete(index);
    if (msg[0]) return hf_weights_fail(w, "%s", msg);
    return hf_weights_list(w);
}

// Opens path: a safetensors file, a directory holding model.safetensors or model.safetensors.index.json,
// or such an index (see the top of this file); every file's header is read and checked.
static inline int hf_weights_open(HfWeights* w, const char* path) {
    memset(w, 0, sizeof(*w));
    struct stat sb;
    int is_dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    size_t plen = strlen(path), ilen = strlen(".index.json");
    int is_index = !is_dir && plen > ilen && strcmp(path + plen - ilen, ".index.json") == 0;
    int dlen = (int)plen;  // a directory's name without its trailing slashes
    while (is_dir && dlen > 1 && path[dlen - 1] == '/') dlen--;
    if (snprintf(w->path, sizeof(w->path), is_dir ? "%.*s/" HF_WEIGHTS_FILE : "%.*s", dlen, path) >= (int)sizeof(w->path)) {
        snprintf(w->err, sizeof(w->err), "%.64s...: a path of %zu bytes, longer than this program reads", path, plen);
        return -1;
    }
    if (is_dir && stat(w->path, &sb) != 0) {
        snprintf(w->path, sizeof(w->path), "%.*s/" HF_WEIGHTS_INDEX, dlen, path);
        if (stat(w->path, &sb) != 0) {
            snprintf(w->err, sizeof(w->err), "%s: a directory with neither %s nor %s (the files of a split model) in it",
                     path, HF_WEIGHTS_FILE, HF_WEIGHTS_INDEX);
            return -1;
        }
        is_index = 1;
    }
    if (is_index) return hf_weights_open_index(w);
    if (hf_weights_add_file(w, w->path) != 0) return -1;
    return hf_weights_list(w);
}

// The tensor called name, of whichever file holds it, or NULL.
static inline const SafetensorsTensor* hf_weights_find(const HfWeights* w, const char* name) {
    for (int i = 0; i < w->num_tensors; i++)
        if (strcmp(w->tensors[i]->name, name) == 0) return w->tensors[i];
    return NULL;
}

// t (one of w's tensors) as fp32 into dst, as safetensors_read_f32. A failed read closes w.
static inline int hf_weights_read_f32(HfWeights* w, const SafetensorsTensor* t, float* dst) {
    for (int k = 0; k < w->num_files; k++) {
        SafetensorsReader* r = &w->files[k];
        if (t < r->tensors || t >= r->tensors + r->num_tensors) continue;
        if (safetensors_read_f32(r, t, dst) == 0) return 0;
        snprintf(w->err, sizeof(w->err), "%s", r->err);
        hf_weights_close(w);
        return -1;
    }
    return hf_weights_fail(w, "tensor \"%s\": not one of this model's tensors", t->name);
}
