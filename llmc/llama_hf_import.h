// llama_hf_import.h: host-only. A LlamaForCausalLM in Hugging Face's layout (a safetensors file and the
// config.json beside it: what llmc/llama_hf.h exports, or transformers' save_pretrained of a model of the
// same shape) read into our parameter order (llmc/llama_config.h): the names and slices of llama_hf.h,
// joined again. Used by train_gpt's -init.
//
// config.json is needed: the head counts are not in the tensors' shapes (q_proj is (C, C) for any
// num_attention_heads). Read from it: hidden_size, intermediate_size, num_hidden_layers,
// num_attention_heads, num_key_value_heads (as transformers: num_attention_heads when absent), vocab_size,
// rope_theta (or rope_parameters' rope_theta, as transformers 5 writes it; 10000 when absent) and
// rms_norm_eps (1e-6 when absent); what this program does not compute is refused, naming it: a model_type
// other than llama, hidden_act other than silu, attention or MLP biases, rope_scaling or a rope_type other
// than default, a head_dim other than hidden_size / num_attention_heads. With
// tie_word_embeddings and no lm_head.weight the head starts as a copy of embed_tokens (then trained on
// its own: the head here is untied). Tensors may be F32, BF16 or F16 (converted exactly to fp32); the
// rotary_emb.inv_freq buffers older files carry are ignored; any other difference (a missing or unknown
// tensor, another shape or dtype) is an error that names it. Errors: 0, or -1 with the message in
// r->err; nothing exits.
#pragma once
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llama_hf.h"
#include "safetensors.h"

typedef struct {
    SafetensorsReader st;
    char path[SAFETENSORS_PATH_MAX + 32];  // the safetensors file
    LlamaConfig config;                     // from config.json; max_seq_len and padded_vocab_size 0
    int tied;                               // tie_word_embeddings, and no lm_head.weight in the file
    char err[HF_ERR_LEN];
} LlamaHfReader;

static inline int llama_hf_fail(LlamaHfReader* r, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int llama_hf_fail(LlamaHfReader* r, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    err_vformat(r->err, sizeof(r->err), "", r->path, fmt, ap);
    va_end(ap);
    safetensors_close(&r->st);
    return -1;
}

// config.json's member `key` as a positive integer into *v; absent: *v = fallback (0: required).
static inline int llama_hf_config_int(const cJSON* j, const char* key, int fallback, int* v, char* msg, size_t n) {
    const cJSON* x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!x && fallback > 0) { *v = fallback; return 0; }
    if (!cJSON_IsNumber(x) || x->valuedouble < 1 || x->valuedouble > (1 << 30) || x->valuedouble != floor(x->valuedouble)) {
        snprintf(msg, n, "%s %s", key, x ? "is not a positive integer" : "is missing");
        return -1;
    }
    *v = (int)x->valuedouble;
    return 0;
}

