// model.cuh: the model on the GPU, of either family: build, init, forward, backward, update (what it is
// in memory: model_layout.cuh; what the family is: its spec, llmc/model/spec.h). It wires the layers of
// llmc/ together as the spec says; the kernels live in their own files.
//   x = tok_embed[inputs] (+ pos_embed[0:T] with learned positions)
//   per layer  x += attproj · attention(qkv · norm1(x))      (grouped-query, causal; RoPE on q and k: the
//                                                             attention layer rotates them, llmc/layers/rope.cuh)
//              x += fcproj · act(fc · norm2(x))               (GELU of fc, or SwiGLU: silu(gate) · up)
//   loss = CE(normf(x) · headᵀ, targets) through the fused head (llmc/head/fused_lce.cuh), the head the
//   token embedding (tied) or lm_head.
// Where the families differ the code branches on the spec's fields (the norm, the positions, the MLP,
// the biases, the head), never on the family's id, so that each family issues exactly the launches, in
// the same order and with the same arguments, that its own code would: GPT-2 (LayerNorm, learned
// positions, GELU in the fc GEMM's epilogue or rerun under recompute, biases whose gradients ride in
// the LayerNorm and attention backwards, tied head) and Llama-style (RMSNorm, RoPE, SwiGLU, no biases,
// untied head), the same math as the CPU reference dev/ref/model_ref.h.
// Precision: bf16 parameters and activations; fp32 master weights (kept as the bf16 parameters and an
// int16 remainder, exact: llmc/optim/master_split.h), gradients, AdamW moments, norm statistics,
// attention softmax and every reduction. The residual-stream gradient is bf16 (as llm.c).
// Memory, allocated once in model_build, one block per lifetime: parameters (bf16), the master weights'
// remainders (int16) + m + v (fp32), gradients (fp32), activations + backward scratch (+ the RoPE
// table), the head's scratch. The training step allocates nothing.
// Never materialized: the (B·T, V) logits (fused head), the (B, NH, T, T) attention matrix.
// Determinism: no floating-point atomics anywhere in the step (see each layer's header).
#pragma once
#include <math.h>
#include "../core/cuda_common.cuh"
#include "../layers/matmul.cuh"
#include "../layers/encoder.cuh"
#include "../layers/layernorm.cuh"
#include "../layers/rmsnorm.cuh"
#include "../layers/linear.cuh"
#include "../layers/gelu.cuh"
#include "../layers/rope.cuh"
#include "../layers/swiglu.cuh"
#include "../attention/attention.cuh"  // flash attention for head sizes 64 and 128, else the simple kernels
#include "../optim/adamw.cuh"
#include "../optim/global_norm.cuh"
#include "../head/fused_lce.cuh"
#include "../core/rand.h"
#include "../optim/optim.cuh"          // OptimState: set, update
#include "model_layout.cuh"            // Model and its memory layout

// --- build / free --------------------------------------------------------------------------------

// The slices of ZeRO (llmc/optim/zero.cuh): each layer's part of each per-layer tensor, in bucket l
// (complete after layer l's backward); the other tensors whole: the token embedding and the positions
// in bucket -1 (complete only at the end: the embedding's backward finishes them, after the tied head's
// dW started the token table's), the final norm and an untied head in bucket L (complete first).
// Returns the number of slices (at most num_tensors · L).
static inline int model_slices(ZeroSlice* out, const Model* m) {
    int L = m->config.num_layers, n = 0;
    for (int i = 0; i < m->spec->num_tensors; i++) {
        const ModelTensorSpec* t = &m->spec->tensors[i];
        int parts = t->per_layer ? L : 1;
        int embedding = t->role == MODEL_ROLE_TOKEN_EMBED || t->role == MODEL_ROLE_POS_EMBED;
        for (int l = 0; l < parts; l++) {
            ZeroSlice* z = &out[n++];
            z->size = m->tensor_size[i] / parts;
            z->offset = m->tensor_offset[i] + (size_t)l * z->size;
            z->bucket = t->per_layer ? l : embedding ? -1 : L;
            z->decay = t->decay;
        }
    }
    return n;
}

