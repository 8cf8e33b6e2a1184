// fused_lce_staged.cuh: the LM head's path "staged" (Hopper): rows in chunks whose exponentials are
// staged in the scratch as bf16, one logits GEMM per row and no pass over the chunk between the GEMMs:
// 3F of tensor-core work for a training step, and the chunk written once and read twice.
//
// The idea. A row's gradient is G_j = scale·(k·p_j − (1−ε)·[j=t] − ε/V)·c_j with p_j = exp(s_j − lse),
// k = 1 + 2·z_loss·lse and c_j = 1 − (s_j/softcap)² (1 without soft-capping). lse needs the whole row,
// so G cannot be formed while the logits are computed; but with any per-row reference R known before
// the GEMM,
//     G_j = α · E_j,   E_j = exp(s_j − R)·c_j,   α = scale·k·exp(R − lse),
// except for the target column and the ε/V term. So the logits GEMM's epilogue stores E (bf16: the
// one rounding the gradient gets anyway) and the rows' softmax statistics; once lse is known, one
// element per row is patched (E_t such that α·E_t is the target's G_t) and α goes where a per-row
// scalar costs nothing: dx = α ⊙ (E · W) is scaled row by row after the GEMM, and dW += Eᵀ · (α ⊙ x)
// takes x scaled by its row's α. The ε/V term is a rank-one correction of both. R is the row's mean
// logit, x · mean_v(W_v), a GEMV before the chunks: the largest logit is at or above it, so E never
// underflows where it matters (E_j >= p_j), and it overflows only when lse − R > 60 (a softmax so peaked
// that e^60 separates it from the mean). Such a row raises a flag, and the chunk is staged again relative
// to each row's lse (E_j = p_j·c_j <= 1): two more logits GEMMs for that chunk only.
//
// Per chunk of n rows (x_c, the chunk's rows of x):
//   1. stage (wgmma, ping-pong, 64 x 256 tiles): E (n, Vp) bf16, TMA-stored; per (row, 256-column tile)
//      the statistics (R, Σ exp(s − R), Σ s): one exp per logit, no max
//   2. finish (a warp per row): lse, the loss, the target's s_t; the flag
//   3. only when flagged: the statistics again relative to each tile's max (a sum past fp32's range
//      when a logit lies ~88 above R), the finish again, and E relative to lse
//   4. prep (a warp per row): α, x' = bf16(α ⊙ x_c), E_t patched
//   5. dx_c = α ⊙ (E · W) (+ the ε/V term): cuBLASLt into fp32 (n, C), then scaled into bf16
//   6. dW += Eᵀ · x'                                   cuBLASLt, beta = 1
// and once per call, with label smoothing, dW_j −= (ε/V)·Σ_r scale_r·x_r for every j < V.
// Bytes per logit: 2 written by the stage, 2 read by each GEMM; dW (fp32) read and written once per
// chunk, so chunks of thousands of rows (the scratch sized for them) keep that sweep small.
// Not for soft-capping together with label smoothing (ε/V·c_j is not of the form α·E_j): the blocks run it.
#pragma once
#include "../layers/matmul.cuh"
#include "fused_lce_common.cuh"
#include "fused_lce_sm90.cuh"

#define FUSED_LCE_STAGED_GAP 60.0f    // lse − R above which a row is staged again relative to its lse
#define FUSED_LCE_STAGED_ROW_ALIGN 64  // chunk rows: a multiple of the stage's tile rows

typedef struct {
    int rows;        // rows per chunk
    int vtiles;      // 256-column tiles of the vocabulary (Vp)
    bf16* E;         // (rows, Vp) the chunk's staged exponentials, then the gradient's bf16 factor
    bf16* xs;        // (rows, C) x' = α ⊙ x_c
    float* dx32;     // (rows, C) E · W before its rows are scaled
    float* part;     // (rows, vtiles, 3) statistics per row and tile
    float* ref;      // (max_n) each row's reference R
    float* alpha;    // (rows) α
    float* st;       // (rows) the target's s_t
    float* wmean;    // (C) mean of W's rows j < V; then, with label smoothing, Σ_r scale_r·x_r
    float* wpart;    // (FUSED_LCE_WMEAN_SPLITS, C) partial sums of wmean
    int* flag;       // (1) this chunk is staged again
    size_t bytes;    // all of the above
} FusedLceStaged;

