// attention_simple.cuh: causal multi-head self-attention, forward and backward, simple and exact (the
// attention layer's kernels for head sizes the flash kernels do not take; attention.cuh picks), with
// grouped-query attention (NKV key/value heads, NH % NKV == 0; GPT-2 is NKV = NH, qkv (B, T, 3C)):
//   qkv (B, T, W = C + 2·NKV·hs) bf16: query head h at channel h·hs, key head j at C + j·hs, value
//        head j at C + (NKV + j)·hs; query head h reads kv head j = h / (NH / NKV)
//   out (B, T, C = NH·hs) bf16: out[b, t, h·hs + d] = Σ_{t2 ≤ t} softmax_t2(q·k[t2] / √hs) · v[t2, d]
// One warp per (b, h, query row); scores and probabilities of the row live in shared memory (T fp32
// per warp), all softmax math is fp32, every sum runs in a fixed order (bitwise repeatable).
// Never materialized: the (B, NH, T, T) attention matrix. The forward saves only the row's
// logsumexp lse (B, NH, T) fp32; the backward recomputes p = exp(s − lse) (flash-attention style):
//   dq kernel (warp per query row):  dp = dy·v, D = Σ p·dp, ds = p (dp − D), dq = Σ ds·k / √hs;
//                                    D (B, NH, T) fp32 is saved for
//   dkdv kernel (warp per kv head key row):  dv = Σ_h Σ_{t ≥ t2} p·dy, dk = Σ_h Σ_{t ≥ t2} ds·q / √hs
//                                    over the group's query heads h, in order.
// Splitting dq from dk/dv keeps every gradient element written by exactly one warp (no atomics).
// Cost: O(T²·hs) scalar FMAs per head, no tensor cores: the exact baseline the flash kernels
// (flash_attention.cuh) are checked against. Limits: hs % 8 == 0, hs ≤ 256, T ≤ 1024 (shared memory).
#pragma once
#include "../core/cuda_common.cuh"

#define ATT_WARPS 4     // rows per block
#define ATT_HS_MAX 256  // the dkdv kernel keeps a lane's hs / 32 channels of dk and dv in registers

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

__global__ void attention_forward_kernel(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                                         int NKV) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int r = blockIdx.x * ATT_WARPS + warp;
    if (r >= B * NH * T) return;  // no block-wide barriers below: a finished warp may leave
    int hs = C / NH, t = r % T, h = (r / T) % NH, b = r / (T * NH), j = h / (NH / NKV);
    size_t W = C + 2 * (size_t)NKV * hs;
    extern __shared__ float smem[];
    float* sq = smem + warp * (hs + T);
    float* ss = sq + hs;
    const bf16* base = qkv + (size_t)b * T * W + h * hs;
    const bf16* kb = qkv + (size_t)b * T * W + C + j * hs;  // kv head j's keys; its values NKV·hs further
    float scale = rsqrtf((float)hs);
    for (int d = lane; d < hs; d += 32) sq[d] = __bfloat162float(base[(size_t)t * W + d]) * scale;
    __syncwarp();
    float m = -INFINITY;
    for (int t2 = lane; t2 <= t; t2 += 32) {
        float s = att_dot(sq, kb + (size_t)t2 * W, hs);
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
        for (int t2 = 0; t2 <= t; t2++) acc += ss[t2] * __bfloat162float(kb[(size_t)t2 * W + NKV * hs + d]);
        y[d] = __float2bfloat16(acc * inv);
    }
    if (lane == 0) lse[r] = m + logf(sum);
}

