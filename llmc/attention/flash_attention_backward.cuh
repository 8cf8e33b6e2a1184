// flash_attention_backward.cuh: the backward of llmc/attention/flash_attention.cuh (whose header comment has the
// algorithm, the tiling and the napkin math): three kernels, no atomics, bitwise repeatable.
//   dot:  D = rowsum(dO ∘ O) (B, NH, T) fp32 from the forward's bf16 out
//   dkdv: block per (b, kv head j, 64 keys) over the group's query heads and, for each, the query tiles
//         at or below the diagonal; writes dK, dV (sums over the group, in registers, a fixed order)
//   dq:   block per (b, h, 64 queries) over the key tiles up to the diagonal; writes dQ
// Both big kernels recompute P = exp(S − lse) from the saved lse; nothing (B, NH, T, T) exists.
// With RoPE (qkv holds the rotated q and k the forward left) they rotate dq and dk back before writing.
#pragma once
#include "flash_attention.cuh"

typedef struct {
    bf16* dqkv;        // (B, T, (NH + 2·NKV)·hs) assigned, qkv's layout
    float* D;          // (B, NH, T) scratch: rowsum(dO ∘ O)
    const bf16* dout;  // (B, T, NH·hs)
    const bf16* out;   // (B, T, NH·hs) the forward's output
    const bf16* qkv;   // (B, T, (NH + 2·NKV)·hs)
    const float* lse;  // (B, NH, T) from the forward
    const float* rope; // (>= T, hs/2, 2) RoPE's cos and sin, or NULL: as the forward had it
    int B, T, NH, NKV;
} FlashBwdArgs;

// --- kernels ---------------------------------------------------------------------------------

