// llama_config.h: host-only. The Llama-style model's sizes, its parameter tensors and its named sizes.
// The tensors, in the order of dev/ref/llama_ref.h (the forward's order; each tensor type one block over
// the layers, as GPT-2's in llmc/model/gpt_config.h), weights (out, in):
//   embed (Vp, C), attn_norm (L, C), wqkv (L, (NH + 2 NKV) hs, C), wo (L, C, C), ffn_norm (L, C),
//   w_gateup (L, 2F, C), w_down (L, C, F), final_norm (C), lm_head (Vp, C)
// wqkv's rows are q_proj (NH hs), then k_proj (NKV hs), then v_proj (NKV hs); w_gateup's are gate_proj
// (F), then up_proj (F). Each Hugging Face tensor of a layer is one contiguous slice, and the RoPE
// convention is Hugging Face's (rotate_half), so an export to LlamaForCausalLM is a copy: the names
// below are its module names (model.layers.{l}.self_attn.q_proj.weight is the first NH hs rows of
// "self_attn.qkv_proj" of layer l). What the model is on the GPU is llama_layout.cuh; this part is shared
// with host-only tools.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    int vocab_size;         // V (200019 for o200k_base)
    int padded_vocab_size;  // Vp >= V: rows of embed and lm_head, a multiple of 128 for fast GEMMs
    int max_seq_len;        // maxT: the longest sequence (RoPE needs no table in the parameters)
    int num_layers;         // L
    int channels;           // C, a multiple of 8, at most 2048 (llmc/layers/rmsnorm.cuh keeps a row in registers)
    int num_heads;          // NH query heads; hs = C / NH, a multiple of 16 (64 or 128: flash attention)
    int num_kv_heads;       // NKV key/value heads, divides NH (grouped-query attention)
    int ffn_hidden;         // F: width of gate, up and the input of down, a multiple of 8
    double rope_theta;      // RoPE base (Llama 2: 1e4, Llama 3: 5e5)
    double norm_eps;        // RMSNorm's eps, inside the square root
} LlamaConfig;

enum {
    LLAMA_EMBED, LLAMA_ATTN_NORM, LLAMA_WQKV, LLAMA_WO, LLAMA_FFN_NORM, LLAMA_WGATEUP, LLAMA_WDOWN,
    LLAMA_FINAL_NORM, LLAMA_LM_HEAD, LLAMA_NUM_TENSORS
};

// The largest sizes a model read from elsewhere may have (llmc/io/llama_hf_import.h checks config.json
// against them before anything is sized by it): each well above the largest Llama models' (Llama 3.1
// 405B: 126 layers, C 16384, F 53248, 128 heads, V 128256). Within them every count and product of
// sizes below fits its type: the parameters are fewer than 2^56.
#define LLAMA_MAX_LAYERS 1024
#define LLAMA_MAX_CHANNELS 65536
#define LLAMA_MAX_HEADS 1024       // query heads, and key/value heads
#define LLAMA_MAX_FFN 262144
#define LLAMA_MAX_VOCAB (1 << 22)
#define LLAMA_MAX_ROPE_THETA 1e12  // the checkpoint reader's bound too (llmc/io/checkpoint_read.h)

// Rows of wqkv: NH query heads, NKV key heads, NKV value heads (64-bit: no size overflows it).
static inline int64_t llama_qkv_dim(const LlamaConfig* c) {
    return ((int64_t)c->num_heads + 2 * (int64_t)c->num_kv_heads) * (int64_t)(c->channels / c->num_heads);
}

static inline void llama_tensor_sizes(size_t s[LLAMA_NUM_TENSORS], const LlamaConfig* c) {
    size_t C = c->channels, L = c->num_layers, F = c->ffn_hidden, Vp = c->padded_vocab_size, QKV = (size_t)llama_qkv_dim(c);
    size_t v[LLAMA_NUM_TENSORS] = {Vp * C, L * C, L * QKV * C, L * C * C, L * C, L * 2 * F * C, L * C * F, C, Vp * C};
    for (int i = 0; i < LLAMA_NUM_TENSORS; i++) s[i] = v[i];
}

static inline size_t llama_num_params(const LlamaConfig* c) {
    size_t s[LLAMA_NUM_TENSORS], n = 0;
    llama_tensor_sizes(s, c);
    for (int i = 0; i < LLAMA_NUM_TENSORS; i++) n += s[i];
    return n;
}

