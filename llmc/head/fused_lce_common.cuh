// fused_lce_common.cuh: the device pieces every kernel of the LM head shares, so that all of them
// compute the same s_j, the same statistics and the same gradient: soft-capping's tanh, the online-
// softmax row fold and the merge of its states, a block-wide reduction of them, 16-byte logit loads,
// and dL/dz of one logit. The semantics are written in fused_lce.cuh.
#pragma once
#include "../core/cuda_common.cuh"
#include "fused_lce_options.h"

// One call of the head over N rows, as the paths and the fused forwards take it: what it reads, what
// it writes and the upstream gradient. fused_lce.cuh fills it from the head's buffers and the caller's
// arguments (fused_lce_run_of); a path reads the fields it needs.
typedef struct {
    const bf16* x;            // (N, C) bf16: the rows of the head's input
    const bf16* W;            // (Vp, C) bf16: the vocabulary's rows (rows >= V never count)
    const int* targets;       // (N) int
    int N, C, V, Vp;          // rows of this call; channels; vocabulary, padded
    FusedLceOptions opt;      // ignore_index, z-loss, soft-capping, label smoothing
    float* loss_rows;         // (N) fp32: each row's loss, written
    float* lse;               // (N) fp32: each row's logsumexp, written
    const int* n_valid;       // (1) int on the GPU: the rows that count (fused_lce_count_kernel)
    bf16* dx;                 // (N, C) bf16, written; NULL: the loss and lse only
    float* dW;                // (Vp, C) fp32, accumulated
    const float* dloss_rows;  // (N) fp32: each row's upstream gradient; NULL: dloss / n_valid for every row
    float dloss;              // the upstream gradient of the mean loss (when dloss_rows is NULL)
} FusedLceRun;

// tanh for soft-capping, used by every kernel of the head so that all see the same s_j: 1 − 2/(e^{2v}+1)
// is within ~1e-7 absolute of tanh (tanh.approx.f32 is off by ~5e-4 relative, visible in lse·softcap).
__device__ __forceinline__ float fused_lce_tanh(float v) {
    return 1.0f - __fdividef(2.0f, __expf(2.0f * v) + 1.0f);
}

// merge (m2, s2) into (m, s): both are (max, Σexp relative to max); empty states have m = -inf
__device__ __forceinline__ void lse_merge(float& m, float& s, float m2, float s2) {
    float mx = fmaxf(m, m2);
    if (mx == -INFINITY) return;
    s = s * __expf(m - mx) + s2 * __expf(m2 - mx);
    m = mx;
}

__device__ __forceinline__ float fused_lce_load(const float* p) { return *p; }
__device__ __forceinline__ float fused_lce_load(const bf16* p) { return __bfloat162float(*p); }
// Eight consecutive logits from a 16-byte-aligned address: two 16-byte loads of fp32, one of bf16.
__device__ __forceinline__ void fused_lce_load8(float v[8], const float* p) {
    float4 a = ((const float4*)p)[0], b = ((const float4*)p)[1];
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}
__device__ __forceinline__ void fused_lce_load8(float v[8], const bf16* p) {
    Bf16x8 x = load128(p);
    for (int k = 0; k < 8; k++) v[k] = bf16x8_get(x, k);
}

// --- the row fold ------------------------------------------------------------------------------
// Every kernel of the head reduces a row of logits the same way, online: a running m (the largest s_j
// so far), s = Σ exp(s_j − m) and sum = Σ s_j (label smoothing's term). A new span of values moves m
// at most once (s rescaled by one exp), then adds its exps relative to the new m. The exp is 2^x of
// x = s_j·log2(e) − m·log2(e), one FMA and one MUFU op per logit.
#define FUSED_LCE_LOG2E 1.4426950408889634f

// Folds the NV values v into (m, s, sum). Columns outside the vocabulary carry -inf (they add nothing);
// a NaN logit is kept, so that it reaches the loss. SUM = false leaves sum alone (no label smoothing).
template <int NV, bool SUM = true>
__device__ __forceinline__ void fused_lce_fold(float& m, float& s, float& sum, const float (&v)[NV]) {
    float vm = -INFINITY;
    #pragma unroll
    for (int k = 0; k < NV; k++) vm = fmaxf(vm, v[k]);
    if (vm > m) { s *= exp2f((m - vm) * FUSED_LCE_LOG2E); m = vm; }  // m = -inf before the first span: s = 0
    if (m == -INFINITY) return;  // nothing inside the vocabulary yet
    float m2 = m * FUSED_LCE_LOG2E;
    #pragma unroll
    for (int k = 0; k < NV; k++) {
        s += exp2f(fmaf(v[k], FUSED_LCE_LOG2E, -m2));
        if (SUM && v[k] != -INFINITY) sum += v[k];
    }
}

