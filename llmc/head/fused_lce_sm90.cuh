// fused_lce_sm90.cuh: the LM head's two logits GEMMs on Hopper tensor cores (sm_90a), on the TMA ring
// and m64n256k16 wgmmas of sm90_wgmma.cuh, with fp32 accumulators that never leave the chip as logits:
//   forward (cooperative, 128 x 256 tiles): each tile is folded, while still in registers, into a
//     running (max, Σexp, Σs) of each row; only those three floats per row and vocab split are stored,
//     and fused_lce_mma_finish_kernel (fused_lce_sm80_forward.cuh, shared with the mma.sync forward) merges
//     the splits and adds the target logit. A block owns 128 rows and walks the vocab tiles split,
//     split + splits, ... without draining its pipeline between tiles.
//   gradient (ping-pong, 64 x 256 tiles): dL/dz of a (row block, vocab block) of fused_lce_blocks.cuh,
//     as bf16, staged in shared memory and stored by the copy engine; one consumer's epilogue runs
//     beside the other's K loop (cooperative tiles stall both consumers in the epilogue).
// The other arrangements, and what each epilogue costs beside the tensor cores, were measured on an
// H200: dev/cuda/fused_lce_log.md. Two things the epilogues must avoid: a run-time option branch inside
// the unrolled loop over a tile (predicated, it runs anyway: soft-capping's tanh made three
// special-function ops per logit of one; hence the CAP template parameter), and 4-byte stores straight
// from the accumulator layout (8 rows x 16 bytes per warp instruction, a quarter of the gradient's time;
// hence stmatrix and TMA stores of whole lines).
#pragma once
#include "../ptx/sm90_wgmma.cuh"
#include "fused_lce_common.cuh"
#include "fused_lce_sm80_forward.cuh"  // fused_lce_mma_finish_kernel: the splits merged, the target logit added

// --- kernels ---------------------------------------------------------------------------------

// Folds this thread's logits of a 64 x 256 accumulator tile (register 4j + 2h + e: row lane/4 + 8h,
// column c0 + 8j + e of the vocabulary, c0 = tile's first column + 2·(lane % 4)) into the running (max,
// Σexp relative to it, Σs) of its two rows. CAP: soft-capping on (the logits are replaced by s); FULL:
// every column of the tile is < V (no per-logit bounds checks); SUM: Σs kept (label smoothing needs it).
// Otherwise the row fold of fused_lce_common.cuh (fused_lce_fold), with one shortcut: once a row has a max,
// a full tile without soft-capping is summed relative to it without looking for its own (s stays Σexp
// relative to m, m need not be the max): one pass instead of two, and the max is taken only when a sum
// passes 2^64, i.e. a logit lies ~44 above m (then the tile is folded again).
#define FUSED_LCE_FOLD_BIG 0x1p64f

// acc = Σ 2^(z·log2(e) − ref2) and su = Σz (SUM) over this thread's 64 logits z of row half h (register
// layout as in fused_lce_wgmma_fold): the one-pass shortcut of a full tile
template <bool SUM>
__device__ __forceinline__ void fused_lce_wgmma_sum_exp(const float d[128], int h, float ref2, float& acc, float& su) {
    acc = 0.0f;
    su = 0.0f;
    #pragma unroll
    for (int j = 0; j < 32; j++)
        #pragma unroll
        for (int e = 0; e < 2; e++) {
            float z = d[4 * j + 2 * h + e];
            acc += exp2f(fmaf(z, FUSED_LCE_LOG2E, -ref2));
            if (SUM) su += z;
        }
}

