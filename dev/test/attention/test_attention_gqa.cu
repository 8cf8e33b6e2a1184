// test_attention_gqa.cu: GPU test of grouped-query attention (NKV key/value heads shared by NH query
// heads; qkv (B, T, (NH + 2·NKV)·hs)) in the flash kernels (llmc/flash_attention{,_backward}.cuh; on an
// sm_90 GPU in an sm_90a build also llmc/flash_attention_sm90{,_backward}.cuh, check 1) and the simple ones
// (llmc/attention/attention_simple.cuh, through the layer's dispatcher llmc/attention/attention.cuh).
//   1. Against the CPU fp64 reference (dev/ref/ref_layers.h, through dev/ref/attention_check.cuh):
//      forward out and lse, backward dq, dk, dv, at every combination of
//      NH ∈ {4, 8}, NKV ∈ {1, 2, NH}, hs ∈ {64, 128}, T ∈ {1, 63, 64, 65, 200}, B ∈ {1, 2} (flash), and
//      the simple kernels at hs = 32 and 96 (lanes owning 1 and 3 channels) with NH = 4, NKV ∈ {1, 2, 4}.
//      Tolerances as test_attention's, justified in attention_check.cuh (relative L2 1e-2 for out and
//      the gradients, lse 1e-3 absolute): summing a kv head's gradient over its query heads adds fp32
//      additions only, far below the bf16 roundings those tolerances budget for.
//   2. Determinism: every backward runs twice and must be bitwise identical.
//   3. GQA against the multi-head path (GPT-2's, NKV = NH) run on the same qkv with each kv head repeated
//      NH/NKV times: out, lse and dq bitwise equal (the same arithmetic on the same values), and dk, dv
//      of kv head j equal to the sum of its query heads' dk, dv from the multi-head run (relative L2,
//      tolerance 1e-2: the multi-head run rounds each head's part to bf16 before the sum).
//   4. The QKV bias gradient (attention_backward's dbias, through the layer: the Hopper kernels'
//      epilogues at hs 64 and 128 on an sm_90 GPU, else and at hs 32 the bias kernel): dbias += the
//      column sums of dqkv as written, against their fp64 sums. The q and the v columns each within
//      relative L2 1e-4 (as test_layers' fp32 sums: far above fp32's ~1e-6 for a few thousand rows, far
//      below a lost tile or column, O(1)). The k columns' exact sums are zero (softmax ignores a bias
//      added to every key), so what they hold is rounding; each must be within 1e-5 of its column's
//      Σ|dk| (fp32's bound for these sums is ~(rows/128 + 10)·2^-24 of it): a q or v sum landing
//      there, or garbage, is far above that (a dk counted twice is not, and does not change training).
//      The first call adds into a zero dbias, so what it holds is the sums themselves (the sums are
//      tiny where dq is, at T = 1: added to a bias of ~0.5, their rounding in that addition would be
//      as large as they are). The scratch starts as NaN, so a partial row never written shows. dqkv
//      bitwise the same as without dbias; a second run into a dbias of db0 gives db0 + the first
//      run's sums in fp32, bitwise (+=, the sums added once, repeatable). Also with RoPE (θ = 5e5) at
//      hs 64 and 128: a rotated layer's sums come from the bias kernel on every GPU (the Hopper kernels
//      that rotate have no sums), against the same fp64 sums of dqkv as written; the k columns' sums are
//      not zero there (the rotation tells keys apart), and their bound is the same.
// A failed check prints the case and the error; the last line is `test_attention_gqa: N passed, M failed`.
#include <vector>
#include "../../../llmc/attention/attention.cuh"
#include "../../ref/attention_kernels.cuh"
#include "../gpu_testing.cuh"
#include "../testing.h"

// the layer's entry points (self: the GpuContext); at hs = 32 and 96 they run the simple kernels
static void layer_fwd(void* self, bf16* out, float* lse, bf16* qkv, int B, int T, int C, int NH, int NKV,
                      cudaStream_t) {
    attention_forward(out, lse, qkv, NULL, B, T, C, NH, NKV, (const GpuContext*)self);
}
static void layer_bwd(void* self, bf16* dqkv, float* D, const bf16* dout, const bf16* out, const bf16* qkv,
                      const float* lse, int B, int T, int C, int NH, int NKV, cudaStream_t) {
    attention_backward(dqkv, D, dout, out, qkv, NULL, lse, NULL, NULL, B, T, C, NH, NKV, (const GpuContext*)self);
}

