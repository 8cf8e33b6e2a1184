// llama_hf.h: host-only. The Llama-style model (llmc/model/llama_config.h) exported in Hugging Face's layout:
// a directory that transformers loads as it is, LlamaForCausalLM.from_pretrained(DIR).
//
// The directory:
//   model.safetensors   the weights in fp32 (our master weights), with the names below; {"format": "pt"}
//   config.json         LlamaConfig: hidden_size C, intermediate_size F, num_hidden_layers L,
//                       num_attention_heads NH, num_key_value_heads NKV, head_dim hs, rope_theta,
//                       rms_norm_eps, max_position_embeddings, hidden_act silu, no biases, untied
//                       lm_head, vocab_size V (the padded rows are dropped), torch_dtype float32
// No tokenizer files: the tiktoken encodings this family trains on (cl100k_base, o200k_base) are read
// with tiktoken itself (doc/interop.md). Every file is written atomically (llmc/core/atomic_file.h), and
// the directory too (llmc/io/hf_files.h's HfExportDir).
//
// Names. Ours and nn.Linear's weights are both (out, in), so nothing is transposed; the stacked
// projections are cut into Hugging Face's parts, each a contiguous block of rows:
//   model.embed_tokens.weight (V, C)                  embed rows [0, V)
//   model.layers.{l}.input_layernorm.weight (C)       attn_norm[l]
//   model.layers.{l}.self_attn.q_proj.weight (NH·hs, C)   wqkv[l] rows [0, NH·hs)
//   model.layers.{l}.self_attn.k_proj.weight (NKV·hs, C)  rows [NH·hs, (NH+NKV)·hs)
//   model.layers.{l}.self_attn.v_proj.weight (NKV·hs, C)  rows [(NH+NKV)·hs, (NH+2·NKV)·hs)
//   model.layers.{l}.self_attn.o_proj.weight (C, C)   wo[l]
//   model.layers.{l}.post_attention_layernorm.weight (C)  ffn_norm[l]
//   model.layers.{l}.mlp.gate_proj.weight (F, C)      w_gateup[l] rows [0, F)
//   model.layers.{l}.mlp.up_proj.weight (F, C)        rows [F, 2F)
//   model.layers.{l}.mlp.down_proj.weight (C, F)      w_down[l]
//   model.norm.weight (C)                             final_norm
//   lm_head.weight (V, C)                             lm_head rows [0, V)
// RoPE is Hugging Face's rotate_half convention on both sides (llmc/layers/rope.cuh), so q_proj and k_proj
// need no row permutation. Errors: 0, or -1 with the message in err; nothing exits.
#pragma once
#include "hf_files.h"  // the directory, JSON and atomic-file helpers
#include "../model/llama_config.h"

// The number of tensors of c in Hugging Face's layout, or -1 when c's layers are outside
// [0, LLAMA_MAX_LAYERS] (so no table is sized by an unchecked count).
static inline int llama_hf_num_tensors(const LlamaConfig* c) {
    return c->num_layers >= 0 && c->num_layers <= LLAMA_MAX_LAYERS ? 3 + 9 * c->num_layers : -1;
}

// The tensors in file order: embed, then each layer's, then norm and lm_head.
static inline void llama_hf_tensors(HfTensor* t, const LlamaConfig* c) {
    size_t s[LLAMA_NUM_TENSORS], off[LLAMA_NUM_TENSORS], o = 0;
    llama_tensor_sizes(s, c);
    for (int i = 0; i < LLAMA_NUM_TENSORS; i++) { off[i] = o; o += s[i]; }
    size_t C = c->channels, F = c->ffn_hidden, L = c->num_layers, hs = C / c->num_heads;
    size_t q = c->num_heads * hs, kv = c->num_kv_heads * hs, qkv = q + 2 * kv;
    int n = 0;
#define LLAMA_HF_T(off_, rows_, cols_, ...) do { \
        HfTensor* x = &t[n++]; snprintf(x->name, sizeof(x->name), __VA_ARGS__); x->offset = (off_); x->transpose = 0; \
        x->shape[0] = (int64_t)(rows_); x->shape[1] = (int64_t)(cols_); x->ndim = (cols_) ? 2 : 1; } while (0)
    LLAMA_HF_T(off[LLAMA_EMBED], c->vocab_size, C, "model.embed_tokens.weight");
    for (size_t l = 0; l < L; l++) {
        size_t wqkv = off[LLAMA_WQKV] + l * qkv * C, gu = off[LLAMA_WGATEUP] + l * 2 * F * C;
        LLAMA_HF_T(off[LLAMA_ATTN_NORM] + l * C, C, 0, "model.layers.%zu.input_layernorm.weight", l);
        LLAMA_HF_T(wqkv, q, C, "model.layers.%zu.self_attn.q_proj.weight", l);
        LLAMA_HF_T(wqkv + q * C, kv, C, "model.layers.%zu.self_attn.k_proj.weight", l);
        LLAMA_HF_T(wqkv + (q + kv) * C, kv, C, "model.layers.%zu.self_attn.v_proj.weight", l);
        LLAMA_HF_T(off[LLAMA_WO] + l * C * C, C, C, "model.layers.%zu.self_attn.o_proj.weight", l);
        LLAMA_HF_T(off[LLAMA_FFN_NORM] + l * C, C, 0, "model.layers.%zu.post_attention_layernorm.weight", l);
        LLAMA_HF_T(gu, F, C, "model.layers.%zu.mlp.gate_proj.weight", l);
        LLAMA_HF_T(gu + F * C, F, C, "model.layers.%zu.mlp.up_proj.weight", l);
        LLAMA_HF_T(off[LLAMA_WDOWN] + l * C * F, C, F, "model.layers.%zu.mlp.down_proj.weight", l);
    }
    LLAMA_HF_T(off[LLAMA_FINAL_NORM], C, 0, "model.norm.weight");
    LLAMA_HF_T(off[LLAMA_LM_HEAD], c->vocab_size, C, "lm_head.weight");