#define FUSED_LCE_WMEAN_SPLITS 64

// What the stage kernel needs beside its tensor maps
typedef struct {
    const float* ref;  // (n) the chunk's references (restage: its lse)
    float* part;       // (n, vtiles, 3), not written by the restage
    int vtiles;
    const int* flag;   // restage: does nothing unless *flag
    int r0, n, C, V, Vp;
    float softcap;
} FusedLceStageArgs;

// --- kernels ---------------------------------------------------------------------------------

// What a launch of the stage kernel does:
//   FUSED_LCE_STAGE_REF      E relative to each row's reference R, one exp per logit and no max: the
//                            statistics are (R, Σ exp(s − R), Σ s), exact unless a logit lies ~88
//                            above R (the sum overflows, lse is inf, and the finish flags the chunk)
//   FUSED_LCE_STAGE_MAX      only when flagged: the statistics relative to each tile's max, exact
//                            whatever R is (E as REF's; the restage replaces it)
//   FUSED_LCE_STAGE_RESTAGE  only when flagged: E relative to lse, no statistics
enum { FUSED_LCE_STAGE_REF = 0, FUSED_LCE_STAGE_MAX, FUSED_LCE_STAGE_RESTAGE };

#if !defined(__CUDA_ARCH__) || defined(WG_DEVICE_CODE)
// One consumer's 64 x 256 tile: E of this warp's 16 rows into the staging buffer at `out` (stmatrix,
// swizzled for the TMA store), and unless RESTAGE each row's statistics over the tile into part (Σ s
// only with SUM: label smoothing's loss needs it). Register layout as in fused_lce_wgmma_grad_tile
// (fused_lce_sm90.cuh): this thread's rows row0 and row0 + 8 (within the chunk), its columns c0 + 8j + e.
// FULL: every column of the tile is < V. Per logit on the REF launch: an FMA, an exp, one or two adds and
// half a conversion; the max and the rescaling of the MAX launch cost two more.
template <bool CAP, bool FULL, int MODE, bool SUM>
__device__ __forceinline__ void fused_lce_stage_tile(float d[128], uint32_t out, int warp, int lane, int row0, int c0, int vt,
                                                     const FusedLceStageArgs& a) {
    constexpr bool MAX = MODE == FUSED_LCE_STAGE_MAX, STATS = MODE != FUSED_LCE_STAGE_RESTAGE;
    float cap = a.softcap, inv_cap = CAP ? 1.0f / cap : 0.0f;
    // MAX: s_j (soft-capped, over d) and each row's max over the tile (-inf where no column is < V)
    float mx[2] = {-INFINITY, -INFINITY};
    if constexpr (MAX) {
        #pragma unroll
        for (int j = 0; j < 32; j++)
            #pragma unroll
            for (int h = 0; h < 2; h++)
                #pragma unroll
                for (int e = 0; e < 2; e++) {
                    float s = d[4 * j + 2 * h + e];
                    if (CAP) { s = cap * fused_lce_tanh(s * inv_cap); d[4 * j + 2 * h + e] = s; }
                    if (FULL || c0 + 8 * j + e < a.V) mx[h] = fmaxf(mx[h], s);
                }
    }
    // E_j = exp(s_j − R). MAX: p_j = exp(s_j − m) with m the tile's max, E_j = p_j · exp(m − R), so that
    // the statistics (m, Σ p_j, Σ s_j) are exact whatever R is. RESTAGE: R = lse (a.ref holds it).
    float m2[2], f[2], acc[2] = {0.0f, 0.0f}, su[2] = {0.0f, 0.0f};
    #pragma unroll
    for (int h = 0; h < 2; h++) {
        if (MAX)
            #pragma unroll
            for (int o = 1; o <= 2; o <<= 1) mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], o));
        float R = row0 + 8 * h < a.n ? a.ref[row0 + 8 * h] : 0.0f;
        float m = !MAX || mx[h] == -INFINITY ? R : mx[h];
        mx[h] = m;  // the statistics' reference
        m2[h] = m * FUSED_LCE_LOG2E;
        f[h] = MAX ? exp2f((m - R) * FUSED_LCE_LOG2E) : 1.0f;
    }
    int i = lane / 8, trow = warp * 16 + 8 * (i % 2) + lane % 8;  // as fused_lce_wgmma_grad_tile's stmatrix
    #pragma unroll
    for (int j = 0; j < 32; j += 2) {
        uint32_t r[4];
        #pragma unroll
        for (int q = 0; q < 4; q++) {
            int jj = j + q / 2, h = q % 2, col = c0 + 8 * jj;
            float ev[2];
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                float s = d[4 * jj + 2 * h + e];
                if (CAP && !MAX) s = cap * fused_lce_tanh(s * inv_cap);
                float p = exp2f(fmaf(s, FUSED_LCE_LOG2E, -m2[h]));
                if (!FULL && col + e >= a.V) { p = 0.0f; s = 0.0f; }
                if (STATS) acc[h] += p;
                if (STATS && SUM) su[h] += s;
                float x = MAX ? p * f[h] : p;
                if (CAP) { float th = s * inv_cap; x *= 1.0f - th * th; }
                ev[e] = x;
            }
            __nv_bfloat162 pr = __floats2bfloat162_rn(ev[0], ev[1]);
            r[q] = *(uint32_t*)&pr;
        }
        stmatrix_x4(fused_lce_stage_addr(out, trow, 8 * (j + i / 2)), r[0], r[1], r[2], r[3]);
    }
    if constexpr (STATS) {
        #pragma unroll
        for (int h = 0; h < 2; h++) {
            #pragma unroll
            for (int o = 1; o <= 2; o <<= 1) {  // the 4 lanes that share a row
                acc[h] += __shfl_xor_sync(0xffffffffu, acc[h], o);
                if (SUM) su[h] += __shfl_xor_sync(0xffffffffu, su[h], o);
            }
            int row = row0 + 8 * h;
            if (lane % 4 == 0 && row < a.n) {
                float* p = a.part + ((size_t)row * a.vtiles + vt) * 3;
                p[0] = mx[h]; p[1] = acc[h]; p[2] = su[h];
            }
        }
    }
}
#endif

