// hf_model_import.h: host-only. A model in Hugging Face's layout (ours, transformers' own; one
// safetensors file or a split model's files, llmc/io/hf_weights.h) read into our parameter order: the
// names, shapes, parts and transposes of the family's tensor table (llmc/io/hf_model.h's
// hf_model_tensors), undone. Used by train_gpt's -init. Each family has its reader, since what gives
// the sizes differs: GPT-2's come from its tensors' shapes, a Llama model's from its config.json.
//
// GPT-2 (GPT2LMHeadModel, the released GPT-2 weights): names with or without the "transformer." prefix
// (what GPT2LMHeadModel.save_pretrained writes), F32, BF16 or F16 (converted exactly to fp32); the
// causal-mask buffers h.{l}.attn.bias and h.{l}.attn.masked_bias that older files carry are ignored; an
// lm_head.weight must equal wte.weight (the head is tied here). Any other difference (a missing tensor,
// another shape or dtype, an unknown name, a config.json beside the file with another n_head,
// activation or epsilon) is an error that names it; so is a value that is not finite (found by
// gpt_hf_load as it reads the values).
//
// Llama-style (LlamaForCausalLM: what llmc/io/hf_model.h exports, or transformers' save_pretrained of a
// model of the same shape). config.json is needed: the head counts are not in the tensors' shapes
// (q_proj is (C, C) for any num_attention_heads). Read from it: hidden_size, intermediate_size,
// num_hidden_layers, num_attention_heads, num_key_value_heads (as transformers: num_attention_heads when
// absent), vocab_size, rope_theta (or rope_parameters' rope_theta, as transformers 5 writes it; 10000
// when absent) and rms_norm_eps (1e-6 when absent); what this program does not compute is refused,
// naming it: a model_type other than llama, hidden_act other than silu, attention or MLP biases, RoPE
// scaled in any way (rope_parameters or rope_scaling other than plain "default"), a head_dim other than
// hidden_size / num_attention_heads. With tie_word_embeddings the head starts as embed_tokens
// (lm_head.weight may be left out, or must equal it), then trains on its own: the head here is untied.
// Tensors may be F32, BF16 or F16 (converted exactly to fp32); the rotary_emb.inv_freq buffers older
// files carry are ignored; any other difference is an error that names it; so is a value that is not
// finite, found by llama_hf_load as it reads the values. Every size of config.json is bounded by
// llmc/model/spec.h's MODEL_MAX_* before anything is sized by it.
// Errors: 0, or -1 with the message in r->err; nothing exits.
#pragma once
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hf_model.h"
#include "hf_weights.h"

// The file opened, and what it says of the model: GPT-2's reader fills the first group, Llama's the
// second.
typedef struct {
    HfWeights w;                            // the file, or the split model's files; w.path names it
    // GPT-2 (gpt_hf_open): the sizes from the tensors
    const char* prefix;                     // "" or "transformer."
    int num_layers, channels;               // from the tensors: h.{l}.ln_1.weight present for l < num_layers; wte's
    int vocab_rows, positions;              // rows of wte.weight and wpe.weight
    int num_heads;                          // n_head of a config.json beside the file; 0 without one
    // Llama-style (llama_hf_open): the sizes from config.json
    ModelConfig config;                     // from config.json; max_seq_len and padded_vocab_size 0
    int tie;                                // tie_word_embeddings: the head is embed_tokens (lm_head.weight,
                                            // when the file has it too, must equal it)
    char err[HF_ERR_LEN];
} HfModelReader;
typedef HfModelReader GptHfReader;
typedef HfModelReader LlamaHfReader;

