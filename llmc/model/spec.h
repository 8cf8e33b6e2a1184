// spec.h: host-only C. A model family as data: what its block is made of (LayerNorm or RMSNorm, learned
// positions or RoPE, a GELU MLP with biases or SwiGLU without, biases on the attention's linear layers
// or not, grouped-query heads, a tied or untied LM head), one config for every family's sizes, and the
// family's tensor table: each parameter tensor in the family's order with its role, short name, shape,
// weight decay, init and Hugging Face name(s). GPT-2 and the Llama-style model are two instances of the
// table; the GPU model (llmc/model/model.cuh), the checkpoint (llmc/io/model_checkpoint.cuh), the Hugging
// Face export and import (llmc/io/hf_model.h, llmc/io/hf_model_import.h) and the CPU reference walk it.
//
// The tensors, weights (out, in), each per-layer tensor one block of L layers:
//   GPT-2 (llm.c's order): wte (Vp, C), wpe (maxT, C), ln1w, ln1b (L, C), qkvw (L, 3C, C), qkvb (L, 3C),
//     attprojw (L, C, C), attprojb (L, C), ln2w, ln2b (L, C), fcw (L, 4C, C), fcb (L, 4C),
//     fcprojw (L, C, 4C), fcprojb (L, C), lnfw, lnfb (C)
//   Llama-style (the forward's order): embed (Vp, C), attn_norm (L, C),
//     wqkv (L, (NH + 2 NKV) hs, C), wo (L, C, C), ffn_norm (L, C), w_gateup (L, 2F, C), w_down (L, C, F),
//     final_norm (C), lm_head (Vp, C)
// In one config GPT-2 is NKV = NH and F = 4C, so that the shapes above are the same formulas for both:
// qkv rows C + 2 NKV hs (q's NH hs = C, then k's and v's), the MLP's first matrix F rows (GELU) or 2F
// (SwiGLU: gate | up), its second (C, F). A new family is a new table and spec below; a new block option a field of ModelSpec, the
// tensors it adds with their roles, and at most one kernel file in llmc/layers/.
#pragma once
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "../core/rand.h"

// The families: the checkpoint header's ids (llmc/io/checkpoint.h, CHECKPOINT_FAMILY_*).
#define MODEL_FAMILY_GPT2 0
#define MODEL_FAMILY_LLAMA 1
#define MODEL_NUM_FAMILIES 2

// The largest sizes a model read from elsewhere may have (a Hugging Face import checks them before
// anything is sized by them): each well above the largest real models' (Llama 3.1 405B: 126 layers,
// C 16384, F 53248, 128 heads, V 128256; GPT-2's largest has 48 layers). Within them every count and
// product of sizes below fits its type: the parameters are fewer than 2^56.
#define MODEL_MAX_LAYERS 1024
#define MODEL_MAX_CHANNELS 65536
#define MODEL_MAX_HEADS 1024       // query heads, and key/value heads
#define MODEL_MAX_FFN 262144
#define MODEL_MAX_VOCAB (1 << 22)
#define MODEL_MAX_ROPE_THETA 1e12  // the checkpoint reader's bound too (llmc/io/checkpoint_read.h)

// One config for every family: the union of their sizes.
typedef struct {
    int family;             // MODEL_FAMILY_*
    int vocab_size;         // V (50257 for GPT-2, 200019 for o200k_base)
    int padded_vocab_size;  // Vp >= V: rows of the token embedding (and of an untied head), model_padded_vocab
    int max_seq_len;        // maxT: the longest sequence, the rows of a learned position table
    int num_layers;         // L
    int channels;           // C, a multiple of 8
    int num_heads;          // NH query heads; hs = C / NH
    int num_kv_heads;       // NKV key/value heads, divides NH (grouped-query attention); GPT-2: NH
    int ffn_hidden;         // F: the MLP's hidden width (the input of its second matrix); GPT-2: 4C
    double rope_theta;      // RoPE's base (Llama 2: 1e4, Llama 3: 5e5); 0 without RoPE
    double norm_eps;        // the norm's eps: RMSNorm's, inside the square root; GPT-2's LayerNorm uses 1e-5
} ModelConfig;

