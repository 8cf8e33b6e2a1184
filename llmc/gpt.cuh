// gpt.cuh: the GPT-2 model on the GPU: layout, init, forward, backward, update. It wires the layers
// of llmc/ together; the kernels live in their own files.
//   x = wte[inputs] + wpe[0:T]; per layer x += attproj(attn(qkv(ln1(x)))), x += fcproj(gelu(fc(ln2(x))));
//   loss = CE(lnf(x) · wteᵀ, targets) through the fused head (llmc/fused_lce.cuh), tied to wte.
// Precision: bf16 parameters and activations; fp32 master weights, gradients, AdamW moments, LayerNorm
// statistics, attention softmax and every reduction. The residual-stream gradient is bf16 (as llm.c).
// Memory, allocated once in gpt_build, one block per lifetime: parameters (bf16), master + m + v (fp32),
// gradients (fp32), activations + backward scratch, the head's scratch. The training step allocates
// nothing. Never materialized: the (B·T, V) logits (fused head), the (B, NH, T, T) attention matrix.
// Determinism: no floating-point atomics anywhere in the step (see each layer's header).
// Parameters are in llm.c's order (as dev/test/gpt_ref.h): wte (Vp, C), wpe (maxT, C), ln1w, ln1b
// (L, C), qkvw (L, 3C, C), qkvb (L, 3C), attprojw (L, C, C), attprojb (L, C), ln2w, ln2b (L, C),
// fcw (L, 4C, C), fcb (L, 4C), fcprojw (L, C, 4C), fcprojb (L, C), lnfw, lnfb (C).
#pragma once
#include <math.h>
#include "cuda_common.cuh"
#include "matmul.cuh"
#include "encoder.cuh"
#include "layernorm.cuh"
#include "linear.cuh"
#include "gelu.cuh"
#include "attention.cuh"             // simple exact attention: any head size, T <= 1024
#include "flash_attention_backward.cuh"  // flash attention (forward too): head sizes 64 and 128
#include "adamw.cuh"
#include "global_norm.cuh"
#include "fused_lce.cuh"
#include "profile.h"
#include "rand.h"

typedef struct {
    int max_seq_len;        // maxT: rows of wpe
    int vocab_size;         // V = 50257
    int padded_vocab_size;  // Vp = 50304: rows of wte, a multiple of 128 for fast GEMMs
    int num_layers;         // L
    int num_heads;          // NH
    int channels;           // C, a multiple of 8
} GptConfig;

enum {
    GPT_WTE, GPT_WPE, GPT_LN1W, GPT_LN1B, GPT_QKVW, GPT_QKVB, GPT_ATTPROJW, GPT_ATTPROJB, GPT_LN2W, GPT_LN2B,
    GPT_FCW, GPT_FCB, GPT_FCPROJW, GPT_FCPROJB, GPT_LNFW, GPT_LNFB, GPT_NUM_TENSORS
};

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
    float* scratch;    // (GPT_SCRATCH_FLOATS(C)) partial sums of the column reductions and the norm
    float* norm;       // (2) grad norm and clip scale
    float* loss;       // (1) mean loss over the micro-steps since gpt_zero_grad
    float* logits_row; // (Vp) fp32 logits of one position, for sampling
    int* inputs;       // (BT) device copy of the batch
    int* targets;      // (BT)
    EncoderBuckets buckets;  // device copy of the positions grouped by token
} GptActs;

// the largest of: the bias gradient's partials (widest layer 4C), LayerNorm's, the grad norm's
#define GPT_MAX3(a, b, c) ((a) > (b) ? ((a) > (c) ? (a) : (c)) : ((b) > (c) ? (b) : (c)))
#define GPT_SCRATCH_FLOATS(C) \
    GPT_MAX3((size_t)LINEAR_BIAS_CHUNKS * 4 * (C), (size_t)LN_BWD_BLOCKS * 2 * (C), (size_t)GN_BLOCKS)

