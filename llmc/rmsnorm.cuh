// rmsnorm.cuh: RMSNorm over the C channels of each row, out = x · rstd · w with
// rstd = 1 / sqrt(mean(x²) + eps) (Hugging Face's LlamaRMSNorm: no mean subtracted, no bias, eps inside
// the root), forward and backward, statistics in fp32. The API mirrors layernorm.cuh.
//
// Fused: residual_rmsnorm_forward adds the two branches of the residual stream (r = a + b, rounded to
// bf16 and stored: the stream itself) and normalizes the rounded r in the same kernel from registers,
// so the stream is read once. Only rstd (N,) fp32 is saved; xhat = x · rstd is recomputed in the
// backward. (Hugging Face rounds xhat to bf16 before the weight multiply; here x · rstd · w is one
// fp32 product rounded once, which is closer to the exact value.)
// Backward: one kernel reads each row of dout and x once (16-byte vectors, held in registers): the row
// sum mean(g · xhat), dx ACCUMULATED into the residual-stream gradient (bf16), and column sums for
// dw (C,) fp32 kept per lane; RMS_BWD_BLOCKS blocks write partial sums to scratch and one kernel adds
// them in block order (deterministic, no atomics).
// Napkin math at N = 65536, C = 2048 (bf16): forward reads and writes 2 · 268 MB (residual form 4 ·),
// backward reads dout, x, dinp and writes dinp: 1.07 GB, ~0.25 ms at ~4.5 TB/s; ~10 FLOPs an element,
// far under the roofline's ridge: memory-bound.
// Sizes: C % 8 == 0 and C <= RMS_MAX_C (checked by the launchers).
#pragma once
#include "cuda_common.cuh"

#define RMS_BWD_BLOCKS 256    // blocks of the backward, each writing a partial (C,) fp32 row of dw to scratch
#define RMS_MAX_C ROW_MAX_C   // every kernel keeps a row in registers (llmc/cuda_common.cuh)
#define RMS_ROWS_PER_BLOCK 8  // warps per block in the row kernels

// --- kernels ---------------------------------------------------------------------------------

// One warp per row, the row in registers (lane l holds K groups of 8 channels, 8·(l + 32k) ..., read
// as 16-byte vectors). With resid_b != NULL the row is first r = bf16(a + b), stored to resid_out and
// normalized as rounded. The sum of squares runs in fp32: ≤ 8K terms per lane, then the warp's tree.
template <int K>
__global__ void __launch_bounds__(32 * RMS_ROWS_PER_BLOCK)
rmsnorm_forward_kernel(bf16* out, float* rstd, bf16* resid_out, const bf16* a, const bf16* resid_b, const bf16* w,
                       int N, int C, float eps) {
    int row = blockIdx.x * RMS_ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32, groups = C / 8;
    if (row >= N) return;  // the whole warp: the shuffles below see all 32 lanes
    float x[K][8];
    float ss = 0.0f;
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
        for (int e = 0; e < 8; e++) ss += x[k][e] * x[k][e];
    }
    float rs = rsqrtf(warp_reduce_sum(ss) / C + eps);
    #pragma unroll
    for (int k = 0; k < K; k++) {
        int gi = lane + 32 * k;
        if (gi >= groups) continue;
        Bf16x8 pw = load128(w + 8 * gi);
        float o[8];
        for (int e = 0; e < 8; e++) o[e] = x[k][e] * rs * bf16x8_get(pw, e);
        store128(out + (size_t)row * C + 8 * gi, bf16x8_from_floats(o));
    }
    if (lane == 0) rstd[row] = rs;
}