template <bool CAP, bool FULL, bool SUM>
__device__ __forceinline__ void fused_lce_wgmma_fold(const float d[128], float m[2], float s[2], float sum[2], int c0, int V,
                                                     float cap, float inv_cap) {
    #pragma unroll
    for (int h = 0; h < 2; h++) {
        float acc, su;
        if (!CAP && FULL && m[h] > -INFINITY) {
            fused_lce_wgmma_sum_exp<SUM>(d, h, m[h] * FUSED_LCE_LOG2E, acc, su);
            if (acc <= FUSED_LCE_FOLD_BIG) {
                s[h] += acc;
                sum[h] += su;
                continue;
            }
        }
        float v[64];  // s_j of this thread's columns of row half h, -inf past the vocabulary
        #pragma unroll
        for (int j = 0; j < 32; j++)
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                float z = d[4 * j + 2 * h + e];
                if (CAP) z = cap * fused_lce_tanh(z * inv_cap);
                v[2 * j + e] = FULL || c0 + 8 * j + e < V ? z : -INFINITY;
            }
        fused_lce_fold<64, SUM>(m[h], s[h], sum[h], v);
    }
}

// part (splits, N, 3): running max (or a value below it), Σexp relative to it, Σs of each row over its
// split's tiles (0 without SUM)
template <bool CAP, bool SUM>
__global__ void __launch_bounds__(WG_THREADS, 1)
fused_lce_wgmma_forward_kernel(const __grid_constant__ CUtensorMap tx, const __grid_constant__ CUtensorMap tw,
                               float* part, int N, int C, int V, int splits, float softcap) {
#if defined(WG_DEVICE_CODE)
    extern __shared__ unsigned char smem_raw[];
    WgRing ring = wg_ring_init(smem_raw, WG_COOP_STAGES, WG_BM, 2);
    int wg = threadIdx.x / 128, t = threadIdx.x % 128, it = 0;
    int m0 = blockIdx.x * WG_BM, split = blockIdx.y, ntiles = ceil_div(V, WG_BN), kt_count = C / WG_BK;
    if (wg == 0) {  // producer
        regs_dec<40>();
        if (t == 0)
            for (int nt = split; nt < ntiles; nt += splits) wg_produce(ring, &tx, &tw, m0, nt * WG_BN, kt_count, it);
        return;
    }
    regs_inc<232>();
    float cap = softcap, inv_cap = cap > 0.0f ? 1.0f / cap : 0.0f;
    int lane = t % 32, warp = t / 32;
    float m[2] = {-INFINITY, -INFINITY}, s[2] = {0.0f, 0.0f}, sum[2] = {0.0f, 0.0f};  // rows lane/4, lane/4 + 8
    float d[128];
    #pragma unroll
    for (int i = 0; i < 128; i++) d[i] = 0.0f;
    for (int nt = split; nt < ntiles; nt += splits) {
        wg_consume(ring, d, (wg - 1) * 64 * WG_BK * 2, kt_count, it);
        int c0 = nt * WG_BN + 2 * (lane % 4);
        if ((nt + 1) * WG_BN <= V) fused_lce_wgmma_fold<CAP, true, SUM>(d, m, s, sum, c0, V, cap, inv_cap);
        else fused_lce_wgmma_fold<CAP, false, SUM>(d, m, s, sum, c0, V, cap, inv_cap);
    }
    #pragma unroll
    for (int h = 0; h < 2; h++) {
        #pragma unroll
        for (int o = 1; o <= 2; o <<= 1) {  // the 4 lanes that share a row
            float m2 = __shfl_xor_sync(0xffffffffu, m[h], o), s2 = __shfl_xor_sync(0xffffffffu, s[h], o);
            sum[h] += __shfl_xor_sync(0xffffffffu, sum[h], o);
            lse_merge(m[h], s[h], m2, s2);
        }
        int row = m0 + (wg - 1) * 64 + warp * 16 + lane / 4 + 8 * h;
        if (lane % 4 == 0 && row < N) {
            float* p = part + ((size_t)split * N + row) * 3;
            p[0] = m[h]; p[1] = s[h]; p[2] = sum[h];
        }
    }
#endif
}

// v = c ? x : v, as a select the compiler cannot turn back into an indexed load
__device__ __forceinline__ void fused_lce_select(float& v, bool c, float x) {
    asm("{\n.reg .pred p;\nsetp.ne.b32 p, %1, 0;\nselp.f32 %0, %2, %0, p;\n}" : "+f"(v) : "r"((int)c), "f"(x));
}

