// flash_attention_sm90_backward.cuh: the backward of llmc/attention/flash_attention_sm90.cuh (whose header comment
// has the block: a producer warpgroup feeding a ring of TMA stages, two consumer warpgroups on wgmma, and
// the tiles), with llmc/attention/flash_attention_backward.cuh's kernels and order of sums (no atomics, bitwise
// repeatable):
//   D = rowsum(dO ∘ O) by llmc/attention/flash_attention_backward.cuh's dot kernel
//   dq:      block per (b·NH + h, 128 queries); key and value tiles of 64 rows: S = Q·Kᵀ and dP = dO·Vᵀ
//            (m64n64k16), dS = P ∘ (dP − D), dQ += dS·K (K read MN-major); a tile's dS is computed
//            while the tensor cores run the previous tile's dQ += dS·K, as in the forward
//   dkdv:    block per (b·NKV + j, 128 keys); query and dO tiles of BQ rows of the group's query heads, in
//            the mma.sync kernel's order: Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ, dV += Pᵀ·dO, dK += dSᵀ·Q (dO, Q MN-major);
//            a tile's Pᵀ and dSᵀ are computed while the tensor cores run the previous tile's dV and dK
// Both recompute P from the forward's lse; nothing (B, NH, T, T) exists.
// With bias_partial (GPT-2's qkv bias gradient; not with RoPE), each block also sums the columns of the
// rows it writes, as rounded to bf16, and writes them to its partial row of (B · ceil(T/128), W) fp32 (W
// the width of qkv: row b · ceil(T/128) + tile, the block's head's columns); llmc/attention/attention.cuh adds the
// partial rows up (llmc/layers/column_sums.cuh). The bias kernel's read of dqkv is saved. Kernels without the
// sums are built without their code (the BIAS parameter).
// RoPE: the kernels rotate dq and dk back in registers before writing them, as the mma.sync ones do.
#pragma once
#include "flash_attention_backward.cuh"  // the dot kernel and FlashBwdArgs
#include "flash_attention_sm90.cuh"

#define FA90_DQ_BKV 64  // dq: keys per step

#define FA90_COLSUM_BYTES(HS, n) (8 * (HS) * (n) * 4)  // fa90_colsum_rows's shared memory for n outputs
template <int HS> struct Fa90DqCfg {
    static constexpr int BOXES = HS / 64;
    static constexpr int QT = FA90_BQ * 128 * BOXES;       // the query tile, and the dO tile
    static constexpr int KT = FA90_DQ_BKV * 128 * BOXES;   // a key tile, and a value tile
    static constexpr int STAGE = 2 * KT;
    static constexpr size_t smem =
        1024 + 2 * QT + FA90_STAGES * STAGE + 8 * (1 + 2 * FA90_STAGES) + FA90_COLSUM_BYTES(HS, 1);
};

// --- device helpers: the shared-memory wgmma, the barriers, the overlap loop, the column sums ------

