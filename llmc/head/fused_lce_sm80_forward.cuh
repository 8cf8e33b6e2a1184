// fused_lce_sm80_forward.cuh: the LM head's loss-only forward on the tensor cores of sm_80 and later
// (the head's fused forward where the Hopper kernel of fused_lce_sm90.cuh does not run): one kernel
// computes logit tiles x·Wᵀ on the tensor cores (mma.sync m16n8k16, bf16 in, fp32 accumulate) and
// folds each tile into a running (max, Σexp, Σs) per row while it is still in registers. Only three
// floats per row and vocab split leave the chip; the (N, V) logits exist nowhere, not even per chunk.
// A second small kernel merges the splits and adds the target logit x_t·w_t (a dot product per row).
//
// Tiling: a block of 256 threads owns BM = 128 rows and walks the vocabulary in BN = 128 tiles, K in
// BK = 64 steps, three cp.async stages. The 8 warps are 2 (rows) x 4 (columns), 64 x 32 each. Napkin:
// per tile 2·128·128·C FLOPs against 128·128 exps; at C = 768 the MUFU work is ~10% of the MMA time.
// x tiles are re-read from L2 for every vocab tile (128·C·2 B per 128·128·C·2 FLOPs: 128 FLOP/B).
// Needs C % BK == 0; callers fall back to the chunked path otherwise.
#pragma once
#include "../core/cuda_common.cuh"
#include "../ptx/sm80_mma.cuh"
#include "fused_lce_common.cuh"

#define FUSED_LCE_MMA_BM 128
#define FUSED_LCE_MMA_BN 128
#ifndef FUSED_LCE_MMA_BK
#define FUSED_LCE_MMA_BK 64  // K step (a multiple of 16): 64 ran ~20% faster than 32 on an H200 (fewer barriers)
#endif
#define FUSED_LCE_MMA_STAGES 3
#define FUSED_LCE_MMA_THREADS 256
#define FUSED_LCE_MMA_PAD 8   // bf16 elements of padding per smem row: 144-byte rows make ldmatrix conflict-free
#define FUSED_LCE_MMA_LD (FUSED_LCE_MMA_BK + FUSED_LCE_MMA_PAD)
#define FUSED_LCE_MMA_SMEM (FUSED_LCE_MMA_STAGES * (FUSED_LCE_MMA_BM + FUSED_LCE_MMA_BN) * FUSED_LCE_MMA_LD * (int)sizeof(bf16))

typedef struct {
    const bf16* x;    // (N, C)
    const bf16* W;    // (Vp, C)
    float* part;      // (splits, N, 3) running max, Σexp relative to it, Σs per row and split
    int N, C, V, Vp;
    int splits;       // vocab tiles are dealt round-robin to this many blocks per row block
    float softcap;
} FusedLceMmaFwdArgs;

// --- kernels ---------------------------------------------------------------------------------

// Loads rows row0.. of x (nx rows valid) and rows col0.. of W (nw valid) at K offset k0 into a stage:
// 128 rows x BK bf16 each, in 16-byte chunks; rows past the end are zero-filled.
__device__ __forceinline__ void fused_lce_mma_load_stage(bf16* sa, bf16* sb, const bf16* x, int nx, const bf16* W, int nw,
                                                         int C, int row0, int col0, int k0) {
    const int per_row = FUSED_LCE_MMA_BK / 8;
    for (int c = threadIdx.x; c < FUSED_LCE_MMA_BM * per_row; c += FUSED_LCE_MMA_THREADS) {
        int r = c / per_row, kc = (c % per_row) * 8;
        int gr = row0 + r, gc = col0 + r;
        cp_async16(sa + r * FUSED_LCE_MMA_LD + kc, x + (size_t)(gr < nx ? gr : 0) * C + k0 + kc, gr < nx);
        cp_async16(sb + r * FUSED_LCE_MMA_LD + kc, W + (size_t)(gc < nw ? gc : 0) * C + k0 + kc, gc < nw);
    }
}

