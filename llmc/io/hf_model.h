// hf_model.h: host-only. A model of either family in Hugging Face's layout, and its export: our
// parameters (fp32, in the family's table order, llmc/model/spec.h) to a directory that transformers
// loads as it is: GPT2LMHeadModel.from_pretrained(DIR) (and AutoTokenizer.from_pretrained(DIR)), or
// LlamaForCausalLM.from_pretrained(DIR). Used by train_gpt's -export_hf (llmc/io/model_checkpoint.cuh),
// build/export_hf (llmc/io/hf_checkpoint.h: a checkpoint's master weights) and dev/interop/model_dump.cu.
// The import of such files (-init) is llmc/io/hf_model_import.h.
//
// The names, shapes and parts come from the family's tensor table (ModelTensorSpec.hf_parts): the
// whole tensors before the first per-layer one, then each layer's tensors in table order, then the
// other whole tensors. A tensor of Vp rows is stored with V (the padded rows are dropped, zeros on
// import); a stacked one (Llama's qkv_proj = q_proj | k_proj | v_proj, gate_up = gate_proj | up_proj) as
// its parts, each a contiguous block of rows; GPT-2's four matrices of a layer transposed (its Conv1D
// computes y = x·W with W (in, out); ours are (out, in), y = x·Wᵀ, as nn.Linear's). So:
//   GPT-2: wte.weight (V, C), wpe.weight (maxT, C), h.{l}.ln_1.weight, .bias (C),
//     h.{l}.attn.c_attn.weight (C, 3C) = qkvw[l]ᵀ (q, k, v in that order, heads side by side in each) and
//     .bias (3C), h.{l}.attn.c_proj.weight (C, C) and .bias, h.{l}.ln_2.*, h.{l}.mlp.c_fc.weight (C, 4C)
//     and .bias (4C), h.{l}.mlp.c_proj.weight (4C, C) and .bias (C), ln_f.weight, ln_f.bias (C). The LM
//     head is tied to wte, so lm_head.weight is not stored: transformers ties it on load.
//   Llama-style: model.embed_tokens.weight (V, C), model.layers.{l}.input_layernorm.weight (C),
//     .self_attn.q_proj.weight (NH·hs, C), .k_proj, .v_proj (NKV·hs, C), .o_proj (C, C),
//     .post_attention_layernorm.weight (C), .mlp.gate_proj, .up_proj (F, C), .down_proj (C, F),
//     model.norm.weight (C), lm_head.weight (V, C). RoPE is Hugging Face's rotate_half convention on both
//     sides (llmc/layers/rope.cuh), so q_proj and k_proj need no row permutation.
//
// The directory:
//   model.safetensors        the weights in fp32 (our master weights), with the names above; metadata
//                            {"format": "pt"}
//   config.json              GPT-2: GPT2Config: n_embd, n_layer, n_head, n_positions = the model's
//                            context, vocab_size 50257, activation_function gelu_new (GPT-2's tanh GELU, as
//                            llmc/layers/gelu.cuh), layer_norm_epsilon 1e-5 (llmc/layers/layernorm.cuh's
//                            LN_EPS), tied embeddings, dropout 0 (the trainer uses none), torch_dtype float32.
//                            Llama-style: transformers' LlamaConfig: hidden_size C, intermediate_size F,
//                            num_hidden_layers L, num_attention_heads NH, num_key_value_heads NKV, head_dim
//                            hs, rope_theta, rms_norm_eps, max_position_embeddings, hidden_act silu, no
//                            biases, untied lm_head, vocab_size V, torch_dtype float32
//   vocab.json, merges.txt   GPT-2 only: GPT-2's encoder.json and vocab.bpe (data/gpt2/, fetched by `make
//                            data`), copied
//   tokenizer_config.json, special_tokens_map.json   GPT-2 only: GPT2Tokenizer, <|endoftext|> as bos,
//                            eos and unk. The tiktoken encodings the Llama-style family trains on
//                            (cl100k_base, o200k_base) are read with tiktoken itself (doc/interop.md).
// config.json and the tokenizer files are the Hugging Face architecture's own: one writer per family.
// Every file is written atomically (llmc/io/hf_files.h: temporary file, fsync, rename), and the directory
// too: its files are written into a temporary directory beside it, which then takes its place.
// Errors: 0, or -1 with the message in `err`; nothing exits.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../model/spec.h"
#include "hf_files.h"
#include "safetensors.h"

#define GPT_HF_VOCAB 50257     // GPT-2's vocabulary: the rows of wte.weight
#define GPT_HF_EOT 50256       // <|endoftext|>
#define GPT_HF_LN_EPS 1e-5     // llmc/layers/layernorm.cuh's LN_EPS: train_gpt.cu checks at compile time that they agree

