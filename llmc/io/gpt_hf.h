// gpt_hf.h: host-only. The GPT-2 model in Hugging Face's layout, and its export: our parameters (fp32,
// in llmc/model/gpt_config.h's order) to a directory that transformers loads as it is
// (GPT2LMHeadModel.from_pretrained(DIR), AutoTokenizer.from_pretrained(DIR)). Used by train_gpt's
// -export_hf, build/export_hf (llmc/io/hf_checkpoint.h: a checkpoint's master weights) and
// dev/interop/gpt_dump.cu. The import of such files (-init) is llmc/io/gpt_hf_import.h.
//
// The directory:
//   model.safetensors        the weights in fp32, with the names below; metadata {"format": "pt"}
//   config.json              GPT2Config: n_embd, n_layer, n_head, n_positions = the model's context,
//                            vocab_size 50257, activation_function gelu_new (GPT-2's tanh GELU, as
//                            llmc/layers/gelu.cuh), layer_norm_epsilon 1e-5 (llmc/layers/layernorm.cuh's LN_EPS), tied
//                            embeddings, dropout 0 (the trainer uses none), torch_dtype float32
//   vocab.json, merges.txt   GPT-2's encoder.json and vocab.bpe (data/gpt2/, fetched by `make data`), copied
//   tokenizer_config.json, special_tokens_map.json   GPT2Tokenizer, <|endoftext|> as bos, eos and unk
// Every file is written atomically (llmc/io/hf_files.h: temporary file, fsync, rename), and the directory
// too: its files are written into a temporary directory beside it, which then takes its place.
//
// Names and shapes. Ours are (out, in), y = x·Wᵀ; HF's GPT-2 computes its linear layers with Conv1D,
// y = x·W, whose weights are (in, out): the four matrices of each layer are stored transposed.
//   wte.weight (V, C)                      wte rows [0, V): the padded rows are dropped (zeros on import)
//   wpe.weight (maxT, C)                   wpe
//   h.{l}.ln_1.weight, h.{l}.ln_1.bias     ln1w[l], ln1b[l] (C)
//   h.{l}.attn.c_attn.weight (C, 3C)       qkvw[l]ᵀ: q, k, v in that order, heads side by side in each
//   h.{l}.attn.c_attn.bias (3C)            qkvb[l]
//   h.{l}.attn.c_proj.weight (C, C)        attprojw[l]ᵀ, and .bias attprojb[l]
//   h.{l}.ln_2.weight, h.{l}.ln_2.bias     ln2w[l], ln2b[l]
//   h.{l}.mlp.c_fc.weight (C, 4C)          fcw[l]ᵀ, and .bias fcb[l] (4C)
//   h.{l}.mlp.c_proj.weight (4C, C)        fcprojw[l]ᵀ, and .bias fcprojb[l] (C)
//   ln_f.weight, ln_f.bias (C)             lnfw, lnfb
// The LM head is tied to wte, so lm_head.weight is not stored: transformers ties it on load.
// Errors: 0, or -1 with the message in `err`; nothing exits.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../model/gpt_config.h"
#include "hf_files.h"
#include "safetensors.h"

#define GPT_HF_VOCAB 50257     // GPT-2's vocabulary: the rows of wte.weight
#define GPT_HF_EOT 50256       // <|endoftext|>
#define GPT_HF_LN_EPS 1e-5     // llmc/layers/layernorm.cuh's LN_EPS: train_gpt.cu checks at compile time that they agree

// The number of tensors of c in Hugging Face's layout, or -1 when c's layers are outside
// [0, GPT_MAX_LAYERS] (so no table is sized by an unchecked count).
static inline int gpt_hf_num_tensors(const GptConfig* c) {
    return c->num_layers >= 0 && c->num_layers <= GPT_MAX_LAYERS ? 4 + 12 * c->num_layers : -1;
}

