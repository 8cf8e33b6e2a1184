// fused_lce_blocks.cuh: the LM head's path "blocks": rows in blocks of nb, the vocabulary in blocks
// of vb, never more than one (nb, vb) block of logits in memory. The dx and dW GEMMs through cuBLASLt;
// the logits through cuBLASLt, or on Hopper the lse by the fused forward and the gradient tiles straight
// from the tensor cores (fused_lce_sm90.cuh). The layout within the scratch: fused_lce_blocks_plan.h.
//
// Why: the row chunks of fused_lce_chunks.cuh hold whole rows of fp32 logits, so within 64 MiB a chunk has 320
// rows at V = 50304 (128 at V = 128256), and the fp32 dW (8·V·C bytes read and written) is swept once
// per chunk: 8/(6·chunk) bytes per FLOP, 4e-3 at 320 rows, against the H200's 6.4e-3 (4.8 TB/s over
// ~750 TF/s): the dW GEMMs run at memory speed. Here a row block sweeps dW once per nb rows (nb ~ 2000:
// ~7e-4 B/FLOP) and its fp32 dx accumulator (nb·C·4 bytes, small enough to stay in L2) once per vocab
// block. The price: a row's gradient needs its lse, i.e. all of its vocabulary, first, so each logit
// block is computed twice: 4F of GEMMs for the training step instead of 3F (F = 2·N·C·V).
//
// Per row block (rows r0 .. r0+n):
//   pass 1, each vocab block v0:  z (n, vb) fp32 = x_r · W_vᵀ; one thread block per row folds z into the
//           running (max, Σexp, Σs, s_t) of the row; the last vocab block writes lse and the row's loss.
//   pass 2, the vocab blocks in reverse (the last one is still in z, so its GEMM is skipped):
//           z = x_r · W_vᵀ again; G = dL/dz rounded to bf16, in place over z (row stride 2·vb);
//           dxacc (n, C) fp32 (+)= G · W_v;  dW_v (vb, C) fp32 += Gᵀ · x_r
//   dx_r = bf16(dxacc)
// Bytes beyond the GEMM operands, per logit: 4 written and 4 read in pass 1; 4 written, 4 read, 2 written
// and 2·2 read in pass 2. A (nb, vb) block of 2000 × 4000 is 32 MB: it mostly stays in the 50 MB L2.
// (With wgmma: no fp32 logits; the gradient comes straight from the accumulators as bf16, row stride vb.)
// No floating-point atomics: the result is bitwise repeatable.
#pragma once
#include "../core/cuda_common.cuh"
#include "../layers/matmul.cuh"
#include "fused_lce_common.cuh"
#include "fused_lce_blocks_plan.h"
#include "fused_lce_sm90.cuh"

#define FUSED_LCE_BLOCK_THREADS 256

#ifdef FUSED_LCE_DEV_HOOKS
// A block's dx and dW GEMMs, as another implementation of them takes them
typedef struct {
    float* dxacc;       // (n, C) fp32: = G · W_v, or += when accumulate_dx
    float* dW_v;        // (ncols, C) fp32: += Gᵀ · x_r
    const bf16* G;      // (n, ncols) bf16, row stride ldg: the block's dL/dz
    int ldg;
    const bf16* W_v;    // (ncols, C) bf16: the vocab block's rows of W
    const bf16* x_r;    // (n, C) bf16: the row block's rows of x
    int n, ncols, C;
    int accumulate_dx;  // 0 for the first vocab block of a row block
} FusedLceBlockGemmCall;

// Another implementation of a block's dx and dW GEMMs, for experiments (the playground's own GEMM,
// dev/cuda/fused_lce_variants.cuh; only in a build that defines FUSED_LCE_DEV_HOOKS). Its cost for the
// planner: a FusedLceGemmCost.
typedef void (*FusedLceBlockGemms)(void* arg, const FusedLceBlockGemmCall* g, const GpuContext* ctx);
#endif

