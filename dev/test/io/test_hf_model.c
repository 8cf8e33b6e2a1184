// test_hf_model.c: CPU tests of the export to and the import from Hugging Face's layout of both
// families (llmc/io/hf_model.h, llmc/io/hf_model_import.h, llmc/io/hf_checkpoint.h), on synthetic models
// in a temporary directory. Every parameter has its own value, so a misplaced element shows.
// Checks, for each family (GPT-2: L=2, C=16, NH=2; Llama-style: L=2, C=16, NH=4, NKV=2, F=24; both with
// V=50257 padded to 50304), one table row each (test_family):
//   - a checkpoint exported through the checkpoint reader (as build/export_hf does), then imported, gives
//     back bitwise the same weights, padded vocabulary rows zero; the import writes every element; the
//     export's step, family, sizes and eos; config.json's eos_token_id 50256; the same export split into
//     3 files and an index (dev/test/hf_split.h, as save_pretrained splits a large model) too
//   - a NaN or an inf among the values: opened, then refused on load, naming the tensor and the element
// GPT-2's own (test_gpt2, on that export):
//   - model.safetensors: the tensor names and shapes, no lm_head, metadata format "pt"
//   - the transposes: known elements of c_attn, attn.c_proj, mlp.c_fc and mlp.c_proj land where HF's
//     (in, out) layout puts them; wte's last real row and wpe, ln_2.bias in place
//   - config.json: every field transformers reads for this model; the tokenizer files are copies of
//     data/gpt2/encoder.json and vocab.bpe, tokenizer_config.json and special_tokens_map.json name
//     <|endoftext|>
//   - import variants: BF16 and F16 files (converted exactly), the "transformer." prefix with the
//     attn.bias buffers and a tied lm_head.weight
//   - import errors, each naming the tensor or setting: a missing tensor, a wrong shape (an untransposed
//     weight), a wrong dtype, an unknown tensor, another depth, an untied lm_head, a config.json with
//     another n_head or activation, an n_head of 1e300 or past n_embd (refused on open, before it is
//     converted), a file without h.0.ln_1.weight (named, not "h.0 ... h.-1")
//   - the export's directory: a Llama-style export over GPT-2's (and the reverse, and through a link)
//     leaves only its own files; a directory holding another file is refused untouched; an export that
//     fails partway, or at its start (no tokenizer files, a file in the path), leaves nothing behind
//   - a model whose vocabulary is smaller than 4 C, read back bitwise (the transposes' scratch holds the
//     largest tensor; ASan checks it)
// The Llama-style model's own (test_llama, V=50 unpadded, each value its own index): export: every
// tensor's name, shape and data (each tensor's data says exactly which part of our array it came from),
// and config.json's fields. Import: the export read back is our array bitwise, as a directory and as the
// file; a tied head is embed's copy; each setting of config.json this program cannot compute, a missing,
// unknown or misshapen tensor and a model of other sizes are refused, naming what; every size of
// config.json is bounded (num_hidden_layers 954437177, whose 3 + 9 L tensors wrap an int, and 2,000,000
// are refused before any table is sized); model_qkv_dim is exact near 2^30; the named sizes are found by
// their layers. transformers loading the export, and its logits against the reference's, is
// dev/interop/llama_check.py (needs PyTorch).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../../../llmc/core/check.h"
#include "../../../llmc/io/hf_model_import.h"
#include "../../../llmc/io/hf_checkpoint.h"
#include "../hf_split.h"
#include "../testing.h"

#define VOCAB_BPE "data/gpt2/vocab.bpe"
#define ENCODER_JSON "data/gpt2/encoder.json"

static char dir[256];  // the test's temporary directory

// GPT-2's tensors in llm.c's order (llmc/model/spec.h's table), written out here
enum {
    GPT_WTE, GPT_WPE, GPT_LN1W, GPT_LN1B, GPT_QKVW, GPT_QKVB, GPT_ATTPROJW, GPT_ATTPROJB, GPT_LN2W, GPT_LN2B,
    GPT_FCW, GPT_FCB, GPT_FCPROJW, GPT_FCPROJB, GPT_LNFW, GPT_LNFB, GPT_NUM_TENSORS
};

static ModelConfig gpt_tiny(void) { return model_config_gpt2_sizes(32, 50257, 50304, 2, 2, 16); }

// The Llama-style tensors in the order of llmc/model/spec.h's table, written out here
enum {
    LLAMA_EMBED, LLAMA_ATTN_NORM, LLAMA_WQKV, LLAMA_WO, LLAMA_FFN_NORM, LLAMA_WGATEUP, LLAMA_WDOWN,
    LLAMA_FINAL_NORM, LLAMA_LM_HEAD, LLAMA_NUM_TENSORS
};

static ModelConfig llama_tiny(void) { return model_config_llama_sizes(50, 64, 16, 2, 16, 4, 2, 24, 10000.0, 1e-6); }

static size_t num_params(const ModelConfig* c, size_t off[MODEL_MAX_TENSORS]) {
    size_t size[MODEL_MAX_TENSORS];
    return model_tensor_layout(c, size, off);
}

// --- both families: the checks they share, one table row per family --------------------------------

// A family's model for the shared checks (V = 50257 padded to 50304, as the trainer pads GPT-2's
// vocabulary), how its checkpoint says it, how it is read back, and two values that are not finite.
typedef struct {
    const char* name;         // as the messages say it
    const char* sub;          // its directory under dir
    ModelConfig config;
    const char* settings;     // the checkpoint's settings: the encoding gives a Llama export its eos
    int eos;                  // HfExported.eos: the encoding's <|endoftext|>, -1 for GPT-2 (its tokenizer files say it)
    int head;                 // the untied head's tensor (its padded rows zero too), -1 when tied
    int (*open)(HfModelReader* r, const char* path);
    int (*load)(HfModelReader* r, const ModelConfig* c, float* values);
    cJSON* (*config_json)(const ModelConfig* c);
    // an element (of tensor `tensor`, at `at` in our layout) made NaN or inf, and the message's fragment
    struct { int tensor; size_t at; float value; const char* frag; } nonfinite[2];
} Family;

static cJSON* llama_config_50256(const ModelConfig* c) { return llama_hf_config_json(c, 50256); }

static Family families[2];

static void families_init(void) {
    ModelConfig g = gpt_tiny(), l = llama_tiny();
    l.vocab_size = 50257;
    l.padded_vocab_size = 50304;
    size_t C = 16, F = 24;
    Family gpt = {"GPT-2", "gpt2", g, "-depth 2", -1, -1, gpt_hf_open, gpt_hf_load, gpt_hf_config_json,
        // c_fc is stored transposed: our (out 5, in 3) of layer 1 is its row 3, column 5
        {{GPT_FCW, 4 * 16 * 16 + 5 * 16 + 3, NAN,
          "tensor \"h.1.mlp.c_fc.weight\": element 197 (row 3, column 5) of 1024 is nan: not finite"},
         {GPT_WTE, 100, -INFINITY, "tensor \"wte.weight\": element 100 (row 6, column 4) of 804112 is -inf: not finite"}}};
    Family llama = {"Llama-style", "llama", l, "-model llama -encoding gpt2", 50256, LLAMA_LM_HEAD, llama_hf_open,
        llama_hf_load, llama_config_50256,
        {{LLAMA_WDOWN, C * F + 2 * F + 7, INFINITY,
          "tensor \"model.layers.1.mlp.down_proj.weight\": element 55 (row 2, column 7) of 384 is inf: not finite"},
         {LLAMA_FINAL_NORM, 3, NAN, "tensor \"model.norm.weight\": element 3 of 16 is nan: not finite"}}};
    families[0] = gpt;
    families[1] = llama;
}

