// test_gpt_hf.c: CPU tests of the export to and the import from Hugging Face's GPT-2 layout
// (llmc/io/hf_model.h, llmc/io/hf_model_import.h), on a synthetic checkpoint (L=2, C=16, NH=2, V=50257 padded to
// 50304, context 32) in a temporary directory. Every parameter has its own value, so a misplaced element
// shows.
// Checks:
//   - export (through the checkpoint reader, as build/export_hf does) then import gives back bitwise the
//     same weights, padded vocabulary rows zero; the import writes every element; the same export split
//     into 3 files and an index (dev/test/hf_split.h, as save_pretrained splits a large model) too
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
//   - a NaN or an inf among the values: refused on load, naming the tensor and the element
//   - the export's directory: a Llama-style export over GPT-2's (and the reverse, and through a link)
//     leaves only its own files; a directory holding another file is refused untouched; an export that
//     fails partway, or at its start (no tokenizer files, a file in the path), leaves nothing behind
//   - a model whose vocabulary is smaller than 4 C, read back bitwise (the transposes' scratch holds the
//     largest tensor; ASan checks it)
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../../llmc/io/hf_model_import.h"
#include "../../llmc/io/hf_checkpoint.h"
#include "hf_split.h"
#include "testing.h"

#define VOCAB_BPE "data/gpt2/vocab.bpe"
#define ENCODER_JSON "data/gpt2/encoder.json"

static char dir[256];

// GPT-2's tensors in llm.c's order (llmc/model/spec.h's table), written out here
enum {
    GPT_WTE, GPT_WPE, GPT_LN1W, GPT_LN1B, GPT_QKVW, GPT_QKVB, GPT_ATTPROJW, GPT_ATTPROJB, GPT_LN2W, GPT_LN2B,
    GPT_FCW, GPT_FCB, GPT_FCPROJW, GPT_FCPROJB, GPT_LNFW, GPT_LNFB, GPT_NUM_TENSORS
};

static ModelConfig tiny_config(void) { return model_config_gpt2_sizes(32, 50257, 50304, 2, 2, 16); }

static size_t num_params(const ModelConfig* c, size_t off[MODEL_MAX_TENSORS]) {
    size_t size[MODEL_MAX_TENSORS];
    return model_tensor_layout(c, size, off);
}

// Distinct values (i-dependent, both signs, a -0.0), wte's padded rows zero as the trainer keeps them.
static void synthetic_values(float* v, size_t n, const ModelConfig* c) {
    for (size_t i = 0; i < n; i++) v[i] = (float)((double)(i % 100003) * 1e-4 + (double)i * 1e-9) * (i % 3 ? 1.0f : -1.0f);
    v[0] = -0.0f;
    memset(v + (size_t)c->vocab_size * c->channels, 0,
           (size_t)(c->padded_vocab_size - c->vocab_size) * c->channels * sizeof(float));
}

