// fused_lce_sm80_backward.cuh: an experiment, the fully fused LM-head backward (variants 3 and 4 of
// dev/cuda/fused_lce.cu, reached through the head's backward hook, fused_lce_variants.cuh): the
// algorithm of the Helion example kernel (PR #1268) in CUDA C. The head's fused forward
// (llmc/head/fused_lce_sm80_forward.cuh, or on Hopper llmc/head/fused_lce_sm90.cuh) left
// only lse per row; here every 128x128 logit tile is recomputed on the tensor cores, turned into the
// gradient tile G = dL/dz in registers (fp32, then bf16 into shared memory), and multiplied right away:
//   dx[rows]   += G · W[cols]     (128 x C, K = the tile's 128 vocab columns)
//   dW[cols]   += Gᵀ · x[rows]    (128 x C, K = the tile's 128 rows)
// in slices of 64 channels. Nothing of size N x V exists anywhere; dx accumulates in fp32 in the head's
// scratch (row chunks of scratch / (4·C) rows), then is rounded once to bf16.
//   variant 3 (FUSED_LCE_BWD_ATOMIC): blocks own (row block, vocab split); dx and dW are added with fp32
//     atomics. FLOPs 4F with the forward. Atomic traffic: 2·128·C adds per tile, (N/128)·V·C for dW.
//   variant 4 (FUSED_LCE_BWD_DX then FUSED_LCE_BWD_DW): no floating-point atomics, bitwise repeatable. One kernel
//     gives each block a row block and all vocab tiles in order (it alone adds to its dx rows); a second
//     gives each block a vocab tile and all row blocks in order (it alone adds to its dW rows). Each
//     recomputes the logits: 5F with the forward.
// Semantics of G as in fused_lce.cuh (softcap, z-loss, label smoothing, ignore_index, padded columns).
// Needs C % 64 == 0 (the K step and the channel slices).
#pragma once
#include "../../llmc/core/cuda_common.cuh"
#include "../../llmc/ptx/sm80_mma.cuh"
#include "../../llmc/head/fused_lce_options.h"
#include "../../llmc/head/fused_lce_sm80_forward.cuh"

enum { FUSED_LCE_BWD_ATOMIC, FUSED_LCE_BWD_DX, FUSED_LCE_BWD_DW };

#define FUSED_LCE_BWD_SLICE 64                      // channels per product step
#define FUSED_LCE_BWD_LDG (FUSED_LCE_MMA_BN + 8)         // smem row of the gradient tile: 272 B, ldmatrix conflict-free
#define FUSED_LCE_BWD_SMEM (FUSED_LCE_MMA_SMEM + FUSED_LCE_MMA_BM * FUSED_LCE_BWD_LDG * (int)sizeof(bf16))

typedef struct {
    const bf16* x;            // (rows, C) this chunk's rows
    const bf16* W;            // (Vp, C)
    const int* targets;       // (rows)
    const float* lse;         // (rows) from the forward
    const float* dloss_rows;  // (rows) per-row upstream gradient, or NULL: dloss / n_valid for every row
    const int* n_valid;
    float dloss;
    float* dx_acc;            // (rows, C) fp32, zeroed by the caller
    float* dW;                // (Vp, C) fp32, accumulated
    int rows, C, V, splits;
    FusedLceOptions opt;
} FusedLceMmaBwdArgs;

// --- kernels ---------------------------------------------------------------------------------