// Where column col (< 256) of row row (< 64) of a consumer's bf16 gradient tile lies in its staging
// buffer: four boxes of 64 rows x 64 columns, 128-byte rows with 128-byte swizzling (16-byte chunk k
// of row r at chunk k ^ (r % 8)), as the TMA store expects them (and free of bank conflicts)
__device__ __forceinline__ uint32_t fused_lce_stage_addr(uint32_t out, int row, int col) {
    return out + (col / 64) * (64 * 128) + row * 128 + ((((col % 64) / 8) ^ (row % 8)) << 4) + (col % 8) * 2;
}

// The gradient of this warp's 16 x 256 logits of a consumer's 64 x 256 tile (register layout as in
// fused_lce_wgmma_fold: this thread's rows are lane/4 and lane/4 + 8 of the warp's, row0 and row0 + 8 of the
// row block; its columns c0 + 8j + e of the vocab block), rounded to bf16, into the staging buffer at
// `out` by stmatrix: rows warp·16 .. of the tile. The target's term is left out of the unrolled loop,
// and the thread that holds the target's column writes it again. CAP as in fused_lce_wgmma_fold; FULL:
// every column of the tile is inside the vocab block and < V (no per-logit bounds checks).
template <bool CAP, bool FULL>
__device__ __forceinline__ void fused_lce_wgmma_grad_tile(const float d[128], uint32_t out, int warp, int lane, int row0,
                                                          int c0, const float* lse, const int* targets,
                                                          const float* dloss_rows, float dloss_nv, int r0, int n, int v0,
                                                          int ncols, int V, const FusedLceOptions& opt) {
    FusedLceRowGrad rg[2];
    int counts[2];
    #pragma unroll
    for (int h = 0; h < 2; h++) {
        int row = row0 + 8 * h;  // within the row block; rows past it are computed, never stored
        int tg = row < n ? targets[r0 + row] : -1;
        counts[h] = row < n && !fused_lce_ignored(tg, opt, V);
        float scale = counts[h] ? (dloss_rows ? dloss_rows[r0 + row] : dloss_nv) : 0.0f;
        rg[h] = fused_lce_row_grad(row < n ? lse[r0 + row] : 0.0f, tg - v0, scale, opt, V);  // columns counted from v0
    }
    // matrix i of an x4 store: 8 rows (h = i % 2) x 8 columns (j + i / 2); lane l addresses row l % 8 of l / 8
    int i = lane / 8, trow = warp * 16 + 8 * (i % 2) + lane % 8;
    #pragma unroll
    for (int j = 0; j < 32; j += 2) {
        uint32_t r[4];
        #pragma unroll
        for (int q = 0; q < 4; q++) {
            int jj = j + q / 2, h = q % 2, col = c0 + 8 * jj;  // col even, ncols even: the pair is in or out
            float a = fused_lce_dlogit<CAP, false>(rg[h], d[4 * jj + 2 * h], col);
            float b = fused_lce_dlogit<CAP, false>(rg[h], d[4 * jj + 2 * h + 1], col + 1);
            if (!FULL) {
                if (col >= ncols || v0 + col >= V) a = 0.0f;
                if (col + 1 >= ncols || v0 + col + 1 >= V) b = 0.0f;
            }
            __nv_bfloat162 pr = __floats2bfloat162_rn(a, b);
            r[q] = *(uint32_t*)&pr;
        }
        stmatrix_x4(fused_lce_stage_addr(out, trow, 8 * (j + i / 2)), r[0], r[1], r[2], r[3]);
    }
    __syncwarp();  // the target's element below lands after the stmatrix that wrote it
    #pragma unroll
    for (int h = 0; h < 2; h++) {
        int tt = rg[h].t - c0;  // the target's place among this thread's columns, if it is one of them
        if (!counts[h] || tt < 0 || tt >= WG_BN || tt % 8 >= 2 || rg[h].t >= ncols) continue;
        float zt = 0.0f;  // d[4·(tt/8) + 2h + tt%2] by selects (an index would put d in local memory)
        #pragma unroll
        for (int j = 0; j < 32; j++)
            #pragma unroll
            for (int e = 0; e < 2; e++) fused_lce_select(zt, tt == 8 * j + e, d[4 * j + 2 * h + e]);
        bf16 g = __float2bfloat16(fused_lce_dlogit<CAP, true>(rg[h], zt, rg[h].t));
        int tcol = c0 % WG_BN + tt;  // within the tile
        asm volatile("st.shared.b16 [%0], %1;" :: "r"(fused_lce_stage_addr(out, warp * 16 + lane / 4 + 8 * h, tcol)),
                     "h"(*(unsigned short*)&g) : "memory");
    }
}