static inline void model_check_config(const ModelConfig* c, int B, int T, int recompute) {
    const ModelSpec* s = model_spec(c->family);
    int ok = s && c->num_layers > 0 && c->num_heads > 0 && c->num_kv_heads > 0 && c->channels > 0 &&
             c->channels % c->num_heads == 0 && c->num_heads % c->num_kv_heads == 0 && c->channels % 8 == 0 &&
             c->ffn_hidden > 0 && c->ffn_hidden % 8 == 0 && c->vocab_size > 0 && c->vocab_size <= c->padded_vocab_size &&
             c->padded_vocab_size % 8 == 0 && B > 0 && T > 0 && T <= c->max_seq_len;
    if (ok && s->positions == MODEL_POS_ROPE) ok = (c->channels / c->num_heads) % 16 == 0 && c->rope_theta > 0.0;
    if (ok && s->norm == MODEL_NORM_RMSNORM) ok = c->channels <= RMS_MAX_C && c->norm_eps >= 0.0;
    if (ok && recompute) ok = s->mlp == MODEL_MLP_GELU;
    if (!ok)
        check_fail("model_build: bad model config or batch shape",
                   "need a known family, C % NH == 0, NH % NKV == 0, C % 8 == 0, F % 8 == 0, V <= Vp with Vp % 8 == 0, "
                   "0 < T <= max_seq_len, B > 0; with RoPE hs = C/NH a multiple of 16 and theta > 0; with RMSNorm "
                   "C <= 2048 and eps >= 0; recompute only with a GELU MLP");
}

// Everything for batches of up to B x T tokens. recompute: rerun the MLP's GELU in the backward instead
// of keeping each layer's output (a GELU MLP only). head: the LM head's path (llmc/head/fused_lce.cuh):
// auto, staged, blocks or chunks, a fused head whose scratch fits head_scratch bytes (0: sized by the
// head), or unfused, the baseline (bf16 logits of all B·T rows at once; head_scratch unused). comm: the
// ranks of a data-parallel run, or NULL for one GPU alone. With world > 1 this rank keeps its share of
// the optimizer state (ZeRO-1, llmc/optim/zero.cuh); every slice must divide by the world size, else
// this exits naming the tensor.
static inline void model_build(Model* m, const ModelConfig* c, int B, int T, int recompute, FusedLcePath head,
                               size_t head_scratch, Comm* comm) {
    model_check_config(c, B, T, recompute);
    memset(m, 0, sizeof(*m));
    m->config = *c;
    m->spec = model_spec(c->family);
    m->max_B = B;
    m->max_T = T;
    m->recompute = recompute;
    m->num_params = model_tensor_layout(c, m->tensor_size, m->tensor_offset);
    // the ranks, the ZeRO-1 plan, then the parameters, gradients (zeroed) and optimizer state
    ZeroSlice* slices = (ZeroSlice*)malloc_check((size_t)m->spec->num_tensors * c->num_layers * sizeof(ZeroSlice));
    int n_slices = model_slices(slices, m);
    comm_single(&m->single);
    m->comm = comm ? comm : &m->single;
    optim_plan_build(&m->zero, slices, n_slices, m->comm, c->channels, c->padded_vocab_size);
    free(slices);
    size_t count = m->num_params, shard = m->zero.shard_size;
    cuda_check(cudaMalloc(&m->params_memory, count * sizeof(bf16)));
    cuda_check(cudaMalloc(&m->master_lo, shard * sizeof(int16_t)));
    cuda_check(cudaMalloc(&m->m_memory, shard * sizeof(float)));
    cuda_check(cudaMalloc(&m->v_memory, shard * sizeof(float)));
    cuda_check(cudaMalloc(&m->grads_memory, count * sizeof(float)));
    cuda_check(cudaMemset(m->grads_memory, 0, count * sizeof(float)));
    model_point_params(m);
    m->acts_bytes = model_point_acts(&m->acts, c, B, T, recompute, NULL);
    cuda_check(cudaMalloc(&m->acts_memory, m->acts_bytes));
    cuda_check(cudaMemset(m->acts_memory, 0, m->acts_bytes));
    model_point_acts(&m->acts, c, B, T, recompute, (char*)m->acts_memory);
    if (m->spec->positions == MODEL_POS_ROPE) {
        GpuContext legacy;  // rope_table_fill uses only the stream: the legacy one, as the memsets
        memset(&legacy, 0, sizeof(legacy));
        rope_table_fill(m->acts.rope, T, c->channels / c->num_heads, c->rope_theta, &legacy);
    }
    cuda_check(cudaDeviceSynchronize());  // the legacy stream's work, which ctx's non-blocking one does not wait for
    // the LM head for batches of up to B x T tokens, the batch staging, the plan of the gradient reduce-scatters
    FusedLceConfig hc = fused_lce_config(B * T, c->channels, c->vocab_size, c->padded_vocab_size);
    hc.path = head;
    hc.scratch = head_scratch;
    fused_lce_build(&m->head, &hc);
    model_staging_build(&m->staging, (size_t)B * T, c->vocab_size);
    model_reduce_build(&m->reduce, m->comm->world, c->num_layers);
}

