// linear.cuh: the linear layer y (N, OC) = x (N, IC) · Wᵀ + b with W (OC, IC), forward and backward,
// as cuBLASLt GEMMs (llmc/layers/matmul.cuh) plus a deterministic bias-gradient kernel.
//
// Fused: the bias add rides in the forward GEMM's epilogue (y is written once); so can a GELU after it
// (linear_forward_gelu: u = x·Wᵀ + b and GELU(u) both stored by one GEMM, the GELU taken of the fp32 u;
// llmc/layers/gelu.cuh's kernel takes it of the stored bf16 u, so the two differ by a bf16 rounding in some
// elements); in the backward of a layer whose input came out of a GELU, the GELU's backward rides in the
// dx GEMM's epilogue. The backward is
//   dx (N, IC) bf16  = dy · W            (assigned; ⊙ GELU'(u) for x = GELU(u))
//   dW (OC, IC) fp32 += dyᵀ · x          (accumulated in the GEMM with beta = 1: gradient accumulation
//                                          over micro-steps costs nothing extra)
//   db (OC,) fp32    += Σ_n dy[n, :]     (llmc/layers/column_sums.cuh: COLUMN_SUMS_CHUNKS row chunks → scratch
//                                          → one ordered sum; no atomics, so bitwise repeatable)
// Napkin math: the bias gradient reads dy once (2·N·OC bytes, 16-byte loads), ~1% of the two GEMMs' time at C = 768.
#pragma once
#include "../core/cuda_common.cuh"
#include "matmul.cuh"
#include "column_sums.cuh"

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
// (dbias skipped when NULL); scratch (COLUMN_SUMS_CHUNKS * OC) fp32. When x = GELU(u) and dgelu_at = u
// (N, IC), dx is the gradient with respect to u instead: dy·W ⊙ GELU'(u), in the GEMM's epilogue.
static inline void linear_backward(bf16* dx, float* dweight, float* dbias, float* scratch,
                                   const bf16* dy, const bf16* x, const bf16* weight,
                                   int N, int IC, int OC, const bf16* dgelu_at, const GpuContext* ctx) {
    if (dx) {
        MatmulEpilogue ep = {MATMUL_EPILOGUE_DGELU, NULL, dgelu_at, IC};
        matmul_ex(ctx, dx, CUDA_R_16BF, IC, dy, OC, 0, weight, IC, 0, N, IC, OC, 1.0f, 0.0f, dgelu_at ? &ep : NULL);
    }
    matmul(ctx, dweight, CUDA_R_32F, IC, dy, OC, 1, x, IC, 0, OC, IC, N, 1.0f, 1.0f);
    if (dbias) column_sums_bf16(dbias, dy, N, OC, scratch, ctx->stream);
    profile_mark(ctx->prof, "linear backward", ctx->stream);
}
