// layernorm.cuh: LayerNorm over the C channels of each row, out = (x - mean) · rstd · w + b (eps 1e-5,
// as GPT-2), forward and backward, with the statistics in fp32.
//
// Fused: residual_layernorm_forward adds the two branches of the residual stream (r = a + b, rounded
// to bf16 and stored: the stream itself), and normalizes the rounded r in the same kernel from
// registers, so the stream is read once. The saved mean and rstd (N,) fp32 are what the
// backward reads; the normalized xhat is never stored (recomputed from x, mean, rstd).
// Backward: one kernel reads each row once (16-byte vectors, held in registers): the two row sums, dx
// ACCUMULATED into the residual-stream gradient (bf16), and column sums for dw, db (C,) fp32 kept per
// lane; LN_BWD_BLOCKS blocks write partial sums to scratch and one kernel adds them in order
// (deterministic, no atomics). Napkin math at N = 65536, C = 768: 400 MB moved, ~0.1 ms.
// Sizes: C % 8 == 0 and C <= LN_MAX_C (checked by the launchers).
#pragma once
#include "cuda_common.cuh"

#define LN_EPS 1e-5f
#define LN_BWD_BLOCKS 256    // blocks of the backward, each writing a partial (2, C) fp32 row of dw, db to scratch
#define LN_MAX_C ROW_MAX_C   // every kernel keeps a row in registers (llmc/cuda_common.cuh)
#define LN_ROWS_PER_BLOCK 8  // warps per block in the row kernels

// --- kernels ---------------------------------------------------------------------------------

// One warp per row, the row in registers (lane l holds K groups of 8 channels, 8·(l + 32k) ..., read
// as 16-byte vectors). With resid_b != NULL the row is first r = bf16(a + b), stored to resid_out and
// normalized as rounded. Statistics: the mean, then the variance as Σ (x - mean)² (no cancellation).
template <int K>
__global__ void __launch_bounds__(32 * LN_ROWS_PER_BLOCK)
layernorm_forward_kernel(bf16* out, float* mean, float* rstd, bf16* resid_out, const bf16* a, const bf16* resid_b,
                         const bf16* w, const bf16* bias, int N, int C) {
    int row = blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32, groups = C / 8;
    if (row >= N) return;
    float x[K][8];
    float s = 0.0f;
    #pragma unroll
    for (int k = 0; k < K; k++) {
        int gi = lane + 32 * k;
        if (gi >= groups) continue;
        Bf16x8 pa = load128(a + (size_t)row * C + 8 * gi);
        for (int e = 0; e < 8; e++) x[k][e] = bf16x8_get(pa, e);
        if (resid_b) {  // the residual sum, rounded to bf16 as it is stored
            Bf16x8 pb = load128(resid_b + (size_t)row * C + 8 * gi);
            for (int e = 0; e < 8; e++) x[k][e] += bf16x8_get(pb, e);
            Bf16x8 pr = bf16x8_from_floats(x[k]);
            store128(resid_out + (size_t)row * C + 8 * gi, pr);
            for (int e = 0; e < 8; e++) x[k][e] = bf16x8_get(pr, e);
        }
        for (int e = 0; e < 8; e++) s += x[k][e];
    }
    float m = warp_reduce_sum(s) / C;
    float v = 0.0f;
    #pragma unroll
    for (int k = 0; k < K; k++)
        if (lane + 32 * k < groups)
            for (int e = 0; e < 8; e++) { float d = x[k][e] - m; v += d * d; }
    float rs = rsqrtf(warp_reduce_sum(v) / C + LN_EPS);
    #pragma unroll
    for (int k = 0; k < K; k++) {
        int gi = lane + 32 * k;
        if (gi >= groups) continue;
        Bf16x8 pw = load128(w + 8 * gi), pbias = load128(bias + 8 * gi);
        float o[8];
        for (int e = 0; e < 8; e++) o[e] = (x[k][e] - m) * rs * bf16x8_get(pw, e) + bf16x8_get(pbias, e);
        store128(out + (size_t)row * C + 8 * gi, bf16x8_from_floats(o));
    }
    if (lane == 0) { mean[row] = m; rstd[row] = rs; }
}

