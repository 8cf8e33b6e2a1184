// gpt.cuh: the GPT-2 model on the GPU: build, init, forward, backward, update (what it is in memory:
// gpt_layout.cuh). It wires the layers of llmc/ together; the kernels live in their own files.
//   x = wte[inputs] + wpe[0:T]; per layer x += attproj(attn(qkv(ln1(x)))), x += fcproj(gelu(fc(ln2(x))));
//   loss = CE(lnf(x) · wteᵀ, targets) through the fused head (llmc/head/fused_lce.cuh), tied to wte.
// Precision: bf16 parameters and activations; fp32 master weights (kept as the bf16 parameters and an
// int16 remainder, exact: llmc/optim/master_split.h), gradients, AdamW moments, LayerNorm statistics, attention
// softmax and every reduction. The residual-stream gradient is bf16 (as llm.c).
// Memory, allocated once in gpt_build (with llmc/model/model_state.cuh, as the Llama-style model's), one block
// per lifetime: parameters (bf16), the master weights' remainders (int16) + m + v (fp32), gradients
// (fp32), activations + backward scratch, the head's scratch. The training step allocates nothing.
// Never materialized: the (B·T, V) logits (fused head), the (B, NH, T, T) attention matrix.
// Determinism: no floating-point atomics anywhere in the step (see each layer's header).
// Parameters are in llm.c's order (as dev/ref/gpt_ref.h), listed in gpt_layout.cuh.
#pragma once
#include <math.h>
#include "../core/cuda_common.cuh"
#include "../layers/matmul.cuh"
#include "../layers/encoder.cuh"
#include "../layers/layernorm.cuh"
#include "../layers/linear.cuh"
#include "../layers/gelu.cuh"
#include "../attention/attention.cuh"           // flash attention for head sizes 64 and 128, else the simple kernels
#include "../optim/adamw.cuh"
#include "../optim/global_norm.cuh"
#include "../head/fused_lce.cuh"
#include "../core/rand.h"
#include "../optim/optim.cuh"              // OptimState: set, update
#include "model_state.cuh"        // the blocks both model families hold: built, viewed and freed
#include "gpt_layout.cuh"          // GptConfig, GptModel and their memory layout

// --- build / free --------------------------------------------------------------------------------

// The slices of ZeRO (llmc/optim/zero.cuh): each layer's part of each per-layer tensor, in bucket l (complete
// after layer l's backward); lnfw and lnfb in bucket L (complete first); wte and wpe whole, complete
// only at the end (the head's dW starts wte's gradient, the encoder's backward finishes it).
// Returns the number of slices (at most GPT_NUM_TENSORS · L).
static inline int gpt_slices(ZeroSlice* out, const GptModel* m) {
    int L = m->config.num_layers, n = 0;
    for (int i = 0; i < GPT_NUM_TENSORS; i++) {
        int per_layer = i != GPT_WTE && i != GPT_WPE && i != GPT_LNFW && i != GPT_LNFB;
        int parts = per_layer ? L : 1;
        for (int l = 0; l < parts; l++) {
            ZeroSlice* z = &out[n++];
            z->size = m->tensor_size[i] / parts;
            z->offset = m->tensor_offset[i] + (size_t)l * z->size;
            z->bucket = per_layer ? l : (i == GPT_LNFW || i == GPT_LNFB) ? L : -1;
            z->decay = gpt_tensor_is_matrix(i);
        }
    }
    return n;
}

