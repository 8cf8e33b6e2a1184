// gpt_layout.cuh: what the GPT-2 model is in memory: its config, the parameter tensors in llm.c's order
// (wte (Vp, C), wpe (maxT, C), ln1w, ln1b (L, C), qkvw (L, 3C, C), qkvb (L, 3C), attprojw (L, C, C),
// attprojb (L, C), ln2w, ln2b (L, C), fcw (L, 4C, C), fcb (L, 4C), fcprojw (L, C, 4C), fcprojb (L, C),
// lnfw, lnfb (C); the config and the tensors' sizes and names are host-only, in gpt_config.h), the
// activations, and the model struct with its one block per lifetime; and the functions that carve those
// blocks into tensors. The steps that use them are in gpt.cuh.
#pragma once
#include "../core/cuda_common.cuh"
#include "../layers/encoder.cuh"
#include "../layers/layernorm.cuh"
#include "../layers/linear.cuh"
#include "../attention/attention.cuh"
#include "../optim/global_norm.cuh"
#include "../dist/comm.cuh"
#include "../optim/zero.cuh"         // ZeroPlan: the optimizer state sharded over the ranks
#include "model_step.cuh"   // ModelStaging, ModelReduce, model_carve
#include "../head/fused_lce.cuh"
#include "gpt_config.h"     // GptConfig, the tensor ids, sizes and names (host-only)

typedef struct {
    bf16 *wte, *wpe, *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb;   // shapes in the header comment
    bf16 *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb, *lnfw, *lnfb;
} GptParams;

typedef struct {
    float *wte, *wpe, *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb;  // same shapes, fp32
    float *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb, *lnfw, *lnfb;
} GptGrads;

// Per-layer tensors are (L, ...) with the layer stride of the allocated max_B·max_T rows (BT below).
typedef struct {
    bf16* encoded;     // (BT, C) the stream entering layer 0
    bf16* ln1;         // (L, BT, C)
    float* ln1_mean;   // (L, BT)
    float* ln1_rstd;   // (L, BT)
    bf16* qkv;         // (L, BT, 3C)
    bf16* atty;        // (L, BT, C) attention output before attproj
    float* att_lse;    // (L, B, NH, T) softmax logsumexp per query row
    bf16* residual2;   // (L, BT, C) the stream after the attention half
    bf16* ln2;         // (L, BT, C)
    float* ln2_mean;   // (L, BT)
    float* ln2_rstd;   // (L, BT)
    bf16* fch;         // (L, BT, 4C) before GELU
    bf16* fch_gelu;    // (L, BT, 4C), or (BT, 4C) with recompute (GELU rerun in the backward)
    bf16* residual3;   // (L, BT, C) block output
    bf16* lnf;         // (BT, C)
    float* lnf_mean;   // (BT)
    float* lnf_rstd;   // (BT)
    // backward scratch, reused by every layer
    bf16* dresidual;   // (BT, C) gradient of the stream at the current depth
    bf16* dln;         // (BT, C) gradient of a LayerNorm output
    bf16* datty;       // (BT, C)
    bf16* dqkv;        // (BT, 3C)
    bf16* dfch;        // (BT, 4C)
    float* att_D;      // (B, NH, T) Σ p·dp per query row
    float* scratch;    // (gpt_scratch_floats(B, T, C)) partial sums of the column reductions and the norm
    float* norm;       // (4) grad norm, clip scale, skip flag (1: the step is not applied), stop flag
    float* loss;       // (1) mean loss over the micro-steps since gpt_zero_grad (and over the ranks,
                       // once gpt_update has added them up)
    float* logits_row; // (Vp) fp32 logits of one position, for sampling
    int* inputs;       // (BT) device copy of the batch
    int* targets;      // (BT)
    EncoderBuckets buckets;  // device copy of the positions grouped by token
} GptActs;

// the most of: the bias gradient's partials (widest layer 4C), LayerNorm's, the attention backward's
// for the QKV bias (width 3C)
static inline size_t gpt_scratch_floats(int B, int T, int C) {
    size_t bias = (size_t)COLUMN_SUMS_CHUNKS * 4 * C, ln = (size_t)LN_BWD_BLOCKS * 3 * C;
    size_t att = attention_bias_scratch(B, T, 3 * C), most = bias > ln ? bias : ln;
    return att > most ? att : most;
}

