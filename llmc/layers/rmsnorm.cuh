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
// dw (C,) fp32 kept per warp in shared memory; its blocks (one wave, at most RMS_BWD_BLOCKS) write
// partial sums to scratch and one kernel adds them in block order (deterministic, no atomics).
// Napkin math at N = 65536, C = 2048 (bf16): forward reads and writes 2 · 268 MB (residual form 4 ·),
// backward reads dout, x, dinp and writes dinp: 1.07 GB, ~0.25 ms at ~4.5 TB/s; ~10 FLOPs an element,
// far under the roofline's ridge: memory-bound.
// Sizes: C % 8 == 0 and C <= RMS_MAX_C (checked by the launchers).
#pragma once
#include "../core/cuda_common.cuh"
#include "column_sums.cuh"

#define RMS_BWD_BLOCKS 1024   // at most this many blocks in the backward, each writing a partial (C,) fp32 row
                              // of dw to scratch
#define RMS_BWD_WARPS 4       // warps per block of the backward
#define RMS_MAX_C ROW_MAX_C   // every kernel keeps a row in registers (llmc/core/cuda_common.cuh)
#define RMS_ROWS_PER_BLOCK 8  // warps per block in the row kernels

// --- kernels ---------------------------------------------------------------------------------

// One warp per row, the row in registers (lane l holds K groups of 8 channels, 8·(l + 32k) ..., read
// as 16-byte vectors, all at once: row_load_residual). With resid_b != NULL the row is first
// r = bf16(a + b), stored to resid_out and normalized as rounded. The sum of squares runs in fp32: ≤ 8K
// terms per lane, then the warp's tree.
template <int K>
__global__ void __launch_bounds__(32 * RMS_ROWS_PER_BLOCK)
rmsnorm_forward_kernel(bf16* out, float* rstd, bf16* resid_out, const bf16* a, const bf16* resid_b, const bf16* w,
                       int N, int C, float eps) {
    int row = blockIdx.x * RMS_ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32, groups = C / 8;
    if (row >= N) return;  // the whole warp: the shuffles below see all 32 lanes
    float x[K][8];
    row_load_residual<K>(x, resid_out, a, resid_b, (size_t)row, C, lane);
    float ss = 0.0f;
    #pragma unroll
    for (int k = 0; k < K; k++)
        if (lane + 32 * k < groups)
            for (int e = 0; e < 8; e++) ss += x[k][e] * x[k][e];
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

// One kernel for dx and the per-block partial sums of dw, as layernorm.cuh's backward: blocks of
// RMS_BWD_WARPS warps, one wave of them (at most RMS_BWD_BLOCKS); warp `w` of block `b` takes rows
// b·RMS_BWD_WARPS + w, then + gridDim·RMS_BWD_WARPS, ... (a fixed assignment, so the order of every sum
// is fixed for a grid). Each lane holds K groups of 8 adjacent channels (channels 8·(lane + 32k) ..),
// read as 16-byte vectors: a row's dout, x and dinp are loaded together, once, into registers. The
// column sums of dw go to the warp's own slice of shared memory (element-major: lanes hit distinct
// banks); at the end the block adds its warps' slices in order and writes its partial (C,) row.
// Per row, with xhat = x · rstd and g = dout · w:
//   dx = rstd · (g − xhat · mean(g · xhat));  dinp += dx;  dw += dout · xhat.
template <int K>
__global__ void __launch_bounds__(32 * RMS_BWD_WARPS, K <= 3 ? 6 : K <= 7 ? 3 : 2)
rmsnorm_backward_kernel(bf16* dinp, float* partial, const bf16* dout, const bf16* inp, const float* rstd,
                        const bf16* w, int N, int C) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, groups = C / 8;
    // shared: (RMS_BWD_WARPS, 8, groups): warp, element e of a group, group: channel 8·g + e
    extern __shared__ float sums[];
    float* mine = sums + (size_t)warp * C;
    for (int i = lane; i < C; i += 32) mine[i] = 0.0f;
    __syncwarp();
    Bf16x8 wr[K];
    row_load_weight<K>(wr, w, groups, lane);
    for (int row = blockIdx.x * RMS_BWD_WARPS + warp; row < N; row += gridDim.x * RMS_BWD_WARPS) {
        bf16* dxrow = dinp + (size_t)row * C;
        float rs = rstd[row];
        Bf16x8 dr[K], xr[K], dx[K];
        row_load_backward<K>(dr, xr, dx, dout, inp, dxrow, row, C, lane);
        float sgx = 0.0f;
        for (int k = 0; k < K; k++) {
            int gi = lane + 32 * k;
            if (gi >= groups) continue;
            for (int e = 0; e < 8; e++) {
                float dv = bf16x8_get(dr[k], e), xhat = bf16x8_get(xr[k], e) * rs;
                sgx += dv * bf16x8_get(wr[k], e) * xhat;
                mine[e * groups + gi] += dv * xhat;
            }
        }
        float mgx = warp_reduce_sum(sgx) / C;
        for (int k = 0; k < K; k++) {
            int gi = lane + 32 * k;
            if (gi >= groups) continue;
            float o[8];
            for (int e = 0; e < 8; e++) {
                float xhat = bf16x8_get(xr[k], e) * rs, g = bf16x8_get(dr[k], e) * bf16x8_get(wr[k], e);
                o[e] = bf16x8_get(dx[k], e) + rs * (g - xhat * mgx);
            }
            store128(dxrow + 8 * gi, bf16x8_from_floats(o));
        }
    }
    __syncthreads();
    // the block's partial row: (C,) in channel order, the warps' slices added in order
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        int at = (c % 8) * groups + c / 8;
        float acc = 0.0f;
        for (int v = 0; v < RMS_BWD_WARPS; v++) acc += sums[(size_t)v * C + at];
        partial[(size_t)blockIdx.x * C + c] = acc;
    }
}