// acc (the thread's part of the 128x128 tile) = x[row0..] · W[col0..]ᵀ, with its own cp.async pipeline.
__device__ __forceinline__ void fused_lce_bwd_logits(float acc[4][4][4], bf16* sA, bf16* sB, const FusedLceMmaBwdArgs& a,
                                                     int row0, int col0, int wm, int wn, int lane) {
    #pragma unroll
    for (int i = 0; i < 4; i++) for (int j = 0; j < 4; j++) for (int k = 0; k < 4; k++) acc[i][j][k] = 0.0f;
    int KT = a.C / FUSED_LCE_MMA_BK;
    for (int s = 0; s < FUSED_LCE_MMA_STAGES - 1; s++) {
        if (s < KT) fused_lce_mma_load_stage(sA + s * FUSED_LCE_MMA_BM * FUSED_LCE_MMA_LD, sB + s * FUSED_LCE_MMA_BN * FUSED_LCE_MMA_LD, a.x,
                                             a.rows, a.W, a.V, a.C, row0, col0, s * FUSED_LCE_MMA_BK);
        cp_async_commit();
    }
    for (int it = 0; it < KT; it++) {
        cp_async_wait<FUSED_LCE_MMA_STAGES - 2>();
        __syncthreads();
        int nx = it + FUSED_LCE_MMA_STAGES - 1;
        if (nx < KT) {
            int st = nx % FUSED_LCE_MMA_STAGES;
            fused_lce_mma_load_stage(sA + st * FUSED_LCE_MMA_BM * FUSED_LCE_MMA_LD, sB + st * FUSED_LCE_MMA_BN * FUSED_LCE_MMA_LD, a.x, a.rows,
                                     a.W, a.V, a.C, row0, col0, nx * FUSED_LCE_MMA_BK);
        }
        cp_async_commit();
        fused_lce_mma_tile_step(acc, sA + (it % FUSED_LCE_MMA_STAGES) * FUSED_LCE_MMA_BM * FUSED_LCE_MMA_LD,
                                sB + (it % FUSED_LCE_MMA_STAGES) * FUSED_LCE_MMA_BN * FUSED_LCE_MMA_LD, wm, wn, lane);
    }
    cp_async_wait<0>();
    __syncthreads();  // every warp is done with the stages: they are reused for the channel slices
}

// The gradient of the tile's logits, rounded to bf16, into sG (128 rows, 128 columns, row stride LDG).
__device__ __forceinline__ void fused_lce_bwd_gradient_tile(bf16* sG, float acc[4][4][4], const FusedLceMmaBwdArgs& a,
                                                            int row0, int col0, int wm, int wn, int lane) {
    int g = lane >> 2, c4 = lane & 3, nv = *a.n_valid;
    #pragma unroll
    for (int mi = 0; mi < 4; mi++)
        #pragma unroll
        for (int h = 0; h < 2; h++) {
            int r = wm * 64 + mi * 16 + g + h * 8, row = row0 + r;
            float scale = 0.0f, lse = 0.0f;
            int t = -1;
            if (row < a.rows) {
                t = a.targets[row];
                int ignored = t == a.opt.ignore_index || t < 0 || t >= a.V;
                scale = ignored ? 0.0f : (a.dloss_rows ? a.dloss_rows[row] : (nv > 0 ? a.dloss / nv : 0.0f));
                lse = a.lse[row];
            }
            FusedLceRowGrad rg = fused_lce_row_grad(lse, t, scale, a.opt, a.V);
            #pragma unroll
            for (int ni = 0; ni < 4; ni++) {
                int cl = wn * 32 + ni * 8 + c4 * 2;
                float d[2];
                #pragma unroll
                for (int e = 0; e < 2; e++) {
                    int col = col0 + cl + e;
                    d[e] = (col < a.V && scale != 0.0f) ? fused_lce_dlogit(rg, acc[mi][ni][h * 2 + e], col) : 0.0f;
                }
                *(__nv_bfloat162*)(sG + r * FUSED_LCE_BWD_LDG + cl) = __floats2bfloat162_rn(d[0], d[1]);
            }
        }
}

