// fused_lce.cuh: the language-model head's loss, CE(x · Wᵀ, targets), and its gradients, without ever
// holding the (N, V) logits. One call, fused_lce_build, takes the whole configuration (FusedLceConfig) and
// sizes everything up front; the entry points then dispatch to one of the paths:
//   chunks   tokens in chunks whose fp32 logits fit the scratch (fused_lce_chunks.cuh): 3F of GEMMs
//            for a training step, but the fp32 dW is swept once per chunk
//   blocks   rows x vocabulary in two-dimensional blocks (fused_lce_blocks.cuh): dW swept once per
//            ~thousands of rows, for a second logits GEMM (4F); on Hopper the logits never leave the
//            tensor cores (fused_lce_sm90.cuh)
//   staged   (Hopper) tokens in chunks whose bf16 exponentials the logits GEMM stages in the scratch,
//            the gradient's row factors applied around cuBLASLt's dx and dW GEMMs (fused_lce_staged.cuh):
//            3F, no pass over the chunk between the GEMMs
//   unfused  the baseline the fused head is measured against: bf16 logits of all N rows at once
//   auto     staged where it runs (sm_90a build on Hopper, C % 64 == 0, not soft-capping with label
//            smoothing) and a chunk holds at least FUSED_LCE_STAGED_ROWS_MIN rows or all of them; else blocks
//            while a chunk of fp32 logits would hold fewer than FUSED_LCE_CHUNK_ROWS_MIN rows and not all of
//            them, else chunks (what the trainer uses)
// Loss-only calls (eval) go through a fused forward that keeps only three floats per row and vocab split
// (fused_lce_sm90.cuh on Hopper, fused_lce_sm80_forward.cuh elsewhere) when C % 64 == 0: F of work,
// no logits in memory at all.
//
// Semantics (shared with the CPU reference dev/ref/fused_lce_ref.h): rows j >= V never count; s_j =
// softcap·tanh(z_j/softcap) when softcap > 0; lse = log Σ exp(s_j); loss_i = lse − (1−ε)·s_t − (ε/V)·Σ s_j
// + z_loss·lse²; ignored rows (target == ignore_index) have loss 0 and no gradient; the mean is over the
// N_valid other rows (0 when there are none). dL/ds_j = scale·(p_j·(1 + 2·z_loss·lse) − (1−ε)·[j=t] − ε/V)
// with scale = dloss/N_valid (or a per-row upstream gradient), times 1 − tanh² under softcap.
// A target outside [0, V) that is not ignore_index makes its row count as ignored and raises a device
// error flag that fused_lce_check() reports (no host synchronisation inside the step).
#pragma once
#include "../core/cuda_common.cuh"
#include "fused_lce_options.h"
#include "fused_lce_chunks.cuh"
#include "fused_lce_blocks.cuh"
#include "fused_lce_sm80_forward.cuh"
#include "fused_lce_sm90.cuh"
#include "fused_lce_staged.cuh"

#define FUSED_LCE_DEFAULT_SCRATCH (64u << 20)
#define FUSED_LCE_CHUNK_ROWS_MIN 512  // auto: chunks from this many rows on (below, the blocks measured faster)
#define FUSED_LCE_STAGED_ROWS_MIN 2048  // auto: staged from this many rows a chunk on (below, dW's sweep per chunk
                                   // costs more than the blocks' second logits GEMM)
#define FUSED_LCE_STAGED_AUTO_CAP ((size_t)1 << 30)  // scratch 0: the staged chunks take at most this

typedef enum { FUSED_LCE_PATH_AUTO = 0, FUSED_LCE_PATH_CHUNKS, FUSED_LCE_PATH_BLOCKS, FUSED_LCE_PATH_UNFUSED, FUSED_LCE_PATH_STAGED } FusedLcePath;