// The first element where a and b differ bitwise, or n when none does.
static size_t first_difference(const float* a, const float* b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) return i;
    return n;
}

// Distinct values (i-dependent, both signs, a -0.0), the padded vocabulary rows zero as the trainer keeps
// them (the embedding's, and an untied head's).
static void family_values(const Family* f, float* v) {
    const ModelConfig* c = &f->config;
    size_t size[MODEL_MAX_TENSORS], off[MODEL_MAX_TENSORS], n = model_tensor_layout(c, size, off);
    for (size_t i = 0; i < n; i++) v[i] = (float)((double)(i % 100003) * 1e-4 + (double)i * 1e-9) * (i % 3 ? 1.0f : -1.0f);
    v[0] = -0.0f;
    size_t C = (size_t)c->channels, V = (size_t)c->vocab_size, pad = (size_t)(c->padded_vocab_size - c->vocab_size);
    memset(v + off[0] + V * C, 0, pad * C * sizeof(float));
    if (f->head >= 0) memset(v + off[f->head] + V * C, 0, pad * C * sizeof(float));
}

// Imports path as family f's model c into out, pre-filled with a NaN pattern (so an element the import
// does not write shows); returns the rc and leaves the message in err.
static int family_import(const Family* f, const char* path, const ModelConfig* c, float* out, char* err, size_t errlen) {
    memset(out, 0xff, model_num_params(c) * sizeof(float));
    HfModelReader r;
    int rc = f->open(&r, path);
    if (rc == 0) rc = f->load(&r, c, out);
    snprintf(err, errlen, "%s", rc ? r.err : "");
    hf_model_close(&r);
    return rc;
}

// dir/<family>/ckpt_00000007.bin: the master weights v of family f's model, m and v other values.
static int write_checkpoint(const Family* f, const char* path, const float* master) {
    const ModelConfig* c = &f->config;
    size_t n = model_num_params(c);
    CheckpointState s;
    memset(&s, 0, sizeof(s));
    s.model = checkpoint_model_of(c);
    s.step = 7;
    snprintf(s.settings, sizeof(s.settings), "%s", f->settings);
    float* mv = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) mv[i] = 1.0f + (float)i;  // m and v: not the master weights
    CheckpointWriter w;
    int rc = checkpoint_writer_open(&w, path, &s);
    if (rc == 0) rc = checkpoint_writer_append(&w, master, n * sizeof(float));
    for (int k = 0; k < 2 && rc == 0; k++) rc = checkpoint_writer_append(&w, mv, n * sizeof(float));
    if (rc == 0) rc = checkpoint_writer_close(&w);
    if (rc != 0) fprintf(stderr, "%s\n", w.err);
    free(mv);
    return rc;
}

// The checks both families share, on family f's model: a checkpoint exported through the checkpoint
// reader (as build/export_hf does) into dir/<family>/hf/d2 (two levels: the export makes both), read
// back bitwise (the import writes every element), config.json's eos_token_id; the export split into 3
// files and an index (dev/test/hf_split.h, as save_pretrained splits a large model) read back bitwise;
// a NaN or an inf among the values refused on load, naming the tensor and the element in the file's
// layout. The export stays for the family's own checks.
static void test_family(const Family* f) {
    printf("%s:\n", f->name);
    const ModelConfig* c = &f->config;
    size_t size[MODEL_MAX_TENSORS], off[MODEL_MAX_TENSORS], n = model_tensor_layout(c, size, off);
    float* v = (float*)malloc_check(n * sizeof(float));
    float* got = (float*)malloc_check(n * sizeof(float));
    family_values(f, v);
    char root[300], ckpt[400], out[400], path[600], err[HF_ERR_LEN];
    snprintf(root, sizeof(root), "%s/%s", dir, f->sub);
    EXPECT(hf_make_dir(root, err, sizeof(err)) == 0, "%s: %s", f->name, err);
    snprintf(ckpt, sizeof(ckpt), "%s/ckpt_00000007.bin", root);
    snprintf(out, sizeof(out), "%s/hf/d2", root);
    EXPECT(write_checkpoint(f, ckpt, v) == 0, "%s: writing the synthetic checkpoint", f->name);

    // export through the checkpoint reader, then import: bitwise the same
    HfExported ex;
    memset(&ex, 0, sizeof(ex));
    int rc = hf_export_checkpoint(ckpt, out, VOCAB_BPE, &ex, err, sizeof(err));
    EXPECT(rc == 0, "%s: export: %s", f->name, err);
    EXPECT(ex.step == 7 && ex.model.family == c->family && ex.model.num_layers == c->num_layers &&
           ex.model.channels == c->channels && ex.model.num_heads == c->num_heads && ex.eos == f->eos,
           "%s: the export's step %lld, family %d, sizes, eos %d", f->name, (long long)ex.step, ex.model.family, ex.eos);
    rc = family_import(f, out, c, got, err, sizeof(err));
    EXPECT(rc == 0, "%s: import: %s", f->name, err);
    size_t diff = rc == 0 ? first_difference(got, v, n) : 0;
    printf("  export -> import: %zu parameters, %s\n", n, diff == n ? "bitwise equal" : "DIFFERENT");
    EXPECT(diff == n, "%s: export -> import differs first at element %zu: %g, expected %g", f->name, diff,
           diff < n ? got[diff] : 0.0f, diff < n ? v[diff] : 0.0f);
    char config_path[700];
    cJSON* j = NULL;
    snprintf(path, sizeof(path), "%s/model.safetensors", out);
    EXPECT(hf_read_config(path, &j, config_path, sizeof(config_path), err, sizeof(err)) == 0 && j, "%s: %s", f->name, err);
    const cJSON* eos = j ? cJSON_GetObjectItemCaseSensitive(j, "eos_token_id") : NULL;
    EXPECT(cJSON_IsNumber(eos) && eos->valuedouble == 50256, "%s: the export's config.json: eos_token_id 50256", f->name);
    cJSON_Delete(j);

    // the export split into 3 files and an index (llmc/io/hf_weights.h): the same values
    char split[400];
    snprintf(split, sizeof(split), "%s/split", root);
    EXPECT(hf_split_model(out, split, 3, err, sizeof(err)) == 0, "%s: split: %s", f->name, err);
    rc = family_import(f, split, c, got, err, sizeof(err));
    diff = rc == 0 ? first_difference(got, v, n) : 0;
    printf("  export split into 3 files -> import: %s\n", rc == 0 && diff == n ? "bitwise equal" : "DIFFERENT");
    EXPECT(rc == 0 && diff == n, "%s: the export split into 3 files: rc %d (%s), first difference at %zu", f->name, rc,
           err, diff);

    // a value that is not finite: opened, then refused on load, naming the tensor and the element
    float* poisoned = (float*)malloc_check(n * sizeof(float));
    for (int k = 0; k < 2; k++) {
        memcpy(poisoned, v, n * sizeof(float));
        poisoned[off[f->nonfinite[k].tensor] + f->nonfinite[k].at] = f->nonfinite[k].value;
        char d[450];
        snprintf(d, sizeof(d), "%s/nonfinite%d", root, k);
        snprintf(path, sizeof(path), "%s/model.safetensors", d);
        EXPECT(hf_make_dir(d, err, sizeof(err)) == 0 && hf_model_write_safetensors(path, c, poisoned, err, sizeof(err)) == 0 &&
               hf_write_json(d, "config.json", f->config_json(c), err, sizeof(err)) == 0, "%s: writing: %s", f->name, err);
        HfModelReader r;
        int orc = f->open(&r, d), lrc = orc == 0 ? f->load(&r, c, got) : 0;
        int ok = orc == 0 && lrc != 0 && strstr(r.err, f->nonfinite[k].frag);
        EXPECT(ok, "%s: a value not finite: open %d, load %d (%s), wanted the load to refuse it with \"%s\"", f->name,
               orc, lrc, r.err, f->nonfinite[k].frag);
        if (ok) printf("  refused, a value not finite: %s\n", r.err);
        hf_model_close(&r);
    }
    free(poisoned);
    free(got);
    free(v);
}