#if !defined(__CUDA_ARCH__) || defined(WG_DEVICE_CODE)
// D (64 x N, fp32) += A (64 x 16) · B (N x 16)ᵀ, both bf16 in shared memory behind K-major descriptors
__device__ __forceinline__ void fa90_wgmma_ss_n64(float d[32], uint64_t desc_a, uint64_t desc_b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

__device__ __forceinline__ void fa90_wgmma_ss_n32(float d[16], uint64_t desc_a, uint64_t desc_b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// accumulate 0: D = A·B (the first k-step: the accumulators need no zeroing, which would sit between
// the fence and the wgmma and make ptxas serialize them)
template <int SN> __device__ __forceinline__ void fa90_wgmma_ss(float* d, uint64_t a, uint64_t b, int accumulate) {
    if constexpr (SN == 64) fa90_wgmma_ss_n64(d, a, b, accumulate);
    else fa90_wgmma_ss_n32(d, a, b, accumulate);
}

// A backward kernel's barriers, after its tiles in shared memory: `once` (the tiles loaded once per
// block, one arrival), then the ring's full[s] and empty[s]. Every thread calls it (it ends in a barrier).
__device__ __forceinline__ void fa90_barriers_init(uint32_t once, uint32_t full, uint32_t empty) {
    if (threadIdx.x == 0) {
        mbar_init(once, 1);
        for (int s = 0; s < FA90_STAGES; s++) { mbar_init(full + 8 * s, 1); mbar_init(empty + 8 * s, 2); }
        mbar_fence_init();
    }
    __syncthreads();
}

// A consumer warpgroup's loop over the n stages of the ring (at `stages`, stage_bytes apart), as the
// backward kernels run it: step it issues the first GEMMs of its stage (issue_a), then the second
// GEMMs of the previous step's (issue_b), and computes its own elementwise part (compute(it)) while
// the tensor cores run the second; then it releases the previous stage and packs its operands for the
// next step's second GEMMs (pack). The first step has no second GEMMs, the last step's come after the
// loop. Each issue ends in its own commit group, so wait<1> leaves only issue_b running.
template <typename IssueA, typename IssueB, typename Compute, typename Pack>
__device__ __forceinline__ void fa90_overlap_loop(uint32_t stages, uint32_t stage_bytes, uint32_t full, uint32_t empty,
                                                  int n, IssueA issue_a, IssueB issue_b, Compute compute, Pack pack) {
    int sprev = fa90_stage_wait(full, 0);
    wgmma_fence();
    issue_a(stages + sprev * stage_bytes);
    wgmma_wait<0>();
    compute(0);
    pack();
    for (int it = 1; it < n; it++) {
        int s = fa90_stage_wait(full, it);
        wgmma_fence();
        issue_a(stages + s * stage_bytes);
        issue_b(stages + sprev * stage_bytes);
        wgmma_wait<1>();
        compute(it);
        wgmma_wait<0>();
        fa90_stage_release(empty, sprev);
        pack();
        sprev = s;
    }
    wgmma_fence();
    issue_b(stages + sprev * stage_bytes);
    wgmma_wait<0>();
    fa90_stage_release(empty, sprev);
}
#endif

// The column sums of the two consumer warpgroups' rows as fa_store_rows writes them (acc times scale,
// rounded to bf16, rows ≥ T left out): each warp sums its 16 rows (the two of a thread, then across the
// 8 lanes of a column by shuffles), writes them to red (8 warps x HS fp32, shared), and once all 256
// consumer threads are there (named barrier 1), threads 0 .. HS-1 of them add the 8 warps in order
// and write out[0 .. HS-1]. cw: the consumer warp (0 .. 7), ct: the consumer thread (0 .. 255).
template <int HS>
__device__ __forceinline__ void fa90_colsum_rows(float* red, float* out, const float (*acc)[4], float scale, int row0,
                                                 int T, int lane, int cw, int ct) {
    #pragma unroll
    for (int nd = 0; nd < HS / 8; nd++) {
        float s[2];
        #pragma unroll
        for (int e = 0; e < 2; e++) {
            s[e] = 0.0f;
            #pragma unroll
            for (int hh = 0; hh < 2; hh++)
                if (row0 + (lane >> 2) + hh * 8 < T)
                    s[e] += __bfloat162float(__float2bfloat16_rn(acc[nd][hh * 2 + e] * scale));
            s[e] += __shfl_xor_sync(0xffffffffu, s[e], 4);
            s[e] += __shfl_xor_sync(0xffffffffu, s[e], 8);
            s[e] += __shfl_xor_sync(0xffffffffu, s[e], 16);
        }
        if (lane < 4) { red[cw * HS + nd * 8 + 2 * lane] = s[0]; red[cw * HS + nd * 8 + 2 * lane + 1] = s[1]; }
    }
    asm volatile("bar.sync 1, 256;" ::: "memory");
    if (ct < HS) {
        float sum = 0.0f;
        for (int w = 0; w < 8; w++) sum += red[w * HS + ct];
        out[ct] = sum;
    }
}

// --- kernels ---------------------------------------------------------------------------------

// tq: qkv in 128-row boxes, tk: qkv in 64-row boxes, to: dout in 128-row boxes. BIAS: the column sums
// into bias_partial, a template parameter so that kernels without them carry none of their code (at
// hs = 128 the kernels sit at 168 registers a thread). The BIAS kernels also test bias_partial, though
// their launcher never passes NULL: the test is part of the PTX whose speed doc/results.md gives, and
// ptxas schedules these kernels differently without it, so drop it only with a new timing
template <int HS, bool ROPE, bool BIAS>
__global__ void __launch_bounds__(FA90_THREADS, 1)
fa90_dq_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
               const __grid_constant__ CUtensorMap to, bf16* dqkv, const float* lse, const float* Drow,
               const float* rope, float* bias_partial, int T, int NH, int NKV) {
#if defined(WG_DEVICE_CODE)
    using Cfg = Fa90DqCfg<HS>;
    extern __shared__ unsigned char smem_raw[];
    uint32_t base = (smem_u32(smem_raw) + 1023) & ~1023u;
    uint32_t sq = base, so = base + Cfg::QT, stages = base + 2 * Cfg::QT;
    uint32_t qbar = stages + FA90_STAGES * Cfg::STAGE, full = qbar + 8, empty = full + 8 * FA90_STAGES;
    float* red = (float*)(smem_raw + (empty + 8 * FA90_STAGES - smem_u32(smem_raw)));  // fa90_colsum_rows's
    int wg = threadIdx.x / 128, t = threadIdx.x % 128;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH, j = h / (NH / NKV);
    int q0 = (gridDim.x - 1 - blockIdx.x) * FA90_BQ;
    int nkv = ceil_div(min(q0 + FA90_BQ, T), FA90_DQ_BKV);
    int row0 = b * T;
    fa90_barriers_init(qbar, full, empty);
    if (wg == 0) {
        regs_dec<40>();
        if (t == 0) {
            int kcol = (NH + j) * HS, vcol = (NH + NKV + j) * HS;
            mbar_arrive_expect_tx(qbar, 2 * Cfg::QT);
            for (int x = 0; x < Cfg::BOXES; x++) {
                tma_load_2d(sq + x * FA90_BQ * 128, &tq, h * HS + 64 * x, row0 + q0, qbar);
                tma_load_2d(so + x * FA90_BQ * 128, &to, h * HS + 64 * x, row0 + q0, qbar);
            }
            for (int it = 0; it < nkv; it++) {
                int s = fa90_stage_fill(full, empty, it, Cfg::STAGE);
                uint32_t k = stages + s * Cfg::STAGE, v = k + Cfg::KT;
                for (int x = 0; x < Cfg::BOXES; x++) {
                    tma_load_2d(k + x * FA90_DQ_BKV * 128, &tk, kcol + 64 * x, row0 + it * FA90_DQ_BKV, full + 8 * s);
                    tma_load_2d(v + x * FA90_DQ_BKV * 128, &tk, vcol + 64 * x, row0 + it * FA90_DQ_BKV, full + 8 * s);
                }
            }
        }
        return;
    }
    regs_inc<232>();
    int c = wg - 1, lane = t % 32, warp = t / 32;
    int rloc = c * 64 + warp * 16 + lane / 4;
    float sl2 = rsqrtf((float)HS) * FA_LOG2E;
    float lrow[2], drow[2];
    #pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        int q = q0 + rloc + 8 * hh;
        lrow[hh] = q < T ? lse[(size_t)bh * T + q] * FA_LOG2E : INFINITY;
        drow[hh] = q < T ? Drow[(size_t)bh * T + q] : 0.0f;
    }
    float dq[HS / 2], sc[FA90_DQ_BKV / 2], dp[FA90_DQ_BKV / 2];
    uint32_t pa[FA90_DQ_BKV / 4];  // dS in bf16, the A fragments of dQ += dS·K
    #pragma unroll
    for (int i = 0; i < HS / 2; i++) dq[i] = 0.0f;
    // S = Q·Kᵀ into sc and dP = dO·Vᵀ into dp, for the stage at k (keys), k + KT (values)
    auto issue_sdp = [&](uint32_t k) {
        uint32_t v = k + Cfg::KT;
        #pragma unroll
        for (int kk = 0; kk < HS / 16; kk++) {
            uint32_t qo = (kk / 4) * FA90_BQ * 128 + c * 64 * 128 + (kk % 4) * 32;
            uint32_t ko = (kk / 4) * FA90_DQ_BKV * 128 + (kk % 4) * 32;
            fa90_wgmma_ss<FA90_DQ_BKV>(sc, wgmma_desc(sq + qo), wgmma_desc(k + ko), kk > 0);
            fa90_wgmma_ss<FA90_DQ_BKV>(dp, wgmma_desc(so + qo), wgmma_desc(v + ko), kk > 0);
        }
        wgmma_commit();
    };
    auto issue_dq = [&](uint32_t k) {  // dQ += dS·K, dS in pa
        #pragma unroll
        for (int kk = 0; kk < FA90_DQ_BKV / 16; kk++)
            fa90_wgmma_rs<HS>(dq, pa + 4 * kk, fa90_desc_mn(k + kk * 2048, FA90_DQ_BKV * 128));
        wgmma_commit();
    };
    auto compute_ds = [&](int it) {  // sc becomes dS = P ∘ (dP − D), fp32
        int k0 = it * FA90_DQ_BKV, diag = k0 + FA90_DQ_BKV > q0 + c * 64;
        #pragma unroll
        for (int i = 0; i < FA90_DQ_BKV / 8; i++)
            #pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                int q = q0 + rloc + 8 * hh;
                #pragma unroll
                for (int e = 0; e < 2; e++) {
                    int n = 4 * i + 2 * hh + e, key = k0 + 8 * i + 2 * (lane % 4) + e;
                    float pv = exp2f(sc[n] * sl2 - lrow[hh]);
                    if (diag && key > q) pv = 0.0f;
                    sc[n] = pv * (dp[n] - drow[hh]);
                }
            }
    };
    auto pack_ds = [&] {
        #pragma unroll
        for (int i = 0; i < FA90_DQ_BKV / 4; i++) pa[i] = fa_pack(sc[2 * i], sc[2 * i + 1]);
    };
    // As the forward: step it > 0 issues S and dP of its keys, then dQ += dS·K of the previous step's,
    // and computes its dS while the tensor cores run the second (dQ sees the same sums in the same order).
    mbar_wait(qbar, 0);
    fa90_overlap_loop(stages, Cfg::STAGE, full, empty, nkv, issue_sdp, issue_dq, compute_ds, pack_ds);
    if (ROPE) fa_rope_acc_back<HS>((float(*)[4])dq, rope, q0 + c * 64 + warp * 16, T, lane);
    size_t ld = (size_t)(NH + 2 * NKV) * HS;
    fa_store_rows<HS>(dqkv + (size_t)row0 * ld + h * HS, ld, (const float(*)[4])dq, rsqrtf((float)HS),
                      q0 + c * 64 + warp * 16, T, lane);
    if (BIAS && bias_partial)
        fa90_colsum_rows<HS>(red, bias_partial + (size_t)(b * gridDim.x + q0 / FA90_BQ) * ld + h * HS,
                             (const float(*)[4])dq, rsqrtf((float)HS), q0 + c * 64 + warp * 16, T, lane, c * 4 + warp,
                             c * 128 + t);