#if !defined(__CUDA_ARCH__) || defined(WG_DEVICE_CODE)
// The stage kernel's epilogue for fused_lce_pingpong_tiles: fused_lce_stage_tile of the tile
template <bool CAP, int MODE, bool SUM>
struct FusedLceStageEpilogue {
    const FusedLceStageArgs& a;
    __device__ __forceinline__ void start() {}
    __device__ __forceinline__ void operator()(float d[128], uint32_t out, int warp, int lane, int row0, int c0, int cb,
                                               int vt) {
        if (cb + WG_BN <= a.V) fused_lce_stage_tile<CAP, true, MODE, SUM>(d, out, warp, lane, row0, c0, vt, a);
        else fused_lce_stage_tile<CAP, false, MODE, SUM>(d, out, warp, lane, row0, c0, vt, a);
    }
};
#endif

// E (n, Vp) bf16 of rows r0 .. r0+n-1 through te (boxes of 64 x 64, clipped to n x Vp), on the
// ping-pong walk of the gradient kernel of fused_lce_sm90.cuh (fused_lce_pingpong_tiles: one
// consumer's epilogue beside the other's K loop); columns V .. Vp-1 are written as zeros. MODE as
// above: the MAX and RESTAGE launches do nothing unless *a.flag (launched after the finish, without
// PDL: the flag is read first).
template <bool CAP, int MODE, bool SUM>
__global__ void __launch_bounds__(WG_THREADS, 1)
fused_lce_stage_kernel(const __grid_constant__ CUtensorMap tx, const __grid_constant__ CUtensorMap tw,
                       const __grid_constant__ CUtensorMap te, FusedLceStageArgs a) {
#if defined(WG_DEVICE_CODE)
    if (MODE != FUSED_LCE_STAGE_REF && *a.flag == 0) return;
    FusedLceStageEpilogue<CAP, MODE, SUM> epi = {a};
    fused_lce_pingpong_tiles(&tx, &tw, &te, a.r0, a.n, 0, a.Vp, a.C, epi);
#endif
}

