// llama_ref.h: a CPU reference of a Llama-style model, forward and backward, in plain single-threaded C.
// It is the oracle for the CUDA kernels of the Llama-style family, and is itself checked against finite
// differences (dev/test/test_llama_ref.c, in double; test_llama_ref_float compares the float build).
//
// What is computed, for B sequences of T tokens (C channels, NH query heads and NKV key/value heads of
// hs = C/NH channels, FFN hidden size F, L layers):
//   x = embed[inputs]                                                   (B, T, C), no position table
//   for each layer:  x = x + wo · attention(rope(q), rope(k), v)        q, k, v = wqkv · attn_norm(x)
//                    x = x + w_down · (silu(gate) * up)                 gate, up = w_gateup · ffn_norm(x)
//   logits = lm_head · final_norm(x)                                    (B, T, Vp): untied from embed
//   loss = mean over the positions whose target is not -1 of CE(logits[:V], target)
// Norms are RMSNorm (Hugging Face's LlamaRMSNorm); RoPE is Hugging Face's rotate_half convention at
// positions 0..T-1; attention is causal, scale 1/sqrt(hs), query head h reads kv head h / (NH/NKV). No
// biases anywhere. The vocabulary is padded as in gpt_ref.h: rows >= V of embed and lm_head never count
// (inputs are < V, and logits >= V are left out of the softmax), so their gradient is exactly zero.
//
// Parameters live in ONE array, in this order (tensor ids LLAMA_REF_*):
//   embed (Vp, C), attn_norm (L, C), wqkv (L, (NH + 2 NKV) hs, C), wo (L, C, C), ffn_norm (L, C),
//   w_gateup (L, 2F, C), w_down (L, C, F), final_norm (C), lm_head (Vp, C).
// Weights are (out, in) row-major: y = x·Wᵀ. The order is the forward's, the order in which Hugging
// Face's LlamaForCausalLM applies its modules; each tensor type is one block over the layers, as in gpt_ref.h
// and llm.c, so layer l's slice sits at l times its size and weight decay goes by tensor. The projections
// that read the same input are stacked, so that each is one matmul (and one GEMM on the GPU):
//   wqkv rows: q_proj (NH hs rows), then k_proj (NKV hs), then v_proj (NKV hs);
//   w_gateup rows: gate_proj (F rows), then up_proj (F).
// Every Hugging Face tensor of a layer is thus one contiguous slice, so an export to LlamaForCausalLM is a
// copy (no permutation: the RoPE convention is already Hugging Face's), and the qkv activation keeps
// GPT-2's one-row-per-token shape, which the attention kernels read. Gradients and AdamW moments use
// the same layout.
//
// gpt_real is float, or double when GPT_REF_DOUBLE is defined before the include. Both this file and
// llama_ref_layers.h compile as C11 (gcc) and as C++17 (nvcc).
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../llmc/core/check.h"
#include "../../llmc/core/rand.h"
#include "llama_ref_layers.h" // gpt_real, the layers, and through it gpt_ref_layers.h

typedef struct {
    int max_seq_len;       // maxT: the longest T a batch may have (RoPE needs no table)
    int vocab_size;        // V: real tokens
    int padded_vocab_size; // Vp >= V: rows of embed and lm_head
    int num_layers;        // L
    int num_heads;         // NH query heads, divides C; hs = C / NH must be even (RoPE pairs)
    int num_kv_heads;      // NKV key/value heads, divides NH (NH: multi-head, 1: multi-query)
    int channels;          // C
    int ffn_hidden;        // F: width of gate, up and the input of down
    double rope_theta;     // RoPE base (Llama 2: 1e4, Llama 3: 5e5)
    double rms_norm_eps;   // inside the RMSNorm square root (Hugging Face's default: 1e-6)
} llama_ref_config;

