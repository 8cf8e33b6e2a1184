// test_llama_hf.c: the Llama-style model's export to Hugging Face's layout (llmc/llama_hf.h), on the CPU:
// every tensor's name, shape and data (our values are their own indices, so each tensor's data says
// exactly which part of our array it came from), and config.json's fields. transformers loading the
// export, and its logits against the reference's, is dev/interop/llama_check.py (needs PyTorch).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../llmc/check.h"
#include "../../llmc/llama_hf.h"
#include "testing.h"

static LlamaConfig tiny(void) {
    LlamaConfig c;
    c.vocab_size = 50; c.padded_vocab_size = 64; c.max_seq_len = 16; c.num_layers = 2; c.channels = 16;
    c.num_heads = 4; c.num_kv_heads = 2; c.ffn_hidden = 24; c.rope_theta = 10000.0; c.norm_eps = 1e-6;
    return c;
}

// Our offset of element (row, col) of HF's tensor `name` of layer l, by the layout in the header.
static size_t expected_offset(const LlamaConfig* c, const char* what, int l, size_t row, size_t col) {
    size_t s[LLAMA_NUM_TENSORS], off[LLAMA_NUM_TENSORS], o = 0;
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

static void check_tensor(SafetensorsReader* r, const LlamaConfig* c, const char* name, const char* what, int l,
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

int main(void) {
    LlamaConfig c = tiny();
    size_t n = llama_num_params(&c);
    float* values = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) values[i] = (float)i;  // exact below 2^24
    char dir[] = "/tmp/test_llama_hf.XXXXXX", err[HF_ERR_LEN], path[256];
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    snprintf(path, sizeof(path), "%s/out", dir);
    EXPECT(llama_hf_export(path, &c, values, 49, err, sizeof(err)) == 0, "export: %s", err);

    SafetensorsReader r;
    snprintf(path, sizeof(path), "%s/out/model.safetensors", dir);
    EXPECT(safetensors_open(&r, path) == 0, "open: %s", r.err);
    EXPECT(r.num_tensors == llama_hf_num_tensors(&c), "%d tensors, expected %d", r.num_tensors, llama_hf_num_tensors(&c));
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

    snprintf(path, sizeof(path), "%s/out/config.json", dir);
    FILE* f = fopen_check(path, "rb");
    char text[4096];
    size_t len = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[len] = '\0';
    cJSON* j = cJSON_Parse(text);
    EXPECT(j != NULL, "config.json does not parse");
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
    free(values);
    snprintf(path, sizeof(path), "rm -rf %s", dir);
    if (system(path) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return test_summary("test_llama_hf");
}