// --- GPT-2's own checks -----------------------------------------------------------------------------

static int files_equal(const char* a, const char* b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb, x = 0, y = 0;
    while (same && (x = fgetc(fa)) == (y = fgetc(fb)) && x != EOF) {}
    same = same && x == y;
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

static cJSON* read_json(const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[1 << 16];
    size_t len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[len] = '\0';
    return cJSON_Parse(buf);
}

static double json_number(const cJSON* j, const char* key) {
    const cJSON* v = cJSON_GetObjectItemCaseSensitive(j, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -12345.0;
}

static const char* json_string(const cJSON* j, const char* key) {
    const cJSON* v = cJSON_GetObjectItemCaseSensitive(j, key);
    return cJSON_IsString(v) ? v->valuestring : "(missing)";
}


// Element [i][j] of tensor `name` (2-D, F32) of a safetensors file.
static float hf_element(SafetensorsReader* r, const char* name, int i, int j) {
    const SafetensorsTensor* t = safetensors_find(r, name);
    if (!t || t->ndim != 2) return NAN;
    float* v = (float*)malloc((size_t)safetensors_numel(t) * sizeof(float));
    float x = safetensors_read_f32(r, t, v) == 0 ? v[(size_t)i * t->shape[1] + j] : NAN;
    free(v);
    return x;
}

static void gpt_check_config(const char* out, const ModelConfig* c) {
    char path[512];
    snprintf(path, sizeof(path), "%s/config.json", out);
    cJSON* j = read_json(path);
    EXPECT(cJSON_IsObject(j), "%s is not a JSON object", path);
    if (!j) return;
    const cJSON* arch = cJSON_GetObjectItemCaseSensitive(j, "architectures");
    const cJSON* a0 = cJSON_GetArrayItem(arch, 0);
    EXPECT(cJSON_GetArraySize(arch) == 1 && cJSON_IsString(a0) && strcmp(a0->valuestring, "GPT2LMHeadModel") == 0,
           "architectures is not [\"GPT2LMHeadModel\"]");
    EXPECT(strcmp(json_string(j, "model_type"), "gpt2") == 0, "model_type %s", json_string(j, "model_type"));
    EXPECT(json_number(j, "vocab_size") == 50257, "vocab_size %g", json_number(j, "vocab_size"));
    EXPECT(json_number(j, "n_positions") == c->max_seq_len, "n_positions %g", json_number(j, "n_positions"));
    EXPECT(json_number(j, "n_embd") == c->channels, "n_embd %g", json_number(j, "n_embd"));
    EXPECT(json_number(j, "n_layer") == c->num_layers, "n_layer %g", json_number(j, "n_layer"));
    EXPECT(json_number(j, "n_head") == c->num_heads, "n_head %g", json_number(j, "n_head"));
    EXPECT(json_number(j, "n_inner") == 4 * c->channels, "n_inner %g", json_number(j, "n_inner"));
    EXPECT(strcmp(json_string(j, "activation_function"), "gelu_new") == 0, "activation_function %s",
           json_string(j, "activation_function"));
    EXPECT(json_number(j, "layer_norm_epsilon") == 1e-5, "layer_norm_epsilon %g", json_number(j, "layer_norm_epsilon"));
    EXPECT(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "tie_word_embeddings")), "tie_word_embeddings not true");
    EXPECT(strcmp(json_string(j, "torch_dtype"), "float32") == 0, "torch_dtype %s", json_string(j, "torch_dtype"));
    EXPECT(json_number(j, "bos_token_id") == 50256 && json_number(j, "eos_token_id") == 50256, "bos/eos token ids");
    EXPECT(json_number(j, "resid_pdrop") == 0 && json_number(j, "embd_pdrop") == 0 && json_number(j, "attn_pdrop") == 0,
           "dropout not 0");
    printf("config.json: GPT2LMHeadModel, n_layer %g, n_embd %g, n_head %g, n_positions %g, %s, eps %g\n",
           json_number(j, "n_layer"), json_number(j, "n_embd"), json_number(j, "n_head"), json_number(j, "n_positions"),
           json_string(j, "activation_function"), json_number(j, "layer_norm_epsilon"));
    cJSON_Delete(j);

    char a[512];
    snprintf(a, sizeof(a), "%s/vocab.json", out);
    EXPECT(files_equal(a, ENCODER_JSON), "%s is not a copy of %s", a, ENCODER_JSON);
    snprintf(a, sizeof(a), "%s/merges.txt", out);
    EXPECT(files_equal(a, VOCAB_BPE), "%s is not a copy of %s", a, VOCAB_BPE);
    const char* names[2] = {"tokenizer_config.json", "special_tokens_map.json"};
    for (int k = 0; k < 2; k++) {
        snprintf(a, sizeof(a), "%s/%s", out, names[k]);
        cJSON* t = read_json(a);
        EXPECT(t && strcmp(json_string(t, "eos_token"), "<|endoftext|>") == 0 &&
               strcmp(json_string(t, "bos_token"), "<|endoftext|>") == 0, "%s: eos/bos not <|endoftext|>", a);
        if (k == 0) EXPECT(t && strcmp(json_string(t, "tokenizer_class"), "GPT2Tokenizer") == 0, "%s: tokenizer_class", a);
        cJSON_Delete(t);
    }
}

