// gpt_ref.h: a CPU reference of the GPT-2 model, forward and backward, in plain single-threaded C.
// It is the oracle for the CUDA trainer (test_gpt.cu compares every layer against it, in float) and is
// itself checked against finite differences (dev/test/test_gpt_ref.c, in double).
//
// What is computed, for B sequences of T tokens (C channels, NH heads of hs = C/NH channels, L layers):
//   x = wte[inputs] + wpe[0:T]                                   (B, T, C)
//   for each layer:  x = x + attproj(attention(qkv(ln1(x))))     causal softmax, scale 1/sqrt(hs)
//                    x = x + fcproj(gelu(fc(ln2(x))))            GELU in GPT-2's tanh approximation
//   logits = lnf(x) · wteᵀ                                       (B, T, Vp): the head is tied to wte
//   loss = mean over the positions whose target is not -1 of CE(logits[:V], target)
// The vocabulary is padded (V real tokens, Vp >= V rows in wte). Rows >= V never count: their logits are
// computed but left out of the softmax, and inputs are < V, so their gradient is exactly zero.
//
// Parameters live in ONE array, in llm.c's order so that a checkpoint's parameter block maps 1:1:
//   wte (Vp, C), wpe (maxT, C), ln1w (L, C), ln1b (L, C), qkvw (L, 3C, C), qkvb (L, 3C),
//   attprojw (L, C, C), attprojb (L, C), ln2w (L, C), ln2b (L, C), fcw (L, 4C, C), fcb (L, 4C),
//   fcprojw (L, C, 4C), fcprojb (L, C), lnfw (C), lnfb (C).
// Weights are (out, in) row-major: y = x·Wᵀ + b. In qkvw the rows are q (C), then k (C), then v (C),
// and head h uses channels h*hs .. h*hs+hs-1 of each. Gradients and the AdamW moments use the same layout.
//
// gpt_real is float, or double when GPT_REF_DOUBLE is defined before the include (see gpt_ref_layers.h,
// which holds the layers; this file holds the model: layout, init, forward, backward, AdamW).
// Both files compile as C11 (gcc) and as C++17 (nvcc): malloc results are cast, no designated
// initializers, VLAs or compound literals.
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../llmc/core/check.h"
#include "../../llmc/core/rand.h"
#include "gpt_ref_layers.h" // gpt_real and the layers

typedef struct {
    int max_seq_len;       // maxT: rows of wpe
    int vocab_size;        // V: real tokens
    int padded_vocab_size; // Vp >= V: rows of wte (llm.c pads 50257 to 50304)
    int num_layers;        // L
    int num_heads;         // NH, divides C
    int channels;          // C
} gpt_ref_config;

// Tensor ids, in layout order: index the arrays of gpt_ref_tensor_sizes and gpt_ref_tensor_name.
enum {
    GPT_REF_WTE, GPT_REF_WPE, GPT_REF_LN1W, GPT_REF_LN1B, GPT_REF_QKVW, GPT_REF_QKVB, GPT_REF_ATTPROJW,
    GPT_REF_ATTPROJB, GPT_REF_LN2W, GPT_REF_LN2B, GPT_REF_FCW, GPT_REF_FCB, GPT_REF_FCPROJW, GPT_REF_FCPROJB,
    GPT_REF_LNFW, GPT_REF_LNFB, GPT_REF_NUM_TENSORS
};

// Pointers into a parameter-shaped array (parameters, gradients): one function computes them all.
typedef struct {
    gpt_real* wte;      // (Vp, C) token embedding and LM head; rows >= V are padding
    gpt_real* wpe;      // (maxT, C)
    gpt_real* ln1w;     // (L, C)
    gpt_real* ln1b;     // (L, C)
    gpt_real* qkvw;     // (L, 3C, C)
    gpt_real* qkvb;     // (L, 3C)
    gpt_real* attprojw; // (L, C, C)
    gpt_real* attprojb; // (L, C)
    gpt_real* ln2w;     // (L, C)
    gpt_real* ln2b;     // (L, C)
    gpt_real* fcw;      // (L, 4C, C)
    gpt_real* fcb;      // (L, 4C)
    gpt_real* fcprojw;  // (L, C, 4C)
    gpt_real* fcprojb;  // (L, C)
    gpt_real* lnfw;     // (C,)
    gpt_real* lnfb;     // (C,)
} gpt_ref_tensors;