#undef LLAMA_HF_T
}

// values (num_params) fp32 in our order -> path, a safetensors file with HF's names (fp32). Also
// writes gradients (dev/interop/llama_dump.cu).
static inline int llama_hf_write_safetensors(const char* path, const LlamaConfig* c, const float* values, char* err,
                                             size_t errlen) {
    int n = llama_hf_num_tensors(c);
    if (n < 0) {
        snprintf(err, errlen, "%s: a model of %d layers, outside [0, %d]", path, c->num_layers, LLAMA_MAX_LAYERS);
        return -1;
    }
    HfTensor* hf = (HfTensor*)calloc((size_t)n, sizeof(HfTensor));
    if (!hf) { snprintf(err, errlen, "%s: out of host memory", path); return -1; }
    llama_hf_tensors(hf, c);
    int rc = hf_write_safetensors(path, hf, n, values, err, errlen);
    free(hf);
    return rc;
}

// config.json of LlamaForCausalLM for c; eos: the encoding's end-of-text id (-1: none written).
static inline cJSON* llama_hf_config_json(const LlamaConfig* c, int eos) {
    cJSON* j = cJSON_CreateObject();
    cJSON* arch = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("LlamaForCausalLM"));
    cJSON_AddStringToObject(j, "model_type", "llama");
    cJSON_AddNumberToObject(j, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(j, "hidden_size", c->channels);
    cJSON_AddNumberToObject(j, "intermediate_size", c->ffn_hidden);
    cJSON_AddNumberToObject(j, "num_hidden_layers", c->num_layers);
    cJSON_AddNumberToObject(j, "num_attention_heads", c->num_heads);
    cJSON_AddNumberToObject(j, "num_key_value_heads", c->num_kv_heads);
    cJSON_AddNumberToObject(j, "head_dim", c->channels / c->num_heads);
    cJSON_AddNumberToObject(j, "max_position_embeddings", c->max_seq_len);
    cJSON_AddNumberToObject(j, "rms_norm_eps", c->norm_eps);
    cJSON_AddNumberToObject(j, "rope_theta", c->rope_theta);
    cJSON_AddNullToObject(j, "rope_scaling");
    cJSON_AddStringToObject(j, "hidden_act", "silu");
    cJSON_AddBoolToObject(j, "attention_bias", 0);
    cJSON_AddBoolToObject(j, "mlp_bias", 0);
    cJSON_AddNumberToObject(j, "attention_dropout", 0.0);
    cJSON_AddBoolToObject(j, "tie_word_embeddings", 0);
    cJSON_AddNumberToObject(j, "initializer_range", 0.02);
    if (eos >= 0) {
        cJSON_AddNumberToObject(j, "bos_token_id", eos);
        cJSON_AddNumberToObject(j, "eos_token_id", eos);
    }
    cJSON_AddStringToObject(j, "torch_dtype", "float32");
    cJSON_AddBoolToObject(j, "use_cache", 1);
    return j;
}

// The directory (see the top of this file), whole or not at all (llmc/io/hf_files.h's HfExportDir: an
// earlier export in dir, of either family, is replaced, a failure leaves nothing): values (num_params)
// fp32 in our order; eos as in llama_hf_config_json.
static inline int llama_hf_export(const char* dir, const LlamaConfig* c, const float* values, int eos, char* err,
                                  size_t errlen) {
    HfExportDir x;
    if (hf_export_begin(&x, dir, err, errlen) != 0) return -1;
    char path[SAFETENSORS_PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/model.safetensors", x.tmp);
    int rc = hf_write_json(x.tmp, "config.json", llama_hf_config_json(c, eos), err, errlen);
    if (rc == 0) rc = llama_hf_write_safetensors(path, c, values, err, errlen);
    if (rc == 0) rc = hf_export_commit(&x, err, errlen);
    if (rc != 0) hf_export_abort(&x);
    return rc;
}
