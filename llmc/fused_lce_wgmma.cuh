// fused_lce_wgmma.cuh: the LM head's forward on Hopper tensor cores (sm_90a): the logits GEMM of
// llmc/wgmma.cuh (TMA ring, m64n256k16 wgmmas, fp32 accumulators) with the softmax statistics in its
// epilogue. Each 128 x 256 logit tile is folded, while still in registers, into a running (max, Σexp,
// Σs) of each row; only those three floats per row and vocab split leave the chip, and
// flce_mma_finish_kernel (fused_lce_mma.cuh, shared with the mma.sync forward) merges the splits and
// adds the target logit. No logits in memory, not even a block of them.
//
// A block owns 128 rows and walks the vocab tiles split, split + splits, ... without draining its
// pipeline between tiles (the producer runs ahead into the next tile while the consumers reduce).
// Napkin at C = 768: a tile is 2·128·256·768 = 50 MFLOP (~12k cycles of one SM's tensor cores) against
// 32k exps (~2k cycles of its special-function units): the epilogue costs ~15% while the tensor cores
// wait, the price of keeping both consumers on the same tile.
#pragma once
#include "wgmma.cuh"
#include "fused_lce_common.cuh"
#include "fused_lce_mma.cuh"

// --- kernels ---------------------------------------------------------------------------------

// part (splits, N, 3): running max, Σexp relative to it, Σs of each row over its split's tiles
__global__ void __launch_bounds__(WG_THREADS, 1)
flce_wgmma_forward_kernel(const __grid_constant__ CUtensorMap tx, const __grid_constant__ CUtensorMap tw,
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
        // register 4j + 2h + e: row lane/4 + 8h, column 8j + 2·(lane % 4) + e of the tile
        int c0 = nt * WG_BN + 2 * (lane % 4);
        #pragma unroll
        for (int h = 0; h < 2; h++) {
            float tm = -INFINITY;
            #pragma unroll
            for (int j = 0; j < 32; j++)
                #pragma unroll
                for (int e = 0; e < 2; e++) {
                    float z = d[4 * j + 2 * h + e];
                    if (cap > 0.0f) z = cap * flce_tanh(z * inv_cap);
                    d[4 * j + 2 * h + e] = z;
                    if (c0 + 8 * j + e < V) tm = fmaxf(tm, z);
                }
            float nm = fmaxf(m[h], tm);
            if (nm == -INFINITY) continue;  // none of this thread's columns so far is in the vocabulary
            float acc = 0.0f, su = 0.0f;
            #pragma unroll
            for (int j = 0; j < 32; j++)
                #pragma unroll
                for (int e = 0; e < 2; e++)
                    if (c0 + 8 * j + e < V) { float z = d[4 * j + 2 * h + e]; acc += __expf(z - nm); su += z; }
            s[h] = s[h] * __expf(m[h] - nm) + acc;  // m = -inf before the first tile: weight 0
            m[h] = nm;
            sum[h] += su;
        }
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

// G (n, ncols) bf16, row stride ldg: dL/dz of rows r0 .. r0+n-1 and vocab columns v0 .. v0+ncols-1 (0 for
// the padding columns >= V), from the logit tiles straight out of the tensor cores: no logits in memory.
// Ping-pong (wgmma.cuh): the block's tiles of 64 rows x 256 columns, b, b + gridDim.x, ..., go to the two
// consumers in turn, so that one's epilogue (an exp, and a bf16 store, per logit) runs beside the other's
// K loop. The maps cover all of x (N, C; boxes of 64 rows) and W (Vp, C), so rows past the block and
// columns past the vocab block are computed (or arrive as zeros past Vp) but not stored.
__global__ void __launch_bounds__(WG_THREADS, 1)
flce_wgmma_grad_kernel(const __grid_constant__ CUtensorMap tx, const __grid_constant__ CUtensorMap tw, bf16* G,
                       int ldg, const float* lse, const int* targets, const int* n_valid, const float* dloss_rows,
                       float dloss, int r0, int n, int v0, int ncols, int C, int V, FlceOptions opt) {
#if defined(WG_DEVICE_CODE)
    extern __shared__ unsigned char smem_raw[];
    WgRing ring = wg_ring_init(smem_raw, WG_PP_STAGES, 64, 1);
    int wg = threadIdx.x / 128, t = threadIdx.x % 128, it = 0;
    int mtiles = ceil_div(n, 64), tiles = mtiles * ceil_div(ncols, WG_BN), kt_count = C / WG_BK;
    if (wg == 0) {  // producer
        regs_dec<40>();
        if (t == 0)
            for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x)
                wg_produce(ring, &tx, &tw, r0 + tile % mtiles * 64, v0 + tile / mtiles * WG_BN, kt_count, it);
        return;
    }
    regs_inc<232>();
    int c = wg - 1, lane = t % 32, warp = t / 32, nv = *n_valid;
    float d[128];
    it = c * kt_count;  // consumer 1 starts at the block's second tile
    for (int k = c, tile = blockIdx.x + c * gridDim.x; tile < tiles; k += 2, tile += 2 * gridDim.x) {
        if (k > 0) wg_turn_wait(c);
        wg_consume(ring, d, 0, kt_count, it);
        if (tile + gridDim.x < tiles) wg_turn_pass(c);
        it += kt_count;  // past the other consumer's next tile
        // register 4j + 2h + e: row lane/4 + 8h, column 8j + 2·(lane % 4) + e of the warp's 16 x 256
        int c0 = tile / mtiles * WG_BN + 2 * (lane % 4);  // within the vocab block
        #pragma unroll
        for (int h = 0; h < 2; h++) {
            int row = tile % mtiles * 64 + warp * 16 + lane / 4 + 8 * h;  // within the row block
            if (row >= n) continue;
            int tg = targets[r0 + row];
            int ignored = tg == opt.ignore_index || tg < 0 || tg >= V;
            float scale = ignored ? 0.0f : (dloss_rows ? dloss_rows[r0 + row] : (nv > 0 ? dloss / nv : 0.0f));
            FlceRowGrad rg = flce_row_grad(lse[r0 + row], tg - v0, scale, opt, V);  // columns counted from v0
            bf16* g = G + (size_t)row * ldg;
            #pragma unroll
            for (int j = 0; j < 32; j++) {
                int col = c0 + 8 * j;  // even, and ncols is even: both columns of the pair are in or out
                if (col >= ncols) continue;
                float a = v0 + col < V ? flce_dlogit(rg, d[4 * j + 2 * h], col) : 0.0f;
                float b = v0 + col + 1 < V ? flce_dlogit(rg, d[4 * j + 2 * h + 1], col + 1) : 0.0f;
                *(__nv_bfloat162*)(g + col) = __floats2bfloat162_rn(a, b);
            }
        }
    }
#endif
}