// FusedLceConfig.fallbacks: force on this GPU what other GPUs or shapes run (for the tests)
#define FUSED_LCE_NO_SM90 1u            // no Hopper kernels: the mma.sync forward, the blocks' own pass 1
#define FUSED_LCE_NO_ROW_STAGING 2u     // chunks: rows read twice from DRAM, as when Vp floats exceed shared memory
#define FUSED_LCE_NO_FUSED_FORWARD 4u   // chunks: loss-only calls through the chunks' logits, as when C % 64 != 0

typedef struct FusedLce FusedLce;

#ifdef FUSED_LCE_DEV_HOOKS
// Experiments reach into the head only through these (the playground's fused backward and own GEMMs,
// dev/cuda/fused_lce_variants.cuh). They exist only in a build that defines FUSED_LCE_DEV_HOOKS before
// it includes the head (the playground and its test): the trainer's head has no hook field and no
// branch to one.
typedef struct {
    // replaces the training and the recomputing backward (path chunks: its buffer is the hook's scratch);
    // r as fused_lce_run would take it
    void (*backward)(FusedLce* h, const FusedLceRun* r, const GpuContext* ctx);
    FusedLceBlockGemms block_gemms;    // path blocks: a block's dx and dW GEMMs instead of cuBLASLt's
    FusedLceGemmCost block_gemm_cost;  // and their cost, for the layout planner (needed with block_gemms)
    void* arg;                         // passed to block_gemms and block_gemm_cost
} FusedLceHooks;
#endif

typedef struct {
    int max_n, C, V, Vp;     // rows per call at most; channels; vocabulary, padded (W has Vp rows)
    FusedLceOptions opt;         // ignore_index, z-loss, soft-capping, label smoothing
    FusedLcePath path;
    size_t scratch;          // bytes the fused head may add beyond inputs and gradients (0: sized by the build,
                             // fused_lce_auto_budget; FUSED_LCE_DEFAULT_SCRATCH for the blocks and chunks)
    int vocab_block_max;     // path blocks: the widest vocab block (0: fused_lce_plan_vocab_max)
    unsigned fallbacks;      // FUSED_LCE_NO_*, or 0
#ifdef FUSED_LCE_DEV_HOOKS
    const FusedLceHooks* hooks;  // NULL, or an experiment's
#endif
} FusedLceConfig;

// The defaults: path auto within FUSED_LCE_DEFAULT_SCRATCH, the plain loss
static inline FusedLceConfig fused_lce_config(int max_n, int C, int V, int Vp) {
    FusedLceConfig c;
    memset(&c, 0, sizeof(c));
    c.max_n = max_n; c.C = C; c.V = V; c.Vp = Vp;
    c.opt = fused_lce_options_default();
    c.path = FUSED_LCE_PATH_AUTO;
    return c;
}

struct FusedLce {
    FusedLceConfig cfg;        // as given, but path never auto: the one chosen
    size_t budget;         // the scratch bound the build used
    int sm90;              // the Hopper kernels run (sm_90a build on an sm_90 GPU, C % 64 == 0)
    int fused_forward;     // loss-only calls through the fused forward (sm90 or sm80)
    FusedLceChunks chunks;     // path chunks or unfused
    FusedLceBlocks blk;        // path blocks, carved from `buf`
    FusedLceStaged staged;     // path staged
    void* buf;             // (blocks_bytes) the blocks' buffer
    float* part;           // (part_floats) per-split row statistics of the fused forward
    size_t part_floats;
    float* loss_rows;      // (max_n) fp32 per-row loss
    float* lse;            // (max_n) fp32 per-row logsumexp
    float* loss;           // (1) fp32 mean loss over valid rows
    int* n_valid;          // (1) rows that count
    int* error;            // (1) first bad target index + 1, 0 when all targets were in range
    size_t scratch_bytes;  // what the head adds beyond inputs and gradients (logits or blocks, statistics)
};

// --- kernels ---------------------------------------------------------------------------------