// --- the block's choices -------------------------------------------------------------------------

enum { MODEL_NORM_LAYERNORM, MODEL_NORM_RMSNORM };  // LayerNorm: weight and bias; RMSNorm: weight, config's eps
enum { MODEL_POS_LEARNED, MODEL_POS_ROPE };         // a (maxT, C) table added to the embedding, or RoPE on q, k
enum { MODEL_MLP_GELU, MODEL_MLP_SWIGLU };          // fc (F) -> tanh GELU -> proj, or gate | up (2F) -> silu · up -> down

// The roles a tensor plays in the block: what the model's code asks the table for. A family has each
// role at most once; the GPU model's parameter struct has one pointer per role (NULL where absent).
enum {
    MODEL_ROLE_TOKEN_EMBED,   // (Vp, C)
    MODEL_ROLE_POS_EMBED,     // (maxT, C) learned positions
    MODEL_ROLE_NORM1_W,       // (L, C) the norm before attention
    MODEL_ROLE_NORM1_B,
    MODEL_ROLE_QKV_W,         // (L, QKV, C)
    MODEL_ROLE_QKV_B,         // (L, QKV)
    MODEL_ROLE_ATTPROJ_W,     // (L, C, C)
    MODEL_ROLE_ATTPROJ_B,     // (L, C)
    MODEL_ROLE_NORM2_W,       // (L, C) the norm before the MLP
    MODEL_ROLE_NORM2_B,
    MODEL_ROLE_FC_W,          // (L, UP, C): fc, or gate | up
    MODEL_ROLE_FC_B,          // (L, UP)
    MODEL_ROLE_FCPROJ_W,      // (L, C, F): the MLP's projection back to C
    MODEL_ROLE_FCPROJ_B,      // (L, C)
    MODEL_ROLE_NORMF_W,       // (C) the final norm
    MODEL_ROLE_NORMF_B,
    MODEL_ROLE_LM_HEAD,       // (Vp, C) an untied head
    MODEL_NUM_ROLES
};

// The sizes a shape is made of.
enum {
    MODEL_DIM_ONE,    // 1: the rows of a vector
    MODEL_DIM_C,      // C
    MODEL_DIM_VP,     // Vp (Hugging Face's files hold V rows: the padded rows are dropped, zero on import)
    MODEL_DIM_MAXT,   // maxT
    MODEL_DIM_QKV,    // (NH + 2 NKV) hs: q, k, v stacked
    MODEL_DIM_Q,      // NH hs = C: q's rows of qkv
    MODEL_DIM_KV,     // NKV hs = C · NKV / NH: k's rows, and v's
    MODEL_DIM_UP,     // the MLP's first matrix: F (GELU) or 2F (SwiGLU: gate | up)
    MODEL_DIM_F       // F
};

// Random init of a tensor: Box-Muller normals on splitmix64 (llmc/core/rand.h), drawn tensor by tensor
// in table order (the CPU references' order); a tensor of Vp rows draws its first V rows, the rest 0.
enum {
    MODEL_INIT_NORMAL,  // N(0, 0.02)
    MODEL_INIT_RESID,   // N(0, 0.02/√(2L)): the projections back into the residual stream
    MODEL_INIT_ONES,    // norm weights; draws nothing
    MODEL_INIT_ZEROS    // biases; draws nothing
};

// A tensor in Hugging Face's layout: a whole tensor is one part; a stacked one (Llama's qkv_proj =
// q_proj | k_proj | v_proj, gate_up = gate_proj | up_proj) is cut into parts of consecutive rows.
typedef struct {
    const char* name;  // the name, "%d" the layer for a per-layer tensor
    int rows;          // MODEL_DIM_*: the part's rows
} ModelHfPart;

typedef struct {
    int role;                  // MODEL_ROLE_*
    const char* name;          // the short name ("wte", "qkvw", "wqkv" ...): messages, tests, dumps
    int per_layer;             // (L, rows, cols) or (rows, cols)
    int rows, cols;            // MODEL_DIM_*: (out, in) for a weight; a vector is (ONE, n)
    int decay;                 // AdamW's weight decay applies
    int init;                  // MODEL_INIT_*
    int hf_transpose;          // stored (in, out) in Hugging Face's files (GPT-2's Conv1D)
    int hf_num_parts;          // 1 for a whole tensor; 0: not stored (none here)
    ModelHfPart hf_parts[3];
} ModelTensorSpec;

