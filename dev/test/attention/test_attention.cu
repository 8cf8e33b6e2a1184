// test_attention.cu: GPU test of the flash attention kernels, mma.sync (llmc/flash_attention{,_backward}.cuh)
// and, on an sm_90 GPU in an sm_90a build, wgmma (llmc/flash_attention_sm90{,_backward}.cuh), against the CPU
// fp64 reference (dev/ref/ref_layers.h, through dev/ref/attention_check.cuh): forward out and lse,
// backward dq, dk, dv, at T = 1, 63, 64, 100, 257 (and two longer ones: many tiles, T not a multiple
// of 64), NH = 1 and 3, hs = 64 and 128, B = 2, in GPT-2's layout (NKV = NH; grouped-query attention:
// test_attention_gqa.cu). Outputs are poisoned before each run; the backward runs
// twice and must be bitwise identical. Tolerances (relative L2 1e-2 for out and the gradients, lse 1e-3
// absolute) are justified in attention_check.cuh.
#include "../../ref/attention_kernels.cuh"
#include "../gpu_testing.cuh"
#include "../testing.h"

static void check_kernels(const char* name, AttFwdFn fwd, AttBwdFn bwd, cudaStream_t st) {
    typedef struct { int B, T, NH, hs; } Case;
    const Case cases[] = {
        {2, 1, 1, 64}, {2, 63, 1, 64}, {2, 64, 3, 64}, {2, 100, 3, 64}, {2, 257, 1, 64}, {2, 257, 3, 64},
        {2, 1, 3, 128}, {2, 63, 3, 128}, {2, 64, 1, 128}, {2, 100, 1, 128}, {2, 257, 3, 128},
        {1, 1000, 2, 64}, {1, 1100, 1, 128},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        Case c = cases[i];
        AttCheck r = att_check(fwd, bwd, NULL, c.B, c.T, c.NH, c.NH, c.hs, 1000 + i, st);
        int ok = att_check_ok(&r, 1);
        printf("%s B=%d T=%4d NH=%d hs=%3d: %s\n", name, c.B, c.T, c.NH, c.hs, ok ? "ok" : "FAILED");
        att_check_print(&r, 1);
        EXPECT(att_err_ok(r.out, ATT_TOL_OUT), "%s T=%d NH=%d hs=%d: out rel L2 %.2e (tol %.0e), %zu non-finite",
               name, c.T, c.NH, c.hs, r.out.rel_l2, ATT_TOL_OUT, r.out.nonfinite);
        EXPECT(att_err_ok(r.lse, ATT_TOL_LSE), "%s T=%d NH=%d hs=%d: lse max abs %.2e (tol %.0e), %zu non-finite",
               name, c.T, c.NH, c.hs, r.lse.max_abs, ATT_TOL_LSE, r.lse.nonfinite);
        EXPECT(att_err_ok(r.dq, ATT_TOL_GRAD), "%s T=%d NH=%d hs=%d: dq rel L2 %.2e (tol %.0e), %zu non-finite",
               name, c.T, c.NH, c.hs, r.dq.rel_l2, ATT_TOL_GRAD, r.dq.nonfinite);
        EXPECT(att_err_ok(r.dk, ATT_TOL_GRAD), "%s T=%d NH=%d hs=%d: dk rel L2 %.2e (tol %.0e), %zu non-finite",
               name, c.T, c.NH, c.hs, r.dk.rel_l2, ATT_TOL_GRAD, r.dk.nonfinite);
        EXPECT(att_err_ok(r.dv, ATT_TOL_GRAD), "%s T=%d NH=%d hs=%d: dv rel L2 %.2e (tol %.0e), %zu non-finite",
               name, c.T, c.NH, c.hs, r.dv.rel_l2, ATT_TOL_GRAD, r.dv.nonfinite);
        EXPECT(r.bitwise_repeatable, "%s T=%d NH=%d hs=%d: two backward runs differ", name, c.T, c.NH, c.hs);
    }
}

int main(void) {
    test_require_cuda("test_attention");
    GpuContext ctx;
    gpu_context_build(&ctx, 0);
    check_kernels("mma.sync", att_flash_forward, att_flash_backward, ctx.stream);
    if (flash_sm90_available()) check_kernels("sm90", att_sm90_forward, att_sm90_backward, ctx.stream);
    else printf("sm90: not run (needs an sm_90 GPU and an sm_90a build)\n");
    gpu_context_free(&ctx);
    return test_summary("test_attention");
}
