// fused_lce_blocks_plan.h: how the LM head's blocks (fused_lce_blocks.cuh) cut a problem within a scratch
// budget, in plain C so that the CPU tests check it (dev/test/head/test_fused_lce_plan.c): a layout never
// takes more than the budget, and with the Hopper kernels it wastes as little of the GPU as it can.
//
// The buffer holds, per row of a row block of nb rows: one vocab block of vb logits (fp32, or with the
// wgmma kernels only their bf16 gradient), the row's fp32 dx accumulator (C floats) and its running
// statistics (4 floats).
//
// With the wgmma kernels a gradient launch covers one (row block, vocab block) pair in tiles of
// tile_rows x tile_cols, which fill the SMs in waves; a last wave part empty costs a whole one. The dx
// and dW GEMMs of a block fill them in waves too, of tiles their kernel picks: the caller may count them
// through a callback (the Hopper build asks cuBLASLt's heuristic how many waves each takes). So the layout is chosen for max_n among up to 4
// more vocab blocks than the fewest, and for each, as many rows per block as fit or the rows spread
// evenly (in whole tiles) over the fewest row blocks or up to 2 more: the least cost, in waves of C-long
// tiles, a launch counted as a wave at C = 256 (~3 us: the pipeline's fill, the GEMMs' tails). At
// 65536 x 768 x 50257 within 64 MiB, tiles of 64 x 256, the gradient alone would take 11 row blocks x
// 15 vocab blocks, 1537 waves (1528 if none were part empty), where the fewest blocks (12 x 13) take
// 1607; but the dW GEMM of a 6016 x 3584 block fills 0.85 of a wave (112 tiles of 192 x 128 on 132 SMs),
// and counting the GEMMs the Hopper build takes the 12 x 13 blocks of 5552 x 4096, which measured faster
// on an H200 (dev/cuda/fused_lce_log.md).
#pragma once
#include <stddef.h>

typedef struct {
    int nb, vb;    // rows per row block (a multiple of 16), columns per vocab block (of 16, or of tile_cols)
    size_t bytes;  // the buffer the layout takes; 0: fewer than 16 rows fit
} FusedLceBlockPlan;

static inline int fused_lce_plan_ceil_div(int a, int b) { return (a + b - 1) / b; }

// bytes per row of a row block with vocab blocks of vb columns
static inline size_t fused_lce_plan_row_bytes(int vb, int C, int wgmma) {
    return (size_t)vb * (wgmma ? 2 : 4) + (size_t)C * 4 + 16;
}

// The cost of a block's dx and dW GEMMs, n rows x ncols columns, in the units below (waves of
// tile_rows x tile_cols x C of work on sm_count SMs); arg is the caller's
typedef double (*FusedLceGemmCost)(void* arg, int n, int ncols);

// What a layout is planned for
typedef struct {
    int max_n, C, V;             // rows per call at most; channels; vocabulary
    int vb_max;                  // the widest vocab block
    int wgmma;                   // 1: the gradient by wgmma tiles (bf16 blocks, waves counted); 0: fp32 blocks
    int tile_rows, tile_cols;    // with wgmma: the gradient kernel's tile (64 x 256)
    int sm_count;                // SMs the waves fill
    FusedLceGemmCost gemm_cost;  // NULL, or the cost of a block's dx and dW GEMMs (counted with wgmma)
    void* gemm_arg;              // passed to gemm_cost
} FusedLceBlockPlanSpec;

// The cost of the layout (nb, vb) for sp->max_n rows and sp->V columns: the gradient's waves of tiles
// times C, plus 256 a launch; plus gemm_cost of each block unless it is NULL
static inline double fused_lce_plan_cost(int nb, int vb, const FusedLceBlockPlanSpec* sp) {
    double cost = 0.0;
    for (int r0 = 0; r0 < sp->max_n; r0 += nb)
        for (int v0 = 0; v0 < sp->V; v0 += vb) {
            int n = sp->max_n - r0 < nb ? sp->max_n - r0 : nb, ncols = sp->V - v0 < vb ? sp->V - v0 : vb;
            int tiles = fused_lce_plan_ceil_div(n, sp->tile_rows) * fused_lce_plan_ceil_div(ncols, sp->tile_cols);
            cost += (double)sp->C * fused_lce_plan_ceil_div(tiles, sp->sm_count) + 256.0;
            if (sp->gemm_cost) cost += sp->gemm_cost(sp->gemm_arg, n, ncols);
        }
    return cost;
}