static void gpt_check_layout(const char* out, const ModelConfig* c, const float* v) {
    char path[512];
    snprintf(path, sizeof(path), "%s/model.safetensors", out);
    SafetensorsReader r;
    int rc = safetensors_open(&r, path);
    EXPECT(rc == 0, "%s", r.err);
    if (rc != 0) return;
    size_t off[MODEL_MAX_TENSORS];
    num_params(c, off);
    int C = c->channels, L = c->num_layers;
    EXPECT(r.num_tensors == 4 + 12 * L, "%d tensors, expected %d", r.num_tensors, 4 + 12 * L);
    EXPECT(!safetensors_find(&r, "lm_head.weight"), "lm_head.weight is stored (it is tied)");
    const char* fmt = safetensors_metadata(&r, "format");
    EXPECT(fmt && strcmp(fmt, "pt") == 0, "metadata format %s", fmt ? fmt : "(none)");
    const struct { const char* name; int64_t r, c; } shapes[] = {
        {"wte.weight", 50257, C}, {"wpe.weight", c->max_seq_len, C}, {"h.1.attn.c_attn.weight", C, 3 * C},
        {"h.1.attn.c_proj.weight", C, C}, {"h.1.mlp.c_fc.weight", C, 4 * C}, {"h.1.mlp.c_proj.weight", 4 * C, C}};
    for (int k = 0; k < 6; k++) {
        const SafetensorsTensor* t = safetensors_find(&r, shapes[k].name);
        EXPECT(t && t->dtype == ST_F32 && t->ndim == 2 && t->shape[0] == shapes[k].r && t->shape[1] == shapes[k].c,
               "%s: not F32 (%lld, %lld)", shapes[k].name, (long long)shapes[k].r, (long long)shapes[k].c);
    }
    const SafetensorsTensor* b = safetensors_find(&r, "h.1.mlp.c_fc.bias");
    EXPECT(b && b->ndim == 1 && b->shape[0] == 4 * C, "h.1.mlp.c_fc.bias: not (4C,)");
    // the transposes: ours (out, in) at [o][i] is HF's [i][o], layer 1
    const struct { const char* name; int tensor, out_dim, in_dim, o, i; } known[] = {
        {"h.1.attn.c_attn.weight", GPT_QKVW, 3 * C, C, 2 * C + 5, 3},  // a value row: v, channel 5
        {"h.1.attn.c_proj.weight", GPT_ATTPROJW, C, C, 1, 14},
        {"h.1.mlp.c_fc.weight", GPT_FCW, 4 * C, C, 61, 2},
        {"h.1.mlp.c_proj.weight", GPT_FCPROJW, C, 4 * C, 5, 40}};
    for (int k = 0; k < 4; k++) {
        size_t at = off[known[k].tensor] + (size_t)1 * known[k].out_dim * known[k].in_dim +
                    (size_t)known[k].o * known[k].in_dim + known[k].i;
        float got = hf_element(&r, known[k].name, known[k].i, known[k].o);
        printf("transpose: %s[%d][%d] = %.9g, ours [layer 1][%d][%d] = %.9g\n", known[k].name, known[k].i, known[k].o,
               got, known[k].o, known[k].i, v[at]);
        EXPECT(got == v[at], "%s[%d][%d] = %g, expected ours[1][%d][%d] = %g", known[k].name, known[k].i, known[k].o,
               got, known[k].o, known[k].i, v[at]);
    }
    EXPECT(hf_element(&r, "wte.weight", 50256, 7) == v[off[GPT_WTE] + 50256 * C + 7], "wte.weight[50256][7]");
    EXPECT(hf_element(&r, "wpe.weight", 31, 15) == v[off[GPT_WPE] + 31 * C + 15], "wpe.weight[31][15]");
    const SafetensorsTensor* lb = safetensors_find(&r, "h.1.ln_2.bias");
    float bias[16];
    EXPECT(lb && safetensors_read_f32(&r, lb, bias) == 0 && bias[9] == v[off[GPT_LN2B] + C + 9], "h.1.ln_2.bias[9]");
    safetensors_close(&r);
}

// A variant of model.safetensors: every tensor as `dtype` (F32, BF16 or F16, rounded to nearest even),
// names with `prefix`, tensor `skip` left out, `wrong` written untransposed (shape swapped), `extra` added
// (a copy of ln_f.bias under that name), `lm_head` 1: a tied head, 2: an untied one, 3: the tied one
// stored (n_embd, vocab); attn_bias 1: the causal-mask buffers of older files.
typedef struct {
    SafetensorsDtype dtype;
    const char* prefix;
    const char *skip, *wrong, *extra, *wrong_dtype;
    int lm_head, attn_bias;
} Variant;

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

