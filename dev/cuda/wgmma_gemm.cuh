// wgmma_gemm.cuh: an accumulating Hopper GEMM on the ring of llmc/ptx/sm90_wgmma.cuh,
//   D (M, N) fp32 (+)= op(A) (M, K) · op(B) (K, N),  bf16 operands, fp32 accumulators,
// with the operands stored as matmul.cuh takes them: A (M, K) row-major, or (K, M) when trans_a; B (K,
// N), or (N, K) when trans_b. It is the LM head's dx and dW GEMM (llmc/head/fused_lce_blocks.cuh):
//   dx_r (n, C) (+)= G (n, vb) · W_v (vb, C)       A row-major, B (K, N): B is "MN-major" to the wgmmas
//   dW_v (vb, C) += Gᵀ (vb, n) · x_r (n, C)        A stored (K, M) and B (K, N): both MN-major
// in variant 6 of dev/cuda/fused_lce.cu (the blocks' GEMM hook, fused_lce_variants.cuh; variant 5 runs
// them on cuBLASLt), both in one launch (wg_gemm_run_pair: dx's tiles, then dW's, each GEMM with its
// own tile width).
// dev/cuda/wgmma_gemm.cu checks it against cuBLASLt (bitwise equal: the same fp32 sums in the same
// order) and times it beside it.
//
// Why our own: a block's GEMMs are a few tens of microseconds each, thousands per training step, and
// the head's layout (llmc/head/fused_lce_blocks_plan.h) can only fill the GPU's waves with tiles it can count. Ours
// are tiles of 128 x BN (BN = 128, 192 or 256, the caller's choice), walked by a persistent grid of one
// block per SM, so a launch of T tiles takes ceil(T / SMs) waves of K/64 steps, which the layout counts
// exactly; and the choice of BN lets a GEMM fill its waves (C = 768: dW of a 4096-column vocab block is
// 32 x 4 tiles of 192 columns on 132 SMs, where 256 gives 32 x 3).
//
// The epilogue never reads D with the SMs: each consumer warpgroup writes its 64 x BN fp32 tile to
// shared memory in pieces of 64 rows x 32 columns (8 KiB, 128-byte swizzled, two buffers per consumer)
// and the copy engine adds each piece into D in L2 (cp.reduce.async.bulk.tensor add: one fp32 rounding
// of D + acc, as cuBLASLt's beta = 1) or stores it (accumulate = 0). Each element of D is added to once
// per launch, so the result is bitwise repeatable.
// K needs no multiple: the copies past K arrive as zeros, which add nothing. Needs 16-byte aligned
// pointers and row strides (lda, ldb multiples of 8, ldd of 4) and an sm_90a build on Hopper.
#pragma once
#include "../../llmc/core/cuda_common.cuh"
#include "../../llmc/ptx/sm90_wgmma.cuh"

#define WG_GEMM_PIECE_BYTES (64 * 32 * 4)
#define WG_GEMM_SMEM (WG_COOP_SMEM + 1024 + 4 * WG_GEMM_PIECE_BYTES)  // + alignment, two pieces per consumer

// One GEMM's tensor maps and sizes, made on the host (no GPU work) and run any number of times
typedef struct {
    CUtensorMap ta, tb, td;
    int M, N, K, mn_a, mn_b, bn;
} WgGemm;

// What one launch walks: the tiles of g[0], then those of g[1] (none when tiles[1] = 0)
typedef struct {
    WgGemm g[2];
    int tiles[2], accumulate[2];
} WgGemmLaunch;

#if !defined(__CUDA_ARCH__) || defined(WG_DEVICE_CODE)
// the producer's K steps of tile `tile` of g (MN_A, MN_B: the operand is MN-major, A stored (K, M), B
// stored (K, N), as in wg_produce; BN: the tile's columns)
template <int MN_A, int MN_B, int BN>
__device__ __forceinline__ void wg_gemm_produce(const WgRing& ring, const WgGemm& g, int tile, int& it) {
    int mt = ceil_div(g.M, WG_BM);
    wg_produce<MN_A, MN_B, BN>(ring, &g.ta, &g.tb, tile % mt * WG_BM, tile / mt * BN, ceil_div(g.K, WG_BK), it);
}

