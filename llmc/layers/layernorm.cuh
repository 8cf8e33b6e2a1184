// layernorm.cuh: LayerNorm over the C channels of each row, out = (x - mean) · rstd · w + b (eps 1e-5,
// as GPT-2), forward and backward, with the statistics in fp32.
//
// Fused: residual_layernorm_forward adds the two branches of the residual stream (r = a + b, rounded
// to bf16 and stored: the stream itself), and normalizes the rounded r in the same kernel from
// registers, so the stream is read once. The saved mean and rstd (N,) fp32 are what the
// backward reads; the normalized xhat is never stored (recomputed from x, mean, rstd).
// Backward: one kernel reads each row once (16-byte vectors, held in registers): the two row sums, dx
// ACCUMULATED into the residual-stream gradient (bf16), and column sums for dw, db (C,) fp32 kept per
// warp in shared memory; its blocks (one wave, at most LN_BWD_BLOCKS) write partial sums to scratch
// and one kernel adds them in order (deterministic, no atomics). Napkin math at N = 65536, C = 768:
// 400 MB moved, ~0.1 ms.
// The accumulated residual gradient it writes is also the output gradient of the projection whose
// output joined the stream there (GPT-2: the attention projection after ln2's backward, the previous
// block's MLP projection after ln1's and lnf's), so the backward can also sum the rows it writes into
// that layer's bias gradient (dsum): the bias kernel's read of the same rows is saved.
// Sizes: C % 8 == 0 and C <= LN_MAX_C (checked by the launchers).
#pragma once
#include "../core/cuda_common.cuh"
#include "column_sums.cuh"

#define LN_EPS 1e-5f
#define LN_BWD_BLOCKS 1024   // at most this many blocks in the backward, each writing a partial (3, C) fp32 row of
                             // dw, db and the written rows' sum (or (2, C) without it) to scratch
#define LN_BWD_WARPS 4       // warps per block of the backward
#define LN_MAX_C ROW_MAX_C   // every kernel keeps a row in registers (llmc/core/cuda_common.cuh)
#define LN_ROWS_PER_BLOCK 8  // warps per block in the row kernels

// --- kernels ---------------------------------------------------------------------------------

// One warp per row, the row in registers (lane l holds K groups of 8 channels, 8·(l + 32k) ..., read
// as 16-byte vectors, all at once: row_load_residual). With resid_b != NULL the row is first
// r = bf16(a + b), stored to resid_out and normalized as rounded. Statistics: the mean, then the
// variance as Σ (x - mean)² (no cancellation).
template <int K>
__global__ void __launch_bounds__(32 * LN_ROWS_PER_BLOCK)
layernorm_forward_kernel(bf16* out, float* mean, float* rstd, bf16* resid_out, const bf16* a, const bf16* resid_b,
                         const bf16* w, const bf16* bias, int N, int C) {
    int row = blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32, groups = C / 8;
    if (row >= N) return;
    float x[K][8];
    row_load_residual<K>(x, resid_out, a, resid_b, (size_t)row, C, lane);
    float s = 0.0f;
    #pragma unroll
    for (int k = 0; k < K; k++)
        if (lane + 32 * k < groups)
            for (int e = 0; e < 8; e++) s += x[k][e];
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

// One kernel for dx and the per-block partial sums of dw, db: blocks of LN_BWD_WARPS warps, as many as
// fit on the GPU at once (at most LN_BWD_BLOCKS); warp `w` of block `b` takes rows b·LN_BWD_WARPS + w,
// then + gridDim·LN_BWD_WARPS, ... (a fixed assignment, so the order of sums is fixed for a grid). Each
// lane holds K groups of 8 adjacent channels (channels 8·(lane + 32k) ..), read as 16-byte vectors: a
// row's dout, x and dinp are loaded together, once, into registers. The column sums of dw and db go to
// the warp's own slice of shared memory (channel-major by element: lanes hit distinct banks), not to
// registers: fewer registers, more warps in flight. At the end the block adds its warps' slices in
// order and writes its partial (nsums, C) row: no atomics.
// Per row: g = dout·w; dx = rstd·(g − mean(g) − xhat·mean(g·xhat)); dinp += dx; dw += dout·xhat, db += dout,
// and with nsums = 3 the third sum += the new dinp as rounded to bf16 and stored.
template <int K>
__global__ void __launch_bounds__(32 * LN_BWD_WARPS, K <= 3 ? 6 : K <= 7 ? 3 : 2)
layernorm_backward_kernel(bf16* dinp, float* partial, const bf16* dout, const bf16* inp, const float* mean,
                          const float* rstd, const bf16* w, int N, int C, int nsums) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, groups = C / 8;
    // shared: (LN_BWD_WARPS, nsums, 8, groups): warp, which sum, element e of a group, group: channel 8·g + e
    extern __shared__ float sums[];
    float* mine = sums + (size_t)warp * nsums * C;
    for (int i = lane; i < nsums * C; i += 32) mine[i] = 0.0f;
    __syncwarp();
    Bf16x8 wr[K];
    row_load_weight<K>(wr, w, groups, lane);
    for (int row = blockIdx.x * LN_BWD_WARPS + warp; row < N; row += gridDim.x * LN_BWD_WARPS) {
        bf16* dxrow = dinp + (size_t)row * C;
        float m = mean[row], rs = rstd[row];
        Bf16x8 dr[K], xr[K], dx[K];
        row_load_backward<K>(dr, xr, dx, dout, inp, dxrow, row, C, lane);
        float sg = 0.0f, sgx = 0.0f;
        for (int k = 0; k < K; k++) {
            int gi = lane + 32 * k;
            if (gi >= groups) continue;
            for (int e = 0; e < 8; e++) {
                float dv = bf16x8_get(dr[k], e), xhat = (bf16x8_get(xr[k], e) - m) * rs;
                float g = dv * bf16x8_get(wr[k], e);
                sg += g;
                sgx += g * xhat;
                mine[e * groups + gi] += dv * xhat;
                mine[(8 + e) * groups + gi] += dv;
            }
        }
        float mg = warp_reduce_sum(sg) / C, mgx = warp_reduce_sum(sgx) / C;
        for (int k = 0; k < K; k++) {
            int gi = lane + 32 * k;
            if (gi >= groups) continue;
            float o[8];
            for (int e = 0; e < 8; e++) {
                float xhat = (bf16x8_get(xr[k], e) - m) * rs, g = bf16x8_get(dr[k], e) * bf16x8_get(wr[k], e);
                o[e] = bf16x8_get(dx[k], e) + rs * (g - mg - xhat * mgx);
            }
            Bf16x8 out = bf16x8_from_floats(o);
            store128(dxrow + 8 * gi, out);
            if (nsums == 3)
                for (int e = 0; e < 8; e++) mine[(16 + e) * groups + gi] += bf16x8_get(out, e);
        }
    }
    __syncthreads();
    // the block's partial row: (nsums, C) in channel order, the warps' slices added in order
    for (int i = threadIdx.x; i < nsums * C; i += blockDim.x) {
        int which = i / C, c = i % C, at = (which * 8 + c % 8) * groups + c / 8;
        float acc = 0.0f;
        for (int v = 0; v < LN_BWD_WARPS; v++) acc += sums[(size_t)v * nsums * C + at];
        partial[(size_t)blockIdx.x * nsums * C + i] = acc;
    }
}