static uint16_t to_f16(float f) {  // the values here are normal fp16 numbers or zero
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u, e = (u >> 23) & 0xff, m = u & 0x7fffff;
    if (e < 113) return (uint16_t)sign;  // tiny: flush (only -0.0 and 0 here)
    uint32_t h = ((e - 112) << 10) | (m >> 13), rest = m & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

static int write_variant(const char* path, const ModelConfig* c, const float* v, const Variant* o) {
    int n = hf_model_num_tensors(c), total = 0;
    if (n < 1) return -1;
    HfTensor* hf = (HfTensor*)calloc((size_t)n, sizeof(HfTensor));
    hf_model_tensors(hf, c);
    SafetensorsTensor* st = (SafetensorsTensor*)calloc((size_t)n + 4 + (size_t)c->num_layers, sizeof(SafetensorsTensor));
    const float** src = (const float**)calloc((size_t)n + 4 + (size_t)c->num_layers, sizeof(float*));
    int* transpose = (int*)calloc((size_t)n + 4 + (size_t)c->num_layers, sizeof(int));
    char name[128];
    for (int k = 0; k < n; k++) {
        if (o->skip && strcmp(hf[k].name, o->skip) == 0) continue;
        snprintf(name, sizeof(name), "%s%s", o->prefix ? o->prefix : "", hf[k].name);
        int64_t shape[2] = {hf[k].shape[0], hf[k].shape[1]};
        int wrong = o->wrong && strcmp(hf[k].name, o->wrong) == 0;
        if (wrong) { shape[0] = hf[k].shape[1]; shape[1] = hf[k].shape[0]; }
        SafetensorsDtype d = o->wrong_dtype && strcmp(hf[k].name, o->wrong_dtype) == 0 ? ST_I32 : o->dtype;
        safetensors_tensor(&st[total], name, d, hf[k].ndim, shape);
        src[total] = v + hf[k].offset;
        transpose[total] = hf[k].transpose && !wrong ? k : -1;
        total++;
    }
    size_t off[MODEL_MAX_TENSORS];
    num_params(c, off);
    int64_t cshape[1] = {c->channels}, wshape[2] = {c->vocab_size, c->channels}, mshape[4] = {1, 1, c->max_seq_len, c->max_seq_len};
    int64_t swapped[2] = {c->channels, c->vocab_size};
    float* mask = (float*)calloc((size_t)c->max_seq_len * c->max_seq_len, sizeof(float));
    float* untied = (float*)malloc((size_t)c->vocab_size * c->channels * sizeof(float));
    memcpy(untied, v, (size_t)c->vocab_size * c->channels * sizeof(float));
    untied[12345] += 1.0f;
    if (o->extra) { safetensors_tensor(&st[total], o->extra, o->dtype, 1, cshape); src[total] = v + off[GPT_LNFB]; transpose[total++] = -1; }
    if (o->lm_head) { safetensors_tensor(&st[total], "lm_head.weight", o->dtype, 2, o->lm_head == 3 ? swapped : wshape); src[total] = o->lm_head == 2 ? untied : v; transpose[total++] = -1; }
    for (int l = 0; o->attn_bias && l < c->num_layers; l++) {
        snprintf(name, sizeof(name), "%sh.%d.attn.bias", o->prefix ? o->prefix : "", l);
        safetensors_tensor(&st[total], name, o->dtype, 4, mshape);
        src[total] = mask;
        transpose[total++] = -1;
    }
    SafetensorsWriter w;
    int rc = safetensors_writer_open(&w, path, st, total, NULL);
    size_t cap = (size_t)c->vocab_size * c->channels;
    float* tmp = (float*)malloc(cap * sizeof(float));
    uint16_t* h = (uint16_t*)malloc(cap * sizeof(uint16_t));
    for (int i = 0; i < total && rc == 0; i++) {
        size_t count = (size_t)safetensors_numel(&st[i]);
        const float* s = src[i];
        if (transpose[i] >= 0) { hf_transpose(tmp, s, hf[transpose[i]].shape[1], hf[transpose[i]].shape[0]); s = tmp; }
        if (st[i].dtype == ST_F32 || st[i].dtype == ST_I32) { rc = safetensors_writer_append(&w, s, count * 4); continue; }
        for (size_t j = 0; j < count; j++) h[j] = st[i].dtype == ST_BF16 ? to_bf16(s[j]) : to_f16(s[j]);
        rc = safetensors_writer_append(&w, h, count * 2);
    }
    if (rc == 0) rc = safetensors_writer_close(&w);
    if (rc != 0) fprintf(stderr, "%s\n", w.err);
    free(h); free(tmp); free(untied); free(mask); free(transpose); free(src); free(st); free(hf);
    return rc;
}

// Imports path into a buffer pre-filled with a NaN pattern; returns the rc and leaves the message in err.
static int gpt_import(const char* path, const ModelConfig* c, float* out, size_t n, char* err, size_t errlen) {
    memset(out, 0xff, n * sizeof(float));
    GptHfReader r;
    int rc = gpt_hf_open(&r, path);
    if (rc == 0) rc = gpt_hf_load(&r, c, out);
    snprintf(err, errlen, "%s", rc ? r.err : "");
    hf_model_close(&r);
    return rc;
}

static void gpt_expect_import_error(const char* what, const char* path, const ModelConfig* c, float* out, size_t n,
                                const char* frag1, const char* frag2) {
    char err[HF_ERR_LEN];
    int rc = gpt_import(path, c, out, n, err, sizeof(err));
    int ok = rc != 0 && strstr(err, frag1) && (!frag2 || strstr(err, frag2));
    EXPECT(ok, "%s: rc %d, message \"%s\" (wanted \"%s\" and \"%s\")", what, rc, err, frag1, frag2 ? frag2 : "");
    if (ok) printf("  refused, %s: %s\n", what, err);
}

// --- the export's directory ----------------------------------------------------------------------------

// The names in directory path, sorted, space-separated, into out ("" when empty; "(absent)" when it
// does not exist).
static void dir_listing(char* out, size_t n, const char* path) {
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "test -d '%s' && ls -A '%s' | sort | tr '\\n' ' ' || printf '(absent)'", path, path);
    FILE* p = popen(cmd, "r");
    size_t got = p ? fread(out, 1, n - 1, p) : 0;
    out[got] = '\0';
    if (p) pclose(p);
    if (got > 0 && out[got - 1] == ' ') out[got - 1] = '\0';
}

static void write_text_file(const char* dir, const char* name, const char* text) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE* f = fopen_check(path, "wb");
    fputs(text, f);
    fclose_check(f);
}