// consumer c's half of tile `tile` of g: its K steps into d, then its 64 x BN fp32 rows added into D
// (or stored) by the copy engine, in pieces of 64 x 32 through two buffers at `stage`
template <int MN_A, int MN_B, int BN>
__device__ __forceinline__ void wg_gemm_consume(const WgRing& ring, float* d, const WgGemm& g, int tile,
                                                int accumulate, int c, uint32_t stage, int& pieces, int& it) {
    int t = threadIdx.x % 128, lane = t % 32, warp = t / 32, mt = ceil_div(g.M, WG_BM);
    wg_consume<MN_A, MN_B, BN>(ring, d, c * 64 * WG_BK * 2, ceil_div(g.K, WG_BK), it);
    int m0 = tile % mt * WG_BM + c * 64, n0 = tile / mt * BN;
    #pragma unroll
    for (int p = 0; p < BN / 32; p++, pieces++) {
        uint32_t buf = stage + (pieces % 2) * WG_GEMM_PIECE_BYTES;
        if (t == 0) bulk_wait_read_1();  // the piece before the last one has left this buffer
        asm volatile("bar.sync %0, 128;" :: "r"(3 + c) : "memory");
        // the accumulator fragment: warp w holds rows 16w .. 16w+15; register 4j+e sits at row lane/4
        // (+8 for e >= 2), column 8j + 2·(lane % 4) + (e & 1); this piece is j = 4p .. 4p + 3
        #pragma unroll
        for (int jj = 0; jj < 4; jj++)
            #pragma unroll
            for (int h = 0; h < 2; h++) {
                int row = warp * 16 + lane / 4 + 8 * h, col = 8 * jj + 2 * (lane % 4);  // within the piece
                uint32_t a = buf + row * 128 + (((col / 4) ^ (row % 8)) << 4) + (col % 4) * 4;
                asm volatile("st.shared.v2.f32 [%0], {%1, %2};" :: "r"(a), "f"(d[4 * (4 * p + jj) + 2 * h]),
                             "f"(d[4 * (4 * p + jj) + 2 * h + 1]) : "memory");
            }
        fence_proxy_async();
        asm volatile("bar.sync %0, 128;" :: "r"(3 + c) : "memory");
        if (t == 0) {
            if (accumulate) tma_add_2d(&g.td, n0 + 32 * p, m0, buf);
            else tma_store_2d(&g.td, n0 + 32 * p, m0, buf);
            bulk_commit();
        }
    }
}
#endif

// The tiles of L.g[0] (layout MN_A, MN_B, BN columns) and then of L.g[1] (MN_A2, MN_B2, BN2), dealt to
// the persistent blocks in turn: a block's next tile, of either GEMM, streams into the ring while its
// consumers add the last one into D, so one launch of two GEMMs ends with one epilogue, not two.
template <int MN_A, int MN_B, int BN, int MN_A2, int MN_B2, int BN2>
__global__ void __launch_bounds__(WG_THREADS, 1)
wg_gemm_kernel(const __grid_constant__ WgGemmLaunch L) {
#if defined(WG_DEVICE_CODE)
    extern __shared__ unsigned char smem_raw[];
    WgRing ring = wg_ring_init(smem_raw, WG_COOP_STAGES, WG_BM, 2, BN > BN2 ? BN : BN2);
    int wg = threadIdx.x / 128, t = threadIdx.x % 128, it = 0, t0 = L.tiles[0], tiles = t0 + L.tiles[1];
    pdl_launch_dependents();
    if (wg == 0) {  // producer
        regs_dec<40>();
        pdl_wait();  // A and B may be the previous kernel's output (the consumers start after the producer)
        if (t == 0)
            for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
                if (tile < t0) wg_gemm_produce<MN_A, MN_B, BN>(ring, L.g[0], tile, it);
                else wg_gemm_produce<MN_A2, MN_B2, BN2>(ring, L.g[1], tile - t0, it);
            }
        return;
    }
    regs_inc<232>();
    int c = wg - 1, pieces = 0;
    uint32_t stage = ((ring.empty + 8 * WG_COOP_STAGES + 1023) & ~1023u) + c * 2 * WG_GEMM_PIECE_BYTES;
    float d[(BN > BN2 ? BN : BN2) / 2];
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        if (tile < t0) wg_gemm_consume<MN_A, MN_B, BN>(ring, d, L.g[0], tile, L.accumulate[0], c, stage, pieces, it);
        else wg_gemm_consume<MN_A2, MN_B2, BN2>(ring, d, L.g[1], tile - t0, L.accumulate[1], c, stage, pieces, it);
    }
    if (t == 0) bulk_wait();
#endif
}

// One GEMM's tensor maps and sizes (no GPU work); bn: the tile's columns, 128, 192 or 256
static inline WgGemm wg_gemm_make(float* D, int ldd, const bf16* A, int lda, int trans_a, const bf16* B, int ldb,
                                  int trans_b, int M, int N, int K, int bn) {
    WgGemm g;
    if (M < 1 || N < 1 || K < 1 || lda % 8 || ldb % 8 || ldd % 4 || (bn != 128 && bn != 192 && bn != 256)) {
        fprintf(stderr, "error: wg_gemm_make: M=%d N=%d K=%d lda=%d ldb=%d ldd=%d bn=%d\n", M, N, K, lda, ldb, ldd, bn);
        check_fail("wg_gemm_make: needs sizes >= 1, row strides of 16 bytes and tiles of 128, 192 or 256 columns",
                   "pad the operands");
    }
    g.M = M; g.N = N; g.K = K; g.bn = bn;
    g.mn_a = trans_a;
    g.mn_b = !trans_b;
    g.ta = trans_a ? tma_map_bf16(A, K, M, lda, 64) : tma_map_bf16(A, M, K, lda, WG_BM);
    g.tb = trans_b ? tma_map_bf16(B, N, K, ldb, bn) : tma_map_bf16(B, K, N, ldb, 64);
    g.td = tma_map_f32(D, M, N, ldd, 64);
    return g;
}

