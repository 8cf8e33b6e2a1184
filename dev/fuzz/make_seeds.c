// make_seeds.c: the seeds of the harnesses that read files only the trainer writes, written with the
// project's own writers (dev/fuzz/make_seeds.sh runs it, and writes the other seeds with build/make_shards
// and the fetched tokenizer files):
//   OUT/checkpoint/        checkpoints (llmc/io/checkpoint.h's writer) of small GPT-2 and Llama-style models,
//                          one GPT-2 of the real vocabulary (the one family whose export needs it), one in
//                          format version 1; the data position is the fixture stream's (fixtures.h)
//   OUT/safetensors/       the small models' safetensors (llmc/io/hf_model.h), and a file of
//                          every dtype, a scalar and an empty tensor, with metadata
//   OUT/hf/                fuzz_hf.c's inputs: settings, config.json, model.safetensors or the index and
//                          files of a split model (dev/test/hf_split.h)
//   OUT/tokenizer_files/   small tiktoken encoder files (fuzz_tokenizer_files.c, mode 2) with GPT-2's pattern
//                          and those of the fetched cl100k_base and o200k_base files
// usage: make_seeds OUT
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "fixtures.h"
#include "../../llmc/io/checkpoint.h"
#include "../../llmc/io/hf_model.h"
#include "../../llmc/data/tokenizer.h"
#include "../test/hf_split.h"

#define SEP "\n--8<--\n"  // fuzz.h's FUZZ_SEP

static const char* out;
static uint64_t rng = 0x5eedULL;

static float next_value(void) {  // small, finite, deterministic
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((int)(rng >> 40) % 2001 - 1000) / 4096.0f;
}

static void die(const char* what, const char* err) {
    fprintf(stderr, "make_seeds: %s: %s\n", what, err);
    exit(1);
}

static void dir_of(char* path, size_t n, const char* sub) {
    snprintf(path, n, "%s/%s", out, sub);
    mkdir(path, 0755);
}

static unsigned char* slurp(const char* path, size_t* n) {
    FILE* f = fopen_check(path, "rb");
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char* b = (unsigned char*)malloc_check(*n + 1);
    if (*n) fread_check(b, 1, *n, f);
    fclose(f);
    return b;
}

// --- checkpoints ---------------------------------------------------------------------------------

static DataLoaderPosition fixture_position(void) {
    char dir[1100], pattern[1200];
    dir_of(dir, sizeof(dir), "tmp_data");
    fixture_shards(dir, pattern, sizeof(pattern));
    DataLoader dl;
    DataLoaderConfig c = fixture_loader_config(pattern);
    dataloader_check(&dl, dataloader_init(&dl, &c));
    for (int i = 0; i < 5; i++) dataloader_check(&dl, dataloader_next_batch(&dl));
    DataLoaderPosition p = dataloader_save(&dl);
    dataloader_free(&dl);
    return p;
}

// global_batch: -1 for the position of the fixture's stream after five batches, else that batch index
static void write_checkpoint(const char* name, const CheckpointModel* m, int version, int64_t global_batch) {
    char path[1200];
    snprintf(path, sizeof(path), "%s/checkpoint/%s", out, name);
    CheckpointState s;
    memset(&s, 0, sizeof(s));
    s.model = *m;
    s.step = 10;
    s.rng = 42;
    s.data = fixture_position();
    if (global_batch >= 0) s.data.global_batch = global_batch;
    snprintf(s.settings, sizeof(s.settings), "-b %d -t %d -seed %d", FIXTURE_B, FIXTURE_T, FIXTURE_SEED);
    CheckpointWriter w;
    if (checkpoint_writer_open(&w, path, &s) != 0) die(path, w.err);
    for (int k = 0; k < CHECKPOINT_TENSORS; k++)
        for (int64_t i = 0; i < m->num_params; i++) {
            float v = next_value();
            if (k == 2) v = v < 0 ? -v : v;  // second moments are never negative
            if (checkpoint_writer_append(&w, &v, sizeof(v)) != 0) die(path, w.err);
        }
    if (checkpoint_writer_close(&w) != 0) die(path, w.err);
    if (version == 1) {  // the format before the checksum: slot 28 is 0
        FILE* f = fopen_check(path, "r+b");
        int32_t v1[2] = {1, 0};
        fseek(f, CKPT_H_VERSION * 4, SEEK_SET);
        fwrite_check(&v1[0], 4, 1, f);
        fseek(f, CKPT_H_CRC * 4, SEEK_SET);
        fwrite_check(&v1[1], 4, 1, f);
        fclose_check(f);
    }
}