typedef struct {
    int nb, vb;           // rows per row block (a multiple of 16), columns per vocab block (a multiple of 16;
                          // of 256 with wgmma)
    int wgmma;            // pass 2 by fused_lce_wgmma_grad (Hopper): z holds only the bf16 gradient, row stride vb
#ifdef FUSED_LCE_DEV_HOOKS
    FusedLceBlockGemms gemms;  // NULL: the dx and dW GEMMs by cuBLASLt
    void* gemms_arg;
#endif
    float* z;             // (nb, vb) fp32 logits of one block; then its bf16 gradient in place (row stride 2·vb)
    float* dxacc;         // (nb, C) fp32 dx of the current row block
    float4* stats;        // (nb) running max, Σexp relative to it, Σs, s_t of each row
    MatmulCache plans;    // the dozen GEMM shapes of the loop, planned once
} FusedLceBlocks;

// --- kernels ---------------------------------------------------------------------------------

// One thread block per row of a (n, ncols) block of fp32 logits at vocabulary columns v0 ..: its max,
// Σexp and Σs over the columns < V merge into the row's running statistics (started afresh when
// `first`); the target's s_t is taken when it lies in the block. `last`: lse and the loss are written.
__global__ void __launch_bounds__(FUSED_LCE_BLOCK_THREADS)
fused_lce_block_stats_kernel(float4* stats, float* loss_rows, float* lse_out, const float* z, int ldz,
                             const int* targets, int v0, int ncols, int V, FusedLceOptions opt, int first, int last) {
    int row = blockIdx.x;
    const float* zr = z + (size_t)row * ldz;
    float cap = opt.softcap, inv_cap = cap > 0.0f ? 1.0f / cap : 0.0f;
    int valid = ncols < V - v0 ? ncols : V - v0;  // columns of the block inside the vocabulary
    float m = -INFINITY, s = 0.0f, sum = 0.0f;
    fused_lce_fold_row<FUSED_LCE_BLOCK_THREADS>(m, s, sum, zr, valid, cap, (float*)NULL);
    fused_lce_block_reduce(&m, &s, &sum);
    if (threadIdx.x != 0) return;
    int t = targets[row];
    int ignored = fused_lce_ignored(t, opt, V);
    float4 st = first ? make_float4(-INFINITY, 0.0f, 0.0f, 0.0f) : stats[row];
    lse_merge(st.x, st.y, m, s);
    st.z += sum;
    if (!ignored && t >= v0 && t < v0 + valid) {
        float zt = zr[t - v0];
        st.w = cap > 0.0f ? cap * fused_lce_tanh(zt * inv_cap) : zt;
    }
    if (!last) { stats[row] = st; return; }
    float lse = st.x + logf(st.y);
    lse_out[row] = lse;
    loss_rows[row] = ignored ? 0.0f : fused_lce_row_loss(lse, st.w, st.z, opt, V);
}