// D = rowsum(dO ∘ O): HS/8 lanes per (b, t, h) row, 16-byte loads; row r sits at r·HS in both.
template <int HS>
__global__ void flash_backward_dot_kernel(const FlashBwdArgs a) {
    constexpr int LPR = HS / 8;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, rows = (size_t)a.B * a.T * a.NH;
    size_t r = i / LPR;
    float acc = 0.0f;
    if (r < rows) {
        Bf16x8 x = load128(a.dout + i * 8), y = load128(a.out + i * 8);
        #pragma unroll
        for (int k = 0; k < 8; k++) acc += bf16x8_get(x, k) * bf16x8_get(y, k);
    }
    #pragma unroll
    for (int o = LPR / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (r < rows && i % LPR == 0) {
        int h = (int)(r % a.NH), t = (int)((r / a.NH) % a.T), b = (int)(r / ((size_t)a.NH * a.T));
        a.D[((size_t)b * a.NH + h) * a.T + t] = acc;
    }
}

// One dkdv step's loads into one buffer: query tile i (BQ rows) of query head h, its dO rows, and its
// lse·log2e (+inf past T) and D (0 past T).
template <int HS, int BQ>
__device__ __forceinline__ void fa_dkdv_load(bf16* sQ, bf16* sO, float* sL, float* sD, const bf16* q, size_t ld,
                                             const FlashBwdArgs& a, int b, int h, int i) {
    int T = a.T, n0 = i * BQ;
    size_t C = (size_t)a.NH * HS, bh = (size_t)b * a.NH + h;
    fa_load_tile<BQ, HS>(sQ, q, ld, n0, T);
    fa_load_tile<BQ, HS>(sO, a.dout + (size_t)b * T * C + h * HS, C, n0, T);
    for (int r = threadIdx.x; r < BQ; r += FA_THREADS) {
        int t = n0 + r;
        sL[r] = t < T ? a.lse[bh * T + t] * FA_LOG2E : INFINITY;
        sD[r] = t < T ? a.D[bh * T + t] : 0.0f;
    }
}

// Block per (b·NKV + j, key tile); key tile 0 (the most query tiles) first. Steps through the query
// heads h = j·G .. j·G + G − 1 (G = NH/NKV) in order and, for each, its query tiles from the diagonal
// down; the double buffer runs on across the change of head. Writes dK and dV of kv head j.
template <int HS, bool ROPE>
__global__ void __launch_bounds__(FA_THREADS) flash_backward_dkdv_kernel(const FlashBwdArgs a) {
    constexpr int LD = FaCfg<HS>::LD, BQ = FaCfg<HS>::BQ_DKV;
    extern __shared__ __align__(16) unsigned char fa_smem[];
    bf16* sK = (bf16*)fa_smem;        // (BKV, LD)
    bf16* sV = sK + FA_BKV * LD;      // (BKV, LD)
    bf16* sQ = sV + FA_BKV * LD;      // (2, BQ, LD)
    bf16* sO = sQ + 2 * BQ * LD;      // (2, BQ, LD) dO
    float* sL = (float*)(sO + 2 * BQ * LD);  // (2, BQ) lse·log2e, +inf past T
    float* sD = sL + 2 * BQ;                 // (2, BQ) D, 0 past T
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int bj = blockIdx.y, b = bj / a.NKV, j = bj % a.NKV, T = a.T, G = a.NH / a.NKV;
    int k0 = blockIdx.x * FA_BKV, i0 = k0 / BQ, nq = ceil_div(T, BQ);
    FaHeads g = fa_heads<HS>(a.qkv, a.NH, a.NKV, T, b, j * G, j);
    float sl2 = rsqrtf((float)HS) * FA_LOG2E;

    fa_load_tile<FA_BKV, HS>(sK, g.k, g.ld, k0, T);
    fa_load_tile<FA_BKV, HS>(sV, g.v, g.ld, k0, T);
    int nper = nq - i0, nsteps = G * nper, i = i0;  // i: this step's query tile
    fa_dkdv_load<HS, BQ>(sQ, sO, sL, sD, g.q, g.ld, a, b, j * G, i0);
    cp_async_commit();
    float dk[HS / 8][4], dv[HS / 8][4];
    #pragma unroll
    for (int n = 0; n < HS / 8; n++)
        #pragma unroll
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;
    for (int step = 0; step < nsteps; step++) {
        int buf = step & 1;
        __syncthreads();  // every warp is done with buffer buf ^ 1 (read at the previous step)
        if (step + 1 < nsteps) {
            int nb = buf ^ 1, gh = (step + 1) / nper, in = i0 + (step + 1) % nper;
            fa_dkdv_load<HS, BQ>(sQ + nb * BQ * LD, sO + nb * BQ * LD, sL + nb * BQ, sD + nb * BQ,
                                 g.q + gh * HS, g.ld, a, b, j * G + gh, in);
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const bf16* tQ = sQ + buf * BQ * LD;
        const bf16* tO = sO + buf * BQ * LD;
        const float* tL = sL + buf * BQ;
        const float* tD = sD + buf * BQ;
        int q0 = i * BQ, diag = q0 < k0 + FA_BKV;

        float p[BQ / 8][4], dp[BQ / 8][4];  // Pᵀ, dPᵀ: this warp's 16 keys x BQ queries
        #pragma unroll
        for (int n = 0; n < BQ / 8; n++)
            #pragma unroll
            for (int e = 0; e < 4; e++) p[n][e] = dp[n][e] = 0.0f;
        fa_gemm_abt<HS, BQ>(p, sK + warp * 16 * LD, tQ, lane);
        fa_gemm_abt<HS, BQ>(dp, sV + warp * 16 * LD, tO, lane);
        #pragma unroll
        for (int n = 0; n < BQ / 8; n++)
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                int qi = n * 8 + (lane & 3) * 2 + (e & 1), key = k0 + warp * 16 + (lane >> 2) + (e >> 1) * 8;
                float pv = exp2f(p[n][e] * sl2 - tL[qi]);
                if (diag && q0 + qi < key) pv = 0.0f;
                p[n][e] = pv;
                dp[n][e] = pv * (dp[n][e] - tD[qi]);  // dSᵀ
            }
        fa_gemm_pv<HS, BQ>(dv, p, tO, lane);
        fa_gemm_pv<HS, BQ>(dk, dp, tQ, lane);
        i = i + 1 == nq ? i0 : i + 1;
    }
    cp_async_wait<0>();
    if (ROPE) fa_rope_acc_back<HS>(dk, a.rope, k0 + warp * 16, T, lane);
    bf16* dst = a.dqkv + (g.k - a.qkv);  // dqkv has qkv's layout
    fa_store_rows<HS>(dst, g.ld, dk, rsqrtf((float)HS), k0 + warp * 16, T, lane);
    fa_store_rows<HS>(dst + a.NKV * HS, g.ld, dv, 1.0f, k0 + warp * 16, T, lane);
}

// Block per (b·NH + h, query tile), reading kv head h / (NH/NKV); a head's heaviest (last) query tile
// first (fa_grid). Writes dQ.
template <int HS, bool ROPE>
__global__ void __launch_bounds__(FA_THREADS) flash_backward_dq_kernel(const FlashBwdArgs a) {
    constexpr int LD = FaCfg<HS>::LD;
    extern __shared__ __align__(16) unsigned char fa_smem[];
    bf16* sQ = (bf16*)fa_smem;         // (BQ, LD)
    bf16* sO = sQ + FA_BQ * LD;        // (BQ, LD) dO
    bf16* sK = sO + FA_BQ * LD;        // (2, BKV, LD)
    bf16* sV = sK + 2 * FA_BKV * LD;   // (2, BKV, LD)
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int bh = blockIdx.y, b = bh / a.NH, h = bh % a.NH, T = a.T;
    int q0 = (gridDim.x - 1 - blockIdx.x) * FA_BQ;
    FaHeads g = fa_heads<HS>(a.qkv, a.NH, a.NKV, T, b, h, h / (a.NH / a.NKV));
    int nkv = ceil_div(min(q0 + FA_BQ, T), FA_BKV);
    float sl2 = rsqrtf((float)HS) * FA_LOG2E;
    size_t C = (size_t)a.NH * HS;

    fa_load_tile<FA_BQ, HS>(sQ, g.q, g.ld, q0, T);
    fa_load_tile<FA_BQ, HS>(sO, a.dout + (size_t)b * T * C + h * HS, C, q0, T);
    cp_async_commit();
    fa_load_tile<FA_BKV, HS>(sK, g.k, g.ld, 0, T);
    fa_load_tile<FA_BKV, HS>(sV, g.v, g.ld, 0, T);
    cp_async_commit();
    float lrow[2], drow[2];  // this thread's two query rows: lse·log2e (+inf past T) and D
    #pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        int q = q0 + warp * 16 + (lane >> 2) + hh * 8;
        lrow[hh] = q < T ? a.lse[(size_t)bh * T + q] * FA_LOG2E : INFINITY;
        drow[hh] = q < T ? a.D[(size_t)bh * T + q] : 0.0f;
    }
    float dq[HS / 8][4];
    #pragma unroll
    for (int n = 0; n < HS / 8; n++) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
    for (int j = 0; j < nkv; j++) {
        __syncthreads();
        if (j + 1 < nkv) {
            int nb = (j + 1) & 1;
            fa_load_tile<FA_BKV, HS>(sK + nb * FA_BKV * LD, g.k, g.ld, (j + 1) * FA_BKV, T);
            fa_load_tile<FA_BKV, HS>(sV + nb * FA_BKV * LD, g.v, g.ld, (j + 1) * FA_BKV, T);
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const bf16* tK = sK + (j & 1) * FA_BKV * LD;
        const bf16* tV = sV + (j & 1) * FA_BKV * LD;
        float p[FA_BKV / 8][4], dp[FA_BKV / 8][4];
        #pragma unroll
        for (int n = 0; n < FA_BKV / 8; n++)
            #pragma unroll
            for (int e = 0; e < 4; e++) p[n][e] = dp[n][e] = 0.0f;
        fa_gemm_abt<HS, FA_BKV>(p, sQ + warp * 16 * LD, tK, lane);
        fa_gemm_abt<HS, FA_BKV>(dp, sO + warp * 16 * LD, tV, lane);
        int k0 = j * FA_BKV, diag = k0 + FA_BKV > q0;
        #pragma unroll
        for (int n = 0; n < FA_BKV / 8; n++)
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                int hh = e >> 1, key = k0 + n * 8 + (lane & 3) * 2 + (e & 1);
                float pv = exp2f(p[n][e] * sl2 - lrow[hh]);
                if (diag && key > q0 + warp * 16 + (lane >> 2) + hh * 8) pv = 0.0f;
                dp[n][e] = pv * (dp[n][e] - drow[hh]);  // dS
            }
        fa_gemm_pv<HS, FA_BKV>(dq, dp, tK, lane);
    }
    cp_async_wait<0>();
    if (ROPE) fa_rope_acc_back<HS>(dq, a.rope, q0 + warp * 16, T, lane);
    fa_store_rows<HS>(a.dqkv + (g.q - a.qkv), g.ld, dq, rsqrtf((float)HS), q0 + warp * 16, T, lane);
}

