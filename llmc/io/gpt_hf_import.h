// gpt_hf_import.h: host-only. A GPT-2 in Hugging Face's layout (ours, transformers' own, the released
// GPT-2 weights; one safetensors file or a split model's files, llmc/io/hf_weights.h) read into our
// parameter order (llmc/model/gpt_config.h): the names, shapes and transposes of llmc/io/gpt_hf.h, undone. Used
// by train_gpt's -init.
//
// Import accepts names with or without the "transformer." prefix (what GPT2LMHeadModel.save_pretrained
// writes), F32, BF16 or F16 (converted exactly to fp32), and ignores the causal-mask buffers
// h.{l}.attn.bias and h.{l}.attn.masked_bias that older files carry; an lm_head.weight must equal
// wte.weight (the head is tied here). Any other difference (a missing tensor, another shape or dtype, an
// unknown name, a config.json beside the file with another n_head, activation or epsilon) is an error
// that names it; so is a value that is not finite (found by gpt_hf_load as it reads the values).
// Errors: 0, or -1 with the message in r->err; nothing exits.
#pragma once
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpt_hf.h"
#include "hf_weights.h"

typedef struct {
    HfWeights w;                            // the file, or the split model's files; w.path names it
    const char* prefix;                     // "" or "transformer."
    int num_layers, channels;               // from the tensors: h.{l}.ln_1.weight present for l < num_layers; wte's
    int vocab_rows, positions;              // rows of wte.weight and wpe.weight
    int num_heads;                          // n_head of a config.json beside the file; 0 without one
    char err[HF_ERR_LEN];
} GptHfReader;

static inline int gpt_hf_fail(GptHfReader* r, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int gpt_hf_fail(GptHfReader* r, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    err_vformat(r->err, sizeof(r->err), "", r->w.path, fmt, ap);
    va_end(ap);
    hf_weights_close(&r->w);
    return -1;
}

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
        return gpt_hf_fail(r, "%s", err);
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
    if (msg[0]) return gpt_hf_fail(r, "%s beside it has %s", config_path, msg);
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
    GptConfig c;
    memset(&c, 0, sizeof(c));
    c.num_layers = r->num_layers; c.channels = r->channels; c.num_heads = 1;
    c.vocab_size = c.padded_vocab_size = r->vocab_rows; c.max_seq_len = r->positions;
    int n = gpt_hf_num_tensors(&c);  // gpt_hf_open bounded the layers
    HfTensor* hf = n > 0 ? (HfTensor*)calloc((size_t)n, sizeof(HfTensor)) : NULL;
    if (!hf) return gpt_hf_fail(r, "out of host memory");
    gpt_hf_tensors(hf, &c);
    int rc = 0;
    char hint[64], msg[SAFETENSORS_ERR_LEN];
    size_t plen = strlen(r->prefix);
    for (int i = 0; i < r->w.num_tensors && rc == 0; i++) {  // every tensor of the file is expected, or ignored
        const char* name = r->w.tensors[i]->name;
        if (strcmp(name, "lm_head.weight") == 0) continue;
        int known = strncmp(name, r->prefix, plen) == 0 && gpt_hf_ignored(name + plen);
        for (int k = 0; k < n && !known; k++) known = strncmp(name, r->prefix, plen) == 0 && strcmp(name + plen, hf[k].name) == 0;
        if (!known)
            rc = gpt_hf_fail(r, "tensor \"%s\": not part of GPT-2 in Hugging Face's layout with %d layers (expected "
                             "%swte.weight, %swpe.weight, %sh.0 ... h.%d.*, %sln_f.*)", name, c.num_layers, r->prefix,
                             r->prefix, r->prefix, c.num_layers - 1, r->prefix);
    }
    for (int k = 0; k < n && rc == 0; k++) {
        const SafetensorsTensor* t = gpt_hf_find(r, hf[k].name);
        if (!t) {
            rc = gpt_hf_fail(r, "no tensor \"%s%s\" (a GPT-2 of %d layers has it)", r->prefix, hf[k].name, c.num_layers);
            break;
        }
        snprintf(hint, sizeof(hint), "n_embd %d%s", c.channels, hf[k].transpose ? ", Conv1D weights are (in, out)" : "");
        if (hf_check_tensor(t, &hf[k], "expected", hint, msg, sizeof(msg)) != 0) rc = gpt_hf_fail(r, "%s", msg);
    }
    const SafetensorsTensor* lm = rc == 0 ? hf_weights_find(&r->w, "lm_head.weight") : NULL;
    HfTensor head = {"lm_head.weight", 0, 2, {c.vocab_size, c.channels}, 0};  // tied: wte's shape
    if (lm && hf_check_tensor(lm, &head, "expected", "equal to wte.weight", msg, sizeof(msg)) != 0)
        rc = gpt_hf_fail(r, "%s", msg);
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
        return gpt_hf_fail(r, "no tensor \"%s\" (nor \"transformer.%s\"): not a GPT-2 model in Hugging Face's layout",
                           wte ? "wpe.weight" : "wte.weight", wte ? "wpe.weight" : "wte.weight");
    if (wte->ndim != 2 || wpe->ndim != 2 || wte->shape[1] != wpe->shape[1] || wte->shape[1] < 1 ||
        wte->shape[1] > 1 << 20 || wte->shape[0] > 1 << 24 || wpe->shape[0] > 1 << 24)
        return gpt_hf_fail(r, "tensor \"%swte.weight\" and \"%swpe.weight\" must be (rows, C) with the same C",
                           r->prefix, r->prefix);
    r->channels = (int)wte->shape[1];
    r->vocab_rows = (int)wte->shape[0];
    r->positions = (int)wpe->shape[0];
    char name[64];
    for (r->num_layers = 0; r->num_layers <= GPT_MAX_LAYERS; r->num_layers++) {
        snprintf(name, sizeof(name), "h.%d.ln_1.weight", r->num_layers);
        if (!gpt_hf_find(r, name)) break;
    }
    if (r->num_layers == 0)
        return gpt_hf_fail(r, "no tensor \"%sh.0.ln_1.weight\": a GPT-2 has at least one layer (%sh.0.*)", r->prefix,
                           r->prefix);
    if (r->num_layers > GPT_MAX_LAYERS)
        return gpt_hf_fail(r, "more than %d layers (%sh.0 ... h.%d.* and more): no GPT-2 has that many", GPT_MAX_LAYERS,
                           r->prefix, GPT_MAX_LAYERS);
    if (gpt_hf_check_config(r) != 0) return -1;
    return gpt_hf_check_tensors(r);
}