// Everything model_build made; the struct cleared.
static inline void model_free(Model* m) {
    model_reduce_free(&m->reduce);
    zero_plan_free(&m->zero);
    model_staging_free(&m->staging);
    fused_lce_free(&m->head);
    cuda_check(cudaFree(m->acts_memory));
    cuda_check(cudaFree(m->grads_memory));
    cuda_check(cudaFree(m->v_memory));
    cuda_check(cudaFree(m->m_memory));
    cuda_check(cudaFree(m->master_lo));
    cuda_check(cudaFree(m->params_memory));
    memset(m, 0, sizeof(*m));
}

// The model's optimizer state (llmc/optim/optim.cuh): pointers into its blocks.
static inline OptimState model_optim(Model* m) {
    OptimState o = {m->num_params, m->params_memory, m->master_lo, m->m_memory, m->v_memory, m->grads_memory,
                    &m->zero, m->comm};
    return o;
}

// The parameters of the token embedding table and of an untied LM head's (0 when tied): lookups and the
// head, which the trainer counts apart.
static inline size_t model_embed_params(const Model* m) {
    return m->tensor_size[model_tensor_index(m->spec, MODEL_ROLE_TOKEN_EMBED)];
}
static inline size_t model_head_params(const Model* m) {
    int i = model_tensor_index(m->spec, MODEL_ROLE_LM_HEAD);
    return i < 0 ? 0 : m->tensor_size[i];
}

// FLOPs per token of a training step at sequence length T, for MFU: 6 per parameter of a matmul (2
// forward, 4 backward) plus attention's 6·L·C·T, llm.c's count: QKᵀ and A·V take 2·C·T FLOPs each per
// token and layer in the forward over all T keys, halved for the causal mask, times 3 for forward +
// backward (grouped-query attention changes neither: the query heads span C). A tied token table is
// also the LM head (a matmul) and counts, and so does a learned position table (a lookup, maxT·C: the
// small overcount llm.c accepts, kept so that GPT-2's count is llm.c's); an untied token table is a
// lookup alone and does not count (an untied head's table is a matmul and does).
static inline double model_flops_per_token(const Model* m, int T) {
    double matmul_params = m->spec->tied_head ? (double)m->num_params : (double)(m->num_params - model_embed_params(m));
    return 6.0 * matmul_params + 6.0 * m->config.num_layers * m->config.channels * (double)T;
}

// Sets the parameters from host fp32 values (num_params, in the table's order): master = values (this
// rank's share of them), bf16 params = their high halves (llmc/optim/master.cuh), AdamW moments cleared.
static inline void model_set_params(Model* m, const float* values, const GpuContext* ctx) {
    OptimState o = model_optim(m);
    optim_set_params(&o, values, ctx);
}

// The family's init (model_init_values, llmc/model/spec.h): the same numbers as the CPU references'
// init for the same seed.
static inline void model_init_params(Model* m, uint64_t seed, const GpuContext* ctx) {
    float* v = (float*)malloc_check(m->num_params * sizeof(float));
    model_init_values(&m->config, v, seed);
    model_set_params(m, v, ctx);
    free(v);
}

// --- forward -------------------------------------------------------------------------------------

// out = norm(inp) (stats: mean and rstd, or rstd alone) with the family's norm.
static inline void model_norm_forward(const Model* m, bf16* out, float* mean, float* rstd, const bf16* inp,
                                      const bf16* w, const bf16* b, int N, const GpuContext* ctx) {
    int C = m->config.channels;
    if (m->spec->norm == MODEL_NORM_LAYERNORM) layernorm_forward(out, mean, rstd, inp, w, b, N, C, ctx);
    else rmsnorm_forward(out, rstd, inp, w, N, C, (float)m->config.norm_eps, ctx);
}

