// model_ref.h: the CPU reference of the model, either family, forward and backward, in plain
// single-threaded C. It is the oracle for the CUDA model (test_gpt.cu compares every gradient against
// it, in float) and is itself checked against finite differences (dev/test/model/test_model_ref.c, in double;
// test_model_ref_float compares the float build). The layers are dev/ref/ref_layers.h.
//
// The family is data (llmc/model/spec.h): the model walks its spec's block choices and its tensor table,
// so the parameter layout (model_tensor_layout) and the init (model_init_values) are the GPU model's by
// construction, and a new block option is one branch here. For B sequences of T tokens (C channels, NH
// query heads and NKV key/value heads of hs = C/NH channels, MLP width F, L layers):
//   x = tok_embed[inputs] (+ pos_embed[0:T] with learned positions)                    (B, T, C)
//   for each layer:  x = x + attproj · attention(qkv · norm1(x))      RoPE on q and k where the spec says
//                    x = x + fcproj · act(fc · norm2(x))              GELU of fc, or silu(gate) · up
//   logits = normf(x) · headᵀ                                          (B, T, Vp): head tok_embed or lm_head
//   loss = mean over the positions whose target is not -1 of CE(logits[:V], target)
// Norms are LayerNorm (eps 1e-5, as GPT-2 and llmc/layers/layernorm.cuh) or RMSNorm (the config's eps,
// Hugging Face's LlamaRMSNorm); attention is causal, scale 1/sqrt(hs), query head h reads kv head
// h / (NH/NKV); the linear layers have biases where the spec says. The vocabulary is padded (V real
// tokens, Vp >= V rows in the embedding and an untied head): rows >= V never count (inputs are < V,
// logits >= V are left out of the softmax), so their gradient is exactly zero.
//
// Parameters, gradients and the AdamW moments live in one array each, in the family's table order;
// weights are (out, in) row-major, y = x·Wᵀ + b, and each per-layer tensor is one block over the layers,
// layer l's slice at l times its size. ref_real is float, or double when REF_DOUBLE is defined before
// the include. Compiles as C11 (gcc) and as C++17 (nvcc): malloc results are cast, no designated
// initializers, VLAs or compound literals.
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../llmc/core/check.h"
#include "../../llmc/core/rand.h"
#include "../../llmc/model/spec.h"
#include "ref_layers.h"  // ref_real and the layers

// Pointers into a parameter-shaped array (parameters, gradients): one per role of spec.h, NULL where the
// family has no such tensor, named as the GPU model's ModelParams (llmc/model/model_layout.cuh).
typedef struct {
    ref_real* tok_embed;  // (Vp, C) rows >= V are padding; also the head where it is tied
    ref_real* pos_embed;  // (maxT, C)
    ref_real* norm1w;     // (L, C)
    ref_real* norm1b;     // (L, C)
    ref_real* qkvw;       // (L, QKV, C) QKV = (NH + 2 NKV) hs: q heads, then k heads, then v heads
    ref_real* qkvb;       // (L, QKV)
    ref_real* attprojw;   // (L, C, C)
    ref_real* attprojb;   // (L, C)
    ref_real* norm2w;     // (L, C)
    ref_real* norm2b;     // (L, C)
    ref_real* fcw;        // (L, UP, C) UP = F (GELU) or 2F (SwiGLU: gate rows, then up rows)
    ref_real* fcb;        // (L, UP)
    ref_real* fcprojw;    // (L, C, F)
    ref_real* fcprojb;    // (L, C)
    ref_real* normfw;     // (C)
    ref_real* normfb;     // (C)
    ref_real* lm_head;    // (Vp, C) an untied head; rows >= V are padding
} ref_model_tensors;

