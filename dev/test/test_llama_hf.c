// test_llama_hf.c: the Llama-style model's export to Hugging Face's layout (llmc/io/hf_model.h) and its
// import (llmc/io/hf_model_import.h), on the CPU. Export: every tensor's name, shape and data (our values
// are their own indices, so each tensor's data says exactly which part of our array it came from), and
// config.json's fields. Import: the export read back is our array bitwise (the padded rows zero), from
// one file and split into 3 with an index (dev/test/hf_split.h); a tied head is embed's copy; each
// setting of config.json this program cannot compute, a missing, unknown or misshapen tensor and a model
// of other sizes, and a NaN or an inf among the values, are refused, naming what; every size of config.json is bounded (num_hidden_layers
// 954437177, whose 3 + 9 L tensors wrap an int, and 2,000,000 are refused before any table is sized);
// model_qkv_dim is exact near 2^30; the named sizes are found by their layers. transformers
// loading the export, and its logits against the reference's, is dev/interop/llama_check.py (needs
// PyTorch).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../llmc/core/check.h"
#include "../../llmc/io/hf_model_import.h"
#include "../../llmc/io/hf_checkpoint.h"
#include "hf_split.h"
#include "testing.h"

// The Llama-style tensors in the order of llmc/model/spec.h's table, written out here
enum {
    LLAMA_EMBED, LLAMA_ATTN_NORM, LLAMA_WQKV, LLAMA_WO, LLAMA_FFN_NORM, LLAMA_WGATEUP, LLAMA_WDOWN,
    LLAMA_FINAL_NORM, LLAMA_LM_HEAD, LLAMA_NUM_TENSORS
};

static ModelConfig tiny(void) { return model_config_llama_sizes(50, 64, 16, 2, 16, 4, 2, 24, 10000.0, 1e-6); }

static void llama_tensor_sizes(size_t s[MODEL_MAX_TENSORS], const ModelConfig* c) {
    size_t off[MODEL_MAX_TENSORS];
    model_tensor_layout(c, s, off);
}

// Our offset of element (row, col) of HF's tensor `name` of layer l, by the layout in the header.
static size_t expected_offset(const ModelConfig* c, const char* what, int l, size_t row, size_t col) {
    size_t s[MODEL_MAX_TENSORS], off[MODEL_MAX_TENSORS], o = 0;
    llama_tensor_sizes(s, c);
    for (int i = 0; i < LLAMA_NUM_TENSORS; i++) { off[i] = o; o += s[i]; }
    size_t C = c->channels, F = c->ffn_hidden, hs = C / c->num_heads, q = c->num_heads * hs, kv = c->num_kv_heads * hs;
    size_t qkv = q + 2 * kv;
    if (!strcmp(what, "embed")) return off[LLAMA_EMBED] + row * C + col;
    if (!strcmp(what, "lm_head")) return off[LLAMA_LM_HEAD] + row * C + col;
    if (!strcmp(what, "norm")) return off[LLAMA_FINAL_NORM] + row;
    if (!strcmp(what, "in_norm")) return off[LLAMA_ATTN_NORM] + l * C + row;
    if (!strcmp(what, "post_norm")) return off[LLAMA_FFN_NORM] + l * C + row;
    if (!strcmp(what, "q")) return off[LLAMA_WQKV] + (l * qkv + row) * C + col;
    if (!strcmp(what, "k")) return off[LLAMA_WQKV] + (l * qkv + q + row) * C + col;
    if (!strcmp(what, "v")) return off[LLAMA_WQKV] + (l * qkv + q + kv + row) * C + col;
    if (!strcmp(what, "o")) return off[LLAMA_WO] + (l * C + row) * C + col;
    if (!strcmp(what, "gate")) return off[LLAMA_WGATEUP] + (l * 2 * F + row) * C + col;
    if (!strcmp(what, "up")) return off[LLAMA_WGATEUP] + (l * 2 * F + F + row) * C + col;
    if (!strcmp(what, "down")) return off[LLAMA_WDOWN] + (l * C + row) * F + col;
    return (size_t)-1;
}

