// layernorm.cuh: LayerNorm over the C channels of each row, out = (x - mean) · rstd · w + b (eps 1e-5,
// as GPT-2), forward and backward, with the statistics in fp32.
//
// Fused: residual_layernorm_forward adds the two branches of the residual stream (r = a + b, rounded
// to bf16 and stored: the stream itself), and normalizes the rounded r in the same kernel, so the
// stream is read once instead of three times. The saved mean and rstd (N,) fp32 are what the
// backward reads; the normalized xhat is never stored (recomputed from x, mean, rstd).
// Backward: dx is one warp per row (two row sums, then elementwise) and is ACCUMULATED into the
// residual-stream gradient (bf16); dw, db (C,) fp32 are column sums over N rows, done deterministically
// without atomics: LN_BWD_CHUNKS row chunks write partial sums to scratch, one kernel adds the chunks
// in order. Sizes: C % 8 == 0 is not required; any C ≥ 1.
#pragma once
#include "cuda_common.cuh"

#define LN_EPS 1e-5f
#define LN_BWD_CHUNKS 32   // row chunks of the dw/db column sums: scratch is (LN_BWD_CHUNKS, 2, C) fp32
#define LN_ROWS_PER_BLOCK 8  // warps per block in the row kernels

// --- kernels ---------------------------------------------------------------------------------

// One warp per row. With resid_b != NULL the row is first r = bf16(a + b), stored to resid_out.
// Statistics: mean in one pass, then the variance as Σ (x - mean)² in a second (no cancellation).
__global__ void layernorm_forward_kernel(bf16* out, float* mean, float* rstd, bf16* resid_out,
                                         const bf16* a, const bf16* resid_b, const bf16* w, const bf16* bias,
                                         int N, int C) {
    int row = blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const bf16* x = a + (size_t)row * C;
    if (resid_b) {
        const bf16* y = resid_b + (size_t)row * C;
        bf16* r = resid_out + (size_t)row * C;
        for (int c = lane; c < C; c += 32) r[c] = __float2bfloat16(__bfloat162float(x[c]) + __bfloat162float(y[c]));
        x = r;  // each lane reads back only what it wrote itself: program order suffices
    }
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += __bfloat162float(x[c]);
    float m = warp_reduce_sum(s) / C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) { float d = __bfloat162float(x[c]) - m; v += d * d; }
    float rs = rsqrtf(warp_reduce_sum(v) / C + LN_EPS);
    bf16* o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32)
        o[c] = __float2bfloat16((__bfloat162float(x[c]) - m) * rs * __bfloat162float(w[c]) + __bfloat162float(bias[c]));
    if (lane == 0) { mean[row] = m; rstd[row] = rs; }
}

// One warp per row: g = dout·w; dx = rstd·(g − mean(g) − xhat·mean(g·xhat)); dinp += dx.
__global__ void layernorm_backward_dx_kernel(bf16* dinp, const bf16* dout, const bf16* inp, const float* mean,
                                             const float* rstd, const bf16* w, int N, int C) {
    int row = blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const bf16* d = dout + (size_t)row * C;
    const bf16* x = inp + (size_t)row * C;
    float m = mean[row], rs = rstd[row];
    float sg = 0.0f, sgx = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float g = __bfloat162float(d[c]) * __bfloat162float(w[c]);
        sg += g;
        sgx += g * (__bfloat162float(x[c]) - m) * rs;
    }
    float mg = warp_reduce_sum(sg) / C, mgx = warp_reduce_sum(sgx) / C;
    bf16* dx = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += 32) {
        float g = __bfloat162float(d[c]) * __bfloat162float(w[c]);
        float xhat = (__bfloat162float(x[c]) - m) * rs;
        dx[c] = __float2bfloat16(__bfloat162float(dx[c]) + rs * (g - mg - xhat * mgx));
    }
}