// Forward activations for (B, T), one allocation. All are kept, so that a test can compare any layer;
// they are dense for the (B, T) of the last forward (which may be smaller than what was allocated).
// A LayerNorm keeps mean and rstd, an RMSNorm rstd alone (its means are NULL).
typedef struct {
    ref_real* encoded;     // (B, T, C) the embedding (+ positions): the residual stream entering layer 0
    ref_real* norm1;       // (L, B, T, C) the norm before attention
    ref_real* norm1_mean;  // (L, B, T)
    ref_real* norm1_rstd;  // (L, B, T)
    ref_real* qkv;         // (L, B, T, QKV) with RoPE, q and k after it (the backward needs only those)
    ref_real* att;         // (L, B, NH, T, T) softmax probabilities; 0 above the diagonal
    ref_real* atty;        // (L, B, T, C) attention output, heads side by side, before attproj
    ref_real* residual2;   // (L, B, T, C) stream after the attention half of the block
    ref_real* norm2;       // (L, B, T, C) the norm before the MLP
    ref_real* norm2_mean;  // (L, B, T)
    ref_real* norm2_rstd;  // (L, B, T)
    ref_real* fch;         // (L, B, T, UP) fc's output: before GELU, or gate | up before SwiGLU
    ref_real* fch_act;     // (L, B, T, F) after the activation: fcproj's input
    ref_real* residual3;   // (L, B, T, C) block output: the stream entering the next layer
    ref_real* normf;       // (B, T, C) the final norm
    ref_real* normf_mean;  // (B, T)
    ref_real* normf_rstd;  // (B, T)
    ref_real* logits;      // (B, T, Vp) columns >= V are computed but never used
    ref_real* lse;         // (B, T) logsumexp of logits[:V]
    ref_real* losses;      // (B, T) cross-entropy per position; 0 where the target is -1
} ref_model_acts;

#define REF_MODEL_NUM_ACTS 20

// Backward scratch, one allocation. Per-layer buffers are reused by every layer (the backward walks
// down the layers and needs only the current one); dresidual carries the stream's gradient along.
typedef struct {
    ref_real* dlogits;    // (B, T, Vp)
    ref_real* dresidual;  // (B, T, C) gradient of the residual stream at the current depth
    ref_real* dnorm;      // (B, T, C) gradient of a norm's output (normf, norm2, norm1 in turn)
    ref_real* datty;      // (B, T, C)
    ref_real* dqkv;       // (B, T, QKV) after RoPE, then rotated back in place
    ref_real* dfch;       // (B, T, UP)
    ref_real* dfch_act;   // (B, T, F)
} ref_model_bwd;

#define REF_MODEL_NUM_BWD 7

typedef struct {
    ModelConfig config;
    const ModelSpec* spec;                      // the family's: block choices and tensor table
    int max_B, max_T;                           // what the activations are allocated for
    int B, T;                                   // of the last forward
    size_t num_params;
    size_t tensor_size[MODEL_MAX_TENSORS];      // elements of each tensor of the table
    size_t tensor_offset[MODEL_MAX_TENSORS];    // and where it starts in the arrays below
    ref_real* params_memory;                    // (num_params,) the parameters, also AdamW's master weights
    ref_real* grads_memory;                     // (num_params,)
    ref_real* m_memory;                         // (num_params,) AdamW first moment
    ref_real* v_memory;                         // (num_params,) AdamW second moment
    ref_model_tensors params;                   // into params_memory
    ref_model_tensors grads;                    // into grads_memory
    ref_real* acts_memory;                      // the activations for max_B x max_T, carved into acts
    ref_model_acts acts;                        // dense for the last forward's (B, T)
    ref_real* bwd_memory;                       // the backward's scratch, carved into bwd
    ref_model_bwd bwd;
    int* inputs;                                // (max_B * max_T) the last forward's inputs, for the backward
    int* targets;                               // (max_B * max_T) and its targets
    int has_targets;                            // the last forward computed a loss (the backward needs one)
    int num_counted;                            // positions with target != -1 in the last forward
    ref_real mean_loss;                         // of the last forward, -1 without targets
} ref_model;

// --- shared machinery ---------------------------------------------------------------------------

// Points each *ptrs[i] at consecutive slices of base (NULL base: all NULL); returns the total count.
static inline size_t ref_carve(ref_real** const ptrs[], const size_t sizes[], int n, ref_real* base) {
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        *ptrs[i] = base ? base + off : NULL;
        off += sizes[i];
    }
    return off;
}