// Channels c0 .. c0+63 of rows r0.. of `src` (nsrc rows valid) into dst (128, LD), zero-filled past the end.
__device__ __forceinline__ void fused_lce_bwd_load_slice(bf16* dst, const bf16* src, int nsrc, int C, int r0, int c0) {
    for (int c = threadIdx.x; c < FUSED_LCE_MMA_BM * (FUSED_LCE_BWD_SLICE / 8); c += FUSED_LCE_MMA_THREADS) {
        int r = c / (FUSED_LCE_BWD_SLICE / 8), kc = (c % (FUSED_LCE_BWD_SLICE / 8)) * 8, gr = r0 + r;
        cp_async16(dst + r * FUSED_LCE_MMA_LD + kc, src + (size_t)(gr < nsrc ? gr : 0) * C + c0 + kc, gr < nsrc);
    }
}

// out (128, 64 channels), the warp's 64 x 16 part = A (128 x K=128) · B (K=128 x 64). A is sG itself
// (trans_a = 0: rows of G, K = vocab columns) or its transpose (trans_a = 1: vocab columns, K = rows);
// B (K rows, 64 channels, row stride LD) is a channel slice of W or x.
__device__ __forceinline__ void fused_lce_bwd_product(float out[4][2][4], const bf16* sG, int trans_a, const bf16* sS,
                                                      int wm, int wn, int lane) {
    #pragma unroll
    for (int i = 0; i < 4; i++) for (int j = 0; j < 2; j++) for (int k = 0; k < 4; k++) out[i][j][k] = 0.0f;
    int mat = lane >> 3, r8 = lane & 7;
    #pragma unroll
    for (int kk = 0; kk < FUSED_LCE_MMA_BN; kk += 16) {
        unsigned af[4][4], b4[4];
        #pragma unroll
        for (int mi = 0; mi < 4; mi++) {
            int m = wm * 64 + mi * 16;
            if (!trans_a) ldmatrix_x4(af[mi], sG + (m + r8 + (mat & 1) * 8) * FUSED_LCE_BWD_LDG + kk + (mat >> 1) * 8);
            else ldmatrix_x4_trans(af[mi], sG + (kk + r8 + (mat >> 1) * 8) * FUSED_LCE_BWD_LDG + m + (mat & 1) * 8);
        }
        // B stored (k, n): the transposing load gives b0, b1 of channel tiles n 0-7 and 8-15
        ldmatrix_x4_trans(b4, sS + (kk + r8 + (mat & 1) * 8) * FUSED_LCE_MMA_LD + wn * 16 + (mat >> 1) * 8);
        #pragma unroll
        for (int mi = 0; mi < 4; mi++) {
            mma_bf16_16816(out[mi][0], af[mi], b4[0], b4[1]);
            mma_bf16_16816(out[mi][1], af[mi], b4[2], b4[3]);
        }
    }
}

// Adds the warp's part of a product into dst (rows m0.., row stride C, channels c0..; nvalid rows):
// with fp32 atomics, or as the only writer.
template <int ATOMIC>
__device__ __forceinline__ void fused_lce_bwd_add(float* dst, int nvalid, int C, int m0, int c0, float out[4][2][4],
                                                  int wm, int wn, int lane) {
    int g = lane >> 2, c4 = lane & 3;
    #pragma unroll
    for (int mi = 0; mi < 4; mi++)
        #pragma unroll
        for (int h = 0; h < 2; h++) {
            int m = m0 + wm * 64 + mi * 16 + g + h * 8;
            if (m >= nvalid) continue;
            #pragma unroll
            for (int ni = 0; ni < 2; ni++) {
                float2* p = (float2*)(dst + (size_t)m * C + c0 + wn * 16 + ni * 8 + c4 * 2);
                float2 v = make_float2(out[mi][ni][h * 2], out[mi][ni][h * 2 + 1]);
                if (ATOMIC) {
#if __CUDA_ARCH__ >= 900
                    atomicAdd(p, v);  // one 8-byte atomic (sm_90)
#else
                    atomicAdd(&p->x, v.x); atomicAdd(&p->y, v.y);
#endif
                }
                else { float2 o = *p; o.x += v.x; o.y += v.y; *p = o; }
            }
        }
}

