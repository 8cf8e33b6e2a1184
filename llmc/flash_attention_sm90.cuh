// flash_attention_sm90.cuh: causal attention on Hopper (sm_90a) in the manner of FlashAttention-3,
// forward and backward, exact, with grouped-query attention and RoPE as llmc/flash_attention.cuh has
// them (the same inputs, outputs, order of sums and determinism: no atomics). The layer
// (llmc/attention.cuh) takes these kernels on an sm_90 GPU in an sm_90a build, and the mma.sync ones
// elsewhere (sm_80 and later).
// Each kernel: a block of 384 threads, warpgroup 0 producing (one thread issues the TMA copies into a
// ring of 3 stages) and warpgroups 1 and 2 consuming, each with 64 rows of the block's 128; wgmma
// multiplies from shared memory, and the softmax's P (or dS) stays in registers as the A operand of the
// next wgmma (the accumulator layout is the A-fragment layout).
//   forward: persistent: a grid of at most one block per SM, block x taking the work items x, x + grid,
//            ... of (b·NH + h, 128 queries), the heaviest first; the query tile per item, key and value
//            tiles of 128 rows through the ring: S (64 x 128 a consumer) = Q·Kᵀ by m64n128k16 (K-major
//            operands); the online softmax as llmc/flash_attention.cuh's (base 2, the scale folded in,
//            rows owned by quads of lanes); O (64 x hs) += P·V by m64n{hs}k16 with V read MN-major. The
//            softmax of one tile runs while the tensor cores multiply the previous tile's P·V
//            (FlashAttention-3's overlap within a warpgroup)
//   dq:      block per (b·NH + h, 128 queries); key and value tiles of 64 rows: S = Q·Kᵀ and dP = dO·Vᵀ
//            (m64n64k16), dS = P ∘ (dP − D), dQ += dS·K (K read MN-major); a tile's dS is computed
//            while the tensor cores run the previous tile's dQ += dS·K, as in the forward
//   dkdv:    block per (b·NKV + j, 128 keys); query and dO tiles of BQ rows of the group's query heads, in
//            variant 3's order: Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ, dV += Pᵀ·dO, dK += dSᵀ·Q (dO, Q read MN-major);
//            a tile's Pᵀ and dSᵀ are computed while the tensor cores run the previous tile's dV and dK
//   D = rowsum(dO ∘ O) by llmc/flash_attention_backward.cuh's dot kernel.
//   With bias_partial (GPT-2's qkv bias gradient; not with RoPE), each backward block also sums the
//   columns of the rows it writes, as rounded to bf16, and writes them to its partial row of
//   (B · ceil(T/128), W) fp32 (W the width of qkv: row b · ceil(T/128) + tile, the block's head's
//   columns); llmc/attention.cuh adds the partial rows up (llmc/column_sums.cuh). The bias kernel's read
//   of dqkv is saved. Kernels without the sums are built without their code (the BIAS parameter).
// RoPE: the layer rotates q and k by a pass before the forward (llmc/rope.cuh; the forward here does not
// rotate its query tile as the mma.sync one does), and the backward kernels rotate dq and dk back in
// registers before writing them, as the mma.sync ones do.
// Tiles: rows of 64 bf16 (128 bytes) with 128-byte swizzling, hs/64 boxes side by side, as
// llmc/sm90_wgmma.cuh's layout contract says. A key or query tile past the end of a sequence reads the
// next sequence's rows (past the tensor's end: zeros); keys past T are later than every query < T, so the
// causal mask removes them, and rows past T are not stored (and get lse = +inf, D = 0 in the backward).
// Not yet: the two consumers taking turns, TMA stores of the outputs (dev/cuda/README.md has the
// measurements). Backward kernels persistent as the forward were no faster (doc/results.md, Attention).
#pragma once
#include "sm90_wgmma.cuh"
#include "flash_attention_backward.cuh"  // and the forward's: the tiles' helpers, the dot kernel, RoPE's