// --- launchers -------------------------------------------------------------------------------

// C % 8 == 0 and C <= LN_MAX_C (the row lives in registers), for every kernel here.
static inline void layernorm_check_width(int C) {
    if (C % 8 != 0 || C > LN_MAX_C)
        check_fail("layernorm: C must be a multiple of 8 and at most LN_MAX_C (2048)",
                   "raise ROW_MAX_C in llmc/core/cuda_common.cuh and add the matching cases to ROW_SWITCH");
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

// The backward kernel for rows of up to 256·K channels, one wave of blocks (at most LN_BWD_BLOCKS);
// *grid: how many, i.e. the partial rows it writes.
template <int K>
static void ln_backward_launch(int* grid, bf16* dinp, float* partial, const bf16* dout, const bf16* inp,
                               const float* mean, const float* rstd, const bf16* w, int N, int C, int nsums,
                               cudaStream_t stream) {
    size_t smem = (size_t)LN_BWD_WARPS * nsums * C * sizeof(float), most = (size_t)LN_BWD_WARPS * 3 * 256 * K * sizeof(float);
    *grid = one_wave_grid(layernorm_backward_kernel<K>, 32 * LN_BWD_WARPS, smem, most, LN_BWD_BLOCKS);
    layernorm_backward_kernel<K><<<*grid, 32 * LN_BWD_WARPS, smem, stream>>>(dinp, partial, dout, inp, mean, rstd, w,
                                                                            N, C, nsums);
    cuda_check_launch();
}

// dinp (N, C) bf16 +=, dweight, dbias (C,) fp32 += from dout (N, C) bf16 and the forward's inp, mean,
// rstd; and, unless dsum is NULL, dsum (C,) fp32 += Σ_n dinp[n, :] as written (the bias gradient of the
// layer whose output gradient dinp now is). scratch (LN_BWD_BLOCKS * 3 * C) fp32.
static inline void layernorm_backward(bf16* dinp, float* dweight, float* dbias, float* dsum, float* scratch,
                                      const bf16* dout, const bf16* inp, const float* mean, const float* rstd,
                                      const bf16* weight, int N, int C, const GpuContext* ctx) {
    cudaStream_t stream = ctx->stream;
    layernorm_check_width(C);
    int blocks = 0, nsums = dsum ? 3 : 2;
    ROW_DISPATCH_FN(ln_backward_launch, C, &blocks, dinp, scratch, dout, inp, mean, rstd, weight, N, C, nsums, stream);
    ColumnSumsOut to = {{dweight, dbias, dsum}};
    column_sums_finish(to, scratch, blocks, C, nsums, stream);
    profile_mark(ctx->prof, "layernorm backward", stream);
}