static void check_tensor(SafetensorsReader* r, const ModelConfig* c, const char* name, const char* what, int l,
                         int64_t rows, int64_t cols) {
    const SafetensorsTensor* t = safetensors_find(r, name);
    EXPECT(t != NULL, "%s is missing", name);
    if (!t) return;
    int ndim = cols ? 2 : 1;
    EXPECT(t->ndim == ndim && t->shape[0] == rows && (ndim == 1 || t->shape[1] == cols), "%s: shape (%lld, %lld), "
           "expected (%lld, %lld)", name, (long long)t->shape[0], (long long)(ndim == 2 ? t->shape[1] : 0),
           (long long)rows, (long long)cols);
    size_t n = safetensors_numel(t);
    float* v = (float*)malloc_check(n * sizeof(float));
    EXPECT(safetensors_read_f32(r, t, v) == 0, "%s: %s", name, r->err);
    int bad = 0;
    size_t ncols = cols ? (size_t)cols : 1;
    for (size_t i = 0; i < n && !bad; i++)
        bad = v[i] != (float)expected_offset(c, what, l, i / ncols, i % ncols);
    EXPECT(!bad, "%s does not hold the expected part of our parameters", name);
    free(v);
}

// --- import ----------------------------------------------------------------------------------------

// dir/model.safetensors of values (c's tensors in HF's layout, but `drop` left out, `extra` (C,) added,
// layer 0's k_proj given the transposed shape when swap_k, lm_head's rows [0, V) embed's when
// head_is_embed), and config (consumed) as dir/config.json unless NULL.
static void write_model(const char* dir, const ModelConfig* c, const float* values, const char* drop,
                        const char* extra, int swap_k, int head_is_embed, cJSON* config) {
    char err[HF_ERR_LEN], path[512];
    int n = hf_model_num_tensors(c), m = 0;
    HfTensor* t = (HfTensor*)calloc((size_t)n + 1, sizeof(HfTensor));
    hf_model_tensors(t, c);
    for (int i = 0; i < n; i++) {
        if (drop && !strcmp(t[i].name, drop)) continue;
        t[m] = t[i];
        if (swap_k && !strcmp(t[m].name, "model.layers.0.self_attn.k_proj.weight")) {
            int64_t r = t[m].shape[0];
            t[m].shape[0] = t[m].shape[1];
            t[m].shape[1] = r;
        }
        if (head_is_embed && !strcmp(t[m].name, "lm_head.weight")) t[m].offset = t[0].offset;
        m++;
    }
    if (extra) {
        snprintf(t[m].name, sizeof(t[m].name), "%s", extra);
        t[m].ndim = 1; t[m].shape[0] = c->channels; t[m].offset = 0;
        m++;
    }
    EXPECT(hf_make_dir(dir, err, sizeof(err)) == 0, "%s", err);
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    EXPECT(hf_write_safetensors(path, t, m, values, err, sizeof(err)) == 0, "%s", err);
    if (config) EXPECT(hf_write_json(dir, "config.json", config, err, sizeof(err)) == 0, "%s", err);
    free(t);
}

// config.json as the export writes it, with key set to the JSON value `json` (NULL: key removed).
static cJSON* config_with(const ModelConfig* c, const char* key, const char* json) {
    cJSON* j = llama_hf_config_json(c, 49);
    cJSON_DeleteItemFromObjectCaseSensitive(j, key);
    if (json) cJSON_AddItemToObject(j, key, cJSON_Parse(json));
    return j;
}

static void expect_open_error(const char* dir, const char* frag, const char* what) {
    LlamaHfReader r;
    int rc = llama_hf_open(&r, dir);
    EXPECT(rc != 0 && strstr(r.err, frag), "%s: open returned %d (%s), expected an error with \"%s\"", what, rc,
           rc ? r.err : "no error", frag);
    if (rc == 0) hf_model_close(&r);
    else printf("  refused, %s: %s\n", what, r.err);
}

// Opens dir, loads it as the model c into out (n floats); returns the load's status, r->err its message.
static int load(LlamaHfReader* r, const char* dir, const ModelConfig* c, float* out) {
    if (llama_hf_open(r, dir) != 0) return -2;
    return llama_hf_load(r, c, out);
}

