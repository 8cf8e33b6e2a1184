// fused_lce_chunks.cuh: the LM head's path "chunks": tokens in chunks whose fp32 logits fit the scratch
// buffer; and, with bf16 logits of all rows at once, the unfused baseline the fused head is measured
// against. Per chunk of `rows` rows:
//   1. logits (rows, Vp) fp32 = x_c · Wᵀ               cuBLASLt, bf16 in, fp32 accumulate and out
//   2. one block per row: max, Σexp, lse, loss in fp32; then the gradient dL/dz, rounded once to bf16,
//      is written IN PLACE over the row's fp32 logits (row stride 2·Vp bf16 elements)
//   3. dx_c (rows, C) bf16 = G · W                      cuBLASLt
//   4. dW (Vp, C) fp32    += Gᵀ · x_c                   cuBLASLt, beta = 1
// FLOPs 3F (F = 2·N·C·V) when the gradient comes with the forward pass. Bytes per chunk beyond the GEMM
// operands: logits written 4 B and read 8 B per element, G written 2 B and read 4 B, plus dW read and
// written once per chunk (8·Vp·C B): the last term is why bigger chunks are faster, and why with few
// rows per chunk (64 MiB holds 320 at V = 50304) the blocks of fused_lce_blocks.cuh win.
#pragma once
#include "../core/cuda_common.cuh"
#include "../layers/matmul.cuh"
#include "fused_lce_common.cuh"

#define FUSED_LCE_ROW_THREADS 512

typedef struct {
    int rows;      // rows per chunk (a multiple of 16, or all max_n rows)
    int fp32;      // 1: fp32 logits (the fused head); 0: bf16 logits of all rows (the unfused baseline)
    int staged;    // bytes of shared memory the row kernel stages an fp32 row in (0: the row is read twice)
    void* logits;  // (rows, Vp) fp32 or bf16, overwritten in place by the bf16 gradient
    size_t bytes;  // its size
} FusedLceChunks;

// --- kernels ---------------------------------------------------------------------------------

// One block per row. Pass 1 folds the row's logits (fp32 or bf16) into max, Σexp, Σs; pass 2, when
// `grad` is set, reads them again and writes the bf16 gradient over them. For fp32 logits the gradient
// of element j lands on bytes [2j, 2j+2), i.e. on fp32 element j/2: each step reads a span, waits at a
// barrier, then writes the half-width span, which only covers elements read in this or earlier steps.
// staged (fp32 rows whose Vp floats fit the block's shared memory): pass 1 also copies the row into
// shared memory and pass 2 reads it from there, so the row leaves DRAM once, not twice (a chunk's 64 MiB
// of logits do not stay in the 50 MB L2 between the passes), and no barrier is needed per span. Every
// thread reads back only the spans it wrote (same mapping in both passes).
template <typename T>
__global__ void __launch_bounds__(FUSED_LCE_ROW_THREADS)
fused_lce_rows_kernel(void* logits_v, float* loss_rows, float* lse_out, const int* targets, const int* n_valid,
                      const float* dloss_rows, float dloss, int V, int Vp, FusedLceOptions opt, int grad, int staged) {
    extern __shared__ __align__(16) float srow[];  // (Vp) when staged
    int row = blockIdx.x;
    T* z = (T*)logits_v + (size_t)row * Vp;
    bf16* g = (bf16*)logits_v + (size_t)row * (sizeof(T) / sizeof(bf16)) * Vp;  // in place, same row start
    int t = targets[row];
    int ignored = fused_lce_ignored(t, opt, V);
    float cap = opt.softcap;

    float m = -INFINITY, s = 0.0f, sum = 0.0f;
    fused_lce_fold_row<FUSED_LCE_ROW_THREADS>(m, s, sum, z, V, cap, staged ? srow : NULL);
    fused_lce_block_reduce(&m, &s, &sum);
    float lse = m + logf(s);
    float st = 0.0f;
    if (!ignored) { st = fused_lce_load(z + t); if (cap > 0.0f) st = cap * fused_lce_tanh(st * (1.0f / cap)); }
    if (threadIdx.x == 0) {
        lse_out[row] = lse;
        loss_rows[row] = ignored ? 0.0f : fused_lce_row_loss(lse, st, sum, opt, V);
    }
    if (!grad) return;

    // pass 2: dL/dz, scaled, rounded once to bf16
    const int per = 8;
    int nv = *n_valid;
    float scale = ignored ? 0.0f : (dloss_rows ? dloss_rows[row] : (nv > 0 ? dloss / nv : 0.0f));
    FusedLceRowGrad rg = fused_lce_row_grad(lse, t, scale, opt, V);
    for (int j0 = 0; j0 < Vp; j0 += blockDim.x * per) {  // per elements per thread: one 16-byte bf16 store
        int j = j0 + threadIdx.x * per;
        float v[per];
        if (staged) {
            if (j < Vp) for (int k = 0; k < per; k++) v[k] = srow[j + k];  // entries >= V are never used
        } else {
            if (j < Vp) fused_lce_load8(v, z + j);
            if (sizeof(T) > sizeof(bf16)) __syncthreads();  // every read of this span precedes any write
        }
        for (int k = 0; k < per; k++) v[k] = j + k < V ? fused_lce_dlogit(rg, v[k], j + k) : 0.0f;
        if (j + per <= Vp) {
            store128(g + j, bf16x8_from_floats(v));
        } else {
            for (int k = 0; k < per && j + k < Vp; k++) g[j + k] = __float2bfloat16(v[k]);
        }
    }
}