// Partial column sums over a split of the rows of A (rows, C) bf16, a fixed order: part[split][c] =
// Σ_r w_r·A[r][c] over the split's rows. Weighted (the label-smoothing term of dW): w_r is row r's
// upstream gradient, 0 where it does not count; else w_r = 1 (the mean of W's rows j < V).
__global__ void fused_lce_colsum_part_kernel(float* part, const bf16* A, int rows, int C, int weighted, const int* targets,
                                             const int* n_valid, const float* dloss_rows, float dloss, int V,
                                             FusedLceOptions opt) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, split = blockIdx.y;
    if (c >= C) return;
    int per = ceil_div(rows, FUSED_LCE_WMEAN_SPLITS), r0 = split * per, r1 = min(rows, r0 + per);
    float scale = 1.0f;
    if (weighted && !dloss_rows) { int nv = *n_valid; scale = nv > 0 ? dloss / nv : 0.0f; }
    float acc = 0.0f;
    for (int r = r0; r < r1; r++) {
        float w = 1.0f;
        if (weighted) w = fused_lce_ignored(targets[r], opt, V) ? 0.0f : (dloss_rows ? dloss_rows[r] : scale);
        acc += w * __bfloat162float(A[(size_t)r * C + c]);
    }
    part[(size_t)split * C + c] = acc;
}

// out[c] = Σ_split part[split][c] · mul
__global__ void fused_lce_colsum_kernel(float* out, const float* part, int C, float mul) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.0f;
    for (int s = 0; s < FUSED_LCE_WMEAN_SPLITS; s++) acc += part[(size_t)s * C + c];
    out[c] = acc * mul;
}

// A warp per row: ref[row] = R = x_row · wmean (the mean logit), soft-capped like the logits
__global__ void fused_lce_ref_kernel(float* ref, const bf16* x, const float* wmean, int N, int C, float softcap) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const bf16* xr = x + (size_t)row * C;
    float acc = 0.0f;
    for (int k = lane; k < C; k += 32) acc += __bfloat162float(xr[k]) * wmean[k];
    acc = warp_reduce_sum(acc);
    if (softcap > 0.0f) acc = softcap * fused_lce_tanh(acc / softcap);
    if (lane == 0) ref[row] = acc;
}

// A warp per row of the chunk: the tiles' statistics merged (a fixed order) into lse; the target's s_t
// by an fp32 dot product (as the fused forward); the loss; the flag when lse − R > FUSED_LCE_STAGED_GAP (or
// is not finite), for every row, ignored ones too, whose E must stay finite. gate: NULL, or run only
// when *gate (the second finish of a flagged chunk).
__global__ void fused_lce_staged_finish_kernel(float* loss_rows, float* lse_out, float* st_out, int* flag, const int* gate,
                                               const float* part, const float* ref, const bf16* x, const bf16* W,
                                               const int* targets, int n, int vtiles, int C, int V, FusedLceOptions opt) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= n || (gate && *gate == 0)) return;
    float m = -INFINITY, s = 0.0f, sum = 0.0f;
    for (int vt = lane; vt < vtiles; vt += 32) {
        const float* p = part + ((size_t)row * vtiles + vt) * 3;
        lse_merge(m, s, p[0], p[1]);
        sum += p[2];
    }
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
        lse_merge(m, s, m2, s2);
    }
    float lse = m + logf(s);
    int t = targets[row], ignored = fused_lce_ignored(t, opt, V);
    float dot = 0.0f;
    if (!ignored) dot = fused_lce_target_logit(x, W, row, t, C, lane, opt);
    if (lane == 0) {
        lse_out[row] = lse;
        st_out[row] = dot;
        loss_rows[row] = ignored ? 0.0f : fused_lce_row_loss(lse, dot, sum, opt, V);
        if (!(lse - ref[row] <= FUSED_LCE_STAGED_GAP)) atomicOr(flag, 1);
    }
}

