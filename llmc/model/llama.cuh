// llama.cuh: the Llama-style model on the GPU: build, init, forward, backward, update (what it is in
// memory: llama_layout.cuh). It wires the layers of llmc/ together; the kernels live in their own files.
//   x = embed[inputs]; per layer  q, k, v = wqkv · rmsnorm(x)
//                                 x += wo · attention(rope(q), rope(k), v)    (grouped-query, causal)
//                                 gate, up = w_gateup · rmsnorm(x);  x += w_down · (silu(gate) · up)
//   loss = CE(rmsnorm(x) · lm_headᵀ, targets) through the fused head (llmc/head/fused_lce.cuh), untied.
// No biases, no position table (positions enter through RoPE, llmc/layers/rope.cuh, applied by the attention
// layer: q rotated inside the flash kernels, which leave qkv holding the rotated q and k, as the CPU
// reference's does; its backward in their dq and dk epilogues). The same math as the CPU
// reference dev/ref/llama_ref.h, with its parameter layout (llama_config.h).
// Precision: bf16 parameters and activations; fp32 master weights (kept as the bf16 parameters and an
// int16 remainder, exact: llmc/optim/master_split.h), gradients, AdamW moments, RMSNorm statistics, attention
// softmax and every reduction; the residual-stream gradient is bf16 (as GPT-2's).
// Memory, allocated once in llama_build, one block per lifetime: parameters (bf16), the master weights'
// remainders (int16) + m + v (fp32), gradients (fp32), activations + backward scratch + the RoPE table,
// the head's scratch. The training step allocates nothing. Never materialized: the (B·T, V) logits, the
// (B, NH, T, T) attention.
// Determinism: no floating-point atomics anywhere in the step (see each layer's header).
// Data parallelism (ZeRO-1), the optimizer step and the blocks' allocation are GPT-2's (llmc/model/model_step.cuh,
// llmc/optim/optim.cuh, llmc/model/model_state.cuh).
#pragma once
#include <math.h>
#include "../core/cuda_common.cuh"
#include "../layers/matmul.cuh"
#include "../layers/encoder.cuh"
#include "../layers/rmsnorm.cuh"
#include "../layers/linear.cuh"
#include "../layers/rope.cuh"
#include "../layers/swiglu.cuh"
#include "../attention/attention.cuh"           // flash attention for head sizes 64 and 128, else the simple kernels
#include "../head/fused_lce.cuh"
#include "../core/rand.h"
#include "../optim/optim.cuh"               // OptimState: set, update
#include "model_state.cuh"         // the blocks both model families hold: built, viewed and freed
#include "llama_layout.cuh"        // LlamaConfig, LlamaModel and their memory layout

// --- build / free --------------------------------------------------------------------------------

// The slices of ZeRO (llmc/optim/zero.cuh): each layer's part of each per-layer tensor, in bucket l (complete
// after layer l's backward); final_norm and lm_head in bucket L (complete first: the head's dW and the
// final norm's backward come before any layer's); embed whole, complete only at the end (the token
// embedding's backward). Returns the number of slices (at most LLAMA_NUM_TENSORS · L).
static inline int llama_slices(ZeroSlice* out, const LlamaModel* m) {
    int L = m->config.num_layers, n = 0;
    for (int i = 0; i < LLAMA_NUM_TENSORS; i++) {
        int whole = i == LLAMA_EMBED || i == LLAMA_FINAL_NORM || i == LLAMA_LM_HEAD;
        int parts = whole ? 1 : L;
        for (int l = 0; l < parts; l++) {
            ZeroSlice* z = &out[n++];
            z->size = m->tensor_size[i] / parts;
            z->offset = m->tensor_offset[i] + (size_t)l * z->size;
            z->bucket = !whole ? l : i == LLAMA_EMBED ? -1 : L;
            z->decay = !llama_tensor_is_norm(i);
        }
    }
    return n;
}