// Forward activations for (B, T), one allocation. All are kept, so that a test can compare any layer;
// they are dense for the (B, T) of the last forward (which may be smaller than what was allocated).
typedef struct {
    gpt_real* encoded;   // (B, T, C) wte[token] + wpe[t]: the residual stream entering layer 0
    gpt_real* ln1;       // (L, B, T, C)
    gpt_real* ln1_mean;  // (L, B, T)
    gpt_real* ln1_rstd;  // (L, B, T)
    gpt_real* qkv;       // (L, B, T, 3C)
    gpt_real* att;       // (L, B, NH, T, T) softmax probabilities; 0 above the diagonal
    gpt_real* atty;      // (L, B, T, C) attention output, heads side by side, before attproj
    gpt_real* residual2; // (L, B, T, C) stream after the attention half of the block
    gpt_real* ln2;       // (L, B, T, C)
    gpt_real* ln2_mean;  // (L, B, T)
    gpt_real* ln2_rstd;  // (L, B, T)
    gpt_real* fch;       // (L, B, T, 4C) before GELU
    gpt_real* fch_gelu;  // (L, B, T, 4C)
    gpt_real* residual3; // (L, B, T, C) block output: the stream entering the next layer
    gpt_real* lnf;       // (B, T, C)
    gpt_real* lnf_mean;  // (B, T)
    gpt_real* lnf_rstd;  // (B, T)
    gpt_real* logits;    // (B, T, Vp) columns >= V are computed but never used
    gpt_real* lse;       // (B, T) logsumexp of logits[:V]
    gpt_real* losses;    // (B, T) cross-entropy per position; 0 where the target is -1
} gpt_ref_acts;

// Backward scratch, one allocation. Per-layer buffers are reused by every layer (the backward walks
// down the layers and needs only the current one), the residual-stream gradient is carried along.
typedef struct {
    gpt_real* dlogits;   // (B, T, Vp)
    gpt_real* dresidual; // (B, T, C) gradient of the residual stream at the current depth
    gpt_real* dln;       // (B, T, C) gradient of a LayerNorm output (lnf, ln2, ln1 in turn)
    gpt_real* datty;     // (B, T, C)
    gpt_real* dqkv;      // (B, T, 3C)
    gpt_real* dfch;      // (B, T, 4C) gradient of fch_gelu, turned into that of fch in place
} gpt_ref_bwd;

typedef struct {
    gpt_ref_config config;
    int max_B, max_T;        // what the activations are allocated for
    int B, T;                // of the last forward
    size_t num_params;
    gpt_real* params_memory; // (num_params,) the parameters, also AdamW's master weights
    gpt_real* grads_memory;  // (num_params,)
    gpt_real* m_memory;      // (num_params,) AdamW first moment
    gpt_real* v_memory;      // (num_params,) AdamW second moment
    gpt_ref_tensors params;  // into params_memory
    gpt_ref_tensors grads;   // into grads_memory
    gpt_real* acts_memory;
    gpt_ref_acts acts;
    gpt_real* bwd_memory;
    gpt_ref_bwd bwd;
    int* inputs;             // (max_B * max_T) the last forward's inputs, for the backward
    int* targets;            // (max_B * max_T) and its targets
    int has_targets;         // the last forward computed a loss (the backward needs one)
    int num_counted;         // positions with target != -1 in the last forward
    gpt_real mean_loss;      // of the last forward, -1 without targets
} gpt_ref_model;