// --- launchers -------------------------------------------------------------------------------

// Sizes the chunks for max_n rows: fp32 logits within `budget` bytes (0 when fewer than 16 rows fit), or
// bf16 logits of all rows (fp32 = 0). Allocates the buffer; staging as the GPU's shared memory allows,
// unless no_staging (tests: the path of vocabularies wider than shared memory).
static inline size_t fused_lce_chunks_build(FusedLceChunks* c, int max_n, int Vp, int fp32, size_t budget, int no_staging) {
    memset(c, 0, sizeof(*c));
    c->fp32 = fp32;
    if (fp32) {
        size_t rows = budget / ((size_t)Vp * sizeof(float)) / 16 * 16;  // keeps chunk offsets 16-byte aligned
        if (rows < 16) return 0;
        c->rows = (int)(rows < (size_t)max_n ? rows : (size_t)max_n);
    } else {
        c->rows = max_n;
    }
    int dev, smem_optin;
    cuda_check(cudaGetDevice(&dev));
    cuda_check(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    // an fp32 row in shared memory when it fits (Vp = 50304: 197 KiB of 227 on an H200)
    size_t row_bytes = (size_t)Vp * sizeof(float) + 1024;  // + the block reduction's static arrays
    c->staged = fp32 && !no_staging && row_bytes <= (size_t)smem_optin ? (int)((size_t)Vp * sizeof(float)) : 0;
    if (c->staged)
        cuda_check(cudaFuncSetAttribute(fused_lce_rows_kernel<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, c->staged));
    c->bytes = (size_t)c->rows * Vp * (fp32 ? sizeof(float) : sizeof(bf16));
    cuda_check(cudaMalloc(&c->logits, c->bytes));
    return c->bytes;
}

static inline void fused_lce_chunks_free(FusedLceChunks* c) { cuda_check(cudaFree(c->logits)); }

// r's loss_rows and lse of every row; with r->dx != NULL also dx written and dW accumulated
static void fused_lce_chunks_run(const FusedLceChunks* c, const FusedLceRun* r, const GpuContext* ctx) {
    float *loss_rows = r->loss_rows, *lse = r->lse, *dW = r->dW, dloss = r->dloss;
    bf16* dx = r->dx;
    const float* dloss_rows = r->dloss_rows;
    const int *n_valid = r->n_valid, *targets = r->targets;
    const bf16 *x = r->x, *W = r->W;
    int N = r->N, C = r->C, V = r->V, Vp = r->Vp;
    FusedLceOptions opt = r->opt;
    int grad = dx != NULL;
    cudaDataType_t ltype = c->fp32 ? CUDA_R_32F : CUDA_R_16BF;
    int ldg = c->fp32 ? 2 * Vp : Vp;  // row stride of the in-place bf16 gradient
    for (int r0 = 0; r0 < N; r0 += c->rows) {
        int n = N - r0 < c->rows ? N - r0 : c->rows;
        matmul(ctx, c->logits, ltype, Vp, x + (size_t)r0 * C, C, 0, W, C, 1, n, Vp, C, 1.0f, 0.0f);
        profile_mark(ctx->prof, "head: logits GEMM", ctx->stream);
        const float* dlr = dloss_rows ? dloss_rows + r0 : NULL;
        if (c->fp32)
            fused_lce_rows_kernel<float><<<n, FUSED_LCE_ROW_THREADS, c->staged, ctx->stream>>>(c->logits, loss_rows + r0,
                lse + r0, targets + r0, n_valid, dlr, dloss, V, Vp, opt, grad, c->staged > 0);
        else
            fused_lce_rows_kernel<bf16><<<n, FUSED_LCE_ROW_THREADS, 0, ctx->stream>>>(c->logits, loss_rows + r0, lse + r0,
                targets + r0, n_valid, dlr, dloss, V, Vp, opt, grad, 0);
        cuda_check_launch();
        profile_mark(ctx->prof, "head: softmax rows", ctx->stream);
        if (!grad) continue;
        const bf16* G = (const bf16*)c->logits;
        matmul(ctx, dx + (size_t)r0 * C, CUDA_R_16BF, C, G, ldg, 0, W, C, 0, n, C, Vp, 1.0f, 0.0f);
        profile_mark(ctx->prof, "head: dx GEMM", ctx->stream);
        matmul(ctx, dW, CUDA_R_32F, C, G, ldg, 1, x + (size_t)r0 * C, C, 0, Vp, C, n, 1.0f, 1.0f);
        profile_mark(ctx->prof, "head: dW GEMM", ctx->stream);
    }
}