enum {
    LLAMA_REF_EMBED, LLAMA_REF_ATTN_NORM, LLAMA_REF_WQKV, LLAMA_REF_WO, LLAMA_REF_FFN_NORM, LLAMA_REF_WGATEUP,
    LLAMA_REF_WDOWN, LLAMA_REF_FINAL_NORM, LLAMA_REF_LM_HEAD, LLAMA_REF_NUM_TENSORS
};

// Pointers into a parameter-shaped array (parameters, gradients).
typedef struct {
    gpt_real* embed;      // (Vp, C) rows >= V are padding
    gpt_real* attn_norm;  // (L, C)
    gpt_real* wqkv;       // (L, (NH + 2 NKV) hs, C)
    gpt_real* wo;         // (L, C, C)
    gpt_real* ffn_norm;   // (L, C)
    gpt_real* w_gateup;   // (L, 2F, C)
    gpt_real* w_down;     // (L, C, F)
    gpt_real* final_norm; // (C,)
    gpt_real* lm_head;    // (Vp, C) rows >= V are padding
} llama_ref_tensors;

// Forward activations for (B, T), one allocation, all kept (dense for the last forward's B, T).
typedef struct {
    gpt_real* encoded;    // (B, T, C) embed[token]: the stream entering layer 0
    gpt_real* attn_norm;  // (L, B, T, C)
    gpt_real* attn_rstd;  // (L, B, T)
    gpt_real* qkv;        // (L, B, T, (NH + 2 NKV) hs) q and k after RoPE (the backward needs only those)
    gpt_real* att;        // (L, B, NH, T, T) softmax probabilities; 0 above the diagonal
    gpt_real* atty;       // (L, B, T, C) attention output, heads side by side, before wo
    gpt_real* residual2;  // (L, B, T, C) stream after the attention half of the block
    gpt_real* ffn_norm;   // (L, B, T, C)
    gpt_real* ffn_rstd;   // (L, B, T)
    gpt_real* gateup;     // (L, B, T, 2F) gate, then up, before SwiGLU
    gpt_real* swiglu;     // (L, B, T, F) silu(gate) * up
    gpt_real* residual3;  // (L, B, T, C) block output
    gpt_real* final_norm; // (B, T, C)
    gpt_real* final_rstd; // (B, T)
    gpt_real* logits;     // (B, T, Vp) columns >= V are computed but never used
    gpt_real* lse;        // (B, T) logsumexp of logits[:V]
    gpt_real* losses;     // (B, T) cross-entropy per position; 0 where the target is -1
} llama_ref_acts;

#define LLAMA_REF_NUM_ACTS 17

// Backward scratch, reused by every layer; dresidual carries the stream's gradient down the layers.
typedef struct {
    gpt_real* dlogits;   // (B, T, Vp)
    gpt_real* dresidual; // (B, T, C)
    gpt_real* dnorm;     // (B, T, C) gradient of an RMSNorm output (final, ffn, attn in turn)
    gpt_real* datty;     // (B, T, C)
    gpt_real* dqkv;      // (B, T, (NH + 2 NKV) hs) after RoPE, then rotated back in place
    gpt_real* dgateup;   // (B, T, 2F)
    gpt_real* dswiglu;   // (B, T, F)
} llama_ref_bwd;

typedef struct {
    llama_ref_config config;
    int max_B, max_T;          // what the activations are allocated for
    int B, T;                  // of the last forward
    size_t num_params;
    gpt_real* params_memory;   // (num_params,) the parameters, also AdamW's master weights
    gpt_real* grads_memory;    // (num_params,)
    gpt_real* m_memory;        // (num_params,) AdamW first moment
    gpt_real* v_memory;        // (num_params,) AdamW second moment
    llama_ref_tensors params;  // into params_memory
    llama_ref_tensors grads;   // into grads_memory
    gpt_real* acts_memory;
    llama_ref_acts acts;
    gpt_real* bwd_memory;
    llama_ref_bwd bwd;
    int* inputs;               // (max_B * max_T) the last forward's inputs, for the backward
    int* targets;              // (max_B * max_T) and its targets
    int has_targets;           // the last forward computed a loss (the backward needs one)
    int num_counted;           // positions with target != -1 in the last forward
    gpt_real mean_loss;        // of the last forward, -1 without targets
} llama_ref_model;