static CheckpointModel gpt_model(const ModelConfig* g) { return checkpoint_model_of(g); }

static CheckpointModel llama_model(const ModelConfig* l) { return checkpoint_model_of(l); }

// --- safetensors and Hugging Face directories -------------------------------------------------------

static float* values_of(size_t n) {
    float* v = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) v[i] = next_value();
    return v;
}

static void write_every_dtype(void) {
    char path[1200];
    snprintf(path, sizeof(path), "%s/safetensors/dtypes.safetensors", out);
    SafetensorsTensor t[ST_NUM_DTYPES + 2];
    int n = 0;
    for (int d = 0; d < ST_NUM_DTYPES; d++) {
        char name[32];
        snprintf(name, sizeof(name), "t.%s", safetensors_dtype_name((SafetensorsDtype)d));
        int64_t shape[2] = {2, 1 + d % 3};
        safetensors_tensor(&t[n++], name, (SafetensorsDtype)d, 1 + d % 2, shape);
    }
    int64_t zero[1] = {0};
    safetensors_tensor(&t[n++], "scalar", ST_F32, 0, zero);
    safetensors_tensor(&t[n++], "empty", ST_BF16, 1, zero);
    const char* const meta[] = {"format", "pt", "note", "made by dev/fuzz/make_seeds.c", NULL};
    SafetensorsWriter w;
    if (safetensors_writer_open(&w, path, t, n, meta) != 0) die(path, w.err);
    for (int i = 0; i < n; i++) {
        size_t bytes = (size_t)(t[i].end - t[i].begin);
        unsigned char buf[256];
        for (size_t k = 0; k < bytes; k++) buf[k] = (unsigned char)(17 * k + i);
        if (safetensors_writer_append(&w, buf, bytes) != 0) die(path, w.err);
    }
    if (safetensors_writer_close(&w) != 0) die(path, w.err);
}

// An fuzz_hf input: settings byte, config.json of the directory (when it has one), then model.safetensors,
// or (split) the index and its files.
static void write_hf_seed(const char* name, int mode, const char* dir, int split) {
    char path[1400];
    snprintf(path, sizeof(path), "%s/hf/%s", out, name);
    FILE* f = fopen_check(path, "wb");
    fputc(mode, f);
    fputs(SEP, f);
    size_t n;
    snprintf(path, sizeof(path), "%s/config.json", dir);
    if (access(path, R_OK) == 0) {
        unsigned char* b = slurp(path, &n);
        fwrite_check(b, 1, n, f);
        free(b);
    }
    fputs(SEP, f);
    snprintf(path, sizeof(path), "%s/%s", dir, split ? HF_WEIGHTS_INDEX : HF_WEIGHTS_FILE);
    unsigned char* b = slurp(path, &n);
    fwrite_check(b, 1, n, f);
    free(b);
    for (int k = 1; k <= split; k++) {
        fputs(SEP, f);
        snprintf(path, sizeof(path), "%s/model-%05d-of-%05d.safetensors", dir, k, split);
        b = slurp(path, &n);
        fwrite_check(b, 1, n, f);
        free(b);
    }
    fclose_check(f);
}