// Everything for batches of up to B x T tokens. head: the LM head's path (llmc/head/fused_lce.cuh): auto,
// staged, blocks or chunks, a fused head whose scratch fits head_scratch bytes (0: sized by the head),
// or unfused, the baseline (bf16 logits of all B·T rows at once; head_scratch unused).
// comm: the ranks of a data-parallel run, or NULL for one GPU alone. With world > 1 this rank keeps its
// share of the optimizer state (ZeRO-1, llmc/optim/zero.cuh); every slice must divide by the world size,
// else this exits naming the tensor.
static inline void gpt_build_dist(GptModel* m, const GptConfig* c, int B, int T, int recompute, FusedLcePath head,
                                  size_t head_scratch, Comm* comm) {
    if (c->channels % 8 != 0 || c->num_heads <= 0 || c->channels % c->num_heads != 0 || c->num_layers <= 0 ||
        c->vocab_size > c->padded_vocab_size || c->padded_vocab_size % 8 != 0 || T > c->max_seq_len || B <= 0 || T <= 0)
        check_fail("gpt_build: bad model config or batch shape",
                   "need C % 8 == 0, C % NH == 0, V <= Vp with Vp % 8 == 0, 0 < T <= max_seq_len, B > 0");
    memset(m, 0, sizeof(*m));
    m->config = *c;
    m->max_B = B;
    m->max_T = T;
    m->recompute = recompute;
    gpt_tensor_sizes(m->tensor_size, c);
    for (int i = 0; i < GPT_NUM_TENSORS; i++) {
        m->tensor_offset[i] = m->num_params;
        m->num_params += m->tensor_size[i];
    }
    ZeroSlice* slices = (ZeroSlice*)malloc_check((size_t)GPT_NUM_TENSORS * c->num_layers * sizeof(ZeroSlice));
    model_state_build(m, c, slices, gpt_slices(slices, m), comm);
    free(slices);
    gpt_point_params(m);
    m->acts_bytes = gpt_point_acts(&m->acts, c, B, T, recompute, NULL);
    cuda_check(cudaMalloc(&m->acts_memory, m->acts_bytes));
    cuda_check(cudaMemset(m->acts_memory, 0, m->acts_bytes));
    cuda_check(cudaDeviceSynchronize());  // the memsets ran on the legacy stream, which ctx's non-blocking one does not wait for
    gpt_point_acts(&m->acts, c, B, T, recompute, (char*)m->acts_memory);
    model_head_build(m, c, B, T, head, head_scratch);
}

static inline void gpt_build(GptModel* m, const GptConfig* c, int B, int T, int recompute, FusedLcePath head,
                             size_t head_scratch) {
    gpt_build_dist(m, c, B, T, recompute, head, head_scratch, NULL);
}

static inline void gpt_free(GptModel* m) { model_state_free(m); }

// The model's optimizer state (llmc/optim/optim.cuh): pointers into its blocks.
static inline OptimState gpt_optim(GptModel* m) { return model_optim(m); }

// Sets the parameters from host fp32 values (num_params, in layout order): master = values (this
// rank's share of them), bf16 params = their high halves (llmc/optim/master.cuh), AdamW moments cleared.
static inline void gpt_set_params(GptModel* m, const float* values, const GpuContext* ctx) {
    OptimState o = gpt_optim(m);
    optim_set_params(&o, values, ctx);
}

// GPT-2's init: matrices N(0, 0.02), the residual projections (attprojw, fcprojw) N(0, 0.02/√(2L)),
// biases 0, LayerNorm weights 1, padded wte rows 0. Normals by Box-Muller on splitmix64 (llmc/core/rand.h),
// tensor by tensor in layout order: the same numbers as dev/ref/gpt_ref.h's init for the same seed.
static inline void gpt_init_params(GptModel* m, uint64_t seed, const GpuContext* ctx) {
    const GptConfig* c = &m->config;
    float* v = (float*)malloc_check(m->num_params * sizeof(float));
    double resid_std = 0.02 / sqrt(2.0 * c->num_layers);
    uint64_t rng = seed;
    for (int i = 0; i < GPT_NUM_TENSORS; i++) {
        float* p = v + m->tensor_offset[i];
        size_t n = gpt_tensor_is_matrix(i) ? m->tensor_size[i] : 0;
        if (i == GPT_WTE) n = (size_t)c->vocab_size * c->channels;
        double std = (i == GPT_ATTPROJW || i == GPT_FCPROJW) ? resid_std : 0.02;
        int is_ln_weight = i == GPT_LN1W || i == GPT_LN2W || i == GPT_LNFW;
        for (size_t j = 0; j < m->tensor_size[i]; j++) {
            if (j < n) {
                p[j] = (float)(std * rand_normal(&rng));
            } else {
                p[j] = is_ln_weight ? 1.0f : 0.0f;
            }
        }
    }
    gpt_set_params(m, v, ctx);
    free(v);
}

// --- forward -------------------------------------------------------------------------------------

