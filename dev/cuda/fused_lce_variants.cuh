// fused_lce_variants.cuh: the LM-head variants of the playground (fused_lce.cu) as head configurations:
// the production paths of llmc/head/fused_lce.cuh, and the experiments that live only here, reached through
// the head's hooks (FusedLceHooks):
//   1 unfused                path unfused: bf16 logits of all N rows
//   2 chunks                 path chunks, loss-only calls through the chunks too
//   3 fused mma.sync         path chunks + the fully fused backward of fused_lce_sm80_backward.cuh, fp32
//                            atomics into dx and dW (4F with the forward)
//   4 the same, deterministic (one kernel owns dx rows, one owns dW rows: 5F)
//   5 blocks                 path blocks, cuBLASLt's dx and dW GEMMs
//   6 blocks, own GEMMs      path blocks + our own dx and dW GEMM (wgmma_gemm.cuh) on Hopper, the layout
//                            counting its tiles (wgmma_gemm_plan.h); elsewhere it is variant 5
#pragma once
#ifndef FUSED_LCE_DEV_HOOKS
#error "define FUSED_LCE_DEV_HOOKS before the first include of the head: the variants reach it through its hooks"
#endif
#include "../../llmc/head/fused_lce.cuh"
#include "fused_lce_sm80_backward.cuh"
#include "wgmma_gemm.cuh"
#include "wgmma_gemm_plan.h"

// --- variants 3 and 4: the fused backward --------------------------------------------------------

// The fused forward of the head leaves lse; the backward recomputes each logit tile on the chip, with the
// chunks' logits buffer as its fp32 dx accumulator.
static void fused_lce_variant_fused_backward(FusedLce* h, const FusedLceRun* r, int deterministic,
                                             const GpuContext* ctx) {
    if (!h->fused_forward) check_fail("the fused backward needs the head's fused forward", "C % 64 == 0, path chunks");
    fused_lce_forward(h, r->x, r->W, r->targets, r->N, ctx);
    fused_lce_mma_backward(r, h->chunks.logits, h->chunks.bytes, deterministic, ctx);
    profile_mark(ctx->prof, "head: fused backward", ctx->stream);
}
static void fused_lce_variant_backward_atomic(FusedLce* h, const FusedLceRun* r, const GpuContext* ctx) {
    fused_lce_variant_fused_backward(h, r, 0, ctx);
}
static void fused_lce_variant_backward_deterministic(FusedLce* h, const FusedLceRun* r, const GpuContext* ctx) {
    fused_lce_variant_fused_backward(h, r, 1, ctx);
}

// --- variant 6: our own dx and dW GEMMs -----------------------------------------------------------

typedef struct {
    int C, sm_count;   // for the cost (FusedLceWgGemmCost's fields, in the same order)
    int n, ncols;      // the last block shape, and the tile widths chosen for it: a row block has two
    int bn_dx, bn_dw;  // shapes (its last vocab block, the others), so the search runs twice a row block
} FusedLceOwnGemms;

// One launch: dx's tiles, then dW's, in the widths the layout counted (fused_lce_plan_pair_bn)
static void fused_lce_variant_own_gemms(void* arg, const FusedLceBlockGemmCall* g, const GpuContext* ctx) {
    FusedLceOwnGemms* o = (FusedLceOwnGemms*)arg;
    float *dxacc = g->dxacc, *dW_v = g->dW_v;
    const bf16 *G = g->G, *W_v = g->W_v, *x_r = g->x_r;
    int ldg = g->ldg, n = g->n, ncols = g->ncols, C = g->C, accumulate_dx = g->accumulate_dx;
    if (n != o->n || ncols != o->ncols) {
        fused_lce_plan_pair_bn(n, C, ncols, ctx->sm_count, &o->bn_dx, &o->bn_dw);
        o->n = n;
        o->ncols = ncols;
    }
    WgGemm gx = wg_gemm_make(dxacc, C, G, ldg, 0, W_v, C, 0, n, C, ncols, o->bn_dx);
    WgGemm gw = wg_gemm_make(dW_v, C, G, ldg, 1, x_r, C, 0, ncols, C, n, o->bn_dw);
    wg_gemm_run_pair(&gx, accumulate_dx, &gw, 1, ctx);
}