typedef struct {
    int family;                // MODEL_FAMILY_*
    const char* name;          // "GPT-2", "Llama-style": messages
    const char* flag;          // -model's value: "gpt2", "llama"
    int norm;                  // MODEL_NORM_*
    int positions;             // MODEL_POS_*
    int mlp;                   // MODEL_MLP_*
    int attn_bias;             // qkv and the attention's projection have biases
    int mlp_bias;              // the MLP's two matrices have biases
    int tied_head;             // the LM head is the token embedding (no LM_HEAD tensor)
    int header_sizes;          // the checkpoint header carries NKV, F, RoPE theta and eps (slots 30..35);
                               // GPT-2's leaves them 0, so its checkpoints' bytes do not depend on them
    int max_seq_len;           // the trainer's context: wpe's rows, or config.json's max_position_embeddings
    const char* hf_prefix;     // the prefix Hugging Face's own files may put before the names ("transformer.")
    int num_tensors;
    const ModelTensorSpec* tensors;
} ModelSpec;

// GPT-2's tensors in llm.c's order, its Hugging Face names without the "transformer." prefix. The LM head
// is tied to wte, so GPT2LMHeadModel's lm_head.weight is not stored (transformers ties it on load).
static const ModelTensorSpec model_gpt2_tensors[] = {
    {MODEL_ROLE_TOKEN_EMBED, "wte", 0, MODEL_DIM_VP, MODEL_DIM_C, 1, MODEL_INIT_NORMAL, 0, 1, {{"wte.weight", MODEL_DIM_VP}}},
    {MODEL_ROLE_POS_EMBED, "wpe", 0, MODEL_DIM_MAXT, MODEL_DIM_C, 1, MODEL_INIT_NORMAL, 0, 1, {{"wpe.weight", MODEL_DIM_MAXT}}},
    {MODEL_ROLE_NORM1_W, "ln1w", 1, MODEL_DIM_ONE, MODEL_DIM_C, 0, MODEL_INIT_ONES, 0, 1, {{"h.%d.ln_1.weight", MODEL_DIM_ONE}}},
    {MODEL_ROLE_NORM1_B, "ln1b", 1, MODEL_DIM_ONE, MODEL_DIM_C, 0, MODEL_INIT_ZEROS, 0, 1, {{"h.%d.ln_1.bias", MODEL_DIM_ONE}}},
    {MODEL_ROLE_QKV_W, "qkvw", 1, MODEL_DIM_QKV, MODEL_DIM_C, 1, MODEL_INIT_NORMAL, 1, 1,
     {{"h.%d.attn.c_attn.weight", MODEL_DIM_QKV}}},
    {MODEL_ROLE_QKV_B, "qkvb", 1, MODEL_DIM_ONE, MODEL_DIM_QKV, 0, MODEL_INIT_ZEROS, 0, 1,
     {{"h.%d.attn.c_attn.bias", MODEL_DIM_ONE}}},
    {MODEL_ROLE_ATTPROJ_W, "attprojw", 1, MODEL_DIM_C, MODEL_DIM_C, 1, MODEL_INIT_RESID, 1, 1,
     {{"h.%d.attn.c_proj.weight", MODEL_DIM_C}}},
    {MODEL_ROLE_ATTPROJ_B, "attprojb", 1, MODEL_DIM_ONE, MODEL_DIM_C, 0, MODEL_INIT_ZEROS, 0, 1,
     {{"h.%d.attn.c_proj.bias", MODEL_DIM_ONE}}},
    {MODEL_ROLE_NORM2_W, "ln2w", 1, MODEL_DIM_ONE, MODEL_DIM_C, 0, MODEL_INIT_ONES, 0, 1, {{"h.%d.ln_2.weight", MODEL_DIM_ONE}}},
    {MODEL_ROLE_NORM2_B, "ln2b", 1, MODEL_DIM_ONE, MODEL_DIM_C, 0, MODEL_INIT_ZEROS, 0, 1, {{"h.%d.ln_2.bias", MODEL_DIM_ONE}}},
    {MODEL_ROLE_FC_W, "fcw", 1, MODEL_DIM_UP, MODEL_DIM_C, 1, MODEL_INIT_NORMAL, 1, 1, {{"h.%d.mlp.c_fc.weight", MODEL_DIM_UP}}},
    {MODEL_ROLE_FC_B, "fcb", 1, MODEL_DIM_ONE, MODEL_DIM_UP, 0, MODEL_INIT_ZEROS, 0, 1, {{"h.%d.mlp.c_fc.bias", MODEL_DIM_ONE}}},
    {MODEL_ROLE_FCPROJ_W, "fcprojw", 1, MODEL_DIM_C, MODEL_DIM_F, 1, MODEL_INIT_RESID, 1, 1,
     {{"h.%d.mlp.c_proj.weight", MODEL_DIM_C}}},
    {MODEL_ROLE_FCPROJ_B, "fcprojb", 1, MODEL_DIM_ONE, MODEL_DIM_C, 0, MODEL_INIT_ZEROS, 0, 1,
     {{"h.%d.mlp.c_proj.bias", MODEL_DIM_ONE}}},
    {MODEL_ROLE_NORMF_W, "lnfw", 0, MODEL_DIM_ONE, MODEL_DIM_C, 0, MODEL_INIT_ONES, 0, 1, {{"ln_f.weight", MODEL_DIM_ONE}}},
    {MODEL_ROLE_NORMF_B, "lnfb", 0, MODEL_DIM_ONE, MODEL_DIM_C, 0, MODEL_INIT_ZEROS, 0, 1, {{"ln_f.bias", MODEL_DIM_ONE}}},
};