#define FUSED_LCE_GRAD_ROWS 64  // rows of a gradient tile (fused_lce_blocks_plan sizes the blocks for them)
#define FUSED_LCE_GRAD_OUT_BYTES (FUSED_LCE_GRAD_ROWS * WG_BN * 2)  // a consumer's staging buffer: one 64 x 256 bf16 tile
#define FUSED_LCE_GRAD_SMEM (WG_PP_STAGES * WG_PP_STAGE_BYTES + 2048 + 2 * FUSED_LCE_GRAD_OUT_BYTES)  // + alignment, barriers

#if !defined(__CUDA_ARCH__) || defined(WG_DEVICE_CODE)
// The ping-pong walk over 64 x 256 logit tiles that the blocks' gradient kernel and the staged path's
// stage kernel share (sm90_wgmma.cuh): the block's tiles b, b + gridDim.x, ... of rows r0 .. r0+n-1 and
// columns v0 .. v0+ncols-1 go to the two consumers in turn, so that one's epilogue runs beside the
// other's K loop (cooperative tiles stall both consumers in the epilogue). An epilogue stages its bf16
// tile in shared memory (stmatrix, at `out`) and one thread stores it with the copy engine through tout
// (boxes of 64 x 64, clipped to n x ncols): full 128-byte lines, off the consumer's critical path; only
// the boxes inside the ncols columns are stored. The producer starts before the previous kernel ends
// (PDL: x and W are never written by the kernels before it); the consumers wait for it, since what
// their epilogues read comes from earlier kernels and the output is still being read by earlier GEMMs.
// Epi, the tile's epilogue: start() runs once per consumer after that wait (it may read what earlier
// kernels wrote); epi(d, out, warp, lane, row0, c0, cb, vt) gets the accumulators (this thread's rows
// row0 and row0 + 8 of the n, its columns c0 + 8j + e counted from v0), the tile's first column cb
// (counted from v0) and its column tile vt.
template <typename Epi>
__device__ __forceinline__ void fused_lce_pingpong_tiles(const CUtensorMap* tx, const CUtensorMap* tw,
                                                         const CUtensorMap* tout, int r0, int n, int v0, int ncols,
                                                         int C, Epi& epi) {
    extern __shared__ unsigned char smem_raw[];
    WgRing ring = wg_ring_init(smem_raw, WG_PP_STAGES, FUSED_LCE_GRAD_ROWS, 1);
    int wg = threadIdx.x / 128, t = threadIdx.x % 128, it = 0;
    int mtiles = ceil_div(n, FUSED_LCE_GRAD_ROWS), tiles = mtiles * ceil_div(ncols, WG_BN), kt_count = C / WG_BK;
    pdl_launch_dependents();
    if (wg == 0) {  // producer
        regs_dec<40>();
        if (t == 0)
            for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x)
                wg_produce(ring, tx, tw, r0 + tile % mtiles * FUSED_LCE_GRAD_ROWS, v0 + tile / mtiles * WG_BN, kt_count,
                           it);
        return;
    }
    regs_inc<232>();
    pdl_wait();
    int c = wg - 1, lane = t % 32, warp = t / 32;
    epi.start();
    float d[128];
    uint32_t out = ring.base + WG_PP_STAGES * WG_PP_STAGE_BYTES + 1024 + c * FUSED_LCE_GRAD_OUT_BYTES;  // past the barriers
    it = c * kt_count;  // consumer 1 starts at the block's second tile
    for (int k = c, tile = blockIdx.x + c * gridDim.x; tile < tiles; k += 2, tile += 2 * gridDim.x) {
        if (k > 0) wg_turn_wait(c);
        wg_consume(ring, d, 0, kt_count, it);
        if (tile + gridDim.x < tiles) wg_turn_pass(c);
        it += kt_count;  // past the other consumer's next tile
        if (t == 0) bulk_wait_read();  // the previous tile's store has read the staging buffer
        asm volatile("bar.sync %0, 128;" :: "r"(3 + c) : "memory");
        int vt = tile / mtiles, cb = vt * WG_BN, c0 = cb + 2 * (lane % 4);  // columns counted from v0
        int rb = tile % mtiles * FUSED_LCE_GRAD_ROWS, row0 = rb + warp * 16 + lane / 4;  // rows counted from r0
        epi(d, out, warp, lane, row0, c0, cb, vt);
        fence_proxy_async();
        asm volatile("bar.sync %0, 128;" :: "r"(3 + c) : "memory");
        if (t == 0) {
            for (int b = 0; b < WG_BN / 64 && cb + 64 * b < ncols; b++)  // the boxes inside the ncols columns
                tma_store_2d(tout, cb + 64 * b, rb, out + b * 64 * 128);
            bulk_commit();
        }
    }
    if (t == 0) bulk_wait();
}

