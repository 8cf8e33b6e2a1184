// fused_lce_common.cuh: the device pieces every kernel of the LM head shares, so that all of them
// compute the same s_j, the same statistics and the same gradient: soft-capping's tanh, the merge of
// (max, Σexp) pairs, a block-wide reduction of them, 16-byte logit loads, and dL/dz of one logit.
// The semantics are written in fused_lce.cuh.
#pragma once
#include "cuda_common.cuh"
#include "fused_lce_options.h"

// tanh for soft-capping, used by every kernel of the head so that all see the same s_j: 1 − 2/(e^{2v}+1)
// is within ~1e-7 absolute of tanh (tanh.approx.f32 is off by ~5e-4 relative, visible in lse·softcap).
__device__ __forceinline__ float flce_tanh(float v) {
    return 1.0f - __fdividef(2.0f, __expf(2.0f * v) + 1.0f);
}

// merge (m2, s2) into (m, s): both are (max, Σexp relative to max); empty states have m = -inf
__device__ __forceinline__ void lse_merge(float& m, float& s, float m2, float s2) {
    float mx = fmaxf(m, m2);
    if (mx == -INFINITY) return;
    s = s * __expf(m - mx) + s2 * __expf(m2 - mx);
    m = mx;
}

__device__ __forceinline__ float flce_load(const float* p) { return *p; }
__device__ __forceinline__ float flce_load(const bf16* p) { return __bfloat162float(*p); }
// Eight consecutive logits from a 16-byte-aligned address: two 16-byte loads of fp32, one of bf16.
__device__ __forceinline__ void flce_load8(float v[8], const float* p) {
    float4 a = ((const float4*)p)[0], b = ((const float4*)p)[1];
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}
__device__ __forceinline__ void flce_load8(float v[8], const bf16* p) {
    uint4 raw = *(const uint4*)p;
    for (int k = 0; k < 8; k++) v[k] = __bfloat162float(((const bf16*)&raw)[k]);
}

// Block-wide reduction of (max, sum of exp relative to max, plain sum) triples.
__device__ void flce_block_reduce(float* m, float* s, float* sum) {
    __shared__ float sm[32], ss[32], su[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    // an empty partial has m = -inf and s = 0; its weight must be 0, not exp(-inf - -inf) = NaN
    float wm = warp_reduce_max(*m);
    float ws = warp_reduce_sum(*m == -INFINITY ? 0.0f : *s * __expf(*m - wm));
    float wu = warp_reduce_sum(*sum);
    if (lane == 0) { sm[warp] = wm; ss[warp] = ws; su[warp] = wu; }
    __syncthreads();
    float bm = -INFINITY, bs = 0.0f, bu = 0.0f;
    for (int w = 0; w < nwarps; w++) bm = fmaxf(bm, sm[w]);
    for (int w = 0; w < nwarps; w++) { bs += sm[w] == -INFINITY ? 0.0f : ss[w] * __expf(sm[w] - bm); bu += su[w]; }
    __syncthreads();  // the shared arrays may be reused by the next call
    *m = bm; *s = bs; *sum = bu;
}

// Whether a row with target t has no loss and no gradient: ignore_index, or a target outside the vocabulary
// (flagged by fused_lce_check)
__device__ __forceinline__ int flce_ignored(int t, const FlceOptions& opt, int V) {
    return t == opt.ignore_index || t < 0 || t >= V;
}

// The loss of a row that counts, from its lse, target s_t and Σ_j s_j
__device__ __forceinline__ float flce_row_loss(float lse, float st, float sum, const FlceOptions& opt, int V) {
    float eps = opt.label_smoothing;
    return lse - (1.0f - eps) * st - (eps / V) * sum + opt.z_loss * lse * lse;
}

// What the gradient of one row needs: dL/ds_j = scale·(p_j·(1 + 2·z_loss·lse) − (1−ε)·[j=t] − ε/V),
// times ds/dz = 1 − tanh² under softcap. scale = 0 for rows that do not count.
typedef struct {
    float lse2, pscale, smooth, target_w, cap, inv_cap;  // lse2 = lse·log2(e): p_j = 2^(s_j·log2(e) − lse2)
    int t;
} FlceRowGrad;

#define FLCE_LOG2E 1.4426950408889634f

// scale: the row's upstream gradient (dloss / N_valid in training), or 0 when the row is ignored
__device__ __forceinline__ FlceRowGrad flce_row_grad(float lse, int t, float scale, const FlceOptions& opt, int V) {
    FlceRowGrad g;
    g.lse2 = lse * FLCE_LOG2E;
    g.t = t;
    g.pscale = scale * (1.0f + 2.0f * opt.z_loss * lse);
    g.smooth = scale * opt.label_smoothing / V;
    g.target_w = scale * (1.0f - opt.label_smoothing);
    g.cap = opt.softcap;
    g.inv_cap = opt.softcap > 0.0f ? 1.0f / opt.softcap : 0.0f;
    return g;
}

// dL/dz of the logit z in column j (j < V; callers write 0 for the padded columns). The tensor-core
// kernels unroll it over a whole tile, where a run-time branch becomes predicated code that runs anyway;
// so CAP = false (only when g.cap == 0) compiles the tanh out (one special-function op per logit instead
// of three), and TARGET = false leaves out the target's term (for a column known not to be the target).
template <bool CAP = true, bool TARGET = true>
__device__ __forceinline__ float flce_dlogit(const FlceRowGrad& g, float z, int j) {
    float sv = z, dsdz = 1.0f;
    if (CAP && g.cap > 0.0f) { float th = flce_tanh(z * g.inv_cap); sv = g.cap * th; dsdz = 1.0f - th * th; }
    float d = g.pscale * exp2f(fmaf(sv, FLCE_LOG2E, -g.lse2)) - g.smooth;
    if (TARGET && j == g.t) d -= g.target_w;
    return CAP ? d * dsdz : d;
}
