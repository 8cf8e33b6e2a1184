// test_layers.cu: GPU test of the row and column kernels of llmc/layers/layernorm.cuh and llmc/layers/linear.cuh
// against the fp64 CPU reference (dev/ref/gpt_ref_layers.h), at widths the model does not reach in
// test_gpt (C = 8 .. 2048, partial lane groups, N not a multiple of the 8 rows of a block, N = 1):
//   layernorm_forward: out, mean, rstd (and the residual form: r = bf16(a + b) stored, out);
//   layernorm_backward: dx ACCUMULATED onto a non-zero dinp, dw and db ACCUMULATED onto non-zero values,
//   with and without the column sums of the dinp it writes (ACCUMULATED too);  linear_backward: dx, dW and the bias gradient db, and
//   dx through the GELU of the layer's input (the DGELU epilogue) against the reference GELU backward.
// The inputs are bf16 (the reference reads the same rounded values); what differs is the rounding of
// the bf16 outputs (≤ 2^-9 relative per element: tolerance relative L2 4e-3) and fp32 sums against
// fp64 (tolerance 1e-4 relative, 1e-5 absolute for the row means: far above fp32's ~1e-6 here and far
// below any indexing mistake, which gives O(1)).
// The backward runs twice on the same inputs and must give identical bits. With -gemm_tune's tuned GEMMs
// (llmc/layers/matmul.cuh) the layer must give the untuned bits, and the tuning rule is checked on its own;
// a second context tunes into its own table, never into the first's.
#define GPT_REF_DOUBLE
#include <stdlib.h>
#include <math.h>
#include <vector>
#include "../ref/gpt_ref_layers.h"
#include "../../llmc/layers/layernorm.cuh"
#include "../../llmc/layers/linear.cuh"
#include "gpu_testing.cuh"
#include "testing.h"

#define TOL_BF16 4e-3
#define TOL_FP32 1e-4
#define TOL_MEAN 1e-5  // absolute: a mean near 0 has no useful relative error; fp32 sums of |x| <= 2 give ~1e-6