// One kernel for dx and the per-block partial sums of dw. RMS_BWD_BLOCKS blocks of 8 warps; warp `w`
// of block `b` takes rows b·8 + w, then + RMS_BWD_BLOCKS·8, ... (a fixed assignment, so the order of
// every sum is fixed). Each lane holds K groups of 8 adjacent channels (channels 8·(lane + 32k) ..),
// read as 16-byte vectors, so one row is read once into registers and used for the row sum, the dx
// update and the column sums it keeps for its channels across its rows. At the end the 8 warps add
// their column sums into shared memory one after the other (a fixed order) and the block writes its
// partial (C,) row: no atomics.
// Per row, with xhat = x · rstd and g = dout · w:
//   dx = rstd · (g − xhat · mean(g · xhat));  dinp += dx;  dw += dout · xhat.
template <int K>
__global__ void __launch_bounds__(32 * RMS_ROWS_PER_BLOCK)
rmsnorm_backward_kernel(bf16* dinp, float* partial, const bf16* dout, const bf16* inp, const float* rstd,
                        const bf16* w, int N, int C) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, groups = C / 8;
    // registers per group: w, dout, x as raw bf16 vectors, dw as fp32 (20 in all)
    Bf16x8 wr[K];
    float dw[K][8];
    for (int k = 0; k < K; k++) {
        int gi = lane + 32 * k;
        wr[k] = gi < groups ? load128(w + 8 * gi) : zero128();
        for (int e = 0; e < 8; e++) dw[k][e] = 0.0f;
    }
    for (int row = blockIdx.x * RMS_ROWS_PER_BLOCK + warp; row < N; row += RMS_BWD_BLOCKS * RMS_ROWS_PER_BLOCK) {
        const bf16* drow = dout + (size_t)row * C;
        const bf16* xrow = inp + (size_t)row * C;
        float rs = rstd[row];
        Bf16x8 dr[K], xr[K];
        for (int k = 0; k < K; k++) {
            int gi = lane + 32 * k;
            dr[k] = xr[k] = zero128();
            if (gi < groups) { dr[k] = load128(drow + 8 * gi); xr[k] = load128(xrow + 8 * gi); }
        }
        float sgx = 0.0f;
        for (int k = 0; k < K; k++) {
            if (lane + 32 * k >= groups) continue;
            for (int e = 0; e < 8; e++) {
                float dv = bf16x8_get(dr[k], e), xhat = bf16x8_get(xr[k], e) * rs;
                sgx += dv * bf16x8_get(wr[k], e) * xhat;
                dw[k][e] += dv * xhat;
            }
        }
        float mgx = warp_reduce_sum(sgx) / C;
        bf16* dxrow = dinp + (size_t)row * C;
        for (int k = 0; k < K; k++) {
            int gi = lane + 32 * k;
            if (gi >= groups) continue;
            Bf16x8 dx = load128(dxrow + 8 * gi);
            float o[8];
            for (int e = 0; e < 8; e++) {
                float xhat = bf16x8_get(xr[k], e) * rs, g = bf16x8_get(dr[k], e) * bf16x8_get(wr[k], e);
                o[e] = bf16x8_get(dx, e) + rs * (g - xhat * mgx);
            }
            store128(dxrow + 8 * gi, bf16x8_from_floats(o));
        }
    }
    extern __shared__ float sums[];  // (C,) this block's dw
    for (int c = threadIdx.x; c < C; c += blockDim.x) sums[c] = 0.0f;
    for (int turn = 0; turn < RMS_ROWS_PER_BLOCK; turn++) {
        __syncthreads();
        if (warp != turn) continue;
        for (int k = 0; k < K; k++) {
            int gi = lane + 32 * k;
            if (gi >= groups) continue;
            for (int e = 0; e < 8; e++) sums[8 * gi + e] += dw[k][e];
        }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x) partial[(size_t)blockIdx.x * C + c] = sums[c];
}

// dweight[c] += Σ_block partial[block, c], blocks in order.
__global__ void rmsnorm_backward_finish_kernel(float* dweight, const float* partial, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float dw = 0.0f;
    for (int k = 0; k < RMS_BWD_BLOCKS; k++) dw += partial[(size_t)k * C + c];
    dweight[c] += dw;
}

// --- launchers -------------------------------------------------------------------------------

// C % 8 == 0 and C <= RMS_MAX_C (the row lives in registers), for every kernel here.
static inline void rmsnorm_check_width(int C) {
    if (C <= 0 || C % 8 != 0 || C > RMS_MAX_C)
        check_fail("rmsnorm: C must be a positive multiple of 8 and at most RMS_MAX_C (2048)",
                   "raise ROW_MAX_C in llmc/cuda_common.cuh and add the matching cases to ROW_DISPATCH");
}

// resid_out (N, C) = a + b (bf16, may alias a or b), then out (N, C) bf16, rstd (N,) fp32 =
// RMSNorm(resid_out) with weight (C,) bf16.
static inline void residual_rmsnorm_forward(bf16* resid_out, bf16* out, float* rstd, const bf16* a, const bf16* b,
                                            const bf16* weight, int N, int C, float eps, const GpuContext* ctx) {
    rmsnorm_check_width(C);
    if (N <= 0) return;
    ROW_DISPATCH(rmsnorm_forward_kernel, C, ceil_div(N, RMS_ROWS_PER_BLOCK), 32 * RMS_ROWS_PER_BLOCK, 0, ctx->stream,
                 out, rstd, resid_out, a, b, weight, N, C, eps);
    cuda_check_launch();
    profile_mark(ctx->prof, "rmsnorm forward", ctx->stream);
}

// out (N, C) bf16, rstd (N,) fp32 from inp (N, C) bf16, weight (C,) bf16: the same kernel with no
// residual (resid_out and b NULL).
static inline void rmsnorm_forward(bf16* out, float* rstd, const bf16* inp, const bf16* weight, int N, int C,
                                   float eps, const GpuContext* ctx) {
    residual_rmsnorm_forward(NULL, out, rstd, inp, NULL, weight, N, C, eps, ctx);
}

// dinp (N, C) bf16 +=, dweight (C,) fp32 += from dout (N, C) bf16 and the forward's inp (N, C) bf16,
// rstd (N,) fp32, weight (C,) bf16; scratch (RMS_BWD_BLOCKS * C) fp32. eps is not needed: it is in rstd.
static inline void rmsnorm_backward(bf16* dinp, float* dweight, float* scratch, const bf16* dout, const bf16* inp,
                                    const float* rstd, const bf16* weight, int N, int C, const GpuContext* ctx) {
    cudaStream_t stream = ctx->stream;
    rmsnorm_check_width(C);
    ROW_DISPATCH(rmsnorm_backward_kernel, C, RMS_BWD_BLOCKS, 32 * RMS_ROWS_PER_BLOCK, (size_t)C * sizeof(float), stream,
                 dinp, scratch, dout, inp, rstd, weight, N, C);
    cuda_check_launch();
    rmsnorm_backward_finish_kernel<<<ceil_div(C, 256), 256, 0, stream>>>(dweight, scratch, C);
    cuda_check_launch();
    profile_mark(ctx->prof, "rmsnorm backward", stream);
}