// One block: counts rows that count, flags targets out of range (the first bad index + 1).
__global__ void fused_lce_count_kernel(int* n_valid, int* error, const int* targets, int N, int V, int ignore_index) {
    __shared__ int block_sum[32];
    int count = 0;
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        int t = targets[i];
        if (t == ignore_index) continue;
        if (t < 0 || t >= V) { atomicCAS(error, 0, i + 1); continue; }
        count++;
    }
    for (int o = 16; o > 0; o >>= 1) count += __shfl_xor_sync(0xffffffffu, count, o);
    if ((threadIdx.x & 31) == 0) block_sum[threadIdx.x >> 5] = count;
    __syncthreads();
    if (threadIdx.x == 0) {
        int total = 0;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) total += block_sum[w];
        *n_valid = total;
    }
}

// One block: mean of the per-row losses over the valid rows, in a fixed order (deterministic).
__global__ void fused_lce_mean_kernel(float* loss, const float* loss_rows, const int* n_valid, int N) {
    float acc = 0.0f;
    for (int i = threadIdx.x; i < N; i += blockDim.x) acc += loss_rows[i];
    __shared__ float part[32];
    acc = warp_reduce_sum(acc);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        float total = 0.0f;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) total += part[w];
        *loss = *n_valid > 0 ? total / *n_valid : 0.0f;
    }
}

// --- launchers -------------------------------------------------------------------------------

static inline const char* fused_lce_path_name(int path) {
    return path == FUSED_LCE_PATH_CHUNKS ? "chunks" : path == FUSED_LCE_PATH_BLOCKS ? "blocks"
         : path == FUSED_LCE_PATH_UNFUSED ? "unfused" : path == FUSED_LCE_PATH_STAGED ? "staged" : "auto";
}

// The staged path's budget when the caller leaves it to the build (scratch 0): chunks that hold at
// most a quarter of what the unfused head's logits would take (max_n·Vp·2 bytes), but at least
// FUSED_LCE_STAGED_ROWS_MIN rows (or all of them): with four chunks or more dW's sweeps cost about what their
// launches do. Within FUSED_LCE_STAGED_AUTO_CAP and a quarter of the GPU's free memory.
static inline size_t fused_lce_auto_budget(int max_n, int C, int Vp) {
    size_t rb = fused_lce_staged_row_bytes(C, Vp);
    size_t rows = (size_t)max_n * Vp * 2 / 4 / rb;
    if (rows < FUSED_LCE_STAGED_ROWS_MIN) rows = FUSED_LCE_STAGED_ROWS_MIN;
    if (rows > (size_t)max_n) rows = (size_t)ceil_div(max_n, FUSED_LCE_STAGED_ROW_ALIGN) * FUSED_LCE_STAGED_ROW_ALIGN;
    size_t want = fused_lce_staged_budget((int)rows, max_n, C, Vp);
    size_t free_b, total_b;
    cuda_check(cudaMemGetInfo(&free_b, &total_b));
    size_t b = want < FUSED_LCE_STAGED_AUTO_CAP ? want : FUSED_LCE_STAGED_AUTO_CAP;
    return b < free_b / 4 ? b : free_b / 4;
}