// resid = x + r, then out = norm(resid): one kernel.
static inline void model_residual_norm_forward(const Model* m, bf16* resid, bf16* out, float* mean, float* rstd,
                                               const bf16* x, const bf16* r, const bf16* w, const bf16* b, int N,
                                               const GpuContext* ctx) {
    int C = m->config.channels;
    if (m->spec->norm == MODEL_NORM_LAYERNORM) residual_layernorm_forward(resid, out, mean, rstd, x, r, w, b, N, C, ctx);
    else residual_rmsnorm_forward(resid, out, rstd, x, r, w, N, C, (float)m->config.norm_eps, ctx);
}

// The trunk for inputs (B, T) host int32 in [0, V): every activation up to the final norm. No loss: the
// loss comes with model_backward (training, fused with the head's gradient) or model_eval_loss.
static inline void model_forward(Model* m, const int* inputs, int B, int T, const GpuContext* ctx) {
    const ModelConfig* c = &m->config;
    const ModelSpec* s = m->spec;
    if (B <= 0 || T <= 0 || B * T > m->max_B * m->max_T || T > m->max_T)
        check_fail("model_forward: batch larger than what model_build allocated", "build with the largest B and T");
    int L = c->num_layers, C = c->channels, NH = c->num_heads, NKV = c->num_kv_heads, BT = B * T;
    int QKV = (int)model_qkv_dim(c), UP = (int)model_dim(c, MODEL_DIM_UP), F = c->ffn_hidden;
    size_t maxBT = (size_t)m->max_B * m->max_T, lc = maxBT * C;
    int gelu = s->mlp == MODEL_MLP_GELU;
    m->B = B;
    m->T = T;
    model_stage(&m->staging, m->acts.inputs, m->staging.inputs, inputs, BT, ctx);
    ModelParams p = m->params;
    ModelActs a = m->acts;
    encoder_forward(a.encoded, a.inputs, p.tok_embed, p.pos_embed, B, T, C, ctx);
    model_norm_forward(m, a.norm1, a.norm1_mean, a.norm1_rstd, a.encoded, p.norm1w, p.norm1b, BT, ctx);
    for (int l = 0; l < L; l++) {
        const bf16* resid = l == 0 ? a.encoded : a.residual3 + (l - 1) * lc;
        bf16* qkv = a.qkv + l * maxBT * QKV;
        bf16* atty = a.atty + l * lc;
        bf16* res2 = a.residual2 + l * lc;
        bf16* norm2 = a.norm2 + l * lc;
        bf16* fch = a.fch + l * maxBT * UP;
        bf16* act = a.fch_act + (gelu && m->recompute ? 0 : l * maxBT * F);
        bf16* res3 = a.residual3 + l * lc;
        linear_forward(qkv, a.norm1 + l * lc, p.qkvw + (size_t)l * QKV * C, p.qkvb ? p.qkvb + l * QKV : NULL, BT, C, QKV,
                       ctx);
        attention_forward(atty, a.att_lse + l * maxBT * NH, qkv, a.rope, B, T, C, NH, NKV, ctx);  // RoPE: rotates q, k
        linear_forward(res2, atty, p.attprojw + (size_t)l * C * C, p.attprojb ? p.attprojb + l * C : NULL, BT, C, C, ctx);
        model_residual_norm_forward(m, res2, norm2, a.norm2_mean ? a.norm2_mean + l * maxBT : NULL,
                                    a.norm2_rstd + l * maxBT, res2, resid, p.norm2w + l * C,
                                    p.norm2b ? p.norm2b + l * C : NULL, BT, ctx);
        // the MLP's activation: GELU in the fc GEMM's epilogue, or under recompute as the kernel the
        // backward reruns; or SwiGLU of gate | up
        const bf16* fcw = p.fcw + (size_t)l * UP * C;
        const bf16* fcb = p.fcb ? p.fcb + l * UP : NULL;
        if (gelu && !m->recompute) {
            linear_forward_gelu(act, fch, norm2, fcw, fcb, BT, C, UP, ctx);
        } else {
            linear_forward(fch, norm2, fcw, fcb, BT, C, UP, ctx);
            if (gelu) gelu_forward(act, fch, (size_t)BT * UP, ctx);
            else swiglu_forward(act, fch, BT, F, ctx);
        }
        linear_forward(res3, act, p.fcprojw + (size_t)l * C * F, p.fcprojb ? p.fcprojb + l * C : NULL, BT, F, C, ctx);
        // the block output, and the norm that reads it next: norm1 of layer l+1, or the final norm
        int last = l == L - 1;
        float* mean = last ? a.normf_mean : a.norm1_mean ? a.norm1_mean + (l + 1) * maxBT : NULL;
        const bf16* nb = last ? p.normfb : p.norm1b ? p.norm1b + (l + 1) * C : NULL;
        model_residual_norm_forward(m, res3, last ? a.normf : a.norm1 + (l + 1) * lc, mean,
                                    last ? a.normf_rstd : a.norm1_rstd + (l + 1) * maxBT, res3, res2,
                                    last ? p.normfw : p.norm1w + (l + 1) * C, nb, BT, ctx);
    }
}