// --- layout ------------------------------------------------------------------------------------

static inline void gpt_ref_tensor_sizes(size_t sizes[GPT_REF_NUM_TENSORS], const gpt_ref_config* c) {
    size_t C = (size_t)c->channels, L = (size_t)c->num_layers;
    size_t s[GPT_REF_NUM_TENSORS] = {
        (size_t)c->padded_vocab_size * C, (size_t)c->max_seq_len * C, L * C, L * C,
        L * 3 * C * C, L * 3 * C, L * C * C, L * C, L * C, L * C,
        L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C};
    memcpy(sizes, s, sizeof(s));
}

static inline const char* gpt_ref_tensor_name(int i) {
    static const char* const names[GPT_REF_NUM_TENSORS] = {
        "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
        "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
    return (i >= 0 && i < GPT_REF_NUM_TENSORS) ? names[i] : "?";
}

// Weight decay applies to the 2-D weight matrices only (wte, wpe, qkvw, attprojw, fcw, fcprojw).
static inline int gpt_ref_tensor_decays(int i) {
    return i == GPT_REF_WTE || i == GPT_REF_WPE || i == GPT_REF_QKVW || i == GPT_REF_ATTPROJW ||
           i == GPT_REF_FCW || i == GPT_REF_FCPROJW;
}

static inline int gpt_ref_tensor_is_ln_weight(int i) {
    return i == GPT_REF_LN1W || i == GPT_REF_LN2W || i == GPT_REF_LNFW;
}

// Points t into a parameter-shaped array base (NULL: all NULL); returns its length, num_params.
static inline size_t gpt_ref_point_tensors(gpt_ref_tensors* t, gpt_real* base, const gpt_ref_config* c) {
    gpt_real** const ptrs[GPT_REF_NUM_TENSORS] = {
        &t->wte, &t->wpe, &t->ln1w, &t->ln1b, &t->qkvw, &t->qkvb, &t->attprojw, &t->attprojb,
        &t->ln2w, &t->ln2b, &t->fcw, &t->fcb, &t->fcprojw, &t->fcprojb, &t->lnfw, &t->lnfb};
    size_t sizes[GPT_REF_NUM_TENSORS];
    gpt_ref_tensor_sizes(sizes, c);
    return gpt_ref_carve(ptrs, sizes, GPT_REF_NUM_TENSORS, base);
}

static inline size_t gpt_ref_point_acts(gpt_ref_acts* a, gpt_real* base, const gpt_ref_config* c, int B, int T) {
    size_t L = (size_t)c->num_layers, C = (size_t)c->channels, NH = (size_t)c->num_heads;
    size_t BT = (size_t)B * (size_t)T;
    gpt_real** const ptrs[20] = {
        &a->encoded, &a->ln1, &a->ln1_mean, &a->ln1_rstd, &a->qkv, &a->att, &a->atty, &a->residual2,
        &a->ln2, &a->ln2_mean, &a->ln2_rstd, &a->fch, &a->fch_gelu, &a->residual3,
        &a->lnf, &a->lnf_mean, &a->lnf_rstd, &a->logits, &a->lse, &a->losses};
    size_t sizes[20] = {
        BT * C, L * BT * C, L * BT, L * BT, L * BT * 3 * C, L * BT * NH * (size_t)T, L * BT * C, L * BT * C,
        L * BT * C, L * BT, L * BT, L * BT * 4 * C, L * BT * 4 * C, L * BT * C,
        BT * C, BT, BT, BT * (size_t)c->padded_vocab_size, BT, BT};
    return gpt_ref_carve(ptrs, sizes, 20, base);
}

static inline size_t gpt_ref_point_bwd(gpt_ref_bwd* g, gpt_real* base, const gpt_ref_config* c, int B, int T) {
    size_t C = (size_t)c->channels, BT = (size_t)B * (size_t)T;
    gpt_real** const ptrs[6] = {&g->dlogits, &g->dresidual, &g->dln, &g->datty, &g->dqkv, &g->dfch};
    size_t sizes[6] = {BT * (size_t)c->padded_vocab_size, BT * C, BT * C, BT * C, BT * 3 * C, BT * 4 * C};
    return gpt_ref_carve(ptrs, sizes, 6, base);
}

// Random numbers: splitmix64 and Box-Muller from llmc/core/rand.h, shared with the CUDA model's init.

// --- the model ---------------------------------------------------------------------------------

// Allocates parameters (zeroed), gradients, AdamW state, and activations for up to B x T tokens.
static inline void gpt_ref_build(gpt_ref_model* m, const gpt_ref_config* config, int B, int T) {
    const gpt_ref_config* c = config;
    if (c->channels <= 0 || c->num_layers <= 0 || c->num_heads <= 0 || c->vocab_size <= 0 || c->max_seq_len <= 0)
        check_fail("gpt_ref_build: every size in the config must be positive", "fill in the whole gpt_ref_config");
    if (c->channels % c->num_heads != 0)
        check_fail("gpt_ref_build: channels is not divisible by num_heads", "pick C and NH with C % NH == 0");
    if (c->padded_vocab_size < c->vocab_size)
        check_fail("gpt_ref_build: padded_vocab_size < vocab_size", "Vp pads V up (e.g. 50257 -> 50304)");
    if (B <= 0 || T <= 0 || T > c->max_seq_len)
        check_fail("gpt_ref_build: need B > 0 and 0 < T <= max_seq_len", "check the batch shape");
    memset(m, 0, sizeof(*m));
    m->config = *c;
    m->max_B = B;
    m->max_T = T;
    m->num_params = gpt_ref_point_tensors(&m->params, NULL, c);
    m->params_memory = (gpt_real*)calloc_check(m->num_params, sizeof(gpt_real));
    m->grads_memory = (gpt_real*)calloc_check(m->num_params, sizeof(gpt_real));
    m->m_memory = (gpt_real*)calloc_check(m->num_params, sizeof(gpt_real));
    m->v_memory = (gpt_real*)calloc_check(m->num_params, sizeof(gpt_real));
    gpt_ref_point_tensors(&m->params, m->params_memory, c);
    gpt_ref_point_tensors(&m->grads, m->grads_memory, c);
    m->acts_memory = (gpt_real*)calloc_check(gpt_ref_point_acts(&m->acts, NULL, c, B, T), sizeof(gpt_real));
    gpt_ref_point_acts(&m->acts, m->acts_memory, c, B, T);
    m->bwd_memory = (gpt_real*)calloc_check(gpt_ref_point_bwd(&m->bwd, NULL, c, B, T), sizeof(gpt_real));
    gpt_ref_point_bwd(&m->bwd, m->bwd_memory, c, B, T);
    m->inputs = (int*)malloc_check((size_t)B * T * sizeof(int));
    m->targets = (int*)malloc_check((size_t)B * T * sizeof(int));
    m->mean_loss = -1;
}

static inline void gpt_ref_free(gpt_ref_model* m) {
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

// GPT-2's recipe: weights N(0, 0.02), the two residual projections (attprojw, fcprojw) N(0, 0.02/sqrt(2L))
// so that the stream's variance does not grow with depth, biases 0, LayerNorm weights 1, and the padded
// rows wte[V:] 0 (as llm.c). The values are this file's RNG, not PyTorch's: same distribution, other
// numbers. Also clears the AdamW state.
static inline void gpt_ref_init_params(gpt_ref_model* m, uint64_t seed) {
    const gpt_ref_config* c = &m->config;
    size_t sizes[GPT_REF_NUM_TENSORS], off = 0;
    gpt_ref_tensor_sizes(sizes, c);
    double resid_std = 0.02 / sqrt(2.0 * c->num_layers);
    uint64_t rng = seed;
    for (int i = 0; i < GPT_REF_NUM_TENSORS; i++) {
        gpt_real* p = m->params_memory + off;
        // the 2-D matrices (the ones weight decay applies to) are random, except the padded rows of wte
        size_t n = gpt_ref_tensor_decays(i) ? sizes[i] : 0;
        if (i == GPT_REF_WTE) n = (size_t)c->vocab_size * c->channels;
        double std = (i == GPT_REF_ATTPROJW || i == GPT_REF_FCPROJW) ? resid_std : 0.02;
        for (size_t j = 0; j < sizes[i]; j++)
            p[j] = j < n ? (gpt_real)(std * rand_normal(&rng)) : gpt_ref_tensor_is_ln_weight(i) ? 1 : 0;
        off += sizes[i];
    }
    memset(m->m_memory, 0, m->num_params * sizeof(gpt_real));
    memset(m->v_memory, 0, m->num_params * sizeof(gpt_real));
}

// inputs, targets (B * T): ids in [0, V), targets also -1 = ignore (targets may be NULL: logits only).
// Returns the mean loss over the counted positions (0 when none counts), or -1 without targets.
// Leaves every activation in m->acts, logits included, dense for this (B, T).
static inline gpt_real gpt_ref_forward(gpt_ref_model* m, const int* inputs, const int* targets, int B, int T) {
    const gpt_ref_config* c = &m->config;
    int L = c->num_layers, C = c->channels, NH = c->num_heads, V = c->vocab_size, Vp = c->padded_vocab_size;
    if (B <= 0 || T <= 0 || B > m->max_B || T > m->max_T)
        check_fail("gpt_ref_forward: B or T is larger than what gpt_ref_build allocated", "build with the largest B, T");
    int BT = B * T;
    gpt_ref_check_batch("gpt_ref_forward", inputs, targets, BT, V);
    m->B = B;
    m->T = T;
    memcpy(m->inputs, inputs, (size_t)BT * sizeof(int));
    gpt_ref_point_acts(&m->acts, m->acts_memory, c, B, T); // dense for this (B, T)
    gpt_ref_point_bwd(&m->bwd, m->bwd_memory, c, B, T);
    gpt_ref_tensors p = m->params;
    gpt_ref_acts a = m->acts;
    size_t btc = (size_t)BT * C;
    gpt_ref_encoder_forward(a.encoded, inputs, p.wte, p.wpe, B, T, C);
    for (int l = 0; l < L; l++) {
        const gpt_real* resid = l == 0 ? a.encoded : a.residual3 + (l - 1) * btc;
        gpt_real* ln1 = a.ln1 + l * btc;
        gpt_real* qkv = a.qkv + l * 3 * btc;
        gpt_real* atty = a.atty + l * btc;
        gpt_real* resid2 = a.residual2 + l * btc;
        gpt_real* ln2 = a.ln2 + l * btc;
        gpt_real* fch = a.fch + l * 4 * btc;
        gpt_real* fch_gelu = a.fch_gelu + l * 4 * btc;
        gpt_real* resid3 = a.residual3 + l * btc;
        gpt_ref_layernorm_forward(ln1, a.ln1_mean + l * BT, a.ln1_rstd + l * BT, resid,
                                  p.ln1w + l * C, p.ln1b + l * C, BT, C);
        gpt_ref_matmul_forward(qkv, ln1, p.qkvw + (size_t)l * 3 * C * C, p.qkvb + l * 3 * C, BT, C, 3 * C);
        gpt_ref_attention_forward(atty, a.att + (size_t)l * BT * NH * T, qkv, B, T, C, NH);
        // the projection is written into residual2, then the stream is added in place
        gpt_ref_matmul_forward(resid2, atty, p.attprojw + (size_t)l * C * C, p.attprojb + l * C, BT, C, C);
        gpt_ref_residual_forward(resid2, resid2, resid, btc);
        gpt_ref_layernorm_forward(ln2, a.ln2_mean + l * BT, a.ln2_rstd + l * BT, resid2,
                                  p.ln2w + l * C, p.ln2b + l * C, BT, C);
        gpt_ref_matmul_forward(fch, ln2, p.fcw + (size_t)l * 4 * C * C, p.fcb + l * 4 * C, BT, C, 4 * C);
        gpt_ref_gelu_forward(fch_gelu, fch, 4 * btc);
        gpt_ref_matmul_forward(resid3, fch_gelu, p.fcprojw + (size_t)l * 4 * C * C, p.fcprojb + l * C, BT, 4 * C, C);
        gpt_ref_residual_forward(resid3, resid3, resid2, btc);
    }
    gpt_ref_layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, a.residual3 + (L - 1) * btc, p.lnfw, p.lnfb, BT, C);
    gpt_ref_matmul_forward(a.logits, a.lnf, p.wte, NULL, BT, C, Vp);
    m->has_targets = targets != NULL;
    m->mean_loss = -1;
    if (targets) {
        memcpy(m->targets, targets, (size_t)BT * sizeof(int));
        m->mean_loss = gpt_ref_mean_loss(a.losses, a.lse, a.logits, targets, BT, V, Vp, &m->num_counted);
    }
    return m->mean_loss;
}

static inline void gpt_ref_zero_grad(gpt_ref_model* m) {
    memset(m->grads_memory, 0, m->num_params * sizeof(gpt_real));
}

// Gradient of the last forward's mean loss with respect to every parameter, into m->grads. The grads
// are zeroed first: this is one full backward, not an accumulation (sum micro-batches yourself).
static inline void gpt_ref_backward(gpt_ref_model* m) {
    if (!m->has_targets)
        check_fail("gpt_ref_backward: the last gpt_ref_forward had no targets", "pass targets to the forward");
    const gpt_ref_config* c = &m->config;
    int L = c->num_layers, C = c->channels, NH = c->num_heads, V = c->vocab_size, Vp = c->padded_vocab_size;
    int B = m->B, T = m->T, BT = B * T;
    size_t btc = (size_t)BT * C;
    gpt_ref_tensors p = m->params, g = m->grads;
    gpt_ref_acts a = m->acts;
    gpt_ref_bwd d = m->bwd;
    gpt_ref_zero_grad(m);
    double dloss = m->num_counted ? 1.0 / m->num_counted : 0.0; // d(mean)/d(each counted loss)
    gpt_ref_crossentropy_backward(d.dlogits, a.logits, a.lse, m->targets, dloss, BT, V, Vp);
    memset(d.dln, 0, btc * sizeof(gpt_real));
    gpt_ref_matmul_backward(d.dln, g.wte, NULL, d.dlogits, a.lnf, p.wte, BT, C, Vp);
    memset(d.dresidual, 0, btc * sizeof(gpt_real));
    gpt_ref_layernorm_backward(d.dresidual, g.lnfw, g.lnfb, d.dln, a.residual3 + (L - 1) * btc,
                               a.lnf_mean, a.lnf_rstd, p.lnfw, BT, C);
    // d.dresidual holds d(loss)/d(residual3 of layer l); each half of the block adds its branch's
    // gradient into it (the skip connection passes it through unchanged)
    for (int l = L - 1; l >= 0; l--) {
        const gpt_real* resid = l == 0 ? a.encoded : a.residual3 + (l - 1) * btc;
        gpt_real* ln1 = a.ln1 + l * btc;
        gpt_real* qkv = a.qkv + l * 3 * btc;
        gpt_real* atty = a.atty + l * btc;
        gpt_real* resid2 = a.residual2 + l * btc;
        gpt_real* ln2 = a.ln2 + l * btc;
        memset(d.dfch, 0, 4 * btc * sizeof(gpt_real));
        gpt_ref_matmul_backward(d.dfch, g.fcprojw + (size_t)l * 4 * C * C, g.fcprojb + l * C, d.dresidual,
                                a.fch_gelu + l * 4 * btc, p.fcprojw + (size_t)l * 4 * C * C, BT, 4 * C, C);
        gpt_ref_gelu_backward(d.dfch, d.dfch, a.fch + l * 4 * btc, 4 * btc);
        memset(d.dln, 0, btc * sizeof(gpt_real));
        gpt_ref_matmul_backward(d.dln, g.fcw + (size_t)l * 4 * C * C, g.fcb + l * 4 * C, d.dfch, ln2,
                                p.fcw + (size_t)l * 4 * C * C, BT, C, 4 * C);
        gpt_ref_layernorm_backward(d.dresidual, g.ln2w + l * C, g.ln2b + l * C, d.dln, resid2,
                                   a.ln2_mean + l * BT, a.ln2_rstd + l * BT, p.ln2w + l * C, BT, C);
        // now d.dresidual = d(loss)/d(residual2)
        memset(d.datty, 0, btc * sizeof(gpt_real));
        gpt_ref_matmul_backward(d.datty, g.attprojw + (size_t)l * C * C, g.attprojb + l * C, d.dresidual, atty,
                                p.attprojw + (size_t)l * C * C, BT, C, C);
        memset(d.dqkv, 0, 3 * btc * sizeof(gpt_real));
        gpt_ref_attention_backward(d.dqkv, d.datty, qkv, a.att + (size_t)l * BT * NH * T, B, T, C, NH);
        memset(d.dln, 0, btc * sizeof(gpt_real));
        gpt_ref_matmul_backward(d.dln, g.qkvw + (size_t)l * 3 * C * C, g.qkvb + l * 3 * C, d.dqkv, ln1,
                                p.qkvw + (size_t)l * 3 * C * C, BT, C, 3 * C);
        gpt_ref_layernorm_backward(d.dresidual, g.ln1w + l * C, g.ln1b + l * C, d.dln, resid,
                                   a.ln1_mean + l * BT, a.ln1_rstd + l * BT, p.ln1w + l * C, BT, C);
    }
    gpt_ref_encoder_backward(g.wte, g.wpe, d.dresidual, m->inputs, B, T, C);
}

// Global L2 norm of all gradients (sum of squares in double).
static inline double gpt_ref_grad_norm(const gpt_ref_model* m) {
    return sqrt(gpt_ref_sum_squares(m->grads_memory, m->num_params));
}

// Scales the gradients by max_norm / norm when the global norm exceeds max_norm (llm.c's rule, no
// epsilon); returns the norm before clipping.
static inline double gpt_ref_clip_grad_norm(gpt_ref_model* m, double max_norm) {
    double norm = gpt_ref_grad_norm(m);
    if (norm > max_norm) {
        double scale = max_norm / norm;
        for (size_t i = 0; i < m->num_params; i++) m->grads_memory[i] = (gpt_real)(m->grads_memory[i] * scale);
    }
    return norm;
}

// One AdamW step (PyTorch's formulation, decoupled weight decay) at step t = 1, 2, ...:
//   m = b1 m + (1-b1) g,  v = b2 v + (1-b2) g^2,  p -= lr (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd p)
// with wd only on the 2-D weight matrices (gpt_ref_tensor_decays); the update itself is
// gpt_ref_adamw_update (gpt_ref_layers.h), one call per tensor (gpt_ref_adamw_tensors).
static inline void gpt_ref_adamw_step(gpt_ref_model* m, double lr, double beta1, double beta2, double eps,
                                      double weight_decay, int t) {
    size_t sizes[GPT_REF_NUM_TENSORS];
    gpt_ref_tensor_sizes(sizes, &m->config);
    gpt_ref_adamw_tensors(m->params_memory, m->m_memory, m->v_memory, m->grads_memory, sizes, GPT_REF_NUM_TENSORS,
                          gpt_ref_tensor_decays, lr, beta1, beta2, eps, weight_decay, t);
}