// --- layout ------------------------------------------------------------------------------------

// Rows of wqkv: NH query heads, NKV key heads, NKV value heads.
static inline int llama_ref_qkv_dim(const llama_ref_config* c) {
    return (c->num_heads + 2 * c->num_kv_heads) * (c->channels / c->num_heads);
}

static inline void llama_ref_tensor_sizes(size_t sizes[LLAMA_REF_NUM_TENSORS], const llama_ref_config* c) {
    size_t C = (size_t)c->channels, L = (size_t)c->num_layers, F = (size_t)c->ffn_hidden;
    size_t Vp = (size_t)c->padded_vocab_size, QKV = (size_t)llama_ref_qkv_dim(c);
    size_t s[LLAMA_REF_NUM_TENSORS] = {Vp * C, L * C, L * QKV * C, L * C * C, L * C, L * 2 * F * C, L * C * F, C, Vp * C};
    memcpy(sizes, s, sizeof(s));
}

static inline const char* llama_ref_tensor_name(int i) {
    static const char* const names[LLAMA_REF_NUM_TENSORS] = {
        "embed", "attn_norm", "wqkv", "wo", "ffn_norm", "w_gateup", "w_down", "final_norm", "lm_head"};
    return (i >= 0 && i < LLAMA_REF_NUM_TENSORS) ? names[i] : "?";
}

// The RMSNorm weights (1 at init, no weight decay); every other tensor is a 2-D weight matrix.
static inline int llama_ref_tensor_is_norm(int i) {
    return i == LLAMA_REF_ATTN_NORM || i == LLAMA_REF_FFN_NORM || i == LLAMA_REF_FINAL_NORM;
}

static inline int llama_ref_tensor_decays(int i) {
    return !llama_ref_tensor_is_norm(i);
}

static inline size_t llama_ref_point_tensors(llama_ref_tensors* t, gpt_real* base, const llama_ref_config* c) {
    gpt_real** const ptrs[LLAMA_REF_NUM_TENSORS] = {
        &t->embed, &t->attn_norm, &t->wqkv, &t->wo, &t->ffn_norm, &t->w_gateup, &t->w_down, &t->final_norm,
        &t->lm_head};
    size_t sizes[LLAMA_REF_NUM_TENSORS];
    llama_ref_tensor_sizes(sizes, c);
    return gpt_ref_carve(ptrs, sizes, LLAMA_REF_NUM_TENSORS, base);
}

static inline size_t llama_ref_point_acts(llama_ref_acts* a, gpt_real* base, const llama_ref_config* c, int B, int T) {
    size_t L = (size_t)c->num_layers, C = (size_t)c->channels, NH = (size_t)c->num_heads;
    size_t F = (size_t)c->ffn_hidden, QKV = (size_t)llama_ref_qkv_dim(c), BT = (size_t)B * (size_t)T;
    gpt_real** const ptrs[LLAMA_REF_NUM_ACTS] = {
        &a->encoded, &a->attn_norm, &a->attn_rstd, &a->qkv, &a->att, &a->atty, &a->residual2, &a->ffn_norm,
        &a->ffn_rstd, &a->gateup, &a->swiglu, &a->residual3, &a->final_norm, &a->final_rstd, &a->logits,
        &a->lse, &a->losses};
    size_t sizes[LLAMA_REF_NUM_ACTS] = {
        BT * C, L * BT * C, L * BT, L * BT * QKV, L * BT * NH * (size_t)T, L * BT * C, L * BT * C, L * BT * C,
        L * BT, L * BT * 2 * F, L * BT * F, L * BT * C, BT * C, BT, BT * (size_t)c->padded_vocab_size, BT, BT};
    return gpt_ref_carve(ptrs, sizes, LLAMA_REF_NUM_ACTS, base);
}

