// flash_attention_sm90.cuh: causal attention on Hopper (sm_90a) in the manner of FlashAttention-3: the
// forward here, and what the backward (llmc/attention/flash_attention_sm90_backward.cuh) shares with it: the tile
// sizes, the ring's barriers, the register-operand wgmma. Exact, with grouped-query attention and RoPE as
// llmc/attention/flash_attention.cuh has them (the same inputs, outputs, order of sums and determinism: no
// atomics). The layer (llmc/attention/attention.cuh) takes these kernels on an sm_90 GPU in an sm_90a build, and
// the mma.sync ones elsewhere (sm_80 and later).
// Each kernel: a block of 384 threads, warpgroup 0 producing (one thread issues the TMA copies into a
// ring of 3 stages) and warpgroups 1 and 2 consuming, each with 64 rows of the block's 128; wgmma
// multiplies from shared memory, and the softmax's P (or dS) stays in registers as the A operand of the
// next wgmma (the accumulator layout is the A-fragment layout).
//   forward: persistent: a grid of at most one block per SM, block x taking the work items x, x + grid,
//            ... of (b·NH + h, 128 queries), the heaviest first; the query tile per item, key and value
//            tiles of 128 rows through the ring: S (64 x 128 a consumer) = Q·Kᵀ by m64n128k16 (K-major
//            operands); the online softmax as llmc/attention/flash_attention.cuh's (base 2, the scale folded in,
//            rows owned by quads of lanes); O (64 x hs) += P·V by m64n{hs}k16 with V read MN-major. The
//            softmax of one tile runs while the tensor cores multiply the previous tile's P·V
//            (FlashAttention-3's overlap within a warpgroup)
// RoPE: the layer rotates q and k by a pass before the forward (llmc/layers/rope.cuh; the forward here does not
// rotate its query tile as the mma.sync one does).
// Tiles: rows of 64 bf16 (128 bytes) with 128-byte swizzling, hs/64 boxes side by side, as
// llmc/ptx/sm90_wgmma.cuh's layout contract says. A key or query tile past the end of a sequence reads the
// next sequence's rows (past the tensor's end: zeros); keys past T are later than every query < T, so the
// causal mask removes them, and rows past T are not stored (and get lse = +inf, D = 0 in the backward).
// Not done: the two consumers taking turns, TMA stores of the outputs (dev/cuda/README.md). The backward
// kernels are not persistent: their items differ up to 32-fold in cost at T = 4096, and a fixed share of
// items per block leaves SMs idle that a plain grid's hardware scheduler keeps busy (doc/log.md).
#pragma once
#include "../ptx/sm90_wgmma.cuh"
#include "flash_attention.cuh"  // the tiles' helpers (fa_pack, fa_store_rows) and the checks

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

// --- device helpers: the register-operand wgmma, the ring's barriers, the MN-major descriptor ----

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

// The ring: per stage, full[s] (one arrival: the producer's, with its copies' bytes) and empty[s] (two:
// the consumers').
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

// descriptor of an MN-major tile with 128-byte swizzling whose 64-column boxes are lbo bytes apart
__device__ __forceinline__ uint64_t fa90_desc_mn(uint32_t smem_addr, uint32_t lbo) {
    uint64_t d = (uint64_t)((smem_addr & 0x3FFFF) >> 4);
    d |= (uint64_t)((lbo >> 4) & 0x3FFF) << 16;
    d |= (uint64_t)(1024 >> 4) << 32;
    d |= (uint64_t)1 << 62;
    return d;
}
#endif

// --- kernels ---------------------------------------------------------------------------------

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

// --- launchers -------------------------------------------------------------------------------

template <int HS>
static void fa90_forward_launch(const CUtensorMap& map, bf16* out, float* lse, int B, int T, int NH, int NKV,
                              cudaStream_t st) {
    size_t smem = Fa90Cfg<HS>::smem;
    int items = B * NH * ceil_div(T, FA90_BQ), sms = current_sm_count(), grid = items < sms ? items : sms;
    cuda_check(cudaFuncSetAttribute(fa90_forward_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    fa90_forward_kernel<HS><<<grid, FA90_THREADS, smem, st>>>(map, out, lse, B, T, NH, NKV);
    cuda_check_launch();
}

// The kernels exist in sm_90a builds (LLMC_SM90A) and run on sm_90 GPUs: the current device's
// capability, asked on every call (an attribute read, no synchronisation), so that a process with GPUs
// of two kinds asks about the one it runs on.
static inline int flash_sm90_available(void) {
#ifdef LLMC_SM90A
    int dev = 0, major = 0;
    cuda_check(cudaGetDevice(&dev));
    cuda_check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    return major == 9;
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