// The gpt_hf_num_tensors(c) tensors in file order: wte, wpe, h.0 ... h.{L-1}, ln_f; their names without
// the "transformer." prefix.
static inline void gpt_hf_tensors(HfTensor* t, const GptConfig* c) {
    size_t size[GPT_NUM_TENSORS], off[GPT_NUM_TENSORS], o = 0;
    gpt_tensor_sizes(size, c);
    for (int i = 0; i < GPT_NUM_TENSORS; i++) { off[i] = o; o += size[i]; }
    int C = c->channels, L = c->num_layers;
    // per layer: HF suffix, our tensor, our rows and columns, transposed
    const struct { const char* suffix; int tensor, rows, cols, transpose; } layer[12] = {
        {"ln_1.weight", GPT_LN1W, 1, C, 0}, {"ln_1.bias", GPT_LN1B, 1, C, 0},
        {"attn.c_attn.weight", GPT_QKVW, 3 * C, C, 1}, {"attn.c_attn.bias", GPT_QKVB, 1, 3 * C, 0},
        {"attn.c_proj.weight", GPT_ATTPROJW, C, C, 1}, {"attn.c_proj.bias", GPT_ATTPROJB, 1, C, 0},
        {"ln_2.weight", GPT_LN2W, 1, C, 0}, {"ln_2.bias", GPT_LN2B, 1, C, 0},
        {"mlp.c_fc.weight", GPT_FCW, 4 * C, C, 1}, {"mlp.c_fc.bias", GPT_FCB, 1, 4 * C, 0},
        {"mlp.c_proj.weight", GPT_FCPROJW, C, 4 * C, 1}, {"mlp.c_proj.bias", GPT_FCPROJB, 1, C, 0}};
    int n = 0;
    const struct { const char* name; int tensor, rows, cols; } whole[4] = {
        {"wte.weight", GPT_WTE, c->vocab_size, C}, {"wpe.weight", GPT_WPE, c->max_seq_len, C},
        {"ln_f.weight", GPT_LNFW, 1, C}, {"ln_f.bias", GPT_LNFB, 1, C}};
    for (int k = 0; k < 4; k++) {
        if (k == 2) {  // the layers come between wpe and ln_f
            for (int l = 0; l < L; l++)
                for (int j = 0; j < 12; j++) {
                    HfTensor* e = &t[n++];
                    int rows = layer[j].rows, cols = layer[j].cols;
                    snprintf(e->name, sizeof(e->name), "h.%d.%s", l, layer[j].suffix);
                    e->offset = off[layer[j].tensor] + (size_t)l * rows * cols;
                    e->transpose = layer[j].transpose;
                    e->ndim = rows == 1 ? 1 : 2;
                    e->shape[0] = e->transpose ? cols : rows == 1 ? cols : rows;
                    e->shape[1] = e->transpose ? rows : cols;
                }
        }
        HfTensor* e = &t[n++];
        int rows = whole[k].rows, cols = whole[k].cols;
        snprintf(e->name, sizeof(e->name), "%s", whole[k].name);
        e->offset = off[whole[k].tensor];
        e->transpose = 0;
        e->ndim = rows == 1 ? 1 : 2;
        e->shape[0] = rows == 1 ? cols : rows;
        e->shape[1] = cols;
    }
}

// --- export --------------------------------------------------------------------------------------

// values (num_params) fp32 in our order -> path, a safetensors file with HF's names and layouts (fp32).
// Also writes gradients: they have the parameters' layout (dev/interop/gpt_dump.cu).
static inline int gpt_hf_write_safetensors(const char* path, const GptConfig* c, const float* values, char* err,
                                           size_t errlen) {
    int n = gpt_hf_num_tensors(c);
    if (n < 0) {
        snprintf(err, errlen, "%s: a model of %d layers, outside [0, %d]", path, c->num_layers, GPT_MAX_LAYERS);
        return -1;
    }
    HfTensor* hf = (HfTensor*)calloc((size_t)n, sizeof(HfTensor));
    if (!hf) { snprintf(err, errlen, "%s: out of host memory", path); return -1; }
    gpt_hf_tensors(hf, c);
    int rc = hf_write_safetensors(path, hf, n, values, err, errlen);
    free(hf);
    return rc;
}