// The widest vocab block when the caller names none: FUSED_LCE_BLOCK_VOCAB, or with wgmma for few rows as wide
// as keeps one block's bf16 gradient (max_n x vb) within FUSED_LCE_BLOCK_G_FEW and all max_n rows in one row
// block of `bytes` (max_n rounded up to 16): fewer, fuller launches, G still in the L2 (never narrower than
// FUSED_LCE_BLOCK_VOCAB, so a budget that holds blocks of that width still holds the layout). At 1024 x 768 x
// 50257 the layout then takes 6 blocks of 8448 columns (G 17 MB, within the 50 MB L2); wider blocks (2 of
// 25k: G 52 MB) are slower, G no longer fitting the L2 (dev/cuda/fused_lce_log.md).
#define FUSED_LCE_BLOCK_VOCAB 4096
#define FUSED_LCE_BLOCK_G_FEW (20 << 20)
static inline int fused_lce_plan_vocab_max(int max_n, size_t bytes, int C, int wgmma) {
    if (!wgmma || max_n <= 0) return FUSED_LCE_BLOCK_VOCAB;
    long long rows = ((long long)max_n + 15) / 16 * 16;  // a row block's rows: a multiple of 16
    long long vb = FUSED_LCE_BLOCK_G_FEW / 2 / rows;
    long long fit = ((long long)bytes / rows - (long long)fused_lce_plan_row_bytes(0, C, 1)) / 2;  // 2 B a column
    if (fit < vb) vb = fit;
    return vb > FUSED_LCE_BLOCK_VOCAB ? (int)vb : FUSED_LCE_BLOCK_VOCAB;
}

// The layout within `bytes` for up to sp->max_n rows: vocab blocks of equal width, at most vb_max
// (rounded up to whole tiles with wgmma), then as many rows per block as fit (no more than max_n needs);
// with wgmma (tile_rows x tile_cols tiles, sm_count SMs) the cheapest of the candidates above, the GEMMs
// counted when gemm_cost is not NULL.
static inline FusedLceBlockPlan fused_lce_block_plan(size_t bytes, const FusedLceBlockPlanSpec* sp) {
    int max_n = sp->max_n, C = sp->C, V = sp->V, wgmma = sp->wgmma, tile_rows = sp->tile_rows;
    FusedLceBlockPlan best = {0, 0, 0};
    double best_cost = 0.0;
    int nvb0 = fused_lce_plan_ceil_div(V, sp->vb_max), align = wgmma ? sp->tile_cols : 16;  // 16: keeps W + v0·C 256-byte aligned
    size_t rows = (size_t)fused_lce_plan_ceil_div(max_n, 16) * 16;
    for (int nvb = nvb0; nvb <= nvb0 + (wgmma ? 4 : 0); nvb++) {
        int vb = fused_lce_plan_ceil_div(fused_lce_plan_ceil_div(V, nvb), align) * align;
        size_t nb_max = bytes / fused_lce_plan_row_bytes(vb, C, wgmma) / 16 * 16;
        if (nb_max < 16) continue;
        if (nb_max > rows) nb_max = rows;
        int nr0 = fused_lce_plan_ceil_div(max_n, (int)nb_max);
        for (int nr = nr0 - 1; nr <= nr0 + (wgmma ? 2 : -1); nr++) {  // nr0 - 1: as many rows as fit
            size_t nb = nb_max;
            double cost = 0.0;
            if (wgmma) {
                if (nr >= nr0) {  // rows spread evenly over nr blocks, in whole tiles, where they fit
                    size_t even = (size_t)fused_lce_plan_ceil_div(fused_lce_plan_ceil_div(max_n, nr), tile_rows) * tile_rows;
                    if (even < nb) nb = even;
                }
                cost = fused_lce_plan_cost((int)nb, vb, sp);
            }
            if (best.bytes && cost >= best_cost) continue;
            best.nb = (int)nb;
            best.vb = vb;
            best.bytes = nb * fused_lce_plan_row_bytes(vb, C, wgmma);
            best_cost = cost;
        }
    }
    return best;
}