// Sizes and allocates everything for calls of up to cfg->max_n rows; exits with a message on a bad
// configuration or a scratch budget too small for the path.
static inline void fused_lce_build(FusedLce* h, const FusedLceConfig* cfg) {
    int max_n = cfg->max_n, C = cfg->C, V = cfg->V, Vp = cfg->Vp;
    const FusedLceOptions opt = cfg->opt;
    if (max_n <= 0 || C <= 0 || C % 8 != 0 || V <= 0 || V > Vp || Vp % 8 != 0)
        check_failf("need max_n > 0, C and Vp multiples of 8 (cuBLASLt alignment), 0 < V <= Vp",
                    "fused_lce_build: bad sizes max_n=%d C=%d V=%d Vp=%d", max_n, C, V, Vp);
    if (opt.softcap < 0.0f || opt.z_loss < 0.0f || opt.label_smoothing < 0.0f || opt.label_smoothing >= 1.0f)
        check_failf("the trainer checks its flags -softcap, -z_loss and -label_smoothing: a bug in another caller",
                    "fused_lce_build: softcap (%g) and z_loss (%g) must be >= 0, label_smoothing (%g) in [0, 1)",
                    opt.softcap, opt.z_loss, opt.label_smoothing);
    if ((int)cfg->path < FUSED_LCE_PATH_AUTO || (int)cfg->path > FUSED_LCE_PATH_STAGED || cfg->vocab_block_max < 0)
        check_fail("fused_lce_build: bad path or vocab_block_max",
                   "path: auto, chunks, blocks, unfused or staged; vocab_block_max >= 0");
    memset(h, 0, sizeof(*h));
    h->cfg = *cfg;
    h->budget = cfg->scratch ? cfg->scratch : FUSED_LCE_DEFAULT_SCRATCH;
    int path = cfg->path;
#ifdef FUSED_LCE_DEV_HOOKS
    const FusedLceHooks* hk = cfg->hooks;
#else
    const void* hk = NULL;  // the trainer's build: no experiments
#endif
    int staged_ok = C % WG_BK == 0 && !(cfg->fallbacks & FUSED_LCE_NO_SM90) && !(opt.softcap > 0.0f && opt.label_smoothing > 0.0f)
                    && !hk && fused_lce_wgmma_available();
    size_t staged_budget = !staged_ok ? 0 : cfg->scratch ? cfg->scratch : fused_lce_auto_budget(max_n, C, Vp);
    int staged_rows = staged_ok ? fused_lce_staged_rows(max_n, C, Vp, staged_budget) : 0;
    if (path == FUSED_LCE_PATH_STAGED && !staged_rows) {
        char hint[256];
        snprintf(hint, sizeof(hint), "it needs an sm_90a build on a Hopper GPU, C %% 64 == 0, no hooks, not "
                 "soft-capping with label smoothing, and a budget of at least %d rows", FUSED_LCE_STAGED_ROW_ALIGN);
        check_failf(hint, "fused_lce_build: path staged cannot run here (C = %d, Vp = %d, budget %zu bytes)", C, Vp,
                    staged_budget);
    }
    if (path == FUSED_LCE_PATH_AUTO && staged_rows && (staged_rows >= FUSED_LCE_STAGED_ROWS_MIN || staged_rows >= max_n))
        path = FUSED_LCE_PATH_STAGED;
    if (path == FUSED_LCE_PATH_STAGED) h->budget = staged_budget;
    if (path == FUSED_LCE_PATH_AUTO) {
        size_t rows = h->budget / ((size_t)Vp * sizeof(float)) / 16 * 16;  // a chunk's rows
        path = rows < FUSED_LCE_CHUNK_ROWS_MIN && rows < (size_t)max_n ? FUSED_LCE_PATH_BLOCKS : FUSED_LCE_PATH_CHUNKS;
    }
    h->cfg.path = (FusedLcePath)path;
#ifdef FUSED_LCE_DEV_HOOKS
    if (hk && hk->backward && path != FUSED_LCE_PATH_CHUNKS)
        check_fail("fused_lce_build: a backward hook needs path chunks", "build the experiment with path chunks");
    if (hk && hk->block_gemms && path != FUSED_LCE_PATH_BLOCKS)
        check_fail("fused_lce_build: a block GEMM hook needs path blocks", "build the experiment with path blocks");
#endif
    int sms = current_sm_count();
    h->sm90 = path != FUSED_LCE_PATH_UNFUSED && C % WG_BK == 0 && !(cfg->fallbacks & FUSED_LCE_NO_SM90) && fused_lce_wgmma_available();
    if (h->sm90) fused_lce_wgmma_setup();
    size_t bytes = 0;
    if (path == FUSED_LCE_PATH_STAGED) {
        h->fused_forward = 1;  // loss-only calls: the wgmma forward
        h->part_floats = fused_lce_wgmma_part_floats(max_n, V, sms);
        bytes = fused_lce_staged_build(&h->staged, staged_rows, max_n, C, Vp);
    } else if (path == FUSED_LCE_PATH_BLOCKS) {
        // loss-only calls and the lse of training: the sm90 forward, else the blocks' own pass 1
        h->fused_forward = h->sm90;
        h->part_floats = h->sm90 ? fused_lce_wgmma_part_floats(max_n, V, sms) : 0;
        // within the budget: the blocks, the per-row loss and lse, and the forward's statistics
        size_t fixed = (2 * (size_t)max_n + h->part_floats) * sizeof(float);
        size_t budget = h->budget > fixed ? h->budget - fixed : 0;
        int vb_max = cfg->vocab_block_max ? cfg->vocab_block_max : fused_lce_plan_vocab_max(max_n, budget, C, h->sm90);
        FusedLceBlockPlanSpec sp = {max_n, C, V, vb_max, h->sm90, 0, 0, sms, NULL, NULL};  // cuBLASLt's GEMMs
#ifdef FUSED_LCE_DEV_HOOKS
        if (hk && hk->block_gemms) {
            sp.gemm_cost = hk->block_gemm_cost;
            sp.gemm_arg = hk->arg;
            h->blk.gemms = hk->block_gemms;
            h->blk.gemms_arg = hk->arg;
        }
#endif
        bytes = vb_max < 16 ? 0 : fused_lce_blocks_plan(&h->blk, budget, &sp);
        if (bytes == 0)
            check_failf("a larger budget, or a smaller vocab_block_max (at least 16)", "fused_lce_build: a scratch "
                        "budget of %zu bytes holds fewer than 16 rows of vocab blocks of %d columns and C = %d",
                        h->budget, vb_max, C);
        cuda_check(cudaMalloc(&h->buf, bytes));
        fused_lce_blocks_carve(&h->blk, h->buf, C);
    } else {
        int fp32 = path != FUSED_LCE_PATH_UNFUSED;
        h->fused_forward = fp32 && C % FUSED_LCE_MMA_BK == 0 && !(cfg->fallbacks & FUSED_LCE_NO_FUSED_FORWARD);
        if (h->fused_forward)
            h->part_floats = h->sm90 ? fused_lce_wgmma_part_floats(max_n, V, sms) : fused_lce_mma_part_floats(max_n, sms);
        bytes = fused_lce_chunks_build(&h->chunks, max_n, Vp, fp32, h->budget, cfg->fallbacks & FUSED_LCE_NO_ROW_STAGING);
        if (bytes == 0)
            check_failf("a larger budget, or path blocks", "fused_lce_build: a scratch budget of %zu bytes holds fewer "
                        "than 16 rows of %d fp32 logits", h->budget, Vp);
    }
    if (h->part_floats) cuda_check(cudaMalloc(&h->part, h->part_floats * sizeof(float)));
    h->scratch_bytes = bytes + h->part_floats * sizeof(float);
    cuda_check(cudaMalloc(&h->loss_rows, (size_t)max_n * sizeof(float)));
    cuda_check(cudaMalloc(&h->lse, (size_t)max_n * sizeof(float)));
    cuda_check(cudaMalloc(&h->loss, sizeof(float)));
    cuda_check(cudaMalloc(&h->n_valid, sizeof(int)));
    cuda_check(cudaMalloc(&h->error, sizeof(int)));
    cuda_check(cudaMemset(h->error, 0, sizeof(int)));
    cuda_check(cudaDeviceSynchronize());  // that memset ran on the legacy stream, which a non-blocking one does not wait for
}