// open (-2 when it fails) then load (-1) refuse dir with the message fragment; `at` says which must
static void expect_import_error(const char* dir, const ModelConfig* c, float* out, int at, const char* frag,
                                const char* what) {
    LlamaHfReader r;
    int rc = load(&r, dir, c, out);
    EXPECT(rc == at && strstr(r.err, frag), "%s: %s returned %d (%s), expected %s to refuse it with \"%s\"", what,
           rc == -2 ? "open" : "load", rc, rc ? r.err : "no error", at == -2 ? "open" : "load", frag);
    if (rc == at) printf("  refused, %s: %s\n", what, r.err);
}

// out holds values, but for the padded rows of embed and lm_head, which are 0 (head_from_embed: lm_head's
// rows [0, V) are embed's).
static int same_as_values(const ModelConfig* c, const float* values, const float* out, int head_from_embed) {
    size_t s[MODEL_MAX_TENSORS], n = model_num_params(c), C = c->channels, V = c->vocab_size;
    llama_tensor_sizes(s, c);
    size_t head = n - s[LLAMA_LM_HEAD];
    for (size_t i = 0; i < n; i++) {
        int padded = (i >= V * C && i < s[LLAMA_EMBED]) || i >= head + V * C;
        float want = padded ? 0.0f : head_from_embed && i >= head ? values[i - head] : values[i];
        if (memcmp(&out[i], &want, sizeof(float)) != 0) {
            printf("  element %zu: %g, expected %g\n", i, out[i], want);
            return 0;
        }
    }
    return 1;
}

