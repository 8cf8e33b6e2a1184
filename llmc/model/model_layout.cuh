// model_layout.cuh: what a model of either family is in memory: its parameter tensors (the family's
// table, llmc/model/spec.h), one pointer per role into one block, the activations (one block, carved in
// the family's order: only what its block uses, so that each family's pointers keep their alignment),
// and the model struct with its one block per lifetime; and the functions that carve those blocks. The
// steps that use them are in model.cuh.
#pragma once
#include "../core/cuda_common.cuh"
#include "../layers/encoder.cuh"
#include "../layers/layernorm.cuh"
#include "../layers/rmsnorm.cuh"
#include "../layers/linear.cuh"
#include "../attention/attention.cuh"
#include "../optim/global_norm.cuh"
#include "../dist/comm.cuh"
#include "../optim/zero.cuh"   // ZeroPlan: the optimizer state sharded over the ranks
#include "model_step.cuh"      // ModelStaging, ModelReduce, model_carve
#include "../head/fused_lce.cuh"
#include "spec.h"              // ModelConfig, ModelSpec, the tensor tables (host-only)

// One pointer per role (MODEL_ROLE_*, spec.h), NULL where the family has no such tensor. Shapes, with
// QKV = (NH + 2 NKV) hs, UP = F (GELU) or 2F (SwiGLU):
typedef struct {
    bf16* tok_embed;   // (Vp, C)
    bf16* pos_embed;   // (maxT, C)
    bf16* norm1w;      // (L, C)
    bf16* norm1b;      // (L, C)
    bf16* qkvw;        // (L, QKV, C)
    bf16* qkvb;        // (L, QKV)
    bf16* attprojw;    // (L, C, C)
    bf16* attprojb;    // (L, C)
    bf16* norm2w;      // (L, C)
    bf16* norm2b;      // (L, C)
    bf16* fcw;         // (L, UP, C)
    bf16* fcb;         // (L, UP)
    bf16* fcprojw;     // (L, C, F)
    bf16* fcprojb;     // (L, C)
    bf16* normfw;      // (C)
    bf16* normfb;      // (C)
    bf16* lm_head;     // (Vp, C) an untied head
} ModelParams;

typedef struct {
    float *tok_embed, *pos_embed, *norm1w, *norm1b, *qkvw, *qkvb, *attprojw, *attprojb;  // same shapes, fp32
    float *norm2w, *norm2b, *fcw, *fcb, *fcprojw, *fcprojb, *normfw, *normfb, *lm_head;
} ModelGrads;

// Per-layer tensors are (L, ...) with the layer stride of the allocated max_B·max_T rows (BT below).
// A LayerNorm keeps mean and rstd, an RMSNorm rstd alone (the means are NULL).
typedef struct {
    bf16* encoded;     // (BT, C) the stream entering layer 0
    bf16* norm1;       // (L, BT, C) the norm before attention, the input of qkv
    float* norm1_mean; // (L, BT)
    float* norm1_rstd; // (L, BT)
    bf16* qkv;         // (L, BT, QKV) with RoPE, q and k rotated (what attention and its backward read), v
    bf16* atty;        // (L, BT, C) attention output before attproj
    float* att_lse;    // (L, B, NH, T) softmax logsumexp per query row
    bf16* residual2;   // (L, BT, C) the stream after the attention half
    bf16* norm2;       // (L, BT, C)
    float* norm2_mean; // (L, BT)
    float* norm2_rstd; // (L, BT)
    bf16* fch;         // (L, BT, UP) the MLP's first matrix's output, before GELU or SwiGLU
    bf16* fch_act;     // (L, BT, F) after it, the input of fcproj; GELU under recompute (BT, F), rerun in the backward
    bf16* residual3;   // (L, BT, C) block output
    bf16* normf;       // (BT, C)
    float* normf_mean; // (BT)
    float* normf_rstd; // (BT)
    float* rope;       // (max_T, hs/2, 2) cos and sin of RoPE's angles, filled once at build; NULL without RoPE
    // backward scratch, reused by every layer
    bf16* dresidual;   // (BT, C) gradient of the stream at the current depth
    bf16* dnorm;       // (BT, C) gradient of a norm's output
    bf16* datty;       // (BT, C)
    bf16* dqkv;        // (BT, QKV)
    bf16* dfch_act;    // (BT, F) SwiGLU's output gradient (GELU's backward rides in the dx GEMM: NULL)
    bf16* dfch;        // (BT, UP)
    float* att_D;      // (B, NH, T) Σ p·dp per query row
    float* scratch;    // (model_scratch_floats) partial sums of the column reductions and the norms
    float* norm;       // (4) grad norm, clip scale, skip flag (1: the step is not applied), stop flag
    float* loss;       // (1) mean loss over the micro-steps since model_zero_grad (and over the ranks,
                       // once model_update has added them up)
    float* logits_row; // (Vp) fp32 logits of one position, for sampling
    int* inputs;       // (BT) device copy of the batch
    int* targets;      // (BT)
    EncoderBuckets buckets;  // device copy of the positions grouped by token
} ModelActs;