typedef struct {
    GptConfig config;
    int max_B, max_T, recompute;
    int B, T;                     // of the last gpt_forward
    size_t num_params;
    size_t tensor_offset[GPT_NUM_TENSORS], tensor_size[GPT_NUM_TENSORS];
    bf16* params_memory;          // (num_params) bf16
    int16_t* master_lo;           // (zero.shard_size) the fp32 master weights' remainders, the bf16 parameters
                                  // their high halves (llmc/optim/master.cuh): this rank's share (all with world 1)
    float* grads_memory;          // (num_params) fp32
    float* m_memory;              // (zero.shard_size) AdamW first moment
    float* v_memory;              // (zero.shard_size) AdamW second moment
    // data parallelism (world 1: comm has no backend and none of this is used)
    Comm* comm;                   // the ranks; never NULL after gpt_build
    Comm single;                  // what comm points to when gpt_build was given none
    ZeroPlan zero;                // slices of the parameters and this rank's parts of them
    ModelReduce reduce;           // the gradient reduce-scatters behind the backward (world > 1)
    GptParams params;
    GptGrads grads;
    void* acts_memory;
    size_t acts_bytes;
    GptActs acts;
    FusedLce head;
    ModelStaging staging;         // the batch on its way to the GPU (pinned)
} GptModel;

// --- layout ------------------------------------------------------------------------------------

static inline void gpt_point_params(GptModel* m) {
    bf16** p[GPT_NUM_TENSORS] = {&m->params.wte, &m->params.wpe, &m->params.ln1w, &m->params.ln1b, &m->params.qkvw,
        &m->params.qkvb, &m->params.attprojw, &m->params.attprojb, &m->params.ln2w, &m->params.ln2b, &m->params.fcw,
        &m->params.fcb, &m->params.fcprojw, &m->params.fcprojb, &m->params.lnfw, &m->params.lnfb};
    float** g[GPT_NUM_TENSORS] = {&m->grads.wte, &m->grads.wpe, &m->grads.ln1w, &m->grads.ln1b, &m->grads.qkvw,
        &m->grads.qkvb, &m->grads.attprojw, &m->grads.attprojb, &m->grads.ln2w, &m->grads.ln2b, &m->grads.fcw,
        &m->grads.fcb, &m->grads.fcprojw, &m->grads.fcprojb, &m->grads.lnfw, &m->grads.lnfb};
    for (int i = 0; i < GPT_NUM_TENSORS; i++) {
        *p[i] = m->params_memory + m->tensor_offset[i];
        *g[i] = m->grads_memory + m->tensor_offset[i];
    }
}

static inline size_t gpt_point_acts(GptActs* a, const GptConfig* c, int B, int T, int recompute, char* base) {
    size_t L = c->num_layers, C = c->channels, NH = c->num_heads, BT = (size_t)B * T, h = sizeof(bf16), f = sizeof(float);
    void** const p[] = {(void**)&a->encoded, (void**)&a->ln1, (void**)&a->ln1_mean, (void**)&a->ln1_rstd,
        (void**)&a->qkv, (void**)&a->atty, (void**)&a->att_lse, (void**)&a->residual2, (void**)&a->ln2,
        (void**)&a->ln2_mean, (void**)&a->ln2_rstd, (void**)&a->fch, (void**)&a->fch_gelu, (void**)&a->residual3,
        (void**)&a->lnf, (void**)&a->lnf_mean, (void**)&a->lnf_rstd, (void**)&a->dresidual, (void**)&a->dln,
        (void**)&a->datty, (void**)&a->dqkv, (void**)&a->dfch, (void**)&a->att_D, (void**)&a->scratch,
        (void**)&a->norm, (void**)&a->loss, (void**)&a->logits_row, (void**)&a->inputs, (void**)&a->targets,
        (void**)&a->buckets.tokens, (void**)&a->buckets.offsets, (void**)&a->buckets.pos};
    const size_t bytes[] = {BT * C * h, L * BT * C * h, L * BT * f, L * BT * f,
        L * BT * 3 * C * h, L * BT * C * h, L * BT * NH * f, L * BT * C * h, L * BT * C * h,
        L * BT * f, L * BT * f, L * BT * 4 * C * h, (recompute ? 1 : L) * BT * 4 * C * h, L * BT * C * h,
        BT * C * h, BT * f, BT * f, BT * C * h, BT * C * h,
        BT * C * h, BT * 3 * C * h, BT * 4 * C * h, BT * NH * f, gpt_scratch_floats(B, T, (int)C) * f,
        4 * f, f, (size_t)c->padded_vocab_size * f, BT * sizeof(int), BT * sizeof(int),
        BT * sizeof(int), (BT + 1) * sizeof(int), BT * sizeof(int)};
    return model_carve(p, bytes, (int)(sizeof(bytes) / sizeof(bytes[0])), base);
}