typedef struct {
    GptConfig config;
    int max_B, max_T, recompute;
    int B, T;                     // of the last gpt_forward
    size_t num_params;
    size_t tensor_offset[GPT_NUM_TENSORS], tensor_size[GPT_NUM_TENSORS];
    bf16* params_memory;          // (num_params) bf16
    float* master_memory;         // (num_params) fp32 master weights
    float* grads_memory;          // (num_params) fp32
    float* m_memory;              // (num_params) AdamW first moment
    float* v_memory;              // (num_params) AdamW second moment
    GptParams params;
    GptGrads grads;
    void* acts_memory;
    size_t acts_bytes;
    GptActs acts;
    FusedLce head;
    Profile* prof;                // NULL, or where gpt_forward/backward/update mark their work (profile.h)
    // host staging (pinned): written only after `staged` has completed
    int* h_inputs;                // (BT)
    int* h_targets;               // (BT)
    EncoderBuckets h_buckets;
    int* h_count;                 // (V) pageable scratch of encoder_bucket
    cudaEvent_t staged;           // recorded after the last copy out of the staging buffers
} GptModel;

// --- layout ------------------------------------------------------------------------------------

static inline void gpt_tensor_sizes(size_t s[GPT_NUM_TENSORS], const GptConfig* c) {
    size_t C = c->channels, L = c->num_layers;
    size_t v[GPT_NUM_TENSORS] = {(size_t)c->padded_vocab_size * C, (size_t)c->max_seq_len * C, L * C, L * C,
                                 L * 3 * C * C, L * 3 * C, L * C * C, L * C, L * C, L * C,
                                 L * 4 * C * C, L * 4 * C, L * 4 * C * C, L * C, C, C};
    for (int i = 0; i < GPT_NUM_TENSORS; i++) s[i] = v[i];
}

static inline const char* gpt_tensor_name(int i) {
    static const char* const n[GPT_NUM_TENSORS] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                                                   "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
    return n[i];
}

// Weight decay and random init apply to the 2-D matrices only.
static inline int gpt_tensor_is_matrix(int i) {
    return i == GPT_WTE || i == GPT_WPE || i == GPT_QKVW || i == GPT_ATTPROJW || i == GPT_FCW || i == GPT_FCPROJW;
}

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

// Carves one allocation into n pieces of the given byte sizes (each 256-byte aligned); base NULL: sizing.
static inline size_t gpt_carve(void** const ptrs[], const size_t bytes[], int n, char* base) {
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        if (base) *ptrs[i] = base + off;
        off += (bytes[i] + 255) / 256 * 256;
    }
    return off;
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
        BT * C * h, BT * 3 * C * h, BT * 4 * C * h, BT * NH * f, GPT_SCRATCH_FLOATS(C) * f,
        2 * f, f, (size_t)c->padded_vocab_size * f, BT * sizeof(int), BT * sizeof(int),
        BT * sizeof(int), (BT + 1) * sizeof(int), BT * sizeof(int)};
    return gpt_carve(p, bytes, (int)(sizeof(bytes) / sizeof(bytes[0])), base);
}

// --- build / free --------------------------------------------------------------------------------

// The LM head (llmc/fused_lce.cuh): fused, the faster of blocks and chunks for the scratch (FUSED), in
// two-dimensional blocks, in row chunks; or unfused
enum { GPT_HEAD_UNFUSED = 0, GPT_HEAD_CHUNKS = 1, GPT_HEAD_BLOCKS = 2, GPT_HEAD_FUSED = 3 };

