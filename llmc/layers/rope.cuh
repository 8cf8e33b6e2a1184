// rope.cuh: rotary position embeddings (RoPE) on the query and key heads of the qkv activation
// (B·T, (NH + 2 NKV) hs): per token, NH query heads, then NKV key heads, then NKV value heads, hs
// channels each; the value heads are not touched. Hugging Face's Llama convention (rotate_half): in a
// head, channel i and channel i + hs/2 form a pair (i < hs/2), rotated by the angle t · θ^(-2i/hs) at the
// token's position t = row mod T within its sequence:
//   out[i] = x[i] cos − x[i + hs/2] sin,   out[i + hs/2] = x[i + hs/2] cos + x[i] sin.
// The backward is the transpose of that rotation, i.e. the rotation by minus the angle.
//
// Where it runs (llmc/attention/attention.cuh). With the sm_90a flash kernels
// (llmc/attention/flash_attention_sm90*.cuh): rope_forward over q and k before the forward, and the
// backward kernels rotate dq and dk back in registers. With the mma.sync flash kernels (hs = 64, 128,
// other GPUs): the k heads are rotated in place by a pass over memory (rope_keys_forward: NKV heads of
// a row, a fifth of the q + k channels at NH = 4·NKV), and the q heads inside the forward kernel, as
// each block loads its query tile, which it writes back rotated (each query tile is read by that block
// alone, so the write races nothing); after the forward, qkv holds the rotated q and k, what the
// backward needs. The backward's RoPE costs no pass either: the kernels rotate dq and dk back in
// registers before writing them. With the simple kernels (other head sizes): rope_forward over q and k
// before the forward, rope_backward over dq and dk after the backward. This file holds the angle table,
// the rotation every kernel shares (rope_rotate, rope_rotate8), and those passes.
// Why the keys are not rotated inside the forward kernel: a key tile is loaded by every query tile at or
// below it, so rotating it there repeats the rotation T/64 times over, reading the cos/sin table each
// time: as many L2 bytes as the keys and values themselves, which doubles the forward's time
// (dev/cuda/README.md); a pass over the k heads reads and writes them once.
//
// Angles: a table, not computed on the fly. rope_table_fill computes cos and sin in double (as the CPU
// reference does) once, at build, into cos_sin (maxT, hs/2, 2) fp32, and rounds them to fp32: an error
// ≤ 2^-25 ≈ 3e-8 whatever T and θ, so before its bf16 rounding a rotated pair is within ~3e-7 of its
// magnitude of the double rotation, and the kernel's bf16 output is the reference's to within one bf16
// rounding (≤ 2^-8 relative) at any T. Computing t · θ^(-2i/hs) in fp32 instead rounds the angle by up
// to half an ulp of t (1.2e-4 rad at t = 4095, whatever θ: the largest angles are those of i = 0), and
// --use_fast_math's __sinf/__cosf reduce large arguments in fp32 as well: ~2e-4 to 5e-4 of |x| per
// element at T = 4096, an eighth of a bf16 rounding, which a test would have to allow for. The table is
// maxT · hs floats (2 MiB at maxT = 4096, hs = 128), read from L1/L2; every kernel that rotates reads the
// same cos and sin, and rotates with the same pinned roundings (rope_rotate), so the fused and the
// unfused forward give the same bits. A table for maxT serves every T <= maxT (row t does not depend
// on maxT).
// Napkin math at B·T = 65536, NH = 32, NKV = 8, hs = 64 (bf16): q and k are 2560 of the 3584 channels
// of a row, so the passes over q and k read and write 335 MB each way, ~0.15 ms at ~4.5 TB/s, per layer
// and direction (6 FLOPs a pair: memory-bound). With the flash kernels, the k pass moves 512 of those
// channels (~0.03 ms), the forward kernel adds the write of q (~0.04 ms), and the backward nothing.
// Sizes: hs % 16 == 0 (8 pairs a 16-byte vector from each half of the head), qkv and cos_sin 16-byte
// aligned (checked by the launchers).
#pragma once
#include <stdint.h>
#include "../core/cuda_common.cuh"

// --- kernels ---------------------------------------------------------------------------------

// cos_sin[t, i] = (cos, sin)(t · θ^(-2i/hs)) in double, as dev/ref/ref_layers.h writes it, rounded
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

// (x, y) -> (x cos − y sin, y cos + x sin), each product and sum rounded as written (fmaf pinned rather
// than left to contraction): every kernel that rotates gets the same bits from the same inputs.
__device__ __forceinline__ void rope_rotate(float* x, float* y, float c, float s) {
    float a = *x, b = *y;
    *x = __fmaf_rn(a, c, -__fmul_rn(b, s));
    *y = __fmaf_rn(b, c, __fmul_rn(a, s));
}