// An export replaces an earlier one in its directory whole (none of the other family's files stay), is
// refused where the directory holds anything else, and a failed one leaves nothing: neither the
// directory, nor the parents it made, nor its temporary directory.
static void test_export_dir(const ModelConfig* c, const float* v) {
    printf("the export's directory:\n");
    char root[300], d[400], got[2048], err[HF_ERR_LEN];
    snprintf(root, sizeof(root), "%s/exports", dir);
    EXPECT(hf_make_dir(root, err, sizeof(err)) == 0, "%s", err);
    ModelConfig l = model_config_llama_sizes(50, 64, 16, 1, 16, 4, 2, 24, 10000.0, 1e-6);
    float* lv = (float*)calloc(model_num_params(&l), sizeof(float));
    // GPT-2's export, then a Llama-style one in the same directory, then GPT-2's again
    snprintf(d, sizeof(d), "%s/both", root);
    EXPECT(hf_model_export(d, c, v, VOCAB_BPE, -1, err, sizeof(err)) == 0, "GPT-2 export: %s", err);
    dir_listing(got, sizeof(got), d);
    EXPECT(!strcmp(got, "config.json merges.txt model.safetensors special_tokens_map.json tokenizer_config.json vocab.json"),
           "GPT-2's export holds: %s", got);
    EXPECT(hf_model_export(d, &l, lv, NULL, 49, err, sizeof(err)) == 0, "Llama-style export over GPT-2's: %s", err);
    dir_listing(got, sizeof(got), d);
    printf("  a Llama-style export over GPT-2's leaves: %s\n", got);
    EXPECT(!strcmp(got, "config.json model.safetensors"), "a Llama-style export over GPT-2's leaves: %s", got);
    EXPECT(hf_model_export(d, c, v, VOCAB_BPE, -1, err, sizeof(err)) == 0, "GPT-2 export over a Llama-style one: %s", err);
    dir_listing(got, sizeof(got), d);
    EXPECT(strstr(got, "vocab.json") != NULL, "GPT-2's export over a Llama-style one: %s", got);
    dir_listing(got, sizeof(got), root);
    EXPECT(!strcmp(got, "both"), "the exports left beside their directory: %s", got);
    // through a link to an earlier export: the directory it names is replaced, the link stays
    char link[450];
    snprintf(link, sizeof(link), "%s/link", root);
    EXPECT(symlink("both", link) == 0, "symlink %s", link);
    EXPECT(hf_model_export(link, &l, lv, NULL, 49, err, sizeof(err)) == 0, "export through a link: %s", err);
    dir_listing(got, sizeof(got), d);
    struct stat st;
    EXPECT(!strcmp(got, "config.json model.safetensors") && lstat(link, &st) == 0 && S_ISLNK(st.st_mode),
           "an export through a link to an earlier one: %s holds %s", d, got);
    unlink(link);
    // a directory holding something an export does not write: refused, untouched
    snprintf(d, sizeof(d), "%s/notes", root);
    EXPECT(hf_make_dir(d, err, sizeof(err)) == 0, "%s", err);
    write_text_file(d, "notes.txt", "mine\n");
    int rc = hf_model_export(d, &l, lv, NULL, 49, err, sizeof(err));
    dir_listing(got, sizeof(got), d);
    printf("  refused, a directory holding notes.txt: %s\n", err);
    EXPECT(rc != 0 && strstr(err, "holds notes.txt, which no export writes") && !strcmp(got, "notes.txt"),
           "an export into a directory holding notes.txt: rc %d (%s), it holds %s", rc, err, got);
    // an export that fails partway (vocab.bpe a directory: encoder.json is copied, then merges.txt fails):
    // nothing left, nor the two parents it made
    char vocab_dir[450], bpe[500], enc[500];
    snprintf(vocab_dir, sizeof(vocab_dir), "%s/vocab", root);
    snprintf(bpe, sizeof(bpe), "%s/vocab.bpe", vocab_dir);
    snprintf(enc, sizeof(enc), "%s/encoder.json", vocab_dir);
    EXPECT(hf_make_dir(bpe, err, sizeof(err)) == 0 && hf_copy_file(ENCODER_JSON, enc, "", err, sizeof(err)) == 0, "%s", err);
    snprintf(d, sizeof(d), "%s/new/a/b", root);
    rc = hf_model_export(d, c, v, bpe, -1, err, sizeof(err));
    printf("  a failed export (%s): %s\n", err, rc ? "refused" : "ACCEPTED");
    snprintf(d, sizeof(d), "%s/new", root);
    dir_listing(got, sizeof(got), d);
    EXPECT(rc != 0 && !strcmp(got, "(absent)"), "a failed export left %s: %s", d, got);
    // a missing tokenizer file, and a directory that cannot be made: refused before anything is written
    snprintf(d, sizeof(d), "%s/new/c", root);
    rc = hf_model_export(d, c, v, "no/such/vocab.bpe", -1, err, sizeof(err));
    snprintf(d, sizeof(d), "%s/new", root);
    dir_listing(got, sizeof(got), d);
    EXPECT(rc != 0 && strstr(err, "cannot read no/such/vocab.bpe") && !strcmp(got, "(absent)"),
           "an export without its tokenizer files: rc %d (%s), %s: %s", rc, err, d, got);
    char file_dir[450];
    snprintf(file_dir, sizeof(file_dir), "%s/notes/notes.txt/hf", root);
    rc = hf_model_export(file_dir, &l, lv, NULL, 49, err, sizeof(err));
    EXPECT(rc != 0 && strstr(err, "notes.txt"), "an export under a file: rc %d (%s)", rc, err);
    dir_listing(got, sizeof(got), root);
    EXPECT(!strcmp(got, "both notes vocab"), "the failed exports left in %s: %s", root, got);
    free(lv);
}

// The first element where a and b differ bitwise, or n when none does.