static double fused_lce_variant_own_gemms_cost(void* arg, int n, int ncols) {
    FusedLceOwnGemms* o = (FusedLceOwnGemms*)arg;
    FusedLceWgGemmCost c = {o->C, o->sm_count};
    return fused_lce_plan_wg_gemm_cost(&c, n, ncols);
}

// --- the table ---------------------------------------------------------------------------------

typedef struct {
    int id;
    const char* name;
    FusedLcePath path;
    unsigned fallbacks;
    int hooks;  // 0: none; 3, 4: the fused backward; 6: own GEMMs
} FusedLceVariant;

static const FusedLceVariant FUSED_LCE_VARIANTS[] = {
    {1, "unfused (bf16 logits, all rows)", FUSED_LCE_PATH_UNFUSED, 0, 0},
    {2, "chunked fp32 logits (--scratch)", FUSED_LCE_PATH_CHUNKS, FUSED_LCE_NO_FUSED_FORWARD, 0},
    {3, "fused mma.sync, atomic dx/dW", FUSED_LCE_PATH_CHUNKS, 0, 3},
    {4, "fused mma.sync, deterministic", FUSED_LCE_PATH_CHUNKS, 0, 4},
    {5, "2-D blocks (--vocab-block)", FUSED_LCE_PATH_BLOCKS, 0, 0},
    {6, "2-D blocks, own dx/dW GEMMs", FUSED_LCE_PATH_BLOCKS, 0, 6},
    {7, "staged bf16 exponentials (--scratch)", FUSED_LCE_PATH_STAGED, 0, 0},
};
#define FUSED_LCE_NUM_VARIANTS ((int)(sizeof(FUSED_LCE_VARIANTS) / sizeof(FUSED_LCE_VARIANTS[0])))

static inline const FusedLceVariant* fused_lce_variant(int id) {
    for (int i = 0; i < FUSED_LCE_NUM_VARIANTS; i++)
        if (FUSED_LCE_VARIANTS[i].id == id) return &FUSED_LCE_VARIANTS[i];
    check_fail("fused_lce_variant: no such variant", "variants are 1..7");
    return NULL;
}

// What a built variant keeps beside the head: its hooks and their state
typedef struct {
    FusedLceHooks hooks;
    FusedLceOwnGemms own;
} FusedLceVariantState;

// Builds variant v for the given sizes and options; scratch 0 is the head's default, vocab_block 0 too.
// Variant 6 uses its hook only where our GEMM runs (Hopper kernels on): elsewhere it is variant 5.
static inline void fused_lce_variant_build(FusedLce* h, FusedLceVariantState* st, const FusedLceVariant* v, int max_n, int C, int V,
                                           int Vp, FusedLceOptions opt, size_t scratch, int vocab_block) {
    FusedLceConfig cfg = fused_lce_config(max_n, C, V, Vp);
    cfg.opt = opt;
    cfg.path = v->path;
    cfg.scratch = scratch;
    cfg.vocab_block_max = vocab_block;
    cfg.fallbacks = v->fallbacks;
    memset(st, 0, sizeof(*st));
    if (v->hooks == 3 || v->hooks == 4) {
        st->hooks.backward = v->hooks == 4 ? fused_lce_variant_backward_deterministic : fused_lce_variant_backward_atomic;
        cfg.hooks = &st->hooks;
    }
    if (v->hooks == 6 && C % WG_BK == 0 && fused_lce_wgmma_available()) {
        wg_gemm_setup();
        int dev = 0;
        cuda_check(cudaGetDevice(&dev));
        cuda_check(cudaDeviceGetAttribute(&st->own.sm_count, cudaDevAttrMultiProcessorCount, dev));
        st->own.C = C;
        st->own.n = st->own.ncols = -1;
        st->hooks.block_gemms = fused_lce_variant_own_gemms;
        st->hooks.block_gemm_cost = fused_lce_variant_own_gemms_cost;
        st->hooks.arg = &st->own;
        cfg.hooks = &st->hooks;
    }
    fused_lce_build(h, &cfg);  // h keeps pointers into st: the caller keeps st beside h, unmoved
}