static inline void llama_check_config(const LlamaConfig* c, int B, int T) {
    int ok = c->num_layers > 0 && c->num_heads > 0 && c->num_kv_heads > 0 && c->channels > 0 &&
             c->channels % c->num_heads == 0 && c->num_heads % c->num_kv_heads == 0 &&
             (c->channels / c->num_heads) % 16 == 0 && c->channels % 8 == 0 && c->channels <= RMS_MAX_C &&
             c->ffn_hidden > 0 && c->ffn_hidden % 8 == 0 && c->vocab_size > 0 &&
             c->vocab_size <= c->padded_vocab_size && c->padded_vocab_size % 8 == 0 && c->rope_theta > 0.0 &&
             c->norm_eps >= 0.0 && B > 0 && T > 0 && T <= c->max_seq_len;
    if (!ok)
        check_fail("llama_build: bad model config or batch shape",
                   "need C % NH == 0 with hs = C/NH a multiple of 16, NH % NKV == 0, C % 8 == 0 and C <= 2048, "
                   "F % 8 == 0, V <= Vp with Vp % 8 == 0, theta > 0, eps >= 0, 0 < T <= max_seq_len, B > 0");
}

// Everything for batches of up to B x T tokens. head: the LM head's path (llmc/head/fused_lce.cuh): auto,
// staged, blocks or chunks, a fused head whose scratch fits head_scratch bytes (0: sized by the head),
// or unfused (bf16 logits of all B·T rows at once). comm: the ranks of a data-parallel run, or NULL for
// one GPU alone; with world > 1 this rank keeps its share of the optimizer state (ZeRO-1), and every
// slice must divide by the world size, else this exits naming the slice.
static inline void llama_build_dist(LlamaModel* m, const LlamaConfig* c, int B, int T, FusedLcePath head,
                                    size_t head_scratch, Comm* comm) {
    llama_check_config(c, B, T);
    memset(m, 0, sizeof(*m));
    m->config = *c;
    m->max_B = B;
    m->max_T = T;
    llama_tensor_sizes(m->tensor_size, c);
    for (int i = 0; i < LLAMA_NUM_TENSORS; i++) {
        m->tensor_offset[i] = m->num_params;
        m->num_params += m->tensor_size[i];
    }
    ZeroSlice* slices = (ZeroSlice*)malloc_check((size_t)LLAMA_NUM_TENSORS * c->num_layers * sizeof(ZeroSlice));
    model_state_build(m, c, slices, llama_slices(slices, m), comm);
    free(slices);
    llama_point_params(m);
    m->acts_bytes = llama_point_acts(&m->acts, c, B, T, NULL);
    cuda_check(cudaMalloc(&m->acts_memory, m->acts_bytes));
    cuda_check(cudaMemset(m->acts_memory, 0, m->acts_bytes));
    llama_point_acts(&m->acts, c, B, T, (char*)m->acts_memory);
    GpuContext legacy;  // rope_table_fill uses only the stream: the legacy one, as the memsets
    memset(&legacy, 0, sizeof(legacy));
    rope_table_fill(m->acts.rope, T, c->channels / c->num_heads, c->rope_theta, &legacy);
    cuda_check(cudaDeviceSynchronize());  // the legacy stream's work, which ctx's non-blocking one does not wait for
    model_head_build(m, c, B, T, head, head_scratch);
}

static inline void llama_build(LlamaModel* m, const LlamaConfig* c, int B, int T, FusedLcePath head, size_t head_scratch) {
    llama_build_dist(m, c, B, T, head, head_scratch, NULL);
}

static inline void llama_free(LlamaModel* m) { model_state_free(m); }

// The model's optimizer state (llmc/optim/optim.cuh): pointers into its blocks.
static inline OptimState llama_optim(LlamaModel* m) { return model_optim(m); }

// Sets the parameters from host fp32 values (num_params, in layout order): master = values (this
// rank's share of them), bf16 params = their high halves (llmc/optim/master.cuh), AdamW moments cleared.
static inline void llama_set_params(LlamaModel* m, const float* values, const GpuContext* ctx) {
    OptimState o = llama_optim(m);
    optim_set_params(&o, values, ctx);
}

