// fuzz_hf.c: a model in Hugging Face's layout read by train_gpt -init's import: gpt_hf_open and
// gpt_hf_load, llama_hf_open and llama_hf_load (llmc/io/hf_model_import.h), over
// one safetensors file or a split model's index.json and files (llmc/io/hf_weights.h), with the
// config.json beside them.
// The input is parts (fuzz.h): settings, config.json (an empty part: none), then model.safetensors, or
// model.safetensors.index.json followed by the files model-0000k-of-0000n.safetensors (k = 1 .. n, one
// part each). Settings byte 0: bit 0 the family (0 GPT-2, 1 Llama), bits 1-2 what is opened: 0 the
// safetensors file, 1 the directory holding it, 2 the directory of a split model, 3 its index.json.
// Properties: a refusal names the file, the index or the directory; a model that opens loads into a
// model of its own sizes, and every value it loads is finite.
#define FUZZ_WRAP_CJSON
#define FUZZ_MUTATE_NUMBERS
#include "fuzz.h"
#include <math.h>
#include "../../llmc/io/hf_model_import.h"

#define MAX_PARAMS ((size_t)16 << 20)  // larger models open, but are not loaded: memory and time

static char dir[1100];

int LLVMFuzzerInitialize(int* argc, char*** argv) {
    (void)argc; (void)argv;
    fuzz_path(dir, sizeof(dir), "hf");
    return 0;
}

static void put(const char* name, const uint8_t* b, size_t n) {
    char path[1300];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    fuzz_write(path, b, n);
}

static void check_finite(const float* v, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i])) FUZZ_FAIL("parameter %zu of %zu loaded as %g", i, n, (double)v[i]);
}

static void load_gpt(const char* path) {
    static GptHfReader r;
    if (gpt_hf_open(&r, path) != 0) { FUZZ_NAMES(r.err, dir); return; }
    ModelConfig c = model_config_gpt2_sizes(r.positions, r.vocab_rows, (r.vocab_rows + 127) / 128 * 128, r.num_layers,
                                            r.num_heads ? r.num_heads : 1, r.channels);
    size_t total = model_num_params(&c);
    if (total > MAX_PARAMS) {
        hf_model_close(&r);
        return;
    }
    float* v = (float*)malloc(total * sizeof(float));
    if (gpt_hf_load(&r, &c, v) != 0) FUZZ_NAMES(r.err, dir);
    else check_finite(v, total);
    free(v);
}

static void load_llama(const char* path) {
    static LlamaHfReader r;
    if (llama_hf_open(&r, path) != 0) { FUZZ_NAMES(r.err, dir); return; }
    ModelConfig c = r.config;
    c.padded_vocab_size = (c.vocab_size + 127) / 128 * 128;
    c.max_seq_len = 64;
    size_t total = model_num_params(&c);
    if (total > MAX_PARAMS) { hf_model_close(&r); return; }
    float* v = (float*)malloc(total * sizeof(float));
    if (llama_hf_load(&r, &c, v) != 0) FUZZ_NAMES(r.err, dir);
    else check_finite(v, total);
    free(v);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FuzzParts p;
    fuzz_parts(&p, data, size);
    if (p.n < 3) return 0;
    int mode = p.len[0] ? p.at[0][0] : 0, llama = mode & 1, layout = (mode >> 1) & 3;
    fuzz_rm_rf(dir);
    if (mkdir(dir, 0700) != 0) { perror(dir); abort(); }
    if (p.len[1] > 0) put("config.json", p.at[1], p.len[1]);
    char path[1300];
    if (layout < 2) {
        put(HF_WEIGHTS_FILE, p.at[2], p.len[2]);
        if (layout == 0) snprintf(path, sizeof(path), "%s/%s", dir, HF_WEIGHTS_FILE);
        else snprintf(path, sizeof(path), "%s", dir);
    } else {
        put(HF_WEIGHTS_INDEX, p.at[2], p.len[2]);
        int files = p.n - 3;
        for (int k = 0; k < files; k++) {
            char name[64];
            snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", k + 1, files);
            put(name, p.at[3 + k], p.len[3 + k]);
        }
        if (layout == 2) snprintf(path, sizeof(path), "%s", dir);
        else snprintf(path, sizeof(path), "%s/%s", dir, HF_WEIGHTS_INDEX);
    }
    if (llama) load_llama(path);
    else load_gpt(path);
    return 0;
}