// One thread block per row: dL/dz of the block's logits, rounded once to bf16, written in place. The bf16
// of column j lands on bytes [2j, 2j+2), i.e. on fp32 column j/2: each step reads the columns below some
// c, waits at a barrier, then writes the bf16 of those columns, which lands below c/2: on columns read
// already, never on ones a later step reads.
__global__ void __launch_bounds__(FUSED_LCE_BLOCK_THREADS)
fused_lce_block_grad_kernel(float* z, int ldz, const float* lse, const int* targets, const int* n_valid,
                            const float* dloss_rows, float dloss, int v0, int ncols, int V, FusedLceOptions opt) {
    int row = blockIdx.x;
    const float* zr = z + (size_t)row * ldz;
    bf16* g = (bf16*)z + (size_t)row * 2 * ldz;
    int t = targets[row], nv = *n_valid;
    int ignored = fused_lce_ignored(t, opt, V);
    float scale = ignored ? 0.0f : (dloss_rows ? dloss_rows[row] : (nv > 0 ? dloss / nv : 0.0f));
    FusedLceRowGrad rg = fused_lce_row_grad(lse[row], t - v0, scale, opt, V);  // columns counted from v0
    const int stride = FUSED_LCE_BLOCK_THREADS * 8;
    for (int j0 = 0; j0 < ncols; j0 += 2 * stride) {  // two spans per step
        float v[2][8];
        for (int u = 0; u < 2; u++) {
            int j = j0 + u * stride + threadIdx.x * 8;
            if (j < ncols) fused_lce_load8(v[u], zr + j);
        }
        __syncthreads();  // every read of this step precedes any write
        for (int u = 0; u < 2; u++) {
            int j = j0 + u * stride + threadIdx.x * 8;
            if (j >= ncols) continue;
            for (int k = 0; k < 8; k++) v[u][k] = v0 + j + k < V ? fused_lce_dlogit(rg, v[u][k], j + k) : 0.0f;
            store128(g + j, bf16x8_from_floats(v[u]));
        }
    }
}

// dx (n) bf16 = acc (n) fp32, n a multiple of 8
__global__ void fused_lce_dx_store_kernel(bf16* dx, const float* acc, size_t n) {
    for (size_t i = 8 * (blockIdx.x * (size_t)blockDim.x + threadIdx.x); i < n; i += 8 * (size_t)gridDim.x * blockDim.x) {
        float v[8];
        fused_lce_load8(v, acc + i);
        store128(dx + i, bf16x8_from_floats(v));
    }
}

// --- launchers -------------------------------------------------------------------------------

// The layout's cost of a block's dx and dW GEMMs (fused_lce_blocks_plan.h's FusedLceGemmCost): their multiply-adds
// in units of one K step of a full wave of gradient tiles, over the share of their last wave that
// cuBLASLt's heuristic expects to be full (0.85 of one wave: 1/0.85 of the cost), plus 256 a launch.
// Shapes already asked about are remembered (a layout repeats a few of them many times).
#define FUSED_LCE_GEMM_COST_CACHE 256
typedef struct {
    GpuContext ctx;  // only its cuBLASLt handle and workspace size are used
    int C, sm_count, n_cached;
    int cached[FUSED_LCE_GEMM_COST_CACHE][2];
    double cost[FUSED_LCE_GEMM_COST_CACHE];
} FusedLceGemmCostArg;

static double fused_lce_blocks_gemm_cost(void* arg, int n, int ncols) {
    FusedLceGemmCostArg* a = (FusedLceGemmCostArg*)arg;
    for (int i = 0; i < a->n_cached; i++)
        if (a->cached[i][0] == n && a->cached[i][1] == ncols) return a->cost[i];
    double units = (double)n * a->C * ncols / ((double)a->sm_count * FUSED_LCE_GRAD_ROWS * WG_BN), cost = 0.0;
    // the two calls of fused_lce_blocks_run, G's row stride taken as ncols (it is vb, wider only in the last
    // vocab block)
    for (int dw = 0; dw < 2; dw++) {
        MatmulPlan p;
        if (dw)  // Gᵀ (ncols, n) · x_r
            matmul_plan_make(&p, &a->ctx, CUDA_R_32F, a->C, ncols, 1, a->C, 0, ncols, a->C, n,
                             MATMUL_EPILOGUE_NONE, 0);
        else  // G (n, ncols) · W_v
            matmul_plan_make(&p, &a->ctx, CUDA_R_32F, a->C, ncols, 0, a->C, 0, n, a->C, ncols,
                             MATMUL_EPILOGUE_NONE, 0);
        double w = p.waves > 0.0f ? p.waves : 1.0;
        cost += units * ceil(w) / w + 256.0;
        matmul_plan_free(&p);
    }
    if (a->n_cached < FUSED_LCE_GEMM_COST_CACHE) {
        a->cached[a->n_cached][0] = n;
        a->cached[a->n_cached][1] = ncols;
        a->cost[a->n_cached++] = cost;
    }
    return cost;
}