// --- launchers -------------------------------------------------------------------------------

template <int HS, bool ROPE>
static inline void flash_backward_launch(const FlashBwdArgs& a, cudaStream_t stream) {
    size_t rows = (size_t)a.B * a.T * a.NH, threads = rows * (HS / 8);
    flash_backward_dot_kernel<HS><<<(unsigned)((threads + 255) / 256), 256, 0, stream>>>(a);
    cuda_check_launch();
    size_t s1 = FaCfg<HS>::dkdv_smem, s2 = FaCfg<HS>::dq_smem;
    auto dkdv = flash_backward_dkdv_kernel<HS, ROPE>;
    auto dq = flash_backward_dq_kernel<HS, ROPE>;
    cuda_check(cudaFuncSetAttribute(dkdv, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s1));
    cuda_check(cudaFuncSetAttribute(dq, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s2));
    dkdv<<<fa_grid(a.B * a.NKV, ceil_div(a.T, FA_BKV)), FA_THREADS, s1, stream>>>(a);
    cuda_check_launch();
    dq<<<fa_grid(a.B * a.NH, ceil_div(a.T, FA_BQ)), FA_THREADS, s2, stream>>>(a);
    cuda_check_launch();
}

// dqkv (B, T, C + 2·NKV·C/NH) bf16 assigned (every element written; qkv's layout), from dout (B, T, C)
// bf16 and the forward's out (B, T, C), qkv (with rope: as the forward left it, q and k rotated), rope and
// lse; D_scratch (B, NH, T) fp32. With rope, dq and dk are gradients with respect to q and k before RoPE.
// Deterministic: no atomics.
static inline void flash_attention_backward(bf16* dqkv, float* D_scratch, const bf16* dout, const bf16* out,
                                            const bf16* qkv, const float* rope, const float* lse, int B, int T,
                                            int C, int NH, int NKV, cudaStream_t stream) {
    FlashBwdArgs a = {dqkv, D_scratch, dout, out, qkv, lse, rope, B, T, NH, NKV};
    int hs = flash_attention_head_size(T, C, NH, NKV);
    flash_check_rope(rope);
    if (hs == 64) rope ? flash_backward_launch<64, true>(a, stream) : flash_backward_launch<64, false>(a, stream);
    else rope ? flash_backward_launch<128, true>(a, stream) : flash_backward_launch<128, false>(a, stream);
}
