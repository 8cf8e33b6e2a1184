// llama_layout.cuh: what the Llama-style model is in memory: the parameter tensors (embed (Vp, C),
// attn_norm (L, C), wqkv (L, QKV, C) with QKV = (NH + 2 NKV) hs, wo (L, C, C), ffn_norm (L, C), w_gateup
// (L, 2F, C), w_down (L, C, F), final_norm (C), lm_head (Vp, C); the config and the tensors' sizes and
// names are host-only, in llama_config.h), the activations, and the model struct with its one block per
// lifetime; and the functions that carve those blocks into tensors. The steps that use them are in
// llama.cuh.
#pragma once
#include "../core/cuda_common.cuh"
#include "../layers/encoder.cuh"
#include "../layers/rmsnorm.cuh"
#include "../dist/comm.cuh"
#include "../optim/zero.cuh"           // ZeroPlan: the optimizer state sharded over the ranks
#include "model_step.cuh"     // ModelStaging, ModelReduce, model_carve
#include "../head/fused_lce.cuh"
#include "llama_config.h"     // LlamaConfig, the tensor ids, sizes and names (host-only)

typedef struct {
    bf16 *embed, *attn_norm, *wqkv, *wo, *ffn_norm, *w_gateup, *w_down, *final_norm, *lm_head;  // shapes above
} LlamaParams;

typedef struct {
    float *embed, *attn_norm, *wqkv, *wo, *ffn_norm, *w_gateup, *w_down, *final_norm, *lm_head;  // same, fp32
} LlamaGrads;

// Per-layer tensors are (L, ...) with the layer stride of the allocated max_B·max_T rows (BT below).
typedef struct {
    bf16* encoded;      // (BT, C) embed[inputs]: the stream entering layer 0
    bf16* attn_norm;    // (L, BT, C) RMSNorm of the stream, the input of wqkv
    float* attn_rstd;   // (L, BT)
    bf16* qkv;          // (L, BT, QKV) q and k after RoPE (what attention and its backward read), v
    bf16* atty;         // (L, BT, C) attention output before wo
    float* att_lse;     // (L, B, NH, T) softmax logsumexp per query row
    bf16* residual2;    // (L, BT, C) the stream after the attention half
    bf16* ffn_norm;     // (L, BT, C)
    float* ffn_rstd;    // (L, BT)
    bf16* gateup;       // (L, BT, 2F) gate | up, before SwiGLU
    bf16* swiglu;       // (L, BT, F) silu(gate) · up, the input of w_down
    bf16* residual3;    // (L, BT, C) block output
    bf16* final_norm;   // (BT, C)
    float* final_rstd;  // (BT)
    float* rope;        // (max_T, hs/2, 2) cos and sin of RoPE's angles, filled once at build
    // backward scratch, reused by every layer
    bf16* dresidual;    // (BT, C) gradient of the stream at the current depth
    bf16* dnorm;        // (BT, C) gradient of an RMSNorm output
    bf16* datty;        // (BT, C)
    bf16* dqkv;         // (BT, QKV)
    bf16* dswiglu;      // (BT, F)
    bf16* dgateup;      // (BT, 2F)
    float* att_D;       // (B, NH, T) Σ p·dp per query row
    float* scratch;     // (RMS_BWD_BLOCKS · C) partial sums of RMSNorm's weight gradient
    float* norm;        // (4) grad norm, clip scale, skip flag (1: the step is not applied), stop flag
    float* loss;        // (1) mean loss over the micro-steps since llama_zero_grad (and over the ranks,
                        // once llama_update has added them up)
    float* logits_row;  // (Vp) fp32 logits of one position, for sampling
    int* inputs;        // (BT) device copy of the batch
    int* targets;       // (BT)
    EncoderBuckets buckets;  // device copy of the positions grouped by token
} LlamaActs;