// Lays the blocks out within `bytes` of scratch (fused_lce_blocks_plan.h: the layout, and why) for the
// question *spec asks (its tile fields are this file's: FUSED_LCE_GRAD_ROWS x WG_BN). With wgmma the dx
// and dW GEMMs' waves count too: spec->gemm_cost when the caller gives one (an experiment's GEMMs), else
// cuBLASLt's estimate; without wgmma only the layout's bytes matter. Returns the bytes the layout takes,
// 0 when fewer than 16 rows fit. fused_lce_blocks_carve then places it in a buffer of that size.
static inline size_t fused_lce_blocks_plan(FusedLceBlocks* b, size_t bytes, const FusedLceBlockPlanSpec* spec) {
    FusedLceBlockPlanSpec sp = *spec;
    sp.tile_rows = FUSED_LCE_GRAD_ROWS;
    sp.tile_cols = WG_BN;
    FusedLceGemmCostArg* arg = NULL;
    if (!sp.wgmma) {
        sp.gemm_cost = NULL;
    } else if (!sp.gemm_cost) {
        arg = (FusedLceGemmCostArg*)calloc_check(1, sizeof(FusedLceGemmCostArg));
        cublas_check(cublasLtCreate(&arg->ctx.lt));
        arg->ctx.lt_workspace_bytes = CUBLASLT_WORKSPACE_BYTES;
        arg->C = sp.C;
        arg->sm_count = sp.sm_count;
        sp.gemm_cost = fused_lce_blocks_gemm_cost;
        sp.gemm_arg = arg;
    }
    FusedLceBlockPlan p = fused_lce_block_plan(bytes, &sp);
    if (arg) {
        cublas_check(cublasLtDestroy(arg->ctx.lt));
        free(arg);
    }
    b->wgmma = sp.wgmma;
    b->nb = p.nb;
    b->vb = p.vb;
    return p.bytes;
}

static inline void fused_lce_blocks_carve(FusedLceBlocks* b, void* buf, int C) {
    b->z = (float*)buf;
    b->dxacc = (float*)((char*)buf + (size_t)b->nb * b->vb * (b->wgmma ? sizeof(bf16) : sizeof(float)));
    b->stats = (float4*)(b->dxacc + (size_t)b->nb * C);
    matmul_cache_build(&b->plans);
}

static inline void fused_lce_blocks_free(FusedLceBlocks* b) { matmul_cache_free(&b->plans); }

// z (n, ncols) fp32 = x_r · W_vᵀ
static inline void fused_lce_blocks_logits(FusedLceBlocks* b, const bf16* xr, const bf16* Wv, int n, int ncols, int C,
                                           const GpuContext* ctx) {
    matmul_cached(ctx, &b->plans, b->z, CUDA_R_32F, b->vb, xr, C, 0, Wv, C, 1, n, ncols, C, 1.0f, 0.0f);
}