static uint64_t rng_state = 12345;
static double uniform(void) {  // in [-1, 1)
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rng_state >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

// n bf16 values uniform in [lo, hi), and the same rounded values as doubles
static bf16* make_bf16(std::vector<double>& host, size_t n, double lo, double hi) {
    std::vector<bf16> h(n);
    host.resize(n);
    for (size_t i = 0; i < n; i++) {
        h[i] = __float2bfloat16((float)(lo + (hi - lo) * 0.5 * (uniform() + 1.0)));
        host[i] = __bfloat162float(h[i]);
    }
    bf16* d;
    cuda_check(cudaMalloc(&d, n * sizeof(bf16)));
    cuda_check(cudaMemcpy(d, h.data(), n * sizeof(bf16), cudaMemcpyHostToDevice));
    cuda_check(cudaDeviceSynchronize());  // a pageable copy may return before it lands; the kernels' stream does not wait
    return d;
}
static float* make_f32(std::vector<double>& host, size_t n) {
    std::vector<float> h(n);
    host.resize(n);
    for (size_t i = 0; i < n; i++) { h[i] = (float)uniform(); host[i] = h[i]; }
    float* d;
    cuda_check(cudaMalloc(&d, n * sizeof(float)));
    cuda_check(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    cuda_check(cudaDeviceSynchronize());  // as in make_bf16
    return d;
}
static std::vector<double> get_bf16(const bf16* d, size_t n) {
    std::vector<bf16> h(n);
    cuda_check(cudaMemcpy(h.data(), d, n * sizeof(bf16), cudaMemcpyDeviceToHost));
    std::vector<double> out(n);
    for (size_t i = 0; i < n; i++) out[i] = __bfloat162float(h[i]);
    return out;
}
static std::vector<double> get_f32(const float* d, size_t n) {
    std::vector<float> h(n);
    cuda_check(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return std::vector<double>(h.begin(), h.end());
}
static double rel_l2(const std::vector<double>& got, const std::vector<double>& ref) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < ref.size(); i++) {
        if (!isfinite(got[i])) return INFINITY;
        num += (got[i] - ref[i]) * (got[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}
static double rms_diff(const std::vector<double>& got, const std::vector<double>& ref) {
    double num = 0.0;
    for (size_t i = 0; i < ref.size(); i++) num += (got[i] - ref[i]) * (got[i] - ref[i]);
    return isfinite(num) ? sqrt(num / ref.size()) : INFINITY;
}
static int same_bits(const void* a, const void* b, size_t bytes) {
    std::vector<char> ha(bytes), hb(bytes);
    cuda_check(cudaMemcpy(ha.data(), a, bytes, cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(hb.data(), b, bytes, cudaMemcpyDeviceToHost));
    return memcmp(ha.data(), hb.data(), bytes) == 0;
}

// with_sum: the backward also adds the column sums of the dinp it writes into ds (the bias gradient of
// the layer below, llmc/model/gpt.cuh); both runs do, and the repeat must match bitwise, ds included.
static void test_layernorm(int N, int C, int with_sum, float* scratch, const GpuContext* ctx) {
    cudaStream_t st = ctx->stream;
    std::vector<double> x, w, b, dout, dinp0, dw0, db0, ds0;
    bf16* d_x = make_bf16(x, (size_t)N * C, -2.0, 2.0);
    bf16* d_w = make_bf16(w, C, 0.5, 1.5);
    bf16* d_b = make_bf16(b, C, -0.5, 0.5);
    bf16* d_dout = make_bf16(dout, (size_t)N * C, -1.0, 1.0);
    bf16* d_dinp = make_bf16(dinp0, (size_t)N * C, -0.5, 0.5);
    float* d_dw = make_f32(dw0, C);
    float* d_db = make_f32(db0, C);
    float* d_ds = make_f32(ds0, C);
    bf16 *d_out, *d_dinp2;
    float *d_mean, *d_rstd, *d_dw2, *d_db2, *d_ds2;
    cuda_check(cudaMalloc(&d_out, (size_t)N * C * sizeof(bf16)));
    cuda_check(cudaMalloc(&d_dinp2, (size_t)N * C * sizeof(bf16)));
    cuda_check(cudaMalloc(&d_mean, N * sizeof(float)));
    cuda_check(cudaMalloc(&d_rstd, N * sizeof(float)));
    cuda_check(cudaMalloc(&d_dw2, C * sizeof(float)));
    cuda_check(cudaMalloc(&d_db2, C * sizeof(float)));
    cuda_check(cudaMalloc(&d_ds2, C * sizeof(float)));
    // second copies of the accumulated outputs, for the repeat run
    cuda_check(cudaMemcpy(d_dinp2, d_dinp, (size_t)N * C * sizeof(bf16), cudaMemcpyDeviceToDevice));
    cuda_check(cudaMemcpy(d_dw2, d_dw, C * sizeof(float), cudaMemcpyDeviceToDevice));
    cuda_check(cudaMemcpy(d_db2, d_db, C * sizeof(float), cudaMemcpyDeviceToDevice));
    cuda_check(cudaMemcpy(d_ds2, d_ds, C * sizeof(float), cudaMemcpyDeviceToDevice));
    cuda_check(cudaDeviceSynchronize());  // device-to-device copies are asynchronous, on the legacy stream

    layernorm_forward(d_out, d_mean, d_rstd, d_x, d_w, d_b, N, C, ctx);
    layernorm_backward(d_dinp, d_dw, d_db, with_sum ? d_ds : NULL, scratch, d_dout, d_x, d_mean, d_rstd, d_w, N, C, ctx);
    layernorm_backward(d_dinp2, d_dw2, d_db2, with_sum ? d_ds2 : NULL, scratch, d_dout, d_x, d_mean, d_rstd, d_w, N, C,
                       ctx);
    cuda_check(cudaStreamSynchronize(st));

    std::vector<double> out(N * (size_t)C), mean(N), rstd(N);
    gpt_ref_layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    // the backward reference takes the GPU's fp32 statistics, so that dx tests the backward alone
    std::vector<double> gmean = get_f32(d_mean, N), grstd = get_f32(d_rstd, N);
    std::vector<double> dinp = dinp0, dw = dw0, db = db0;
    gpt_ref_layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), gmean.data(), grstd.data(),
                               w.data(), N, C);
    double e_out = rel_l2(get_bf16(d_out, (size_t)N * C), out);
    double e_mean = rms_diff(gmean, mean), e_rstd = rel_l2(grstd, rstd);
    double e_dx = rel_l2(get_bf16(d_dinp, (size_t)N * C), dinp);
    double e_dw = rel_l2(get_f32(d_dw, C), dw), e_db = rel_l2(get_f32(d_db, C), db);
    // ds: ds0 + the column sums of dinp as the GPU wrote it (bf16), in fp64; untouched without the sum
    std::vector<double> got_dinp = get_bf16(d_dinp, (size_t)N * C), ds = ds0;
    if (with_sum)
        for (size_t i = 0; i < got_dinp.size(); i++) ds[i % C] += got_dinp[i];
    double e_ds = rel_l2(get_f32(d_ds, C), ds);
    int repeat = same_bits(d_dinp, d_dinp2, (size_t)N * C * sizeof(bf16)) && same_bits(d_dw, d_dw2, C * sizeof(float)) &&
                 same_bits(d_db, d_db2, C * sizeof(float)) && same_bits(d_ds, d_ds2, C * sizeof(float));
    printf("layernorm N=%5d C=%4d sum %d: out %.1e mean(abs) %.1e rstd %.1e | dx %.1e dw %.1e db %.1e ds %.1e | repeat %s\n",
           N, C, with_sum, e_out, e_mean, e_rstd, e_dx, e_dw, e_db, e_ds, repeat ? "bitwise" : "DIFFERS");
    EXPECT(e_out <= TOL_BF16, "layernorm N=%d C=%d: out rel L2 %.2e > %.0e", N, C, e_out, TOL_BF16);
    EXPECT(e_mean <= TOL_MEAN, "layernorm N=%d C=%d: mean RMS error %.2e > %.0e", N, C, e_mean, TOL_MEAN);
    EXPECT(e_rstd <= TOL_FP32, "layernorm N=%d C=%d: rstd rel L2 %.2e > %.0e", N, C, e_rstd, TOL_FP32);
    EXPECT(e_dx <= TOL_BF16, "layernorm N=%d C=%d: dx rel L2 %.2e > %.0e", N, C, e_dx, TOL_BF16);
    EXPECT(e_dw <= TOL_FP32 && e_db <= TOL_FP32, "layernorm N=%d C=%d: dw %.2e db %.2e > %.0e", N, C, e_dw, e_db, TOL_FP32);
    if (with_sum) EXPECT(e_ds <= TOL_FP32, "layernorm N=%d C=%d: ds rel L2 %.2e > %.0e", N, C, e_ds, TOL_FP32);
    else EXPECT(e_ds == 0.0, "layernorm N=%d C=%d: ds changed without a sum asked (rel L2 %.2e)", N, C, e_ds);
    EXPECT(repeat, "layernorm N=%d C=%d sum %d: two backward runs differ", N, C, with_sum);
    // the residual form: r = bf16(x + y) stored, then normalized as rounded
    std::vector<double> y, r((size_t)N * C);
    bf16* d_y = make_bf16(y, (size_t)N * C, -2.0, 2.0);
    bf16* d_r;
    cuda_check(cudaMalloc(&d_r, (size_t)N * C * sizeof(bf16)));
    residual_layernorm_forward(d_r, d_out, d_mean, d_rstd, d_x, d_y, d_w, d_b, N, C, ctx);
    cuda_check(cudaStreamSynchronize(st));
    for (size_t i = 0; i < r.size(); i++) r[i] = __bfloat162float(__float2bfloat16((float)(x[i] + y[i])));
    gpt_ref_layernorm_forward(out.data(), mean.data(), rstd.data(), r.data(), w.data(), b.data(), N, C);
    double e_r = rel_l2(get_bf16(d_r, r.size()), r), e_rout = rel_l2(get_bf16(d_out, r.size()), out);
    printf("residual  N=%5d C=%4d: r %.1e (exact expected) out %.1e\n", N, C, e_r, e_rout);
    EXPECT(e_r == 0.0, "residual layernorm N=%d C=%d: r = bf16(a + b) differs (rel L2 %.2e)", N, C, e_r);
    EXPECT(e_rout <= TOL_BF16, "residual layernorm N=%d C=%d: out rel L2 %.2e > %.0e", N, C, e_rout, TOL_BF16);
    bf16* bfs[] = {d_x, d_w, d_b, d_dout, d_dinp, d_out, d_dinp2, d_y, d_r};
    float* fs[] = {d_dw, d_db, d_ds, d_mean, d_rstd, d_dw2, d_db2, d_ds2};
    for (bf16* p : bfs) cuda_check(cudaFree(p));
    for (float* p : fs) cuda_check(cudaFree(p));
}

// With gelu: x = GELU(u) and the layer's dx is the gradient with respect to u (the DGELU epilogue).
static void test_linear_backward(int N, int IC, int OC, int gelu, float* scratch, const GpuContext* ctx) {
    std::vector<double> dy, x, u, W, dW0, db0;
    bf16* d_dy = make_bf16(dy, (size_t)N * OC, -1.0, 1.0);
    bf16* d_x = make_bf16(x, (size_t)N * IC, -1.0, 1.0);
    bf16* d_u = make_bf16(u, (size_t)N * IC, -3.0, 3.0);  // the GELU's input, when gelu
    bf16* d_W = make_bf16(W, (size_t)OC * IC, -0.1, 0.1);
    float* d_dW = make_f32(dW0, (size_t)OC * IC);
    float* d_db = make_f32(db0, OC);
    bf16* d_dx;
    cuda_check(cudaMalloc(&d_dx, (size_t)N * IC * sizeof(bf16)));
    linear_backward(d_dx, d_dW, d_db, scratch, d_dy, d_x, d_W, N, IC, OC, gelu ? d_u : NULL, ctx);
    cuda_check(cudaStreamSynchronize(ctx->stream));
    std::vector<double> dx((size_t)N * IC, 0.0), dW = dW0, db = db0;  // the layer assigns dx
    gpt_ref_matmul_backward(dx.data(), dW.data(), db.data(), dy.data(), x.data(), W.data(), N, IC, OC);
    if (gelu) {
        std::vector<double> du((size_t)N * IC, 0.0);
        gpt_ref_gelu_backward(du.data(), dx.data(), u.data(), du.size());
        dx = du;
    }
    double e_dx = rel_l2(get_bf16(d_dx, (size_t)N * IC), dx);
    double e_dW = rel_l2(get_f32(d_dW, (size_t)OC * IC), dW), e_db = rel_l2(get_f32(d_db, OC), db);
    printf("linear    N=%5d IC=%4d OC=%4d%s: dx %.1e dW %.1e db %.1e\n", N, IC, OC, gelu ? " (dx through GELU')" : "",
           e_dx, e_dW, e_db);
    EXPECT(e_dx <= TOL_BF16, "linear N=%d IC=%d OC=%d: dx rel L2 %.2e > %.0e", N, IC, OC, e_dx, TOL_BF16);
    EXPECT(e_dW <= TOL_FP32 && e_db <= TOL_FP32, "linear N=%d IC=%d OC=%d: dW %.2e db %.2e > %.0e", N, IC, OC, e_dW,
           e_db, TOL_FP32);
    cuda_check(cudaFree(d_dy)); cuda_check(cudaFree(d_x)); cuda_check(cudaFree(d_u)); cuda_check(cudaFree(d_W));
    cuda_check(cudaFree(d_dW)); cuda_check(cudaFree(d_db)); cuda_check(cudaFree(d_dx));
}

// -gemm_tune (llmc/layers/matmul.cuh): the rule takes the fastest candidate whose result hash is the first's
static void test_tune_pick(void) {
    unsigned long long h1[] = {5, 5, 7, 5};
    float t1[] = {1.0f, 0.9f, 0.5f, 0.95f};
    EXPECT(matmul_tune_pick(4, h1, t1) == 1, "tune pick: %d, expected 1 (2 is faster but sums otherwise)",
           matmul_tune_pick(4, h1, t1));
    unsigned long long h2[] = {5, 6};
    float t2[] = {1.0f, 0.1f};
    EXPECT(matmul_tune_pick(2, h2, t2) == 0, "tune pick: %d, expected 0 (the only same-bits candidate)",
           matmul_tune_pick(2, h2, t2));
    unsigned long long h3[] = {5, 5};
    float t3[] = {1.0f, INFINITY};
    EXPECT(matmul_tune_pick(2, h3, t3) == 0, "tune pick: %d, expected 0", matmul_tune_pick(2, h3, t3));
}

// The layer's forward and backward with tuned GEMMs give bitwise what they give untuned (tuning runs
// the candidates on the call's own operands, dW accumulated included: D must come back as it was).
static void test_linear_tuned(int N, int IC, int OC, int gelu, float* scratch, const GpuContext* ctx) {
    GpuContext tuned = *ctx;
    tuned.gemm_tune = 1;
    std::vector<double> h;
    bf16* d_x = make_bf16(h, (size_t)N * IC, -1.0, 1.0);
    bf16* d_u = make_bf16(h, (size_t)N * IC, -3.0, 3.0);
    bf16* d_W = make_bf16(h, (size_t)OC * IC, -0.1, 0.1);
    bf16* d_b = make_bf16(h, OC, -0.1, 0.1);
    bf16* d_dy = make_bf16(h, (size_t)N * OC, -1.0, 1.0);
    float* dW0 = make_f32(h, (size_t)OC * IC);
    float* db0 = make_f32(h, OC);
    bf16 *y[2], *dx[2];
    float *dW[2], *db[2];
    int before = tuned.gemm_tuned->n;  // the copy shares ctx's plans
    for (int t = 0; t < 2; t++) {
        cuda_check(cudaMalloc(&y[t], (size_t)N * OC * sizeof(bf16)));
        cuda_check(cudaMalloc(&dx[t], (size_t)N * IC * sizeof(bf16)));
        cuda_check(cudaMalloc(&dW[t], (size_t)OC * IC * sizeof(float)));
        cuda_check(cudaMalloc(&db[t], OC * sizeof(float)));
        const GpuContext* c = t ? &tuned : ctx;
        cuda_check(cudaMemcpyAsync(dW[t], dW0, (size_t)OC * IC * sizeof(float), cudaMemcpyDeviceToDevice, c->stream));
        cuda_check(cudaMemcpyAsync(db[t], db0, OC * sizeof(float), cudaMemcpyDeviceToDevice, c->stream));
        linear_forward(y[t], d_x, d_W, d_b, N, IC, OC, c);
        linear_backward(dx[t], dW[t], db[t], scratch, d_dy, d_x, d_W, N, IC, OC, gelu ? d_u : NULL, c);
        cuda_check(cudaStreamSynchronize(c->stream));
    }
    int same = same_bits(y[0], y[1], (size_t)N * OC * sizeof(bf16)) && same_bits(dx[0], dx[1], (size_t)N * IC * sizeof(bf16)) &&
               same_bits(dW[0], dW[1], (size_t)OC * IC * sizeof(float)) && same_bits(db[0], db[1], OC * sizeof(float));
    printf("linear    N=%5d IC=%4d OC=%4d%s, GEMMs tuned: %d new tuned plans, outputs bitwise as untuned: %s\n", N, IC,
           OC, gelu ? " (dx through GELU')" : "", tuned.gemm_tuned->n - before, same ? "yes" : "no");
    EXPECT(same, "linear N=%d IC=%d OC=%d: tuned GEMMs change the outputs", N, IC, OC);
    EXPECT(tuned.gemm_tuned->n - before == 3, "linear N=%d IC=%d OC=%d: %d tuned plans, expected 3 (forward, dx, dW)",
           N, IC, OC, tuned.gemm_tuned->n - before);
    for (int t = 0; t < 2; t++) {
        cuda_check(cudaFree(y[t])); cuda_check(cudaFree(dx[t])); cuda_check(cudaFree(dW[t])); cuda_check(cudaFree(db[t]));
    }
    bf16* bfs[] = {d_x, d_u, d_W, d_b, d_dy};
    for (bf16* p : bfs) cuda_check(cudaFree(p));
    cuda_check(cudaFree(dW0)); cuda_check(cudaFree(db0));
}

// Two contexts keep their tuned plans apart: a shape that ctx has tuned is tuned again on a context
// built apart, into that context's own table, and ctx's table is left as it was (with plans shared
// between contexts, the second would find the shape tuned and add none).
static void test_tuned_per_context(const GpuContext* ctx) {
    int N = 513, IC = 96, OC = 776, ctx_before = ctx->gemm_tuned->n;
    EXPECT(ctx_before > 0, "tuned per context: ctx has no tuned plans to start from (run after test_linear_tuned)");
    GpuContext other;
    gpu_context_build(&other, ctx->device);
    other.gemm_tune = 1;
    std::vector<double> h;
    bf16* d_x = make_bf16(h, (size_t)N * IC, -1.0, 1.0);
    bf16* d_W = make_bf16(h, (size_t)OC * IC, -0.1, 0.1);
    bf16* d_b = make_bf16(h, OC, -0.1, 0.1);
    bf16* y;
    cuda_check(cudaMalloc(&y, (size_t)N * OC * sizeof(bf16)));
    linear_forward(y, d_x, d_W, d_b, N, IC, OC, &other);  // one GEMM, of a shape test_linear_tuned tuned on ctx
    cuda_check(cudaStreamSynchronize(other.stream));
    printf("tuned per context: ctx %d plans (%d before), another context %d\n", ctx->gemm_tuned->n, ctx_before,
           other.gemm_tuned->n);
    EXPECT(other.gemm_tuned != ctx->gemm_tuned, "tuned per context: two contexts share one table");
    EXPECT(other.gemm_tuned->n == 1, "tuned per context: the other context has %d tuned plans, expected 1",
           other.gemm_tuned->n);
    EXPECT(ctx->gemm_tuned->n == ctx_before, "tuned per context: ctx went from %d to %d tuned plans", ctx_before,
           ctx->gemm_tuned->n);
    cuda_check(cudaFree(y)); cuda_check(cudaFree(d_x)); cuda_check(cudaFree(d_W)); cuda_check(cudaFree(d_b));
    gpu_context_free(&other);
    EXPECT(other.gemm_tuned == NULL, "tuned per context: gpu_context_free leaves the table pointer set");
}

int main(void) {
    test_require_cuda("test_layers");
    GpuContext ctx;
    gpu_context_build(&ctx, 0);
    size_t scratch_floats = (size_t)LN_BWD_BLOCKS * 3 * LN_MAX_C;
    if (scratch_floats < (size_t)COLUMN_SUMS_CHUNKS * 4096) scratch_floats = (size_t)COLUMN_SUMS_CHUNKS * 4096;
    float* scratch;
    cuda_check(cudaMalloc(&scratch, scratch_floats * sizeof(float)));
    const int ln_cases[][2] = {{1, 8}, {7, 128}, {1003, 200}, {517, 768}, {4099, 768}, {300, 1600}, {64, 2048}};
    for (int with_sum = 0; with_sum < 2; with_sum++)
        for (const auto& c : ln_cases) test_layernorm(c[0], c[1], with_sum, scratch, &ctx);
    const int lin_cases[][3] = {{1, 64, 8}, {7, 64, 24}, {513, 96, 776}, {1100, 128, 3072}, {64, 200, 4096}};
    for (const auto& c : lin_cases) test_linear_backward(c[0], c[1], c[2], 0, scratch, &ctx);
    const int gelu_cases[][3] = {{7, 64, 24}, {1100, 3072, 768}, {64, 4096, 200}};  // IC = the GELU's width
    for (const auto& c : gelu_cases) test_linear_backward(c[0], c[1], c[2], 1, scratch, &ctx);
    test_tune_pick();
    const int tune_cases[][4] = {{4096, 768, 2304, 0}, {4096, 3072, 768, 1}, {513, 96, 776, 0}};
    for (const auto& c : tune_cases) test_linear_tuned(c[0], c[1], c[2], c[3], scratch, &ctx);
    test_tuned_per_context(&ctx);
    cuda_check(cudaFree(scratch));
    gpu_context_free(&ctx);
    return test_summary("test_layers");
}