// A warp per row of the chunk: α (0 for rows that do not count), x' = bf16(α·x), and E_t patched so that
// α·E_t = scale·(k·p_t − (1−ε))·c_t. R is the row's reference, or its lse when the chunk was restaged.
__global__ void fused_lce_staged_prep_kernel(bf16* xs, float* alpha, bf16* E, int Vp, const float* lse, const float* st,
                                             const float* ref, const int* flag, const bf16* x, const int* targets,
                                             const int* n_valid, const float* dloss_rows, float dloss, int n, int C,
                                             int V, FusedLceOptions opt) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= n) return;
    int t = targets[row], ignored = fused_lce_ignored(t, opt, V), nv = *n_valid;
    float scale = ignored ? 0.0f : (dloss_rows ? dloss_rows[row] : (nv > 0 ? dloss / nv : 0.0f));
    float L = lse[row], R = *flag ? L : ref[row], k = 1.0f + 2.0f * opt.z_loss * L;
    float a = scale == 0.0f ? 0.0f : scale * k * expf(R - L);
    if (lane == 0) alpha[row] = a;
    const bf16* xr = x + (size_t)row * C;
    bf16* xo = xs + (size_t)row * C;
    for (int c = 8 * lane; c < C; c += 256) {
        float v[8];
        Bf16x8 in = load128(xr + c);
        for (int q = 0; q < 8; q++) v[q] = a * bf16x8_get(in, q);
        store128(xo + c, bf16x8_from_floats(v));
    }
    if (lane == 0 && scale != 0.0f) {
        float s = st[row], cf = 1.0f;
        if (opt.softcap > 0.0f) { float th = s / opt.softcap; cf = 1.0f - th * th; }
        float e = (expf(s - R) - (1.0f - opt.label_smoothing) * expf(L - R) / k) * cf;
        E[(size_t)row * Vp + t] = __float2bfloat16(e);
    }
}

// dx (n, C) bf16 = α ⊙ dx32 − scale·(ε/V)·Σ_j W_j (wsum = V·wmean; label smoothing without soft-capping)
__global__ void fused_lce_staged_dx_kernel(bf16* dx, const float* dx32, const float* alpha, const float* wmean,
                                           const int* targets, const int* n_valid, const float* dloss_rows, float dloss,
                                           int n, int C, int V, FusedLceOptions opt) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i >= (size_t)n * C) return;
    int row = (int)(i / C), c = (int)(i % C);
    float a = alpha[row], sm = 0.0f;
    if (opt.label_smoothing > 0.0f && !fused_lce_ignored(targets[row], opt, V)) {
        int nv = *n_valid;
        float scale = dloss_rows ? dloss_rows[row] : (nv > 0 ? dloss / nv : 0.0f);
        sm = scale * opt.label_smoothing;  // (ε/V)·Σ_j W_j = ε·wmean
    }
    float v[8];
    for (int q = 0; q < 8; q++) v[q] = a * dx32[i + q] - (sm != 0.0f ? sm * wmean[c + q] : 0.0f);
    store128(dx + i, bf16x8_from_floats(v));
}

// Label smoothing: dW_j −= (ε/V)·u for every j < V
__global__ void fused_lce_staged_dw_smooth_kernel(float* dW, const float* u, int C, int V, float eps) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)V * C) return;
    dW[i] -= eps / V * u[i % C];
}