// The number of tensors of c in Hugging Face's layout, or -1 when c's family is unknown or its layers
// are outside [0, MODEL_MAX_LAYERS] (so no table is sized by an unchecked count).
static inline int hf_model_num_tensors(const ModelConfig* c) {
    const ModelSpec* s = model_spec(c->family);
    if (!s || c->num_layers < 0 || c->num_layers > MODEL_MAX_LAYERS) return -1;
    int n = 0;
    for (int i = 0; i < s->num_tensors; i++) n += s->tensors[i].hf_num_parts * (s->tensors[i].per_layer ? c->num_layers : 1);
    return n;
}

// One part of tensor i (layer l of a per-layer one) into e: its name, its place in our array, its shape.
static inline void hf_model_part(HfTensor* e, const ModelConfig* c, const ModelTensorSpec* t, size_t offset, int l,
                                 int part) {
    int64_t cols = model_dim(c, t->cols), skip = 0;
    for (int k = 0; k < part; k++) skip += model_dim(c, t->hf_parts[k].rows);
    int rows_dim = t->hf_parts[part].rows;
    int64_t rows = rows_dim == MODEL_DIM_VP ? c->vocab_size : model_dim(c, rows_dim);
    size_t per = (size_t)model_dim(c, t->rows) * (size_t)cols;
    snprintf(e->name, sizeof(e->name), t->hf_parts[part].name, l);
    e->offset = offset + (t->per_layer ? (size_t)l * per : 0) + (size_t)skip * (size_t)cols;
    e->transpose = t->hf_transpose;
    e->ndim = rows_dim == MODEL_DIM_ONE ? 1 : 2;
    e->shape[0] = e->ndim == 1 ? cols : e->transpose ? cols : rows;
    e->shape[1] = e->ndim == 1 ? cols : e->transpose ? rows : cols;
}

// The hf_model_num_tensors(c) tensors in file order: the whole tensors before the first per-layer one,
// the layers, the other whole tensors (GPT-2's names without the "transformer." prefix).
static inline void hf_model_tensors(HfTensor* out, const ModelConfig* c) {
    const ModelSpec* s = model_spec(c->family);
    size_t size[MODEL_MAX_TENSORS], off[MODEL_MAX_TENSORS];
    model_tensor_layout(c, size, off);
    int first = 0, n = 0;
    while (first < s->num_tensors && !s->tensors[first].per_layer) first++;
    for (int i = 0; i < first; i++)
        for (int k = 0; k < s->tensors[i].hf_num_parts; k++) hf_model_part(&out[n++], c, &s->tensors[i], off[i], 0, k);
    for (int l = 0; l < c->num_layers; l++)
        for (int i = first; i < s->num_tensors; i++)
            if (s->tensors[i].per_layer)
                for (int k = 0; k < s->tensors[i].hf_num_parts; k++) hf_model_part(&out[n++], c, &s->tensors[i], off[i], l, k);
    for (int i = first; i < s->num_tensors; i++)
        if (!s->tensors[i].per_layer)
            for (int k = 0; k < s->tensors[i].hf_num_parts; k++) hf_model_part(&out[n++], c, &s->tensors[i], off[i], 0, k);
}

// --- export --------------------------------------------------------------------------------------

// values (num_params) fp32 in our order -> path, a safetensors file with HF's names and layouts (fp32).
// Also writes gradients: they have the parameters' layout (dev/interop/model_dump.cu).
static inline int hf_model_write_safetensors(const char* path, const ModelConfig* c, const float* values, char* err,
                                             size_t errlen) {
    int n = hf_model_num_tensors(c);
    if (n < 0) {
        snprintf(err, errlen, "%s: a model of %d layers, outside [0, %d]", path, c->num_layers, MODEL_MAX_LAYERS);
        return -1;
    }
    HfTensor* hf = (HfTensor*)calloc((size_t)n, sizeof(HfTensor));
    if (!hf) { snprintf(err, errlen, "%s: out of host memory", path); return -1; }
    hf_model_tensors(hf, c);
    int rc = hf_write_safetensors(path, hf, n, values, err, errlen);
    free(hf);
    return rc;
}

// --- GPT-2: GPT2LMHeadModel with GPT-2's tokenizer files ----------------------------------------------

