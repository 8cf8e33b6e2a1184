// test_fused_lce_plan.c: the blocks' layout (llmc/head/fused_lce_blocks_plan.h) over a grid of shapes, budgets and
// vocab-block limits: it never takes more than the budget, its blocks have the sizes the kernels need
// (rows a multiple of 16; columns of 16, or of whole tiles with wgmma; no wider than vb_max rounded up
// to a tile), it refuses a budget that holds fewer than 16 rows, and with wgmma it costs no more than
// the plain fewest-blocks layout. Plus the layouts dev/cuda/fused_lce_log.md and the comments quote,
// and the GEMM-cost callbacks.
#include "../../cuda/wgmma_gemm_plan.h"
#include "../testing.h"

static int round_up(int a, int b) { return fused_lce_plan_ceil_div(a, b) * b; }

// The grid counts one check per property, which passes when it holds in every case; each failing case
// is printed. The number of cases is printed apart, so that the total of checks is not read as coverage.
enum { G_REFUSED, G_BUDGET, G_BYTES, G_ROWS, G_COLUMNS, G_COST, G_WIDEST, G_DEFAULT_FITS, G_PROPS };
static const char* const grid_props[G_PROPS] = {
    "a refused budget holds fewer than 16 rows", "a plan stays within its budget", "a plan's bytes are rows x row bytes",
    "rows: a multiple of 16, at most N rounded up", "columns: aligned, at most vb_max rounded up",
    "with wgmma no dearer than the fewest blocks", "the widest vocab block fits its budget",
    "a layout at the default width means one at the widest"};
static int grid_cases[G_PROPS], grid_failed[G_PROPS];
#define GRID_EXPECT(prop, cond, ...) do { \
    grid_cases[prop]++; \
    if (!(cond)) { grid_failed[prop]++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
                   fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); } } while (0)

static void grid_summary(void) {
    int cases = 0;
    for (int k = 0; k < G_PROPS; k++) {
        EXPECT(grid_failed[k] == 0, "grid property \"%s\" fails in %d of %d cases", grid_props[k], grid_failed[k],
               grid_cases[k]);
        cases += grid_cases[k];
    }
    printf("grid: %d properties (one check each) over %d case checks\n", G_PROPS, cases);
}

// The layout's question for the tests: tiles of 64 x 256 on 132 SMs (an H100's)
static FusedLceBlockPlanSpec spec(int N, int C, int V, int vb_max, int wgmma, FusedLceGemmCost cost, void* arg) {
    FusedLceBlockPlanSpec sp = {N, C, V, vb_max, wgmma, 64, 256, 132, cost, arg};
    return sp;
}

// fused_lce_block_plan and fused_lce_plan_cost of spec(...)
static FusedLceBlockPlan plan(size_t bytes, int N, int C, int V, int vb_max, int wgmma, FusedLceGemmCost cost, void* arg) {
    FusedLceBlockPlanSpec sp = spec(N, C, V, vb_max, wgmma, cost, arg);
    return fused_lce_block_plan(bytes, &sp);
}

static double plan_cost(int nb, int vb, int N, int C, int V, int wgmma, FusedLceGemmCost cost, void* arg) {
    FusedLceBlockPlanSpec sp = spec(N, C, V, 0, wgmma, cost, arg);
    return fused_lce_plan_cost(nb, vb, &sp);
}

static void check_plan(size_t bytes, int N, int C, int V, int vb_max, int wgmma) {
    FusedLceBlockPlan p = plan(bytes, N, C, V, vb_max, wgmma, NULL, NULL);
    int align = wgmma ? 256 : 16;
    // the fewest-blocks layout: what a plan without the search would take
    int vb0 = round_up(fused_lce_plan_ceil_div(V, fused_lce_plan_ceil_div(V, vb_max)), align);
    size_t nb0 = bytes / fused_lce_plan_row_bytes(vb0, C, wgmma) / 16 * 16;
    if (nb0 > (size_t)round_up(N, 16)) nb0 = (size_t)round_up(N, 16);
    if (p.bytes == 0) {
        GRID_EXPECT(G_REFUSED, nb0 < 16, "N=%d C=%d V=%d budget %zu: refused, but %zu rows of %d columns fit", N, C, V, bytes, nb0, vb0);
        return;
    }
    GRID_EXPECT(G_BUDGET, p.bytes <= bytes, "N=%d C=%d V=%d: takes %zu bytes of a %zu budget", N, C, V, p.bytes, bytes);
    GRID_EXPECT(G_BYTES, p.bytes == (size_t)p.nb * fused_lce_plan_row_bytes(p.vb, C, wgmma), "N=%d C=%d V=%d: bytes %zu for %d x %d",
           N, C, V, p.bytes, p.nb, p.vb);
    GRID_EXPECT(G_ROWS, p.nb >= 16 && p.nb % 16 == 0 && p.nb <= round_up(N, 16), "N=%d C=%d V=%d: %d rows per block", N, C, V, p.nb);
    GRID_EXPECT(G_COLUMNS, p.vb % align == 0 && p.vb <= round_up(vb_max, align) && p.vb > 0, "N=%d C=%d V=%d vb_max %d: %d columns",
           N, C, V, vb_max, p.vb);
    if (wgmma && nb0 >= 16) {  // (more vocab blocks may fit where the fewest do not)
        double c = plan_cost(p.nb, p.vb, N, C, V, 1, NULL, NULL);
        double c0 = plan_cost((int)nb0, vb0, N, C, V, 1, NULL, NULL);
        GRID_EXPECT(G_COST, c <= c0, "N=%d C=%d V=%d: cost %.0f above the fewest blocks' %.0f", N, C, V, c, c0);
    }
}