// r's loss_rows and lse of every row (unless lse_ready: another kernel wrote them, and pass 1 is
// skipped; b->wgmma needs that); with r->dx != NULL also dx written and dW accumulated
static void fused_lce_blocks_run(FusedLceBlocks* b, const FusedLceRun* r, int lse_ready, const GpuContext* ctx) {
    float *loss_rows = r->loss_rows, *lse = r->lse, *dW = r->dW, dloss = r->dloss;
    bf16* dx = r->dx;
    const float* dloss_rows = r->dloss_rows;
    const int *n_valid = r->n_valid, *targets = r->targets;
    const bf16 *x = r->x, *W = r->W;
    int N = r->N, C = r->C, V = r->V, Vp = r->Vp;
    FusedLceOptions opt = r->opt;
    int nvb = ceil_div(V, b->vb), vb = b->vb;
    cudaStream_t st = ctx->stream;
    bf16* G = (bf16*)b->z;
    int ldg = b->wgmma ? vb : 2 * vb;
    if (b->wgmma && !lse_ready) check_fail("fused_lce_blocks_run: wgmma blocks need the lse first", "run fused_lce_wgmma_forward");
    FusedLceWgmmaMaps maps;
    if (b->wgmma) maps = fused_lce_wgmma_maps(x, W, N, C, Vp, FUSED_LCE_GRAD_ROWS);
    Profile* prof = ctx->prof;
    for (int r0 = 0; r0 < N; r0 += b->nb) {
        int n = N - r0 < b->nb ? N - r0 : b->nb;
        const bf16* xr = x + (size_t)r0 * C;
        for (int i = 0; i < nvb && !lse_ready; i++) {
            int v0 = i * vb, ncols = Vp - v0 < vb ? Vp - v0 : vb;
            fused_lce_blocks_logits(b, xr, W + (size_t)v0 * C, n, ncols, C, ctx);
            profile_mark(prof, "head: logits GEMM", st);
            fused_lce_block_stats_kernel<<<n, FUSED_LCE_BLOCK_THREADS, 0, st>>>(b->stats, loss_rows + r0, lse + r0, b->z, vb,
                targets + r0, v0, ncols, V, opt, i == 0, i == nvb - 1);
            cuda_check_launch();
            profile_mark(prof, "head: softmax statistics", st);
        }
        if (!dx) continue;
        for (int i = nvb - 1; i >= 0; i--) {
            int v0 = i * vb, ncols = Vp - v0 < vb ? Vp - v0 : vb;
            if (b->wgmma) {
                FusedLceGradBlock gb = {G, ldg, &maps, r0, n, v0, ncols};
                fused_lce_wgmma_grad(r, &gb, ctx);
                profile_mark(prof, "head: gradient (wgmma logits)", st);
            } else {
                if (i < nvb - 1 || lse_ready) {  // the last block is still in z after pass 1
                    fused_lce_blocks_logits(b, xr, W + (size_t)v0 * C, n, ncols, C, ctx);
                    profile_mark(prof, "head: logits GEMM", st);
                }
                fused_lce_block_grad_kernel<<<n, FUSED_LCE_BLOCK_THREADS, 0, st>>>(b->z, vb, lse + r0, targets + r0, n_valid,
                    dloss_rows ? dloss_rows + r0 : NULL, dloss, v0, ncols, V, opt);
                cuda_check_launch();
                profile_mark(prof, "head: gradient", st);
            }
#ifdef FUSED_LCE_DEV_HOOKS
            if (b->gemms) {
                FusedLceBlockGemmCall call = {b->dxacc, dW + (size_t)v0 * C, G, ldg, W + (size_t)v0 * C, xr, n, ncols, C,
                                              i < nvb - 1};
                b->gemms(b->gemms_arg, &call, ctx);
                profile_mark(prof, "head: dx and dW GEMMs", st);
            } else
#endif
            {
                matmul_cached(ctx, &b->plans, b->dxacc, CUDA_R_32F, C, G, ldg, 0, W + (size_t)v0 * C, C, 0,
                              n, C, ncols, 1.0f, i == nvb - 1 ? 0.0f : 1.0f);
                profile_mark(prof, "head: dx GEMM", st);
                matmul_cached(ctx, &b->plans, dW + (size_t)v0 * C, CUDA_R_32F, C, G, ldg, 1, xr, C, 0,
                              ncols, C, n, 1.0f, 1.0f);
                profile_mark(prof, "head: dW GEMM", st);
            }
        }
        fused_lce_dx_store_kernel<<<ctx->sm_count * 4, 256, 0, st>>>(dx + (size_t)r0 * C, b->dxacc, (size_t)n * C);
        cuda_check_launch();
        profile_mark(prof, "head: dx store", st);
    }
}