// The message (naming the file) into r->err, the file closed: -1.
static inline int hf_model_fail(HfModelReader* r, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int hf_model_fail(HfModelReader* r, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    err_vformat(r->err, sizeof(r->err), "", r->w.path, fmt, ap);
    va_end(ap);
    hf_weights_close(&r->w);
    return -1;
}

// --- GPT-2 ---------------------------------------------------------------------------------------

static inline const SafetensorsTensor* gpt_hf_find(const GptHfReader* r, const char* name) {
    char full[SAFETENSORS_NAME_MAX];
    snprintf(full, sizeof(full), "%s%s", r->prefix, name);
    return hf_weights_find(&r->w, full);
}

// The config.json beside the weights, when there is one: the settings that change the math but not the
// shapes must be GPT-2's as this program computes it.
static inline int gpt_hf_check_config(GptHfReader* r) {
    char config_path[SAFETENSORS_PATH_MAX + 64], err[SAFETENSORS_PATH_MAX + 128];
    cJSON* j;
    if (hf_read_config(r->w.path, &j, config_path, sizeof(config_path), err, sizeof(err)) != 0)
        return hf_model_fail(r, "%s", err);
    if (!j) return 0;
    const cJSON* nh = cJSON_GetObjectItemCaseSensitive(j, "n_head");
    const cJSON* act = cJSON_GetObjectItemCaseSensitive(j, "activation_function");
    const cJSON* eps = cJSON_GetObjectItemCaseSensitive(j, "layer_norm_epsilon");
    const cJSON* type = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    char msg[256] = "";
    if (cJSON_IsString(type) && strcmp(type->valuestring, "gpt2") != 0)
        snprintf(msg, sizeof(msg), "model_type \"%s\", this program trains gpt2", type->valuestring);
    else if (cJSON_IsString(act) && strcmp(act->valuestring, "gelu_new") != 0 &&
             strcmp(act->valuestring, "gelu_pytorch_tanh") != 0)
        snprintf(msg, sizeof(msg), "activation_function \"%s\", this program computes GPT-2's tanh GELU (gelu_new)",
                 act->valuestring);
    else if (cJSON_IsNumber(eps) && fabs(eps->valuedouble - GPT_HF_LN_EPS) > 1e-9)
        snprintf(msg, sizeof(msg), "layer_norm_epsilon %g, this program uses %g", eps->valuedouble, GPT_HF_LN_EPS);
    else if (nh && !cJSON_IsNumber(nh))
        snprintf(msg, sizeof(msg), "n_head, which is not a number");
    else if (nh && (!(nh->valuedouble >= 1.0 && nh->valuedouble <= (double)r->channels) ||
                    nh->valuedouble != floor(nh->valuedouble)))  // checked before it is converted
        snprintf(msg, sizeof(msg), "n_head %.15g, expected an integer in [1, %d] (n_embd)", nh->valuedouble,
                 r->channels);
    if (nh && !msg[0]) r->num_heads = (int)nh->valuedouble;
    cJSON_Delete(j);
    if (msg[0]) return hf_model_fail(r, "%s beside it has %s", config_path, msg);
    return 0;
}

// Is `name` (without the prefix) a buffer that older GPT-2 files carry and this program has no use for?
static inline int gpt_hf_ignored(const char* name) {
    int l, end = 0;
    if (sscanf(name, "h.%d.attn.bias%n", &l, &end) == 1 && end > 0 && name[end] == '\0') return 1;
    end = 0;
    if (sscanf(name, "h.%d.attn.masked_bias%n", &l, &end) == 1 && end > 0 && name[end] == '\0') return 1;
    return 0;
}

// Every tensor of the file against the GPT-2 of the file's own sizes (r->num_layers, r->channels, its
// vocabulary and positions): each expected one present with its shape and a dtype the import reads, none
// unknown; an lm_head.weight of wte's shape (its values are compared on load).
static inline int gpt_hf_check_tensors(GptHfReader* r) {
    ModelConfig c;
    memset(&c, 0, sizeof(c));
    c.family = MODEL_FAMILY_GPT2;
    c.num_layers = r->num_layers; c.channels = r->channels; c.num_heads = c.num_kv_heads = 1;
    c.ffn_hidden = 4 * r->channels;
    c.vocab_size = c.padded_vocab_size = r->vocab_rows; c.max_seq_len = r->positions;
    int n = hf_model_num_tensors(&c);  // gpt_hf_open bounded the layers
    HfTensor* hf = n > 0 ? (HfTensor*)calloc((size_t)n, sizeof(HfTensor)) : NULL;
    if (!hf) return hf_model_fail(r, "out of host memory");
    hf_model_tensors(hf, &c);
    int rc = 0;
    char hint[64], msg[SAFETENSORS_ERR_LEN];
    size_t plen = strlen(r->prefix);
    for (int i = 0; i < r->w.num_tensors && rc == 0; i++) {  // every tensor of the file is expected, or ignored
        const char* name = r->w.tensors[i]->name;
        if (strcmp(name, "lm_head.weight") == 0) continue;
        int known = strncmp(name, r->prefix, plen) == 0 && gpt_hf_ignored(name + plen);
        for (int k = 0; k < n && !known; k++) known = strncmp(name, r->prefix, plen) == 0 && strcmp(name + plen, hf[k].name) == 0;
        if (!known)
            rc = hf_model_fail(r, "tensor \"%s\": not part of GPT-2 in Hugging Face's layout with %d layers (expected "
                             "%swte.weight, %swpe.weight, %sh.0 ... h.%d.*, %sln_f.*)", name, c.num_layers, r->prefix,
                             r->prefix, r->prefix, c.num_layers - 1, r->prefix);
    }
    for (int k = 0; k < n && rc == 0; k++) {
        const SafetensorsTensor* t = gpt_hf_find(r, hf[k].name);
        if (!t) {
            rc = hf_model_fail(r, "no tensor \"%s%s\" (a GPT-2 of %d layers has it)", r->prefix, hf[k].name, c.num_layers);
            break;
        }
        snprintf(hint, sizeof(hint), "n_embd %d%s", c.channels, hf[k].transpose ? ", Conv1D weights are (in, out)" : "");
        if (hf_check_tensor(t, &hf[k], "expected", hint, msg, sizeof(msg)) != 0) rc = hf_model_fail(r, "%s", msg);
    }
    const SafetensorsTensor* lm = rc == 0 ? hf_weights_find(&r->w, "lm_head.weight") : NULL;
    HfTensor head = {"lm_head.weight", 0, 2, {c.vocab_size, c.channels}, 0};  // tied: wte's shape
    if (lm && hf_check_tensor(lm, &head, "expected", "equal to wte.weight", msg, sizeof(msg)) != 0)
        rc = hf_model_fail(r, "%s", msg);
    free(hf);
    return rc;
}

// Opens path (a safetensors file, or a directory holding model.safetensors or a split model's
// model.safetensors.index.json and files: llmc/io/hf_weights.h), reads the model's sizes from
// its tensors' shapes (and n_head from a config.json beside it) and checks every tensor's name, shape
// and dtype against them: what can be wrong with the file but its values is found here. The caller builds
// its model from these, then calls gpt_hf_load.
static inline int gpt_hf_open(GptHfReader* r, const char* path) {
    memset(r, 0, sizeof(*r));
    r->prefix = "";
    if (hf_weights_open(&r->w, path) != 0) {
        snprintf(r->err, sizeof(r->err), "%s", r->w.err);
        return -1;
    }
    if (!hf_weights_find(&r->w, "wte.weight") && hf_weights_find(&r->w, "transformer.wte.weight"))
        r->prefix = "transformer.";
    const SafetensorsTensor* wte = gpt_hf_find(r, "wte.weight");
    const SafetensorsTensor* wpe = gpt_hf_find(r, "wpe.weight");
    if (!wte || !wpe)
        return hf_model_fail(r, "no tensor \"%s\" (nor \"transformer.%s\"): not a GPT-2 model in Hugging Face's layout",
                           wte ? "wpe.weight" : "wte.weight", wte ? "wpe.weight" : "wte.weight");
    if (wte->ndim != 2 || wpe->ndim != 2 || wte->shape[1] != wpe->shape[1] || wte->shape[1] < 1 ||
        wte->shape[1] > 1 << 20 || wte->shape[0] > 1 << 24 || wpe->shape[0] > 1 << 24)
        return hf_model_fail(r, "tensor \"%swte.weight\" and \"%swpe.weight\" must be (rows, C) with the same C",
                           r->prefix, r->prefix);
    r->channels = (int)wte->shape[1];
    r->vocab_rows = (int)wte->shape[0];
    r->positions = (int)wpe->shape[0];
    char name[64];
    for (r->num_layers = 0; r->num_layers <= MODEL_MAX_LAYERS; r->num_layers++) {
        snprintf(name, sizeof(name), "h.%d.ln_1.weight", r->num_layers);
        if (!gpt_hf_find(r, name)) break;
    }
    if (r->num_layers == 0)
        return hf_model_fail(r, "no tensor \"%sh.0.ln_1.weight\": a GPT-2 has at least one layer (%sh.0.*)", r->prefix,
                           r->prefix);
    if (r->num_layers > MODEL_MAX_LAYERS)
        return hf_model_fail(r, "more than %d layers (%sh.0 ... h.%d.* and more): no GPT-2 has that many", MODEL_MAX_LAYERS,
                           r->prefix, MODEL_MAX_LAYERS);
    if (gpt_hf_check_config(r) != 0) return -1;
    return gpt_hf_check_tensors(r);
}

// The file's values into the model c, whose sizes must be the file's: values (num_params) fp32 in our
// order, the tensors converted to fp32, the matrices transposed back, wte's padded rows zero; every value
// must be finite, and an lm_head.weight must equal wte.weight. Closes the file in every case.
static inline int gpt_hf_load(GptHfReader* r, const ModelConfig* c, float* values) {
    if (r->num_layers != c->num_layers || r->channels != c->channels)
        return hf_model_fail(r, "a model of %d layers and %d channels, this run's has %d layers and %d channels",
                           r->num_layers, r->channels, c->num_layers, c->channels);
    if (r->vocab_rows != c->vocab_size)
        return hf_model_fail(r, "tensor \"%swte.weight\" has %d rows, GPT-2's vocabulary has %d tokens", r->prefix,
                           r->vocab_rows, c->vocab_size);
    if (r->positions != c->max_seq_len)
        return hf_model_fail(r, "tensor \"%swpe.weight\" has %d positions, this program's models have %d", r->prefix,
                           r->positions, c->max_seq_len);
    if (r->num_heads != 0 && r->num_heads != c->num_heads)
        return hf_model_fail(r, "config.json beside it has n_head %d, this program's model of %d channels has %d heads",
                           r->num_heads, c->channels, c->num_heads);
    int n = hf_model_num_tensors(c);  // c's layers are the file's, which gpt_hf_open bounded
    HfTensor* hf = n > 0 ? (HfTensor*)calloc((size_t)n, sizeof(HfTensor)) : NULL;
    if (!hf) return hf_model_fail(r, "out of host memory");
    hf_model_tensors(hf, c);
    // the scratch holds what goes through it: every transposed tensor (up to 4C x C) and lm_head (V x C)
    size_t largest = (size_t)c->vocab_size * (size_t)c->channels;
    for (int k = 0; k < n; k++)
        if (hf[k].transpose && (size_t)(hf[k].shape[0] * hf[k].shape[1]) > largest)
            largest = (size_t)(hf[k].shape[0] * hf[k].shape[1]);
    float* scratch = (float*)malloc(largest * sizeof(float));
    if (!scratch) {
        free(hf);
        return hf_model_fail(r, "out of host memory");
    }
    int rc = 0;
    char msg[SAFETENSORS_ERR_LEN];
    for (int k = 0; k < n && rc == 0; k++) {  // gpt_hf_open checked the names, shapes and dtypes
        const SafetensorsTensor* t = gpt_hf_find(r, hf[k].name);
        float* dst = values + hf[k].offset;
        float* read = hf[k].transpose ? scratch : dst;
        if (hf_weights_read_f32(&r->w, t, read) != 0) {
            snprintf(r->err, sizeof(r->err), "%s", r->w.err);
            rc = -1;
            break;
        }
        if (hf_check_finite(t, read, msg, sizeof(msg)) != 0) {  // every value finite, as a checkpoint's
            rc = hf_model_fail(r, "%s", msg);
            break;
        }
        if (hf[k].transpose) hf_transpose(dst, scratch, hf[k].shape[0], hf[k].shape[1]);  // (in, out) -> (out, in)
    }
    if (rc == 0) {  // the padded vocabulary: rows V .. Vp-1 of wte are zero
        memset(values + (size_t)c->vocab_size * c->channels, 0,
               (size_t)(c->padded_vocab_size - c->vocab_size) * c->channels * sizeof(float));
    }
    const SafetensorsTensor* lm = rc == 0 ? hf_weights_find(&r->w, "lm_head.weight") : NULL;
    if (lm) {  // an explicit head must be the tied one (its shape and dtype checked by gpt_hf_open)
        if (hf_weights_read_f32(&r->w, lm, scratch) != 0) {
            snprintf(r->err, sizeof(r->err), "%s", r->w.err);
            rc = -1;
        } else if (memcmp(scratch, values, (size_t)c->vocab_size * c->channels * sizeof(float)) != 0) {
            rc = hf_model_fail(r, "tensor \"lm_head.weight\" differs from wte.weight: an untied LM head, and this "
                             "program's GPT-2 ties it to the token embedding");
        }
    }
    free(scratch);
    free(hf);
    hf_weights_close(&r->w);
    return rc;
}

// --- Llama-style ---------------------------------------------------------------------------------

// config.json's member `key` as an integer in [1, most] into *v (the limits of llmc/model/spec.h,
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
    ModelConfig* c = &r->config;
    c->family = MODEL_FAMILY_LLAMA;
    const cJSON* type = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    if (cJSON_IsString(type) && strcmp(type->valuestring, "llama") != 0) {
        snprintf(msg, n, "model_type \"%s\": this program reads llama", type->valuestring);
        return -1;
    }
    if (llama_hf_config_int(j, "hidden_size", 0, MODEL_MAX_CHANNELS, &c->channels, msg, n) != 0 ||
        llama_hf_config_int(j, "intermediate_size", 0, MODEL_MAX_FFN, &c->ffn_hidden, msg, n) != 0 ||
        llama_hf_config_int(j, "num_hidden_layers", 0, MODEL_MAX_LAYERS, &c->num_layers, msg, n) != 0 ||
        llama_hf_config_int(j, "num_attention_heads", 0, MODEL_MAX_HEADS, &c->num_heads, msg, n) != 0 ||
        llama_hf_config_int(j, "num_key_value_heads", c->num_heads, MODEL_MAX_HEADS, &c->num_kv_heads, msg, n) != 0 ||
        llama_hf_config_int(j, "vocab_size", 0, MODEL_MAX_VOCAB, &c->vocab_size, msg, n) != 0)
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
#define LLAMA_HF_THETA_OK(x) (cJSON_IsNumber(x) && (x)->valuedouble >= 1.0 && (x)->valuedouble <= MODEL_MAX_ROPE_THETA)
    const char* bad_theta = theta && !cJSON_IsNull(theta) && !LLAMA_HF_THETA_OK(theta) ? "rope_theta"
                          : ptheta && !cJSON_IsNull(ptheta) && !LLAMA_HF_THETA_OK(ptheta) ? "rope_parameters.rope_theta"
                                                                                        : NULL;
#undef LLAMA_HF_THETA_OK
    if (bad_theta) {
        snprintf(msg, n, "%s is not a number in [1, %g]", bad_theta, MODEL_MAX_ROPE_THETA);
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
    ModelConfig c = r->config;
    c.padded_vocab_size = c.vocab_size;  // the file's shapes do not depend on the padding
    int n = hf_model_num_tensors(&c), head = n - 1;  // lm_head comes last (hf_model_tensors)
    if (n < 0) return hf_model_fail(r, "%d layers, outside [1, %d]", c.num_layers, MODEL_MAX_LAYERS);  // config checked
    HfTensor* hf = (HfTensor*)calloc((size_t)n, sizeof(HfTensor));
    if (!hf) return hf_model_fail(r, "out of host memory");
    hf_model_tensors(hf, &c);
    char msg[SAFETENSORS_ERR_LEN];
    int rc = 0;
    for (int i = 0; i < r->w.num_tensors && rc == 0; i++) {  // every tensor of the file is expected, or ignored
        const char* name = r->w.tensors[i]->name;
        int known = llama_hf_ignored(name);
        for (int k = 0; k < n && !known; k++) known = strcmp(name, hf[k].name) == 0;
        if (!known)
            rc = hf_model_fail(r, "tensor \"%s\": not part of a LlamaForCausalLM of %d layers in Hugging Face's layout "
                               "(expected model.embed_tokens.weight, model.layers.0 ... %d.*, model.norm.weight, "
                               "lm_head.weight)", name, c.num_layers, c.num_layers - 1);
    }
    for (int k = 0; k < n && rc == 0; k++) {
        const SafetensorsTensor* t = hf_weights_find(&r->w, hf[k].name);
        if (!t && k == head && r->tie) continue;
        if (!t) {
            rc = hf_model_fail(r, "no tensor \"%s\" (a LlamaForCausalLM of %d layers has it%s)", hf[k].name,
                               c.num_layers, k == head ? "; with tie_word_embeddings true in config.json the head "
                               "may be left out" : "");
            break;
        }
        if (hf_check_tensor(t, &hf[k], "config.json's sizes give", "", msg, sizeof(msg)) != 0)
            rc = hf_model_fail(r, "%s", msg);
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
        return hf_model_fail(r, "no tensor \"model.embed_tokens.weight\": not a Llama model in Hugging Face's layout");
    char config_path[SAFETENSORS_PATH_MAX + 64], err[SAFETENSORS_PATH_MAX + 128], msg[256];
    cJSON* j;
    if (hf_read_config(r->w.path, &j, config_path, sizeof(config_path), err, sizeof(err)) != 0)
        return hf_model_fail(r, "%s", err);
    if (!j)
        return hf_model_fail(r, "no %s beside it: the model's sizes and head counts are read from it (a Llama model's "
                             "export has one)", config_path);
    int rc = llama_hf_parse_config(r, j, msg, sizeof(msg));
    cJSON_Delete(j);
    if (rc != 0) return hf_model_fail(r, "%s beside it: %s", config_path, msg);
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
static inline int llama_hf_load(LlamaHfReader* r, const ModelConfig* c, float* values) {
    const ModelConfig* f = &r->config;
    if (f->num_layers != c->num_layers || f->channels != c->channels || f->num_heads != c->num_heads ||
        f->num_kv_heads != c->num_kv_heads || f->ffn_hidden != c->ffn_hidden || f->vocab_size != c->vocab_size)
        return hf_model_fail(r, "a model of %d layers, %d channels, %d heads (%d key/value), FFN %d, vocabulary %d; "
                             "this run's has %d layers, %d channels, %d heads (%d key/value), FFN %d, vocabulary %d",
                             f->num_layers, f->channels, f->num_heads, f->num_kv_heads, f->ffn_hidden, f->vocab_size,
                             c->num_layers, c->channels, c->num_heads, c->num_kv_heads, c->ffn_hidden, c->vocab_size);
    if (fabs(f->rope_theta - c->rope_theta) > 1e-6 * c->rope_theta || fabs(f->norm_eps - c->norm_eps) > 1e-6 * c->norm_eps)
        return hf_model_fail(r, "rope_theta %g and rms_norm_eps %g, this run's are %g and %g", f->rope_theta, f->norm_eps,
                             c->rope_theta, c->norm_eps);
    int n = hf_model_num_tensors(c), head = n - 1;  // lm_head comes last (hf_model_tensors)
    size_t C = (size_t)c->channels, V = (size_t)c->vocab_size, pad = (size_t)(c->padded_vocab_size - c->vocab_size);
    if (n < 0) return hf_model_fail(r, "this run's model has %d layers, outside [1, %d]", c->num_layers, MODEL_MAX_LAYERS);
    HfTensor* hf = (HfTensor*)calloc((size_t)n, sizeof(HfTensor));
    if (!hf) return hf_model_fail(r, "out of host memory");
    hf_model_tensors(hf, c);
    int rc = 0;
    char msg[SAFETENSORS_ERR_LEN];
    for (int k = 0; k < n && rc == 0; k++) {  // llama_hf_open checked the names, shapes and dtypes
        const SafetensorsTensor* t = hf_weights_find(&r->w, hf[k].name);
        if (!t) continue;  // a tied model's head, left out
        if (hf_weights_read_f32(&r->w, t, values + hf[k].offset) != 0) {
            snprintf(r->err, sizeof(r->err), "%s", r->w.err);
            rc = -1;
        } else if (hf_check_finite(t, values + hf[k].offset, msg, sizeof(msg)) != 0) {  // as a checkpoint's
            rc = hf_model_fail(r, "%s", msg);
        }
    }
    if (rc == 0 && r->tie) {  // the head is the embedding: copied, or (given too) equal to it
        float* h = values + hf[head].offset;
        if (!hf_weights_find(&r->w, hf[head].name)) memcpy(h, values + hf[0].offset, V * C * sizeof(float));
        else if (memcmp(h, values + hf[0].offset, V * C * sizeof(float)) != 0)
            rc = hf_model_fail(r, "tensor \"lm_head.weight\" differs from model.embed_tokens.weight, and config.json "
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

// --- either family --------------------------------------------------------------------------------

// The file closed (after an open whose load is not wanted).
static inline void hf_model_close(HfModelReader* r) { hf_weights_close(&r->w); }