// One K step of BK of the 128x128 tile: the warp's 64x32 accumulators += tA (rows, BK) · tB (cols, BK)ᵀ.
// Warps are 2 (rows, wm) x 4 (columns, wn).
__device__ __forceinline__ void fused_lce_mma_tile_step(float acc[4][4][4], const bf16* tA, const bf16* tB, int wm, int wn,
                                                        int lane) {
    #pragma unroll
    for (int kk = 0; kk < FUSED_LCE_MMA_BK; kk += 16) {
        unsigned af[4][4], bfr[4][2];
        for (int mi = 0; mi < 4; mi++) {
            int r = wm * 64 + mi * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
            ldmatrix_x4(af[mi], tA + r * FUSED_LCE_MMA_LD + kk + (lane >> 4) * 8);
        }
        for (int nj = 0; nj < 2; nj++) {  // one x4 gives two n8 tiles x k16
            unsigned r4[4];
            int n = wn * 32 + nj * 16 + (lane & 7) + (lane >> 4) * 8;
            ldmatrix_x4(r4, tB + n * FUSED_LCE_MMA_LD + kk + ((lane >> 3) & 1) * 8);
            bfr[nj * 2][0] = r4[0]; bfr[nj * 2][1] = r4[1];
            bfr[nj * 2 + 1][0] = r4[2]; bfr[nj * 2 + 1][1] = r4[3];
        }
        for (int mi = 0; mi < 4; mi++)
            for (int ni = 0; ni < 4; ni++) mma_bf16_16816(acc[mi][ni], af[mi], bfr[ni][0], bfr[ni][1]);
    }
}