// Everything for batches of up to B x T tokens. head: GPT_HEAD_FUSED, _BLOCKS or _CHUNKS, a fused LM head
// whose scratch fits head_scratch bytes (FLCE_DEFAULT_SCRATCH is 64 MiB), or GPT_HEAD_UNFUSED, the
// baseline (bf16 logits of all B·T rows at once; head_scratch unused).
static inline void gpt_build(GptModel* m, const GptConfig* c, int B, int T, int recompute, int head,
                             size_t head_scratch) {
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
    size_t n = m->num_params;
    cuda_check(cudaMalloc(&m->params_memory, n * sizeof(bf16)));
    cuda_check(cudaMalloc(&m->master_memory, n * sizeof(float)));
    cuda_check(cudaMalloc(&m->m_memory, n * sizeof(float)));
    cuda_check(cudaMalloc(&m->v_memory, n * sizeof(float)));
    cuda_check(cudaMalloc(&m->grads_memory, n * sizeof(float)));
    cuda_check(cudaMemset(m->grads_memory, 0, n * sizeof(float)));
    gpt_point_params(m);
    m->acts_bytes = gpt_point_acts(&m->acts, c, B, T, recompute, NULL);
    cuda_check(cudaMalloc(&m->acts_memory, m->acts_bytes));
    cuda_check(cudaMemset(m->acts_memory, 0, m->acts_bytes));
    gpt_point_acts(&m->acts, c, B, T, recompute, (char*)m->acts_memory);
    fused_lce_build(&m->head, B * T, c->channels, c->vocab_size, c->padded_vocab_size, flce_options_default(),
                    head != GPT_HEAD_UNFUSED, head_scratch);
    if (head == GPT_HEAD_BLOCKS) fused_lce_use_blocks(&m->head, FLCE_BLOCK_VOCAB);
    if (head == GPT_HEAD_FUSED) fused_lce_use_fastest(&m->head);
    size_t BT = (size_t)B * T;
    cuda_check(cudaMallocHost(&m->h_inputs, BT * sizeof(int)));
    cuda_check(cudaMallocHost(&m->h_targets, BT * sizeof(int)));
    cuda_check(cudaMallocHost(&m->h_buckets.tokens, BT * sizeof(int)));
    cuda_check(cudaMallocHost(&m->h_buckets.offsets, (BT + 1) * sizeof(int)));
    cuda_check(cudaMallocHost(&m->h_buckets.pos, BT * sizeof(int)));
    m->h_count = (int*)calloc_check((size_t)c->vocab_size, sizeof(int));
    cuda_check(cudaEventCreateWithFlags(&m->staged, cudaEventDisableTiming));
}

static inline void gpt_free(GptModel* m) {
    cuda_check(cudaEventDestroy(m->staged));
    free(m->h_count);
    cuda_check(cudaFreeHost(m->h_buckets.pos));
    cuda_check(cudaFreeHost(m->h_buckets.offsets));
    cuda_check(cudaFreeHost(m->h_buckets.tokens));
    cuda_check(cudaFreeHost(m->h_targets));
    cuda_check(cudaFreeHost(m->h_inputs));
    fused_lce_free(&m->head);
    cuda_check(cudaFree(m->acts_memory));
    cuda_check(cudaFree(m->grads_memory));
    cuda_check(cudaFree(m->v_memory));
    cuda_check(cudaFree(m->m_memory));
    cuda_check(cudaFree(m->master_memory));
    cuda_check(cudaFree(m->params_memory));
    memset(m, 0, sizeof(*m));
}

// Sets the parameters from host fp32 values (num_params, in layout order): master = values,
// bf16 params = round(values), AdamW moments cleared.
static inline void gpt_set_params(GptModel* m, const float* values, const GpuContext* ctx) {
    size_t n = m->num_params;
    cuda_check(cudaMemcpyAsync(m->master_memory, values, n * sizeof(float), cudaMemcpyHostToDevice, ctx->stream));
    cuda_check(cudaMemsetAsync(m->m_memory, 0, n * sizeof(float), ctx->stream));
    cuda_check(cudaMemsetAsync(m->v_memory, 0, n * sizeof(float), ctx->stream));
    adamw_copy_master(m->params_memory, m->master_memory, n, ctx->stream);
    cuda_check(cudaStreamSynchronize(ctx->stream));
}