// GPT-2's own checks, on the export that test_family left in dir/gpt2/hf/d2.
static void test_gpt2(const Family* f) {
    printf("GPT-2's own:\n");
    ModelConfig c = f->config;
    size_t n = model_num_params(&c);
    float* v = (float*)malloc_check(n * sizeof(float));
    float* got = (float*)malloc_check(n * sizeof(float));
    family_values(f, v);
    char out[400], path[600], err[HF_ERR_LEN];
    int rc;
    size_t diff;
    snprintf(out, sizeof(out), "%s/%s/hf/d2", dir, f->sub);
    gpt_check_config(out, &c);
    gpt_check_layout(out, &c, v);

    // import variants that must load
    const struct { const char* what; Variant o; } good[] = {
        {"BF16", {ST_BF16, NULL, NULL, NULL, NULL, NULL, 0, 0}},
        {"F16", {ST_F16, NULL, NULL, NULL, NULL, NULL, 0, 0}},
        {"transformer. prefix, attn.bias buffers, tied lm_head", {ST_F32, "transformer.", NULL, NULL, NULL, NULL, 1, 1}}};
    snprintf(path, sizeof(path), "%s/variant.safetensors", dir);
    for (int k = 0; k < 3; k++) {
        EXPECT(write_variant(path, &c, v, &good[k].o) == 0, "writing variant %s", good[k].what);
        rc = gpt_import(path, &c, got, n, err, sizeof(err));
        EXPECT(rc == 0, "import of %s: %s", good[k].what, err);
        size_t bad = n;
        for (size_t i = 0; i < n && bad == n && rc == 0; i++) {
            float want = v[i];
            if (good[k].o.dtype == ST_BF16) want = safetensors_bf16_to_f32(to_bf16(v[i]));
            if (good[k].o.dtype == ST_F16) want = safetensors_f16_to_f32(to_f16(v[i]));
            if (memcmp(&got[i], &want, 4) != 0) bad = i;
        }
        printf("import of %s: %s\n", good[k].what, rc == 0 && bad == n ? "loads, exact" : "WRONG");
        EXPECT(rc == 0 && bad == n, "import of %s differs at %zu", good[k].what, bad);
    }

    // import errors
    printf("import errors:\n");
    const struct { const char* what; Variant o; const char *frag1, *frag2; } bad[] = {
        {"missing tensor", {ST_F32, NULL, "h.1.mlp.c_fc.bias", NULL, NULL, NULL, 0, 0}, "no tensor \"h.1.mlp.c_fc.bias\"", NULL},
        {"untransposed weight", {ST_F32, NULL, NULL, "h.0.attn.c_attn.weight", NULL, NULL, 0, 0},
         "tensor \"h.0.attn.c_attn.weight\": shape (48, 16), expected (16, 48)", "Conv1D"},
        {"wrong dtype", {ST_F32, NULL, NULL, NULL, NULL, "ln_f.bias", 0, 0}, "tensor \"ln_f.bias\": dtype I32", NULL},
        {"unknown tensor", {ST_F32, NULL, NULL, NULL, "h.0.attn.q_proj.weight", NULL, 0, 0},
         "tensor \"h.0.attn.q_proj.weight\": not part of GPT-2", NULL},
        {"lm_head of another shape", {ST_F32, NULL, NULL, NULL, NULL, NULL, 3, 0},
         "tensor \"lm_head.weight\": shape (16, 50257), expected (50257, 16)", "equal to wte.weight"},
        {"untied lm_head", {ST_F32, NULL, NULL, NULL, NULL, NULL, 2, 0}, "\"lm_head.weight\" differs from wte.weight", NULL}};
    for (int k = 0; k < 6; k++) {
        EXPECT(write_variant(path, &c, v, &bad[k].o) == 0, "writing variant %s", bad[k].what);
        gpt_expect_import_error(bad[k].what, path, &c, got, n, bad[k].frag1, bad[k].frag2);
        if (k < 5) {  // all but the head's values are refused by gpt_hf_open (train_gpt: before the GPU starts)
            GptHfReader r;
            int orc = gpt_hf_open(&r, path);
            EXPECT(orc != 0, "%s: refused by gpt_hf_open, before any value is read", bad[k].what);
            if (orc == 0) hf_model_close(&r);
        }
    }
    ModelConfig deeper = c;
    deeper.num_layers = 3;
    gpt_expect_import_error("another depth", out, &deeper, got, n, "a model of 2 layers and 16 channels", "3 layers");
    // a config.json beside the weights with settings that change the math
    snprintf(path, sizeof(path), "%s/config.json", out);
    cJSON* j = gpt_hf_config_json(&c);
    cJSON_ReplaceItemInObject(j, "n_head", cJSON_CreateNumber(4));
    EXPECT(hf_write_json(out, "config.json", j, err, sizeof(err)) == 0, "%s", err);
    gpt_expect_import_error("config.json n_head", out, &c, got, n, "n_head 4", "2 heads");
    j = gpt_hf_config_json(&c);
    cJSON_ReplaceItemInObject(j, "activation_function", cJSON_CreateString("relu"));
    EXPECT(hf_write_json(out, "config.json", j, err, sizeof(err)) == 0, "%s", err);
    gpt_expect_import_error("config.json activation", out, &c, got, n, "activation_function \"relu\"", NULL);
    // n_head too large for an int (and for the model): refused by gpt_hf_open, before it is converted
    const char* heads[3] = {"1e300", "17", "\"2\""};
    const char* heads_said[3] = {"n_head 1e+300, expected an integer in [1, 16] (n_embd)",
                                 "n_head 17, expected an integer in [1, 16] (n_embd)", "n_head, which is not a number"};
    for (int k = 0; k < 3; k++) {
        j = gpt_hf_config_json(&c);
        cJSON_ReplaceItemInObject(j, "n_head", cJSON_Parse(heads[k]));
        EXPECT(hf_write_json(out, "config.json", j, err, sizeof(err)) == 0, "%s", err);
        GptHfReader r;
        rc = gpt_hf_open(&r, out);
        EXPECT(rc != 0 && strstr(r.err, heads_said[k]), "config.json n_head %s: %s, expected \"%s\"", heads[k],
               rc ? r.err : "opened", heads_said[k]);
        if (rc == 0) hf_model_close(&r);
        else printf("  refused, config.json n_head %s: %s\n", heads[k], r.err);
    }
    EXPECT(hf_write_json(out, "config.json", gpt_hf_config_json(&c), err, sizeof(err)) == 0, "%s", err);
    // no h.0.ln_1.weight: no layer found, and the message names the tensor, not a range h.0 ... h.-1
    Variant no_layer = {ST_F32, NULL, "h.0.ln_1.weight", NULL, NULL, NULL, 0, 0};
    snprintf(path, sizeof(path), "%s/variant.safetensors", dir);
    EXPECT(write_variant(path, &c, v, &no_layer) == 0, "writing the file without h.0.ln_1.weight");
    {
        GptHfReader r;
        rc = gpt_hf_open(&r, path);
        EXPECT(rc != 0 && strstr(r.err, "no tensor \"h.0.ln_1.weight\": a GPT-2 has at least one layer") &&
               !strstr(r.err, "h.-1"), "a file without h.0.ln_1.weight: %s", rc ? r.err : "opened");
        if (rc == 0) hf_model_close(&r);
        else printf("  refused, no layer 0: %s\n", r.err);
    }
    snprintf(path, sizeof(path), "%s/nothing", dir);
    gpt_expect_import_error("no such file", path, &c, got, n, "cannot open", NULL);


    // a vocabulary smaller than 4 C (V = 4, C = 4): the transposed c_fc and c_proj (4C x C) are larger
    // than wte, and the import transposes them through its scratch
    ModelConfig small = model_config_gpt2_sizes(4, 4, 4, 1, 1, 4);  // maxT, V, Vp, L, NH, C
    size_t small_off[MODEL_MAX_TENSORS], sn = num_params(&small, small_off);
    float* sv = (float*)malloc_check(sn * sizeof(float));
    float* sgot = (float*)malloc_check(sn * sizeof(float));
    for (size_t i = 0; i < sn; i++) sv[i] = (float)i + 0.5f;
    snprintf(path, sizeof(path), "%s/small.safetensors", dir);
    EXPECT(hf_model_write_safetensors(path, &small, sv, err, sizeof(err)) == 0, "writing the V = 4 model: %s", err);
    rc = gpt_import(path, &small, sgot, sn, err, sizeof(err));
    diff = rc == 0 ? first_difference(sgot, sv, sn) : sn;
    printf("V = 4, C = 4 (4C x C weights larger than wte): %s\n", rc == 0 && diff == sn ? "read back bitwise" : "WRONG");
    EXPECT(rc == 0 && diff == sn, "the V = 4, C = 4 model: rc %d (%s), first difference at %zu of %zu", rc, err, diff, sn);
    free(sgot);
    free(sv);

    test_export_dir(&c, v);
    free(got);
    free(v);
}