#endif
}

template <int HS> struct Fa90DkdvCfg {
    static constexpr int BOXES = HS / 64;
    static constexpr int BQ = HS == 64 ? 64 : 32;         // queries per step (registers at hs = 128)
    static constexpr int KT = FA90_BKV * 128 * BOXES;      // the key tile, and the value tile
    static constexpr int QT = BQ * 128 * BOXES;          // a query tile, and a dO tile
    static constexpr int STAGE = 2 * QT;
    static constexpr size_t smem =
        1024 + 2 * KT + FA90_STAGES * STAGE + 8 * (1 + 2 * FA90_STAGES) + FA90_COLSUM_BYTES(HS, 2);
};

// tk: qkv in 128-row boxes, tq: qkv in BQ-row boxes, to: dout in BQ-row boxes; BIAS as the dq kernel's.
template <int HS, bool ROPE, bool BIAS>
__global__ void __launch_bounds__(FA90_THREADS, 1)
fa90_dkdv_kernel(const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tq,
                 const __grid_constant__ CUtensorMap to, bf16* dqkv, const float* lse, const float* Drow,
                 const float* rope, float* bias_partial, int T, int NH, int NKV) {
#if defined(WG_DEVICE_CODE)
    using Cfg = Fa90DkdvCfg<HS>;
    constexpr int BQ = Cfg::BQ;
    extern __shared__ unsigned char smem_raw[];
    uint32_t base = (smem_u32(smem_raw) + 1023) & ~1023u;
    uint32_t sk = base, sv = base + Cfg::KT, stages = base + 2 * Cfg::KT;
    uint32_t kbar = stages + FA90_STAGES * Cfg::STAGE, full = kbar + 8, empty = full + 8 * FA90_STAGES;
    float* red = (float*)(smem_raw + (empty + 8 * FA90_STAGES - smem_u32(smem_raw)));  // fa90_colsum_rows's
    int wg = threadIdx.x / 128, t = threadIdx.x % 128;
    int bj = blockIdx.y, b = bj / NKV, j = bj % NKV, G = NH / NKV;
    int k0 = blockIdx.x * FA90_BKV, i0 = k0 / BQ, nq = ceil_div(T, BQ), nper = nq - i0, nsteps = G * nper;
    int row0 = b * T;
    fa90_barriers_init(kbar, full, empty);
    if (wg == 0) {
        regs_dec<40>();
        if (t == 0) {
            int kcol = (NH + j) * HS, vcol = (NH + NKV + j) * HS;
            mbar_arrive_expect_tx(kbar, 2 * Cfg::KT);
            for (int x = 0; x < Cfg::BOXES; x++) {
                tma_load_2d(sk + x * FA90_BKV * 128, &tk, kcol + 64 * x, row0 + k0, kbar);
                tma_load_2d(sv + x * FA90_BKV * 128, &tk, vcol + 64 * x, row0 + k0, kbar);
            }
            for (int it = 0; it < nsteps; it++) {
                int s = fa90_stage_fill(full, empty, it, Cfg::STAGE), h = j * G + it / nper, q0 = (i0 + it % nper) * BQ;
                uint32_t q = stages + s * Cfg::STAGE, o = q + Cfg::QT;
                for (int x = 0; x < Cfg::BOXES; x++) {
                    tma_load_2d(q + x * BQ * 128, &tq, h * HS + 64 * x, row0 + q0, full + 8 * s);
                    tma_load_2d(o + x * BQ * 128, &to, h * HS + 64 * x, row0 + q0, full + 8 * s);
                }
            }
        }
        return;
    }
    regs_inc<232>();
    int c = wg - 1, lane = t % 32, warp = t / 32;
    int kloc = c * 64 + warp * 16 + lane / 4;  // this thread's keys in the block: kloc, kloc + 8
    float sl2 = rsqrtf((float)HS) * FA_LOG2E;
    float dk[HS / 2], dv[HS / 2], st[BQ / 2], dpt[BQ / 2];
    uint32_t pp[BQ / 4], pd[BQ / 4];  // Pᵀ and dSᵀ in bf16, the A fragments of dV += Pᵀ·dO, dK += dSᵀ·Q
    #pragma unroll
    for (int i = 0; i < HS / 2; i++) dk[i] = dv[i] = 0.0f;
    auto issue_s = [&](uint32_t q) {  // Sᵀ = K·Qᵀ into st, dPᵀ = V·dOᵀ into dpt; q the stage, dO after it
        uint32_t o = q + Cfg::QT;
        #pragma unroll
        for (int kk = 0; kk < HS / 16; kk++) {
            uint32_t ko = (kk / 4) * FA90_BKV * 128 + c * 64 * 128 + (kk % 4) * 32;
            uint32_t qo = (kk / 4) * BQ * 128 + (kk % 4) * 32;
            fa90_wgmma_ss<BQ>(st, wgmma_desc(sk + ko), wgmma_desc(q + qo), kk > 0);
            fa90_wgmma_ss<BQ>(dpt, wgmma_desc(sv + ko), wgmma_desc(o + qo), kk > 0);
        }
        wgmma_commit();
    };
    auto issue_dkdv = [&](uint32_t q) {  // dV += Pᵀ·dO, dK += dSᵀ·Q (pp, pd)
        uint32_t o = q + Cfg::QT;
        #pragma unroll
        for (int kk = 0; kk < BQ / 16; kk++) {
            fa90_wgmma_rs<HS>(dv, pp + 4 * kk, fa90_desc_mn(o + kk * 2048, BQ * 128));
            fa90_wgmma_rs<HS>(dk, pd + 4 * kk, fa90_desc_mn(q + kk * 2048, BQ * 128));
        }
        wgmma_commit();
    };
    auto compute = [&](int it) {  // st becomes Pᵀ and dpt dSᵀ = Pᵀ ∘ (dPᵀ − D), fp32
        int h = j * G + it / nper, q0 = (i0 + it % nper) * BQ;
        size_t bh = (size_t)b * NH + h;
        int diag = q0 < k0 + c * 64 + 64;
        #pragma unroll
        for (int i = 0; i < BQ / 8; i++) {
            float lq[2], dd[2];  // lse·log2e (+inf past T) and D (0 past T) of this thread's two queries
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                int qq = q0 + 8 * i + 2 * (lane % 4) + e;
                lq[e] = qq < T ? lse[bh * T + qq] * FA_LOG2E : INFINITY;
                dd[e] = qq < T ? Drow[bh * T + qq] : 0.0f;
            }
            #pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                int key = k0 + kloc + 8 * hh;
                #pragma unroll
                for (int e = 0; e < 2; e++) {
                    int n = 4 * i + 2 * hh + e, qq = q0 + 8 * i + 2 * (lane % 4) + e;
                    float pv = exp2f(st[n] * sl2 - lq[e]);
                    if (diag && qq < key) pv = 0.0f;
                    st[n] = pv;
                    dpt[n] = pv * (dpt[n] - dd[e]);
                }
            }
        }
    };
    auto pack = [&] {
        #pragma unroll
        for (int i = 0; i < BQ / 4; i++) {
            pp[i] = fa_pack(st[2 * i], st[2 * i + 1]);
            pd[i] = fa_pack(dpt[2 * i], dpt[2 * i + 1]);
        }
    };
    // As the forward: step it > 0 issues Sᵀ and dPᵀ of its queries, then dV and dK of the previous
    // step's, and computes its Pᵀ and dSᵀ while the tensor cores run the second (the same sums in the
    // same order).
    mbar_wait(kbar, 0);
    if constexpr (HS == 64) {
        fa90_overlap_loop(stages, Cfg::STAGE, full, empty, nsteps, issue_s, issue_dkdv, compute, pack);
    } else {  // the steps by reference: from this ptxas builds an hs = 128 kernel 17-23% faster than from
              // copies, where at hs = 64 copies are 2-3% faster (doc/log.md, the attention backward)
        fa90_overlap_loop<decltype(issue_s)&, decltype(issue_dkdv)&, decltype(compute)&, decltype(pack)&>(
            stages, Cfg::STAGE, full, empty, nsteps, issue_s, issue_dkdv, compute, pack);
    }
    if (ROPE) fa_rope_acc_back<HS>((float(*)[4])dk, rope, k0 + c * 64 + warp * 16, T, lane);
    size_t ld = (size_t)(NH + 2 * NKV) * HS;
    bf16* dst = dqkv + (size_t)row0 * ld + (NH + j) * HS;  // dqkv has qkv's layout: dk, then NKV heads on, dv
    fa_store_rows<HS>(dst, ld, (const float(*)[4])dk, rsqrtf((float)HS), k0 + c * 64 + warp * 16, T, lane);
    fa_store_rows<HS>(dst + NKV * HS, ld, (const float(*)[4])dv, 1.0f, k0 + c * 64 + warp * 16, T, lane);
    if (BIAS && bias_partial) {
        float* part = bias_partial + (size_t)(b * gridDim.x + blockIdx.x) * ld + (NH + j) * HS;
        fa90_colsum_rows<HS>(red, part, (const float(*)[4])dk, rsqrtf((float)HS), k0 + c * 64 + warp * 16, T, lane,
                             c * 4 + warp, c * 128 + t);
        fa90_colsum_rows<HS>(red + 8 * HS, part + NKV * HS, (const float(*)[4])dv, 1.0f, k0 + c * 64 + warp * 16, T,
                             lane, c * 4 + warp, c * 128 + t);
    }