// The trunk for inputs (B, T) host int32 in [0, V): every activation up to lnf. No loss: the loss
// comes with gpt_backward (training, fused with the head's gradient) or gpt_eval_loss.
static inline void gpt_forward(GptModel* m, const int* inputs, int B, int T, const GpuContext* ctx) {
    const GptConfig* c = &m->config;
    if (B <= 0 || T <= 0 || B * T > m->max_B * m->max_T || T > m->max_T)
        check_fail("gpt_forward: batch larger than what gpt_build allocated", "build with the largest B and T");
    int L = c->num_layers, C = c->channels, NH = c->num_heads, BT = B * T;
    size_t maxBT = (size_t)m->max_B * m->max_T, lc = maxBT * C;
    m->B = B;
    m->T = T;
    model_stage(&m->staging, m->acts.inputs, m->staging.inputs, inputs, BT, ctx);
    GptParams p = m->params;
    GptActs a = m->acts;
    encoder_forward(a.encoded, a.inputs, p.wte, p.wpe, B, T, C, ctx);
    layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, a.encoded, p.ln1w, p.ln1b, BT, C, ctx);
    for (int l = 0; l < L; l++) {
        const bf16* resid = l == 0 ? a.encoded : a.residual3 + (l - 1) * lc;
        bf16* ln1 = a.ln1 + l * lc;
        bf16* qkv = a.qkv + 3 * l * lc;
        bf16* atty = a.atty + l * lc;
        bf16* res2 = a.residual2 + l * lc;
        bf16* ln2 = a.ln2 + l * lc;
        bf16* fch = a.fch + 4 * l * lc;
        bf16* gelu = a.fch_gelu + (m->recompute ? 0 : 4 * l * lc);
        bf16* res3 = a.residual3 + l * lc;
        linear_forward(qkv, ln1, p.qkvw + (size_t)l * 3 * C * C, p.qkvb + l * 3 * C, BT, C, 3 * C, ctx);
        attention_forward(atty, a.att_lse + l * maxBT * NH, qkv, NULL, B, T, C, NH, NH, ctx);  // GPT-2: NKV = NH
        linear_forward(res2, atty, p.attprojw + (size_t)l * C * C, p.attprojb + l * C, BT, C, C, ctx);
        residual_layernorm_forward(res2, ln2, a.ln2_mean + l * maxBT, a.ln2_rstd + l * maxBT, res2, resid,
                                   p.ln2w + l * C, p.ln2b + l * C, BT, C, ctx);
        // the MLP's GELU: in the fc GEMM's epilogue, or under recompute as the kernel the backward reruns
        if (m->recompute) {
            linear_forward(fch, ln2, p.fcw + (size_t)l * 4 * C * C, p.fcb + l * 4 * C, BT, C, 4 * C, ctx);
            gelu_forward(gelu, fch, (size_t)BT * 4 * C, ctx);
        } else {
            linear_forward_gelu(gelu, fch, ln2, p.fcw + (size_t)l * 4 * C * C, p.fcb + l * 4 * C, BT, C, 4 * C, ctx);
        }
        linear_forward(res3, gelu, p.fcprojw + (size_t)l * 4 * C * C, p.fcprojb + l * C, BT, 4 * C, C, ctx);
        // the block output, and the LayerNorm that reads it next: ln1 of layer l+1, or lnf
        int last = l == L - 1;
        residual_layernorm_forward(res3, last ? a.lnf : a.ln1 + (l + 1) * lc,
                                   last ? a.lnf_mean : a.ln1_mean + (l + 1) * maxBT,
                                   last ? a.lnf_rstd : a.ln1_rstd + (l + 1) * maxBT, res3, res2,
                                   last ? p.lnfw : p.ln1w + (l + 1) * C, last ? p.lnfb : p.ln1b + (l + 1) * C, BT, C, ctx);
    }
}

static inline void gpt_stage_targets(GptModel* m, const int* targets, const GpuContext* ctx) {
    model_stage(&m->staging, m->acts.targets, m->staging.targets, targets, (size_t)m->B * m->T, ctx);
}

// Mean loss of the last gpt_forward against targets (B, T) host int32 (-1 = ignore), into m->head.loss
// (device). Forward only (F FLOPs of the head).
static inline void gpt_eval_loss(GptModel* m, const int* targets, const GpuContext* ctx) {
    gpt_stage_targets(m, targets, ctx);
    fused_lce_forward(&m->head, m->acts.lnf, m->params.wte, m->acts.targets, m->B * m->T, ctx);
}

// fp32 logits (Vp) of position `row` of the last gpt_forward into m->acts.logits_row (for sampling).
static inline void gpt_logits_row(GptModel* m, int row, const GpuContext* ctx) {
    int C = m->config.channels, Vp = m->config.padded_vocab_size;
    matmul(ctx, m->acts.logits_row, CUDA_R_32F, Vp, m->acts.lnf + (size_t)row * C, C, 0, m->params.wte, C, 1,
           1, Vp, C, 1.0f, 0.0f);
}