// The settings of config.json into r->config, and what this program cannot compute refused; msg says why.
static inline int llama_hf_parse_config(LlamaHfReader* r, const cJSON* j, char* msg, size_t n) {
    LlamaConfig* c = &r->config;
    const cJSON* type = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    if (cJSON_IsString(type) && strcmp(type->valuestring, "llama") != 0) {
        snprintf(msg, n, "model_type \"%s\", this program reads llama", type->valuestring);
        return -1;
    }
    if (llama_hf_config_int(j, "hidden_size", 0, &c->channels, msg, n) != 0 ||
        llama_hf_config_int(j, "intermediate_size", 0, &c->ffn_hidden, msg, n) != 0 ||
        llama_hf_config_int(j, "num_hidden_layers", 0, &c->num_layers, msg, n) != 0 ||
        llama_hf_config_int(j, "num_attention_heads", 0, &c->num_heads, msg, n) != 0 ||
        llama_hf_config_int(j, "num_key_value_heads", c->num_heads, &c->num_kv_heads, msg, n) != 0 ||
        llama_hf_config_int(j, "vocab_size", 0, &c->vocab_size, msg, n) != 0)
        return -1;
    if (c->channels % c->num_heads != 0 || c->num_heads % c->num_kv_heads != 0) {
        snprintf(msg, n, "hidden_size %d, num_attention_heads %d, num_key_value_heads %d: the heads must divide "
                 "hidden_size and the key/value heads the heads", c->channels, c->num_heads, c->num_kv_heads);
        return -1;
    }
    const cJSON* head_dim = cJSON_GetObjectItemCaseSensitive(j, "head_dim");
    if (head_dim && !cJSON_IsNull(head_dim) && !(cJSON_IsNumber(head_dim) && head_dim->valuedouble == c->channels / c->num_heads)) {
        snprintf(msg, n, "head_dim is not hidden_size / num_attention_heads = %d, as this program's heads are",
                 c->channels / c->num_heads);
        return -1;
    }
    // RoPE's base: rope_theta, or (transformers 5's files) rope_parameters' rope_theta; both, they must agree
    const cJSON* theta = cJSON_GetObjectItemCaseSensitive(j, "rope_theta");
    const cJSON* params = cJSON_GetObjectItemCaseSensitive(j, "rope_parameters");
    const cJSON* ptheta = cJSON_IsObject(params) ? cJSON_GetObjectItemCaseSensitive(params, "rope_theta") : NULL;
    const cJSON* ptype = cJSON_IsObject(params) ? cJSON_GetObjectItemCaseSensitive(params, "rope_type") : NULL;
    const cJSON* eps = cJSON_GetObjectItemCaseSensitive(j, "rms_norm_eps");
    c->rope_theta = cJSON_IsNumber(ptheta) ? ptheta->valuedouble : cJSON_IsNumber(theta) ? theta->valuedouble : 10000.0;
    c->norm_eps = cJSON_IsNumber(eps) ? eps->valuedouble : 1e-6;
    if ((theta && !cJSON_IsNumber(theta)) || (ptheta && !cJSON_IsNumber(ptheta)) || !(c->rope_theta >= 1) ||
        (eps && !cJSON_IsNumber(eps)) || !(c->norm_eps >= 0)) {
        snprintf(msg, n, "rope_theta and rms_norm_eps must be numbers, rope_theta 1 or more and rms_norm_eps not negative");
        return -1;
    }
    if (cJSON_IsNumber(theta) && cJSON_IsNumber(ptheta) && theta->valuedouble != ptheta->valuedouble) {
        snprintf(msg, n, "rope_theta %g and rope_parameters' rope_theta %g, which disagree", theta->valuedouble,
                 ptheta->valuedouble);
        return -1;
    }
    if ((params && !cJSON_IsNull(params) && !cJSON_IsObject(params)) ||
        (ptype && !(cJSON_IsString(ptype) && strcmp(ptype->valuestring, "default") == 0))) {
        snprintf(msg, n, "rope_parameters' rope_type \"%s\", this program computes plain RoPE (rope_type default)",
                 cJSON_IsString(ptype) ? ptype->valuestring : "(not a string)");
        return -1;
    }
    const cJSON* act = cJSON_GetObjectItemCaseSensitive(j, "hidden_act");
    const cJSON* scaling = cJSON_GetObjectItemCaseSensitive(j, "rope_scaling");
    const cJSON* tie = cJSON_GetObjectItemCaseSensitive(j, "tie_word_embeddings");
    if (act && !(cJSON_IsString(act) && strcmp(act->valuestring, "silu") == 0))
        snprintf(msg, n, "hidden_act \"%s\", this program's MLP is SwiGLU with silu",
                 cJSON_IsString(act) ? act->valuestring : "(not a string)");
    else if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "attention_bias")))
        snprintf(msg, n, "attention_bias true, this program's Llama-style attention has no biases");
    else if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "mlp_bias")))
        snprintf(msg, n, "mlp_bias true, this program's Llama-style MLP has no biases");
    else if (scaling && !cJSON_IsNull(scaling))
        snprintf(msg, n, "rope_scaling set, this program computes plain RoPE (rope_scaling null)");
    else
        msg[0] = '\0';
    r->tied = cJSON_IsTrue(tie) && !safetensors_find(&r->st, "lm_head.weight");
    return msg[0] ? -1 : 0;
}

// Opens path (a safetensors file, or a directory holding model.safetensors) and reads the model's sizes
// from the config.json beside it, checking embed_tokens' shape against them. The caller builds its model
// from r->config (with its own max_seq_len and padded vocabulary), then calls llama_hf_load.
static inline int llama_hf_open(LlamaHfReader* r, const char* path) {
    memset(r, 0, sizeof(*r));
    if (hf_weights_path(r->path, sizeof(r->path), path, r->err, sizeof(r->err)) != 0) return -1;
    if (safetensors_open(&r->st, r->path) != 0) {
        snprintf(r->err, sizeof(r->err), "%s", r->st.err);
        return -1;
    }
    const SafetensorsTensor* embed = safetensors_find(&r->st, "model.embed_tokens.weight");
    if (!embed) return llama_hf_fail(r, "no tensor \"model.embed_tokens.weight\": not a Llama model in Hugging Face's layout");
    char config_path[SAFETENSORS_PATH_MAX + 64], err[SAFETENSORS_PATH_MAX + 128], msg[256];
    cJSON* j;
    if (hf_read_config(r->path, &j, config_path, sizeof(config_path), err, sizeof(err)) != 0)
        return llama_hf_fail(r, "%s", err);
    if (!j)
        return llama_hf_fail(r, "no %s beside it: the model's sizes and head counts are read from it (a Llama model's "
                             "export has one)", config_path);
    int rc = llama_hf_parse_config(r, j, msg, sizeof(msg));
    cJSON_Delete(j);
    if (rc != 0) return llama_hf_fail(r, "%s beside it has %s", config_path, msg);
    if (embed->ndim != 2 || embed->shape[0] != r->config.vocab_size || embed->shape[1] != r->config.channels) {
        char s1[160];
        return llama_hf_fail(r, "tensor \"model.embed_tokens.weight\": shape %s, %s says (vocab_size %d, hidden_size %d)",
                             safetensors_shape_text(s1, sizeof(s1), embed->ndim, embed->shape), config_path,
                             r->config.vocab_size, r->config.channels);
    }
    return 0;
}