static inline void model_stage_targets(Model* m, const int* targets, const GpuContext* ctx) {
    model_stage(&m->staging, m->acts.targets, m->staging.targets, targets, (size_t)m->B * m->T, ctx);
}

// Mean loss of the last model_forward against targets (B, T) host int32 (-1 = ignore), into m->head.loss
// (device). Forward only (F FLOPs of the head).
static inline void model_eval_loss(Model* m, const int* targets, const GpuContext* ctx) {
    model_stage_targets(m, targets, ctx);
    fused_lce_forward(&m->head, m->acts.normf, m->head_w, m->acts.targets, m->B * m->T, ctx);
}

// fp32 logits (Vp) of position `row` of the last model_forward into m->acts.logits_row (for sampling).
static inline void model_logits_row(Model* m, int row, const GpuContext* ctx) {
    int C = m->config.channels, Vp = m->config.padded_vocab_size;
    matmul(ctx, m->acts.logits_row, CUDA_R_32F, Vp, m->acts.normf + (size_t)row * C, C, 0, m->head_w, C, 1, 1, Vp, C,
           1.0f, 0.0f);
}

// --- backward ------------------------------------------------------------------------------------

// Clears the gradients and the loss accumulator: the start of an optimizer step.
static inline void model_zero_grad(Model* m, const GpuContext* ctx) {
    cuda_check(cudaMemsetAsync(m->grads_memory, 0, m->num_params * sizeof(float), ctx->stream));
    cuda_check(cudaMemsetAsync(m->acts.loss, 0, sizeof(float), ctx->stream));
    profile_mark(ctx->prof, "zero grad", ctx->stream);
}

// Bucket b's gradients are complete: reduce-scatter them behind the backward (llmc/model/model_step.cuh).
static inline void model_bucket_done(Model* m, int bucket, int reduce, const GpuContext* ctx) {
    model_reduce_bucket(&m->reduce, &m->zero, m->comm, m->grads_memory, bucket, reduce, ctx);
}

// GPU time of the last step's gradient reduce-scatters on their own stream, in ms (after the step has
// been synchronised); 0 with world 1. Most of it runs behind the backward: the part that does not is
// the profile's "grad reduce: exposed".
static inline float model_grad_reduce_ms(const Model* m) { return model_reduce_ms(&m->reduce); }

// dinp += the backward of the family's norm (weight and bias gradients accumulated); with a LayerNorm,
// dsum (C) += the column sums of dinp as it completes it: the bias gradient of the projection whose
// output gradient dinp is (NULL: none).
static inline void model_norm_backward(const Model* m, bf16* dinp, float* dw, float* db, float* dsum, float* scratch,
                                       const bf16* dout, const bf16* inp, const float* mean, const float* rstd,
                                       const bf16* w, int N, const GpuContext* ctx) {
    int C = m->config.channels;
    if (m->spec->norm == MODEL_NORM_LAYERNORM) layernorm_backward(dinp, dw, db, dsum, scratch, dout, inp, mean, rstd, w, N, C, ctx);
    else rmsnorm_backward(dinp, dw, scratch, dout, inp, rstd, w, N, C, ctx);
}