// One thread's share of a block-wide fold over the logits z[0, valid) of a row (fp32 or bf16; readable,
// 16-byte aligned, up to the next multiple of 8): spans of 8 consecutive logits, thread i taking spans
// i, i + THREADS, ..., two spans a step with both loads issued before any arithmetic (these kernels
// wait on DRAM, not on the ALUs). Soft-capped when cap > 0. stage != NULL: the raw spans are also
// copied to stage[j] (shared memory), for a second pass that need not read DRAM again.
template <int THREADS, typename T>
__device__ __forceinline__ void fused_lce_fold_row(float& m, float& s, float& sum, const T* z, int valid, float cap,
                                                   float* stage) {
    const int stride = THREADS * 8;
    float inv_cap = cap > 0.0f ? 1.0f / cap : 0.0f;
    for (int j0 = threadIdx.x * 8; j0 < valid; j0 += 2 * stride) {
        float v[2][8];
        fused_lce_load8(v[0], z + j0);
        if (j0 + stride < valid) fused_lce_load8(v[1], z + j0 + stride);
        if (stage) {
            for (int k = 0; k < 8; k++) stage[j0 + k] = v[0][k];
            if (j0 + stride < valid) for (int k = 0; k < 8; k++) stage[j0 + stride + k] = v[1][k];
        }
        for (int u = 0; u < 2; u++) {
            int j = j0 + u * stride;
            for (int k = 0; k < 8; k++) {
                if (cap > 0.0f) v[u][k] = cap * fused_lce_tanh(v[u][k] * inv_cap);
                if (j + k >= valid) v[u][k] = -INFINITY;  // padded columns, and a second span past the end
            }
            fused_lce_fold<8>(m, s, sum, v[u]);
        }
    }
}

// Block-wide reduction of (max, sum of exp relative to max, plain sum) triples.
__device__ void fused_lce_block_reduce(float* m, float* s, float* sum) {
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
__device__ __forceinline__ int fused_lce_ignored(int t, const FusedLceOptions& opt, int V) {
    return t == opt.ignore_index || t < 0 || t >= V;
}

// The loss of a row that counts, from its lse, target s_t and Σ_j s_j
__device__ __forceinline__ float fused_lce_row_loss(float lse, float st, float sum, const FusedLceOptions& opt, int V) {
    float eps = opt.label_smoothing;
    return lse - (1.0f - eps) * st - (eps / V) * sum + opt.z_loss * lse * lse;
}

// The target's logit s_t = x_row · W_t of a row that counts, by the 32 lanes of a warp in fp32 (as the
// GEMMs accumulate), soft-capped like every other logit; every lane gets it. The finish kernels of the
// fused forward and of the staged path take the target from here rather than from their tiles, which
// never keep single logits.
__device__ __forceinline__ float fused_lce_target_logit(const bf16* x, const bf16* W, int row, int t, int C, int lane,
                                                        const FusedLceOptions& opt) {
    const bf16* xr = x + (size_t)row * C;
    const bf16* wr = W + (size_t)t * C;
    float dot = 0.0f;
    for (int k = lane; k < C; k += 32) dot += __bfloat162float(xr[k]) * __bfloat162float(wr[k]);
    dot = warp_reduce_sum(dot);
    if (opt.softcap > 0.0f) dot = opt.softcap * fused_lce_tanh(dot / opt.softcap);
    return dot;
}

// What the gradient of one row needs: dL/ds_j = scale·(p_j·(1 + 2·z_loss·lse) − (1−ε)·[j=t] − ε/V),
// times ds/dz = 1 − tanh² under softcap. scale = 0 for rows that do not count.
typedef struct {
    float lse2, pscale, smooth, target_w, cap, inv_cap;  // lse2 = lse·log2(e): p_j = 2^(s_j·log2(e) − lse2)
    int t;
} FusedLceRowGrad;

// scale: the row's upstream gradient (dloss / N_valid in training), or 0 when the row is ignored
__device__ __forceinline__ FusedLceRowGrad fused_lce_row_grad(float lse, int t, float scale, const FusedLceOptions& opt, int V) {
    FusedLceRowGrad g;
    g.lse2 = lse * FUSED_LCE_LOG2E;
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
__device__ __forceinline__ float fused_lce_dlogit(const FusedLceRowGrad& g, float z, int j) {
    float sv = z, dsdz = 1.0f;
    if (CAP && g.cap > 0.0f) { float th = fused_lce_tanh(z * g.inv_cap); sv = g.cap * th; dsdz = 1.0f - th * th; }
    float d = g.pscale * exp2f(fmaf(sv, FUSED_LCE_LOG2E, -g.lse2)) - g.smooth;
    if (TARGET && j == g.t) d -= g.target_w;
    return CAP ? d * dsdz : d;
}