static inline void fused_lce_free(FusedLce* h) {
    if (h->cfg.path == FUSED_LCE_PATH_STAGED) {
        fused_lce_staged_free(&h->staged);
    } else if (h->cfg.path == FUSED_LCE_PATH_BLOCKS) {
        fused_lce_blocks_free(&h->blk);
        cuda_check(cudaFree(h->buf));
    } else {
        fused_lce_chunks_free(&h->chunks);
    }
    if (h->part) cuda_check(cudaFree(h->part));
    cuda_check(cudaFree(h->loss_rows));
    cuda_check(cudaFree(h->lse));
    cuda_check(cudaFree(h->loss));
    cuda_check(cudaFree(h->n_valid));
    cuda_check(cudaFree(h->error));
}

// The start of every call: N checked, the rows that count counted, bad targets flagged.
static void fused_lce_begin(FusedLce* h, const int* targets, int N, const GpuContext* ctx) {
    if (N <= 0 || N > h->cfg.max_n)
        check_failf("a bug in the caller: build the head with max_n at least the rows of its largest call",
                    "fused_lce: N=%d rows, the head was built for 1..%d", N, h->cfg.max_n);
    fused_lce_count_kernel<<<1, 1024, 0, ctx->stream>>>(h->n_valid, h->error, targets, N, h->cfg.V, h->cfg.opt.ignore_index);
    cuda_check_launch();
}

