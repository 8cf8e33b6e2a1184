// rope.cuh: rotary position embeddings (RoPE), applied in place to the query and key heads of the qkv
// activation (B·T, (NH + 2 NKV) hs): per token, NH query heads, then NKV key heads, then NKV value heads,
// hs channels each; the value heads are not touched. Hugging Face's Llama convention (rotate_half): in
// a head, channel i and channel i + hs/2 form a pair (i < hs/2), rotated by the angle t · θ^(-2i/hs) at
// the token's position t = row mod T within its sequence:
//   out[i] = x[i] cos − x[i + hs/2] sin,   out[i + hs/2] = x[i + hs/2] cos + x[i] sin.
// The backward is the transpose of that rotation, i.e. the rotation by minus the angle, applied in place
// to the dq and dk heads of dqkv (dv untouched): rope_backward(rope_forward(x)) = x up to rounding.
//
// Angles: a table, not computed on the fly. rope_table_fill computes cos and sin in double (as the CPU
// reference does) once, at build, into cos_sin (maxT, hs/2, 2) fp32, and rounds them to fp32: an error
// ≤ 2^-25 ≈ 3e-8 whatever T and θ, so before its bf16 rounding a rotated pair is within ~3e-7 of its
// magnitude of the double rotation, and the kernel's bf16 output is the reference's to within one bf16
// rounding (≤ 2^-8 relative) at any T. Computing t · θ^(-2i/hs) in fp32 instead rounds the angle by up
// to half an ulp of t (1.2e-4 rad at t = 4095, whatever θ: the largest angles are those of i = 0), and
// --use_fast_math's __sinf/__cosf reduce large arguments in fp32 as well: ~2e-4 to 5e-4 of |x| per
// element at T = 4096, an eighth of a bf16 rounding, which a test would have to allow for. The table is
// maxT · hs floats (2 MiB at maxT = 4096, hs = 128), read from L2 by all B · (NH + NKV) heads; it also
// gives the forward, the backward and any later fused attention kernel bitwise the same cos and sin.
// A table for maxT serves every T <= maxT (row t does not depend on maxT).
//
// Not fused yet: the goal is RoPE inside the QKV GEMM's epilogue or the attention kernel's
// loads; this pass is the reference implementation on the GPU.
// Napkin math at B·T = 65536, NH = 32, NKV = 8, hs = 64 (bf16): q and k are 2560 of the 3584 channels of
// a row: reads and writes 335 MB each, ~0.15 ms at ~4.5 TB/s; 6 FLOPs a pair: memory-bound.
// Sizes: hs % 16 == 0 (each thread rotates 8 pairs, a 16-byte vector from each half of the head),
// qkv and cos_sin 16-byte aligned (checked by the launchers).
#pragma once
#include <stdint.h>
#include "cuda_common.cuh"

// --- kernels ---------------------------------------------------------------------------------

// cos_sin[t, i] = (cos, sin)(t · θ^(-2i/hs)) in double, as dev/ref/llama_ref_layers.h writes it, rounded
// to fp32. One thread per (t, i). --use_fast_math changes only fp32 functions: pow, sincos stay double.
__global__ void rope_table_kernel(float* cos_sin, int T, int hs, double theta) {
    int half = hs / 2;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= T * half) return;
    int t = idx / half, i = idx % half;
    double angle = t * pow(theta, -2.0 * i / hs), s, c;
    sincos(angle, &s, &c);
    cos_sin[2 * (size_t)idx] = (float)c;
    cos_sin[2 * (size_t)idx + 1] = (float)s;
}

