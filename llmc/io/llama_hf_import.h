// llama_hf_import.h: host-only. A LlamaForCausalLM in Hugging Face's layout (a safetensors file, or a
// split model's files, llmc/io/hf_weights.h, and the config.json beside it: what llmc/io/llama_hf.h exports,
// or transformers' save_pretrained of a model of the same shape) read into our parameter order
// (llmc/model/llama_config.h): the names and slices of llama_hf.h, joined again. Used by train_gpt's -init.
//
// config.json is needed: the head counts are not in the tensors' shapes (q_proj is (C, C) for any
// num_attention_heads). Read from it: hidden_size, intermediate_size, num_hidden_layers,
// num_attention_heads, num_key_value_heads (as transformers: num_attention_heads when absent), vocab_size,
// rope_theta (or rope_parameters' rope_theta, as transformers 5 writes it; 10000 when absent) and
// rms_norm_eps (1e-6 when absent); what this program does not compute is refused, naming it: a model_type
// other than llama, hidden_act other than silu, attention or MLP biases, RoPE scaled in any way
// (rope_parameters or rope_scaling other than plain "default"), a head_dim other than hidden_size /
// num_attention_heads. With tie_word_embeddings the head starts as embed_tokens (lm_head.weight may be
// left out, or must equal it), then trains on its own: the head here is untied. Tensors may be F32, BF16
// or F16 (converted exactly to fp32); the rotary_emb.inv_freq buffers older files carry are ignored; any
// other difference (a missing or unknown tensor, another shape or dtype) is an error that names it, found
// by llama_hf_open before any value is read; a value that is not finite is one too, found by
// llama_hf_load as it reads the values. Every size of config.json is bounded by llmc/model/llama_config.h's
// LLAMA_MAX_* before anything is sized by it.
// Errors: 0, or -1 with the message in r->err; nothing exits.
#pragma once
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hf_weights.h"
#include "llama_hf.h"

typedef struct {
    HfWeights w;                            // the file, or the split model's files; w.path names it
    LlamaConfig config;                     // from config.json; max_seq_len and padded_vocab_size 0
    int tie;                                // tie_word_embeddings: the head is embed_tokens (lm_head.weight,
                                            // when the file has it too, must equal it)
    char err[HF_ERR_LEN];
} LlamaHfReader;

static inline int llama_hf_fail(LlamaHfReader* r, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int llama_hf_fail(LlamaHfReader* r, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    err_vformat(r->err, sizeof(r->err), "", r->w.path, fmt, ap);
    va_end(ap);
    hf_weights_close(&r->w);
    return -1;
}

// config.json's member `key` as an integer in [1, most] into *v (the limits of llmc/model/llama_config.h,
// checked before the value is converted or sizes anything); absent: *v = fallback (0: required).
static inline int llama_hf_config_int(const cJSON* j, const char* key, int fallback, int most, int* v, char* msg,
                                      size_t n) {
    const cJSON* x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!x && fallback > 0) { *v = fallback; return 0; }
    if (!x) { snprintf(msg, n, "%s is missing", key); return -1; }
    if (!cJSON_IsNumber(x)) { snprintf(msg, n, "%s is not a number", key); return -1; }
    double d = x->valuedouble;
    if (!(d >= 1.0 && d <= (double)most) || d != floor(d)) {
        snprintf(msg, n, "%s %.15g: expected an integer in [1, %d] (no real model has more)", key, d, most);
        return -1;
    }
    *v = (int)d;
    return 0;
}

// Whether RoPE settings object o (config.json's rope_parameters, or rope_scaling) asks for plain RoPE:
// absent or null, or an object whose rope_type (or type) is "default" and whose only other member is
// rope_theta (put into *theta; only where allow_theta). msg says what else it asks for.
static inline int llama_hf_plain_rope(const cJSON* o, const char* name, int allow_theta, const cJSON** theta,
                                      char* msg, size_t n) {
    if (!o || cJSON_IsNull(o)) return 1;
    if (!cJSON_IsObject(o)) { snprintf(msg, n, "%s is not a JSON object", name); return 0; }
    for (const cJSON* x = o->child; x; x = x->next) {
        if (allow_theta && strcmp(x->string, "rope_theta") == 0) { *theta = x; continue; }
        int is_type = strcmp(x->string, "rope_type") == 0 || strcmp(x->string, "type") == 0;
        if (is_type && cJSON_IsString(x) && strcmp(x->valuestring, "default") == 0) continue;
        if (is_type)
            snprintf(msg, n, "%s.%s \"%s\": this program computes plain RoPE (\"default\")", name, x->string,
                     cJSON_IsString(x) ? x->valuestring : "(not a string)");
        else
            snprintf(msg, n, "%s.%s: this program computes plain RoPE (rope_type \"default\"%s alone)", name, x->string,
                     allow_theta ? " and rope_theta" : "");
        return 0;
    }
    return 1;
}