// Warp per query row: dq (assigned into dqkv) and D = Σ p·dp (saved for the dkdv kernel).
__global__ void attention_backward_dq_kernel(bf16* dqkv, float* Drow, const bf16* dout, const bf16* qkv,
                                             const float* lse, int B, int T, int C, int NH, int NKV) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int r = blockIdx.x * ATT_WARPS + warp;
    if (r >= B * NH * T) return;
    int hs = C / NH, t = r % T, h = (r / T) % NH, b = r / (T * NH), j = h / (NH / NKV);
    size_t W = C + 2 * (size_t)NKV * hs;
    extern __shared__ float smem[];
    float* sq = smem + warp * (2 * hs + 2 * T);
    float* sdy = sq + hs;
    float* sp = sdy + hs;
    float* sds = sp + T;
    const bf16* base = qkv + (size_t)b * T * W + h * hs;
    const bf16* kb = qkv + (size_t)b * T * W + C + j * hs;  // kv head j's keys; its values NKV·hs further
    const bf16* dy = dout + ((size_t)b * T + t) * C + h * hs;
    float scale = rsqrtf((float)hs), l = lse[r];
    for (int d = lane; d < hs; d += 32) {
        sq[d] = __bfloat162float(base[(size_t)t * W + d]) * scale;
        sdy[d] = __bfloat162float(dy[d]);
    }
    __syncwarp();
    float D = 0.0f;
    for (int t2 = lane; t2 <= t; t2 += 32) {
        float p = __expf(att_dot(sq, kb + (size_t)t2 * W, hs) - l);
        float dp = att_dot(sdy, kb + (size_t)t2 * W + NKV * hs, hs);
        sp[t2] = p;
        sds[t2] = dp;
        D += p * dp;
    }
    D = warp_reduce_sum(D);
    for (int t2 = lane; t2 <= t; t2 += 32) sds[t2] = sp[t2] * (sds[t2] - D);
    __syncwarp();
    bf16* dq = dqkv + ((size_t)b * T + t) * W + h * hs;
    for (int d = lane; d < hs; d += 32) {
        float acc = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) acc += sds[t2] * __bfloat162float(kb[(size_t)t2 * W + d]);
        dq[d] = __float2bfloat16(acc * scale);
    }
    if (lane == 0) Drow[r] = D;
}

// Warp per key row t2 of kv head j: dk and dv (assigned into dqkv) over the group's query heads h, in
// order, and their query rows t ≥ t2. Lane owns channels d = lane + 32·c (c < hs / 32): one running
// fp32 sum per channel over (h, t), in registers.
__global__ void attention_backward_dkdv_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                                               const float* Drow, int B, int T, int C, int NH, int NKV) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int r = blockIdx.x * ATT_WARPS + warp;
    if (r >= B * NKV * T) return;
    int hs = C / NH, G = NH / NKV, t2 = r % T, j = (r / T) % NKV, b = r / (T * NKV);
    size_t W = C + 2 * (size_t)NKV * hs;
    extern __shared__ float smem[];
    float* sk = smem + warp * (2 * hs + 2 * T);
    float* sv = sk + hs;
    float* sp = sv + hs;
    float* sds = sp + T;
    const bf16* rowb = qkv + (size_t)b * T * W;
    const bf16* kb = rowb + C + j * hs;  // kv head j's keys; its values NKV·hs further
    float scale = rsqrtf((float)hs);
    for (int d = lane; d < hs; d += 32) {
        sk[d] = __bfloat162float(kb[(size_t)t2 * W + d]) * scale;
        sv[d] = __bfloat162float(kb[(size_t)t2 * W + NKV * hs + d]);
    }
    float ak[ATT_HS_MAX / 32], av[ATT_HS_MAX / 32];
    #pragma unroll
    for (int c = 0; c < ATT_HS_MAX / 32; c++) ak[c] = av[c] = 0.0f;
    for (int h = j * G; h < (j + 1) * G; h++) {
        const bf16* qb = rowb + h * hs;
        const bf16* dyb = dout + (size_t)b * T * C + h * hs;
        const float* lrow = lse + ((size_t)b * NH + h) * T;
        const float* Dr = Drow + ((size_t)b * NH + h) * T;
        __syncwarp();  // sk, sv written; sp, sds of the previous head read
        for (int t = t2 + lane; t < T; t += 32) {
            float p = __expf(att_dot(sk, qb + (size_t)t * W, hs) - lrow[t]);
            float dp = att_dot(sv, dyb + (size_t)t * C, hs);
            sp[t] = p;
            sds[t] = p * (dp - Dr[t]);
        }
        __syncwarp();
        #pragma unroll
        for (int c = 0; c < ATT_HS_MAX / 32; c++) {
            int d = lane + 32 * c;
            if (d >= hs) break;
            for (int t = t2; t < T; t++) {
                ak[c] += sds[t] * __bfloat162float(qb[(size_t)t * W + d]);
                av[c] += sp[t] * __bfloat162float(dyb[(size_t)t * C + d]);
            }
        }
    }
    bf16* dk = dqkv + (kb - qkv) + (size_t)t2 * W;  // dqkv has qkv's layout
    bf16* dv = dk + NKV * hs;
    #pragma unroll
    for (int c = 0; c < ATT_HS_MAX / 32; c++) {
        int d = lane + 32 * c;
        if (d >= hs) break;
        dk[d] = __float2bfloat16(ak[c] * scale);
        dv[d] = __float2bfloat16(av[c]);
    }
}