// GPT-2's init: matrices N(0, 0.02), the residual projections (attprojw, fcprojw) N(0, 0.02/√(2L)),
// biases 0, LayerNorm weights 1, padded wte rows 0. Normals by Box-Muller on splitmix64 (llmc/rand.h),
// tensor by tensor in layout order: the same numbers as dev/test/gpt_ref.h's init for the same seed.
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

// Flash attention covers GPT-2's head size 64 (and 128); other head sizes use the simple kernel.
static inline int gpt_uses_flash(int C, int NH) { return C / NH == 64 || C / NH == 128; }

// --- forward -------------------------------------------------------------------------------------

// Copies (n,) host ints into the pinned `staging` buffer and from there to `dev` (asynchronously).
static inline void gpt_stage(int* dev, int* staging, const int* host, size_t n, const GpuContext* ctx) {
    memcpy(staging, host, n * sizeof(int));
    cuda_check(cudaMemcpyAsync(dev, staging, n * sizeof(int), cudaMemcpyHostToDevice, ctx->stream));
}

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
    cuda_check(cudaEventSynchronize(m->staged));
    gpt_stage(m->acts.inputs, m->h_inputs, inputs, BT, ctx);
    cuda_check(cudaEventRecord(m->staged, ctx->stream));
    GptParams p = m->params;
    GptActs a = m->acts;
    cudaStream_t st = ctx->stream;
    Profile* pr = m->prof;
    encoder_forward(a.encoded, a.inputs, p.wte, p.wpe, B, T, C, st);
    profile_mark(pr, "encoder forward", st);
    layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, a.encoded, p.ln1w, p.ln1b, BT, C, st);
    profile_mark(pr, "layernorm forward", st);
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
        profile_mark(pr, "linear forward", st);
        if (gpt_uses_flash(C, NH)) flash_attention_forward(atty, a.att_lse + l * maxBT * NH, qkv, B, T, C, NH, st);
        else attention_forward(atty, a.att_lse + l * maxBT * NH, qkv, B, T, C, NH, st);
        profile_mark(pr, "attention forward", st);
        linear_forward(res2, atty, p.attprojw + (size_t)l * C * C, p.attprojb + l * C, BT, C, C, ctx);
        profile_mark(pr, "linear forward", st);
        residual_layernorm_forward(res2, ln2, a.ln2_mean + l * maxBT, a.ln2_rstd + l * maxBT, res2, resid,
                                   p.ln2w + l * C, p.ln2b + l * C, BT, C, st);
        profile_mark(pr, "layernorm forward", st);
        linear_forward(fch, ln2, p.fcw + (size_t)l * 4 * C * C, p.fcb + l * 4 * C, BT, C, 4 * C, ctx);
        profile_mark(pr, "linear forward", st);
        gelu_forward(gelu, fch, (size_t)BT * 4 * C, st);
        profile_mark(pr, "gelu forward", st);
        linear_forward(res3, gelu, p.fcprojw + (size_t)l * 4 * C * C, p.fcprojb + l * C, BT, 4 * C, C, ctx);
        profile_mark(pr, "linear forward", st);
        // the block output, and the LayerNorm that reads it next: ln1 of layer l+1, or lnf
        int last = l == L - 1;
        residual_layernorm_forward(res3, last ? a.lnf : a.ln1 + (l + 1) * lc,
                                   last ? a.lnf_mean : a.ln1_mean + (l + 1) * maxBT,
                                   last ? a.lnf_rstd : a.ln1_rstd + (l + 1) * maxBT, res3, res2,
                                   last ? p.lnfw : p.ln1w + (l + 1) * C, last ? p.lnfb : p.ln1b + (l + 1) * C, BT, C, st);
        profile_mark(pr, "layernorm forward", st);
    }
}