// The settings of config.json into r->config (and r->tie), and what this program cannot compute
// refused; msg says which setting and why.
static inline int llama_hf_parse_config(LlamaHfReader* r, const cJSON* j, char* msg, size_t n) {
    LlamaConfig* c = &r->config;
    const cJSON* type = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    if (cJSON_IsString(type) && strcmp(type->valuestring, "llama") != 0) {
        snprintf(msg, n, "model_type \"%s\": this program reads llama", type->valuestring);
        return -1;
    }
    if (llama_hf_config_int(j, "hidden_size", 0, LLAMA_MAX_CHANNELS, &c->channels, msg, n) != 0 ||
        llama_hf_config_int(j, "intermediate_size", 0, LLAMA_MAX_FFN, &c->ffn_hidden, msg, n) != 0 ||
        llama_hf_config_int(j, "num_hidden_layers", 0, LLAMA_MAX_LAYERS, &c->num_layers, msg, n) != 0 ||
        llama_hf_config_int(j, "num_attention_heads", 0, LLAMA_MAX_HEADS, &c->num_heads, msg, n) != 0 ||
        llama_hf_config_int(j, "num_key_value_heads", c->num_heads, LLAMA_MAX_HEADS, &c->num_kv_heads, msg, n) != 0 ||
        llama_hf_config_int(j, "vocab_size", 0, LLAMA_MAX_VOCAB, &c->vocab_size, msg, n) != 0)
        return -1;
    if (c->channels % c->num_heads != 0 || c->num_heads % c->num_kv_heads != 0) {
        snprintf(msg, n, "hidden_size %d, num_attention_heads %d, num_key_value_heads %d: the heads must divide "
                 "hidden_size and the key/value heads the heads", c->channels, c->num_heads, c->num_kv_heads);
        return -1;
    }
    const cJSON* head_dim = cJSON_GetObjectItemCaseSensitive(j, "head_dim");
    if (head_dim && !cJSON_IsNull(head_dim) && !(cJSON_IsNumber(head_dim) && head_dim->valuedouble == c->channels / c->num_heads)) {
        snprintf(msg, n, "head_dim is not %d: this program's heads are hidden_size / num_attention_heads",
                 c->channels / c->num_heads);
        return -1;
    }
    // RoPE: plain, its base rope_theta, or (transformers 5's files) rope_parameters.rope_theta; given
    // twice, the two must agree
    const cJSON* theta = cJSON_GetObjectItemCaseSensitive(j, "rope_theta");
    const cJSON* ptheta = NULL;
    if (!llama_hf_plain_rope(cJSON_GetObjectItemCaseSensitive(j, "rope_parameters"), "rope_parameters", 1, &ptheta, msg, n) ||
        !llama_hf_plain_rope(cJSON_GetObjectItemCaseSensitive(j, "rope_scaling"), "rope_scaling", 0, NULL, msg, n))
        return -1;
#define LLAMA_HF_THETA_OK(x) (cJSON_IsNumber(x) && (x)->valuedouble >= 1.0 && (x)->valuedouble <= LLAMA_MAX_ROPE_THETA)
    const char* bad_theta = theta && !cJSON_IsNull(theta) && !LLAMA_HF_THETA_OK(theta) ? "rope_theta"
                          : ptheta && !cJSON_IsNull(ptheta) && !LLAMA_HF_THETA_OK(ptheta) ? "rope_parameters.rope_theta"
                                                                                        : NULL;
#undef LLAMA_HF_THETA_OK
    if (bad_theta) {
        snprintf(msg, n, "%s is not a number in [1, %g]", bad_theta, LLAMA_MAX_ROPE_THETA);
        return -1;
    }
    if (cJSON_IsNumber(theta) && cJSON_IsNumber(ptheta) && theta->valuedouble != ptheta->valuedouble) {
        snprintf(msg, n, "rope_theta %.17g and rope_parameters.rope_theta %.17g disagree", theta->valuedouble,
                 ptheta->valuedouble);
        return -1;
    }
    c->rope_theta = cJSON_IsNumber(ptheta) ? ptheta->valuedouble : cJSON_IsNumber(theta) ? theta->valuedouble : 10000.0;
    const cJSON* eps = cJSON_GetObjectItemCaseSensitive(j, "rms_norm_eps");
    if (eps && !(cJSON_IsNumber(eps) && eps->valuedouble >= 0 && eps->valuedouble < 1)) {
        snprintf(msg, n, "rms_norm_eps is not a number in [0, 1)");
        return -1;
    }
    c->norm_eps = eps ? eps->valuedouble : 1e-6;
    const cJSON* act = cJSON_GetObjectItemCaseSensitive(j, "hidden_act");
    if (act && !(cJSON_IsString(act) && strcmp(act->valuestring, "silu") == 0))
        snprintf(msg, n, "hidden_act \"%s\": this program's MLP is SwiGLU with silu",
                 cJSON_IsString(act) ? act->valuestring : "(not a string)");
    else if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "attention_bias")))
        snprintf(msg, n, "attention_bias true: this program's Llama-style attention has no biases");
    else if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "mlp_bias")))
        snprintf(msg, n, "mlp_bias true: this program's Llama-style MLP has no biases");
    else
        msg[0] = '\0';
    r->tie = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "tie_word_embeddings"));
    return msg[0] ? -1 : 0;
}