// --- launchers -------------------------------------------------------------------------------

// Chunk rows for max_n rows within `budget` bytes: 0 when fewer than FUSED_LCE_STAGED_ROW_ALIGN fit. The
// per-row bytes: E (2·Vp), x' and dx32 (6·C), statistics (12 per 256 columns), α and s_t.
static inline size_t fused_lce_staged_row_bytes(int C, int Vp) {
    return (size_t)Vp * 2 + (size_t)C * 6 + (size_t)ceil_div(Vp, WG_BN) * 12 + 8;
}

// The bytes that do not grow with the chunk: each row's reference R (max_n floats), W's mean and its
// partial sums ((FUSED_LCE_WMEAN_SPLITS + 1)·C floats), and 256 for the flag and the allocations' rounding.
static inline size_t fused_lce_staged_fixed_bytes(int max_n, int C) {
    return (size_t)max_n * 4 + (size_t)C * 4 * (FUSED_LCE_WMEAN_SPLITS + 1) + 256;
}

// The budget whose chunks hold `rows` rows (fused_lce_staged_rows gives them back)
static inline size_t fused_lce_staged_budget(int rows, int max_n, int C, int Vp) {
    return (size_t)rows * fused_lce_staged_row_bytes(C, Vp) + fused_lce_staged_fixed_bytes(max_n, C);
}

static inline int fused_lce_staged_rows(int max_n, int C, int Vp, size_t budget) {
    size_t fixed = fused_lce_staged_fixed_bytes(max_n, C);
    if (budget <= fixed) return 0;
    size_t rows = (budget - fixed) / fused_lce_staged_row_bytes(C, Vp);
    size_t all = (size_t)ceil_div(max_n, FUSED_LCE_STAGED_ROW_ALIGN) * FUSED_LCE_STAGED_ROW_ALIGN;
    if (rows >= all) return (int)all;
    if (rows < FUSED_LCE_STAGED_ROW_ALIGN) return 0;
    // equal chunks: as few as fit, each a multiple of the alignment
    int chunks = (int)ceil_div((int)(all / FUSED_LCE_STAGED_ROW_ALIGN), (int)(rows / FUSED_LCE_STAGED_ROW_ALIGN));
    return ceil_div(max_n, chunks * FUSED_LCE_STAGED_ROW_ALIGN) * FUSED_LCE_STAGED_ROW_ALIGN;
}

typedef void (*FusedLceStageKernel)(const CUtensorMap, const CUtensorMap, const CUtensorMap, FusedLceStageArgs);

// The stage kernel of a launch: soft-capping or not, Σ s (label smoothing) or not; never both, which the
// blocks run
template <int MODE>
static inline FusedLceStageKernel fused_lce_stage_kernel_for(int cap, int sum) {
    return cap ? fused_lce_stage_kernel<true, MODE, false>
               : sum ? fused_lce_stage_kernel<false, MODE, true> : fused_lce_stage_kernel<false, MODE, false>;
}

// Once per process, as fused_lce_wgmma_setup: the stage kernels' shared memory
static inline void fused_lce_staged_setup(void) {
    for (int k = 0; k < 3; k++) {
        int cap = k == 1, sum = k == 2;
        FusedLceStageKernel kernels[] = {fused_lce_stage_kernel_for<FUSED_LCE_STAGE_REF>(cap, sum),
                                     fused_lce_stage_kernel_for<FUSED_LCE_STAGE_MAX>(cap, sum),
                                     fused_lce_stage_kernel_for<FUSED_LCE_STAGE_RESTAGE>(cap, 0)};
        for (FusedLceStageKernel f : kernels)
            cuda_check(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, FUSED_LCE_GRAD_SMEM));
    }
}