// --- launchers -------------------------------------------------------------------------------

// The tensor maps the kernels read x (N, C) and W (Vp, C) through (x in boxes of x_rows: 128 for the
// forward, 64 for the gradient); made once per call of the head
typedef struct { CUtensorMap x, W; } FlceWgmmaMaps;

static inline FlceWgmmaMaps flce_wgmma_maps(const bf16* x, const bf16* W, int N, int C, int Vp, int x_rows) {
    FlceWgmmaMaps m;
    m.x = tma_map_bf16(x, N, C, C, x_rows);
    m.W = tma_map_bf16(W, Vp, C, C, WG_BN);
    return m;
}

// Once per process before the kernels run: their shared memory (the ring) is above the 48 KiB default
static inline void flce_wgmma_setup(void) {
    cuda_check(cudaFuncSetAttribute(flce_wgmma_forward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, WG_COOP_SMEM));
    cuda_check(cudaFuncSetAttribute(flce_wgmma_grad_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, WG_PP_SMEM));
}

// Vocab splits per row block: enough blocks for the SMs (one block each: the ring takes 193 KiB),
// choosing among up to four times that many splits the count whose last wave is fullest.
static inline int flce_wgmma_splits(int N, int V, int sm_count) {
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
static inline size_t flce_wgmma_part_floats(int max_n, int V, int sm_count) {
    size_t a = (size_t)ceil_div(V, WG_BN) * max_n, b = 4 * ((size_t)WG_BM * sm_count + max_n);
    return 3 * (a < b ? a : b);
}

// loss_rows, lse (N) from x (N, C), W (Vp, C), targets (N); part (part_floats) holds at least
// flce_wgmma_part_floats(N, ...) floats. Needs C % 64 == 0 and an sm_90a build (LLMC_SM90A) on Hopper.
static inline void flce_wgmma_forward(float* loss_rows, float* lse, float* part, size_t part_floats, const bf16* x,
                                      const bf16* W, const int* targets, int N, int C, int V, int Vp, FlceOptions opt,
                                      const GpuContext* ctx) {
    if (C % WG_BK != 0) {
        fprintf(stderr, "error: flce_wgmma_forward needs C %% %d == 0 (C = %d)\n", WG_BK, C);
        exit(EXIT_FAILURE);
    }
    int splits = flce_wgmma_splits(N, V, ctx->sm_count);
    if (3 * (size_t)splits * N > part_floats) check_fail("flce_wgmma_forward: the statistics buffer is too small", "size it with flce_wgmma_part_floats");
    FlceWgmmaMaps maps = flce_wgmma_maps(x, W, N, C, Vp, WG_BM);
    dim3 grid(ceil_div(N, WG_BM), splits);
    flce_wgmma_forward_kernel<<<grid, WG_THREADS, WG_COOP_SMEM, ctx->stream>>>(maps.x, maps.W, part, N, C, V, splits,
                                                                         opt.softcap);
    cuda_check_launch();
    flce_mma_finish_kernel<<<ceil_div(N, 8), 256, 0, ctx->stream>>>(loss_rows, lse, part, x, W, targets, N, C, V,
                                                                    splits, opt);
    cuda_check_launch();
}

// G (n, ncols) bf16 (row stride ldg, even; ncols even) = dL/dz of rows r0.. and vocab columns v0.. for the
// upstream gradient dloss / n_valid per row (or dloss_rows (N) when not NULL); lse (N) from the forward.
static inline void flce_wgmma_grad(bf16* G, int ldg, const FlceWgmmaMaps* maps, const float* lse, const int* targets,
                                   const int* n_valid, const float* dloss_rows, float dloss, int r0, int n, int v0,
                                   int ncols, int C, int V, FlceOptions opt, const GpuContext* ctx) {
    int tiles = ceil_div(n, 64) * ceil_div(ncols, WG_BN);
    int grid = tiles < ctx->sm_count ? tiles : ctx->sm_count;
    flce_wgmma_grad_kernel<<<grid, WG_THREADS, WG_PP_SMEM, ctx->stream>>>(maps->x, maps->W, G, ldg, lse, targets, n_valid,
        dloss_rows, dloss, r0, n, v0, ncols, C, V, opt);
    cuda_check_launch();
}

// Whether this build and the current GPU run flce_wgmma_forward
static inline int flce_wgmma_available(void) {
#ifdef LLMC_SM90A
    int dev, major;
    cuda_check(cudaGetDevice(&dev));
    cuda_check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    return major == 9;
#else
    return 0;
#endif
}