typedef struct { int B, T, NH, NKV, hs; } Case;

static void check_reference(const char* what, AttFwdFn fwd, AttBwdFn bwd, void* self, Case c, uint64_t seed,
                            cudaStream_t st) {
    AttCheck r = att_check(fwd, bwd, self, c.B, c.T, c.NH, c.NKV, c.hs, seed, st);
    int ok = att_check_ok(&r, 1);
    printf("%s B=%d T=%3d NH=%d NKV=%d hs=%3d: out %.1e lse %.1e dq %.1e dk %.1e dv %.1e %s\n", what, c.B, c.T,
           c.NH, c.NKV, c.hs, r.out.rel_l2, r.lse.max_abs, r.dq.rel_l2, r.dk.rel_l2, r.dv.rel_l2, ok ? "ok" : "FAILED");
    if (!ok) att_check_print(&r, 1);
    const AttErr* errs[] = {&r.out, &r.dq, &r.dk, &r.dv};
    const char* names[] = {"out", "dq", "dk", "dv"};
    for (int k = 0; k < 4; k++)
        EXPECT(att_err_ok(*errs[k], k == 0 ? ATT_TOL_OUT : ATT_TOL_GRAD),
               "%s B=%d T=%d NH=%d NKV=%d hs=%d: %s rel L2 %.2e (tol %.0e), %zu non-finite", what, c.B, c.T, c.NH,
               c.NKV, c.hs, names[k], errs[k]->rel_l2, k == 0 ? ATT_TOL_OUT : ATT_TOL_GRAD, errs[k]->nonfinite);
    EXPECT(att_err_ok(r.lse, ATT_TOL_LSE), "%s B=%d T=%d NH=%d NKV=%d hs=%d: lse max abs %.2e (tol %.0e), %zu non-finite",
           what, c.B, c.T, c.NH, c.NKV, c.hs, r.lse.max_abs, ATT_TOL_LSE, r.lse.nonfinite);
    EXPECT(r.bitwise_repeatable, "%s B=%d T=%d NH=%d NKV=%d hs=%d: two backward runs differ", what, c.B, c.T, c.NH,
           c.NKV, c.hs);
}