static void test_import(const char* dir, const ModelConfig* c, const float* values) {
    size_t n = model_num_params(c);
    float* out = (float*)malloc_check(n * sizeof(float));
    char path[512], sub[512];
    LlamaHfReader r;
    // the export read back, as a directory and as the file
    snprintf(path, sizeof(path), "%s/out", dir);
    for (size_t i = 0; i < n; i++) out[i] = NAN;
    int rc = load(&r, path, c, out);
    EXPECT(rc == 0, "import of the export: %s", r.err);
    const ModelConfig* f = &r.config;
    EXPECT(f->num_layers == c->num_layers && f->channels == c->channels && f->num_heads == c->num_heads &&
           f->num_kv_heads == c->num_kv_heads && f->ffn_hidden == c->ffn_hidden && f->vocab_size == c->vocab_size &&
           f->rope_theta == c->rope_theta && f->norm_eps == c->norm_eps, "the sizes read from config.json");
    EXPECT(rc == 0 && same_as_values(c, values, out, 0), "the export read back is our parameters bitwise");
    snprintf(path, sizeof(path), "%s/out/model.safetensors", dir);
    EXPECT(load(&r, path, c, out) == 0 && same_as_values(c, values, out, 0), "the file read back: %s", r.err);
    // the export split into 3 files and an index (llmc/io/hf_weights.h), as save_pretrained splits a large model
    char err[HF_ERR_LEN];
    snprintf(path, sizeof(path), "%s/out", dir);
    snprintf(sub, sizeof(sub), "%s/split", dir);
    EXPECT(hf_split_model(path, sub, 3, err, sizeof(err)) == 0, "split: %s", err);
    for (size_t i = 0; i < n; i++) out[i] = NAN;
    rc = load(&r, sub, c, out);
    EXPECT(rc == 0 && same_as_values(c, values, out, 0),
           "the export split into 3 files read back is our parameters bitwise: %s", rc ? r.err : "");

    // another model: its sizes, RoPE base or eps
    snprintf(path, sizeof(path), "%s/out", dir);
    ModelConfig o = *c;
    o.num_kv_heads = 4;
    expect_import_error(path, &o, out, -1, "this run's has 2 layers, 16 channels, 4 heads (4 key/value)", "other kv heads");
    o = *c;
    o.rope_theta = 500000;
    expect_import_error(path, &o, out, -1, "rope_theta 10000 and rms_norm_eps 1e-06, this run's are 500000",
                        "other RoPE base");

    // config.json: absent, and each setting this program cannot compute
    snprintf(sub, sizeof(sub), "%s/noconfig", dir);
    write_model(sub, c, values, NULL, NULL, 0, 0, NULL);
    expect_open_error(sub, "config.json beside it: the model's sizes and head counts are read from it",
                      "no config.json");
    struct { const char* key; const char* json; const char* frag; } bad[] = {
        {"rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": 8.0}", "rope_scaling.rope_type \"llama3\": this"},
        {"hidden_act", "\"gelu\"", "hidden_act \"gelu\""},
        {"attention_bias", "true", "attention_bias true"},
        {"mlp_bias", "true", "mlp_bias true"},
        {"model_type", "\"mistral\"", "model_type \"mistral\""},
        {"head_dim", "8", "head_dim is not 4: this program's heads are hidden_size / num_attention_heads"},
        {"num_attention_heads", NULL, "num_attention_heads is missing"},
        {"num_key_value_heads", "3", "the heads must divide hidden_size and the key/value heads the heads"},
        {"rms_norm_eps", "\"small\"", "rms_norm_eps is not a number in [0, 1)"},
        {"rope_theta", "0.5", "rope_theta is not a number in [1, 1e+12]"},
        {"rope_theta", "1e300", "rope_theta is not a number in [1, 1e+12]"},
        // every size bounded by what a real model has, before anything is sized by it: 3 + 9 L tensors
        // wrap an int at this L, and 2,000,000 layers would fill a table of gigabytes
        {"num_hidden_layers", "954437177", "num_hidden_layers 954437177: expected an integer in [1, 1024]"},
        {"num_hidden_layers", "2000000", "num_hidden_layers 2000000: expected an integer in [1, 1024]"},
        {"num_hidden_layers", "0", "num_hidden_layers 0: expected an integer in [1, 1024]"},
        {"num_attention_heads", "1e300", "num_attention_heads 1e+300: expected an integer in [1, 1024]"},
        {"hidden_size", "1073741824", "hidden_size 1073741824: expected an integer in [1, 65536]"},
        {"intermediate_size", "2.5", "intermediate_size 2.5: expected an integer in [1, 262144]"},
        {"vocab_size", "1e9", "vocab_size 1000000000: expected an integer in [1, 4194304]"},
        {"num_key_value_heads", "\"2\"", "num_key_value_heads is not a number"},
        {"vocab_size", "51", "tensor \"model.embed_tokens.weight\": shape (50, 16)"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(sub, sizeof(sub), "%s/config%zu", dir, i);
        write_model(sub, c, values, NULL, NULL, 0, 0, config_with(c, bad[i].key, bad[i].json));
        expect_open_error(sub, bad[i].frag, bad[i].key);
    }
    // a path longer than the reader's buffers: refused, not cut
    char* longpath = (char*)malloc_check(6000);
    memset(longpath, 'a', 5999);
    longpath[5999] = '\0';
    expect_open_error(longpath, "a path of 5999 bytes, longer than this program reads", "a path too long");
    free(longpath);

    // RoPE's base in rope_parameters (transformers 5's config.json), without rope_theta: read from there
    ModelConfig t5 = *c;
    t5.rope_theta = 500000.0;
    struct { const char* params; const char* theta; const char* frag; } rp[] = {
        {"{\"rope_type\": \"default\", \"rope_theta\": 500000.0}", NULL, NULL},
        {"{\"rope_type\": \"default\", \"rope_theta\": 500000.0}", "500000.0", NULL},
        {"{\"rope_type\": \"default\", \"rope_theta\": 500000.0}", "null", NULL},
        {"{\"rope_type\": \"llama3\", \"rope_theta\": 500000.0, \"factor\": 8.0}", NULL,
         "rope_parameters.rope_type \"llama3\": this program computes plain RoPE"},
        {"{\"type\": \"linear\", \"rope_theta\": 500000.0, \"factor\": 4.0}", NULL, "rope_parameters.type \"linear\""},
        {"{\"rope_type\": \"default\", \"rope_theta\": 500000.0, \"factor\": 4.0}", NULL,
         "rope_parameters.factor: this program computes plain RoPE"},
        {"{\"rope_type\": \"default\", \"rope_theta\": 500000.0}", "10000.0",
         "rope_theta 10000 and rope_parameters.rope_theta 500000 disagree"},
    };
    for (size_t i = 0; i < sizeof(rp) / sizeof(rp[0]); i++) {
        cJSON* j = config_with(&t5, "rope_theta", rp[i].theta);
        cJSON_AddItemToObject(j, "rope_parameters", cJSON_Parse(rp[i].params));
        snprintf(sub, sizeof(sub), "%s/rope_parameters%zu", dir, i);
        write_model(sub, &t5, values, NULL, NULL, 0, 0, j);
        if (rp[i].frag) {
            expect_open_error(sub, rp[i].frag, "rope_parameters");
        } else {
            rc = load(&r, sub, &t5, out);
            EXPECT(rc == 0 && r.config.rope_theta == 500000.0 && same_as_values(&t5, values, out, 0),
                   "rope_parameters %zu: rope_theta %g, expected 500000 (%s)", i, r.config.rope_theta, r.err);
        }
    }

    // rope_scaling asking for plain RoPE is plain RoPE
    snprintf(sub, sizeof(sub), "%s/rope_scaling_default", dir);
    write_model(sub, c, values, NULL, NULL, 0, 0, config_with(c, "rope_scaling", "{\"rope_type\": \"default\"}"));
    EXPECT(load(&r, sub, c, out) == 0 && same_as_values(c, values, out, 0), "rope_scaling {rope_type: default}: %s",
           r.err);
    // num_key_value_heads absent: as many as the heads (transformers' default), so k_proj's shape is wrong
    snprintf(sub, sizeof(sub), "%s/nokv", dir);
    write_model(sub, c, values, NULL, NULL, 0, 0, config_with(c, "num_key_value_heads", NULL));
    expect_import_error(sub, c, out, -2, "\"model.layers.0.self_attn.k_proj.weight\": shape (8, 16), config.json's "
                        "sizes give (16, 16)", "no num_key_value_heads: as many as the heads");

    // the tensors: one missing, one unknown, one misshapen, an old buffer
    snprintf(sub, sizeof(sub), "%s/missing", dir);
    write_model(sub, c, values, "model.layers.1.mlp.up_proj.weight", NULL, 0, 0, llama_hf_config_json(c, 49));
    expect_import_error(sub, c, out, -2, "no tensor \"model.layers.1.mlp.up_proj.weight\"", "a missing tensor");
    snprintf(sub, sizeof(sub), "%s/unknown", dir);
    write_model(sub, c, values, NULL, "model.layers.0.self_attn.q_norm.weight", 0, 0, llama_hf_config_json(c, 49));
    expect_import_error(sub, c, out, -2, "tensor \"model.layers.0.self_attn.q_norm.weight\": not part of",
                        "an unknown tensor");
    snprintf(sub, sizeof(sub), "%s/shape", dir);
    write_model(sub, c, values, NULL, NULL, 1, 0, llama_hf_config_json(c, 49));
    expect_import_error(sub, c, out, -2, "\"model.layers.0.self_attn.k_proj.weight\": shape (16, 8), config.json's "
                        "sizes give (8, 16)", "a transposed tensor");
    snprintf(sub, sizeof(sub), "%s/inv_freq", dir);
    write_model(sub, c, values, NULL, "model.layers.1.self_attn.rotary_emb.inv_freq", 0, 0, llama_hf_config_json(c, 49));
    EXPECT(load(&r, sub, c, out) == 0 && same_as_values(c, values, out, 0), "rotary_emb.inv_freq ignored: %s", r.err);

    // the head: tied (no lm_head.weight) starts as embed's copy; left out untied, it is missing
    snprintf(sub, sizeof(sub), "%s/tied", dir);
    write_model(sub, c, values, "lm_head.weight", NULL, 0, 0, config_with(c, "tie_word_embeddings", "true"));
    EXPECT(load(&r, sub, c, out) == 0 && same_as_values(c, values, out, 1), "a tied head is embed's copy: %s", r.err);
    snprintf(sub, sizeof(sub), "%s/nohead", dir);
    write_model(sub, c, values, "lm_head.weight", NULL, 0, 0, llama_hf_config_json(c, 49));
    expect_import_error(sub, c, out, -2, "no tensor \"lm_head.weight\"", "an untied model without its head");
    // tied, with lm_head.weight too: it must be the embedding
    snprintf(sub, sizeof(sub), "%s/tied_equal", dir);
    write_model(sub, c, values, NULL, NULL, 0, 1, config_with(c, "tie_word_embeddings", "true"));
    EXPECT(load(&r, sub, c, out) == 0 && same_as_values(c, values, out, 1), "a tied head given equal: %s", r.err);
    snprintf(sub, sizeof(sub), "%s/tied_differs", dir);
    write_model(sub, c, values, NULL, NULL, 0, 0, config_with(c, "tie_word_embeddings", "true"));
    expect_import_error(sub, c, out, -1, "\"lm_head.weight\" differs from model.embed_tokens.weight, and config.json "
                        "has tie_word_embeddings true", "a tied head given different");

    // a value that is not finite: refused on load, naming the tensor and the element (as HF stores it)
    float* poisoned = (float*)malloc_check(n * sizeof(float));
    size_t sizes[MODEL_MAX_TENSORS], off[MODEL_MAX_TENSORS], at = 0;
    llama_tensor_sizes(sizes, c);
    for (int i = 0; i < LLAMA_NUM_TENSORS; i++) { off[i] = at; at += sizes[i]; }
    size_t C = (size_t)c->channels, F = (size_t)c->ffn_hidden;
    const struct { size_t at; float value; const char* frag; } bad_values[] = {
        {off[LLAMA_WDOWN] + C * F + 2 * F + 7, INFINITY,
         "tensor \"model.layers.1.mlp.down_proj.weight\": element 55 (row 2, column 7) of 384 is inf: not finite"},
        {off[LLAMA_FINAL_NORM] + 3, NAN, "tensor \"model.norm.weight\": element 3 of 16 is nan: not finite"}};
    for (int k = 0; k < 2; k++) {
        memcpy(poisoned, values, n * sizeof(float));
        poisoned[bad_values[k].at] = bad_values[k].value;
        snprintf(sub, sizeof(sub), "%s/nonfinite%d", dir, k);
        write_model(sub, c, poisoned, NULL, NULL, 0, 0, llama_hf_config_json(c, 49));
        expect_import_error(sub, c, out, -1, bad_values[k].frag, "a value not finite");
    }
    free(poisoned);
    free(out);
}