// --- the Llama-style model's own checks ------------------------------------------------------------

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
static void llama_write_model(const char* dir, const ModelConfig* c, const float* values, const char* drop,
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
static int llama_load(LlamaHfReader* r, const char* dir, const ModelConfig* c, float* out) {
    if (llama_hf_open(r, dir) != 0) return -2;
    return llama_hf_load(r, c, out);
}

// open (-2 when it fails) then load (-1) refuse dir with the message fragment; `at` says which must
static void llama_expect_import_error(const char* dir, const ModelConfig* c, float* out, int at, const char* frag,
                                const char* what) {
    LlamaHfReader r;
    int rc = llama_load(&r, dir, c, out);
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

static void llama_test_import(const char* dir, const ModelConfig* c, const float* values) {
    size_t n = model_num_params(c);
    float* out = (float*)malloc_check(n * sizeof(float));
    char path[512], sub[512];
    LlamaHfReader r;
    // the export read back, as a directory and as the file
    snprintf(path, sizeof(path), "%s/out", dir);
    for (size_t i = 0; i < n; i++) out[i] = NAN;
    int rc = llama_load(&r, path, c, out);
    EXPECT(rc == 0, "import of the export: %s", r.err);
    const ModelConfig* f = &r.config;
    EXPECT(f->num_layers == c->num_layers && f->channels == c->channels && f->num_heads == c->num_heads &&
           f->num_kv_heads == c->num_kv_heads && f->ffn_hidden == c->ffn_hidden && f->vocab_size == c->vocab_size &&
           f->rope_theta == c->rope_theta && f->norm_eps == c->norm_eps, "the sizes read from config.json");
    EXPECT(rc == 0 && same_as_values(c, values, out, 0), "the export read back is our parameters bitwise");
    snprintf(path, sizeof(path), "%s/out/model.safetensors", dir);
    EXPECT(llama_load(&r, path, c, out) == 0 && same_as_values(c, values, out, 0), "the file read back: %s", r.err);

    // another model: its sizes, RoPE base or eps
    snprintf(path, sizeof(path), "%s/out", dir);
    ModelConfig o = *c;
    o.num_kv_heads = 4;
    llama_expect_import_error(path, &o, out, -1, "this run's has 2 layers, 16 channels, 4 heads (4 key/value)", "other kv heads");
    o = *c;
    o.rope_theta = 500000;
    llama_expect_import_error(path, &o, out, -1, "rope_theta 10000 and rms_norm_eps 1e-06, this run's are 500000",
                        "other RoPE base");

    // config.json: absent, and each setting this program cannot compute
    snprintf(sub, sizeof(sub), "%s/noconfig", dir);
    llama_write_model(sub, c, values, NULL, NULL, 0, 0, NULL);
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
        llama_write_model(sub, c, values, NULL, NULL, 0, 0, config_with(c, bad[i].key, bad[i].json));
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
        llama_write_model(sub, &t5, values, NULL, NULL, 0, 0, j);
        if (rp[i].frag) {
            expect_open_error(sub, rp[i].frag, "rope_parameters");
        } else {
            rc = llama_load(&r, sub, &t5, out);
            EXPECT(rc == 0 && r.config.rope_theta == 500000.0 && same_as_values(&t5, values, out, 0),
                   "rope_parameters %zu: rope_theta %g, expected 500000 (%s)", i, r.config.rope_theta, r.err);
        }
    }

    // rope_scaling asking for plain RoPE is plain RoPE
    snprintf(sub, sizeof(sub), "%s/rope_scaling_default", dir);
    llama_write_model(sub, c, values, NULL, NULL, 0, 0, config_with(c, "rope_scaling", "{\"rope_type\": \"default\"}"));
    EXPECT(llama_load(&r, sub, c, out) == 0 && same_as_values(c, values, out, 0), "rope_scaling {rope_type: default}: %s",
           r.err);
    // num_key_value_heads absent: as many as the heads (transformers' default), so k_proj's shape is wrong
    snprintf(sub, sizeof(sub), "%s/nokv", dir);
    llama_write_model(sub, c, values, NULL, NULL, 0, 0, config_with(c, "num_key_value_heads", NULL));
    llama_expect_import_error(sub, c, out, -2, "\"model.layers.0.self_attn.k_proj.weight\": shape (8, 16), config.json's "
                        "sizes give (16, 16)", "no num_key_value_heads: as many as the heads");

    // the tensors: one missing, one unknown, one misshapen, an old buffer
    snprintf(sub, sizeof(sub), "%s/missing", dir);
    llama_write_model(sub, c, values, "model.layers.1.mlp.up_proj.weight", NULL, 0, 0, llama_hf_config_json(c, 49));
    llama_expect_import_error(sub, c, out, -2, "no tensor \"model.layers.1.mlp.up_proj.weight\"", "a missing tensor");
    snprintf(sub, sizeof(sub), "%s/unknown", dir);
    llama_write_model(sub, c, values, NULL, "model.layers.0.self_attn.q_norm.weight", 0, 0, llama_hf_config_json(c, 49));
    llama_expect_import_error(sub, c, out, -2, "tensor \"model.layers.0.self_attn.q_norm.weight\": not part of",
                        "an unknown tensor");
    snprintf(sub, sizeof(sub), "%s/shape", dir);
    llama_write_model(sub, c, values, NULL, NULL, 1, 0, llama_hf_config_json(c, 49));
    llama_expect_import_error(sub, c, out, -2, "\"model.layers.0.self_attn.k_proj.weight\": shape (16, 8), config.json's "
                        "sizes give (8, 16)", "a transposed tensor");
    snprintf(sub, sizeof(sub), "%s/inv_freq", dir);
    llama_write_model(sub, c, values, NULL, "model.layers.1.self_attn.rotary_emb.inv_freq", 0, 0, llama_hf_config_json(c, 49));
    EXPECT(llama_load(&r, sub, c, out) == 0 && same_as_values(c, values, out, 0), "rotary_emb.inv_freq ignored: %s", r.err);

    // the head: tied (no lm_head.weight) starts as embed's copy; left out untied, it is missing
    snprintf(sub, sizeof(sub), "%s/tied", dir);
    llama_write_model(sub, c, values, "lm_head.weight", NULL, 0, 0, config_with(c, "tie_word_embeddings", "true"));
    EXPECT(llama_load(&r, sub, c, out) == 0 && same_as_values(c, values, out, 1), "a tied head is embed's copy: %s", r.err);
    snprintf(sub, sizeof(sub), "%s/nohead", dir);
    llama_write_model(sub, c, values, "lm_head.weight", NULL, 0, 0, llama_hf_config_json(c, 49));
    llama_expect_import_error(sub, c, out, -2, "no tensor \"lm_head.weight\"", "an untied model without its head");
    // tied, with lm_head.weight too: it must be the embedding
    snprintf(sub, sizeof(sub), "%s/tied_equal", dir);
    llama_write_model(sub, c, values, NULL, NULL, 0, 1, config_with(c, "tie_word_embeddings", "true"));
    EXPECT(llama_load(&r, sub, c, out) == 0 && same_as_values(c, values, out, 1), "a tied head given equal: %s", r.err);
    snprintf(sub, sizeof(sub), "%s/tied_differs", dir);
    llama_write_model(sub, c, values, NULL, NULL, 0, 0, config_with(c, "tie_word_embeddings", "true"));
    llama_expect_import_error(sub, c, out, -1, "\"lm_head.weight\" differs from model.embed_tokens.weight, and config.json "
                        "has tie_word_embeddings true", "a tied head given different");

    free(out);
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


// The Llama-style model's own checks, in dir/llama.
static void test_llama(void) {
    ModelConfig c = llama_tiny();
    size_t n = model_num_params(&c);
    float* values = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) values[i] = (float)i;  // exact below 2^24
    char ldir[280], err[HF_ERR_LEN], path[400];
    snprintf(ldir, sizeof(ldir), "%s/llama", dir);
    EXPECT(hf_make_dir(ldir, err, sizeof(err)) == 0, "%s", err);
    snprintf(path, sizeof(path), "%s/out", ldir);
    EXPECT(hf_model_export(path, &c, values, NULL, 49, err, sizeof(err)) == 0, "export: %s", err);

    SafetensorsReader r;
    snprintf(path, sizeof(path), "%s/out/model.safetensors", ldir);
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
    llama_test_import(ldir, &c, values);
    test_size_names();
    test_qkv_dim();
    free(values);
}

int main(void) {
    snprintf(dir, sizeof(dir), "%s/test_hf_model.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    if (access(VOCAB_BPE, R_OK) != 0 || access(ENCODER_JSON, R_OK) != 0) {
        fprintf(stderr, "FAIL: %s or %s missing: run `make data` (make test does)\n", VOCAB_BPE, ENCODER_JSON);
        return 1;
    }
    families_init();
    for (int k = 0; k < 2; k++) test_family(&families[k]);
    test_gpt2(&families[0]);
    test_llama();
    test_remove_dir(dir);
    return test_summary("test_hf_model");
}