// The gradient kernel's epilogue: dL/dz of the tile by fused_lce_wgmma_grad_tile, for the upstream
// gradient dloss / n_valid (read in start(), once the forward has counted the rows) or dloss_rows
template <bool CAP>
struct FusedLceGradEpilogue {
    const float* lse;         // (N) fp32, from the forward
    const int* targets;       // (N)
    const int* n_valid;       // (1) rows that count
    const float* dloss_rows;  // (N) fp32 per-row upstream gradient, or NULL
    float dloss;
    int r0, n, v0, ncols, V;
    const FusedLceOptions& opt;
    float dloss_nv;
    __device__ __forceinline__ void start() {
        int nv = *n_valid;
        dloss_nv = nv > 0 ? dloss / nv : 0.0f;
    }
    __device__ __forceinline__ void operator()(float d[128], uint32_t out, int warp, int lane, int row0, int c0, int cb,
                                               int) {
        if (cb + WG_BN <= ncols && v0 + cb + WG_BN <= V)
            fused_lce_wgmma_grad_tile<CAP, true>(d, out, warp, lane, row0, c0, lse, targets, dloss_rows, dloss_nv, r0, n,
                                                 v0, ncols, V, opt);
        else
            fused_lce_wgmma_grad_tile<CAP, false>(d, out, warp, lane, row0, c0, lse, targets, dloss_rows, dloss_nv, r0,
                                                  n, v0, ncols, V, opt);
    }
};
#endif

// G (n, ncols) bf16, row stride ldg: dL/dz of rows r0 .. r0+n-1 and vocab columns v0 .. v0+ncols-1 (0 for
// the padding columns >= V), from the logit tiles straight out of the tensor cores: no logits in memory.
// The ping-pong walk of fused_lce_pingpong_tiles, storing through tg, the map of G. The maps tx (x, boxes
// of 64 rows) and tw cover all of x (N, C) and W (Vp, C), so rows past the block and columns past the
// vocab block are computed (or arrive as zeros past Vp) but not stored.
template <bool CAP>
__global__ void __launch_bounds__(WG_THREADS, 1)
fused_lce_wgmma_grad_kernel(const __grid_constant__ CUtensorMap tx, const __grid_constant__ CUtensorMap tw,
                            const __grid_constant__ CUtensorMap tg, const float* lse, const int* targets,
                            const int* n_valid, const float* dloss_rows, float dloss, int r0, int n, int v0, int ncols,
                            int C, int V, FusedLceOptions opt) {
#if defined(WG_DEVICE_CODE)
    FusedLceGradEpilogue<CAP> epi = {lse, targets, n_valid, dloss_rows, dloss, r0, n, v0, ncols, V, opt, 0.0f};
    fused_lce_pingpong_tiles(&tx, &tw, &tg, r0, n, v0, ncols, C, epi);
#endif
}