// The file's values into the model c, whose sizes must be the file's: values (num_params) fp32 in our
// order, the tensors converted to fp32, the matrices transposed back, wte's padded rows zero; every value
// must be finite, and an lm_head.weight must equal wte.weight. Closes the file in every case.
static inline int gpt_hf_load(GptHfReader* r, const GptConfig* c, float* values) {
    if (r->num_layers != c->num_layers || r->channels != c->channels)
        return gpt_hf_fail(r, "a model of %d layers and %d channels, this run's has %d layers and %d channels",
                           r->num_layers, r->channels, c->num_layers, c->channels);
    if (r->vocab_rows != c->vocab_size)
        return gpt_hf_fail(r, "tensor \"%swte.weight\" has %d rows, GPT-2's vocabulary has %d tokens", r->prefix,
                           r->vocab_rows, c->vocab_size);
    if (r->positions != c->max_seq_len)
        return gpt_hf_fail(r, "tensor \"%swpe.weight\" has %d positions, this program's models have %d", r->prefix,
                           r->positions, c->max_seq_len);
    if (r->num_heads != 0 && r->num_heads != c->num_heads)
        return gpt_hf_fail(r, "config.json beside it has n_head %d, this program's model of %d channels has %d heads",
                           r->num_heads, c->channels, c->num_heads);
    int n = gpt_hf_num_tensors(c);  // c's layers are the file's, which gpt_hf_open bounded
    HfTensor* hf = n > 0 ? (HfTensor*)calloc((size_t)n, sizeof(HfTensor)) : NULL;
    if (!hf) return gpt_hf_fail(r, "out of host memory");
    gpt_hf_tensors(hf, c);
    // the scratch holds what goes through it: every transposed tensor (up to 4C x C) and lm_head (V x C)
    size_t largest = (size_t)c->vocab_size * (size_t)c->channels;
    for (int k = 0; k < n; k++)
        if (hf[k].transpose && (size_t)(hf[k].shape[0] * hf[k].shape[1]) > largest)
            largest = (size_t)(hf[k].shape[0] * hf[k].shape[1]);
    float* scratch = (float*)malloc(largest * sizeof(float));
    if (!scratch) {
        free(hf);
        return gpt_hf_fail(r, "out of host memory");
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
            rc = gpt_hf_fail(r, "%s", msg);
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
            rc = gpt_hf_fail(r, "tensor \"lm_head.weight\" differs from wte.weight: an untied LM head, and this "
                             "program's GPT-2 ties it to the token embedding");
        }
    }
    free(scratch);
    free(hf);
    hf_weights_close(&r->w);
    return rc;
}

static inline void gpt_hf_close(GptHfReader* r) { hf_weights_close(&r->w); }