static inline size_t llama_ref_point_bwd(llama_ref_bwd* g, gpt_real* base, const llama_ref_config* c, int B, int T) {
    size_t C = (size_t)c->channels, F = (size_t)c->ffn_hidden, BT = (size_t)B * (size_t)T;
    gpt_real** const ptrs[7] = {&g->dlogits, &g->dresidual, &g->dnorm, &g->datty, &g->dqkv, &g->dgateup, &g->dswiglu};
    size_t sizes[7] = {BT * (size_t)c->padded_vocab_size, BT * C, BT * C, BT * C,
                       BT * (size_t)llama_ref_qkv_dim(c), BT * 2 * F, BT * F};
    return gpt_ref_carve(ptrs, sizes, 7, base);
}

// --- the model ---------------------------------------------------------------------------------

// Allocates parameters (zeroed), gradients, AdamW state, and activations for up to B x T tokens.
static inline void llama_ref_build(llama_ref_model* m, const llama_ref_config* config, int B, int T) {
    const llama_ref_config* c = config;
    if (c->channels <= 0 || c->num_layers <= 0 || c->num_heads <= 0 || c->num_kv_heads <= 0 ||
        c->vocab_size <= 0 || c->max_seq_len <= 0 || c->ffn_hidden <= 0)
        check_fail("llama_ref_build: every size in the config must be positive", "fill in the whole llama_ref_config");
    if (c->channels % c->num_heads != 0 || (c->channels / c->num_heads) % 2 != 0)
        check_fail("llama_ref_build: head size C / NH must be a whole, even number", "RoPE rotates channel pairs");
    if (c->num_heads % c->num_kv_heads != 0)
        check_fail("llama_ref_build: num_heads is not divisible by num_kv_heads", "each kv head serves NH / NKV query heads");
    if (c->padded_vocab_size < c->vocab_size)
        check_fail("llama_ref_build: padded_vocab_size < vocab_size", "Vp pads V up (e.g. 200019 -> 200064)");
    if (!(c->rope_theta > 0) || !(c->rms_norm_eps >= 0))
        check_fail("llama_ref_build: rope_theta must be > 0 and rms_norm_eps >= 0", "e.g. 10000 and 1e-5");
    if (B <= 0 || T <= 0 || T > c->max_seq_len)
        check_fail("llama_ref_build: need B > 0 and 0 < T <= max_seq_len", "check the batch shape");
    memset(m, 0, sizeof(*m));
    m->config = *c;
    m->max_B = B;
    m->max_T = T;
    m->num_params = llama_ref_point_tensors(&m->params, NULL, c);
    m->params_memory = (gpt_real*)calloc_check(m->num_params, sizeof(gpt_real));
    m->grads_memory = (gpt_real*)calloc_check(m->num_params, sizeof(gpt_real));
    m->m_memory = (gpt_real*)calloc_check(m->num_params, sizeof(gpt_real));
    m->v_memory = (gpt_real*)calloc_check(m->num_params, sizeof(gpt_real));
    llama_ref_point_tensors(&m->params, m->params_memory, c);
    llama_ref_point_tensors(&m->grads, m->grads_memory, c);
    m->acts_memory = (gpt_real*)calloc_check(llama_ref_point_acts(&m->acts, NULL, c, B, T), sizeof(gpt_real));
    llama_ref_point_acts(&m->acts, m->acts_memory, c, B, T);
    m->bwd_memory = (gpt_real*)calloc_check(llama_ref_point_bwd(&m->bwd, NULL, c, B, T), sizeof(gpt_real));
    llama_ref_point_bwd(&m->bwd, m->bwd_memory, c, B, T);
    m->inputs = (int*)malloc_check((size_t)B * T * sizeof(int));
    m->targets = (int*)malloc_check((size_t)B * T * sizeof(int));
    m->mean_loss = -1;
}