// The most of what the backward's reductions keep partial sums of: the norm's weight (and bias)
// gradients, and with biases the bias gradients (widest layer) and the attention backward's for the
// QKV bias.
static inline size_t model_scratch_floats(const ModelConfig* c, int B, int T) {
    const ModelSpec* s = model_spec(c->family);
    size_t C = c->channels, QKV = (size_t)model_qkv_dim(c), UP = (size_t)model_dim(c, MODEL_DIM_UP);
    size_t most = s->norm == MODEL_NORM_LAYERNORM ? (size_t)LN_BWD_BLOCKS * 3 * C : (size_t)RMS_BWD_BLOCKS * C;
    if (s->mlp_bias || s->attn_bias) {
        size_t widest = s->mlp_bias && UP > QKV ? UP : QKV;
        size_t bias = (size_t)COLUMN_SUMS_CHUNKS * widest;
        if (bias > most) most = bias;
    }
    if (s->attn_bias) {
        size_t att = attention_bias_scratch(B, T, (int)QKV);
        if (att > most) most = att;
    }
    return most;
}

typedef struct {
    ModelConfig config;
    const ModelSpec* spec;        // the family's (llmc/model/spec.h)
    int max_B, max_T, recompute;  // recompute: GELU rerun in the backward (a GELU MLP only)
    int B, T;                     // of the last model_forward
    size_t num_params;
    size_t tensor_offset[MODEL_MAX_TENSORS], tensor_size[MODEL_MAX_TENSORS];  // in the spec's table order
    bf16* params_memory;          // (num_params) bf16
    int16_t* master_lo;           // (zero.shard_size) the fp32 master weights' remainders, the bf16 parameters
                                  // their high halves (llmc/optim/master.cuh): this rank's share (all with world 1)
    float* grads_memory;          // (num_params) fp32
    float* m_memory;              // (zero.shard_size) AdamW first moment
    float* v_memory;              // (zero.shard_size) AdamW second moment
    // data parallelism (world 1: comm has no backend and none of this is used)
    Comm* comm;                   // the ranks; never NULL after model_build
    Comm single;                  // what comm points to when model_build was given none
    ZeroPlan zero;                // slices of the parameters and this rank's parts of them
    ModelReduce reduce;           // the gradient reduce-scatters behind the backward (world > 1)
    ModelParams params;
    ModelGrads grads;
    bf16* head_w;                 // the LM head's weight (Vp, C): lm_head, or the token embedding when tied
    float* head_dw;               // its gradient
    void* acts_memory;
    size_t acts_bytes;
    ModelActs acts;
    FusedLce head;
    ModelStaging staging;         // the batch on its way to the GPU (pinned)
} Model;

// --- layout ------------------------------------------------------------------------------------

