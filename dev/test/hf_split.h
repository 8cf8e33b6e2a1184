// hf_split.h: for the import test (test_hf_model.c). The model of directory `from`
// (its model.safetensors, and its config.json when there is one) written to directory `to` split into
// `parts` files model-0000k-of-0000n.safetensors and a model.safetensors.index.json, as transformers'
// save_pretrained writes a model larger than its max_shard_size: the tensors in the file's order, about as
// many in each part, their bytes unchanged. 0, or -1 with the message in err.
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../../llmc/io/hf_files.h"
#include "../../llmc/io/hf_weights.h"

static inline int hf_split_model(const char* from, const char* to, int parts, char* err, size_t errlen) {
    char path[1024], copy[1024], name[64];
    if (hf_make_dir(to, err, errlen) != 0) return -1;
    snprintf(path, sizeof(path), "%s/config.json", from);
    snprintf(copy, sizeof(copy), "%s/config.json", to);
    if (access(path, R_OK) == 0 && hf_copy_file(path, copy, "", err, errlen) != 0) return -1;
    snprintf(path, sizeof(path), "%s/%s", from, HF_WEIGHTS_FILE);
    SafetensorsReader r;
    if (safetensors_open(&r, path) != 0) { snprintf(err, errlen, "%s", r.err); return -1; }
    cJSON* index = cJSON_CreateObject();
    cJSON* map = cJSON_CreateObject();
    uint64_t total = 0;
    int rc = 0;
    for (int p = 0, first = 0; p < parts && rc == 0; p++) {
        int last = (int)((long)r.num_tensors * (p + 1) / parts);  // tensors [first, last) go to part p
        snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", p + 1, parts);
        snprintf(path, sizeof(path), "%s/%s", to, name);
        // (the writer sets its tensors' offsets in the new file: copies, the reader's stay as they are)
        SafetensorsTensor* part = (SafetensorsTensor*)malloc((size_t)(last - first + 1) * sizeof(*part));
        memcpy(part, r.tensors + first, (size_t)(last - first) * sizeof(*part));
        SafetensorsWriter w;
        rc = safetensors_writer_open(&w, path, part, last - first, NULL);
        free(part);
        for (int i = first; i < last && rc == 0; i++) {
            const SafetensorsTensor* t = &r.tensors[i];
            size_t bytes = (size_t)(t->end - t->begin);
            cJSON_AddStringToObject(map, t->name, name);
            total += bytes;
            void* data = malloc(bytes + 1);
            rc = safetensors_read(&r, t, data);  // (a failed read closes r)
            if (rc == 0) rc = safetensors_writer_append(&w, data, bytes);
            else snprintf(w.err, sizeof(w.err), "%s", r.err);
            free(data);
        }
        if (rc == 0) rc = safetensors_writer_close(&w);
        else safetensors_writer_abort(&w);
        if (rc != 0) snprintf(err, errlen, "%s", w.err);
        first = last;
    }
    safetensors_close(&r);
    cJSON* meta = cJSON_AddObjectToObject(index, "metadata");
    cJSON_AddNumberToObject(meta, "total_size", (double)total);
    cJSON_AddItemToObject(index, "weight_map", map);
    if (rc == 0) return hf_write_json(to, HF_WEIGHTS_INDEX, index, err, errlen);
    cJSON_Delete(index);
    return rc;
}