// Grid (ceil(C/32), LN_BWD_CHUNKS), block (32, 8): partial[chunk] of Σ dout·xhat and Σ dout over the
// chunk's rows, for 32 columns; the 8 row lanes are combined in a fixed order.
__global__ void layernorm_backward_dwdb_kernel(float* partial, const bf16* dout, const bf16* inp, const float* mean,
                                               const float* rstd, int N, int C) {
    int c = blockIdx.x * 32 + threadIdx.x, chunk = blockIdx.y;
    int rows = (N + LN_BWD_CHUNKS - 1) / LN_BWD_CHUNKS;
    int r0 = chunk * rows, r1 = min(N, r0 + rows);
    float dw = 0.0f, db = 0.0f;
    if (c < C) {
        for (int r = r0 + threadIdx.y; r < r1; r += 8) {
            float d = __bfloat162float(dout[(size_t)r * C + c]);
            dw += d * (__bfloat162float(inp[(size_t)r * C + c]) - mean[r]) * rstd[r];
            db += d;
        }
    }
    __shared__ float sw[8][32], sb[8][32];
    sw[threadIdx.y][threadIdx.x] = dw;
    sb[threadIdx.y][threadIdx.x] = db;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        for (int k = 1; k < 8; k++) { dw += sw[k][threadIdx.x]; db += sb[k][threadIdx.x]; }
        partial[((size_t)chunk * 2 + 0) * C + c] = dw;
        partial[((size_t)chunk * 2 + 1) * C + c] = db;
    }
}

// dweight[c] += Σ_chunk partial[chunk, 0, c], dbias[c] += Σ_chunk partial[chunk, 1, c], chunks in order.
__global__ void layernorm_backward_finish_kernel(float* dweight, float* dbias, const float* partial, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float dw = 0.0f, db = 0.0f;
    for (int k = 0; k < LN_BWD_CHUNKS; k++) {
        dw += partial[((size_t)k * 2 + 0) * C + c];
        db += partial[((size_t)k * 2 + 1) * C + c];
    }
    dweight[c] += dw;
    dbias[c] += db;
}

// --- launchers -------------------------------------------------------------------------------

// out (N, C) bf16, mean, rstd (N,) fp32 from inp (N, C) bf16, weight, bias (C,) bf16.
static inline void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp,
                                     const bf16* weight, const bf16* bias, int N, int C, cudaStream_t stream) {
    layernorm_forward_kernel<<<ceil_div(N, LN_ROWS_PER_BLOCK), 32 * LN_ROWS_PER_BLOCK, 0, stream>>>(
        out, mean, rstd, NULL, inp, NULL, weight, bias, N, C);
    cuda_check_launch();
}

// resid_out (N, C) = a + b (bf16, may alias a or b), then out, mean, rstd = LayerNorm(resid_out).
static inline void residual_layernorm_forward(bf16* resid_out, bf16* out, float* mean, float* rstd,
                                              const bf16* a, const bf16* b, const bf16* weight, const bf16* bias,
                                              int N, int C, cudaStream_t stream) {
    layernorm_forward_kernel<<<ceil_div(N, LN_ROWS_PER_BLOCK), 32 * LN_ROWS_PER_BLOCK, 0, stream>>>(
        out, mean, rstd, resid_out, a, b, weight, bias, N, C);
    cuda_check_launch();
}

// dinp (N, C) bf16 +=, dweight, dbias (C,) fp32 += from dout (N, C) bf16 and the forward's inp, mean,
// rstd; scratch (LN_BWD_CHUNKS * 2 * C) fp32.
static inline void layernorm_backward(bf16* dinp, float* dweight, float* dbias, float* scratch,
                                      const bf16* dout, const bf16* inp, const float* mean, const float* rstd,
                                      const bf16* weight, int N, int C, cudaStream_t stream) {
    layernorm_backward_dx_kernel<<<ceil_div(N, LN_ROWS_PER_BLOCK), 32 * LN_ROWS_PER_BLOCK, 0, stream>>>(
        dinp, dout, inp, mean, rstd, weight, N, C);
    cuda_check_launch();
    layernorm_backward_dwdb_kernel<<<dim3(ceil_div(C, 32), LN_BWD_CHUNKS), dim3(32, 8), 0, stream>>>(
        scratch, dout, inp, mean, rstd, N, C);
    cuda_check_launch();
    layernorm_backward_finish_kernel<<<ceil_div(C, 256), 256, 0, stream>>>(dweight, dbias, scratch, C);
    cuda_check_launch();
}