// Allocates the chunk buffers for `rows` rows per chunk (fused_lce_staged_rows) and max_n rows per call
static inline size_t fused_lce_staged_build(FusedLceStaged* s, int rows, int max_n, int C, int Vp) {
    memset(s, 0, sizeof(*s));
    s->rows = rows;
    s->vtiles = ceil_div(Vp, WG_BN);
    size_t sizes[] = {(size_t)rows * Vp * 2, (size_t)rows * C * 2, (size_t)rows * C * 4,
                      (size_t)s->vtiles * rows * 12, (size_t)max_n * 4, (size_t)rows * 4, (size_t)rows * 4,
                      (size_t)C * 4, (size_t)FUSED_LCE_WMEAN_SPLITS * C * 4, 16};
    void** ptrs[] = {(void**)&s->E, (void**)&s->xs, (void**)&s->dx32, (void**)&s->part, (void**)&s->ref,
                     (void**)&s->alpha, (void**)&s->st, (void**)&s->wmean, (void**)&s->wpart, (void**)&s->flag};
    for (int i = 0; i < 10; i++) {
        cuda_check(cudaMalloc(ptrs[i], sizes[i]));
        s->bytes += sizes[i];
    }
    cuda_check(cudaMemset(s->flag, 0, sizeof(int)));
    cuda_check(cudaDeviceSynchronize());  // the memset ran on the legacy stream
    fused_lce_staged_setup();
    return s->bytes;
}

static inline void fused_lce_staged_free(FusedLceStaged* s) {
    void* ptrs[] = {s->E, s->xs, s->dx32, s->part, s->ref, s->alpha, s->st, s->wmean, s->wpart, s->flag};
    for (int i = 0; i < 10; i++) cuda_check(cudaFree(ptrs[i]));
}