// The Llama-style tensors, with LlamaForCausalLM's names. Ours and nn.Linear's weights are both (out,
// in): nothing is transposed, the stacked projections are cut into their parts, and RoPE is Hugging
// Face's rotate_half convention on both sides (llmc/layers/rope.cuh), so q_proj and k_proj need no row
// permutation.
static const ModelTensorSpec model_llama_tensors[] = {
    {MODEL_ROLE_TOKEN_EMBED, "embed", 0, MODEL_DIM_VP, MODEL_DIM_C, 1, MODEL_INIT_NORMAL, 0, 1,
     {{"model.embed_tokens.weight", MODEL_DIM_VP}}},
    {MODEL_ROLE_NORM1_W, "attn_norm", 1, MODEL_DIM_ONE, MODEL_DIM_C, 0, MODEL_INIT_ONES, 0, 1,
     {{"model.layers.%d.input_layernorm.weight", MODEL_DIM_ONE}}},
    {MODEL_ROLE_QKV_W, "wqkv", 1, MODEL_DIM_QKV, MODEL_DIM_C, 1, MODEL_INIT_NORMAL, 0, 3,
     {{"model.layers.%d.self_attn.q_proj.weight", MODEL_DIM_Q}, {"model.layers.%d.self_attn.k_proj.weight", MODEL_DIM_KV},
      {"model.layers.%d.self_attn.v_proj.weight", MODEL_DIM_KV}}},
    {MODEL_ROLE_ATTPROJ_W, "wo", 1, MODEL_DIM_C, MODEL_DIM_C, 1, MODEL_INIT_RESID, 0, 1,
     {{"model.layers.%d.self_attn.o_proj.weight", MODEL_DIM_C}}},
    {MODEL_ROLE_NORM2_W, "ffn_norm", 1, MODEL_DIM_ONE, MODEL_DIM_C, 0, MODEL_INIT_ONES, 0, 1,
     {{"model.layers.%d.post_attention_layernorm.weight", MODEL_DIM_ONE}}},
    {MODEL_ROLE_FC_W, "w_gateup", 1, MODEL_DIM_UP, MODEL_DIM_C, 1, MODEL_INIT_NORMAL, 0, 2,
     {{"model.layers.%d.mlp.gate_proj.weight", MODEL_DIM_F}, {"model.layers.%d.mlp.up_proj.weight", MODEL_DIM_F}}},
    {MODEL_ROLE_FCPROJ_W, "w_down", 1, MODEL_DIM_C, MODEL_DIM_F, 1, MODEL_INIT_RESID, 0, 1,
     {{"model.layers.%d.mlp.down_proj.weight", MODEL_DIM_C}}},
    {MODEL_ROLE_NORMF_W, "final_norm", 0, MODEL_DIM_ONE, MODEL_DIM_C, 0, MODEL_INIT_ONES, 0, 1,
     {{"model.norm.weight", MODEL_DIM_ONE}}},
    {MODEL_ROLE_LM_HEAD, "lm_head", 0, MODEL_DIM_VP, MODEL_DIM_C, 1, MODEL_INIT_NORMAL, 0, 1,
     {{"lm_head.weight", MODEL_DIM_VP}}},
};