#endif
}

// --- launchers -------------------------------------------------------------------------------

template <int HS, bool ROPE, bool BIAS>
static void fa90_backward_launch(bf16* dqkv, float* D, const bf16* dout, const bf16* out, const bf16* qkv,
                                 const float* rope, const float* lse, float* bias_partial, int B, int T, int NH, int NKV,
                                 cudaStream_t st) {
    int W = (NH + 2 * NKV) * HS, C = NH * HS, BQ = Fa90DkdvCfg<HS>::BQ;
    FlashBwdArgs a = {dqkv, D, dout, out, qkv, lse, rope, B, T, NH, NKV};
    size_t threads = (size_t)B * T * NH * (HS / 8);
    flash_backward_dot_kernel<HS><<<(unsigned)((threads + 255) / 256), 256, 0, st>>>(a);
    cuda_check_launch();
    CUtensorMap q128 = tma_map_bf16(qkv, B * T, W, W, 128), q64 = tma_map_bf16(qkv, B * T, W, W, 64);
    CUtensorMap qbq = tma_map_bf16(qkv, B * T, W, W, BQ);
    CUtensorMap o128 = tma_map_bf16(dout, B * T, C, C, 128), obq = tma_map_bf16(dout, B * T, C, C, BQ);
    size_t s1 = Fa90DkdvCfg<HS>::smem, s2 = Fa90DqCfg<HS>::smem;
    auto dkdv = fa90_dkdv_kernel<HS, ROPE, BIAS>;
    auto dq = fa90_dq_kernel<HS, ROPE, BIAS>;
    cuda_check(cudaFuncSetAttribute(dkdv, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s1));
    cuda_check(cudaFuncSetAttribute(dq, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s2));
    dkdv<<<fa_grid(B * NKV, ceil_div(T, FA90_BKV)), FA90_THREADS, s1, st>>>(
        q128, qbq, obq, dqkv, lse, D, rope, bias_partial, T, NH, NKV);
    cuda_check_launch();
    dq<<<fa_grid(B * NH, ceil_div(T, FA90_BQ)), FA90_THREADS, s2, st>>>(
        q128, q64, o128, dqkv, lse, D, rope, bias_partial, T, NH, NKV);
    cuda_check_launch();
}