// Rotates 8 pairs (x1[e], x2[e]), e < 8: pairs i0 .. i0 + 7 of one position, whose (cos, sin) start at
// cs = cos_sin + (t · hs/2 + i0) · 2 (64-byte aligned for i0 % 8 == 0). inverse != 0: by minus the angles.
__device__ __forceinline__ void rope_rotate8(Bf16x8* x1, Bf16x8* x2, const float* cs, int inverse) {
    float o1[8], o2[8];
    #pragma unroll
    for (int j = 0; j < 4; j++) {
        float4 v = ((const float4*)cs)[j];  // (cos, sin) of pairs 2j and 2j + 1
        #pragma unroll
        for (int e = 0; e < 2; e++) {
            int k = 2 * j + e;
            float c = e ? v.z : v.x, sn = e ? v.w : v.y;
            o1[k] = bf16x8_get(*x1, k);
            o2[k] = bf16x8_get(*x2, k);
            rope_rotate(&o1[k], &o2[k], c, inverse ? -sn : sn);
        }
    }
    *x1 = bf16x8_from_floats(o1);
    *x2 = bf16x8_from_floats(o2);
}

// The pass over heads h0 .. h0 + n_heads − 1 of every row. Thread i rotates 8 pairs: row = i /
// (n_heads · hs/16), then head h0 + h (h < n_heads) and group g < hs/16 of that row; channels
// (h0 + h)·hs + 8g .. + 8 pair with those hs/2 further. inverse != 0 rotates by minus the angle (the
// backward). Each thread reads and writes only its own 16 channels: in place is safe.
__global__ void rope_kernel(bf16* qkv, const float* cos_sin, int T, int h0, int n_heads, int hs, int stride,
                            int inverse, size_t n_groups) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_groups) return;
    int per_head = hs / 16, per_row = n_heads * per_head, half = hs / 2;
    size_t row = i / per_row;
    int r = (int)(i % per_row), h = r / per_head, g = r % per_head, t = (int)(row % T);
    bf16* p = qkv + row * stride + (size_t)(h0 + h) * hs + 8 * g;
    Bf16x8 x1 = load128(p), x2 = load128(p + half);
    rope_rotate8(&x1, &x2, cos_sin + ((size_t)t * half + 8 * g) * 2, inverse);
    store128(p, x1);
    store128(p + half, x2);
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

// The pass over heads h0 .. h0 + n_heads − 1 of qkv's rows, in place (inverse: the backward's rotation).
static inline void rope_launch(bf16* qkv, const float* cos_sin, int B, int T, int NH, int NKV, int hs, int h0,
                               int n_heads, int inverse, cudaStream_t stream) {
    rope_check(qkv, cos_sin, T, NH, NKV, hs);
    size_t n_groups = (size_t)B * T * n_heads * (hs / 16);
    if (n_groups == 0) return;
    rope_kernel<<<(unsigned)((n_groups + 255) / 256), 256, 0, stream>>>(qkv, cos_sin, T, h0, n_heads, hs,
                                                                         (NH + 2 * NKV) * hs, inverse, n_groups);
    cuda_check_launch();
}

// The NKV k heads of qkv (B·T, (NH + 2 NKV) hs) rotated in place; q and v untouched. The flash forward's
// first step (it rotates q itself).
static inline void rope_keys_forward(bf16* qkv, const float* cos_sin, int B, int T, int NH, int NKV, int hs,
                                     cudaStream_t stream) {
    rope_launch(qkv, cos_sin, B, T, NH, NKV, hs, NH, NKV, 0, stream);
}

// qkv (B·T, (NH + 2 NKV) hs) bf16, in place: the NH q heads and NKV k heads of row b·T + t rotated at
// position t; the v heads untouched. cos_sin (maxT, hs/2, 2) fp32 from rope_table_fill, maxT >= T.
static inline void rope_forward(bf16* qkv, const float* cos_sin, int B, int T, int NH, int NKV, int hs,
                                const GpuContext* ctx) {
    rope_launch(qkv, cos_sin, B, T, NH, NKV, hs, 0, NH + NKV, 0, ctx->stream);  // q heads, then k heads: one run
    profile_mark(ctx->prof, "rope forward", ctx->stream);
}

// dqkv (B·T, (NH + 2 NKV) hs) bf16, in place: the gradient with respect to the rotated q and k becomes
// the gradient with respect to q and k before RoPE (the inverse rotation); dv untouched.
static inline void rope_backward(bf16* dqkv, const float* cos_sin, int B, int T, int NH, int NKV, int hs,
                                 const GpuContext* ctx) {
    rope_launch(dqkv, cos_sin, B, T, NH, NKV, hs, 0, NH + NKV, 1, ctx->stream);
    profile_mark(ctx->prof, "rope backward", ctx->stream);
}