// The reference's init (dev/ref/llama_ref.h): weight matrices N(0, 0.02), the residual projections wo
// and w_down N(0, 0.02/√(2L)), RMSNorm weights 1 (drawing nothing), the padded rows of embed and lm_head
// 0. Normals by Box-Muller on splitmix64 (llmc/core/rand.h), tensor by tensor in layout order: the same
// numbers as llama_ref_init_params for the same seed.
static inline void llama_init_params(LlamaModel* m, uint64_t seed, const GpuContext* ctx) {
    const LlamaConfig* c = &m->config;
    float* v = (float*)malloc_check(m->num_params * sizeof(float));
    double resid_std = 0.02 / sqrt(2.0 * c->num_layers);
    uint64_t rng = seed;
    for (int i = 0; i < LLAMA_NUM_TENSORS; i++) {
        float* p = v + m->tensor_offset[i];
        int table = i == LLAMA_EMBED || i == LLAMA_LM_HEAD;
        size_t n = table ? (size_t)c->vocab_size * c->channels : m->tensor_size[i];
        double std = (i == LLAMA_WO || i == LLAMA_WDOWN) ? resid_std : 0.02;
        for (size_t j = 0; j < m->tensor_size[i]; j++)
            p[j] = llama_tensor_is_norm(i) ? 1.0f : j < n ? (float)(std * rand_normal(&rng)) : 0.0f;
    }
    llama_set_params(m, v, ctx);
    free(v);
}

// --- forward -------------------------------------------------------------------------------------

// The trunk for inputs (B, T) host int32 in [0, V): every activation up to the final norm. No loss: the
// loss comes with llama_backward (training, fused with the head's gradient) or llama_eval_loss.
static inline void llama_forward(LlamaModel* m, const int* inputs, int B, int T, const GpuContext* ctx) {
    const LlamaConfig* c = &m->config;
    if (B <= 0 || T <= 0 || B * T > m->max_B * m->max_T || T > m->max_T)
        check_fail("llama_forward: batch larger than what llama_build allocated", "build with the largest B and T");
    int L = c->num_layers, C = c->channels, NH = c->num_heads, NKV = c->num_kv_heads, F = c->ffn_hidden;
    int QKV = llama_qkv_dim(c), BT = B * T;
    float eps = (float)c->norm_eps;
    size_t maxBT = (size_t)m->max_B * m->max_T, lc = maxBT * C;
    m->B = B;
    m->T = T;
    model_stage(&m->staging, m->acts.inputs, m->staging.inputs, inputs, BT, ctx);
    LlamaParams p = m->params;
    LlamaActs a = m->acts;
    encoder_forward(a.encoded, a.inputs, p.embed, NULL, B, T, C, ctx);
    rmsnorm_forward(a.attn_norm, a.attn_rstd, a.encoded, p.attn_norm, BT, C, eps, ctx);
    for (int l = 0; l < L; l++) {
        const bf16* resid = l == 0 ? a.encoded : a.residual3 + (l - 1) * lc;
        bf16* qkv = a.qkv + l * maxBT * QKV;
        bf16* atty = a.atty + l * lc;
        bf16* res2 = a.residual2 + l * lc;
        bf16* ffn_norm = a.ffn_norm + l * lc;
        bf16* gateup = a.gateup + l * maxBT * 2 * F;
        bf16* swiglu = a.swiglu + l * maxBT * F;
        bf16* res3 = a.residual3 + l * lc;
        linear_forward(qkv, a.attn_norm + l * lc, p.wqkv + (size_t)l * QKV * C, NULL, BT, C, QKV, ctx);
        attention_forward(atty, a.att_lse + l * maxBT * NH, qkv, a.rope, B, T, C, NH, NKV, ctx);  // rotates q, k
        linear_forward(res2, atty, p.wo + (size_t)l * C * C, NULL, BT, C, C, ctx);
        residual_rmsnorm_forward(res2, ffn_norm, a.ffn_rstd + l * maxBT, res2, resid, p.ffn_norm + l * C, BT, C, eps, ctx);
        linear_forward(gateup, ffn_norm, p.w_gateup + (size_t)l * 2 * F * C, NULL, BT, C, 2 * F, ctx);
        swiglu_forward(swiglu, gateup, BT, F, ctx);
        linear_forward(res3, swiglu, p.w_down + (size_t)l * C * F, NULL, BT, F, C, ctx);
        // the block output, and the RMSNorm that reads it next: attn_norm of layer l+1, or the final norm
        int last = l == L - 1;
        residual_rmsnorm_forward(res3, last ? a.final_norm : a.attn_norm + (l + 1) * lc,
                                 last ? a.final_rstd : a.attn_rstd + (l + 1) * maxBT, res3, res2,
                                 last ? p.final_norm : p.attn_norm + (l + 1) * C, BT, C, eps, ctx);
    }
}