// Loss and gradients of the last model_forward against targets (B, T) host int32 (-1 = ignore). The
// gradients of dloss · mean loss are ACCUMULATED into m->grads (dloss = 1 / (micro-steps · world) for
// gradient accumulation over the micro-steps and the ranks), and dloss · loss into m->acts.loss. The
// head computes its loss and gradient in one pass (3F); its fp32 dW lands directly in the head's
// gradient (tied: the token table's, which the embedding's backward then adds to).
// model_backward_reduce does the same on the last micro-step of a data-parallel step: it also
// reduce-scatters the gradients across the ranks, bucket by bucket as the backward completes them, so
// that model_update finds them reduced. With world 1 the two are the same.
static inline void model_backward_impl(Model* m, const int* targets, float dloss, int reduce, const GpuContext* ctx) {
    const ModelConfig* c = &m->config;
    const ModelSpec* s = m->spec;
    int L = c->num_layers, C = c->channels, NH = c->num_heads, NKV = c->num_kv_heads, B = m->B, T = m->T, BT = B * T;
    int QKV = (int)model_qkv_dim(c), UP = (int)model_dim(c, MODEL_DIM_UP), F = c->ffn_hidden;
    size_t maxBT = (size_t)m->max_B * m->max_T, lc = maxBT * C;
    int gelu = s->mlp == MODEL_MLP_GELU;
    cudaStream_t st = ctx->stream;
    // the attention backward's partial rows of the QKV bias grow with B·ceil(T/128), which a forward at
    // another shape of no more tokens (more, shorter sequences) can raise past what the build sized
    if (model_scratch_floats(c, B, T) > model_scratch_floats(c, m->max_B, m->max_T))
        check_fail("model_backward: more sequences than model_build sized the QKV bias sums' scratch for",
                   "run the backward with B no larger than at the build, or build with this B and T");
    // the host's half of the embedding's backward, while the GPU runs the head
    int nu = model_stage_backward(&m->staging, m->acts.targets, &m->acts.buckets, targets, BT, c->vocab_size, ctx);

    ModelParams p = m->params;
    ModelGrads g = m->grads;
    ModelActs a = m->acts;
    float* attn_scratch = s->attn_bias ? a.scratch : NULL;  // the bias sums' partials (linear_backward's scratch)
    float* mlp_scratch = s->mlp_bias ? a.scratch : NULL;
    profile_mark(ctx->prof, "host staging", st);
    fused_lce_forward_backward(&m->head, a.dnorm, m->head_dw, dloss, a.normf, m->head_w, a.targets, BT, ctx);
    model_loss_accumulate(a.loss, m->head.loss, dloss, ctx);
    cuda_check(cudaMemsetAsync(a.dresidual, 0, (size_t)BT * C * sizeof(bf16), st));
    profile_mark(ctx->prof, "head: other", st);
    // With a LayerNorm, the two projections' bias gradients are the column sums of the residual gradient
    // they see, which the LayerNorm backward that completes it adds up as it writes it: the last block's
    // fcprojb here, block l's attprojb in norm2's backward, block l - 1's fcprojb in block l's norm1
    // backward.
    model_norm_backward(m, a.dresidual, g.normfw, g.normfb, g.fcprojb ? g.fcprojb + (L - 1) * C : NULL, a.scratch,
                        a.dnorm, a.residual3 + (L - 1) * lc, a.normf_mean, a.normf_rstd, p.normfw, BT, ctx);
    model_bucket_done(m, L, reduce, ctx);
    for (int l = L - 1; l >= 0; l--) {
        const bf16* resid = l == 0 ? a.encoded : a.residual3 + (l - 1) * lc;
        const bf16* qkv = a.qkv + l * maxBT * QKV;
        const bf16* atty = a.atty + l * lc;
        const bf16* fch = a.fch + l * maxBT * UP;
        bf16* act = a.fch_act + (gelu && m->recompute ? 0 : l * maxBT * F);
        if (gelu && m->recompute) gelu_forward(act, fch, (size_t)BT * UP, ctx);
        // a.dresidual = dL/d(residual3 of layer l): the MLP half. GELU: dfch = dL/d(fch), the GELU's
        // backward riding in the dx GEMM (fch is its input); SwiGLU: dL/d(its output), then its backward.
        linear_backward(gelu ? a.dfch : a.dfch_act, g.fcprojw + (size_t)l * C * F, NULL, mlp_scratch, a.dresidual, act,
                        p.fcprojw + (size_t)l * C * F, BT, F, C, gelu ? fch : NULL, ctx);
        if (!gelu) swiglu_backward(a.dfch, a.dfch_act, fch, BT, F, ctx);
        linear_backward(a.dnorm, g.fcw + (size_t)l * UP * C, g.fcb ? g.fcb + l * UP : NULL, mlp_scratch, a.dfch,
                        a.norm2 + l * lc, p.fcw + (size_t)l * UP * C, BT, C, UP, NULL, ctx);
        model_norm_backward(m, a.dresidual, g.norm2w + l * C, g.norm2b ? g.norm2b + l * C : NULL,
                            g.attprojb ? g.attprojb + l * C : NULL, a.scratch, a.dnorm, a.residual2 + l * lc,
                            a.norm2_mean ? a.norm2_mean + l * maxBT : NULL, a.norm2_rstd + l * maxBT, p.norm2w + l * C,
                            BT, ctx);
        // now dL/d(residual2): the attention half (RoPE's backward included); with biases the QKV
        // layer's bias gradient is the column sums of dqkv, which the attention backward adds up
        linear_backward(a.datty, g.attprojw + (size_t)l * C * C, NULL, attn_scratch, a.dresidual, atty,
                        p.attprojw + (size_t)l * C * C, BT, C, C, NULL, ctx);
        attention_backward(a.dqkv, a.att_D, a.datty, atty, qkv, a.rope, a.att_lse + l * maxBT * NH,
                           g.qkvb ? g.qkvb + l * QKV : NULL, attn_scratch, B, T, C, NH, NKV, ctx);
        linear_backward(a.dnorm, g.qkvw + (size_t)l * QKV * C, NULL, attn_scratch, a.dqkv, a.norm1 + l * lc,
                        p.qkvw + (size_t)l * QKV * C, BT, C, QKV, NULL, ctx);
        model_norm_backward(m, a.dresidual, g.norm1w + l * C, g.norm1b ? g.norm1b + l * C : NULL,
                            l > 0 && g.fcprojb ? g.fcprojb + (l - 1) * C : NULL, a.scratch, a.dnorm, resid,
                            a.norm1_mean ? a.norm1_mean + l * maxBT : NULL, a.norm1_rstd + l * maxBT, p.norm1w + l * C,
                            BT, ctx);
        model_bucket_done(m, l, reduce, ctx);
    }
    encoder_backward(g.tok_embed, g.pos_embed, a.dresidual, &a.buckets, nu, B, T, C, ctx);
    model_reduce_finish(&m->reduce, &m->zero, m->comm, m->grads_memory, reduce, ctx);  // the last bucket, then wait
}