// A checkpoint of the model c (master weights `master`, padded rows zero as the trainer keeps them) through
// build/export_hf's code (llmc/io/hf_checkpoint.h), read back by the import: bitwise the master weights,
// and config.json's eos_token_id the encoding's of its vocabulary (gpt2's here).
static void test_checkpoint_export(const char* dir) {
    ModelConfig c = tiny();
    c.vocab_size = 50257;
    c.padded_vocab_size = 50304;
    size_t n = model_num_params(&c), s[MODEL_MAX_TENSORS];
    llama_tensor_sizes(s, &c);
    float* master = (float*)malloc_check(n * sizeof(float));
    float* mv = (float*)malloc_check(n * sizeof(float));
    float* out = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        master[i] = (float)((double)(i % 100003) * 1e-4 + (double)i * 1e-9) * (i % 3 ? 1.0f : -1.0f);
        mv[i] = 1.0f + (float)i;  // m and v: not the master weights
    }
    size_t C = (size_t)c.channels, V = (size_t)c.vocab_size, pad = (size_t)(c.padded_vocab_size - c.vocab_size);
    memset(master + V * C, 0, pad * C * sizeof(float));
    memset(master + n - s[LLAMA_LM_HEAD] + V * C, 0, pad * C * sizeof(float));
    CheckpointState st;
    memset(&st, 0, sizeof(st));
    CheckpointModel* m = &st.model;
    m->family = CHECKPOINT_FAMILY_LLAMA; m->num_layers = c.num_layers; m->channels = c.channels;
    m->num_heads = c.num_heads; m->num_kv_heads = c.num_kv_heads; m->ffn_hidden = c.ffn_hidden;
    m->vocab_size = c.vocab_size; m->padded_vocab_size = c.padded_vocab_size; m->max_seq_len = c.max_seq_len;
    m->rope_theta = c.rope_theta; m->norm_eps = c.norm_eps; m->num_params = (int64_t)n;
    st.step = 9;
    snprintf(st.settings, sizeof(st.settings), "-model llama -encoding gpt2");
    char ckpt[512], hf[512], err[HF_ERR_LEN];
    snprintf(ckpt, sizeof(ckpt), "%s/ckpt_00000009.bin", dir);
    snprintf(hf, sizeof(hf), "%s/from_ckpt", dir);
    CheckpointWriter w;
    int rc = checkpoint_writer_open(&w, ckpt, &st);
    if (rc == 0) rc = checkpoint_writer_append(&w, master, n * sizeof(float));
    for (int k = 0; k < 2 && rc == 0; k++) rc = checkpoint_writer_append(&w, mv, n * sizeof(float));
    if (rc == 0) rc = checkpoint_writer_close(&w);
    EXPECT(rc == 0, "writing the synthetic Llama checkpoint: %s", w.err);
    HfExported ex;
    rc = hf_export_checkpoint(ckpt, hf, "data/gpt2/vocab.bpe", &ex, err, sizeof(err));
    EXPECT(rc == 0, "export of the checkpoint: %s", err);
    EXPECT(ex.step == 9 && ex.model.family == CHECKPOINT_FAMILY_LLAMA && ex.model.num_kv_heads == 2 && ex.eos == 50256,
           "the export's step %lld, family %d, eos %d", (long long)ex.step, ex.model.family, ex.eos);
    LlamaHfReader r;
    rc = load(&r, hf, &c, out);
    EXPECT(rc == 0 && !memcmp(out, master, n * sizeof(float)), "the checkpoint's export read back is its master "
           "weights bitwise (%s)", rc ? r.err : "");
    char path[600], config_path[700];
    snprintf(path, sizeof(path), "%s/model.safetensors", hf);
    cJSON* j = NULL;
    EXPECT(hf_read_config(path, &j, config_path, sizeof(config_path), err, sizeof(err)) == 0 && j, "%s", err);
    const cJSON* eos = j ? cJSON_GetObjectItemCaseSensitive(j, "eos_token_id") : NULL;
    EXPECT(cJSON_IsNumber(eos) && eos->valuedouble == 50256, "the export's config.json: eos_token_id 50256");
    cJSON_Delete(j);
    free(master); free(mv); free(out);
}