// config.json of GPT2LMHeadModel for c: the JSON text, parsed (numbers printed to 17 digits read back
// as the same doubles, so cJSON prints them as it would the values themselves).
static inline cJSON* gpt_hf_config_json(const ModelConfig* c) {
    char text[2048];
    snprintf(text, sizeof(text),
             "{\"architectures\": [\"GPT2LMHeadModel\"], \"model_type\": \"gpt2\", \"vocab_size\": %d, "
             "\"n_positions\": %d, \"n_ctx\": %d, \"n_embd\": %d, \"n_layer\": %d, \"n_head\": %d, \"n_inner\": %d, "
             "\"activation_function\": \"gelu_new\", \"layer_norm_epsilon\": %.17g, \"initializer_range\": 0.02, "
             "\"embd_pdrop\": 0, \"attn_pdrop\": 0, \"resid_pdrop\": 0, \"scale_attn_weights\": true, "
             "\"tie_word_embeddings\": true, \"bos_token_id\": %d, \"eos_token_id\": %d, \"torch_dtype\": \"float32\", "
             "\"use_cache\": true}",
             c->vocab_size, c->max_seq_len, c->max_seq_len, c->channels, c->num_layers, c->num_heads, 4 * c->channels,
             GPT_HF_LN_EPS, GPT_HF_EOT, GPT_HF_EOT);
    return cJSON_Parse(text);
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
static inline int gpt_hf_export_check(const char* dir, const ModelConfig* c, const char* vocab_bpe, char* err,
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

// The directory's files into dir, which exists (hf_model_export's temporary directory).
static inline int gpt_hf_write_export(const char* dir, const ModelConfig* c, const float* values, const char* vocab_bpe,
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
    return hf_model_write_safetensors(path, c, values, err, errlen);
}


// --- Llama-style: LlamaForCausalLM --------------------------------------------------------------------

// config.json of LlamaForCausalLM for c; eos: the encoding's end-of-text id (-1: none written). The JSON
// text, parsed, as gpt_hf_config_json's.
static inline cJSON* llama_hf_config_json(const ModelConfig* c, int eos) {
    char text[2048], ids[96] = "";
    if (eos >= 0) snprintf(ids, sizeof(ids), "\"bos_token_id\": %d, \"eos_token_id\": %d, ", eos, eos);
    snprintf(text, sizeof(text),
             "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"vocab_size\": %d, "
             "\"hidden_size\": %d, \"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d, "
             "\"num_key_value_heads\": %d, \"head_dim\": %d, \"max_position_embeddings\": %d, \"rms_norm_eps\": %.17g, "
             "\"rope_theta\": %.17g, \"rope_scaling\": null, \"hidden_act\": \"silu\", \"attention_bias\": false, "
             "\"mlp_bias\": false, \"attention_dropout\": 0, \"tie_word_embeddings\": false, "
             "\"initializer_range\": 0.02, %s\"torch_dtype\": \"float32\", \"use_cache\": true}",
             c->vocab_size, c->channels, c->ffn_hidden, c->num_layers, c->num_heads, c->num_kv_heads,
             c->channels / c->num_heads, c->max_seq_len, c->norm_eps, c->rope_theta, ids);
    return cJSON_Parse(text);
}

// The directory's files into dir, which exists (hf_model_export's temporary directory); eos as in
// llama_hf_config_json.
static inline int llama_hf_write_export(const char* dir, const ModelConfig* c, const float* values, int eos, char* err,
                                        size_t errlen) {
    char path[SAFETENSORS_PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    if (hf_write_json(dir, "config.json", llama_hf_config_json(c, eos), err, errlen) != 0) return -1;
    return hf_model_write_safetensors(path, c, values, err, errlen);
}

// --- either family --------------------------------------------------------------------------------

// Whether an export of c can be written to dir, before any work it would end (train_gpt's -export_hf, at
// start-up): dir fit for an export (hf_export_check), and for GPT-2 its vocabulary and tokenizer files
// (gpt_hf_export_check). Creates nothing.
static inline int hf_model_export_check(const char* dir, const ModelConfig* c, const char* vocab_bpe, char* err,
                                        size_t errlen) {
    if (c->family == MODEL_FAMILY_GPT2) return gpt_hf_export_check(dir, c, vocab_bpe ? vocab_bpe : "", err, errlen);
    return hf_export_check(dir, err, errlen);
}

// The directory of c's family (see the top of this file), whole or not at all (llmc/io/hf_files.h's
// HfExportDir: an earlier export in dir, of either family, is replaced, a failure leaves nothing):
// values (num_params) fp32 in our order; vocab_bpe: GPT-2's vocab.bpe, with encoder.json beside it
// (data/gpt2/ after `make data`), which its export copies; eos: a Llama-style export's end-of-text id
// in config.json (-1: none written).
static inline int hf_model_export(const char* dir, const ModelConfig* c, const float* values, const char* vocab_bpe,
                                  int eos, char* err, size_t errlen) {
    HfExportDir x;
    if (hf_model_export_check(dir, c, vocab_bpe, err, errlen) != 0 || hf_export_begin(&x, dir, err, errlen) != 0)
        return -1;
    int rc = c->family == MODEL_FAMILY_GPT2 ? gpt_hf_write_export(x.tmp, c, values, vocab_bpe, err, errlen)
                                            : llama_hf_write_export(x.tmp, c, values, eos, err, errlen);
    if (rc == 0) rc = hf_export_commit(&x, err, errlen);
    if (rc != 0) hf_export_abort(&x);
    return rc;
}