static inline void model_backward(Model* m, const int* targets, float dloss, const GpuContext* ctx) {
    model_backward_impl(m, targets, dloss, 0, ctx);
}

static inline void model_backward_reduce(Model* m, const int* targets, float dloss, const GpuContext* ctx) {
    model_backward_impl(m, targets, dloss, 1, ctx);
}

// --- update --------------------------------------------------------------------------------------

// Gradient norm, clip scale and the step's flags on the device (m->acts.norm, llmc/optim/global_norm.cuh),
// then AdamW at step t = 1, 2, ... on this rank's parts, with weight decay where the spec says (the
// weight matrices, not the norms' weights nor the biases), then (world > 1) the updated bf16 parameters
// gathered from every rank. clip <= 0: no clipping. When the norm or the loss is not finite,
// m->acts.norm[2] is 1 and nothing changes (the caller reads it to log the skipped step); t still counts
// the step, so a resumed run's bias correction matches the uninterrupted run's. stop_request: this rank
// was asked to stop (a signal); m->acts.norm[3] says whether any rank was, so that every rank stops
// after the same step. With world > 1 the gradients must have been reduced (model_backward_reduce on
// the last micro-step). Collective: every rank calls it.
static inline void model_update(Model* m, float lr, float beta1, float beta2, float eps, float weight_decay, float clip,
                                int t, int stop_request, const GpuContext* ctx) {
    OptimState o = model_optim(m);
    optim_update(&o, m->acts.norm, m->acts.loss, lr, beta1, beta2, eps, weight_decay, clip, t, stop_request, ctx);
}