// Is `name` a buffer that older Llama files carry and this program has no use for?
static inline int llama_hf_ignored(const char* name) {
    int l, end = 0;
    return sscanf(name, "model.layers.%d.self_attn.rotary_emb.inv_freq%n", &l, &end) == 1 && end > 0 && name[end] == '\0';
}

// Every tensor of the file against the model of r->config: each expected one present (lm_head.weight
// may be left out of a tied model) with its shape and a dtype the import reads, none unknown.
static inline int llama_hf_check_tensors(LlamaHfReader* r) {
    LlamaConfig c = r->config;
    c.padded_vocab_size = c.vocab_size;  // the file's shapes do not depend on the padding
    int n = llama_hf_num_tensors(&c), head = n - 1;  // lm_head comes last (llama_hf_tensors)
    if (n < 0) return llama_hf_fail(r, "%d layers, outside [1, %d]", c.num_layers, LLAMA_MAX_LAYERS);  // config checked
    HfTensor* hf = (HfTensor*)calloc((size_t)n, sizeof(HfTensor));
    if (!hf) return llama_hf_fail(r, "out of host memory");
    llama_hf_tensors(hf, &c);
    char msg[SAFETENSORS_ERR_LEN];
    int rc = 0;
    for (int i = 0; i < r->w.num_tensors && rc == 0; i++) {  // every tensor of the file is expected, or ignored
        const char* name = r->w.tensors[i]->name;
        int known = llama_hf_ignored(name);
        for (int k = 0; k < n && !known; k++) known = strcmp(name, hf[k].name) == 0;
        if (!known)
            rc = llama_hf_fail(r, "tensor \"%s\": not part of a LlamaForCausalLM of %d layers in Hugging Face's layout "
                               "(expected model.embed_tokens.weight, model.layers.0 ... %d.*, model.norm.weight, "
                               "lm_head.weight)", name, c.num_layers, c.num_layers - 1);
    }
    for (int k = 0; k < n && rc == 0; k++) {
        const SafetensorsTensor* t = hf_weights_find(&r->w, hf[k].name);
        if (!t && k == head && r->tie) continue;
        if (!t) {
            rc = llama_hf_fail(r, "no tensor \"%s\" (a LlamaForCausalLM of %d layers has it%s)", hf[k].name,
                               c.num_layers, k == head ? "; with tie_word_embeddings true in config.json the head "
                               "may be left out" : "");
            break;
        }
        if (hf_check_tensor(t, &hf[k], "config.json's sizes give", "", msg, sizeof(msg)) != 0)
            rc = llama_hf_fail(r, "%s", msg);
    }
    free(hf);
    return rc;
}

// Opens path (a safetensors file, or a directory holding model.safetensors or a split model's
// model.safetensors.index.json and files: llmc/io/hf_weights.h), reads the model's sizes
// from the config.json beside it and checks every tensor's name, shape and dtype against them: what can
// be wrong with the file but its values is found here. The caller builds its model from r->config (with
// its own max_seq_len and padded vocabulary), then calls llama_hf_load.
static inline int llama_hf_open(LlamaHfReader* r, const char* path) {
    memset(r, 0, sizeof(*r));
    if (hf_weights_open(&r->w, path) != 0) {
        snprintf(r->err, sizeof(r->err), "%s", r->w.err);
        return -1;
    }
    if (!hf_weights_find(&r->w, "model.embed_tokens.weight"))
        return llama_hf_fail(r, "no tensor \"model.embed_tokens.weight\": not a Llama model in Hugging Face's layout");
    char config_path[SAFETENSORS_PATH_MAX + 64], err[SAFETENSORS_PATH_MAX + 128], msg[256];
    cJSON* j;
    if (hf_read_config(r->w.path, &j, config_path, sizeof(config_path), err, sizeof(err)) != 0)
        return llama_hf_fail(r, "%s", err);
    if (!j)
        return llama_hf_fail(r, "no %s beside it: the model's sizes and head counts are read from it (a Llama model's "
                             "export has one)", config_path);
    int rc = llama_hf_parse_config(r, j, msg, sizeof(msg));
    cJSON_Delete(j);
    if (rc != 0) return llama_hf_fail(r, "%s beside it: %s", config_path, msg);
    return llama_hf_check_tensors(r);
}