#define FA90_BQ 128
#define FA90_BKV 128
// the bias sums' partial rows are per FA90_BQ rows of a sequence for dq and per FA90_BKV for dk, dv, and
// attention_bias_scratch counts them by FA90_BQ
static_assert(FA90_BQ == FA90_BKV, "the backward's bias partial rows assume query and key tiles of one size");
#define FA90_STAGES 3  // the rings: a consumer holds two stages at once (see the forward kernel)
#define FA90_THREADS 384

template <int HS> struct Fa90Cfg {
    static constexpr int BOXES = HS / 64;             // 64-column boxes of a tile
    static constexpr int TILE = FA90_BKV * 128 * BOXES;  // bytes of a 128-row tile
    static constexpr int STAGE = 2 * TILE;             // keys, then values
    static constexpr int QBUF = HS == 64 ? 2 : 1;      // query tiles in flight (one at hs 128: shared memory)
    static constexpr size_t smem = 1024 + QBUF * TILE + FA90_STAGES * STAGE + 8 * (2 * QBUF + 2 * FA90_STAGES);
};

#if !defined(__CUDA_ARCH__) || defined(WG_DEVICE_CODE)

// D (64 x N per warpgroup, fp32, N/2 registers a thread) += A (64 x 16, bf16 in registers, a[4] per
// thread: the m16n8k16 A fragment of its warp's 16 rows) · B (16 x N, bf16 in shared memory behind an
// MN-major descriptor: imm-trans-b = 1).
__device__ __forceinline__ void fa90_wgmma_rs_n64(float d[32], const uint32_t a[4], uint64_t desc_b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

__device__ __forceinline__ void fa90_wgmma_rs_n128(float d[64], const uint32_t a[4], uint64_t desc_b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}


template <int HS> __device__ __forceinline__ void fa90_wgmma_rs(float* d, const uint32_t a[4], uint64_t desc_b) {
    if constexpr (HS == 64) fa90_wgmma_rs_n64(d, a, desc_b);
    else fa90_wgmma_rs_n128(d, a, desc_b);
}

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


// The barriers every kernel here uses, after its tiles in shared memory: `once` (the tiles loaded once
// per block, one arrival), then the ring's full[s] (one arrival: the producer's) and empty[s] (two: the
// consumers'). Every thread calls it (it ends in a barrier).
__device__ __forceinline__ void fa90_barriers_init(uint32_t once, uint32_t full, uint32_t empty) {
    if (threadIdx.x == 0) {
        mbar_init(once, 1);
        for (int s = 0; s < FA90_STAGES; s++) { mbar_init(full + 8 * s, 1); mbar_init(empty + 8 * s, 2); }
        mbar_fence_init();
    }
    __syncthreads();
}
// producer: the stage for step it, once the consumers released its previous use; its copies of `bytes`
// complete full[stage]
__device__ __forceinline__ int fa90_stage_fill(uint32_t full, uint32_t empty, int it, uint32_t bytes) {
    int s = it % FA90_STAGES;
    if (it >= FA90_STAGES) mbar_wait(empty + 8 * s, (it / FA90_STAGES - 1) & 1);
    mbar_arrive_expect_tx(full + 8 * s, bytes);
    return s;
}
// consumer: waits for step it's stage; fa90_stage_release gives it back (one arrival per warpgroup)
__device__ __forceinline__ int fa90_stage_wait(uint32_t full, int it) {
    int s = it % FA90_STAGES;
    mbar_wait(full + 8 * s, (it / FA90_STAGES) & 1);
    return s;
}
__device__ __forceinline__ void fa90_stage_release(uint32_t empty, int s) {
    if (threadIdx.x % 128 == 0) mbar_arrive(empty + 8 * s);
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

// descriptor of an MN-major tile with 128-byte swizzling whose 64-column boxes are lbo bytes apart
__device__ __forceinline__ uint64_t fa90_desc_mn(uint32_t smem_addr, uint32_t lbo) {
    uint64_t d = (uint64_t)((smem_addr & 0x3FFFF) >> 4);
    d |= (uint64_t)((lbo >> 4) & 0x3FFF) << 16;
    d |= (uint64_t)(1024 >> 4) << 32;
    d |= (uint64_t)1 << 62;
    return d;
}
#endif

// Persistent over the B·NH·ceil(T/128) items (the header says how): the ring's step count runs on across
// a block's items, and the query tile has QBUF buffers (full and empty barriers of its own), so the
// producer loads the next item's queries and first keys while the consumers finish the current one.
template <int HS>
__global__ void __launch_bounds__(FA90_THREADS, 1)
fa90_forward_kernel(const __grid_constant__ CUtensorMap tqkv, bf16* out, float* lse, int B, int T, int NH, int NKV) {
#if defined(WG_DEVICE_CODE)
    using Cfg = Fa90Cfg<HS>;
    constexpr int QB = Cfg::QBUF;
    extern __shared__ unsigned char smem_raw[];
    uint32_t base = (smem_u32(smem_raw) + 1023) & ~1023u;
    uint32_t sq0 = base, stages = base + QB * Cfg::TILE;
    uint32_t qfull = stages + FA90_STAGES * Cfg::STAGE, qempty = qfull + 8 * QB;
    uint32_t full = qempty + 8 * QB, empty = full + 8 * FA90_STAGES;
    int wg = threadIdx.x / 128, t = threadIdx.x % 128;
    int BH = B * NH, ntq = ceil_div(T, FA90_BQ), nitems = BH * ntq;
    if (threadIdx.x == 0) {
        for (int i = 0; i < QB; i++) { mbar_init(qfull + 8 * i, 1); mbar_init(qempty + 8 * i, 2); }
        for (int s = 0; s < FA90_STAGES; s++) { mbar_init(full + 8 * s, 1); mbar_init(empty + 8 * s, 2); }
        mbar_fence_init();
    }
    __syncthreads();
    if (wg == 0) {  // producer
        regs_dec<40>();
        if (t == 0) {
            int it = 0, n = 0;
            for (int w = blockIdx.x; w < nitems; w += gridDim.x, n++) {
                int bh = w % BH, b = bh / NH, h = bh % NH, j = h / (NH / NKV), q0 = (ntq - 1 - w / BH) * FA90_BQ;
                int nkv = ceil_div(min(q0 + FA90_BQ, T), FA90_BKV), row0 = b * T;
                int qcol = h * HS, kcol = (NH + j) * HS, vcol = (NH + NKV + j) * HS, qb = n % QB;
                uint32_t sq = sq0 + qb * Cfg::TILE;
                if (n >= QB) mbar_wait(qempty + 8 * qb, (n / QB - 1) & 1);
                mbar_arrive_expect_tx(qfull + 8 * qb, Cfg::TILE);
                for (int x = 0; x < Cfg::BOXES; x++) tma_load_2d(sq + x * FA90_BQ * 128, &tqkv, qcol + 64 * x, row0 + q0, qfull + 8 * qb);
                for (int kv = 0; kv < nkv; kv++, it++) {
                    int s = fa90_stage_fill(full, empty, it, Cfg::STAGE);
                    uint32_t k = stages + s * Cfg::STAGE, v = k + Cfg::TILE;
                    for (int x = 0; x < Cfg::BOXES; x++) {
                        tma_load_2d(k + x * FA90_BKV * 128, &tqkv, kcol + 64 * x, row0 + kv * FA90_BKV, full + 8 * s);
                        tma_load_2d(v + x * FA90_BKV * 128, &tqkv, vcol + 64 * x, row0 + kv * FA90_BKV, full + 8 * s);
                    }
                }
            }
        }
        return;
    }
    regs_inc<232>();
    int c = wg - 1, lane = t % 32, warp = t / 32;
    int rloc = c * 64 + warp * 16 + lane / 4;  // this thread's rows in an item's block: rloc, rloc + 8
    float sl2 = rsqrtf((float)HS) * FA_LOG2E;
    float o[HS / 2], sc[FA90_BKV / 2], m[2], l[2];
    uint32_t pa[FA90_BKV / 4];  // P in bf16, the A fragments of P·V's 8 k-steps
    int it = 0, n = 0;
    for (int w = blockIdx.x; w < nitems; w += gridDim.x, n++) {
        int bh = w % BH, b = bh / NH, h = bh % NH, q0 = (ntq - 1 - w / BH) * FA90_BQ;
        int nkv = ceil_div(min(q0 + FA90_BQ, T), FA90_BKV), row0 = b * T, qb = n % QB;
        uint32_t sq = sq0 + qb * Cfg::TILE;
        #pragma unroll
        for (int i = 0; i < HS / 2; i++) o[i] = 0.0f;
        m[0] = m[1] = -INFINITY;
        l[0] = l[1] = 0.0f;
        // S = Q·K_kvᵀ into sc (the first k-step overwrites: no zeroing of the accumulators)
        auto issue_s = [&](uint32_t k) {
            #pragma unroll
            for (int kk = 0; kk < HS / 16; kk++) {
                uint64_t da = wgmma_desc(sq + (kk / 4) * FA90_BQ * 128 + c * 64 * 128 + (kk % 4) * 32);
                uint64_t db = wgmma_desc(k + (kk / 4) * FA90_BKV * 128 + (kk % 4) * 32);
                wgmma_m64n128k16<0, 0>(sc, da, db, kk > 0);
            }
            wgmma_commit();
        };
        // O += P·V of the stage sp, P in pa
        auto issue_pv = [&](int sp) {
            uint32_t vp = stages + sp * Cfg::STAGE + Cfg::TILE;
            #pragma unroll
            for (int kk = 0; kk < FA90_BKV / 16; kk++) fa90_wgmma_rs<HS>(o, pa + 4 * kk, fa90_desc_mn(vp + kk * 2048, FA90_BKV * 128));
            wgmma_commit();
        };
        // the online softmax of step kv's S: masked and scaled, the rows' new max and sum; sc becomes P
        // (fp32) and alpha[hh] the factor for O's rows
        auto softmax = [&](int kv, float alpha[2]) {
            int k0 = kv * FA90_BKV, diag = k0 + FA90_BKV > q0 + c * 64;
            #pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                int q = q0 + rloc + 8 * hh;
                float mx = -INFINITY;
                #pragma unroll
                for (int i = 0; i < FA90_BKV / 8; i++)
                    #pragma unroll
                    for (int e = 0; e < 2; e++) {
                        float x = sc[4 * i + 2 * hh + e] * sl2;
                        if (diag && k0 + 8 * i + 2 * (lane % 4) + e > q) x = -INFINITY;
                        sc[4 * i + 2 * hh + e] = x;
                        mx = fmaxf(mx, x);
                    }
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                // finite: key 0 (first step) or the row's own key (diagonal step) is never masked
                float mnew = fmaxf(m[hh], mx);
                alpha[hh] = exp2f(m[hh] - mnew);
                m[hh] = mnew;
                l[hh] *= alpha[hh];
                #pragma unroll
                for (int i = 0; i < FA90_BKV / 8; i++)
                    #pragma unroll
                    for (int e = 0; e < 2; e++) {
                        float p = exp2f(sc[4 * i + 2 * hh + e] - mnew);
                        sc[4 * i + 2 * hh + e] = p;
                        l[hh] += p;
                    }
            }
        };
        auto pack_p = [&] {
            #pragma unroll
            for (int i = 0; i < FA90_BKV / 4; i++) pa[i] = fa_pack(sc[2 * i], sc[2 * i + 1]);
        };
        // the query tile is free once the item's last S is done: one arrival per consumer
        auto release_q = [&] { if (t == 0) mbar_arrive(qempty + 8 * qb); };
        // Step kv > 0: S = Q·K_kvᵀ is issued, then O += P_(kv-1)·V_(kv-1); the softmax of S runs while the
        // tensor cores do the second, and O is rescaled once that is done. O sees the same operations in
        // the same order as without the overlap (rescale, then add P·V), so the result is bitwise the
        // same. The stage of kv - 1 is held until its P·V is done, so two stages are in use: a ring of
        // three keeps the next tile's copy ahead.
        float alpha[2];
        mbar_wait(qfull + 8 * qb, (n / QB) & 1);
        int sprev = fa90_stage_wait(full, it++);
        wgmma_fence();
        issue_s(stages + sprev * Cfg::STAGE);
        wgmma_wait<0>();
        if (nkv == 1) release_q();
        softmax(0, alpha);  // O is still zero: no rescale
        pack_p();
        for (int kv = 1; kv < nkv; kv++) {
            int s = fa90_stage_wait(full, it++);
            wgmma_fence();
            issue_s(stages + s * Cfg::STAGE);
            issue_pv(sprev);
            wgmma_wait<1>();  // S is done; P·V may still run
            if (kv == nkv - 1) release_q();
            softmax(kv, alpha);
            wgmma_wait<0>();  // P·V of the previous step: its stage and its registers are free
            fa90_stage_release(empty, sprev);
            #pragma unroll
            for (int hh = 0; hh < 2; hh++)
                #pragma unroll
                for (int nd = 0; nd < HS / 8; nd++) { o[4 * nd + 2 * hh] *= alpha[hh]; o[4 * nd + 2 * hh + 1] *= alpha[hh]; }
            pack_p();
            sprev = s;
        }
        wgmma_fence();
        issue_pv(sprev);  // the last step's P·V
        wgmma_wait<0>();
        fa90_stage_release(empty, sprev);

        #pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            l[hh] += __shfl_xor_sync(0xffffffffu, l[hh], 1);
            l[hh] += __shfl_xor_sync(0xffffffffu, l[hh], 2);
            int q = q0 + rloc + 8 * hh;
            float inv = 1.0f / l[hh];
            #pragma unroll
            for (int nd = 0; nd < HS / 8; nd++) { o[4 * nd + 2 * hh] *= inv; o[4 * nd + 2 * hh + 1] *= inv; }
            if (lane % 4 == 0 && q < T) lse[(size_t)bh * T + q] = (m[hh] + log2f(l[hh])) * FA_LN2;
        }
        size_t C = (size_t)NH * HS;  // the accumulator has the mma.sync layout per warp: fa_store_rows writes it
        fa_store_rows<HS>(out + (size_t)row0 * C + h * HS, C, (const float(*)[4])o, 1.0f, q0 + c * 64 + warp * 16, T, lane);
    }
#endif
}