__global__ void __launch_bounds__(FUSED_LCE_MMA_THREADS, 2) fused_lce_mma_forward_kernel(const FusedLceMmaFwdArgs a) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16* sA = (bf16*)smem_raw;                                  // (STAGES, BM, LD)
    bf16* sB = sA + FUSED_LCE_MMA_STAGES * FUSED_LCE_MMA_BM * FUSED_LCE_MMA_LD;  // (STAGES, BN, LD)
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int wm = warp >> 2, wn = warp & 3;  // warp tile: rows wm*64.., columns wn*32..
    int g = lane >> 2, c4 = lane & 3;
    int row0 = blockIdx.x * FUSED_LCE_MMA_BM, split = blockIdx.y;
    int ntiles = ceil_div(a.V, FUSED_LCE_MMA_BN);
    int my_tiles = ntiles > split ? (ntiles - split + a.splits - 1) / a.splits : 0;
    int KT = a.C / FUSED_LCE_MMA_BK, iters = my_tiles * KT;
    float cap = a.softcap, inv_cap = cap > 0.0f ? 1.0f / cap : 0.0f;

    float rm[8], rs[8], rsum[8];  // running state of the thread's 8 rows: (mi, half) -> mi*2+half
    #pragma unroll
    for (int i = 0; i < 8; i++) { rm[i] = -INFINITY; rs[i] = 0.0f; rsum[i] = 0.0f; }
    float acc[4][4][4];
    for (int i = 0; i < 4; i++) for (int j = 0; j < 4; j++) for (int k = 0; k < 4; k++) acc[i][j][k] = 0.0f;

    // prologue: the first STAGES-1 steps in flight
    for (int s = 0; s < FUSED_LCE_MMA_STAGES - 1; s++) {
        if (s < iters) {
            int tile = split + (s / KT) * a.splits;
            fused_lce_mma_load_stage(sA + s * FUSED_LCE_MMA_BM * FUSED_LCE_MMA_LD, sB + s * FUSED_LCE_MMA_BN * FUSED_LCE_MMA_LD, a.x, a.N,
                                     a.W, a.V, a.C, row0, tile * FUSED_LCE_MMA_BN, (s % KT) * FUSED_LCE_MMA_BK);
        }
        cp_async_commit();
    }
    for (int it = 0; it < iters; it++) {
        cp_async_wait<FUSED_LCE_MMA_STAGES - 2>();
        __syncthreads();
        // issue the step STAGES-1 ahead into the stage freed by the previous iteration
        int nx = it + FUSED_LCE_MMA_STAGES - 1;
        if (nx < iters) {
            int st = nx % FUSED_LCE_MMA_STAGES, tile = split + (nx / KT) * a.splits;
            fused_lce_mma_load_stage(sA + st * FUSED_LCE_MMA_BM * FUSED_LCE_MMA_LD, sB + st * FUSED_LCE_MMA_BN * FUSED_LCE_MMA_LD, a.x, a.N,
                                     a.W, a.V, a.C, row0, tile * FUSED_LCE_MMA_BN, (nx % KT) * FUSED_LCE_MMA_BK);
        }
        cp_async_commit();
        const bf16* tA = sA + (it % FUSED_LCE_MMA_STAGES) * FUSED_LCE_MMA_BM * FUSED_LCE_MMA_LD;
        const bf16* tB = sB + (it % FUSED_LCE_MMA_STAGES) * FUSED_LCE_MMA_BN * FUSED_LCE_MMA_LD;
        fused_lce_mma_tile_step(acc, tA, tB, wm, wn, lane);
        if (it % KT != KT - 1) continue;

        // epilogue of a vocab tile: fold the fp32 accumulators into the rows' running state
        int col_base = (split + (it / KT) * a.splits) * FUSED_LCE_MMA_BN + wn * 32 + c4 * 2;
        #pragma unroll
        for (int mi = 0; mi < 4; mi++) {
            #pragma unroll
            for (int h = 0; h < 2; h++) {
                float v[8];  // s_j of the thread's 8 columns of this row, -inf past the vocabulary
                #pragma unroll
                for (int ni = 0; ni < 4; ni++) {
                    #pragma unroll
                    for (int e = 0; e < 2; e++) {
                        float z = acc[mi][ni][h * 2 + e];
                        if (cap > 0.0f) z = cap * fused_lce_tanh(z * inv_cap);
                        v[ni * 2 + e] = col_base + ni * 8 + e < a.V ? z : -INFINITY;
                        acc[mi][ni][h * 2 + e] = 0.0f;
                    }
                }
                int i = mi * 2 + h;
                fused_lce_fold<8>(rm[i], rs[i], rsum[i], v);
            }
        }
    }
    cp_async_wait<0>();

    // merge the 4 lanes that share a row, then the 4 column warps, and write the block's partial
    #pragma unroll
    for (int i = 0; i < 8; i++) {
        #pragma unroll
        for (int o = 1; o <= 2; o <<= 1) {
            float m2 = __shfl_xor_sync(0xffffffffu, rm[i], o), s2 = __shfl_xor_sync(0xffffffffu, rs[i], o);
            rsum[i] += __shfl_xor_sync(0xffffffffu, rsum[i], o);
            lse_merge(rm[i], rs[i], m2, s2);
        }
    }
    __syncthreads();  // pipeline smem is reused below
    float* red = (float*)smem_raw;  // (4 column warps, BM rows, 3)
    if (c4 == 0) {
        #pragma unroll
        for (int i = 0; i < 8; i++) {
            int r = wm * 64 + (i >> 1) * 16 + g + (i & 1) * 8;
            float* p = red + (wn * FUSED_LCE_MMA_BM + r) * 3;
            p[0] = rm[i]; p[1] = rs[i]; p[2] = rsum[i];
        }
    }
    __syncthreads();
    if (threadIdx.x < FUSED_LCE_MMA_BM) {
        int r = threadIdx.x, grow = row0 + r;
        float m = -INFINITY, s = 0.0f, sum = 0.0f;
        for (int w = 0; w < 4; w++) {
            const float* p = red + (w * FUSED_LCE_MMA_BM + r) * 3;
            lse_merge(m, s, p[0], p[1]);
            sum += p[2];
        }
        if (grow < a.N) {
            float* out = a.part + ((size_t)split * a.N + grow) * 3;
            out[0] = m; out[1] = s; out[2] = sum;
        }
    }
}