#define MODEL_TABLE_LEN(t) ((int)(sizeof(t) / sizeof((t)[0])))
#define MODEL_MAX_TENSORS 16  // the most tensors of a family (GPT-2's)

static const ModelSpec model_specs[MODEL_NUM_FAMILIES] = {
    {MODEL_FAMILY_GPT2, "GPT-2", "gpt2", MODEL_NORM_LAYERNORM, MODEL_POS_LEARNED, MODEL_MLP_GELU, 1, 1, 1, 0, 1024,
     "transformer.", MODEL_TABLE_LEN(model_gpt2_tensors), model_gpt2_tensors},
    {MODEL_FAMILY_LLAMA, "Llama-style", "llama", MODEL_NORM_RMSNORM, MODEL_POS_ROPE, MODEL_MLP_SWIGLU, 0, 0, 0, 1, 4096,
     "", MODEL_TABLE_LEN(model_llama_tensors), model_llama_tensors},
};

// The spec of a family, or NULL for an unknown id.
static inline const ModelSpec* model_spec(int family) {
    return family >= 0 && family < MODEL_NUM_FAMILIES ? &model_specs[family] : NULL;
}

// The index in s's table of the tensor playing `role`, or -1 when the family has none.
static inline int model_tensor_index(const ModelSpec* s, int role) {
    for (int i = 0; i < s->num_tensors; i++)
        if (s->tensors[i].role == role) return i;
    return -1;
}

// --- sizes ---------------------------------------------------------------------------------------

// Vp: V rounded up to a multiple of 128, for fast GEMMs (GPT-2: 50257 -> 50304).
static inline int model_padded_vocab(int V) { return (V + 127) / 128 * 128; }

// The value of dimension d for config c (64-bit: no size within MODEL_MAX_* overflows it). The key and
// value rows are C · NKV / NH, which is NKV hs when NH divides C (every model built or imported) and 2C
// of qkv's 3C rows for GPT-2 (NKV = NH) whatever its heads: its tensors' shapes never depend on them.
static inline int64_t model_dim(const ModelConfig* c, int d) {
    int64_t kv = c->num_heads > 0 ? (int64_t)c->channels * c->num_kv_heads / c->num_heads : 0;
    const ModelSpec* s = model_spec(c->family);
    switch (d) {
    case MODEL_DIM_ONE: return 1;
    case MODEL_DIM_C: return c->channels;
    case MODEL_DIM_VP: return c->padded_vocab_size;
    case MODEL_DIM_MAXT: return c->max_seq_len;
    case MODEL_DIM_QKV: return (int64_t)c->channels + 2 * kv;
    case MODEL_DIM_Q: return c->channels;
    case MODEL_DIM_KV: return kv;
    case MODEL_DIM_UP: return (s && s->mlp == MODEL_MLP_SWIGLU ? 2 : 1) * (int64_t)c->ffn_hidden;
    case MODEL_DIM_F: return c->ffn_hidden;
    }
    return 0;
}

// Rows of qkv: NH query heads, NKV key heads, NKV value heads.
static inline int64_t model_qkv_dim(const ModelConfig* c) { return model_dim(c, MODEL_DIM_QKV); }

// The elements of tensor i of c's family, all layers.
static inline size_t model_tensor_size(const ModelConfig* c, int i) {
    const ModelTensorSpec* t = &model_spec(c->family)->tensors[i];
    size_t per = (size_t)model_dim(c, t->rows) * (size_t)model_dim(c, t->cols);
    return t->per_layer ? (size_t)c->num_layers * per : per;
}

