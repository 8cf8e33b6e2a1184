// linear.cuh: the linear layer y (N, OC) = x (N, IC) · Wᵀ + b with W (OC, IC), forward and backward,
// as cuBLASLt GEMMs (llmc/matmul.cuh) plus a deterministic bias-gradient kernel.
//
// Fused: the bias add rides in the forward GEMM's epilogue (y is written once); so can a GELU after it
// (linear_forward_gelu: u = x·Wᵀ + b and GELU(u) both stored by one GEMM, the GELU taken of the fp32 u;
// llmc/gelu.cuh's kernel takes it of the stored bf16 u, so the two differ by a bf16 rounding in some
// elements); in the backward of a layer whose input came out of a GELU, the GELU's backward rides in the
// dx GEMM's epilogue. The backward is
//   dx (N, IC) bf16  = dy · W            (assigned; ⊙ GELU'(u) for x = GELU(u))
//   dW (OC, IC) fp32 += dyᵀ · x          (accumulated in the GEMM with beta = 1: gradient accumulation
//                                          over micro-steps costs nothing extra)
//   db (OC,) fp32    += Σ_n dy[n, :]     (LINEAR_BIAS_CHUNKS row chunks → scratch → one ordered sum;
//                                          no atomics, so bitwise repeatable)
// Napkin math: the bias gradient reads dy once (2·N·OC bytes, 16-byte loads), ~1% of the two GEMMs' time at C = 768.
#pragma once
#include "cuda_common.cuh"
#include "matmul.cuh"

#define LINEAR_BIAS_CHUNKS 128  // scratch for the bias gradient: (LINEAR_BIAS_CHUNKS, OC) fp32

// --- kernels ---------------------------------------------------------------------------------

// Grid (ceil(OC/256), LINEAR_BIAS_CHUNKS), block 256 (8 warps): partial[chunk, o] = Σ dy[n, o] over the
// chunk's rows. Lane l of every warp holds the 8 adjacent columns o0 + 8·l (one 16-byte load per row);
// warp w takes rows w, w + 8, ... of the chunk; the 8 warps are added in a fixed order.
__global__ void linear_bias_partial_kernel(float* partial, const bf16* dy, int N, int OC) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, chunk = blockIdx.y;
    int o = blockIdx.x * 256 + lane * 8;
    int rows = (N + LINEAR_BIAS_CHUNKS - 1) / LINEAR_BIAS_CHUNKS;
    int r0 = chunk * rows, r1 = min(N, r0 + rows);
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (o < OC)
        for (int r = r0 + warp; r < r1; r += 8) {
            Bf16x8 d = load128(dy + (size_t)r * OC + o);
            for (int e = 0; e < 8; e++) acc[e] += bf16x8_get(d, e);
        }
    __shared__ float s[8][256];
    for (int e = 0; e < 8; e++) s[warp][lane * 8 + e] = acc[e];
    __syncthreads();
    int c = threadIdx.x, oc = blockIdx.x * 256 + c;
    if (oc < OC) {
        float sum = 0.0f;
        for (int k = 0; k < 8; k++) sum += s[k][c];
        partial[(size_t)chunk * OC + oc] = sum;
    }
}

__global__ void linear_bias_finish_kernel(float* dbias, const float* partial, int OC) {
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= OC) return;
    float acc = 0.0f;
    for (int k = 0; k < LINEAR_BIAS_CHUNKS; k++) acc += partial[(size_t)k * OC + o];
    dbias[o] += acc;
}

// --- launchers -------------------------------------------------------------------------------

// y (N, OC) bf16 = x (N, IC) · weightᵀ + bias; weight (OC, IC), bias (OC,) bf16 or NULL.
static inline void linear_forward(bf16* y, const bf16* x, const bf16* weight, const bf16* bias,
                                  int N, int IC, int OC, const GpuContext* ctx) {
    matmul_bias(ctx, y, CUDA_R_16BF, OC, x, IC, 0, weight, IC, 1, N, OC, IC, 1.0f, 0.0f, bias);
    profile_mark(ctx->prof, "linear forward", ctx->stream);
}

// u (N, OC) bf16 = x (N, IC) · weightᵀ + bias, and y (N, OC) bf16 = GELU(u) (GPT-2's tanh form,
// cuBLASLt's GELU_AUX_BIAS epilogue, applied before u is rounded): the MLP's first layer in one GEMM.
static inline void linear_forward_gelu(bf16* y, bf16* u, const bf16* x, const bf16* weight, const bf16* bias,
                                       int N, int IC, int OC, const GpuContext* ctx) {
    MatmulEpilogue ep = {MATMUL_EPILOGUE_GELU_AUX_BIAS, bias, u, OC};
    matmul_ex(ctx, y, CUDA_R_16BF, OC, x, IC, 0, weight, IC, 1, N, OC, IC, 1.0f, 0.0f, &ep);
    profile_mark(ctx->prof, "linear forward", ctx->stream);
}

// dx (N, IC) bf16 assigned (skipped when NULL); dweight (OC, IC) and dbias (OC,) fp32 accumulated
// (dbias skipped when NULL); scratch (LINEAR_BIAS_CHUNKS * OC) fp32. When x = GELU(u) and dgelu_at = u
// (N, IC), dx is the gradient with respect to u instead: dy·W ⊙ GELU'(u), in the GEMM's epilogue.
static inline void linear_backward(bf16* dx, float* dweight, float* dbias, float* scratch,
                                   const bf16* dy, const bf16* x, const bf16* weight,
                                   int N, int IC, int OC, const bf16* dgelu_at, const GpuContext* ctx) {
    if (dx) {
        MatmulEpilogue ep = {MATMUL_EPILOGUE_DGELU, NULL, dgelu_at, IC};
        matmul_ex(ctx, dx, CUDA_R_16BF, IC, dy, OC, 0, weight, IC, 0, N, IC, OC, 1.0f, 0.0f, dgelu_at ? &ep : NULL);
    }
    matmul(ctx, dweight, CUDA_R_32F, IC, dy, OC, 1, x, IC, 0, OC, IC, N, 1.0f, 1.0f);
    if (dbias) {
        if (OC % 8 != 0) check_fail("linear_backward: the bias gradient needs OC % 8 == 0", "pad the layer's width");
        linear_bias_partial_kernel<<<dim3(ceil_div(OC, 256), LINEAR_BIAS_CHUNKS), 256, 0, ctx->stream>>>(
            scratch, dy, N, OC);
        cuda_check_launch();
        linear_bias_finish_kernel<<<ceil_div(OC, 256), 256, 0, ctx->stream>>>(dbias, scratch, OC);
        cuda_check_launch();
    }
    profile_mark(ctx->prof, "linear backward", ctx->stream);
}
