// attention_simple.cuh: causal multi-head self-attention, forward and backward, simple and exact (the
// attention layer's kernels for head sizes the flash kernels do not take; attention.cuh picks).
//   qkv (B, T, 3C) bf16: head h of token t has q at channel h·hs, k at C + h·hs, v at 2C + h·hs
//   out (B, T, C) bf16:  out[b, t, h·hs + d] = Σ_{t2 ≤ t} softmax_t2(q·k[t2] / √hs) · v[t2, d]
// One warp per (b, h, query row); scores and probabilities of the row live in shared memory (T fp32
// per warp), all softmax math is fp32, every sum runs in a fixed order (bitwise repeatable).
// Never materialized: the (B, NH, T, T) attention matrix. The forward saves only the row's
// logsumexp lse (B, NH, T) fp32; the backward recomputes p = exp(s − lse) (flash-attention style):
//   dq kernel (warp per query row):  dp = dy·v, D = Σ p·dp, ds = p (dp − D), dq = Σ ds·k / √hs;
//                                    D (B, NH, T) fp32 is saved for
//   dkdv kernel (warp per key row):  dv = Σ_{t ≥ t2} p·dy, dk = Σ_{t ≥ t2} ds·q / √hs.
// Splitting dq from dk/dv keeps every gradient element written by exactly one warp (no atomics).
// Cost: O(T²·hs) scalar FMAs per head, no tensor cores: the exact baseline the flash kernels
// (flash_attention.cuh) are checked against. Limits: hs % 8 == 0, hs ≤ 256, T ≤ 1024 (shared memory).
#pragma once
#include "cuda_common.cuh"

#define ATT_WARPS 4  // rows per block

// --- kernels ---------------------------------------------------------------------------------

// Σ_d s[d]·g[d] for s in shared fp32 and g a 16-byte aligned bf16 row of length hs.
__device__ __forceinline__ float att_dot(const float* s, const bf16* g, int hs) {
    float acc = 0.0f;
    for (int d = 0; d < hs; d += 8) {
        Bf16x8 x = load128(g + d);
        for (int k = 0; k < 8; k++) acc += s[d + k] * bf16x8_get(x, k);
    }
    return acc;
}

__global__ void attention_forward_kernel(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int r = blockIdx.x * ATT_WARPS + warp;
    if (r >= B * NH * T) return;  // no block-wide barriers below: a finished warp may leave
    int hs = C / NH, t = r % T, h = (r / T) % NH, b = r / (T * NH);
    extern __shared__ float smem[];
    float* sq = smem + warp * (hs + T);
    float* ss = sq + hs;
    const bf16* base = qkv + (size_t)b * T * 3 * C + h * hs;
    float scale = rsqrtf((float)hs);
    for (int d = lane; d < hs; d += 32) sq[d] = __bfloat162float(base[(size_t)t * 3 * C + d]) * scale;
    __syncwarp();
    float m = -INFINITY;
    for (int t2 = lane; t2 <= t; t2 += 32) {
        float s = att_dot(sq, base + (size_t)t2 * 3 * C + C, hs);
        ss[t2] = s;
        m = fmaxf(m, s);
    }
    m = warp_reduce_max(m);
    float sum = 0.0f;
    for (int t2 = lane; t2 <= t; t2 += 32) { float e = __expf(ss[t2] - m); ss[t2] = e; sum += e; }
    sum = warp_reduce_sum(sum);
    __syncwarp();
    float inv = 1.0f / sum;
    bf16* y = out + ((size_t)b * T + t) * C + h * hs;
    for (int d = lane; d < hs; d += 32) {
        float acc = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) acc += ss[t2] * __bfloat162float(base[(size_t)t2 * 3 * C + 2 * C + d]);
        y[d] = __float2bfloat16(acc * inv);
    }
    if (lane == 0) lse[r] = m + logf(sum);
}

// Warp per query row: dq (assigned into dqkv) and D = Σ p·dp (saved for the dkdv kernel).
__global__ void attention_backward_dq_kernel(bf16* dqkv, float* Drow, const bf16* dout, const bf16* qkv,
                                             const float* lse, int B, int T, int C, int NH) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int r = blockIdx.x * ATT_WARPS + warp;
    if (r >= B * NH * T) return;
    int hs = C / NH, t = r % T, h = (r / T) % NH, b = r / (T * NH);
    extern __shared__ float smem[];
    float* sq = smem + warp * (2 * hs + 2 * T);
    float* sdy = sq + hs;
    float* sp = sdy + hs;
    float* sds = sp + T;
    const bf16* base = qkv + (size_t)b * T * 3 * C + h * hs;
    const bf16* dy = dout + ((size_t)b * T + t) * C + h * hs;
    float scale = rsqrtf((float)hs), l = lse[r];
    for (int d = lane; d < hs; d += 32) {
        sq[d] = __bfloat162float(base[(size_t)t * 3 * C + d]) * scale;
        sdy[d] = __bfloat162float(dy[d]);
    }
    __syncwarp();
    float D = 0.0f;
    for (int t2 = lane; t2 <= t; t2 += 32) {
        float p = __expf(att_dot(sq, base + (size_t)t2 * 3 * C + C, hs) - l);
        float dp = att_dot(sdy, base + (size_t)t2 * 3 * C + 2 * C, hs);
        sp[t2] = p;
        sds[t2] = dp;
        D += p * dp;
    }
    D = warp_reduce_sum(D);
    for (int t2 = lane; t2 <= t; t2 += 32) sds[t2] = sp[t2] * (sds[t2] - D);
    __syncwarp();
    bf16* dq = dqkv + ((size_t)b * T + t) * 3 * C + h * hs;
    for (int d = lane; d < hs; d += 32) {
        float acc = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) acc += sds[t2] * __bfloat162float(base[(size_t)t2 * 3 * C + C + d]);
        dq[d] = __float2bfloat16(acc * scale);
    }
    if (lane == 0) Drow[r] = D;
}