static inline void llama_stage_targets(LlamaModel* m, const int* targets, const GpuContext* ctx) {
    model_stage(&m->staging, m->acts.targets, m->staging.targets, targets, (size_t)m->B * m->T, ctx);
}

// Mean loss of the last llama_forward against targets (B, T) host int32 (-1 = ignore), into
// m->head.loss (device). Forward only (F FLOPs of the head).
static inline void llama_eval_loss(LlamaModel* m, const int* targets, const GpuContext* ctx) {
    llama_stage_targets(m, targets, ctx);
    fused_lce_forward(&m->head, m->acts.final_norm, m->params.lm_head, m->acts.targets, m->B * m->T, ctx);
}

// fp32 logits (Vp) of position `row` of the last llama_forward into m->acts.logits_row (for sampling).
static inline void llama_logits_row(LlamaModel* m, int row, const GpuContext* ctx) {
    int C = m->config.channels, Vp = m->config.padded_vocab_size;
    matmul(ctx, m->acts.logits_row, CUDA_R_32F, Vp, m->acts.final_norm + (size_t)row * C, C, 0, m->params.lm_head, C,
           1, 1, Vp, C, 1.0f, 0.0f);
}

// --- backward ------------------------------------------------------------------------------------

// Clears the gradients and the loss accumulator: the start of an optimizer step.
static inline void llama_zero_grad(LlamaModel* m, const GpuContext* ctx) {
    cuda_check(cudaMemsetAsync(m->grads_memory, 0, m->num_params * sizeof(float), ctx->stream));
    cuda_check(cudaMemsetAsync(m->acts.loss, 0, sizeof(float), ctx->stream));
    profile_mark(ctx->prof, "zero grad", ctx->stream);
}

// Bucket b's gradients are complete: reduce-scatter them behind the backward (llmc/model/model_step.cuh).
static inline void llama_bucket_done(LlamaModel* m, int bucket, int reduce, const GpuContext* ctx) {
    model_reduce_bucket(&m->reduce, &m->zero, m->comm, m->grads_memory, bucket, reduce, ctx);
}

// GPU time of the last step's gradient reduce-scatters on their own stream, in ms; 0 with world 1.
static inline float llama_reduce_ms(const LlamaModel* m) { return model_reduce_ms(&m->reduce); }