static inline void llama_ref_free(llama_ref_model* m) {
    free(m->params_memory);
    free(m->grads_memory);
    free(m->m_memory);
    free(m->v_memory);
    free(m->acts_memory);
    free(m->bwd_memory);
    free(m->inputs);
    free(m->targets);
    memset(m, 0, sizeof(*m));
}

// Weight matrices N(0, 0.02) (Hugging Face's initializer_range), the two residual projections wo and
// w_down N(0, 0.02/sqrt(2L)) as in gpt_ref.h so that the stream's variance does not grow with depth,
// RMSNorm weights 1, the padded rows of embed and lm_head 0. Draws from llmc/rand.h. Also clears the
// AdamW state.
static inline void llama_ref_init_params(llama_ref_model* m, uint64_t seed) {
    const llama_ref_config* c = &m->config;
    size_t sizes[LLAMA_REF_NUM_TENSORS], off = 0;
    llama_ref_tensor_sizes(sizes, c);
    double resid_std = 0.02 / sqrt(2.0 * c->num_layers);
    uint64_t rng = seed;
    for (int i = 0; i < LLAMA_REF_NUM_TENSORS; i++) {
        gpt_real* p = m->params_memory + off;
        size_t n = i == LLAMA_REF_EMBED || i == LLAMA_REF_LM_HEAD ? (size_t)c->vocab_size * c->channels : sizes[i];
        double std = (i == LLAMA_REF_WO || i == LLAMA_REF_WDOWN) ? resid_std : 0.02;
        for (size_t j = 0; j < sizes[i]; j++)
            p[j] = llama_ref_tensor_is_norm(i) ? 1 : j < n ? (gpt_real)(std * rand_normal(&rng)) : 0;
        off += sizes[i];
    }
    memset(m->m_memory, 0, m->num_params * sizeof(gpt_real));
    memset(m->v_memory, 0, m->num_params * sizeof(gpt_real));
}

