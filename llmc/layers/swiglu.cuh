// swiglu.cuh: the SwiGLU of a Llama-style MLP, h = silu(gate) · up with silu(x) = x · sigmoid(x), from
// the output of the one GEMM with the stacked gate|up weights: gateup (N, 2F) holds gate in its first F
// columns and up in the last F. Forward gives h (N, F); backward turns dh (N, F) into d(gate|up)
// (N, 2F), the input gradient of that GEMM. Elementwise, fp32 math on bf16 tensors, 8 elements (one
// 16-byte access) per thread and operand, as gelu.cuh.
//
// Not fused yet: a later GEMM epilogue could apply the forward (saving the (N, 2F) write and read) and
// the backward; here each is a separate pass. Under activation recompute the forward runs again on the
// saved gateup: the same kernel on the same input, so recompute changes no bit.
// Napkin math at N = 65536, F = 8192 (bf16): forward reads 2 · 1.07 GB and writes 1.07 GB, ~0.7 ms at
// ~4.5 TB/s; backward reads dh and gateup (3 · 1.07 GB) and writes 2 · 1.07 GB, ~1.2 ms. A few FLOPs
// and one exponential per element: memory-bound.
// Sizes: F % 8 == 0 (checked by the launchers), so that every 8-element group sits in one row, 16-byte
// aligned.
#pragma once
#include "../core/cuda_common.cuh"

// --- kernels ---------------------------------------------------------------------------------

// sigmoid in fp32; for x below about -88, __expf(-x) overflows to inf and the quotient is 0 (no NaN: silu(x) and
// its derivative both go to 0 there, and x · 0 = 0 for finite x).
__device__ __forceinline__ float swiglu_sigmoid(float x) { return 1.0f / (1.0f + __expf(-x)); }

// Thread i handles output group i: row n = i / (F/8), channels 8·(i mod F/8) .. + 8 of h, which read
// the same channels of gate (columns 0..F-1 of the row) and of up (columns F..2F-1).
__global__ void swiglu_forward_kernel(bf16* out, const bf16* gateup, int F, size_t n_groups) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_groups) return;
    size_t per_row = (size_t)F / 8, n = i / per_row, c = 8 * (i % per_row);
    const bf16* g = gateup + n * 2 * F + c;
    Bf16x8 pg = load128(g), pu = load128(g + F);
    float o[8];
    for (int e = 0; e < 8; e++) {
        float x = bf16x8_get(pg, e);
        o[e] = x * swiglu_sigmoid(x) * bf16x8_get(pu, e);
    }
    store128(out + n * F + c, bf16x8_from_floats(o));
}

// With s = sigmoid(gate): dgate = dh · up · s · (1 + gate · (1 − s)), dup = dh · gate · s.
// Each thread reads its gate and up groups before it writes the same places of dgateup, and no other
// thread touches them: dgateup may be gateup (in place).
__global__ void swiglu_backward_kernel(bf16* dgateup, const bf16* dout, const bf16* gateup, int F, size_t n_groups) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_groups) return;
    size_t per_row = (size_t)F / 8, n = i / per_row, c = 8 * (i % per_row);
    const bf16* g = gateup + n * 2 * F + c;
    Bf16x8 pg = load128(g), pu = load128(g + F), pd = load128(dout + n * F + c);
    float dg[8], du[8];
    for (int e = 0; e < 8; e++) {
        float x = bf16x8_get(pg, e), u = bf16x8_get(pu, e), d = bf16x8_get(pd, e);
        float s = swiglu_sigmoid(x);
        dg[e] = d * u * s * (1.0f + x * (1.0f - s));
        du[e] = d * x * s;
    }
    bf16* dgu = dgateup + n * 2 * F + c;
    store128(dgu, bf16x8_from_floats(dg));
    store128(dgu + F, bf16x8_from_floats(du));
}

// --- launchers -------------------------------------------------------------------------------

static inline void swiglu_check_width(int F) {
    if (F <= 0 || F % 8 != 0)
        check_fail("swiglu: the hidden size F must be a positive multiple of 8",
                   "choose ffn_hidden as a multiple of 8 (Llama rounds it to a multiple of 256)");
}

// out (N, F) bf16 = silu(gate) · up, from gateup (N, 2F) bf16: gate columns 0..F-1, up columns F..2F-1.
static inline void swiglu_forward(bf16* out, const bf16* gateup, int N, int F, const GpuContext* ctx) {
    swiglu_check_width(F);
    size_t n_groups = (size_t)N * (F / 8);
    if (n_groups == 0) return;
    swiglu_forward_kernel<<<(unsigned)((n_groups + 255) / 256), 256, 0, ctx->stream>>>(out, gateup, F, n_groups);
    cuda_check_launch();
    profile_mark(ctx->prof, "swiglu forward", ctx->stream);
}

// dgateup (N, 2F) bf16 (assigned, not accumulated; may be gateup itself) from dout (N, F) bf16 and the
// forward's gateup (N, 2F) bf16.
static inline void swiglu_backward(bf16* dgateup, const bf16* dout, const bf16* gateup, int N, int F,
                                   const GpuContext* ctx) {
    swiglu_check_width(F);
    size_t n_groups = (size_t)N * (F / 8);
    if (n_groups == 0) return;
    swiglu_backward_kernel<<<(unsigned)((n_groups + 255) / 256), 256, 0, ctx->stream>>>(dgateup, dout, gateup, F,
                                                                                         n_groups);
    cuda_check_launch();
    profile_mark(ctx->prof, "swiglu backward", ctx->stream);
}