// Whether path (a file or a directory, as llama_hf_open takes it) holds a Llama model's tensors
// (model.embed_tokens.weight): how -init tells the families apart. 0 also when it cannot be read.
static inline int llama_hf_detect(const char* path) {
    HfWeights w;
    if (hf_weights_open(&w, path) != 0) return 0;
    int found = hf_weights_find(&w, "model.embed_tokens.weight") != NULL;
    hf_weights_close(&w);
    return found;
}

// The file's values into the model c (whose sizes, RoPE base and eps must be the file's; the base to a
// float's precision, as train_gpt's -rope_theta holds it): values (num_params) fp32 in our order, the
// padded rows of embed and lm_head zero; a tied head is embed_tokens; every value must be finite.
// Closes the file in every case.
static inline int llama_hf_load(LlamaHfReader* r, const LlamaConfig* c, float* values) {
    const LlamaConfig* f = &r->config;
    if (f->num_layers != c->num_layers || f->channels != c->channels || f->num_heads != c->num_heads ||
        f->num_kv_heads != c->num_kv_heads || f->ffn_hidden != c->ffn_hidden || f->vocab_size != c->vocab_size)
        return llama_hf_fail(r, "a model of %d layers, %d channels, %d heads (%d key/value), FFN %d, vocabulary %d; "
                             "this run's has %d layers, %d channels, %d heads (%d key/value), FFN %d, vocabulary %d",
                             f->num_layers, f->channels, f->num_heads, f->num_kv_heads, f->ffn_hidden, f->vocab_size,
                             c->num_layers, c->channels, c->num_heads, c->num_kv_heads, c->ffn_hidden, c->vocab_size);
    if (fabs(f->rope_theta - c->rope_theta) > 1e-6 * c->rope_theta || fabs(f->norm_eps - c->norm_eps) > 1e-6 * c->norm_eps)
        return llama_hf_fail(r, "rope_theta %g and rms_norm_eps %g, this run's are %g and %g", f->rope_theta, f->norm_eps,
                             c->rope_theta, c->norm_eps);
    int n = llama_hf_num_tensors(c), head = n - 1;  // lm_head comes last (llama_hf_tensors)
    size_t C = (size_t)c->channels, V = (size_t)c->vocab_size, pad = (size_t)(c->padded_vocab_size - c->vocab_size);
    if (n < 0) return llama_hf_fail(r, "this run's model has %d layers, outside [1, %d]", c->num_layers, LLAMA_MAX_LAYERS);
    HfTensor* hf = (HfTensor*)calloc((size_t)n, sizeof(HfTensor));
    if (!hf) return llama_hf_fail(r, "out of host memory");
    llama_hf_tensors(hf, c);
    int rc = 0;
    char msg[SAFETENSORS_ERR_LEN];
    for (int k = 0; k < n && rc == 0; k++) {  // llama_hf_open checked the names, shapes and dtypes
        const SafetensorsTensor* t = hf_weights_find(&r->w, hf[k].name);
        if (!t) continue;  // a tied model's head, left out
        if (hf_weights_read_f32(&r->w, t, values + hf[k].offset) != 0) {
            snprintf(r->err, sizeof(r->err), "%s", r->w.err);
            rc = -1;
        } else if (hf_check_finite(t, values + hf[k].offset, msg, sizeof(msg)) != 0) {  // as a checkpoint's
            rc = llama_hf_fail(r, "%s", msg);
        }
    }
    if (rc == 0 && r->tie) {  // the head is the embedding: copied, or (given too) equal to it
        float* h = values + hf[head].offset;
        if (!hf_weights_find(&r->w, hf[head].name)) memcpy(h, values + hf[0].offset, V * C * sizeof(float));
        else if (memcmp(h, values + hf[0].offset, V * C * sizeof(float)) != 0)
            rc = llama_hf_fail(r, "tensor \"lm_head.weight\" differs from model.embed_tokens.weight, and config.json "
                               "has tie_word_embeddings true (transformers would use the embedding for both)");
    }
    if (rc == 0) {
        memset(values + hf[0].offset + V * C, 0, pad * C * sizeof(float));     // embed's padded rows
        memset(values + hf[head].offset + V * C, 0, pad * C * sizeof(float));  // lm_head's
    }
    free(hf);
    hf_weights_close(&r->w);
    return rc;
}

static inline void llama_hf_close(LlamaHfReader* r) { hf_weights_close(&r->w); }