// --- launchers -------------------------------------------------------------------------------

static inline size_t attention_check(int T, int C, int NH, int NKV, int per_warp_floats) {
    int hs = NH > 0 ? C / NH : 0;
    size_t smem = (size_t)ATT_WARPS * per_warp_floats * sizeof(float);
    char hint[160];
    if (NH < 1 || C % NH != 0 || hs % 8 != 0 || hs > ATT_HS_MAX || smem > 48 * 1024 || NKV < 1 || NH % NKV != 0) {
        snprintf(hint, sizeof(hint), "head size must be a multiple of 8 and at most %d, T at most 1024, and the kv "
                 "heads NKV must divide NH", ATT_HS_MAX);
        check_failf(hint, "attention: C=%d NH=%d NKV=%d (head size %d) T=%d not supported", C, NH, NKV, hs, T);
    }
    return smem;
}

// out (B, T, C) bf16, lse (B, NH, T) fp32 from qkv (B, T, C + 2·NKV·C/NH) bf16 (GPT-2: NKV = NH, qkv
// (B, T, 3C)).
static inline void attention_simple_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                                            int NKV, cudaStream_t stream) {
    size_t smem = attention_check(T, C, NH, NKV, C / NH + T);
    attention_forward_kernel<<<ceil_div(B * NH * T, ATT_WARPS), 32 * ATT_WARPS, smem, stream>>>(out, lse, qkv, B, T,
                                                                                              C, NH, NKV);
    cuda_check_launch();
}

// dqkv (B, T, C + 2·NKV·C/NH) bf16 assigned (qkv's layout), from dout (B, T, C) bf16 and the forward's
// qkv, lse; Dscratch (B, NH, T) fp32.
static inline void attention_simple_backward(bf16* dqkv, float* Dscratch, const bf16* dout, const bf16* qkv,
                                             const float* lse, int B, int T, int C, int NH, int NKV,
                                             cudaStream_t stream) {
    size_t smem = attention_check(T, C, NH, NKV, 2 * (C / NH) + 2 * T);
    attention_backward_dq_kernel<<<ceil_div(B * NH * T, ATT_WARPS), 32 * ATT_WARPS, smem, stream>>>(
        dqkv, Dscratch, dout, qkv, lse, B, T, C, NH, NKV);
    cuda_check_launch();
    attention_backward_dkdv_kernel<<<ceil_div(B * NKV * T, ATT_WARPS), 32 * ATT_WARPS, smem, stream>>>(
        dqkv, dout, qkv, lse, Dscratch, B, T, C, NH, NKV);
    cuda_check_launch();
}
