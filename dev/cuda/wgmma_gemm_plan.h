// wgmma_gemm_plan.h: the tile widths and the cost of the playground's own dx and dW GEMMs of an LM-head
// block (wgmma_gemm.cuh, variant 6 of fused_lce.cu), in the units of the head's layout planner
// (llmc/head/fused_lce_blocks_plan.h), in plain C so that the CPU tests check it (dev/test/head/test_fused_lce_plan.c).
#pragma once
#include "../../llmc/head/fused_lce_blocks_plan.h"

// Our dx and dW GEMMs (wgmma_gemm.cuh) walk tiles of 128 x BN columns, BN = 128, 192 or 256, with a
// persistent grid of one block per SM. A K-long tile costs, in the planner's units
// (waves of K-long 64 x 256 tiles), K · 2 · BN/256 over its measured speed relative to 256 columns
// (FUSED_LCE_PLAN_BN_SPEED, H200).
#define FUSED_LCE_PLAN_BN_SPEED(bn) ((bn) == 128 ? 0.85 : 1.0)

// One launch of a block's dx GEMM (n x C, K = ncols, tiles of bn_dx columns) and dW GEMM (ncols x C,
// K = n, tiles of bn_dw; wg_gemm_run_pair): the dx tiles, then the dW tiles, dealt to the SMs in turn
// (tile i to SM i % sm_count, as the persistent grid walks them). Its cost: the busiest SM's tiles.
static inline double fused_lce_plan_pair_cost(int n, int C, int ncols, int bn_dx, int bn_dw, int sm_count) {
    int tx = fused_lce_plan_ceil_div(n, 128) * fused_lce_plan_ceil_div(C, bn_dx);
    int tiles = tx + fused_lce_plan_ceil_div(ncols, 128) * fused_lce_plan_ceil_div(C, bn_dw);
    double cx = 2.0 * ncols * bn_dx / 256.0 / FUSED_LCE_PLAN_BN_SPEED(bn_dx);
    double cw = 2.0 * n * bn_dw / 256.0 / FUSED_LCE_PLAN_BN_SPEED(bn_dw), worst = 0.0;
    for (int sm = 0; sm < sm_count && sm < tiles; sm++) {
        double c = 0.0;
        for (int t = sm; t < tiles; t += sm_count) c += t < tx ? cx : cw;
        if (c > worst) worst = c;
    }
    return worst;
}

// the cheapest tile widths of that launch (ties: the wider), and its cost
static inline double fused_lce_plan_pair_bn(int n, int C, int ncols, int sm_count, int* bn_dx, int* bn_dw) {
    double best = -1.0;
    *bn_dx = *bn_dw = 256;
    for (int bx = 256; bx >= 128; bx -= 64)
        for (int bw = 256; bw >= 128; bw -= 64) {
            double c = fused_lce_plan_pair_cost(n, C, ncols, bx, bw, sm_count);
            if (best < 0.0 || c < best) { best = c; *bn_dx = bx; *bn_dw = bw; }
        }
    return best;
}

// The GEMM cost of a block for fused_lce_block_plan: its dx and dW GEMMs in one launch at their cheapest
// tile widths, plus the launch. arg: an FusedLceWgGemmCost.
typedef struct { int C, sm_count; } FusedLceWgGemmCost;

static double fused_lce_plan_wg_gemm_cost(void* arg, int n, int ncols) {
    const FusedLceWgGemmCost* g = (const FusedLceWgGemmCost*)arg;
    int bn_dx, bn_dw;
    return fused_lce_plan_pair_bn(n, g->C, ncols, g->sm_count, &bn_dx, &bn_dw) + 256.0;
}