typedef void (*WgGemmKernel)(const WgGemmLaunch);

// the kernel of one GEMM (tiles of bn columns), or of a pair whose second GEMM takes tiles of bn2
template <int MN_A, int MN_B, int BN, int MN_A2, int MN_B2>
static inline WgGemmKernel wg_gemm_kernel_bn2(int bn2) {
    return bn2 == 256 ? wg_gemm_kernel<MN_A, MN_B, BN, MN_A2, MN_B2, 256>
                      : bn2 == 192 ? wg_gemm_kernel<MN_A, MN_B, BN, MN_A2, MN_B2, 192>
                                   : wg_gemm_kernel<MN_A, MN_B, BN, MN_A2, MN_B2, 128>;
}
template <int MN_A, int MN_B>
static inline WgGemmKernel wg_gemm_kernel_for(int bn) {
    return bn == 256 ? wg_gemm_kernel<MN_A, MN_B, 256, MN_A, MN_B, 256>
                     : bn == 192 ? wg_gemm_kernel<MN_A, MN_B, 192, MN_A, MN_B, 192>
                                 : wg_gemm_kernel<MN_A, MN_B, 128, MN_A, MN_B, 128>;
}
static inline WgGemmKernel wg_gemm_kernel_for(int mn_a, int mn_b, int bn) {
    return mn_a ? (mn_b ? wg_gemm_kernel_for<1, 1>(bn) : wg_gemm_kernel_for<1, 0>(bn))
                : (mn_b ? wg_gemm_kernel_for<0, 1>(bn) : wg_gemm_kernel_for<0, 0>(bn));
}
// the LM head's pair: dx (A row-major, B (K, N)) then dW (A stored (K, M), B (K, N))
static inline WgGemmKernel wg_gemm_pair_kernel_for(int bn, int bn2) {
    return bn == 256 ? wg_gemm_kernel_bn2<0, 1, 256, 1, 1>(bn2)
                     : bn == 192 ? wg_gemm_kernel_bn2<0, 1, 192, 1, 1>(bn2) : wg_gemm_kernel_bn2<0, 1, 128, 1, 1>(bn2);
}

// Once per process before wg_gemm_run: the kernels' shared memory is above the 48 KiB default
static inline void wg_gemm_setup(void) {
    for (int i = 0; i < 12; i++)
        cuda_check(cudaFuncSetAttribute(wg_gemm_kernel_for(i / 6, i / 3 % 2, 128 + 64 * (i % 3)),
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, WG_GEMM_SMEM));
    for (int i = 0; i < 9; i++)
        cuda_check(cudaFuncSetAttribute(wg_gemm_pair_kernel_for(128 + 64 * (i / 3), 128 + 64 * (i % 3)),
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, WG_GEMM_SMEM));
}

static inline int wg_gemm_tiles(const WgGemm* g) { return ceil_div(g->M, WG_BM) * ceil_div(g->N, g->bn); }

static inline void wg_gemm_launch(WgGemmKernel kernel, const WgGemmLaunch* L, const GpuContext* ctx) {
    int tiles = L->tiles[0] + L->tiles[1], grid = tiles < ctx->sm_count ? tiles : ctx->sm_count;
    launch_pdl(kernel, grid, WG_THREADS, WG_GEMM_SMEM, ctx->stream, *L);
}

// D += the product (accumulate = 1) or D = it (0)
static inline void wg_gemm_run(const WgGemm* g, int accumulate, const GpuContext* ctx) {
    WgGemmLaunch L = {{*g, *g}, {wg_gemm_tiles(g), 0}, {accumulate, accumulate}};
    wg_gemm_launch(wg_gemm_kernel_for(g->mn_a, g->mn_b, g->bn), &L, ctx);
}

// The LM head's dx GEMM g (A row-major, B stored (K, N)) and dW GEMM h (A stored (K, M), B (K, N)) in
// one launch: g's tiles first, then h's, each GEMM with its own tile width and accumulate flag
static inline void wg_gemm_run_pair(const WgGemm* g, int accumulate, const WgGemm* h, int accumulate_h,
                                    const GpuContext* ctx) {
    if (g->mn_a || !g->mn_b || !h->mn_a || !h->mn_b)
        check_fail("wg_gemm_run_pair: takes the LM head's dx GEMM (A row-major, B (K, N)), then its dW GEMM "
                   "(A (K, M), B (K, N))", "run other GEMMs one by one with wg_gemm_run");
    WgGemmLaunch L = {{*g, *h}, {wg_gemm_tiles(g), wg_gemm_tiles(h)}, {accumulate, accumulate_h}};
    wg_gemm_launch(wg_gemm_pair_kernel_for(g->bn, h->bn), &L, ctx);
}