// Whether path (a file or a directory, as llama_hf_open takes it) holds a Llama model's tensors
// (model.embed_tokens.weight): how -init tells the families apart. 0 also when it cannot be read.
static inline int llama_hf_detect(const char* path) {
    char weights[SAFETENSORS_PATH_MAX + 32], err[SAFETENSORS_PATH_MAX + 256];
    SafetensorsReader st;
    if (hf_weights_path(weights, sizeof(weights), path, err, sizeof(err)) != 0 || safetensors_open(&st, weights) != 0)
        return 0;
    int found = safetensors_find(&st, "model.embed_tokens.weight") != NULL;
    safetensors_close(&st);
    return found;
}

// Is `name` a buffer that older Llama files carry and this program has no use for?
static inline int llama_hf_ignored(const char* name) {
    int l, end = 0;
    return sscanf(name, "model.layers.%d.self_attn.rotary_emb.inv_freq%n", &l, &end) == 1 && end > 0 && name[end] == '\0';
}

// Checks every tensor's name, shape and dtype against the model c (whose sizes, RoPE base and eps must be
// the file's; the base to a float's precision, as train_gpt's -rope_theta holds it), and fills values
// (num_params) fp32 in our order; the padded rows of embed and lm_head zero. Closes the file in every case.
static inline int llama_hf_load(LlamaHfReader* r, const LlamaConfig* c, float* values) {
    const LlamaConfig* f = &r->config;
    if (f->num_layers != c->num_layers || f->channels != c->channels || f->num_heads != c->num_heads ||
        f->num_kv_heads != c->num_kv_heads || f->ffn_hidden != c->ffn_hidden || f->vocab_size != c->vocab_size)
        return llama_hf_fail(r, "a model of %d layers, %d channels, %d heads (%d key/value), FFN %d, vocabulary %d; "
                             "this run's has %d layers, %d channels, %d heads (%d key/value), FFN %d, vocabulary %d",
                             f->num_layers, f->channels, f->num_heads, f->num_kv_heads, f->ffn_hidden, f->vocab_size,
                             c->num_layers, c->channels, c->num_heads, c->num_kv_heads, c->ffn_hidden, c->vocab_size);
    if (fabs(f->rope_theta - c->rope_theta) > 1e-6 * c->rope_theta || fabs(f->norm_eps - c->norm_eps) > 1e-12)
        return llama_hf_fail(r, "rope_theta %g and rms_norm_eps %g, this run's are %g and %g", f->rope_theta, f->norm_eps,
                             c->rope_theta, c->norm_eps);
    int n = llama_hf_num_tensors(c);
    HfTensor* hf = (HfTensor*)calloc((size_t)n, sizeof(HfTensor));
    if (!hf) return llama_hf_fail(r, "out of host memory");
    llama_hf_tensors(hf, c);
    int head = n - 1;  // lm_head comes last (llama_hf_tensors)
    int rc = 0;
    for (int i = 0; i < r->st.num_tensors && rc == 0; i++) {  // every tensor of the file is expected, or ignored
        const char* name = r->st.tensors[i].name;
        int known = llama_hf_ignored(name);
        for (int k = 0; k < n && !known; k++) known = strcmp(name, hf[k].name) == 0;
        if (!known)
            rc = llama_hf_fail(r, "tensor \"%s\": not part of a LlamaForCausalLM of %d layers in Hugging Face's layout "
                               "(expected model.embed_tokens.weight, model.layers.0 ... %d.*, model.norm.weight, "
                               "lm_head.weight)", name, c->num_layers, c->num_layers - 1);
    }
    for (int k = 0; k < n && rc == 0; k++) {
        if (k == head && r->tied) continue;
        const SafetensorsTensor* t = safetensors_find(&r->st, hf[k].name);
        if (!t) {
            rc = llama_hf_fail(r, "no tensor \"%s\" (a LlamaForCausalLM of %d layers has it%s)", hf[k].name,
                               c->num_layers, k == head ? "; with tie_word_embeddings true in config.json the head "
                               "may be left out" : "");
            break;
        }
        char msg[HF_ERR_LEN - 1024];
        int got = hf_read_tensor(&r->st, t, &hf[k], values + hf[k].offset, "", msg, sizeof(msg));
        if (got != 0) {
            if (got == -1) llama_hf_fail(r, "%s", msg);
            else snprintf(r->err, sizeof(r->err), "%s", msg);
            rc = -1;
            break;
        }
    }
    if (rc == 0) {
        size_t C = (size_t)c->channels, V = (size_t)c->vocab_size, pad = (size_t)(c->padded_vocab_size - c->vocab_size);
        if (r->tied) memcpy(values + hf[head].offset, values + hf[0].offset, V * C * sizeof(float));
        memset(values + hf[0].offset + V * C, 0, pad * C * sizeof(float));     // embed's padded rows
        memset(values + hf[head].offset + V * C, 0, pad * C * sizeof(float));  // lm_head's
    }
    free(hf);
    safetensors_close(&r->st);
    return rc;
}

static inline void llama_hf_close(LlamaHfReader* r) { safetensors_close(&r->st); }