// Thread i rotates 8 pairs: row = i / (n_heads · hs/16), then head h < n_heads and group g < hs/16 of
// that row; channels h·hs + 8g .. + 8 pair with h·hs + hs/2 + 8g .. + 8. inverse != 0 rotates by minus
// the angle (the backward). Each thread reads and writes only its own 16 channels: in place is safe.
__global__ void rope_kernel(bf16* qkv, const float* cos_sin, int T, int n_heads, int hs, int stride, int inverse,
                            size_t n_groups) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_groups) return;
    int per_head = hs / 16, per_row = n_heads * per_head, half = hs / 2;
    size_t row = i / per_row;
    int r = (int)(i % per_row), h = r / per_head, g = r % per_head, t = (int)(row % T);
    bf16* p = qkv + row * stride + (size_t)h * hs + 8 * g;
    Bf16x8 x1 = load128(p), x2 = load128(p + half);
    const float4* cs = (const float4*)(cos_sin + ((size_t)t * half + 8 * g) * 2);  // 64-byte aligned
    float c[8], s[8];
    for (int j = 0; j < 4; j++) {
        float4 v = cs[j];  // (cos, sin) of pairs 2j and 2j + 1
        c[2 * j] = v.x; s[2 * j] = v.y; c[2 * j + 1] = v.z; s[2 * j + 1] = v.w;
    }
    float o1[8], o2[8];
    for (int e = 0; e < 8; e++) {
        float a = bf16x8_get(x1, e), b = bf16x8_get(x2, e), sn = inverse ? -s[e] : s[e];
        o1[e] = a * c[e] - b * sn;
        o2[e] = b * c[e] + a * sn;
    }
    store128(p, bf16x8_from_floats(o1));
    store128(p + half, bf16x8_from_floats(o2));
}

// --- launchers -------------------------------------------------------------------------------

static inline void rope_check(const void* qkv, const float* cos_sin, int T, int NH, int NKV, int hs) {
    if (hs <= 0 || hs % 16 != 0)
        check_fail("rope: the head size must be a positive multiple of 16",
                   "each thread rotates 8 channel pairs, one 16-byte vector from each half of a head");
    if (T <= 0 || NH <= 0 || NKV <= 0) check_fail("rope: T, NH and NKV must be positive", "check the model's shape");
    if (((uintptr_t)qkv | (uintptr_t)cos_sin) % 16 != 0)
        check_fail("rope: qkv and cos_sin must be 16-byte aligned", "carve them at multiples of 16 bytes");
}

// cos_sin (T, hs/2, 2) fp32 = (cos, sin) of t · theta^(-2i/hs), t < T, i < hs/2: T · hs floats. Once, at
// build, for the longest T; serves every shorter T.
static inline void rope_table_fill(float* cos_sin, int T, int hs, double theta, const GpuContext* ctx) {
    rope_check(cos_sin, cos_sin, T, 1, 1, hs);
    if (!(theta > 0)) check_fail("rope: theta must be positive", "Llama 2 uses 1e4, Llama 3 5e5");
    int n = T * (hs / 2);
    rope_table_kernel<<<ceil_div(n, 256), 256, 0, ctx->stream>>>(cos_sin, T, hs, theta);
    cuda_check_launch();
}

static inline void rope_launch(bf16* qkv, const float* cos_sin, int B, int T, int NH, int NKV, int hs, int inverse,
                               const GpuContext* ctx) {
    rope_check(qkv, cos_sin, T, NH, NKV, hs);
    int n_heads = NH + NKV;  // the q heads, then the k heads: one contiguous run of each row
    size_t n_groups = (size_t)B * T * n_heads * (hs / 16);
    if (n_groups == 0) return;
    rope_kernel<<<(unsigned)((n_groups + 255) / 256), 256, 0, ctx->stream>>>(qkv, cos_sin, T, n_heads, hs,
                                                                              (NH + 2 * NKV) * hs, inverse, n_groups);
    cuda_check_launch();
}

// qkv (B·T, (NH + 2 NKV) hs) bf16, in place: the NH q heads and NKV k heads of row b·T + t rotated at
// position t; the v heads untouched. cos_sin (maxT, hs/2, 2) fp32 from rope_table_fill, maxT >= T.
static inline void rope_forward(bf16* qkv, const float* cos_sin, int B, int T, int NH, int NKV, int hs,
                                const GpuContext* ctx) {
    rope_launch(qkv, cos_sin, B, T, NH, NKV, hs, 0, ctx);
    profile_mark(ctx->prof, "rope forward", ctx->stream);
}

// dqkv (B·T, (NH + 2 NKV) hs) bf16, in place: the gradient with respect to the rotated q and k becomes
// the gradient with respect to q and k before RoPE (the inverse rotation); dv untouched.
static inline void rope_backward(bf16* dqkv, const float* cos_sin, int B, int T, int NH, int NKV, int hs,
                                 const GpuContext* ctx) {
    rope_launch(dqkv, cos_sin, B, T, NH, NKV, hs, 1, ctx);
    profile_mark(ctx->prof, "rope backward", ctx->stream);
}