// --- backward ------------------------------------------------------------------------------------

// Clears the gradients and the loss accumulator: the start of an optimizer step.
static inline void gpt_zero_grad(GptModel* m, const GpuContext* ctx) {
    cuda_check(cudaMemsetAsync(m->grads_memory, 0, m->num_params * sizeof(float), ctx->stream));
    cuda_check(cudaMemsetAsync(m->acts.loss, 0, sizeof(float), ctx->stream));
    profile_mark(ctx->prof, "zero grad", ctx->stream);
}

// Bucket b's gradients are complete: reduce-scatter them behind the backward (llmc/model/model_step.cuh).
static inline void gpt_bucket_done(GptModel* m, int bucket, int reduce, const GpuContext* ctx) {
    model_reduce_bucket(&m->reduce, &m->zero, m->comm, m->grads_memory, bucket, reduce, ctx);
}

// GPU time of the last step's gradient reduce-scatters on their own stream, in ms (after the step has
// been synchronised); 0 with world 1. Most of it runs behind the backward: the part that does not is
// the profile's "grad reduce: exposed".
static inline float gpt_reduce_ms(const GptModel* m) { return model_reduce_ms(&m->reduce); }

// Loss and gradients of the last gpt_forward against targets (B, T) host int32 (-1 = ignore). The
// gradients of dloss · mean loss are ACCUMULATED into m->grads (dloss = 1 / (micro-steps · world) for
// gradient accumulation over the micro-steps and the ranks), and dloss · loss into m->acts.loss. The head computes its loss and gradient in one
// pass (3F); its fp32 dW lands directly in the wte gradient, which the encoder then adds to.
// gpt_backward_reduce does the same on the last micro-step of a data-parallel step: it also
// reduce-scatters the gradients across the ranks, bucket by bucket as the backward completes them, so
// that gpt_update finds them reduced. With world 1 the two are the same.
static inline void gpt_backward_impl(GptModel* m, const int* targets, float dloss, int reduce, const GpuContext* ctx) {
    const GptConfig* c = &m->config;
    int L = c->num_layers, C = c->channels, NH = c->num_heads, B = m->B, T = m->T, BT = B * T;
    size_t maxBT = (size_t)m->max_B * m->max_T, lc = maxBT * C;
    cudaStream_t st = ctx->stream;
    // the attention backward's partial rows of the QKV bias grow with B·ceil(T/128), which a forward at
    // another shape of no more tokens (more, shorter sequences) can raise past what the build sized
    if (gpt_scratch_floats(B, T, C) > gpt_scratch_floats(m->max_B, m->max_T, C))
        check_fail("gpt_backward: more sequences than gpt_build sized the QKV bias sums' scratch for",
                   "run the backward with B no larger than at the build, or build with this B and T");
    // the host's half of the encoder backward, while the GPU runs the head
    int nu = model_stage_backward(&m->staging, m->acts.targets, &m->acts.buckets, targets, BT, c->vocab_size, ctx);

    GptParams p = m->params;
    GptGrads g = m->grads;
    GptActs a = m->acts;
    profile_mark(ctx->prof, "host staging", st);
    fused_lce_forward_backward(&m->head, a.dln, g.wte, dloss, a.lnf, p.wte, a.targets, BT, ctx);
    model_loss_accumulate(a.loss, m->head.loss, dloss, ctx);
    cuda_check(cudaMemsetAsync(a.dresidual, 0, (size_t)BT * C * sizeof(bf16), st));
    profile_mark(ctx->prof, "head: other", st);
    // The two projections' bias gradients are the column sums of the residual gradient they see, which
    // the LayerNorm backward that completes it adds up as it writes it: the last block's fcprojb here,
    // block l's attprojb in ln2's backward, block l - 1's fcprojb in block l's ln1 backward.
    layernorm_backward(a.dresidual, g.lnfw, g.lnfb, g.fcprojb + (L - 1) * C, a.scratch, a.dln,
                       a.residual3 + (L - 1) * lc, a.lnf_mean, a.lnf_rstd, p.lnfw, BT, C, ctx);
    gpt_bucket_done(m, L, reduce, ctx);
    for (int l = L - 1; l >= 0; l--) {
        const bf16* resid = l == 0 ? a.encoded : a.residual3 + (l - 1) * lc;
        const bf16* fch = a.fch + 4 * l * lc;
        bf16* gelu = a.fch_gelu + (m->recompute ? 0 : 4 * l * lc);
        if (m->recompute) gelu_forward(gelu, fch, (size_t)BT * 4 * C, ctx);
        // a.dresidual = dL/d(residual3 of layer l): the MLP half
        // dfch = dL/d(fch): the GELU's backward rides in the dx GEMM (fch is the GELU's input)
        linear_backward(a.dfch, g.fcprojw + (size_t)l * 4 * C * C, NULL, a.scratch, a.dresidual, gelu,
                        p.fcprojw + (size_t)l * 4 * C * C, BT, 4 * C, C, fch, ctx);
        linear_backward(a.dln, g.fcw + (size_t)l * 4 * C * C, g.fcb + l * 4 * C, a.scratch, a.dfch, a.ln2 + l * lc,
                        p.fcw + (size_t)l * 4 * C * C, BT, C, 4 * C, NULL, ctx);
        layernorm_backward(a.dresidual, g.ln2w + l * C, g.ln2b + l * C, g.attprojb + l * C, a.scratch, a.dln,
                           a.residual2 + l * lc, a.ln2_mean + l * maxBT, a.ln2_rstd + l * maxBT, p.ln2w + l * C, BT, C,
                           ctx);
        // now dL/d(residual2): the attention half
        linear_backward(a.datty, g.attprojw + (size_t)l * C * C, NULL, a.scratch, a.dresidual,
                        a.atty + l * lc, p.attprojw + (size_t)l * C * C, BT, C, C, NULL, ctx);
        // the QKV layer's bias gradient: the column sums of dqkv, which the attention backward adds up
        attention_backward(a.dqkv, a.att_D, a.datty, a.atty + l * lc, a.qkv + 3 * l * lc, NULL,
                           a.att_lse + l * maxBT * NH, g.qkvb + l * 3 * C, a.scratch, B, T, C, NH, NH, ctx);
        linear_backward(a.dln, g.qkvw + (size_t)l * 3 * C * C, NULL, a.scratch, a.dqkv, a.ln1 + l * lc,
                        p.qkvw + (size_t)l * 3 * C * C, BT, C, 3 * C, NULL, ctx);
        layernorm_backward(a.dresidual, g.ln1w + l * C, g.ln1b + l * C, l > 0 ? g.fcprojb + (l - 1) * C : NULL,
                           a.scratch, a.dln, resid, a.ln1_mean + l * maxBT, a.ln1_rstd + l * maxBT, p.ln1w + l * C,
                           BT, C, ctx);
        gpt_bucket_done(m, l, reduce, ctx);
    }
    encoder_backward(g.wte, g.wpe, a.dresidual, &a.buckets, nu, B, T, C, ctx);
    model_reduce_finish(&m->reduce, &m->zero, m->comm, m->grads_memory, reduce, ctx);  // the last bucket, then wait
}