// inputs, targets (B * T): ids in [0, V), targets also -1 = ignore (targets may be NULL: logits only).
// Returns the mean loss over the counted positions (0 when none counts), or -1 without targets.
// Leaves every activation in m->acts, dense for this (B, T).
static inline gpt_real llama_ref_forward(llama_ref_model* m, const int* inputs, const int* targets, int B, int T) {
    const llama_ref_config* c = &m->config;
    int L = c->num_layers, C = c->channels, NH = c->num_heads, NKV = c->num_kv_heads, F = c->ffn_hidden;
    int V = c->vocab_size, Vp = c->padded_vocab_size, hs = C / NH, QKV = llama_ref_qkv_dim(c);
    if (B <= 0 || T <= 0 || B > m->max_B || T > m->max_T)
        check_fail("llama_ref_forward: B or T is larger than what llama_ref_build allocated", "build with the largest B, T");
    int BT = B * T;
    gpt_ref_check_batch("llama_ref_forward", inputs, targets, BT, V);
    m->B = B;
    m->T = T;
    memcpy(m->inputs, inputs, (size_t)BT * sizeof(int));
    llama_ref_point_acts(&m->acts, m->acts_memory, c, B, T);
    llama_ref_point_bwd(&m->bwd, m->bwd_memory, c, B, T);
    llama_ref_tensors p = m->params;
    llama_ref_acts a = m->acts;
    size_t btc = (size_t)BT * C, btf = (size_t)BT * F;
    llama_ref_embedding_forward(a.encoded, inputs, p.embed, BT, C);
    for (int l = 0; l < L; l++) {
        const gpt_real* resid = l == 0 ? a.encoded : a.residual3 + (l - 1) * btc;
        gpt_real* attn_norm = a.attn_norm + l * btc;
        gpt_real* qkv = a.qkv + l * (size_t)BT * QKV;
        gpt_real* atty = a.atty + l * btc;
        gpt_real* resid2 = a.residual2 + l * btc;
        gpt_real* ffn_norm = a.ffn_norm + l * btc;
        gpt_real* gateup = a.gateup + l * 2 * btf;
        gpt_real* swiglu = a.swiglu + l * btf;
        gpt_real* resid3 = a.residual3 + l * btc;
        llama_ref_rmsnorm_forward(attn_norm, a.attn_rstd + l * BT, resid, p.attn_norm + l * C, BT, C, c->rms_norm_eps);
        gpt_ref_matmul_forward(qkv, attn_norm, p.wqkv + (size_t)l * QKV * C, NULL, BT, C, QKV);
        llama_ref_rope_forward(qkv, qkv, B, T, NH + NKV, hs, QKV, c->rope_theta); // q heads, then k heads
        gpt_ref_attention_gqa_forward(atty, a.att + (size_t)l * BT * NH * T, qkv, B, T, NH, NKV, hs);
        gpt_ref_matmul_forward(resid2, atty, p.wo + (size_t)l * C * C, NULL, BT, C, C);
        gpt_ref_residual_forward(resid2, resid2, resid, btc);
        llama_ref_rmsnorm_forward(ffn_norm, a.ffn_rstd + l * BT, resid2, p.ffn_norm + l * C, BT, C, c->rms_norm_eps);
        gpt_ref_matmul_forward(gateup, ffn_norm, p.w_gateup + (size_t)l * 2 * F * C, NULL, BT, C, 2 * F);
        llama_ref_swiglu_forward(swiglu, gateup, BT, F);
        gpt_ref_matmul_forward(resid3, swiglu, p.w_down + (size_t)l * C * F, NULL, BT, F, C);
        gpt_ref_residual_forward(resid3, resid3, resid2, btc);
    }
    llama_ref_rmsnorm_forward(a.final_norm, a.final_rstd, a.residual3 + (L - 1) * btc, p.final_norm, BT, C,
                              c->rms_norm_eps);
    gpt_ref_matmul_forward(a.logits, a.final_norm, p.lm_head, NULL, BT, C, Vp);
    m->has_targets = targets != NULL;
    m->mean_loss = -1;
    if (targets) {
        memcpy(m->targets, targets, (size_t)BT * sizeof(int));
        m->mean_loss = gpt_ref_mean_loss(a.losses, a.lse, a.logits, targets, BT, V, Vp, &m->num_counted);
    }
    return m->mean_loss;
}

static inline void llama_ref_zero_grad(llama_ref_model* m) {
    memset(m->grads_memory, 0, m->num_params * sizeof(gpt_real));
}