// Check 3: the flash kernels on (NH, NKV) against themselves on (NH, NH) with the kv heads repeated.
static void check_repeated_kv(Case c, uint64_t seed, cudaStream_t st) {
    int B = c.B, T = c.T, NH = c.NH, NKV = c.NKV, hs = c.hs, G = NH / NKV;
    size_t rows = (size_t)B * T, Wg = (size_t)(NH + 2 * NKV) * hs, Wm = (size_t)3 * NH * hs;
    size_t nout = rows * NH * hs, nrow = (size_t)B * NH * T;
    bf16* qg = (bf16*)malloc_check(rows * Wg * sizeof(bf16));
    bf16* qm = (bf16*)malloc_check(rows * Wm * sizeof(bf16));
    bf16* dout = (bf16*)malloc_check(nout * sizeof(bf16));
    att_inputs(qg, dout, B, T, NH, NKV, hs, seed);
    for (size_t r = 0; r < rows; r++) {  // multi-head row: q heads as they are, kv head h / G in slot h
        memcpy(qm + r * Wm, qg + r * Wg, (size_t)NH * hs * sizeof(bf16));
        for (int h = 0; h < NH; h++)
            for (int kv = 0; kv < 2; kv++)
                memcpy(qm + r * Wm + (size_t)(1 + kv) * NH * hs + (size_t)h * hs,
                       qg + r * Wg + (size_t)NH * hs + (size_t)(kv * NKV + h / G) * hs, hs * sizeof(bf16));
    }
    AttRun g = att_run(att_flash_forward, att_flash_backward, NULL, qg, dout, B, T, NH, NKV, hs, st);
    AttRun m = att_run(att_flash_forward, att_flash_backward, NULL, qm, dout, B, T, NH, NH, hs, st);
    int dq_same = 1;
    for (size_t r = 0; r < rows; r++)
        dq_same &= memcmp(g.dqkv + r * Wg, m.dqkv + r * Wm, (size_t)NH * hs * sizeof(bf16)) == 0;
    // dk, dv: kv head j of the GQA run against the fp64 sum of its query heads' parts of the multi-head run
    double num[2] = {0, 0}, den[2] = {0, 0};
    for (size_t r = 0; r < rows; r++)
        for (int kv = 0; kv < 2; kv++)
            for (int j = 0; j < NKV; j++)
                for (int d = 0; d < hs; d++) {
                    double sum = 0;
                    for (int h = j * G; h < (j + 1) * G; h++)
                        sum += __bfloat162float(m.dqkv[r * Wm + (size_t)(1 + kv) * NH * hs + (size_t)h * hs + d]);
                    double x = __bfloat162float(g.dqkv[r * Wg + (size_t)(NH + kv * NKV + j) * hs + d]);
                    num[kv] += (x - sum) * (x - sum);
                    den[kv] += sum * sum;
                }
    double rel[2] = {sqrt(num[0] / den[0]), sqrt(num[1] / den[1])};
    int out_same = memcmp(g.out, m.out, nout * sizeof(bf16)) == 0;
    int lse_same = memcmp(g.lse, m.lse, nrow * sizeof(float)) == 0;
    printf("repeated kv B=%d T=%3d NH=%d NKV=%d hs=%3d: out %s, lse %s, dq %s; dk, dv against the heads' sums: "
           "rel L2 %.1e, %.1e\n", B, T, NH, NKV, hs, out_same ? "bitwise" : "DIFFERENT", lse_same ? "bitwise" : "DIFFERENT",
           dq_same ? "bitwise" : "DIFFERENT", rel[0], rel[1]);
    EXPECT(out_same, "B=%d T=%d NH=%d NKV=%d hs=%d: out differs from the repeated-kv multi-head run", B, T, NH, NKV, hs);
    EXPECT(lse_same, "B=%d T=%d NH=%d NKV=%d hs=%d: lse differs from the repeated-kv multi-head run", B, T, NH, NKV, hs);
    EXPECT(dq_same, "B=%d T=%d NH=%d NKV=%d hs=%d: dq differs from the repeated-kv multi-head run", B, T, NH, NKV, hs);
    EXPECT(isfinite(rel[0]) && rel[0] <= ATT_TOL_GRAD && isfinite(rel[1]) && rel[1] <= ATT_TOL_GRAD,
           "B=%d T=%d NH=%d NKV=%d hs=%d: dk, dv rel L2 %.2e, %.2e against the multi-head heads' sums (tol %.0e)",
           B, T, NH, NKV, hs, rel[0], rel[1], ATT_TOL_GRAD);
    att_run_free(&g);
    att_run_free(&m);
    free(qg); free(qm); free(dout);
}