// The parameter and gradient pointers of each role into their blocks (NULL where the family has none).
static inline void model_point_params(Model* m) {
    ModelParams* p = &m->params;
    ModelGrads* g = &m->grads;
    bf16** pp[MODEL_NUM_ROLES] = {&p->tok_embed, &p->pos_embed, &p->norm1w, &p->norm1b, &p->qkvw, &p->qkvb,
        &p->attprojw, &p->attprojb, &p->norm2w, &p->norm2b, &p->fcw, &p->fcb, &p->fcprojw, &p->fcprojb, &p->normfw,
        &p->normfb, &p->lm_head};
    float** gp[MODEL_NUM_ROLES] = {&g->tok_embed, &g->pos_embed, &g->norm1w, &g->norm1b, &g->qkvw, &g->qkvb,
        &g->attprojw, &g->attprojb, &g->norm2w, &g->norm2b, &g->fcw, &g->fcb, &g->fcprojw, &g->fcprojb, &g->normfw,
        &g->normfb, &g->lm_head};
    for (int r = 0; r < MODEL_NUM_ROLES; r++) {
        *pp[r] = NULL;
        *gp[r] = NULL;
    }
    for (int i = 0; i < m->spec->num_tensors; i++) {
        int r = m->spec->tensors[i].role;
        *pp[r] = m->params_memory + m->tensor_offset[i];
        *gp[r] = m->grads_memory + m->tensor_offset[i];
    }
    m->head_w = m->spec->tied_head ? p->tok_embed : p->lm_head;
    m->head_dw = m->spec->tied_head ? g->tok_embed : g->lm_head;
}

// The activations of c's family for batches of B x T, carved from base (NULL: sizing) in one order for
// every family; what a family's block does not use has 0 bytes (it moves nothing) and stays NULL.
static inline size_t model_point_acts(ModelActs* a, const ModelConfig* c, int B, int T, int recompute, char* base) {
    const ModelSpec* s = model_spec(c->family);
    size_t L = c->num_layers, C = c->channels, NH = c->num_heads, QKV = (size_t)model_qkv_dim(c);
    size_t UP = (size_t)model_dim(c, MODEL_DIM_UP), F = (size_t)model_dim(c, MODEL_DIM_F), hs = C / NH;
    size_t BT = (size_t)B * T, h = sizeof(bf16), f = sizeof(float);
    size_t ln = s->norm == MODEL_NORM_LAYERNORM, rope = s->positions == MODEL_POS_ROPE;
    size_t swiglu = s->mlp == MODEL_MLP_SWIGLU, act_layers = recompute && s->mlp == MODEL_MLP_GELU ? 1 : L;
    void** const p[] = {(void**)&a->encoded, (void**)&a->norm1, (void**)&a->norm1_mean, (void**)&a->norm1_rstd,
        (void**)&a->qkv, (void**)&a->atty, (void**)&a->att_lse, (void**)&a->residual2, (void**)&a->norm2,
        (void**)&a->norm2_mean, (void**)&a->norm2_rstd, (void**)&a->fch, (void**)&a->fch_act, (void**)&a->residual3,
        (void**)&a->normf, (void**)&a->normf_mean, (void**)&a->normf_rstd, (void**)&a->rope, (void**)&a->dresidual,
        (void**)&a->dnorm, (void**)&a->datty, (void**)&a->dqkv, (void**)&a->dfch_act, (void**)&a->dfch,
        (void**)&a->att_D, (void**)&a->scratch, (void**)&a->norm, (void**)&a->loss, (void**)&a->logits_row,
        (void**)&a->inputs, (void**)&a->targets, (void**)&a->buckets.tokens, (void**)&a->buckets.offsets,
        (void**)&a->buckets.pos};
    const size_t bytes[] = {BT * C * h, L * BT * C * h, ln * L * BT * f, L * BT * f,
        L * BT * QKV * h, L * BT * C * h, L * BT * NH * f, L * BT * C * h, L * BT * C * h,
        ln * L * BT * f, L * BT * f, L * BT * UP * h, act_layers * BT * F * h, L * BT * C * h,
        BT * C * h, ln * BT * f, BT * f, rope * (size_t)T * hs * f, BT * C * h,
        BT * C * h, BT * C * h, BT * QKV * h, swiglu * BT * F * h, BT * UP * h,
        BT * NH * f, model_scratch_floats(c, B, T) * f, 4 * f, f, (size_t)c->padded_vocab_size * f,
        BT * sizeof(int), BT * sizeof(int), BT * sizeof(int), (BT + 1) * sizeof(int), BT * sizeof(int)};
    static_assert(sizeof(p) / sizeof(p[0]) == sizeof(bytes) / sizeof(bytes[0]), "one size per activation");
    size_t n = model_carve(p, bytes, (int)(sizeof(bytes) / sizeof(bytes[0])), base);
    if (base) {
        if (!ln) a->norm1_mean = a->norm2_mean = a->normf_mean = NULL;
        if (!rope) a->rope = NULL;
        if (!swiglu) a->dfch_act = NULL;
    }
    return n;
}