template <int MODE>
__global__ void __launch_bounds__(FUSED_LCE_MMA_THREADS, 1) fused_lce_mma_backward_kernel(const FusedLceMmaBwdArgs a) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16* sA = (bf16*)smem_raw;                                  // (STAGES, BM, LD) logits pipeline
    bf16* sB = sA + FUSED_LCE_MMA_STAGES * FUSED_LCE_MMA_BM * FUSED_LCE_MMA_LD;  // (STAGES, BN, LD)
    bf16* sG = (bf16*)(smem_raw + FUSED_LCE_MMA_SMEM);                // (BM, LDG) gradient tile
    bf16* sW = sA;                                               // channel slices, over the pipeline stages
    bf16* sX = sA + FUSED_LCE_MMA_BM * FUSED_LCE_MMA_LD;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, wm = warp >> 2, wn = warp & 3;
    int row_blocks = ceil_div(a.rows, FUSED_LCE_MMA_BM), tiles = ceil_div(a.V, FUSED_LCE_MMA_BN);
    // the block's work list: (row block, vocab tile) pairs
    int first = MODE == FUSED_LCE_BWD_ATOMIC ? blockIdx.y : 0;
    int step = MODE == FUSED_LCE_BWD_ATOMIC ? a.splits : 1;
    int count = MODE == FUSED_LCE_BWD_DW ? row_blocks : tiles;
    for (int w = first; w < count; w += step) {
        int rb = MODE == FUSED_LCE_BWD_DW ? w : blockIdx.x, tile = MODE == FUSED_LCE_BWD_DW ? blockIdx.x : w;
        int row0 = rb * FUSED_LCE_MMA_BM, col0 = tile * FUSED_LCE_MMA_BN;
        float acc[4][4][4];
        fused_lce_bwd_logits(acc, sA, sB, a, row0, col0, wm, wn, lane);
        fused_lce_bwd_gradient_tile(sG, acc, a, row0, col0, wm, wn, lane);
        for (int c0 = 0; c0 < a.C; c0 += FUSED_LCE_BWD_SLICE) {
            if (MODE != FUSED_LCE_BWD_DW) fused_lce_bwd_load_slice(sW, a.W, a.V, a.C, col0, c0);
            if (MODE != FUSED_LCE_BWD_DX) fused_lce_bwd_load_slice(sX, a.x, a.rows, a.C, row0, c0);
            cp_async_commit();
            cp_async_wait<0>();
            __syncthreads();  // slices and (the first time) the gradient tile are complete
            float out[4][2][4];
            if (MODE != FUSED_LCE_BWD_DW) {
                fused_lce_bwd_product(out, sG, 0, sW, wm, wn, lane);
                fused_lce_bwd_add<MODE == FUSED_LCE_BWD_ATOMIC>(a.dx_acc, a.rows, a.C, row0, c0, out, wm, wn, lane);
            }
            if (MODE != FUSED_LCE_BWD_DX) {
                fused_lce_bwd_product(out, sG, 1, sX, wm, wn, lane);
                fused_lce_bwd_add<MODE == FUSED_LCE_BWD_ATOMIC>(a.dW, a.V, a.C, col0, c0, out, wm, wn, lane);
            }
            __syncthreads();  // before the next slice (or tile) overwrites the buffers
        }
    }
}

__global__ void fused_lce_dx_round_kernel(bf16* dx, const float* acc, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dx[i] = __float2bfloat16(acc[i]);
}

// --- launcher --------------------------------------------------------------------------------