static inline void gpt_backward(GptModel* m, const int* targets, float dloss, const GpuContext* ctx) {
    gpt_backward_impl(m, targets, dloss, 0, ctx);
}

static inline void gpt_backward_reduce(GptModel* m, const int* targets, float dloss, const GpuContext* ctx) {
    gpt_backward_impl(m, targets, dloss, 1, ctx);
}

// --- update --------------------------------------------------------------------------------------

// Gradient norm, clip scale and the step's flags on the device (m->acts.norm, llmc/optim/global_norm.cuh),
// then AdamW at step t = 1, 2, ... on this rank's parts, with weight decay on the 2-D matrices only,
// then (world > 1) the updated bf16 parameters gathered from every rank. clip <= 0: no clipping.
// When the norm or the loss is not finite, m->acts.norm[2] is 1 and nothing changes (the caller reads
// it to log the skipped step); t still counts the step, so a resumed run's bias correction matches the
// uninterrupted run's. stop_request: this rank was asked to stop (a signal); m->acts.norm[3] says
// whether any rank was, so that every rank stops after the same step. With world > 1 the gradients must
// have been reduced (gpt_backward_reduce on the last micro-step). Collective: every rank calls it.
static inline void gpt_update(GptModel* m, float lr, float beta1, float beta2, float eps, float weight_decay,
                              float clip, int t, int stop_request, const GpuContext* ctx) {
    OptimState o = gpt_optim(m);
    optim_update(&o, m->acts.norm, m->acts.loss, lr, beta1, beta2, eps, weight_decay, clip, t, stop_request, ctx);
}
