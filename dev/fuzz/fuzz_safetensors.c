// fuzz_safetensors.c: a safetensors file (llmc/io/safetensors.h) read, every tensor's bytes read (and
// converted to fp32 where its dtype allows), then written again with safetensors.h's writer and read back.
// The input is the file.
// Properties: a refusal names the file; an accepted file's tensors tile its data section; what the
// writer writes from an accepted file, the reader accepts, with the same names, dtypes, shapes, bytes
// and metadata (each key giving the value it gave in the file read).
#define FUZZ_WRAP_CJSON
#define FUZZ_MUTATE_NUMBERS
#include "fuzz.h"
#include "../../llmc/io/safetensors.h"

static char in_path[1100], out_path[1100];

int LLVMFuzzerInitialize(int* argc, char*** argv) {
    (void)argc; (void)argv;
    fuzz_path(in_path, sizeof(in_path), "in.safetensors");
    fuzz_path(out_path, sizeof(out_path), "out.safetensors");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz_write(in_path, data, size);
    static SafetensorsReader r, back;
    if (safetensors_open(&r, in_path) != 0) { FUZZ_NAMES(r.err, in_path); return 0; }
    uint64_t covered = 0;
    for (int i = 0; i < r.num_tensors; i++) covered += r.tensors[i].end - r.tensors[i].begin;
    if (covered != r.data_bytes)
        FUZZ_FAIL("accepted: the tensors cover %llu bytes of a data section of %llu", (unsigned long long)covered,
                  (unsigned long long)r.data_bytes);
    // every tensor's bytes, kept for the comparison below
    int n = r.num_tensors;
    unsigned char** bytes = (unsigned char**)calloc((size_t)n + 1, sizeof(*bytes));
    SafetensorsTensor* t = (SafetensorsTensor*)calloc((size_t)n + 1, sizeof(*t));
    memcpy(t, r.tensors, (size_t)n * sizeof(*t));
    int ok = 1;
    for (int i = 0; i < n && ok; i++) {
        size_t nb = (size_t)(t[i].end - t[i].begin);
        bytes[i] = (unsigned char*)malloc(nb ? nb : 1);
        ok = safetensors_read(&r, &r.tensors[i], bytes[i]) == 0;
        if (!ok) FUZZ_FAIL("reading tensor \"%s\" of an accepted file failed: %s", t[i].name, r.err);
        if (t[i].dtype == ST_F32 || t[i].dtype == ST_BF16 || t[i].dtype == ST_F16) {
            float* f = (float*)malloc((size_t)safetensors_numel(&t[i]) * sizeof(float) + 1);
            if (safetensors_read_f32(&r, &r.tensors[i], f) != 0)
                FUZZ_FAIL("reading tensor \"%s\" as fp32 failed: %s", t[i].name, r.err);
            free(f);
        }
    }
    // the metadata, as the writer takes it: key, value, ..., NULL
    int nm = r.metadata ? cJSON_GetArraySize(r.metadata) : 0;
    const char** meta = (const char**)calloc(2 * (size_t)nm + 1, sizeof(char*));
    int k = 0;
    for (const cJSON* m = r.metadata ? r.metadata->child : NULL; m; m = m->next) {
        meta[k++] = m->string;
        meta[k++] = m->valuestring;
    }

    SafetensorsWriter w;
    int rc = safetensors_writer_open(&w, out_path, t, n, nm ? meta : NULL);
    for (int i = 0; i < n && rc == 0; i++) rc = safetensors_writer_append(&w, bytes[i], (size_t)(t[i].end - t[i].begin));
    if (rc == 0) rc = safetensors_writer_close(&w);
    if (rc != 0) FUZZ_FAIL("writing the tensors of an accepted file failed: %s", w.err);
    if (safetensors_open(&back, out_path) != 0) FUZZ_FAIL("the reader refuses what the writer wrote: %s", back.err);
    if (back.num_tensors != n) FUZZ_FAIL("%d tensors written, %d read back", n, back.num_tensors);
    for (int i = 0; i < n; i++) {
        const SafetensorsTensor* b = safetensors_find(&back, t[i].name);
        if (!b || b->dtype != t[i].dtype || b->ndim != t[i].ndim ||
            memcmp(b->shape, t[i].shape, sizeof(b->shape[0]) * (size_t)b->ndim) != 0 || b->end - b->begin != t[i].end - t[i].begin)
            FUZZ_FAIL("tensor \"%s\" is not read back as it was written", t[i].name);
        size_t nb = (size_t)(b->end - b->begin);
        unsigned char* again = (unsigned char*)malloc(nb ? nb : 1);
        if (safetensors_read(&back, b, again) != 0) FUZZ_FAIL("reading back tensor \"%s\" failed: %s", t[i].name, back.err);
        if (memcmp(again, bytes[i], nb) != 0) FUZZ_FAIL("tensor \"%s\": other bytes read back", t[i].name);
        free(again);
    }
    for (int i = 0; i < nm; i++) {  // (a key given twice is written twice: each file gives its first value)
        const char *v = safetensors_metadata(&back, meta[2 * i]), *was = safetensors_metadata(&r, meta[2 * i]);
        if (!v || !was || strcmp(v, was) != 0) FUZZ_FAIL("metadata \"%s\" is not read back", meta[2 * i]);
    }
    safetensors_close(&back);
    safetensors_close(&r);
    for (int i = 0; i < n; i++) free(bytes[i]);
    free(bytes);
    free(t);
    free(meta);
    return 0;
}