// config.json of GPT2LMHeadModel for c.
static inline cJSON* gpt_hf_config_json(const GptConfig* c) {
    cJSON* j = cJSON_CreateObject();
    cJSON* arch = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddStringToObject(j, "model_type", "gpt2");
    cJSON_AddNumberToObject(j, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(j, "n_positions", c->max_seq_len);
    cJSON_AddNumberToObject(j, "n_ctx", c->max_seq_len);
    cJSON_AddNumberToObject(j, "n_embd", c->channels);
    cJSON_AddNumberToObject(j, "n_layer", c->num_layers);
    cJSON_AddNumberToObject(j, "n_head", c->num_heads);
    cJSON_AddNumberToObject(j, "n_inner", 4 * c->channels);
    cJSON_AddStringToObject(j, "activation_function", "gelu_new");
    cJSON_AddNumberToObject(j, "layer_norm_epsilon", GPT_HF_LN_EPS);
    cJSON_AddNumberToObject(j, "initializer_range", 0.02);
    cJSON_AddNumberToObject(j, "embd_pdrop", 0.0);
    cJSON_AddNumberToObject(j, "attn_pdrop", 0.0);
    cJSON_AddNumberToObject(j, "resid_pdrop", 0.0);
    cJSON_AddBoolToObject(j, "scale_attn_weights", 1);
    cJSON_AddBoolToObject(j, "tie_word_embeddings", 1);
    cJSON_AddNumberToObject(j, "bos_token_id", GPT_HF_EOT);
    cJSON_AddNumberToObject(j, "eos_token_id", GPT_HF_EOT);
    cJSON_AddStringToObject(j, "torch_dtype", "float32");
    cJSON_AddBoolToObject(j, "use_cache", 1);
    return j;
}

// GPT-2's encoder.json, beside vocab_bpe, into out.
static inline void gpt_hf_encoder_path(char* out, size_t n, const char* vocab_bpe) {
    snprintf(out, n, "%s", vocab_bpe);
    char* slash = strrchr(out, '/');
    snprintf(slash ? slash + 1 : out, n - (size_t)(slash ? slash + 1 - out : 0), "encoder.json");
}

// Whether an export of c can be written to dir, before any work it would end (train_gpt's -export_hf, at
// start-up): GPT-2's vocabulary, its tokenizer files readable, and dir fit for an export
// (hf_export_check). Creates nothing.
static inline int gpt_hf_export_check(const char* dir, const GptConfig* c, const char* vocab_bpe, char* err,
                                      size_t errlen) {
    if (c->vocab_size != GPT_HF_VOCAB) {
        snprintf(err, errlen, "export to %s: vocabulary %d, GPT-2's tokenizer files have %d", dir, c->vocab_size, GPT_HF_VOCAB);
        return -1;
    }
    char encoder[SAFETENSORS_PATH_MAX + 64];
    gpt_hf_encoder_path(encoder, sizeof(encoder), vocab_bpe);
    const char* files[2] = {vocab_bpe, encoder};
    for (int i = 0; i < 2; i++)
        if (access(files[i], R_OK) != 0) {
            snprintf(err, errlen, "cannot read %s (%s), one of GPT-2's tokenizer files that the export copies; they "
                     "come with `make data` (data/gpt2/), or pass their place with -vocab", files[i], strerror(errno));
            return -1;
        }
    return hf_export_check(dir, err, errlen);
}

// The directory's files into dir, which exists (gpt_hf_export's temporary directory).
static inline int gpt_hf_write_export(const char* dir, const GptConfig* c, const float* values, const char* vocab_bpe,
                                      char* err, size_t errlen) {
    char path[SAFETENSORS_PATH_MAX + 64], encoder[SAFETENSORS_PATH_MAX + 64];
    gpt_hf_encoder_path(encoder, sizeof(encoder), vocab_bpe);
    const char* hint = "GPT-2's BPE files come with `make data` (data/gpt2/); or pass their place with -vocab";
    snprintf(path, sizeof(path), "%s/vocab.json", dir);
    if (hf_copy_file(encoder, path, hint, err, errlen) != 0) return -1;
    snprintf(path, sizeof(path), "%s/merges.txt", dir);
    if (hf_copy_file(vocab_bpe, path, hint, err, errlen) != 0) return -1;
    cJSON* tc = cJSON_CreateObject();
    cJSON_AddStringToObject(tc, "tokenizer_class", "GPT2Tokenizer");
    cJSON_AddNumberToObject(tc, "model_max_length", c->max_seq_len);
    cJSON_AddStringToObject(tc, "bos_token", "<|endoftext|>");
    cJSON_AddStringToObject(tc, "eos_token", "<|endoftext|>");
    cJSON_AddStringToObject(tc, "unk_token", "<|endoftext|>");
    cJSON_AddBoolToObject(tc, "add_prefix_space", 0);
    if (hf_write_json(dir, "tokenizer_config.json", tc, err, errlen) != 0) return -1;
    cJSON* sm = cJSON_CreateObject();
    cJSON_AddStringToObject(sm, "bos_token", "<|endoftext|>");
    cJSON_AddStringToObject(sm, "eos_token", "<|endoftext|>");
    cJSON_AddStringToObject(sm, "unk_token", "<|endoftext|>");
    if (hf_write_json(dir, "special_tokens_map.json", sm, err, errlen) != 0) return -1;
    if (hf_write_json(dir, "config.json", gpt_hf_config_json(c), err, errlen) != 0) return -1;
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    return gpt_hf_write_safetensors(path, c, values, err, errlen);
}

// The whole directory (see the top of this file), whole or not at all (llmc/io/hf_files.h's
// HfExportDir: an earlier export in dir is replaced, a failure leaves nothing): values (num_params)
// fp32 in our order; vocab_bpe is GPT-2's vocab.bpe, with encoder.json beside it (data/gpt2/ after
// `make data`).
static inline int gpt_hf_export(const char* dir, const GptConfig* c, const float* values, const char* vocab_bpe,
                                char* err, size_t errlen) {
    HfExportDir x;
    if (gpt_hf_export_check(dir, c, vocab_bpe, err, errlen) != 0 || hf_export_begin(&x, dir, err, errlen) != 0)
        return -1;
    int rc = gpt_hf_write_export(x.tmp, c, values, vocab_bpe, err, errlen);
    if (rc == 0) rc = hf_export_commit(&x, err, errlen);
    if (rc != 0) hf_export_abort(&x);
    return rc;
}