// Sizes and offsets (in elements, in table order) of c's tensors; returns the parameter count.
static inline size_t model_tensor_layout(const ModelConfig* c, size_t size[MODEL_MAX_TENSORS],
                                         size_t offset[MODEL_MAX_TENSORS]) {
    const ModelSpec* s = model_spec(c->family);
    size_t n = 0;
    for (int i = 0; i < s->num_tensors; i++) {
        size[i] = model_tensor_size(c, i);
        offset[i] = n;
        n += size[i];
    }
    return n;
}

static inline size_t model_num_params(const ModelConfig* c) {
    size_t size[MODEL_MAX_TENSORS], offset[MODEL_MAX_TENSORS];
    return model_tensor_layout(c, size, offset);
}

// The init of c's parameters into values (model_num_params(c), table order), from seed: see
// MODEL_INIT_*. The same numbers as the CPU references' init for the same seed.
static inline void model_init_values(const ModelConfig* c, float* values, uint64_t seed) {
    const ModelSpec* s = model_spec(c->family);
    size_t size[MODEL_MAX_TENSORS], offset[MODEL_MAX_TENSORS];
    model_tensor_layout(c, size, offset);
    double resid_std = 0.02 / sqrt(2.0 * c->num_layers);
    uint64_t rng = seed;
    for (int i = 0; i < s->num_tensors; i++) {
        const ModelTensorSpec* t = &s->tensors[i];
        float* p = values + offset[i];
        int random = t->init == MODEL_INIT_NORMAL || t->init == MODEL_INIT_RESID;
        size_t n = !random ? 0 : t->rows == MODEL_DIM_VP ? (size_t)c->vocab_size * (size_t)model_dim(c, t->cols) : size[i];
        double std = t->init == MODEL_INIT_RESID ? resid_std : 0.02;
        float rest = t->init == MODEL_INIT_ONES ? 1.0f : 0.0f;
        for (size_t j = 0; j < size[i]; j++) p[j] = j < n ? (float)(std * rand_normal(&rng)) : rest;
    }
}

// A config of `family` with these sizes.
static inline ModelConfig model_config_sizes(int family, int vocab_size, int padded_vocab_size, int max_seq_len,
                                             int num_layers, int channels, int num_heads, int num_kv_heads,
                                             int ffn_hidden, double rope_theta, double norm_eps) {
    ModelConfig c = {family, vocab_size, padded_vocab_size, max_seq_len, num_layers, channels, num_heads,
                     num_kv_heads, ffn_hidden, rope_theta, norm_eps};
    return c;
}

// A GPT-2 config of these sizes: NKV = NH, F = 4C, LayerNorm's eps 1e-5, no RoPE (what reading a GPT-2
// from elsewhere gives).
static inline ModelConfig model_config_gpt2_sizes(int max_seq_len, int vocab_size, int padded_vocab_size,
                                                  int num_layers, int num_heads, int channels) {
    return model_config_sizes(MODEL_FAMILY_GPT2, vocab_size, padded_vocab_size, max_seq_len, num_layers, channels,
                              num_heads, num_heads, 4 * channels, 0.0, 1e-5);
}

// A Llama-style config of these sizes.
static inline ModelConfig model_config_llama_sizes(int vocab_size, int padded_vocab_size, int max_seq_len,
                                                   int num_layers, int channels, int num_heads, int num_kv_heads,
                                                   int ffn_hidden, double rope_theta, double norm_eps) {
    return model_config_sizes(MODEL_FAMILY_LLAMA, vocab_size, padded_vocab_size, max_seq_len, num_layers, channels,
                              num_heads, num_kv_heads, ffn_hidden, rope_theta, norm_eps);
}