// --- launchers -------------------------------------------------------------------------------

// The tensor maps the kernels read x (N, C) and W (Vp, C) through (x in boxes of x_rows: 128 for the
// forward, 64 for the gradient); made once per call of the head
typedef struct { CUtensorMap x, W; } FusedLceWgmmaMaps;

static inline FusedLceWgmmaMaps fused_lce_wgmma_maps(const bf16* x, const bf16* W, int N, int C, int Vp, int x_rows) {
    FusedLceWgmmaMaps m;
    m.x = tma_map_bf16(x, N, C, C, x_rows);
    m.W = tma_map_bf16(W, Vp, C, C, WG_BN);
    return m;
}

typedef void (*FusedLceWgmmaForwardKernel)(const CUtensorMap, const CUtensorMap, float*, int, int, int, int, float);

// the forward kernel with soft-capping (cap) and Σs (sum: label smoothing) on or off
static inline FusedLceWgmmaForwardKernel fused_lce_wgmma_forward_kernel_for(int cap, int sum) {
    return cap ? (sum ? fused_lce_wgmma_forward_kernel<true, true> : fused_lce_wgmma_forward_kernel<true, false>)
               : (sum ? fused_lce_wgmma_forward_kernel<false, true> : fused_lce_wgmma_forward_kernel<false, false>);
}

// Once per process before the kernels run: their shared memory (the ring) is above the 48 KiB default
static inline void fused_lce_wgmma_setup(void) {
    for (int i = 0; i < 4; i++)
        cuda_check(cudaFuncSetAttribute(fused_lce_wgmma_forward_kernel_for(i / 2, i % 2),
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, WG_COOP_SMEM));
    cuda_check(cudaFuncSetAttribute(fused_lce_wgmma_grad_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, FUSED_LCE_GRAD_SMEM));
    cuda_check(cudaFuncSetAttribute(fused_lce_wgmma_grad_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, FUSED_LCE_GRAD_SMEM));
}

// Vocab splits per row block: enough blocks for the SMs (one block each: the ring takes 193 KiB),
// choosing among up to four times that many splits the count whose last wave is fullest.
static inline int fused_lce_wgmma_splits(int N, int V, int sm_count) {
    int rb = ceil_div(N, WG_BM), tiles = ceil_div(V, WG_BN), lo = ceil_div(sm_count, rb), best = 1;
    double best_eff = 0.0;
    for (int s = lo < tiles ? lo : tiles; s <= 4 * lo && s <= tiles; s++) {
        int blocks = rb * s, waves = ceil_div(blocks, sm_count);
        double eff = (double)blocks / ((double)waves * sm_count);
        if (eff > best_eff + 1e-9) { best_eff = eff; best = s; }
    }
    return best;
}

// The part floats any N <= max_n needs: splits <= min(tiles, 4·ceil(SMs / row blocks)), so splits·N <=
// min(tiles·N, 4·(128·SMs + N)).
static inline size_t fused_lce_wgmma_part_floats(int max_n, int V, int sm_count) {
    size_t a = (size_t)ceil_div(V, WG_BN) * max_n, b = 4 * ((size_t)WG_BM * sm_count + max_n);
    return 3 * (a < b ? a : b);
}