// p + off, or NULL for an absent tensor (a bias the family does not have)
static inline ref_real* ref_at(ref_real* p, size_t off) { return p ? p + off : NULL; }

// AdamW on one array at step t = 1, 2, ... (PyTorch's formulation, decoupled weight decay wd):
//   m = b1 m + (1-b1) g,  v = b2 v + (1-b2) g^2,  p -= lr (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd p).
// Computed in double, stored as ref_real. params, m, v (n,) are updated in place; the model's step
// picks wd per tensor.
static inline void ref_adamw_update(ref_real* params, ref_real* m, ref_real* v, const ref_real* grads, size_t n,
                                    double lr, double beta1, double beta2, double eps, double wd, int t) {
    double c1 = 1.0 - pow(beta1, t), c2 = 1.0 - pow(beta2, t);
    for (size_t j = 0; j < n; j++) {
        double g = grads[j], p = params[j];
        double mj = beta1 * m[j] + (1.0 - beta1) * g;
        double vj = beta2 * v[j] + (1.0 - beta2) * g * g;
        m[j] = (ref_real)mj;
        v[j] = (ref_real)vj;
        params[j] = (ref_real)(p - lr * ((mj / c1) / (sqrt(vj / c2) + eps) + wd * p));
    }
}

// Sum of squares, in double (the gradient norms)
static inline double ref_sum_squares(const ref_real* x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

// A forward's batch of n tokens: every input id in [0, V), every target in [-1, V) (targets may be
// NULL). who, the caller, leads the message.
static inline void ref_check_batch(const char* who, const int* inputs, const int* targets, int n, int V) {
    char what[160];
    for (int i = 0; i < n; i++) {
        if (inputs[i] < 0 || inputs[i] >= V) {
            snprintf(what, sizeof(what), "%s: an input token id is outside [0, vocab_size)", who);
            check_fail(what, "check the token data");
        }
        if (targets && (targets[i] < -1 || targets[i] >= V)) {
            snprintf(what, sizeof(what), "%s: a target is outside [-1, vocab_size)", who);
            check_fail(what, "-1 marks an ignored position");
        }
    }
}

// A forward's loss: the cross-entropy of each of the N positions into losses (lse alongside), their
// mean over the counted positions (0 when none counts) returned, and the number counted in *num_counted
// (the backward divides by it).
static inline ref_real ref_mean_loss(ref_real* losses, ref_real* lse, const ref_real* logits, const int* targets,
                                     int N, int V, int Vp, int* num_counted) {
    *num_counted = ref_crossentropy_forward(losses, lse, logits, targets, N, V, Vp);
    double sum = 0;
    for (int i = 0; i < N; i++) sum += losses[i];
    return (ref_real)(*num_counted ? sum / *num_counted : 0);
}

// --- layout ------------------------------------------------------------------------------------

// The field of t that holds `role` (MODEL_ROLE_*).
static inline ref_real** ref_model_role(ref_model_tensors* t, int role) {
    ref_real** const ptrs[MODEL_NUM_ROLES] = {
        &t->tok_embed, &t->pos_embed, &t->norm1w, &t->norm1b, &t->qkvw, &t->qkvb, &t->attprojw, &t->attprojb,
        &t->norm2w, &t->norm2b, &t->fcw, &t->fcb, &t->fcprojw, &t->fcprojb, &t->normfw, &t->normfb, &t->lm_head};
    return ptrs[role];
}

// Points t into a parameter-shaped array base by the family's table (the roles it lacks: NULL).
static inline void ref_model_point_tensors(ref_model_tensors* t, ref_real* base, const ref_model* m) {
    memset(t, 0, sizeof(*t));
    for (int i = 0; i < m->spec->num_tensors; i++)
        *ref_model_role(t, m->spec->tensors[i].role) = base + m->tensor_offset[i];
}

// The head: the token embedding when it is tied, else lm_head.
static inline ref_real* ref_model_head(const ref_model* m, const ref_model_tensors* t) {
    return m->spec->tied_head ? t->tok_embed : t->lm_head;
}

static inline size_t ref_model_point_acts(ref_model_acts* a, ref_real* base, const ref_model* m, int B, int T) {
    const ModelConfig* c = &m->config;
    size_t L = (size_t)c->num_layers, C = (size_t)c->channels, NH = (size_t)c->num_heads;
    size_t F = (size_t)c->ffn_hidden, UP = (size_t)model_dim(c, MODEL_DIM_UP), QKV = (size_t)model_qkv_dim(c);
    size_t BT = (size_t)B * (size_t)T, mean = m->spec->norm == MODEL_NORM_LAYERNORM ? 1 : 0;
    ref_real** const ptrs[REF_MODEL_NUM_ACTS] = {
        &a->encoded, &a->norm1, &a->norm1_mean, &a->norm1_rstd, &a->qkv, &a->att, &a->atty, &a->residual2,
        &a->norm2, &a->norm2_mean, &a->norm2_rstd, &a->fch, &a->fch_act, &a->residual3,
        &a->normf, &a->normf_mean, &a->normf_rstd, &a->logits, &a->lse, &a->losses};
    size_t sizes[REF_MODEL_NUM_ACTS] = {
        BT * C, L * BT * C, mean * L * BT, L * BT, L * BT * QKV, L * BT * NH * (size_t)T, L * BT * C, L * BT * C,
        L * BT * C, mean * L * BT, L * BT, L * BT * UP, L * BT * F, L * BT * C,
        BT * C, mean * BT, BT, BT * (size_t)c->padded_vocab_size, BT, BT};
    size_t n = ref_carve(ptrs, sizes, REF_MODEL_NUM_ACTS, base);
    if (!mean) a->norm1_mean = a->norm2_mean = a->normf_mean = NULL;
    return n;
}

static inline size_t ref_model_point_bwd(ref_model_bwd* g, ref_real* base, const ref_model* m, int B, int T) {
    const ModelConfig* c = &m->config;
    size_t C = (size_t)c->channels, BT = (size_t)B * (size_t)T;
    ref_real** const ptrs[REF_MODEL_NUM_BWD] = {&g->dlogits, &g->dresidual, &g->dnorm, &g->datty,
                                                &g->dqkv, &g->dfch, &g->dfch_act};
    size_t sizes[REF_MODEL_NUM_BWD] = {BT * (size_t)c->padded_vocab_size, BT * C, BT * C, BT * C,
                                       BT * (size_t)model_qkv_dim(c), BT * (size_t)model_dim(c, MODEL_DIM_UP),
                                       BT * (size_t)c->ffn_hidden};
    return ref_carve(ptrs, sizes, REF_MODEL_NUM_BWD, base);
}

// --- the model ---------------------------------------------------------------------------------

// Allocates parameters (zeroed), gradients, AdamW state, and activations for up to B x T tokens of the
// model config describes (config->family picks the spec).
static inline void ref_model_build(ref_model* m, const ModelConfig* config, int B, int T) {
    const ModelConfig* c = config;
    const ModelSpec* s = model_spec(c->family);
    if (!s) check_fail("ref_model_build: unknown model family", "MODEL_FAMILY_GPT2 or MODEL_FAMILY_LLAMA");
    if (c->channels <= 0 || c->num_layers <= 0 || c->num_heads <= 0 || c->num_kv_heads <= 0 ||
        c->vocab_size <= 0 || c->max_seq_len <= 0 || c->ffn_hidden <= 0)
        check_fail("ref_model_build: every size in the config must be positive", "fill in the whole ModelConfig");
    if (c->channels % c->num_heads != 0)
        check_fail("ref_model_build: channels is not divisible by num_heads", "pick C and NH with C % NH == 0");
    if (s->positions == MODEL_POS_ROPE && (c->channels / c->num_heads) % 2 != 0)
        check_fail("ref_model_build: with RoPE the head size C / NH must be even", "RoPE rotates channel pairs");
    if (c->num_heads % c->num_kv_heads != 0)
        check_fail("ref_model_build: num_heads is not divisible by num_kv_heads",
                   "each kv head serves NH / NKV query heads");
    if (c->padded_vocab_size < c->vocab_size)
        check_fail("ref_model_build: padded_vocab_size < vocab_size", "Vp pads V up (e.g. 50257 -> 50304)");
    if (s->positions == MODEL_POS_ROPE && !(c->rope_theta > 0))
        check_fail("ref_model_build: RoPE needs rope_theta > 0", "e.g. 10000 (Llama 2) or 500000 (Llama 3)");
    if (s->norm == MODEL_NORM_RMSNORM && !(c->norm_eps >= 0))
        check_fail("ref_model_build: RMSNorm needs norm_eps >= 0", "e.g. 1e-5");
    if (B <= 0 || T <= 0 || T > c->max_seq_len)
        check_fail("ref_model_build: need B > 0 and 0 < T <= max_seq_len", "check the batch shape");
    memset(m, 0, sizeof(*m));
    m->config = *c;
    m->spec = s;
    m->max_B = B;
    m->max_T = T;
    m->num_params = model_tensor_layout(c, m->tensor_size, m->tensor_offset);
    m->params_memory = (ref_real*)calloc_check(m->num_params, sizeof(ref_real));
    m->grads_memory = (ref_real*)calloc_check(m->num_params, sizeof(ref_real));
    m->m_memory = (ref_real*)calloc_check(m->num_params, sizeof(ref_real));
    m->v_memory = (ref_real*)calloc_check(m->num_params, sizeof(ref_real));
    ref_model_point_tensors(&m->params, m->params_memory, m);
    ref_model_point_tensors(&m->grads, m->grads_memory, m);
    m->acts_memory = (ref_real*)calloc_check(ref_model_point_acts(&m->acts, NULL, m, B, T), sizeof(ref_real));
    ref_model_point_acts(&m->acts, m->acts_memory, m, B, T);
    m->bwd_memory = (ref_real*)calloc_check(ref_model_point_bwd(&m->bwd, NULL, m, B, T), sizeof(ref_real));
    ref_model_point_bwd(&m->bwd, m->bwd_memory, m, B, T);
    m->inputs = (int*)malloc_check((size_t)B * T * sizeof(int));
    m->targets = (int*)malloc_check((size_t)B * T * sizeof(int));
    m->mean_loss = -1;
}

static inline void ref_model_free(ref_model* m) {
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

// The family's init (model_init_values, spec.h: the GPU model's, the same float values for the same
// seed): weights N(0, 0.02), the residual projections N(0, 0.02/sqrt(2L)) so that the stream's variance
// does not grow with depth, biases 0, norm weights 1, padded vocabulary rows 0. The values are
// llmc/core/rand.h's, not PyTorch's: same distribution, other numbers. Also clears the AdamW state.
static inline void ref_model_init_params(ref_model* m, uint64_t seed) {
    float* values = (float*)malloc_check(m->num_params * sizeof(float));
    model_init_values(&m->config, values, seed);
    for (size_t i = 0; i < m->num_params; i++) m->params_memory[i] = (ref_real)values[i];
    free(values);
    memset(m->m_memory, 0, m->num_params * sizeof(ref_real));
    memset(m->v_memory, 0, m->num_params * sizeof(ref_real));
}

// The spec's norm: LayerNorm (weight and bias, eps 1e-5, mean and rstd kept) or RMSNorm (weight, the
// config's eps, rstd kept).
static inline void ref_model_norm_forward(const ref_model* m, ref_real* out, ref_real* mean, ref_real* rstd,
                                          const ref_real* inp, const ref_real* weight, const ref_real* bias,
                                          int N, int C) {
    if (m->spec->norm == MODEL_NORM_LAYERNORM) ref_layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
    else ref_rmsnorm_forward(out, rstd, inp, weight, N, C, m->config.norm_eps);
}

static inline void ref_model_norm_backward(const ref_model* m, ref_real* dinp, ref_real* dweight, ref_real* dbias,
                                           const ref_real* dout, const ref_real* inp, const ref_real* mean,
                                           const ref_real* rstd, const ref_real* weight, int N, int C) {
    if (m->spec->norm == MODEL_NORM_LAYERNORM)
        ref_layernorm_backward(dinp, dweight, dbias, dout, inp, mean, rstd, weight, N, C);
    else ref_rmsnorm_backward(dinp, dweight, dout, inp, rstd, weight, N, C);
}

// inputs, targets (B * T): ids in [0, V), targets also -1 = ignore (targets may be NULL: logits only).
// Returns the mean loss over the counted positions (0 when none counts), or -1 without targets.
// Leaves every activation in m->acts, logits included, dense for this (B, T).
static inline ref_real ref_model_forward(ref_model* m, const int* inputs, const int* targets, int B, int T) {
    const ModelConfig* c = &m->config;
    const ModelSpec* s = m->spec;
    int L = c->num_layers, C = c->channels, NH = c->num_heads, NKV = c->num_kv_heads, F = c->ffn_hidden;
    int V = c->vocab_size, Vp = c->padded_vocab_size, hs = C / NH, QKV = (int)model_qkv_dim(c);
    int UP = (int)model_dim(c, MODEL_DIM_UP);
    if (B <= 0 || T <= 0 || B > m->max_B || T > m->max_T)
        check_fail("ref_model_forward: B or T is larger than what ref_model_build allocated",
                   "build with the largest B, T");
    int BT = B * T;
    ref_check_batch("ref_model_forward", inputs, targets, BT, V);
    m->B = B;
    m->T = T;
    memcpy(m->inputs, inputs, (size_t)BT * sizeof(int));
    ref_model_point_acts(&m->acts, m->acts_memory, m, B, T);  // dense for this (B, T)
    ref_model_point_bwd(&m->bwd, m->bwd_memory, m, B, T);
    ref_model_tensors p = m->params;
    ref_model_acts a = m->acts;
    size_t btc = (size_t)BT * C, bt = (size_t)BT;
    ref_embedding_forward(a.encoded, inputs, p.tok_embed, p.pos_embed, B, T, C);
    for (int l = 0; l < L; l++) {
        const ref_real* resid = l == 0 ? a.encoded : a.residual3 + (l - 1) * btc;
        ref_real* norm1 = a.norm1 + l * btc;
        ref_real* qkv = a.qkv + l * bt * QKV;
        ref_real* atty = a.atty + l * btc;
        ref_real* resid2 = a.residual2 + l * btc;
        ref_real* norm2 = a.norm2 + l * btc;
        ref_real* fch = a.fch + l * bt * UP;
        ref_real* fch_act = a.fch_act + l * bt * F;
        ref_real* resid3 = a.residual3 + l * btc;
        ref_model_norm_forward(m, norm1, ref_at(a.norm1_mean, l * bt), a.norm1_rstd + l * bt, resid,
                               p.norm1w + l * C, ref_at(p.norm1b, l * C), BT, C);
        ref_matmul_forward(qkv, norm1, p.qkvw + (size_t)l * QKV * C, ref_at(p.qkvb, (size_t)l * QKV), BT, C, QKV);
        if (s->positions == MODEL_POS_ROPE)
            ref_rope_forward(qkv, qkv, B, T, NH + NKV, hs, QKV, c->rope_theta);  // q heads, then k heads
        ref_attention_forward(atty, a.att + (size_t)l * BT * NH * T, qkv, B, T, NH, NKV, hs);
        // the projection is written into residual2, then the stream is added in place
        ref_matmul_forward(resid2, atty, p.attprojw + (size_t)l * C * C, ref_at(p.attprojb, l * C), BT, C, C);
        ref_residual_forward(resid2, resid2, resid, btc);
        ref_model_norm_forward(m, norm2, ref_at(a.norm2_mean, l * bt), a.norm2_rstd + l * bt, resid2,
                               p.norm2w + l * C, ref_at(p.norm2b, l * C), BT, C);
        ref_matmul_forward(fch, norm2, p.fcw + (size_t)l * UP * C, ref_at(p.fcb, (size_t)l * UP), BT, C, UP);
        if (s->mlp == MODEL_MLP_GELU) ref_gelu_forward(fch_act, fch, bt * F);
        else ref_swiglu_forward(fch_act, fch, BT, F);
        ref_matmul_forward(resid3, fch_act, p.fcprojw + (size_t)l * C * F, ref_at(p.fcprojb, l * C), BT, F, C);
        ref_residual_forward(resid3, resid3, resid2, btc);
    }
    ref_model_norm_forward(m, a.normf, a.normf_mean, a.normf_rstd, a.residual3 + (L - 1) * btc, p.normfw, p.normfb,
                           BT, C);
    ref_matmul_forward(a.logits, a.normf, ref_model_head(m, &p), NULL, BT, C, Vp);
    m->has_targets = targets != NULL;
    m->mean_loss = -1;
    if (targets) {
        memcpy(m->targets, targets, (size_t)BT * sizeof(int));
        m->mean_loss = ref_mean_loss(a.losses, a.lse, a.logits, targets, BT, V, Vp, &m->num_counted);
    }
    return m->mean_loss;
}

static inline void ref_model_zero_grad(ref_model* m) {
    memset(m->grads_memory, 0, m->num_params * sizeof(ref_real));
}

// Gradient of the last forward's mean loss with respect to every parameter, into m->grads. The grads
// are zeroed first: this is one full backward, not an accumulation (sum micro-batches yourself).
static inline void ref_model_backward(ref_model* m) {
    if (!m->has_targets)
        check_fail("ref_model_backward: the last ref_model_forward had no targets", "pass targets to the forward");
    const ModelConfig* c = &m->config;
    const ModelSpec* s = m->spec;
    int L = c->num_layers, C = c->channels, NH = c->num_heads, NKV = c->num_kv_heads, F = c->ffn_hidden;
    int V = c->vocab_size, Vp = c->padded_vocab_size, hs = C / NH, QKV = (int)model_qkv_dim(c);
    int UP = (int)model_dim(c, MODEL_DIM_UP);
    int B = m->B, T = m->T, BT = B * T;
    size_t btc = (size_t)BT * C, bt = (size_t)BT;
    ref_model_tensors p = m->params, g = m->grads;
    ref_model_acts a = m->acts;
    ref_model_bwd d = m->bwd;
    ref_model_zero_grad(m);
    double dloss = m->num_counted ? 1.0 / m->num_counted : 0.0;  // d(mean)/d(each counted loss)
    ref_crossentropy_backward(d.dlogits, a.logits, a.lse, m->targets, dloss, BT, V, Vp);
    memset(d.dnorm, 0, btc * sizeof(ref_real));
    ref_matmul_backward(d.dnorm, ref_model_head(m, &g), NULL, d.dlogits, a.normf, ref_model_head(m, &p), BT, C, Vp);
    memset(d.dresidual, 0, btc * sizeof(ref_real));
    ref_model_norm_backward(m, d.dresidual, g.normfw, g.normfb, d.dnorm, a.residual3 + (L - 1) * btc, a.normf_mean,
                            a.normf_rstd, p.normfw, BT, C);
    // d.dresidual holds d(loss)/d(residual3 of layer l); each half of the block adds its branch's
    // gradient into it (the skip connection passes it through unchanged)
    for (int l = L - 1; l >= 0; l--) {
        const ref_real* resid = l == 0 ? a.encoded : a.residual3 + (l - 1) * btc;
        const ref_real* qkv = a.qkv + l * bt * QKV;
        const ref_real* resid2 = a.residual2 + l * btc;
        memset(d.dfch_act, 0, bt * F * sizeof(ref_real));
        ref_matmul_backward(d.dfch_act, g.fcprojw + (size_t)l * C * F, ref_at(g.fcprojb, l * C), d.dresidual,
                            a.fch_act + l * bt * F, p.fcprojw + (size_t)l * C * F, BT, F, C);
        if (s->mlp == MODEL_MLP_GELU) ref_gelu_backward(d.dfch, d.dfch_act, a.fch + l * bt * UP, bt * F);
        else ref_swiglu_backward(d.dfch, d.dfch_act, a.fch + l * bt * UP, BT, F);
        memset(d.dnorm, 0, btc * sizeof(ref_real));
        ref_matmul_backward(d.dnorm, g.fcw + (size_t)l * UP * C, ref_at(g.fcb, (size_t)l * UP), d.dfch,
                            a.norm2 + l * btc, p.fcw + (size_t)l * UP * C, BT, C, UP);
        ref_model_norm_backward(m, d.dresidual, g.norm2w + l * C, ref_at(g.norm2b, l * C), d.dnorm, resid2,
                                ref_at(a.norm2_mean, l * bt), a.norm2_rstd + l * bt, p.norm2w + l * C, BT, C);
        // now d.dresidual = d(loss)/d(residual2)
        memset(d.datty, 0, btc * sizeof(ref_real));
        ref_matmul_backward(d.datty, g.attprojw + (size_t)l * C * C, ref_at(g.attprojb, l * C), d.dresidual,
                            a.atty + l * btc, p.attprojw + (size_t)l * C * C, BT, C, C);
        memset(d.dqkv, 0, bt * QKV * sizeof(ref_real));
        ref_attention_backward(d.dqkv, d.datty, qkv, a.att + (size_t)l * BT * NH * T, B, T, NH, NKV, hs);
        if (s->positions == MODEL_POS_ROPE) ref_rope_backward(d.dqkv, d.dqkv, B, T, NH + NKV, hs, QKV, c->rope_theta);
        memset(d.dnorm, 0, btc * sizeof(ref_real));
        ref_matmul_backward(d.dnorm, g.qkvw + (size_t)l * QKV * C, ref_at(g.qkvb, (size_t)l * QKV), d.dqkv,
                            a.norm1 + l * btc, p.qkvw + (size_t)l * QKV * C, BT, C, QKV);
        ref_model_norm_backward(m, d.dresidual, g.norm1w + l * C, ref_at(g.norm1b, l * C), d.dnorm, resid,
                                ref_at(a.norm1_mean, l * bt), a.norm1_rstd + l * bt, p.norm1w + l * C, BT, C);
    }
    ref_embedding_backward(g.tok_embed, g.pos_embed, d.dresidual, m->inputs, B, T, C);
}

// Global L2 norm of all gradients (sum of squares in double).
static inline double ref_model_grad_norm(const ref_model* m) {
    return sqrt(ref_sum_squares(m->grads_memory, m->num_params));
}

// The L2 norm of tensor i's gradient (the family's table order), in double.
static inline double ref_model_tensor_grad_norm(const ref_model* m, int i) {
    return sqrt(ref_sum_squares(m->grads_memory + m->tensor_offset[i], m->tensor_size[i]));
}

// Scales the gradients by max_norm / norm when the global norm exceeds max_norm (llm.c's rule, no
// epsilon); returns the norm before clipping.
static inline double ref_model_clip_grad_norm(ref_model* m, double max_norm) {
    double norm = ref_model_grad_norm(m);
    if (norm > max_norm) {
        double scale = max_norm / norm;
        for (size_t i = 0; i < m->num_params; i++) m->grads_memory[i] = (ref_real)(m->grads_memory[i] * scale);
    }
    return norm;
}

// One AdamW step (ref_adamw_update: PyTorch's formulation, decoupled weight decay) at step t = 1, 2, ...,
// one call per tensor, with weight decay where the family's table says (the weight matrices and the
// embeddings; not the norms' weights or the biases).
static inline void ref_model_adamw_step(ref_model* m, double lr, double beta1, double beta2, double eps,
                                        double weight_decay, int t) {
    for (int i = 0; i < m->spec->num_tensors; i++) {
        size_t off = m->tensor_offset[i];
        ref_adamw_update(m->params_memory + off, m->m_memory + off, m->v_memory + off, m->grads_memory + off,
                         m->tensor_size[i], lr, beta1, beta2, eps, m->spec->tensors[i].decay ? weight_decay : 0.0, t);
    }
}