// r's loss_rows and lse of every row, dx written and dW accumulated (r->dx is never NULL here: loss-only
// calls take the fused forward). Needs C % 64 == 0, an sm_90a build on Hopper, and not soft-capping with
// label smoothing together.
static void fused_lce_staged_run(const FusedLceStaged* s, const FusedLceRun* r, const GpuContext* ctx) {
    float *loss_rows = r->loss_rows, *lse = r->lse, *dW = r->dW, dloss = r->dloss;
    bf16* dx = r->dx;
    const float* dloss_rows = r->dloss_rows;
    const int *n_valid = r->n_valid, *targets = r->targets;
    const bf16 *x = r->x, *W = r->W;
    int N = r->N, C = r->C, V = r->V, Vp = r->Vp;
    FusedLceOptions opt = r->opt;
    cudaStream_t st = ctx->stream;
    int cap = opt.softcap > 0.0f, sum = opt.label_smoothing > 0.0f;
    dim3 cgrid(ceil_div(C, 128), FUSED_LCE_WMEAN_SPLITS);
    fused_lce_colsum_part_kernel<<<cgrid, 128, 0, st>>>(s->wpart, W, V, C, 0, NULL, NULL, NULL, 0.0f, V, opt);
    cuda_check_launch();
    fused_lce_colsum_kernel<<<ceil_div(C, 128), 128, 0, st>>>(s->wmean, s->wpart, C, 1.0f / V);
    cuda_check_launch();
    fused_lce_ref_kernel<<<ceil_div(N, 8), 256, 0, st>>>(s->ref, x, s->wmean, N, C, opt.softcap);
    cuda_check_launch();
    profile_mark(ctx->prof, "head: other", st);
    CUtensorMap tx = tma_map_bf16(x, N, C, C, FUSED_LCE_GRAD_ROWS), tw = tma_map_bf16(W, Vp, C, C, WG_BN);
    for (int r0 = 0; r0 < N; r0 += s->rows) {
        int n = N - r0 < s->rows ? N - r0 : s->rows;
        CUtensorMap te = tma_map_bf16(s->E, n, Vp, Vp, FUSED_LCE_GRAD_ROWS);
        int tiles = ceil_div(n, FUSED_LCE_GRAD_ROWS) * s->vtiles, grid = tiles < ctx->sm_count ? tiles : ctx->sm_count;
        FusedLceStageArgs a = {s->ref + r0, s->part, s->vtiles, s->flag, r0, n, C, V, Vp, opt.softcap};
        auto finish = [&](const int* gate) {  // the finish of the chunk; gate: run only when *gate
            fused_lce_staged_finish_kernel<<<ceil_div(n, 8), 256, 0, st>>>(loss_rows + r0, lse + r0, s->st, s->flag, gate,
                                                                           s->part, s->ref + r0, x + (size_t)r0 * C, W,
                                                                           targets + r0, n, s->vtiles, C, V, opt);
            cuda_check_launch();
        };
        launch_pdl(fused_lce_stage_kernel_for<FUSED_LCE_STAGE_REF>(cap, sum), grid, WG_THREADS, FUSED_LCE_GRAD_SMEM, st, tx, tw, te, a);
        profile_mark(ctx->prof, "head: stage", st);
        finish(NULL);
        // a flagged chunk (launches that return at once otherwise): its statistics again, relative to
        // each tile's max; lse and the loss from them; E relative to lse
        fused_lce_stage_kernel_for<FUSED_LCE_STAGE_MAX>(cap, sum)<<<grid, WG_THREADS, FUSED_LCE_GRAD_SMEM, st>>>(tx, tw, te, a);
        cuda_check_launch();
        finish(s->flag);
        FusedLceStageArgs ra = {lse + r0, NULL, s->vtiles, s->flag, r0, n, C, V, Vp, opt.softcap};
        fused_lce_stage_kernel_for<FUSED_LCE_STAGE_RESTAGE>(cap, 0)<<<grid, WG_THREADS, FUSED_LCE_GRAD_SMEM, st>>>(tx, tw, te, ra);
        cuda_check_launch();
        fused_lce_staged_prep_kernel<<<ceil_div(n, 8), 256, 0, st>>>(s->xs, s->alpha, s->E, Vp, lse + r0, s->st, s->ref + r0,
                                                               s->flag, x + (size_t)r0 * C, targets + r0, n_valid,
                                                               dloss_rows ? dloss_rows + r0 : NULL, dloss, n, C, V, opt);
        cuda_check_launch();
        cuda_check(cudaMemsetAsync(s->flag, 0, sizeof(int), st));  // for the next chunk (zero since the build)
        profile_mark(ctx->prof, "head: finish", st);
        matmul(ctx, s->dx32, CUDA_R_32F, C, s->E, Vp, 0, W, C, 0, n, C, Vp, 1.0f, 0.0f);
        fused_lce_staged_dx_kernel<<<ceil_div(n * C / 8, 256), 256, 0, st>>>(dx + (size_t)r0 * C, s->dx32, s->alpha, s->wmean,
                                                                       targets + r0, n_valid,
                                                                       dloss_rows ? dloss_rows + r0 : NULL, dloss, n,
                                                                       C, V, opt);
        cuda_check_launch();
        profile_mark(ctx->prof, "head: dx GEMM", st);
        matmul(ctx, dW, CUDA_R_32F, C, s->E, Vp, 1, s->xs, C, 0, Vp, C, n, 1.0f, 1.0f);
        profile_mark(ctx->prof, "head: dW GEMM", st);
    }
    if (opt.label_smoothing > 0.0f) {  // wmean's buffer is free now: u
        fused_lce_colsum_part_kernel<<<cgrid, 128, 0, st>>>(s->wpart, x, N, C, 1, targets, n_valid, dloss_rows, dloss, V, opt);
        cuda_check_launch();
        fused_lce_colsum_kernel<<<ceil_div(C, 128), 128, 0, st>>>(s->wmean, s->wpart, C, 1.0f);
        cuda_check_launch();
        fused_lce_staged_dw_smooth_kernel<<<(unsigned)ceil_div((size_t)V * C, (size_t)256), 256, 0, st>>>(
            dW, s->wmean, C, V, opt.label_smoothing);
        cuda_check_launch();
        profile_mark(ctx->prof, "head: other", st);
    }
}