static int write_checkpoint(const char* path, const ModelConfig* c, const float* master, size_t n) {
    CheckpointState s;
    memset(&s, 0, sizeof(s));
    s.model.num_layers = c->num_layers; s.model.channels = c->channels; s.model.num_heads = c->num_heads;
    s.model.vocab_size = c->vocab_size; s.model.padded_vocab_size = c->padded_vocab_size;
    s.model.max_seq_len = c->max_seq_len; s.model.num_params = (int64_t)n;
    s.step = 7;
    snprintf(s.settings, sizeof(s.settings), "-depth 2");
    float* mv = (float*)calloc(n, sizeof(float));
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

static void check_config(const char* out, const ModelConfig* c) {
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

static void check_layout(const char* out, const ModelConfig* c, const float* v) {
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
static int import(const char* path, const ModelConfig* c, float* out, size_t n, char* err, size_t errlen) {
    memset(out, 0xff, n * sizeof(float));
    GptHfReader r;
    int rc = gpt_hf_open(&r, path);
    if (rc == 0) rc = gpt_hf_load(&r, c, out);
    snprintf(err, errlen, "%s", rc ? r.err : "");
    hf_model_close(&r);
    return rc;
}

static void expect_import_error(const char* what, const char* path, const ModelConfig* c, float* out, size_t n,
                                const char* frag1, const char* frag2) {
    char err[HF_ERR_LEN];
    int rc = import(path, c, out, n, err, sizeof(err));
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
static size_t first_difference(const float* a, const float* b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) return i;
    return n;
}

int main(void) {
    snprintf(dir, sizeof(dir), "%s/test_gpt_hf.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    if (access(VOCAB_BPE, R_OK) != 0 || access(ENCODER_JSON, R_OK) != 0) {
        fprintf(stderr, "FAIL: %s or %s missing: run `make data` (make test does)\n", VOCAB_BPE, ENCODER_JSON);
        return 1;
    }
    ModelConfig c = tiny_config();
    size_t off[MODEL_MAX_TENSORS], n = num_params(&c, off);
    float* v = (float*)malloc(n * sizeof(float));
    float* got = (float*)malloc(n * sizeof(float));
    synthetic_values(v, n, &c);
    char ckpt[300], out[300], path[600], err[HF_ERR_LEN];
    snprintf(ckpt, sizeof(ckpt), "%s/ckpt_00000007.bin", dir);
    snprintf(out, sizeof(out), "%s/hf/d2", dir);  // two levels: the export creates both
    EXPECT(write_checkpoint(ckpt, &c, v, n) == 0, "writing the synthetic checkpoint");

    // export through the checkpoint reader, then import: bitwise the same
    HfExported ex;
    int rc = hf_export_checkpoint(ckpt, out, VOCAB_BPE, &ex, err, sizeof(err));
    EXPECT(rc == 0, "export: %s", err);
    EXPECT(ex.step == 7 && ex.model.family == CHECKPOINT_FAMILY_GPT2 && ex.model.num_layers == 2 &&
           ex.model.channels == 16 && ex.model.num_heads == 2, "export's model and step");
    rc = import(out, &c, got, n, err, sizeof(err));
    EXPECT(rc == 0, "import: %s", err);
    size_t diff = first_difference(got, v, n);
    printf("export -> import: %zu parameters, %s\n", n, diff == n ? "bitwise equal" : "DIFFERENT");
    EXPECT(diff == n, "export -> import differs first at element %zu: %g, expected %g", diff, diff < n ? got[diff] : 0.0f,
           diff < n ? v[diff] : 0.0f);
    check_config(out, &c);
    check_layout(out, &c, v);
    // the export split into 3 files and an index (llmc/io/hf_weights.h), as save_pretrained splits a large
    // model: the same values
    char split[300];
    snprintf(split, sizeof(split), "%s/split", dir);
    EXPECT(hf_split_model(out, split, 3, err, sizeof(err)) == 0, "split: %s", err);
    rc = import(split, &c, got, n, err, sizeof(err));
    diff = rc == 0 ? first_difference(got, v, n) : n;
    printf("export split into 3 files -> import: %s\n", rc == 0 && diff == n ? "bitwise equal" : "DIFFERENT");
    EXPECT(rc == 0 && diff == n, "the export split into 3 files: rc %d (%s), first difference at %zu", rc, err, diff);

    // import variants that must load
    const struct { const char* what; Variant o; } good[] = {
        {"BF16", {ST_BF16, NULL, NULL, NULL, NULL, NULL, 0, 0}},
        {"F16", {ST_F16, NULL, NULL, NULL, NULL, NULL, 0, 0}},
        {"transformer. prefix, attn.bias buffers, tied lm_head", {ST_F32, "transformer.", NULL, NULL, NULL, NULL, 1, 1}}};
    snprintf(path, sizeof(path), "%s/variant.safetensors", dir);
    for (int k = 0; k < 3; k++) {
        EXPECT(write_variant(path, &c, v, &good[k].o) == 0, "writing variant %s", good[k].what);
        rc = import(path, &c, got, n, err, sizeof(err));
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
        expect_import_error(bad[k].what, path, &c, got, n, bad[k].frag1, bad[k].frag2);
        if (k < 5) {  // all but the head's values are refused by gpt_hf_open (train_gpt: before the GPU starts)
            GptHfReader r;
            int orc = gpt_hf_open(&r, path);
            EXPECT(orc != 0, "%s: refused by gpt_hf_open, before any value is read", bad[k].what);
            if (orc == 0) hf_model_close(&r);
        }
    }
    ModelConfig deeper = c;
    deeper.num_layers = 3;
    expect_import_error("another depth", out, &deeper, got, n, "a model of 2 layers and 16 channels", "3 layers");
    // a config.json beside the weights with settings that change the math
    snprintf(path, sizeof(path), "%s/config.json", out);
    cJSON* j = gpt_hf_config_json(&c);
    cJSON_ReplaceItemInObject(j, "n_head", cJSON_CreateNumber(4));
    EXPECT(hf_write_json(out, "config.json", j, err, sizeof(err)) == 0, "%s", err);
    expect_import_error("config.json n_head", out, &c, got, n, "n_head 4", "2 heads");
    j = gpt_hf_config_json(&c);
    cJSON_ReplaceItemInObject(j, "activation_function", cJSON_CreateString("relu"));
    EXPECT(hf_write_json(out, "config.json", j, err, sizeof(err)) == 0, "%s", err);
    expect_import_error("config.json activation", out, &c, got, n, "activation_function \"relu\"", NULL);
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
    expect_import_error("no such file", path, &c, got, n, "cannot open", NULL);

    // a value that is not finite: refused on load, naming the tensor and the element in the file's layout
    // (c_fc is stored transposed: our (out 5, in 3) of layer 1 is its row 3, column 5)
    float* poisoned = (float*)malloc_check(n * sizeof(float));
    const struct { size_t at; float value; const char* frag; } bad_values[] = {
        {off[GPT_FCW] + 4 * 16 * 16 + 5 * 16 + 3, NAN,
         "tensor \"h.1.mlp.c_fc.weight\": element 197 (row 3, column 5) of 1024 is nan: not finite"},
        {100, -INFINITY, "tensor \"wte.weight\": element 100 (row 6, column 4) of 804112 is -inf: not finite"}};
    for (int k = 0; k < 2; k++) {
        memcpy(poisoned, v, n * sizeof(float));
        poisoned[bad_values[k].at] = bad_values[k].value;
        snprintf(path, sizeof(path), "%s/nonfinite.safetensors", dir);
        EXPECT(hf_model_write_safetensors(path, &c, poisoned, err, sizeof(err)) == 0, "writing: %s", err);
        expect_import_error("a value not finite", path, &c, got, n, bad_values[k].frag, NULL);
    }
    free(poisoned);

    // a vocabulary smaller than 4 C (V = 4, C = 4): the transposed c_fc and c_proj (4C x C) are larger
    // than wte, and the import transposes them through its scratch
    ModelConfig small = model_config_gpt2_sizes(4, 4, 4, 1, 1, 4);  // maxT, V, Vp, L, NH, C
    size_t small_off[MODEL_MAX_TENSORS], sn = num_params(&small, small_off);
    float* sv = (float*)malloc_check(sn * sizeof(float));
    float* sgot = (float*)malloc_check(sn * sizeof(float));
    for (size_t i = 0; i < sn; i++) sv[i] = (float)i + 0.5f;
    snprintf(path, sizeof(path), "%s/small.safetensors", dir);
    EXPECT(hf_model_write_safetensors(path, &small, sv, err, sizeof(err)) == 0, "writing the V = 4 model: %s", err);
    rc = import(path, &small, sgot, sn, err, sizeof(err));
    diff = rc == 0 ? first_difference(sgot, sv, sn) : sn;
    printf("V = 4, C = 4 (4C x C weights larger than wte): %s\n", rc == 0 && diff == sn ? "read back bitwise" : "WRONG");
    EXPECT(rc == 0 && diff == sn, "the V = 4, C = 4 model: rc %d (%s), first difference at %zu of %zu", rc, err, diff, sn);
    free(sgot);
    free(sv);

    test_export_dir(&c, v);

    free(got);
    free(v);
    test_remove_dir(dir);
    return test_summary("test_gpt_hf");
}