// r's dx (N, C) bf16 assigned and dW (Vp, C) fp32 accumulated from r->lse of the forward; deterministic
// selects variant 4. dx accumulates in fp32 in scratch (scratch_bytes: all N rows, or at least 128), in
// row chunks of whole 128-row blocks.
static inline void fused_lce_mma_backward(const FusedLceRun* r, void* scratch, size_t scratch_bytes, int deterministic,
                                          const GpuContext* ctx) {
    bf16* dx = r->dx;
    float *dW = r->dW, dloss = r->dloss;
    const float *lse = r->lse, *dloss_rows = r->dloss_rows;
    const int *n_valid = r->n_valid, *targets = r->targets;
    const bf16 *x = r->x, *W = r->W;
    int N = r->N, C = r->C, V = r->V;
    FusedLceOptions opt = r->opt;
    if (C % FUSED_LCE_BWD_SLICE != 0 || C % FUSED_LCE_MMA_BK != 0)
        check_failf("a bug in the caller: the experiment takes this path only for such C",
                    "fused_lce_mma_backward needs C %% 64 == 0 (C = %d)", C);
    size_t fit = scratch_bytes / ((size_t)C * sizeof(float));  // rows of fp32 dx the scratch holds
    int chunk = fit >= (size_t)N ? N : (int)(fit / FUSED_LCE_MMA_BM * FUSED_LCE_MMA_BM);  // chunks: whole row blocks
    if (chunk < 1) check_fail("fused_lce_mma_backward: the scratch holds fewer than 128 rows of fp32 dx", "raise the budget");
    cuda_check(cudaFuncSetAttribute(fused_lce_mma_backward_kernel<FUSED_LCE_BWD_ATOMIC>, cudaFuncAttributeMaxDynamicSharedMemorySize, FUSED_LCE_BWD_SMEM));
    cuda_check(cudaFuncSetAttribute(fused_lce_mma_backward_kernel<FUSED_LCE_BWD_DX>, cudaFuncAttributeMaxDynamicSharedMemorySize, FUSED_LCE_BWD_SMEM));
    cuda_check(cudaFuncSetAttribute(fused_lce_mma_backward_kernel<FUSED_LCE_BWD_DW>, cudaFuncAttributeMaxDynamicSharedMemorySize, FUSED_LCE_BWD_SMEM));
    float* acc = (float*)scratch;
    for (int r0 = 0; r0 < N; r0 += chunk) {
        int rows = N - r0 < chunk ? N - r0 : chunk;
        int row_blocks = ceil_div(rows, FUSED_LCE_MMA_BM), tiles = ceil_div(V, FUSED_LCE_MMA_BN);
        int splits = ceil_div(ctx->sm_count, row_blocks);  // one block per SM (the tile buffers fill it)
        splits = splits > tiles ? tiles : splits;
        FusedLceMmaBwdArgs a = {x + (size_t)r0 * C, W, targets + r0, lse + r0, dloss_rows ? dloss_rows + r0 : NULL, n_valid,
                            dloss, acc, dW, rows, C, V, splits, opt};
        cuda_check(cudaMemsetAsync(acc, 0, (size_t)rows * C * sizeof(float), ctx->stream));
        if (!deterministic) {
            fused_lce_mma_backward_kernel<FUSED_LCE_BWD_ATOMIC><<<dim3(row_blocks, splits), FUSED_LCE_MMA_THREADS, FUSED_LCE_BWD_SMEM, ctx->stream>>>(a);
        } else {
            fused_lce_mma_backward_kernel<FUSED_LCE_BWD_DX><<<row_blocks, FUSED_LCE_MMA_THREADS, FUSED_LCE_BWD_SMEM, ctx->stream>>>(a);
            cuda_check_launch();
            fused_lce_mma_backward_kernel<FUSED_LCE_BWD_DW><<<tiles, FUSED_LCE_MMA_THREADS, FUSED_LCE_BWD_SMEM, ctx->stream>>>(a);
        }
        cuda_check_launch();
        fused_lce_dx_round_kernel<<<1024, 256, 0, ctx->stream>>>(dx + (size_t)r0 * C, acc, (size_t)rows * C);
        cuda_check_launch();
    }
}