// Loss and gradients of the last llama_forward against targets (B, T) host int32 (-1 = ignore). The
// gradients of dloss · mean loss are ACCUMULATED into m->grads (dloss = 1 / (micro-steps · world)), and
// dloss · loss into m->acts.loss. The head computes its loss and gradient in one pass (3F); its fp32 dW
// lands in lm_head's gradient. llama_backward_reduce does the same on the last micro-step of a
// data-parallel step and also reduce-scatters the gradients across the ranks, bucket by bucket as the
// backward completes them, so that llama_update finds them reduced. With world 1 the two are the same.
static inline void llama_backward_impl(LlamaModel* m, const int* targets, float dloss, int reduce,
                                       const GpuContext* ctx) {
    const LlamaConfig* c = &m->config;
    int L = c->num_layers, C = c->channels, NH = c->num_heads, NKV = c->num_kv_heads, F = c->ffn_hidden;
    int QKV = llama_qkv_dim(c), B = m->B, T = m->T, BT = B * T;
    size_t maxBT = (size_t)m->max_B * m->max_T, lc = maxBT * C;
    cudaStream_t st = ctx->stream;
    // the host's half of the embedding's backward, while the GPU runs the head
    int nu = model_stage_backward(&m->staging, m->acts.targets, &m->acts.buckets, targets, BT, c->vocab_size, ctx);

    LlamaParams p = m->params;
    LlamaGrads g = m->grads;
    LlamaActs a = m->acts;
    profile_mark(ctx->prof, "host staging", st);
    fused_lce_forward_backward(&m->head, a.dnorm, g.lm_head, dloss, a.final_norm, p.lm_head, a.targets, BT, ctx);
    model_loss_accumulate(a.loss, m->head.loss, dloss, ctx);
    cuda_check(cudaMemsetAsync(a.dresidual, 0, (size_t)BT * C * sizeof(bf16), st));
    profile_mark(ctx->prof, "head: other", st);
    rmsnorm_backward(a.dresidual, g.final_norm, a.scratch, a.dnorm, a.residual3 + (L - 1) * lc, a.final_rstd,
                     p.final_norm, BT, C, ctx);
    llama_bucket_done(m, L, reduce, ctx);
    for (int l = L - 1; l >= 0; l--) {
        const bf16* resid = l == 0 ? a.encoded : a.residual3 + (l - 1) * lc;
        const bf16* qkv = a.qkv + l * maxBT * QKV;
        const bf16* atty = a.atty + l * lc;
        // a.dresidual = dL/d(residual3 of layer l): the MLP half
        linear_backward(a.dswiglu, g.w_down + (size_t)l * C * F, NULL, NULL, a.dresidual, a.swiglu + l * maxBT * F,
                        p.w_down + (size_t)l * C * F, BT, F, C, NULL, ctx);
        swiglu_backward(a.dgateup, a.dswiglu, a.gateup + l * maxBT * 2 * F, BT, F, ctx);
        linear_backward(a.dnorm, g.w_gateup + (size_t)l * 2 * F * C, NULL, NULL, a.dgateup, a.ffn_norm + l * lc,
                        p.w_gateup + (size_t)l * 2 * F * C, BT, C, 2 * F, NULL, ctx);
        rmsnorm_backward(a.dresidual, g.ffn_norm + l * C, a.scratch, a.dnorm, a.residual2 + l * lc,
                         a.ffn_rstd + l * maxBT, p.ffn_norm + l * C, BT, C, ctx);
        // now dL/d(residual2): the attention half (RoPE's backward included)
        linear_backward(a.datty, g.wo + (size_t)l * C * C, NULL, NULL, a.dresidual, atty, p.wo + (size_t)l * C * C,
                        BT, C, C, NULL, ctx);
        attention_backward(a.dqkv, a.att_D, a.datty, atty, qkv, a.rope, a.att_lse + l * maxBT * NH, NULL, NULL, B, T, C,
                           NH, NKV, ctx);
        linear_backward(a.dnorm, g.wqkv + (size_t)l * QKV * C, NULL, NULL, a.dqkv, a.attn_norm + l * lc,
                        p.wqkv + (size_t)l * QKV * C, BT, C, QKV, NULL, ctx);
        rmsnorm_backward(a.dresidual, g.attn_norm + l * C, a.scratch, a.dnorm, resid, a.attn_rstd + l * maxBT,
                         p.attn_norm + l * C, BT, C, ctx);
        llama_bucket_done(m, l, reduce, ctx);
    }
    encoder_backward(g.embed, NULL, a.dresidual, &a.buckets, nu, B, T, C, ctx);
    model_reduce_finish(&m->reduce, &m->zero, m->comm, m->grads_memory, reduce, ctx);  // the last bucket, then wait
}

static inline void llama_backward(LlamaModel* m, const int* targets, float dloss, const GpuContext* ctx) {
    llama_backward_impl(m, targets, dloss, 0, ctx);
}

static inline void llama_backward_reduce(LlamaModel* m, const int* targets, float dloss, const GpuContext* ctx) {
    llama_backward_impl(m, targets, dloss, 1, ctx);
}

// --- update --------------------------------------------------------------------------------------

// As gpt_update (llmc/optim/optim.cuh): gradient norm, clip scale and the step's flags into m->acts.norm, AdamW
// at step t = 1, 2, ... on this rank's parts with weight decay on the weight matrices (not the RMSNorm
// weights), then (world > 1) the bf16 parameters gathered from every rank. clip <= 0: no clipping; a
// non-finite norm or loss skips the step (m->acts.norm[2] = 1); m->acts.norm[3]: some rank asked to stop.
// With world > 1 the gradients must have been reduced (llama_backward_reduce on the last micro-step).
// Collective: every rank calls it.
static inline void llama_update(LlamaModel* m, float lr, float beta1, float beta2, float eps, float weight_decay,
                                float clip, int t, int stop_request, const GpuContext* ctx) {
    OptimState o = llama_optim(m);
    optim_update(&o, m->acts.norm, m->acts.loss, lr, beta1, beta2, eps, weight_decay, clip, t, stop_request, ctx);
}