// Hugging Face's module names (LlamaForCausalLM), "model." and "layers.{l}." left out; the stacked
// projections are named after their parts (qkv_proj = q_proj | k_proj | v_proj, gate_up_proj = gate_proj
// | up_proj).
static inline const char* llama_tensor_name(int i) {
    static const char* const n[LLAMA_NUM_TENSORS] = {
        "embed_tokens", "input_layernorm", "self_attn.qkv_proj", "self_attn.o_proj", "post_attention_layernorm",
        "mlp.gate_up_proj", "mlp.down_proj", "norm", "lm_head"};
    return i >= 0 && i < LLAMA_NUM_TENSORS ? n[i] : "?";
}

// The RMSNorm weights: 1 at init, no weight decay. Every other tensor is a 2-D weight matrix.
static inline int llama_tensor_is_norm(int i) {
    return i == LLAMA_ATTN_NORM || i == LLAMA_FFN_NORM || i == LLAMA_FINAL_NORM;
}

// --- named sizes ---------------------------------------------------------------------------------
// Named by their parameters outside the embedding and the LM head (Kaplan et al.'s non-embedding
// count), since at V = 200019 those two tables alone are 2·Vp·C, 205M parameters at C = 512 and 820M at
// C = 2048, more than the layers of every size but the largest. One recipe: hs 64 (128 at C = 2048), NKV
// = NH/4, F = 8C/3 rounded up to a multiple of 256 (Llama's SwiGLU width), the depth that gives the
// name's count; RoPE theta 5e5 and eps 1e-5 (Llama 3). At V = 200019 (Vp = 200064):
//   name         L     C   NH  NKV  hs     F   layers + final norm   all parameters
//   llama-30m   10   512    8    2  64  1536               30.2M           235.0M
//   llama-125m  20   768   12    3  64  2048              123.9M           431.2M
//   llama-350m  20  1280   20    5  64  3584              357.2M           869.4M
//   llama-1b    22  2048   16    4 128  5632              992.0M          1811.5M
#define LLAMA_SIZE_NAMES "llama-30m, llama-125m, llama-350m, llama-1b"

// Vp: V rounded up to a multiple of 128.
static inline int llama_padded_vocab(int V) { return (V + 127) / 128 * 128; }

static const struct { const char* name; int L, C, NH, NKV, F; } llama_sizes[] = {
    {"llama-30m", 10, 512, 8, 2, 1536}, {"llama-125m", 20, 768, 12, 3, 2048},
    {"llama-350m", 20, 1280, 20, 5, 3584}, {"llama-1b", 22, 2048, 16, 4, 5632}};
#define LLAMA_NUM_SIZES ((int)(sizeof(llama_sizes) / sizeof(llama_sizes[0])))

// Fills c with the named size for vocabulary V and sequences of up to max_seq_len tokens. Returns 0, or
// -1 for an unknown name (LLAMA_SIZE_NAMES lists the known ones).
static inline int llama_config_named(LlamaConfig* c, const char* name, int vocab_size, int max_seq_len) {
    for (int i = 0; i < LLAMA_NUM_SIZES; i++) {
        if (strcmp(name, llama_sizes[i].name) != 0) continue;
        c->vocab_size = vocab_size;
        c->padded_vocab_size = llama_padded_vocab(vocab_size);
        c->max_seq_len = max_seq_len;
        c->num_layers = llama_sizes[i].L;
        c->channels = llama_sizes[i].C;
        c->num_heads = llama_sizes[i].NH;
        c->num_kv_heads = llama_sizes[i].NKV;
        c->ffn_hidden = llama_sizes[i].F;
        c->rope_theta = 500000.0;
        c->norm_eps = 1e-5;
        return 0;
    }
    return -1;
}

// The name of the size whose layers c has (L, C, NH, NKV and F; the vocabulary, RoPE base and eps aside),
// or NULL: how a model read from elsewhere (llmc/io/llama_hf_import.h) is matched to -size.
static inline const char* llama_size_name(const LlamaConfig* c) {
    for (int i = 0; i < LLAMA_NUM_SIZES; i++)
        if (c->num_layers == llama_sizes[i].L && c->channels == llama_sizes[i].C && c->num_heads == llama_sizes[i].NH &&
            c->num_kv_heads == llama_sizes[i].NKV && c->ffn_hidden == llama_sizes[i].F)
            return llama_sizes[i].name;
    return NULL;
}