typedef struct {
    LlamaConfig config;
    int max_B, max_T;
    int B, T;                     // of the last llama_forward
    size_t num_params;
    size_t tensor_offset[LLAMA_NUM_TENSORS], tensor_size[LLAMA_NUM_TENSORS];
    bf16* params_memory;          // (num_params) bf16
    int16_t* master_lo;           // (zero.shard_size) the fp32 master weights' remainders, the bf16 parameters
                                  // their high halves (llmc/optim/master.cuh): this rank's share (all with world 1)
    float* grads_memory;          // (num_params) fp32
    float* m_memory;              // (zero.shard_size) AdamW first moment
    float* v_memory;              // (zero.shard_size) AdamW second moment
    // data parallelism (world 1: comm has no backend and none of this is used)
    Comm* comm;                   // the ranks; never NULL after llama_build
    Comm single;                  // what comm points to when llama_build was given none
    ZeroPlan zero;                // slices of the parameters and this rank's parts of them
    ModelReduce reduce;           // the gradient reduce-scatters behind the backward (world > 1)
    LlamaParams params;
    LlamaGrads grads;
    void* acts_memory;
    size_t acts_bytes;
    LlamaActs acts;
    FusedLce head;
    ModelStaging staging;         // the batch on its way to the GPU (pinned)
} LlamaModel;

// --- layout ------------------------------------------------------------------------------------

static inline void llama_point_params(LlamaModel* m) {
    LlamaParams* p = &m->params;
    LlamaGrads* g = &m->grads;
    bf16** pp[LLAMA_NUM_TENSORS] = {&p->embed, &p->attn_norm, &p->wqkv, &p->wo, &p->ffn_norm, &p->w_gateup,
                                    &p->w_down, &p->final_norm, &p->lm_head};
    float** gp[LLAMA_NUM_TENSORS] = {&g->embed, &g->attn_norm, &g->wqkv, &g->wo, &g->ffn_norm, &g->w_gateup,
                                     &g->w_down, &g->final_norm, &g->lm_head};
    for (int i = 0; i < LLAMA_NUM_TENSORS; i++) {
        *pp[i] = m->params_memory + m->tensor_offset[i];
        *gp[i] = m->grads_memory + m->tensor_offset[i];
    }
}

static inline size_t llama_point_acts(LlamaActs* a, const LlamaConfig* c, int B, int T, char* base) {
    size_t L = c->num_layers, C = c->channels, NH = c->num_heads, F = c->ffn_hidden, QKV = llama_qkv_dim(c);
    size_t BT = (size_t)B * T, hs = C / NH, h = sizeof(bf16), f = sizeof(float);
    void** const p[] = {(void**)&a->encoded, (void**)&a->attn_norm, (void**)&a->attn_rstd, (void**)&a->qkv,
        (void**)&a->atty, (void**)&a->att_lse, (void**)&a->residual2, (void**)&a->ffn_norm, (void**)&a->ffn_rstd,
        (void**)&a->gateup, (void**)&a->swiglu, (void**)&a->residual3, (void**)&a->final_norm, (void**)&a->final_rstd,
        (void**)&a->rope, (void**)&a->dresidual, (void**)&a->dnorm, (void**)&a->datty, (void**)&a->dqkv,
        (void**)&a->dswiglu, (void**)&a->dgateup, (void**)&a->att_D, (void**)&a->scratch, (void**)&a->norm,
        (void**)&a->loss, (void**)&a->logits_row, (void**)&a->inputs, (void**)&a->targets,
        (void**)&a->buckets.tokens, (void**)&a->buckets.offsets, (void**)&a->buckets.pos};
    const size_t bytes[] = {BT * C * h, L * BT * C * h, L * BT * f, L * BT * QKV * h,
        L * BT * C * h, L * BT * NH * f, L * BT * C * h, L * BT * C * h, L * BT * f,
        L * BT * 2 * F * h, L * BT * F * h, L * BT * C * h, BT * C * h, BT * f,
        (size_t)T * hs * f, BT * C * h, BT * C * h, BT * C * h, BT * QKV * h,
        BT * F * h, BT * 2 * F * h, BT * NH * f, (size_t)RMS_BWD_BLOCKS * C * f, 4 * f,
        f, (size_t)c->padded_vocab_size * f, BT * sizeof(int), BT * sizeof(int),
        BT * sizeof(int), (BT + 1) * sizeof(int), BT * sizeof(int)};
    static_assert(sizeof(p) / sizeof(p[0]) == sizeof(bytes) / sizeof(bytes[0]), "one size per activation");
    return model_carve(p, bytes, (int)(sizeof(bytes) / sizeof(bytes[0])), base);
}