// model_qkv_dim of sizes near 2^30 (what config.json could say before its sizes were bounded): exact in
// 64 bits, where (NH + 2 NKV) * hs overflowed an int.
static void test_qkv_dim(void) {
    ModelConfig c;
    memset(&c, 0, sizeof(c));
    c.family = MODEL_FAMILY_LLAMA;
    c.channels = 1 << 30; c.num_heads = 1 << 29; c.num_kv_heads = 1 << 29;
    EXPECT(model_qkv_dim(&c) == (int64_t)3 << 30, "model_qkv_dim of C 2^30, NH = NKV = 2^29: %lld, expected %lld",
           (long long)model_qkv_dim(&c), (long long)3 << 30);
    c.channels = 2048; c.num_heads = 16; c.num_kv_heads = 4;  // llama-1b's
    EXPECT(model_qkv_dim(&c) == 3072, "model_qkv_dim of llama-1b: %lld", (long long)model_qkv_dim(&c));
}

// model_size_name: each named size found by its layers, whatever the vocabulary; another width none.
static void test_size_names(void) {
    const char* names[] = {"llama-30m", "llama-125m", "llama-350m", "llama-1b"};
    for (int i = 0; i < 4; i++) {
        ModelConfig c;
        memset(&c, 0, sizeof(c));
        EXPECT(model_config_named(&c, MODEL_FAMILY_LLAMA, names[i], 100277, 4096) == 0, "%s is a size", names[i]);
        const char* got = model_size_name(&c);
        EXPECT(got && !strcmp(got, names[i]), "model_size_name of %s: %s", names[i], got ? got : "NULL");
        c.ffn_hidden += 256;
        EXPECT(model_size_name(&c) == NULL, "%s with another FFN width has no name", names[i]);
    }
}

