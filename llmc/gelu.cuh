// gelu.cuh: GELU in GPT-2's tanh approximation, gelu(x) = x/2 · (1 + tanh(√(2/π) (x + 0.044715 x³))),
// forward and backward, elementwise in fp32 on bf16 tensors (8 elements, one 16-byte access, per thread).
// Nothing is fused here: the backward can run in place (dinp == dout), which is how the model uses it,
// and the forward can be rerun in the backward (activation recompute) from the saved pre-GELU input.
#pragma once
#include "cuda_common.cuh"

#define GELU_K 0.7978845608028654f  // √(2/π)

// --- kernels ---------------------------------------------------------------------------------

__global__ void gelu_forward_kernel(bf16* out, const bf16* inp, size_t n8) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n8) return;
    uint4 raw = ((const uint4*)inp)[i];
    const bf16* x = (const bf16*)&raw;
    __align__(16) bf16 o[8];
    for (int k = 0; k < 8; k++) {
        float v = __bfloat162float(x[k]);
        o[k] = __float2bfloat16(0.5f * v * (1.0f + tanhf(GELU_K * (v + 0.044715f * v * v * v))));
    }
    ((uint4*)out)[i] = *(uint4*)o;
}

__global__ void gelu_backward_kernel(bf16* dinp, const bf16* dout, const bf16* inp, size_t n8) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n8) return;
    uint4 rx = ((const uint4*)inp)[i], rd = ((const uint4*)dout)[i];
    const bf16* x = (const bf16*)&rx;
    const bf16* d = (const bf16*)&rd;
    __align__(16) bf16 o[8];
    for (int k = 0; k < 8; k++) {
        float v = __bfloat162float(x[k]);
        float th = tanhf(GELU_K * (v + 0.044715f * v * v * v));
        float du = GELU_K * (1.0f + 3.0f * 0.044715f * v * v);
        float g = 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * du;
        o[k] = __float2bfloat16(__bfloat162float(d[k]) * g);
    }
    ((uint4*)dinp)[i] = *(uint4*)o;
}

// --- launchers -------------------------------------------------------------------------------

// out (n,) = gelu(inp (n,)), bf16, n % 8 == 0 (the model's n is B·T·4C).
static inline void gelu_forward(bf16* out, const bf16* inp, size_t n, cudaStream_t stream) {
    size_t n8 = n / 8;
    gelu_forward_kernel<<<(unsigned)((n8 + 255) / 256), 256, 0, stream>>>(out, inp, n8);
    cuda_check_launch();
}

// dinp (n,) = dout · gelu'(inp) (assigned; dinp may be dout), bf16, n % 8 == 0.
static inline void gelu_backward(bf16* dinp, const bf16* dout, const bf16* inp, size_t n, cudaStream_t stream) {
    size_t n8 = n / 8;
    gelu_backward_kernel<<<(unsigned)((n8 + 255) / 256), 256, 0, stream>>>(dinp, dout, inp, n8);
    cuda_check_launch();
}