// Warp per key row t2: dk and dv (assigned into dqkv) over the query rows t ≥ t2.
__global__ void attention_backward_dkdv_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                                               const float* Drow, int B, int T, int C, int NH) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int r = blockIdx.x * ATT_WARPS + warp;
    if (r >= B * NH * T) return;
    int hs = C / NH, t2 = r % T, h = (r / T) % NH, b = r / (T * NH);
    extern __shared__ float smem[];
    float* sk = smem + warp * (2 * hs + 2 * T);
    float* sv = sk + hs;
    float* sp = sv + hs;
    float* sds = sp + T;
    const bf16* base = qkv + (size_t)b * T * 3 * C + h * hs;
    const bf16* dyb = dout + (size_t)b * T * C + h * hs;
    const float* lrow = lse + (size_t)(b * NH + h) * T;
    const float* Dr = Drow + (size_t)(b * NH + h) * T;
    float scale = rsqrtf((float)hs);
    for (int d = lane; d < hs; d += 32) {
        sk[d] = __bfloat162float(base[(size_t)t2 * 3 * C + C + d]) * scale;
        sv[d] = __bfloat162float(base[(size_t)t2 * 3 * C + 2 * C + d]);
    }
    __syncwarp();
    for (int t = t2 + lane; t < T; t += 32) {
        float p = __expf(att_dot(sk, base + (size_t)t * 3 * C, hs) - lrow[t]);
        float dp = att_dot(sv, dyb + (size_t)t * C, hs);
        sp[t] = p;
        sds[t] = p * (dp - Dr[t]);
    }
    __syncwarp();
    bf16* dk = dqkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
    bf16* dv = dk + C;
    for (int d = lane; d < hs; d += 32) {
        float ak = 0.0f, av = 0.0f;
        for (int t = t2; t < T; t++) {
            ak += sds[t] * __bfloat162float(base[(size_t)t * 3 * C + d]);
            av += sp[t] * __bfloat162float(dyb[(size_t)t * C + d]);
        }
        dk[d] = __float2bfloat16(ak * scale);
        dv[d] = __float2bfloat16(av);
    }
}

// --- launchers -------------------------------------------------------------------------------

static inline size_t attention_check(int T, int C, int NH, int per_warp_floats) {
    int hs = C / NH;
    size_t smem = (size_t)ATT_WARPS * per_warp_floats * sizeof(float);
    if (C % NH != 0 || hs % 8 != 0 || hs > 256 || smem > 48 * 1024) {
        fprintf(stderr, "error: attention: C=%d NH=%d (head size %d) T=%d not supported\n"
                "  hint: head size must be a multiple of 8 and at most 256, and T at most 1024\n", C, NH, hs, T);
        exit(EXIT_FAILURE);
    }
    return smem;
}

// out (B, T, C) bf16, lse (B, NH, T) fp32 from qkv (B, T, 3C) bf16.
static inline void attention_simple_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                                     cudaStream_t stream) {
    size_t smem = attention_check(T, C, NH, C / NH + T);
    attention_forward_kernel<<<ceil_div(B * NH * T, ATT_WARPS), 32 * ATT_WARPS, smem, stream>>>(out, lse, qkv, B, T, C, NH);
    cuda_check_launch();
}

// dqkv (B, T, 3C) bf16 assigned, from dout (B, T, C) bf16 and the forward's qkv, lse;
// Dscratch (B, NH, T) fp32.
static inline void attention_simple_backward(bf16* dqkv, float* Dscratch, const bf16* dout, const bf16* qkv, const float* lse,
                                      int B, int T, int C, int NH, cudaStream_t stream) {
    size_t smem = attention_check(T, C, NH, 2 * (C / NH) + 2 * T);
    int blocks = ceil_div(B * NH * T, ATT_WARPS);
    attention_backward_dq_kernel<<<blocks, 32 * ATT_WARPS, smem, stream>>>(dqkv, Dscratch, dout, qkv, lse, B, T, C, NH);
    cuda_check_launch();
    attention_backward_dkdv_kernel<<<blocks, 32 * ATT_WARPS, smem, stream>>>(dqkv, dout, qkv, lse, Dscratch, B, T, C, NH);
    cuda_check_launch();
}