static inline void gpt_stage_targets(GptModel* m, const int* targets, const GpuContext* ctx) {
    cuda_check(cudaEventSynchronize(m->staged));
    gpt_stage(m->acts.targets, m->h_targets, targets, (size_t)m->B * m->T, ctx);
    cuda_check(cudaEventRecord(m->staged, ctx->stream));
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

__global__ void gpt_loss_accumulate_kernel(float* acc, const float* loss, float w) { *acc += *loss * w; }

// Clears the gradients and the loss accumulator: the start of an optimizer step.
static inline void gpt_zero_grad(GptModel* m, const GpuContext* ctx) {
    cuda_check(cudaMemsetAsync(m->grads_memory, 0, m->num_params * sizeof(float), ctx->stream));
    cuda_check(cudaMemsetAsync(m->acts.loss, 0, sizeof(float), ctx->stream));
    profile_mark(m->prof, "zero grad", ctx->stream);
}

// Loss and gradients of the last gpt_forward against targets (B, T) host int32 (-1 = ignore). The
// gradients of dloss · mean loss are ACCUMULATED into m->grads (dloss = 1 / micro-steps for gradient
// accumulation), and dloss · loss into m->acts.loss. The head computes its loss and gradient in one
// pass (3F); its fp32 dW lands directly in the wte gradient, which the encoder then adds to.
static inline void gpt_backward(GptModel* m, const int* targets, float dloss, const GpuContext* ctx) {
    const GptConfig* c = &m->config;
    int L = c->num_layers, C = c->channels, NH = c->num_heads, B = m->B, T = m->T, BT = B * T;
    size_t maxBT = (size_t)m->max_B * m->max_T, lc = maxBT * C;
    cudaStream_t st = ctx->stream;
    // the host's half of the encoder backward, while the GPU runs the head
    cuda_check(cudaEventSynchronize(m->staged));
    memcpy(m->h_targets, targets, (size_t)BT * sizeof(int));
    encoder_bucket(&m->h_buckets, m->h_count, m->h_inputs, BT, c->vocab_size);
    int nu = m->h_buckets.n_unique;
    cuda_check(cudaMemcpyAsync(m->acts.targets, m->h_targets, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice, st));
    cuda_check(cudaMemcpyAsync(m->acts.buckets.tokens, m->h_buckets.tokens, nu * sizeof(int), cudaMemcpyHostToDevice, st));
    cuda_check(cudaMemcpyAsync(m->acts.buckets.offsets, m->h_buckets.offsets, (nu + 1) * sizeof(int), cudaMemcpyHostToDevice, st));
    cuda_check(cudaMemcpyAsync(m->acts.buckets.pos, m->h_buckets.pos, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice, st));
    cuda_check(cudaEventRecord(m->staged, st));

    GptParams p = m->params;
    GptGrads g = m->grads;
    GptActs a = m->acts;
    Profile* pr = m->prof;
    profile_mark(pr, "host staging", st);
    fused_lce_forward_backward(&m->head, a.dln, g.wte, dloss, a.lnf, p.wte, a.targets, BT, ctx);
    gpt_loss_accumulate_kernel<<<1, 1, 0, st>>>(a.loss, m->head.loss, dloss);
    cuda_check_launch();
    cuda_check(cudaMemsetAsync(a.dresidual, 0, (size_t)BT * C * sizeof(bf16), st));
    profile_mark(pr, "head: other", st);
    layernorm_backward(a.dresidual, g.lnfw, g.lnfb, a.scratch, a.dln, a.residual3 + (L - 1) * lc, a.lnf_mean, a.lnf_rstd,
                       p.lnfw, BT, C, st);
    profile_mark(pr, "layernorm backward", st);
    for (int l = L - 1; l >= 0; l--) {
        const bf16* resid = l == 0 ? a.encoded : a.residual3 + (l - 1) * lc;
        const bf16* fch = a.fch + 4 * l * lc;
        bf16* gelu = a.fch_gelu + (m->recompute ? 0 : 4 * l * lc);
        if (m->recompute) gelu_forward(gelu, fch, (size_t)BT * 4 * C, st);
        profile_mark(pr, "gelu forward", st);
        // a.dresidual = dL/d(residual3 of layer l): the MLP half
        // dfch = dL/d(fch): the GELU's backward rides in the dx GEMM (fch is the GELU's input)
        linear_backward(a.dfch, g.fcprojw + (size_t)l * 4 * C * C, g.fcprojb + l * C, a.scratch, a.dresidual, gelu,
                        p.fcprojw + (size_t)l * 4 * C * C, BT, 4 * C, C, fch, ctx);
        profile_mark(pr, "linear backward", st);
        linear_backward(a.dln, g.fcw + (size_t)l * 4 * C * C, g.fcb + l * 4 * C, a.scratch, a.dfch, a.ln2 + l * lc,
                        p.fcw + (size_t)l * 4 * C * C, BT, C, 4 * C, NULL, ctx);
        profile_mark(pr, "linear backward", st);
        layernorm_backward(a.dresidual, g.ln2w + l * C, g.ln2b + l * C, a.scratch, a.dln, a.residual2 + l * lc,
                           a.ln2_mean + l * maxBT, a.ln2_rstd + l * maxBT, p.ln2w + l * C, BT, C, st);
        profile_mark(pr, "layernorm backward", st);
        // now dL/d(residual2): the attention half
        linear_backward(a.datty, g.attprojw + (size_t)l * C * C, g.attprojb + l * C, a.scratch, a.dresidual,
                        a.atty + l * lc, p.attprojw + (size_t)l * C * C, BT, C, C, NULL, ctx);
        profile_mark(pr, "linear backward", st);
        if (gpt_uses_flash(C, NH))
            flash_attention_backward(a.dqkv, a.att_D, a.datty, a.atty + l * lc, a.qkv + 3 * l * lc,
                                     a.att_lse + l * maxBT * NH, B, T, C, NH, st);
        else
            attention_backward(a.dqkv, a.att_D, a.datty, a.qkv + 3 * l * lc, a.att_lse + l * maxBT * NH, B, T, C, NH, st);
        profile_mark(pr, "attention backward", st);
        linear_backward(a.dln, g.qkvw + (size_t)l * 3 * C * C, g.qkvb + l * 3 * C, a.scratch, a.dqkv, a.ln1 + l * lc,
                        p.qkvw + (size_t)l * 3 * C * C, BT, C, 3 * C, NULL, ctx);
        profile_mark(pr, "linear backward", st);
        layernorm_backward(a.dresidual, g.ln1w + l * C, g.ln1b + l * C, a.scratch, a.dln, resid,
                           a.ln1_mean + l * maxBT, a.ln1_rstd + l * maxBT, p.ln1w + l * C, BT, C, st);
        profile_mark(pr, "layernorm backward", st);
    }
    encoder_backward(g.wte, g.wpe, a.dresidual, &a.buckets, nu, B, T, C, st);
    profile_mark(pr, "encoder backward", st);
}

// --- update --------------------------------------------------------------------------------------

// Gradient norm and clip scale on the device (m->acts.norm), then AdamW at step t = 1, 2, ... with
// weight decay on the 2-D matrices only. clip <= 0: no clipping.
static inline void gpt_update(GptModel* m, float lr, float beta1, float beta2, float eps, float weight_decay,
                              float clip, int t, const GpuContext* ctx) {
    global_norm(m->acts.norm, m->acts.scratch, m->grads_memory, m->num_params, clip, ctx->stream);
    profile_mark(m->prof, "grad norm", ctx->stream);
    for (int i = 0; i < GPT_NUM_TENSORS; i++) {
        size_t o = m->tensor_offset[i];
        adamw_update(m->params_memory + o, m->master_memory + o, m->m_memory + o, m->v_memory + o,
                     m->grads_memory + o, m->acts.norm + 1, m->tensor_size[i], lr, beta1, beta2, eps,
                     gpt_tensor_is_matrix(i) ? weight_decay : 0.0f, t, ctx->stream);
    }
    profile_mark(m->prof, "adamw", ctx->stream);
}