template <int HS>
static void fa90_forward_launch(const CUtensorMap& map, bf16* out, float* lse, int B, int T, int NH, int NKV,
                              cudaStream_t st) {
    size_t smem = Fa90Cfg<HS>::smem;
    int items = B * NH * ceil_div(T, FA90_BQ), sms = current_sm_count(), grid = items < sms ? items : sms;
    cuda_check(cudaFuncSetAttribute(fa90_forward_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    fa90_forward_kernel<HS><<<grid, FA90_THREADS, smem, st>>>(map, out, lse, B, T, NH, NKV);
    cuda_check_launch();
}

// --- backward ------------------------------------------------------------------------------------

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

#if !defined(__CUDA_ARCH__) || defined(WG_DEVICE_CODE)
// accumulate 0: D = A·B (the first k-step: the accumulators need no zeroing, which would sit between
// the fence and the wgmma and make ptxas serialize them)
template <int SN> __device__ __forceinline__ void fa90_wgmma_ss(float* d, uint64_t a, uint64_t b, int accumulate) {
    if constexpr (SN == 64) fa90_wgmma_ss_n64(d, a, b, accumulate);
    else fa90_wgmma_ss_n32(d, a, b, accumulate);
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

// tq: qkv in 128-row boxes, tk: qkv in 64-row boxes, to: dout in 128-row boxes. BIAS: the column sums
// into bias_partial (a template parameter, so that kernels without them are built as before they came;
// with it, the test of bias_partial stays, so that those kernels are built as when they were measured)
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
    int bh = blockIdx.x, b = bh / NH, h = bh % NH, j = h / (NH / NKV);
    int q0 = (gridDim.y - 1 - blockIdx.y) * FA90_BQ;
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
        fa90_colsum_rows<HS>(red, bias_partial + (size_t)(b * gridDim.y + q0 / FA90_BQ) * ld + h * HS,
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
    int bj = blockIdx.x, b = bj / NKV, j = bj % NKV, G = NH / NKV;
    int k0 = blockIdx.y * FA90_BKV, i0 = k0 / BQ, nq = ceil_div(T, BQ), nper = nq - i0, nsteps = G * nper;
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
              // copies, where at hs = 64 copies are 2-3% faster (doc/results.md, Attention)
        fa90_overlap_loop<decltype(issue_s)&, decltype(issue_dkdv)&, decltype(compute)&, decltype(pack)&>(
            stages, Cfg::STAGE, full, empty, nsteps, issue_s, issue_dkdv, compute, pack);
    }
    if (ROPE) fa_rope_acc_back<HS>((float(*)[4])dk, rope, k0 + c * 64 + warp * 16, T, lane);
    size_t ld = (size_t)(NH + 2 * NKV) * HS;
    bf16* dst = dqkv + (size_t)row0 * ld + (NH + j) * HS;  // dqkv has qkv's layout: dk, then NKV heads on, dv
    fa_store_rows<HS>(dst, ld, (const float(*)[4])dk, rsqrtf((float)HS), k0 + c * 64 + warp * 16, T, lane);
    fa_store_rows<HS>(dst + NKV * HS, ld, (const float(*)[4])dv, 1.0f, k0 + c * 64 + warp * 16, T, lane);
    if (BIAS && bias_partial) {
        float* part = bias_partial + (size_t)(b * gridDim.y + blockIdx.y) * ld + (NH + j) * HS;
        fa90_colsum_rows<HS>(red, part, (const float(*)[4])dk, rsqrtf((float)HS), k0 + c * 64 + warp * 16, T, lane,
                             c * 4 + warp, c * 128 + t);
        fa90_colsum_rows<HS>(red + 8 * HS, part + NKV * HS, (const float(*)[4])dv, 1.0f, k0 + c * 64 + warp * 16, T,
                             lane, c * 4 + warp, c * 128 + t);
    }
#endif
}

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
    dkdv<<<dim3(B * NKV, ceil_div(T, FA90_BKV)), FA90_THREADS, s1, st>>>(q128, qbq, obq, dqkv, lse, D, rope,
                                                                         bias_partial, T, NH, NKV);
    cuda_check_launch();
    dq<<<dim3(B * NH, ceil_div(T, FA90_BQ)), FA90_THREADS, s2, st>>>(q128, q64, o128, dqkv, lse, D, rope, bias_partial,
                                                                     T, NH, NKV);
    cuda_check_launch();
}

// The kernels exist in sm_90a builds (LLMC_SM90A) and run on sm_90 GPUs; the device's capability is
// asked once.
static inline int flash_sm90_available(void) {
#ifdef LLMC_SM90A
    static int available = -1;
    if (available < 0) {
        int dev = 0, major = 0;
        cuda_check(cudaGetDevice(&dev));
        cuda_check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        available = major == 9;
    }
    return available;
#else
    return 0;
#endif
}

// out (B, T, C) bf16 and lse (B, NH, T) fp32 from qkv, as flash_attention_forward without RoPE (the
// layer rotates q and k first); hs 64 or 128; needs flash_sm90_available().
static inline void flash_sm90_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH, int NKV,
                                      cudaStream_t st) {
    int hs = flash_attention_head_size(T, C, NH, NKV), W = (NH + 2 * NKV) * hs;
    CUtensorMap map = tma_map_bf16(qkv, B * T, W, W, 128);
    if (hs == 64) fa90_forward_launch<64>(map, out, lse, B, T, NH, NKV, st);
    else fa90_forward_launch<128>(map, out, lse, B, T, NH, NKV, st);
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
// of dqkv as written (see the header); not with rope (no model here has both: llmc/attention.cuh sums a
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