static void write_models(void) {
    char err[HF_ERR_LEN], dir[1200], split[1200], path[1300];
    // GPT-2: no config.json, the tensors only; and with one, split in two
    ModelConfig g = model_config_gpt2_sizes(8, 32, 128, 2, 2, 8);  // maxT, V, Vp, L, NH, C
    size_t n = model_num_params(&g);
    float* v = values_of(n);
    snprintf(dir, sizeof(dir), "%s/tmp_gpt", out);
    if (hf_make_dir(dir, err, sizeof(err)) != 0) die(dir, err);
    snprintf(path, sizeof(path), "%s/%s", dir, HF_WEIGHTS_FILE);
    if (hf_model_write_safetensors(path, &g, v, err, sizeof(err)) != 0) die(path, err);
    snprintf(path, sizeof(path), "%s/safetensors/gpt2.safetensors", out);
    if (hf_model_write_safetensors(path, &g, v, err, sizeof(err)) != 0) die(path, err);
    write_hf_seed("gpt2_file", 0, dir, 0);
    if (hf_write_json(dir, "config.json", gpt_hf_config_json(&g), err, sizeof(err)) != 0) die(dir, err);
    write_hf_seed("gpt2_dir_config", 2, dir, 0);
    snprintf(split, sizeof(split), "%s/tmp_gpt_split", out);
    if (hf_split_model(dir, split, 2, err, sizeof(err)) != 0) die(split, err);
    write_hf_seed("gpt2_split", 4, split, 2);
    free(v);
    // a smaller vocabulary than channels: a shape our own writer writes; and the smallest model, whose
    // config.json is most of the file
    ModelConfig more[2] = {model_config_gpt2_sizes(4, 16, 16, 1, 2, 8), model_config_gpt2_sizes(2, 4, 4, 1, 1, 1)};
    const char* more_names[2] = {"gpt2_narrow_vocab", "gpt2_tiny"};
    for (int m = 0; m < 2; m++) {
        n = model_num_params(&more[m]);
        v = values_of(n);
        snprintf(dir, sizeof(dir), "%s/tmp_%s", out, more_names[m]);
        if (hf_make_dir(dir, err, sizeof(err)) != 0) die(dir, err);
        snprintf(path, sizeof(path), "%s/%s", dir, HF_WEIGHTS_FILE);
        if (hf_model_write_safetensors(path, &more[m], v, err, sizeof(err)) != 0) die(path, err);
        if (hf_write_json(dir, "config.json", gpt_hf_config_json(&more[m]), err, sizeof(err)) != 0) die(dir, err);
        write_hf_seed(more_names[m], 2, dir, 0);
        free(v);
    }
    // Llama-style: a directory, and its split index named as a file
    ModelConfig l = model_config_llama_sizes(20, 128, 16, 2, 8, 2, 1, 16, 10000.0, 1e-5);  // V, Vp, maxT, L, C, NH, NKV, F, theta, eps
    n = model_num_params(&l);
    v = values_of(n);
    snprintf(dir, sizeof(dir), "%s/tmp_llama", out);
    if (hf_model_export(dir, &l, v, NULL, -1, err, sizeof(err)) != 0) die(dir, err);
    snprintf(path, sizeof(path), "%s/safetensors/llama.safetensors", out);
    if (hf_model_write_safetensors(path, &l, v, err, sizeof(err)) != 0) die(path, err);
    write_hf_seed("llama_dir", 1 | 2, dir, 0);
    snprintf(split, sizeof(split), "%s/tmp_llama_split", out);
    if (hf_split_model(dir, split, 3, err, sizeof(err)) != 0) die(split, err);
    write_hf_seed("llama_split_index", 1 | 6, split, 3);
    free(v);
    ModelConfig tiny = model_config_llama_sizes(3, 3, 2, 1, 2, 1, 1, 2, 10000.0, 1e-5);
    v = values_of(model_num_params(&tiny));
    snprintf(dir, sizeof(dir), "%s/tmp_llama_tiny", out);
    if (hf_model_export(dir, &tiny, v, NULL, -1, err, sizeof(err)) != 0) die(dir, err);
    write_hf_seed("llama_tiny", 1 | 2, dir, 0);
    free(v);
}

// --- a small tiktoken encoder file -----------------------------------------------------------------

static void base64(const unsigned char* s, size_t n, char* o) {
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < n; i += 3) {
        uint32_t w = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) | (i + 2 < n ? s[i + 2] : 0);
        *o++ = a[w >> 18 & 63];
        *o++ = a[w >> 12 & 63];
        *o++ = i + 1 < n ? a[w >> 6 & 63] : '=';
        *o++ = i + 2 < n ? a[w & 63] : '=';
    }
    *o = '\0';
}