// One warp per row: merges the splits into lse, computes the target logit x_i·w_t in fp32, the loss.
__global__ void fused_lce_mma_finish_kernel(float* loss_rows, float* lse_out, const float* part, const bf16* x,
                                            const bf16* W, const int* targets, int N, int C, int V, int splits,
                                            FusedLceOptions opt) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    float m = -INFINITY, s = 0.0f, sum = 0.0f;
    for (int sp = 0; sp < splits; sp++) {
        const float* p = part + ((size_t)sp * N + row) * 3;
        lse_merge(m, s, p[0], p[1]);
        sum += p[2];
    }
    float lse = m + logf(s);
    int t = targets[row];
    int ignored = fused_lce_ignored(t, opt, V);
    float dot = 0.0f;
    if (!ignored) dot = fused_lce_target_logit(x, W, row, t, C, lane, opt);
    if (lane == 0) {
        lse_out[row] = lse;
        loss_rows[row] = ignored ? 0.0f : fused_lce_row_loss(lse, dot, sum, opt, V);
    }
}

// --- launchers -------------------------------------------------------------------------------

// How many vocab splits fill the GPU: about two blocks per SM in all, never more splits than tiles.
// The statistics then take 3·splits·N <= 3·(2·SMs·BM + N + BM) floats (fused_lce_mma_part_floats).
static inline int fused_lce_mma_splits(int N, int V, int sm_count) {
    int row_blocks = ceil_div(N, FUSED_LCE_MMA_BM), tiles = ceil_div(V, FUSED_LCE_MMA_BN);
    int s = ceil_div(2 * sm_count, row_blocks);
    return s < 1 ? 1 : (s > tiles ? tiles : s);
}

static inline size_t fused_lce_mma_part_floats(int max_n, int sm_count) {
    return 3 * ((size_t)2 * sm_count * FUSED_LCE_MMA_BM + max_n + FUSED_LCE_MMA_BM);
}

// r's loss_rows and lse from its x, W and targets (its gradient fields unread); part must hold
// (splits, N, 3) floats for splits = fused_lce_mma_splits(N, V, sm_count).
static inline void fused_lce_mma_forward(const FusedLceRun* r, float* part, const GpuContext* ctx) {
    float *loss_rows = r->loss_rows, *lse = r->lse;
    const int* targets = r->targets;
    const bf16 *x = r->x, *W = r->W;
    int N = r->N, C = r->C, V = r->V, Vp = r->Vp;
    FusedLceOptions opt = r->opt;
    if (C % FUSED_LCE_MMA_BK != 0)
        check_failf("a bug in the caller: llmc/head/fused_lce.cuh's plan takes this path only for such C",
                    "fused_lce_mma_forward needs C %% %d == 0 (C = %d)", FUSED_LCE_MMA_BK, C);
    FusedLceMmaFwdArgs a = {x, W, part, N, C, V, Vp, fused_lce_mma_splits(N, V, ctx->sm_count), opt.softcap};
    cuda_check(cudaFuncSetAttribute(fused_lce_mma_forward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, FUSED_LCE_MMA_SMEM));
    dim3 grid(ceil_div(N, FUSED_LCE_MMA_BM), a.splits);
    fused_lce_mma_forward_kernel<<<grid, FUSED_LCE_MMA_THREADS, FUSED_LCE_MMA_SMEM, ctx->stream>>>(a);
    cuda_check_launch();
    fused_lce_mma_finish_kernel<<<ceil_div(N, 8), 256, 0, ctx->stream>>>(loss_rows, lse, part, x, W, targets, N, C, V,
                                                                         a.splits, opt);
    cuda_check_launch();
}