// Gradient of the last forward's mean loss with respect to every parameter, into m->grads (zeroed
// first: one full backward, not an accumulation).
static inline void llama_ref_backward(llama_ref_model* m) {
    if (!m->has_targets)
        check_fail("llama_ref_backward: the last llama_ref_forward had no targets", "pass targets to the forward");
    const llama_ref_config* c = &m->config;
    int L = c->num_layers, C = c->channels, NH = c->num_heads, NKV = c->num_kv_heads, F = c->ffn_hidden;
    int V = c->vocab_size, Vp = c->padded_vocab_size, hs = C / NH, QKV = llama_ref_qkv_dim(c);
    int B = m->B, T = m->T, BT = B * T;
    size_t btc = (size_t)BT * C, btf = (size_t)BT * F;
    llama_ref_tensors p = m->params, g = m->grads;
    llama_ref_acts a = m->acts;
    llama_ref_bwd d = m->bwd;
    llama_ref_zero_grad(m);
    double dloss = m->num_counted ? 1.0 / m->num_counted : 0.0; // d(mean)/d(each counted loss)
    gpt_ref_crossentropy_backward(d.dlogits, a.logits, a.lse, m->targets, dloss, BT, V, Vp);
    memset(d.dnorm, 0, btc * sizeof(gpt_real));
    gpt_ref_matmul_backward(d.dnorm, g.lm_head, NULL, d.dlogits, a.final_norm, p.lm_head, BT, C, Vp);
    memset(d.dresidual, 0, btc * sizeof(gpt_real));
    llama_ref_rmsnorm_backward(d.dresidual, g.final_norm, d.dnorm, a.residual3 + (L - 1) * btc, a.final_rstd,
                               p.final_norm, BT, C);
    // d.dresidual holds d(loss)/d(residual3 of layer l); each half of the block adds its branch's
    // gradient into it (the skip connection passes it through unchanged)
    for (int l = L - 1; l >= 0; l--) {
        const gpt_real* resid = l == 0 ? a.encoded : a.residual3 + (l - 1) * btc;
        const gpt_real* qkv = a.qkv + l * (size_t)BT * QKV;
        const gpt_real* resid2 = a.residual2 + l * btc;
        memset(d.dswiglu, 0, btf * sizeof(gpt_real));
        gpt_ref_matmul_backward(d.dswiglu, g.w_down + (size_t)l * C * F, NULL, d.dresidual, a.swiglu + l * btf,
                                p.w_down + (size_t)l * C * F, BT, F, C);
        llama_ref_swiglu_backward(d.dgateup, d.dswiglu, a.gateup + l * 2 * btf, BT, F);
        memset(d.dnorm, 0, btc * sizeof(gpt_real));
        gpt_ref_matmul_backward(d.dnorm, g.w_gateup + (size_t)l * 2 * F * C, NULL, d.dgateup, a.ffn_norm + l * btc,
                                p.w_gateup + (size_t)l * 2 * F * C, BT, C, 2 * F);
        llama_ref_rmsnorm_backward(d.dresidual, g.ffn_norm + l * C, d.dnorm, resid2, a.ffn_rstd + l * BT,
                                   p.ffn_norm + l * C, BT, C);
        // now d.dresidual = d(loss)/d(residual2)
        memset(d.datty, 0, btc * sizeof(gpt_real));
        gpt_ref_matmul_backward(d.datty, g.wo + (size_t)l * C * C, NULL, d.dresidual, a.atty + l * btc,
                                p.wo + (size_t)l * C * C, BT, C, C);
        memset(d.dqkv, 0, (size_t)BT * QKV * sizeof(gpt_real));
        gpt_ref_attention_gqa_backward(d.dqkv, d.datty, qkv, a.att + (size_t)l * BT * NH * T, B, T, NH, NKV, hs);
        llama_ref_rope_backward(d.dqkv, d.dqkv, B, T, NH + NKV, hs, QKV, c->rope_theta);
        memset(d.dnorm, 0, btc * sizeof(gpt_real));
        gpt_ref_matmul_backward(d.dnorm, g.wqkv + (size_t)l * QKV * C, NULL, d.dqkv, a.attn_norm + l * btc,
                                p.wqkv + (size_t)l * QKV * C, BT, C, QKV);
        llama_ref_rmsnorm_backward(d.dresidual, g.attn_norm + l * C, d.dnorm, resid, a.attn_rstd + l * BT,
                                   p.attn_norm + l * C, BT, C);
    }
    llama_ref_embedding_backward(g.embed, d.dresidual, m->inputs, BT, C);
}

// Global L2 norm of all gradients (sum of squares in double).
static inline double llama_ref_grad_norm(const llama_ref_model* m) {
    return sqrt(gpt_ref_sum_squares(m->grads_memory, m->num_params));
}

// One AdamW step at step t = 1, 2, ... (gpt_ref_adamw_update: PyTorch's formulation), weight decay on
// the weight matrices only, not on the RMSNorm weights.
static inline void llama_ref_adamw_step(llama_ref_model* m, double lr, double beta1, double beta2, double eps,
                                        double weight_decay, int t) {
    size_t sizes[LLAMA_REF_NUM_TENSORS];
    llama_ref_tensor_sizes(sizes, &m->config);
    gpt_ref_adamw_tensors(m->params_memory, m->m_memory, m->v_memory, m->grads_memory, sizes, LLAMA_REF_NUM_TENSORS,
                          llama_ref_tensor_decays, lr, beta1, beta2, eps, weight_decay, t);
}