// name: the seed; pattern: its pat_str; mode: fuzz_tokenizer_files.c's settings byte (2: loaded as
// cl100k_base, 5: as o200k_base). 256 ranks of single bytes, a few merges, two special tokens.
static void write_tiktoken(const char* name, const char* pattern, int mode) {
    char path[1200], b64[64];
    static char ranks[8192];
    size_t len = (size_t)snprintf(ranks, sizeof(ranks), "! 0");
    unsigned char order[256];
    tokenizer_byte_order(order);  // ids 0-255: the bytes in GPT-2's order, as in every encoding here
    for (int i = 0; i < 256; i++) {
        base64(&order[i], 1, b64);
        len += (size_t)snprintf(ranks + len, sizeof(ranks) - len, " %s", b64);
    }
    const char* merges[] = {"he", "ll", "hell", "hello", " w", "or", " wor", " world", "in", "ing", " t", "th", " the"};
    len += (size_t)snprintf(ranks + len, sizeof(ranks) - len, "\n! 256");
    for (size_t i = 0; i < sizeof(merges) / sizeof(merges[0]); i++) {
        base64((const unsigned char*)merges[i], strlen(merges[i]), b64);
        len += (size_t)snprintf(ranks + len, sizeof(ranks) - len, " %s", b64);
    }
    cJSON* j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "pat_str", pattern);
    cJSON* sp = cJSON_AddObjectToObject(j, "special_tokens");
    cJSON_AddNumberToObject(sp, "<|endoftext|>", 300);
    cJSON_AddNumberToObject(sp, "<|endofprompt|>", 301);
    cJSON_AddStringToObject(j, "bpe_ranks", ranks);
    char* text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    snprintf(path, sizeof(path), "%s/tokenizer_files/%s", out, name);
    FILE* f = fopen_check(path, "wb");
    fputc(mode, f);
    fputs(SEP, f);
    fputs(text, f);
    fclose_check(f);
    free(text);
}

// The pat_str of a fetched tiktoken file (data/tiktoken/), malloc'd.
static char* pattern_of(const char* path) {
    size_t n;
    unsigned char* b = slurp(path, &n);
    cJSON* j = cJSON_ParseWithLength((const char*)b, n);
    free(b);
    const cJSON* p = cJSON_GetObjectItemCaseSensitive(j, "pat_str");
    if (!cJSON_IsString(p)) die(path, "no pat_str");
    char* s = strdup(p->valuestring);
    cJSON_Delete(j);
    return s;
}

int main(int argc, char** argv) {
    if (argc != 2) { fprintf(stderr, "usage: make_seeds OUT\n"); return 2; }
    out = argv[1];
    char d[1100];
    const char* subs[] = {"checkpoint", "safetensors", "hf", "tokenizer_files"};
    for (int i = 0; i < 4; i++) dir_of(d, sizeof(d), subs[i]);

    ModelConfig small = model_config_gpt2_sizes(8, 64, 128, 1, 2, 8), tiny = model_config_gpt2_sizes(1, 2, 2, 1, 1, 1),
                real_vocab = model_config_gpt2_sizes(4, GPT2_VOCAB, 50304, 1, 1, 1);
    CheckpointModel m = gpt_model(&small);
    write_checkpoint("gpt2_small.bin", &m, 2, -1);
    write_checkpoint("gpt2_small_v1.bin", &m, 1, -1);
    m = gpt_model(&tiny);  // (a run far into its data: 2^40 batches)
    write_checkpoint("gpt2_tiny_late.bin", &m, 2, (int64_t)1 << 40);
    m = gpt_model(&real_vocab);
    write_checkpoint("gpt2_vocab.bin", &m, 2, -1);
    ModelConfig l = model_config_llama_sizes(20, 128, 8, 1, 8, 2, 1, 8, 10000.0, 1e-5);
    m = llama_model(&l);
    write_checkpoint("llama_small.bin", &m, 2, -1);

    write_models();
    write_every_dtype();
    write_tiktoken("small_gpt2_pattern", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", 2);
    const char* encodings[] = {"cl100k_base", "o200k_base"};
    for (int i = 0; i < 2; i++) {
        char path[1200], name[64];
        snprintf(path, sizeof(path), "data/tiktoken/%s.json", encodings[i]);
        snprintf(name, sizeof(name), "small_%s_pattern", encodings[i]);
        char* pattern = pattern_of(path);
        write_tiktoken(name, pattern, 2 + 3 * i);
        free(pattern);
    }
    return 0;
}