// GEMM costs for the callback: one that charges every vocab block narrower or wider than 4096 columns
// (the plan must follow it), and one that adds up the logits it is asked about (each block once)
static double only_4096(void* arg, int n, int ncols) { (void)arg; (void)n; return ncols == 4096 ? 0.0 : 1e9; }
static double count_logits(void* arg, int n, int ncols) { *(double*)arg += (double)n * ncols; return 0.0; }

int main(void) {
    const int Ns[] = {1, 15, 16, 300, 1024, 4097, 16384, 65536};
    const int Cs[] = {64, 768, 1600, 4096};
    const int Vs[] = {777, 4093, 50257, 128256};
    const int vb_maxes[] = {16, 1024, 4096};
    const size_t budgets[] = {(size_t)1 << 16, (size_t)1 << 20, (size_t)16 << 20, (size_t)63 << 20, (size_t)1 << 30};
    for (int a = 0; a < 8; a++)
        for (int b = 0; b < 4; b++)
            for (int c = 0; c < 4; c++)
                for (int d = 0; d < 3; d++)
                    for (int e = 0; e < 5; e++)
                        for (int w = 0; w < 2; w++) check_plan(budgets[e], Ns[a], Cs[b], Vs[c], vb_maxes[d], w);

    // quoted in llmc/head/fused_lce_blocks_plan.h: the trainer's d12 head (65536 x 768 x 50257, ~63 MiB left for it)
    size_t budget = ((size_t)64 << 20) - (2 * 65536 + 3 * 4 * (128 * 132 + 65536)) * 4;
    FusedLceBlockPlan p = plan(budget, 65536, 768, 50257, 4096, 1, NULL, NULL);
    EXPECT(p.vb == 3584 && p.nb == 6016, "65536 x 768: %d rows x %d columns, expected 6016 x 3584", p.nb, p.vb);
    double waves = plan_cost(p.nb, p.vb, 65536, 1, 50257, 1, NULL, NULL) - 256.0 * 11 * 15;
    EXPECT(waves == 1537, "65536 x 768: %.0f waves", waves);
    waves = plan_cost(5552, 4096, 65536, 1, 50257, 1, NULL, NULL) - 256.0 * 12 * 13;
    EXPECT(waves == 1607, "the fewest blocks: %.0f waves", waves);
    // the GEMMs' cost counted: every block once per layout, and it moves the choice
    double logits = 0.0;
    plan_cost(6016, 3584, 65536, 768, 50257, 1, count_logits, &logits);
    EXPECT(logits == 65536.0 * 50257, "the GEMM cost was asked about %.0f logits, expected %.0f", logits,
           65536.0 * 50257);
    p = plan(budget, 65536, 768, 50257, 4096, 1, only_4096, NULL);
    EXPECT(p.vb == 4096, "65536 x 768 with a GEMM cost that wants 4096 columns: %d x %d", p.nb, p.vb);
    // the Hopper build's GEMMs (dev/cuda/wgmma_gemm.cuh) on a block of 5552 x 4096 at C = 768, 132 SMs, in one
    // launch: dx in 44 x 3 tiles of 256 columns (K = 4096) on SMs 0-131, then dW in 32 x 4 of 192 (K =
    // 5552) on SMs 0-127, in units of 64-row tiles, plus the launch; at C = 1600 dx in 44 x 9 tiles of 192
    // (three per SM), then dW in 32 x 7 of 256: two more on SMs 0-91, one on the others
    int bn_dx = 0, bn_dw = 0;
    double gc = fused_lce_plan_pair_bn(5552, 768, 4096, 132, &bn_dx, &bn_dw);
    EXPECT(bn_dx == 256 && bn_dw == 192 && gc == 2.0 * 4096 + 2.0 * 5552 * 192 / 256,
           "dx and dW at 5552 x 4096, C = 768: %d and %d columns, cost %.0f", bn_dx, bn_dw, gc);
    gc = fused_lce_plan_pair_bn(5552, 1600, 4096, 132, &bn_dx, &bn_dw);
    EXPECT(bn_dx == 192 && bn_dw == 256 && gc == 3 * 2.0 * 4096 * 192 / 256 + 2 * 2.0 * 5552,
           "dx and dW at 5552 x 4096, C = 1600: %d and %d columns, cost %.0f", bn_dx, bn_dw, gc);
    // tiles dealt in turn: on 3 SMs dx's 2 x 2 tiles (K = 128) are 0-3, dW's 1 x 2 (K = 256) 4 and 5, so
    // SM 0 takes two dx tiles and SMs 1 and 2 a dx and a dW tile each
    gc = fused_lce_plan_pair_cost(256, 512, 128, 256, 256, 3);
    EXPECT(gc == 2.0 * 128 + 2.0 * 256, "a dx tile and a dW tile on the busiest of 3 SMs: cost %.0f", gc);
    FusedLceWgGemmCost hopper = {768, 132};
    gc = fused_lce_plan_wg_gemm_cost(&hopper, 5552, 4096);
    EXPECT(gc == 2.0 * 4096 + 2.0 * 5552 * 192 / 256 + 256, "our GEMMs at 5552 x 4096, C = 768: cost %.0f", gc);
    p = plan(budget, 65536, 768, 50257, 4096, 1, fused_lce_plan_wg_gemm_cost, &hopper);
    EXPECT(p.nb == 5552 && p.vb == 4096, "65536 x 768 counting our GEMMs: %d x %d, expected 5552 x 4096", p.nb, p.vb);
    // without wgmma: the plain layout, as before the search
    p = plan(budget, 65536, 768, 50257, 4096, 0, NULL, NULL);
    EXPECT(p.vb == 3872 && p.nb == (int)(budget / (3872 * 4 + 768 * 4 + 16) / 16 * 16),
           "65536 x 768 without wgmma: %d rows x %d columns", p.nb, p.vb);
    // the default widest vocab block: 4096; with wgmma wider for few rows, one block's bf16 gradient within
    // 20 MiB and all rows in one row block; never narrower than 4096, so wherever blocks of 4096 fit, it
    // does too
    size_t b64 = (size_t)64 << 20;
    EXPECT(fused_lce_plan_vocab_max(65536, b64, 768, 1) == 4096 && fused_lce_plan_vocab_max(2560, b64, 768, 1) == 4096,
           "the default for many rows: %d, %d", fused_lce_plan_vocab_max(65536, b64, 768, 1),
           fused_lce_plan_vocab_max(2560, b64, 768, 1));
    EXPECT(fused_lce_plan_vocab_max(1024, b64, 4096, 1) == 10240 && fused_lce_plan_vocab_max(2048, b64, 768, 1) == 5120,
           "the default for few rows: %d, %d", fused_lce_plan_vocab_max(1024, b64, 4096, 1),
           fused_lce_plan_vocab_max(2048, b64, 768, 1));
    EXPECT(fused_lce_plan_vocab_max(1024, b64, 768, 0) == 4096, "the default without wgmma: %d",
           fused_lce_plan_vocab_max(1024, b64, 768, 0));
    EXPECT(fused_lce_plan_vocab_max(300, (size_t)6 << 20, 768, 1) == (int)((((size_t)6 << 20) / 304 - 4 * 768 - 16) / 2),
           "300 rows in 6 MiB: %d columns, expected all rows in one block", fused_lce_plan_vocab_max(300, (size_t)6 << 20, 768, 1));
    for (int a = 0; a < 8; a++)
        for (int b = 0; b < 4; b++)
            for (int e = 0; e < 5; e++) {
                int n = Ns[a], vb = fused_lce_plan_vocab_max(n, budgets[e], Cs[b], 1);
                size_t rows = (size_t)round_up(n, 16);
                GRID_EXPECT(G_WIDEST, vb == 4096 || (rows * vb * 2 <= (size_t)FUSED_LCE_BLOCK_G_FEW &&
                                      rows * fused_lce_plan_row_bytes(vb, Cs[b], 1) <= budgets[e]),
                       "max_n %d, C %d, %zu bytes: widest vocab block %d", n, Cs[b], budgets[e], vb);
                for (int c = 0; c < 4; c++) {
                    FusedLceBlockPlan narrow = plan(budgets[e], n, Cs[b], Vs[c], 4096, 1, NULL, NULL);
                    FusedLceBlockPlan wide = plan(budgets[e], n, Cs[b], Vs[c], vb, 1, NULL, NULL);
                    GRID_EXPECT(G_DEFAULT_FITS, !narrow.bytes || wide.bytes, "N=%d C=%d V=%d, %zu bytes: no layout at the default width %d",
                           n, Cs[b], Vs[c], budgets[e], vb);
                }
            }
    p = plan(budget, 1024, 768, 50257, fused_lce_plan_vocab_max(1024, budget, 768, 1), 1, NULL, NULL);
    EXPECT(p.nb == 1024 && p.vb == 8448, "1024 x 768 with the default: %d rows x %d columns, expected 1024 x 8448",
           p.nb, p.vb);
    grid_summary();
    return test_summary("test_fused_lce_plan");
}