// r's loss_rows and lse from its x, W and targets (its gradient fields unread); part (part_floats) holds
// at least fused_lce_wgmma_part_floats(N, ...) floats. Needs C % 64 == 0 and an sm_90a build (LLMC_SM90A)
// on Hopper.
static inline void fused_lce_wgmma_forward(const FusedLceRun* r, float* part, size_t part_floats, const GpuContext* ctx) {
    float *loss_rows = r->loss_rows, *lse = r->lse;
    const int* targets = r->targets;
    const bf16 *x = r->x, *W = r->W;
    int N = r->N, C = r->C, V = r->V, Vp = r->Vp;
    FusedLceOptions opt = r->opt;
    if (C % WG_BK != 0)
        check_failf("a bug in the caller: llmc/head/fused_lce.cuh's plan takes this path only for such C",
                    "fused_lce_wgmma_forward needs C %% %d == 0 (C = %d)", WG_BK, C);
    int splits = fused_lce_wgmma_splits(N, V, ctx->sm_count);
    if (3 * (size_t)splits * N > part_floats) check_fail("fused_lce_wgmma_forward: the statistics buffer is too small", "size it with fused_lce_wgmma_part_floats");
    FusedLceWgmmaMaps maps = fused_lce_wgmma_maps(x, W, N, C, Vp, WG_BM);
    dim3 grid(ceil_div(N, WG_BM), splits);
    FusedLceWgmmaForwardKernel kernel = fused_lce_wgmma_forward_kernel_for(opt.softcap > 0.0f, opt.label_smoothing > 0.0f);
    kernel<<<grid, WG_THREADS, WG_COOP_SMEM, ctx->stream>>>(maps.x, maps.W, part, N, C, V, splits, opt.softcap);
    cuda_check_launch();
    fused_lce_mma_finish_kernel<<<ceil_div(N, 8), 256, 0, ctx->stream>>>(loss_rows, lse, part, x, W, targets, N, C, V,
                                                                         splits, opt);
    cuda_check_launch();
}

// A (row block, vocab block) of the gradient: where its bf16 dL/dz goes, and which rows and columns
typedef struct {
    bf16* G;                        // (n, ncols) bf16, row stride ldg (even)
    int ldg;
    const FusedLceWgmmaMaps* maps;  // x's and W's (fused_lce_wgmma_maps, x in boxes of FUSED_LCE_GRAD_ROWS)
    int r0, n;                      // rows r0 .. r0+n-1 of the call
    int v0, ncols;                  // vocab columns v0 .. v0+ncols-1 (ncols even)
} FusedLceGradBlock;

// g's G = dL/dz of its rows and columns for r's upstream gradient (dloss / n_valid per row, or
// dloss_rows); r->lse from the forward.
static inline void fused_lce_wgmma_grad(const FusedLceRun* r, const FusedLceGradBlock* g, const GpuContext* ctx) {
    const FusedLceWgmmaMaps* maps = g->maps;
    int ldg = g->ldg, r0 = g->r0, n = g->n, v0 = g->v0, ncols = g->ncols, C = r->C, V = r->V;
    bf16* G = g->G;
    const FusedLceOptions opt = r->opt;
    const float *lse = r->lse, *dloss_rows = r->dloss_rows;
    const int *targets = r->targets, *n_valid = r->n_valid;
    float dloss = r->dloss;
    int tiles = ceil_div(n, FUSED_LCE_GRAD_ROWS) * ceil_div(ncols, WG_BN);
    int grid = tiles < ctx->sm_count ? tiles : ctx->sm_count;
    CUtensorMap tg = tma_map_bf16(G, n, ncols, ldg, FUSED_LCE_GRAD_ROWS);
    launch_pdl(opt.softcap > 0.0f ? fused_lce_wgmma_grad_kernel<true> : fused_lce_wgmma_grad_kernel<false>, grid, WG_THREADS,
               FUSED_LCE_GRAD_SMEM, ctx->stream, maps->x, maps->W, tg, lse, targets, n_valid, dloss_rows, dloss, r0, n, v0,
               ncols, C, V, opt);
}

// Whether this build and the current GPU run fused_lce_wgmma_forward
static inline int fused_lce_wgmma_available(void) {
#ifdef LLMC_SM90A
    int dev, major;
    cuda_check(cudaGetDevice(&dev));
    cuda_check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    return major == 9;
#else
    return 0;
#endif
}