// One kernel for dx and the per-block partial sums of dw, db. LN_BWD_BLOCKS blocks of 8 warps; warp
// `w` of block `b` takes rows b·8 + w, then + LN_BWD_BLOCKS·8, ... Each lane holds K groups of 8
// adjacent channels (channels 8·(lane + 32k) ..), read as 16-byte vectors, so one row is read once
// into registers and used for both row sums, the dx update and the column sums it keeps for its
// channels across its rows. At the end the 8 warps add their column sums into shared memory one
// after the other (a fixed order) and the block writes its partial (2, C) row: no atomics.
// Per row: g = dout·w; dx = rstd·(g − mean(g) − xhat·mean(g·xhat)); dinp += dx; dw += dout·xhat, db += dout.
template <int K>
__global__ void __launch_bounds__(32 * LN_ROWS_PER_BLOCK)
layernorm_backward_kernel(bf16* dinp, float* partial, const bf16* dout, const bf16* inp, const float* mean,
                          const float* rstd, const bf16* w, int N, int C) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, groups = C / 8;
    // registers per group: w, dout, x as raw bf16 vectors, dw and db as fp32 (28 in all)
    Bf16x8 wr[K];
    float dw[K][8], db[K][8];
    for (int k = 0; k < K; k++) {
        int gi = lane + 32 * k;
        wr[k] = gi < groups ? load128(w + 8 * gi) : zero128();
        for (int e = 0; e < 8; e++) dw[k][e] = db[k][e] = 0.0f;
    }
    for (int row = blockIdx.x * LN_ROWS_PER_BLOCK + warp; row < N; row += LN_BWD_BLOCKS * LN_ROWS_PER_BLOCK) {
        const bf16* drow = dout + (size_t)row * C;
        const bf16* xrow = inp + (size_t)row * C;
        float m = mean[row], rs = rstd[row];
        Bf16x8 dr[K], xr[K];
        for (int k = 0; k < K; k++) {
            int gi = lane + 32 * k;
            dr[k] = xr[k] = zero128();
            if (gi < groups) { dr[k] = load128(drow + 8 * gi); xr[k] = load128(xrow + 8 * gi); }
        }
        float sg = 0.0f, sgx = 0.0f;
        for (int k = 0; k < K; k++) {
            if (lane + 32 * k >= groups) continue;
            for (int e = 0; e < 8; e++) {
                float dv = bf16x8_get(dr[k], e), xhat = (bf16x8_get(xr[k], e) - m) * rs;
                float g = dv * bf16x8_get(wr[k], e);
                sg += g;
                sgx += g * xhat;
                dw[k][e] += dv * xhat;
                db[k][e] += dv;
            }
        }
        float mg = warp_reduce_sum(sg) / C, mgx = warp_reduce_sum(sgx) / C;
        bf16* dxrow = dinp + (size_t)row * C;
        for (int k = 0; k < K; k++) {
            int gi = lane + 32 * k;
            if (gi >= groups) continue;
            Bf16x8 dx = load128(dxrow + 8 * gi);
            float o[8];
            for (int e = 0; e < 8; e++) {
                float xhat = (bf16x8_get(xr[k], e) - m) * rs, g = bf16x8_get(dr[k], e) * bf16x8_get(wr[k], e);
                o[e] = bf16x8_get(dx, e) + rs * (g - mg - xhat * mgx);
            }
            store128(dxrow + 8 * gi, bf16x8_from_floats(o));
        }
    }
    extern __shared__ float sums[];  // (2, C): dw then db
    for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) sums[c] = 0.0f;
    for (int turn = 0; turn < LN_ROWS_PER_BLOCK; turn++) {
        __syncthreads();
        if (warp != turn) continue;
        for (int k = 0; k < K; k++) {
            int gi = lane + 32 * k;
            if (gi >= groups) continue;
            for (int e = 0; e < 8; e++) { sums[8 * gi + e] += dw[k][e]; sums[C + 8 * gi + e] += db[k][e]; }
        }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) partial[(size_t)blockIdx.x * 2 * C + c] = sums[c];
}