// --- named sizes ---------------------------------------------------------------------------------
// GPT-2 by depth: head size 64 throughout, F = 4C. The Llama-style sizes are named by their parameters
// outside the embedding and the LM head (Kaplan et al.'s non-embedding count), since at V = 200019
// those two tables alone are 2·Vp·C, 205M parameters at C = 512 and 820M at C = 2048, more than the
// layers of every size but the largest. One recipe: hs 64 (128 at C = 2048), NKV = NH/4, F = 8C/3
// rounded up to a multiple of 256 (Llama's SwiGLU width), the depth that gives the name's count; RoPE
// theta 5e5 and eps 1e-5 (Llama 3). At V = 200019 (Vp = 200064):
//   name         L     C   NH  NKV  hs     F   layers + final norm   all parameters
//   llama-30m   10   512    8    2  64  1536               30.2M           235.0M
//   llama-125m  20   768   12    3  64  2048              123.9M           431.2M
//   llama-350m  20  1280   20    5  64  3584              357.2M           869.4M
//   llama-1b    22  2048   16    4 128  5632              992.0M          1811.5M
#define LLAMA_SIZE_NAMES "llama-30m, llama-125m, llama-350m, llama-1b"
#define GPT2_DEPTH_NAMES "6, 12, 24, 36, 48"

typedef struct {
    int family;
    const char* name;        // "d6" (GPT-2, -depth 6), "llama-30m"
    int L, C, NH, NKV, F;
} ModelSize;

static const ModelSize model_sizes[] = {
    {MODEL_FAMILY_GPT2, "d6", 6, 384, 6, 6, 1536},        {MODEL_FAMILY_GPT2, "d12", 12, 768, 12, 12, 3072},
    {MODEL_FAMILY_GPT2, "d24", 24, 1024, 16, 16, 4096},   {MODEL_FAMILY_GPT2, "d36", 36, 1280, 20, 20, 5120},
    {MODEL_FAMILY_GPT2, "d48", 48, 1600, 25, 25, 6400},
    {MODEL_FAMILY_LLAMA, "llama-30m", 10, 512, 8, 2, 1536}, {MODEL_FAMILY_LLAMA, "llama-125m", 20, 768, 12, 3, 2048},
    {MODEL_FAMILY_LLAMA, "llama-350m", 20, 1280, 20, 5, 3584}, {MODEL_FAMILY_LLAMA, "llama-1b", 22, 2048, 16, 4, 5632},
};
#define MODEL_NUM_SIZES MODEL_TABLE_LEN(model_sizes)

// Fills c with the family's named size for vocabulary V and sequences of up to max_seq_len tokens:
// Vp by model_padded_vocab; GPT-2's LayerNorm eps 1e-5 and no RoPE; the Llama-style RoPE theta 5e5
// and eps 1e-5. Returns 0, or -1 for an unknown name.
static inline int model_config_named(ModelConfig* c, int family, const char* name, int vocab_size, int max_seq_len) {
    for (int i = 0; i < MODEL_NUM_SIZES; i++) {
        const ModelSize* z = &model_sizes[i];
        if (z->family != family || strcmp(name, z->name) != 0) continue;
        const ModelSpec* s = model_spec(family);
        *c = model_config_sizes(family, vocab_size, model_padded_vocab(vocab_size), max_seq_len, z->L, z->C, z->NH,
                                z->NKV, z->F, s->positions == MODEL_POS_ROPE ? 500000.0 : 0.0, 1e-5);
        return 0;
    }
    return -1;
}

// GPT-2 of depth L (6, 12, 24, 36, 48): model_config_named of "d<L>".
static inline int model_config_gpt2(ModelConfig* c, int depth, int vocab_size, int max_seq_len) {
    char name[32];
    snprintf(name, sizeof(name), "d%d", depth);
    return model_config_named(c, MODEL_FAMILY_GPT2, name, vocab_size, max_seq_len);
}

// The name of the size of c's family whose layers c has (L, C, NH, NKV and F; the vocabulary, RoPE base
// and eps aside), or NULL: how a model read from elsewhere is matched to a size.
static inline const char* model_size_name(const ModelConfig* c) {
    for (int i = 0; i < MODEL_NUM_SIZES; i++) {
        const ModelSize* z = &model_sizes[i];
        if (z->family == c->family && c->num_layers == z->L && c->channels == z->C && c->num_heads == z->NH &&
            c->num_kv_heads == z->NKV && c->ffn_hidden == z->F)
            return z->name;
    }
    return NULL;
}
