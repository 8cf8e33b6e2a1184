// gelu.cuh: GELU in GPT-2's tanh approximation, gelu(x) = x/2 · (1 + tanh(√(2/π) (x + 0.044715 x³))),
// elementwise in fp32 on bf16 tensors (8 elements, one 16-byte access, per thread). The trainer runs
// this kernel under activation recompute only, in the forward and again in the backward from the saved
// pre-GELU input (the same kernel on the same input: the rerun is bitwise the forward's); otherwise the
// forward's GELU rides in the fc GEMM's epilogue (llmc/layers/linear.cuh), which takes it of the fp32 product
// rather than of its bf16 rounding. The backward is not a kernel of its own: it
// rides in the epilogue of the GEMM that produces the MLP's input gradient (cuBLASLt DGELU, the same
// tanh form; llmc/layers/linear.cuh), which saves a read and a write of the (B·T, 4C) gradient.
#pragma once
#include "../core/cuda_common.cuh"

#define GELU_K 0.7978845608028654f  // √(2/π)

// --- kernels ---------------------------------------------------------------------------------

__global__ void gelu_forward_kernel(bf16* out, const bf16* inp, size_t n8) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n8) return;
    Bf16x8 x = load128(inp + 8 * i);
    float o[8];
    for (int k = 0; k < 8; k++) {
        float v = bf16x8_get(x, k);
        o[k] = 0.5f * v * (1.0f + tanhf(GELU_K * (v + 0.044715f * v * v * v)));
    }
    store128(out + 8 * i, bf16x8_from_floats(o));
}

// --- launchers -------------------------------------------------------------------------------

// out (n,) = gelu(inp (n,)), bf16, n % 8 == 0 (the model's n is B·T·4C).
static inline void gelu_forward(bf16* out, const bf16* inp, size_t n, const GpuContext* ctx) {
    size_t n8 = n / 8;
    gelu_forward_kernel<<<(unsigned)((n8 + 255) / 256), 256, 0, ctx->stream>>>(out, inp, n8);
    cuda_check_launch();
    profile_mark(ctx->prof, "gelu forward", ctx->stream);
}