// dweight[c] += Σ_block partial[block, 0, c], dbias[c] += Σ_block partial[block, 1, c], blocks in order.
__global__ void layernorm_backward_finish_kernel(float* dweight, float* dbias, const float* partial, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float dw = 0.0f, db = 0.0f;
    for (int k = 0; k < LN_BWD_BLOCKS; k++) {
        dw += partial[((size_t)k * 2 + 0) * C + c];
        db += partial[((size_t)k * 2 + 1) * C + c];
    }
    dweight[c] += dw;
    dbias[c] += db;
}

// --- launchers -------------------------------------------------------------------------------

// C % 8 == 0 and C <= LN_MAX_C (the row lives in registers), for every kernel here.
static inline void layernorm_check_width(int C) {
    if (C % 8 != 0 || C > LN_MAX_C)
        check_fail("layernorm: C must be a multiple of 8 and at most LN_MAX_C (2048)",
                   "raise ROW_MAX_C in llmc/cuda_common.cuh and add the matching cases to ROW_DISPATCH");
}

// resid_out (N, C) = a + b (bf16, may alias a or b), then out, mean, rstd = LayerNorm(resid_out).
static inline void residual_layernorm_forward(bf16* resid_out, bf16* out, float* mean, float* rstd,
                                              const bf16* a, const bf16* b, const bf16* weight, const bf16* bias,
                                              int N, int C, const GpuContext* ctx) {
    layernorm_check_width(C);
    ROW_DISPATCH(layernorm_forward_kernel, C, ceil_div(N, LN_ROWS_PER_BLOCK), 32 * LN_ROWS_PER_BLOCK, 0, ctx->stream,
                out, mean, rstd, resid_out, a, b, weight, bias, N, C);
    cuda_check_launch();
    profile_mark(ctx->prof, "layernorm forward", ctx->stream);
}

// out (N, C) bf16, mean, rstd (N,) fp32 from inp (N, C) bf16, weight, bias (C,) bf16: the same kernel
// with no residual (resid_out and b NULL).
static inline void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp,
                                     const bf16* weight, const bf16* bias, int N, int C, const GpuContext* ctx) {
    residual_layernorm_forward(NULL, out, mean, rstd, inp, NULL, weight, bias, N, C, ctx);
}

// dinp (N, C) bf16 +=, dweight, dbias (C,) fp32 += from dout (N, C) bf16 and the forward's inp, mean,
// rstd; scratch (LN_BWD_BLOCKS * 2 * C) fp32.
static inline void layernorm_backward(bf16* dinp, float* dweight, float* dbias, float* scratch,
                                      const bf16* dout, const bf16* inp, const float* mean, const float* rstd,
                                      const bf16* weight, int N, int C, const GpuContext* ctx) {
    cudaStream_t stream = ctx->stream;
    layernorm_check_width(C);
    ROW_DISPATCH(layernorm_backward_kernel, C, LN_BWD_BLOCKS, 32 * LN_ROWS_PER_BLOCK, 2 * (size_t)C * sizeof(float), stream,
                dinp, scratch, dout, inp, mean, rstd, weight, N, C);
    cuda_check_launch();
    layernorm_backward_finish_kernel<<<ceil_div(C, 256), 256, 0, stream>>>(dweight, dbias, scratch, C);
    cuda_check_launch();
    profile_mark(ctx->prof, "layernorm backward", stream);
}