// The kernels of one head size: rotating (no bias sums), summing the bias, or neither.
template <int HS>
static void fa90_backward_pick(bf16* dqkv, float* D, const bf16* dout, const bf16* out, const bf16* qkv,
                               const float* rope, const float* lse, float* bias_partial, int B, int T, int NH, int NKV,
                               cudaStream_t st) {
    if (rope) fa90_backward_launch<HS, true, false>(dqkv, D, dout, out, qkv, rope, lse, NULL, B, T, NH, NKV, st);
    else if (bias_partial)
        fa90_backward_launch<HS, false, true>(dqkv, D, dout, out, qkv, rope, lse, bias_partial, B, T, NH, NKV, st);
    else fa90_backward_launch<HS, false, false>(dqkv, D, dout, out, qkv, rope, lse, NULL, B, T, NH, NKV, st);
}

// dqkv assigned, as flash_attention_backward: qkv as the forward left it, rope the table or NULL (dq and
// dk then rotated back), D_scratch (B, NH, T) fp32; needs flash_sm90_available(). bias_partial: NULL, or
// (B · ceil(T/128), (NH + 2·NKV)·hs) fp32, every element written: the column sums of each block's rows
// of dqkv as written (see the header); not with rope (no model here has both: llmc/attention/attention.cuh sums a
// rotated layer's bias with the bias kernel).
static inline void flash_sm90_backward(bf16* dqkv, float* D, const bf16* dout, const bf16* out, const bf16* qkv,
                                       const float* rope, const float* lse, float* bias_partial, int B, int T, int C,
                                       int NH, int NKV, cudaStream_t st) {
    int hs = flash_attention_head_size(T, C, NH, NKV);
    flash_check_rope(rope);
    if (rope && bias_partial)
        check_fail("flash_sm90_backward: bias_partial with rope",
                   "pass NULL and sum the bias after the backward (column_sums_bf16), as attention_backward does");
    if (hs == 64) fa90_backward_pick<64>(dqkv, D, dout, out, qkv, rope, lse, bias_partial, B, T, NH, NKV, st);
    else fa90_backward_pick<128>(dqkv, D, dout, out, qkv, rope, lse, bias_partial, B, T, NH, NKV, st);
}