int main(void) {
    ModelConfig c = tiny();
    size_t n = model_num_params(&c);
    float* values = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) values[i] = (float)i;  // exact below 2^24
    char dir[] = "/tmp/test_llama_hf.XXXXXX", err[HF_ERR_LEN], path[256];
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    snprintf(path, sizeof(path), "%s/out", dir);
    EXPECT(hf_model_export(path, &c, values, NULL, 49, err, sizeof(err)) == 0, "export: %s", err);

    SafetensorsReader r;
    snprintf(path, sizeof(path), "%s/out/model.safetensors", dir);
    EXPECT(safetensors_open(&r, path) == 0, "open: %s", r.err);
    EXPECT(r.num_tensors == hf_model_num_tensors(&c), "%d tensors, expected %d", r.num_tensors, hf_model_num_tensors(&c));
    int64_t C = c.channels, F = c.ffn_hidden, V = c.vocab_size, hs = C / c.num_heads;
    check_tensor(&r, &c, "model.embed_tokens.weight", "embed", 0, V, C);
    check_tensor(&r, &c, "lm_head.weight", "lm_head", 0, V, C);
    check_tensor(&r, &c, "model.norm.weight", "norm", 0, C, 0);
    char name[128];
    for (int l = 0; l < c.num_layers; l++) {
#define T(hfname, what, rows, cols) snprintf(name, sizeof(name), "model.layers.%d." hfname, l); \
        check_tensor(&r, &c, name, what, l, rows, cols)
        T("input_layernorm.weight", "in_norm", C, 0);
        T("self_attn.q_proj.weight", "q", c.num_heads * hs, C);
        T("self_attn.k_proj.weight", "k", c.num_kv_heads * hs, C);
        T("self_attn.v_proj.weight", "v", c.num_kv_heads * hs, C);
        T("self_attn.o_proj.weight", "o", C, C);
        T("post_attention_layernorm.weight", "post_norm", C, 0);
        T("mlp.gate_proj.weight", "gate", F, C);
        T("mlp.up_proj.weight", "up", F, C);
        T("mlp.down_proj.weight", "down", C, F);
#undef T
    }
    safetensors_close(&r);

    char config_path[600];
    cJSON* j = NULL;  // model.safetensors' path still: the config.json beside it
    EXPECT(hf_read_config(path, &j, config_path, sizeof(config_path), err, sizeof(err)) == 0 && j,
           "config.json does not parse: %s", err);
    struct { const char* key; double want; } nums[] = {
        {"vocab_size", 50}, {"hidden_size", 16}, {"intermediate_size", 24}, {"num_hidden_layers", 2},
        {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 4}, {"max_position_embeddings", 16},
        {"rms_norm_eps", 1e-6}, {"rope_theta", 10000}, {"eos_token_id", 49}};
    for (size_t i = 0; j && i < sizeof(nums) / sizeof(nums[0]); i++) {
        const cJSON* x = cJSON_GetObjectItemCaseSensitive(j, nums[i].key);
        EXPECT(cJSON_IsNumber(x) && x->valuedouble == nums[i].want, "config.json %s: expected %g", nums[i].key,
               nums[i].want);
    }
    const cJSON* arch = j ? cJSON_GetObjectItemCaseSensitive(j, "architectures") : NULL;
    EXPECT(cJSON_IsArray(arch) && cJSON_IsString(cJSON_GetArrayItem(arch, 0)) &&
           !strcmp(cJSON_GetArrayItem(arch, 0)->valuestring, "LlamaForCausalLM"), "config.json architectures");
    const cJSON* tie = j ? cJSON_GetObjectItemCaseSensitive(j, "tie_word_embeddings") : NULL;
    EXPECT(cJSON_IsFalse(tie), "config.json: the head must be untied");
    const cJSON* act = j ? cJSON_GetObjectItemCaseSensitive(j, "hidden_act") : NULL;
    EXPECT(cJSON_IsString(act) && !strcmp(act->valuestring, "silu"), "config.json hidden_act silu");
    cJSON_Delete(j);
    test_import(dir, &c, values);
    test_checkpoint_export(dir);
    test_size_names();
    test_qkv_dim();
    free(values);
    test_remove_dir(dir);
    return test_summary("test_llama_hf");
}