static void fused_lce_end(FusedLce* h, int N, const GpuContext* ctx) {
    fused_lce_mean_kernel<<<1, 1024, 0, ctx->stream>>>(h->loss, h->loss_rows, h->n_valid, N);
    cuda_check_launch();
    profile_mark(ctx->prof, "head: other", ctx->stream);
}

// The call over the N rows of x (N, C) bf16, W (Vp, C) bf16 and targets (N) into the head's buffers
// (loss_rows, lse, n_valid), without a gradient: the caller sets dx, dW and the upstream gradient
static inline FusedLceRun fused_lce_run_of(const FusedLce* h, const bf16* x, const bf16* W, const int* targets, int N) {
    FusedLceRun r;
    memset(&r, 0, sizeof(r));
    r.x = x;
    r.W = W;
    r.targets = targets;
    r.N = N;
    r.C = h->cfg.C;
    r.V = h->cfg.V;
    r.Vp = h->cfg.Vp;
    r.opt = h->cfg.opt;
    r.loss_rows = h->loss_rows;
    r.lse = h->lse;
    r.n_valid = h->n_valid;
    return r;
}

// r's loss_rows and lse by the fused forward (sm90 or sm80 kernels)
static void fused_lce_fused_forward(FusedLce* h, const FusedLceRun* r, const GpuContext* ctx) {
    if (h->sm90) fused_lce_wgmma_forward(r, h->part, h->part_floats, ctx);
    else fused_lce_mma_forward(r, h->part, ctx);
    profile_mark(ctx->prof, "head: forward", ctx->stream);
}

// Loss, and with r->dx != NULL dx written and dW accumulated, through the configured path
static void fused_lce_run(FusedLce* h, const FusedLceRun* r, const GpuContext* ctx) {
    const FusedLceConfig* c = &h->cfg;
    fused_lce_begin(h, r->targets, r->N, ctx);
    if (c->path == FUSED_LCE_PATH_STAGED) {
        if (r->dx) fused_lce_staged_run(&h->staged, r, ctx);
        else fused_lce_fused_forward(h, r, ctx);
    } else if (c->path == FUSED_LCE_PATH_BLOCKS) {
        if (h->sm90) fused_lce_fused_forward(h, r, ctx);  // the lse of every row first
        if (r->dx || !h->sm90) fused_lce_blocks_run(&h->blk, r, h->sm90, ctx);
    } else if (!r->dx && h->fused_forward) {
        fused_lce_fused_forward(h, r, ctx);
    } else {
        fused_lce_chunks_run(&h->chunks, r, ctx);
    }
    fused_lce_end(h, r->N, ctx);
}

// A call with a gradient: through the configured path, or a dev build's backward hook when one is set
static inline void fused_lce_run_backward(FusedLce* h, const FusedLceRun* r, const GpuContext* ctx) {
#ifdef FUSED_LCE_DEV_HOOKS
    if (h->cfg.hooks && h->cfg.hooks->backward) {
        h->cfg.hooks->backward(h, r, ctx);
        return;
    }
#endif
    fused_lce_run(h, r, ctx);
}