// --- launchers -------------------------------------------------------------------------------

// C % 8 == 0 and C <= RMS_MAX_C (the row lives in registers), for every kernel here.
static inline void rmsnorm_check_width(int C) {
    if (C <= 0 || C % 8 != 0 || C > RMS_MAX_C)
        check_fail("rmsnorm: C must be a positive multiple of 8 and at most RMS_MAX_C (2048)",
                   "raise ROW_MAX_C in llmc/core/cuda_common.cuh and add the matching cases to ROW_SWITCH");
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

// The backward kernel for rows of up to 256·K channels, one wave of blocks (at most RMS_BWD_BLOCKS);
// *grid: how many, i.e. the partial rows it writes.
template <int K>
static void rms_backward_launch(int* grid, bf16* dinp, float* partial, const bf16* dout, const bf16* inp,
                                const float* rstd, const bf16* w, int N, int C, cudaStream_t stream) {
    size_t smem = (size_t)RMS_BWD_WARPS * C * sizeof(float), most = (size_t)RMS_BWD_WARPS * 256 * K * sizeof(float);
    *grid = one_wave_grid(rmsnorm_backward_kernel<K>, 32 * RMS_BWD_WARPS, smem, most, RMS_BWD_BLOCKS);
    rmsnorm_backward_kernel<K><<<*grid, 32 * RMS_BWD_WARPS, smem, stream>>>(dinp, partial, dout, inp, rstd, w, N, C);
    cuda_check_launch();
}

// dinp (N, C) bf16 +=, dweight (C,) fp32 += from dout (N, C) bf16 and the forward's inp (N, C) bf16,
// rstd (N,) fp32, weight (C,) bf16; scratch (RMS_BWD_BLOCKS * C) fp32. eps is not needed: it is in rstd.
static inline void rmsnorm_backward(bf16* dinp, float* dweight, float* scratch, const bf16* dout, const bf16* inp,
                                    const float* rstd, const bf16* weight, int N, int C, const GpuContext* ctx) {
    cudaStream_t stream = ctx->stream;
    rmsnorm_check_width(C);
    int blocks = 0;
    ROW_DISPATCH_FN(rms_backward_launch, C, &blocks, dinp, scratch, dout, inp, rstd, weight, N, C, stream);
    ColumnSumsOut to = {{dweight, NULL, NULL}};
    column_sums_finish(to, scratch, blocks, C, 1, stream);
    profile_mark(ctx->prof, "rmsnorm backward", stream);
}