// Check 4: the column sums of dqkv that attention_backward adds into dbias.
static void check_qkv_bias(Case c, int with_rope, uint64_t seed, const GpuContext* ctx) {
    int B = c.B, T = c.T, NH = c.NH, NKV = c.NKV, hs = c.hs, C = NH * hs, W = (NH + 2 * NKV) * hs;
    size_t rows = (size_t)B * T, nqkv = rows * W, nrow = (size_t)B * NH * T;
    bf16* h_qkv = (bf16*)malloc_check(nqkv * sizeof(bf16));
    bf16* h_dout = (bf16*)malloc_check(rows * C * sizeof(bf16));
    att_inputs(h_qkv, h_dout, B, T, NH, NKV, hs, seed);
    std::vector<float> zeros(W, 0.0f), db0(W);
    for (int i = 0; i < W; i++) db0[i] = 0.25f * (i % 7) - 0.75f;
    bf16 *qkv, *dout, *out, *dqkv[2];
    float *lse, *D, *db[2], *scratch, *rope = NULL;
    if (with_rope) {
        cuda_check(cudaMalloc(&rope, (size_t)T * hs * sizeof(float)));
        rope_table_fill(rope, T, hs, 5e5, ctx);
    }
    cuda_check(cudaMalloc(&qkv, nqkv * sizeof(bf16)));
    cuda_check(cudaMalloc(&dout, rows * C * sizeof(bf16)));
    cuda_check(cudaMalloc(&out, rows * C * sizeof(bf16)));
    cuda_check(cudaMalloc(&lse, nrow * sizeof(float)));
    cuda_check(cudaMalloc(&D, nrow * sizeof(float)));
    cuda_check(cudaMalloc(&scratch, attention_bias_scratch(B, T, W) * sizeof(float)));
    for (int k = 0; k < 2; k++) {
        cuda_check(cudaMalloc(&dqkv[k], nqkv * sizeof(bf16)));
        cuda_check(cudaMalloc(&db[k], W * sizeof(float)));
        cuda_check(cudaMemcpy(db[k], (k == 0 ? zeros : db0).data(), W * sizeof(float), cudaMemcpyHostToDevice));
    }
    cuda_check(cudaMemset(scratch, 0xff, attention_bias_scratch(B, T, W) * sizeof(float)));  // NaN
    cuda_check(cudaMemcpy(qkv, h_qkv, nqkv * sizeof(bf16), cudaMemcpyHostToDevice));
    cuda_check(cudaMemcpy(dout, h_dout, rows * C * sizeof(bf16), cudaMemcpyHostToDevice));
    attention_forward(out, lse, qkv, rope, B, T, C, NH, NKV, ctx);
    attention_backward(dqkv[1], D, dout, out, qkv, rope, lse, NULL, NULL, B, T, C, NH, NKV, ctx);  // no sums
    attention_backward(dqkv[0], D, dout, out, qkv, rope, lse, db[0], scratch, B, T, C, NH, NKV, ctx);
    cuda_check(cudaStreamSynchronize(ctx->stream));
    std::vector<bf16> got(nqkv), plain(nqkv);
    cuda_check(cudaMemcpy(got.data(), dqkv[0], nqkv * sizeof(bf16), cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(plain.data(), dqkv[1], nqkv * sizeof(bf16), cudaMemcpyDeviceToHost));
    attention_backward(dqkv[1], D, dout, out, qkv, rope, lse, db[1], scratch, B, T, C, NH, NKV, ctx);  // again
    cuda_check(cudaStreamSynchronize(ctx->stream));
    std::vector<float> s0(W), s1(W);
    cuda_check(cudaMemcpy(s0.data(), db[0], W * sizeof(float), cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(s1.data(), db[1], W * sizeof(float), cudaMemcpyDeviceToHost));
    std::vector<double> ref(W, 0.0), mag(W, 0.0);  // the sums and the sums of magnitudes of each column
    for (size_t r = 0; r < rows; r++)
        for (int i = 0; i < W; i++) {
            double x = __bfloat162float(got[r * W + i]);
            ref[i] += x;
            mag[i] += fabs(x);
        }
    auto added = [&](size_t i) { return (double)s0[i]; };  // what the call added to a zero dbias
    int kq = NH * hs, kv = (NH + NKV) * hs;                         // the k columns: [kq, kv)
    AttErr eq = att_compare(added, ref.data(), W, W, 0, kq), ev = att_compare(added, ref.data(), W, W, kv, W);
    int k_bad = 0, k_where = -1;
    double k_worst = 0.0;  // the largest error in units of its column's Σ|dk|
    for (int i = kq; i < kv; i++) {
        double d = fabs(added(i) - ref[i]), u = d / (mag[i] + 1e-30);
        if (!(d <= 1e-5 * mag[i] + 1e-6)) { k_bad++; if (k_where < 0) k_where = i; }
        if (!(u <= k_worst)) k_worst = u;
    }
    int same_dqkv = memcmp(got.data(), plain.data(), nqkv * sizeof(bf16)) == 0;
    int repeat = 1;  // s1 = db0 + s0, the same sums added to another bias
    for (int i = 0; i < W; i++) {
        float want = db0[i] + s0[i];
        if (memcmp(&want, &s1[i], sizeof(float)) != 0) repeat = 0;
    }
    const char* rot = with_rope ? "rope " : "";
    printf("qkv bias %sB=%d T=%3d NH=%d NKV=%d hs=%3d: sums rel L2 q %.1e, v %.1e; k within %.1e of Σ|dk|; dqkv %s "
           "without the sums; added again %s\n", rot, B, T, NH, NKV, hs, eq.rel_l2, ev.rel_l2, k_worst,
           same_dqkv ? "bitwise as" : "DIFFERENT from", repeat ? "bitwise" : "DIFFERS");
    EXPECT(att_err_ok(eq, 1e-4) && att_err_ok(ev, 1e-4), "%sB=%d T=%d NH=%d NKV=%d hs=%d: the qkv bias sums rel L2 q "
           "%.2e, v %.2e (tol 1e-4), %zu non-finite", rot, B, T, NH, NKV, hs, eq.rel_l2, ev.rel_l2,
           eq.nonfinite + ev.nonfinite);
    EXPECT(k_bad == 0, "%sB=%d T=%d NH=%d NKV=%d hs=%d: %d k columns' bias sums beyond 1e-5 of their Σ|dk| (first: "
           "column %d, %.9g vs %.9g)", rot, B, T, NH, NKV, hs, k_bad, k_where, k_where < 0 ? 0.0 : added(k_where),
           k_where < 0 ? 0.0 : ref[k_where]);
    EXPECT(same_dqkv, "%sB=%d T=%d NH=%d NKV=%d hs=%d: dqkv changes when the bias sums are asked for", rot, B, T, NH,
           NKV, hs);
    EXPECT(repeat, "%sB=%d T=%d NH=%d NKV=%d hs=%d: a second run into dbias = db0 does not give db0 + the first run's "
           "sums bitwise", rot, B, T, NH, NKV, hs);
    bf16* bb[] = {qkv, dout, out, dqkv[0], dqkv[1]};
    for (bf16* p : bb) cuda_check(cudaFree(p));
    float* ff[] = {lse, D, db[0], db[1], scratch, rope};
    for (float* p : ff) cuda_check(cudaFree(p));
    free(h_qkv); free(h_dout);
}

int main(void) {
    test_require_cuda("test_attention_gqa");
    GpuContext ctx;
    gpu_context_build(&ctx, 0);
    const int Ts[] = {1, 63, 64, 65, 200};
    uint64_t seed = 2000;
    for (int hs = 64; hs <= 128; hs *= 2)
        for (int NH = 4; NH <= 8; NH *= 2)
            for (int NKV : {1, 2, NH})
                for (int T : Ts)
                    for (int B = 1; B <= 2; B++) {
                        Case c = {B, T, NH, NKV, hs};
                        check_reference("flash", att_flash_forward, att_flash_backward, NULL, c, seed += 2, ctx.stream);
                        if (flash_sm90_available())  // its own inputs: the mma.sync checks keep theirs
                            check_reference("sm90", att_sm90_forward, att_sm90_backward, NULL, c, seed + 100001,
                                            ctx.stream);
                        if (NKV < NH) check_repeated_kv(c, seed += 2, ctx.stream);
                    }
    for (int hs : {32, 96})
        for (int NKV : {1, 2, 4})
            for (int T : {1, 65, 200}) {
                Case c = {2, T, 4, NKV, hs};
                check_reference("simple", layer_fwd, layer_bwd, &ctx, c, seed += 2, ctx.stream);
            }
    for (int hs : {64, 128, 32})
        for (Case c : {Case{2, 200, 4, 4, hs}, Case{3, 1024, 2, 2, hs}, Case{1, 65, 8, 2, hs}, Case{2, 1, 4, 1, hs}})
            check_qkv_bias(c, 0, seed += 2, &ctx);
    for (int hs : {64, 128})
        for (Case c : {Case{2, 200, 4, 4, hs}, Case{1, 65, 8, 2, hs}})
            check_qkv_bias(c, 1, seed += 2, &ctx);
    gpu_context_free(&ctx);
    return test_summary("test_attention_gqa");
}