// Training: mean loss (h->loss), per-row loss and lse (h->loss_rows, h->lse), dx (N, C) bf16 written,
// dW (Vp, C) fp32 accumulated, for the upstream gradient dloss of the mean (1 in training).
static inline void fused_lce_forward_backward(FusedLce* h, bf16* dx, float* dW, float dloss, const bf16* x,
                                              const bf16* W, const int* targets, int N, const GpuContext* ctx) {
    FusedLceRun r = fused_lce_run_of(h, x, W, targets, N);
    r.dx = dx;
    r.dW = dW;
    r.dloss = dloss;
    fused_lce_run_backward(h, &r, ctx);
}

// Loss only (eval, or when the caller needs the loss before it knows the upstream gradient): F of work.
static inline void fused_lce_forward(FusedLce* h, const bf16* x, const bf16* W, const int* targets, int N,
                                     const GpuContext* ctx) {
    FusedLceRun r = fused_lce_run_of(h, x, W, targets, N);
    fused_lce_run(h, &r, ctx);
}

// Recomputing backward with a per-row upstream gradient dloss_rows (N) fp32 (per-token weights).
static inline void fused_lce_backward(FusedLce* h, bf16* dx, float* dW, const float* dloss_rows, const bf16* x,
                                      const bf16* W, const int* targets, int N, const GpuContext* ctx) {
    FusedLceRun r = fused_lce_run_of(h, x, W, targets, N);
    r.dx = dx;
    r.dW = dW;
    r.dloss_rows = dloss_rows;
    fused_lce_run_backward(h, &r, ctx);
}

// The GPU memory the head holds beyond its inputs and gradients: the path's scratch and statistics, and
// the per-row loss and lse (what a trainer's memory line counts for the head)
static inline size_t fused_lce_memory_bytes(const FusedLce* h) {
    return h->scratch_bytes + 2 * (size_t)h->cfg.max_n * sizeof(float);
}

// One line for a config table: the path, its layout and the memory it holds (fused_lce_memory_bytes)
static inline void fused_lce_describe(const FusedLce* h, char* buf, size_t len) {
    double mib = (double)fused_lce_memory_bytes(h) / (1 << 20);
    switch (h->cfg.path) {
    case FUSED_LCE_PATH_STAGED:
        snprintf(buf, len, "fused, staged: chunks of %d rows, %.1f MiB", h->staged.rows, mib); break;
    case FUSED_LCE_PATH_BLOCKS:
        snprintf(buf, len, "fused, blocks of %d rows x %d vocab columns, %.1f MiB", h->blk.nb, h->blk.vb, mib); break;
    case FUSED_LCE_PATH_CHUNKS:
        snprintf(buf, len, "fused, chunks of %d rows of fp32 logits, %.1f MiB", h->chunks.rows, mib); break;
    default:
        snprintf(buf, len, "unfused: bf16 logits of all %d rows, %.1f MiB", h->cfg.max_n, mib); break;
    }
}

// The first row whose target was outside [0, V) and not ignore_index, since the build; -1 if none.
// Synchronises the stream: call it where the loop synchronises anyway (e.g. when printing the loss).
static inline int fused_lce_bad_target_row(const FusedLce* h, const GpuContext* ctx) {
    int err = 0;
    cuda_check(cudaMemcpyAsync(&err, h->error, sizeof(int), cudaMemcpyDeviceToHost, ctx->stream));
    cuda_check(cudaStreamSynchronize(ctx->stream));
    return err - 1;
}

// Exits with a message naming the row when a bad target was seen.
static inline void fused_lce_check(const FusedLce* h, const GpuContext* ctx) {
    int row = fused_lce_bad_target_row(h, ctx);
    if (row >= 0)
        check_failf("the token data does not match the vocabulary size", "fused_lce: target of row %d is outside "
                    "[0, %d) and is not ignore_index (%d)", row, h->cfg.V, h->cfg.opt.ignore_index);
}
