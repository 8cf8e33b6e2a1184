// test_layers.cu: GPU test of the layers of both families (llmc/layers/) against the CPU reference
// (dev/ref/ref_layers.h, built in double): GPT-2's (LayerNorm, linear, GELU, the tuned GEMMs) in the
// namespace gpt2_layers, the Llama-style ones (RMSNorm, SwiGLU, RoPE) in llama_layers, each with its
// own helpers and tolerances; main runs the one, then the other, on one GPU context.
//
// GPT-2's layers: the row and column kernels of llmc/layers/layernorm.cuh and llmc/layers/linear.cuh
// against the fp64 CPU reference (dev/ref/ref_layers.h), at widths the model does not reach in
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
//
// The Llama-style layers: their kernels against the CPU reference
// (dev/ref/ref_layers.h, built in double: the oracle's own rounding stays far below every
// tolerance here), forward and backward, at awkward sizes:
//   llmc/layers/rmsnorm.cuh: out, rstd, dx ACCUMULATED onto a non-zero dinp, dw ACCUMULATED onto non-zero
//     values; the residual form (r = bf16(a + b) exact, also in place); N = 1, N not a multiple of the
//     8 rows of a block, N above the 2048 rows that the backward's blocks cover at once, C = 8 and
//     C = 8·k not a power of two (partial lane groups), C = 2048, x small enough for eps to matter.
//   llmc/layers/swiglu.cuh: h, then d(gate|up) (also in place, dgateup = gateup); F = 8 .. 8192, gate up to
//     ±100 (sigmoid saturated: no NaN).
//   llmc/layers/rope.cuh: the cos/sin table against double; q and k rotated, v and position 0 bitwise
//     untouched; the backward against the reference's; backward(forward(x)) = x to two bf16
//     roundings; hs = 64 and 128, NKV = 1, 2 and NH, T up to 4096 at θ = 5e5.
// Every kernel runs twice on the same inputs and must give identical bits. Outputs are poisoned (NaN)
// before each run, so an element never written fails.
//
// Tolerances, per element (|got − ref| ≤ rtol·|ref| + atol), the worst ratio printed with where it is:
// - bf16 outputs: rtol = 2^-8, bf16's unit roundoff (8 significant bits, round to nearest): the kernels
//   compute in fp32 and round once, which alone errs by up to 2^-8·|ref|. atol = 1e-4·max|ref| covers
//   the fp32 arithmetic before that rounding (~1e-6 of the magnitudes involved, which are ≤ ~max|ref|
//   here: 100× margin; still 40× below one bf16 rounding at the largest values). A wrong index or
//   formula errs by O(|ref|). A worst ratio just under 1 is expected: the rounding alone reaches
//   2^-8/(1 + 2^-8) ≈ 0.996 of 2^-8·|ref| for values just above a power of two, and |got − ref| ≤
//   2^-8·|ref| + (1 + 2^-8)·(fp32 error) always holds, so atol is the margin.
// - rstd (fp32): rtol 1e-5: a lane sums ≤ 64 squares, then 5 tree levels (≤ 4.1e-6 relative), then
//   rsqrtf (2 ulp): ≤ 2.3e-6.
// - dw (fp32 column sums of ≤ 4099 rows: per lane, 8 warps, then 256 block partials in order):
//   rtol 1e-4, atol 1e-4·max|ref| (rounding ~1e-6 of the partial sums: GPT-2's 1e-4 for LayerNorm, above).
// - RoPE: rtol 2^-8, atol 4e-6·max|x|: cos and sin are fp32 roundings of double values (≤ 3e-8) and a
//   rotated element is two products and a sum in fp32 (≤ 3 · 6e-8 relative), ≤ 5e-7·max|x| before the
//   bf16 rounding: 8× margin. Angles computed in fp32 would be off by up to 1.2e-4 rad at t = 4095 and
//   fail it. The table itself: rtol 2^-23 (one fp32 ulp: device and host double pow, sin, cos may
//   differ in their last bits, which can move a rounding tie), atol 1e-11 (a few double ulps of an
//   angle up to 4096 rad, seen where cos or sin crosses 0). Inverse: per pair ‖got − x‖ ≤
//   2^-8·(2 + 2^-8)·‖x‖ + 2·atol (two bf16 roundings; a rotation keeps the norm of an error).
#define REF_DOUBLE
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <vector>
#include "../../ref/ref_layers.h"
#include "../../../llmc/layers/layernorm.cuh"
#include "../../../llmc/layers/linear.cuh"
#include "../../../llmc/layers/rmsnorm.cuh"
#include "../../../llmc/layers/swiglu.cuh"
#include "../../../llmc/layers/rope.cuh"
#include "../gpu_testing.cuh"
#include "../testing.h"

// --- GPT-2's layers: LayerNorm, linear (with the GELU epilogue), the tuned GEMMs ----------------------
namespace gpt2_layers {


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
// the layer below, llmc/model/model.cuh); both runs do, and the repeat must match bitwise, ds included.
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
    ref_layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    // the backward reference takes the GPU's fp32 statistics, so that dx tests the backward alone
    std::vector<double> gmean = get_f32(d_mean, N), grstd = get_f32(d_rstd, N);
    std::vector<double> dinp = dinp0, dw = dw0, db = db0;
    ref_layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), gmean.data(), grstd.data(),
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
    ref_layernorm_forward(out.data(), mean.data(), rstd.data(), r.data(), w.data(), b.data(), N, C);
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
    ref_matmul_backward(dx.data(), dW.data(), db.data(), dy.data(), x.data(), W.data(), N, IC, OC);
    if (gelu) {
        std::vector<double> du((size_t)N * IC, 0.0);
        ref_gelu_backward(du.data(), dx.data(), u.data(), du.size());
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

// every case of this family's layers, on ctx
static void run(GpuContext& ctx) {
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
}

}  // namespace gpt2_layers

// --- the Llama-style layers: RMSNorm, SwiGLU, RoPE (their own tolerances, below) -------------------
#undef TOL_BF16
namespace llama_layers {


#define TOL_BF16 (1.0 / 256)
#define ATOL_BF16 1e-4   // × max|ref|
#define TOL_RSTD 1e-5
#define TOL_DW 1e-4      // rtol, and × max|ref| as atol
#define ATOL_ROPE 4e-6   // × max|x|
#define TOL_TABLE (1.0 / 8388608)  // 2^-23
#define ATOL_TABLE 1e-11
#define ROPE_MAX_T 4096  // every case's table is built for this T and used at its own T <= it

typedef std::vector<double> Vec;

static uint64_t rng_state = 20240801;
static double uniform(double lo, double hi) {
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + (hi - lo) * (double)(rng_state >> 11) / 9007199254740992.0;
}
static Vec random_vec(size_t n, double lo, double hi) {
    Vec v(n);
    for (size_t i = 0; i < n; i++) v[i] = uniform(lo, hi);
    return v;
}

// --- device buffers: uploads round host values to bf16 in place, so the reference reads what the GPU reads
static bf16* upload_bf16(Vec& host) {
    std::vector<bf16> h(host.size());
    for (size_t i = 0; i < host.size(); i++) { h[i] = __float2bfloat16((float)host[i]); host[i] = __bfloat162float(h[i]); }
    bf16* d;
    cuda_check(cudaMalloc(&d, h.size() * sizeof(bf16)));
    cuda_check(cudaMemcpy(d, h.data(), h.size() * sizeof(bf16), cudaMemcpyHostToDevice));
    cuda_check(cudaDeviceSynchronize());  // the kernels' stream is non-blocking: it does not wait for this copy
    return d;
}
static float* upload_f32(Vec& host) {
    std::vector<float> h(host.size());
    for (size_t i = 0; i < host.size(); i++) { h[i] = (float)host[i]; host[i] = h[i]; }
    float* d;
    cuda_check(cudaMalloc(&d, h.size() * sizeof(float)));
    cuda_check(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
    cuda_check(cudaDeviceSynchronize());
    return d;
}
// a buffer of `bytes` filled with 0xff: NaN as bf16 and as fp32
static void* poisoned(size_t bytes) {
    void* d;
    cuda_check(cudaMalloc(&d, bytes));
    cuda_check(cudaMemset(d, 0xff, bytes));
    cuda_check(cudaDeviceSynchronize());
    return d;
}
static void* duplicate(const void* src, size_t bytes) {
    void* d;
    cuda_check(cudaMalloc(&d, bytes));
    cuda_check(cudaMemcpy(d, src, bytes, cudaMemcpyDeviceToDevice));
    cuda_check(cudaDeviceSynchronize());
    return d;
}
static Vec get_bf16(const bf16* d, size_t n) {
    std::vector<bf16> h(n);
    cuda_check(cudaDeviceSynchronize());  // the kernels ran on the non-blocking stream
    cuda_check(cudaMemcpy(h.data(), d, n * sizeof(bf16), cudaMemcpyDeviceToHost));
    Vec out(n);
    for (size_t i = 0; i < n; i++) out[i] = __bfloat162float(h[i]);
    return out;
}
static Vec get_f32(const float* d, size_t n) {
    std::vector<float> h(n);
    cuda_check(cudaDeviceSynchronize());
    cuda_check(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return Vec(h.begin(), h.end());
}
static int same_bits(const void* a, const void* b, size_t bytes) {
    std::vector<char> ha(bytes), hb(bytes);
    cuda_check(cudaDeviceSynchronize());
    cuda_check(cudaMemcpy(ha.data(), a, bytes, cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(hb.data(), b, bytes, cudaMemcpyDeviceToHost));
    return memcmp(ha.data(), hb.data(), bytes) == 0;
}
static double max_abs(const Vec& v) {
    double m = 0;
    for (double x : v) m = fmax(m, fabs(x));
    return m;
}

// --- comparison ---------------------------------------------------------------------------------

// Prints `label what: worst W of tol at [row, col], max abs E, rel L2 R` (width = row length) and counts
// a check: every element within rtol·|ref| + atol, none non-finite.
static void check_close(const char* label, const char* what, const Vec& got, const Vec& ref, double rtol, double atol,
                        size_t width) {
    double worst = 0, max_err = 0, num = 0, den = 0;
    size_t where = 0, nonfinite = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        double d = fabs(got[i] - ref[i]), bound = rtol * fabs(ref[i]) + atol;
        double ratio = !isfinite(got[i]) ? INFINITY : bound > 0 ? d / bound : d > 0 ? INFINITY : 0;
        if (!isfinite(got[i])) nonfinite++;
        else { max_err = fmax(max_err, d); num += d * d; }
        den += ref[i] * ref[i];
        if (ratio > worst) { worst = ratio; where = i; }
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    printf("  %-30s %-9s worst %5.2f of tol at [%zu, %zu]  max abs %.1e  rel L2 %.1e%s\n", label, what, worst,
           where / width, where % width, max_err, rel, nonfinite ? "  NON-FINITE" : "");
    EXPECT(worst <= 1.0 && nonfinite == 0,
           "%s %s: |got - ref| reaches %.2f x (%.0e |ref| + %.1e) at [%zu, %zu] (got %.6e, ref %.6e), %zu non-finite",
           label, what, worst, rtol, atol, where / width, where % width, got[where], ref[where], nonfinite);
}

static void check_bitwise(const char* label, const char* what, int same) {
    printf("  %-30s %-9s %s\n", label, what, same ? "bitwise equal" : "DIFFERENT");
    EXPECT(same, "%s %s: two runs on the same inputs differ", label, what);
}

// --- RMSNorm ------------------------------------------------------------------------------------

static void test_rmsnorm(int N, int C, double eps, double xscale, float* scratch, const GpuContext* ctx) {
    char label[64];
    snprintf(label, sizeof label, "rmsnorm N=%d C=%d eps=%.0e%s", N, C, eps, xscale < 1 ? " small x" : "");
    size_t n = (size_t)N * C;
    Vec x = random_vec(n, -2 * xscale, 2 * xscale), w = random_vec(C, 0.5, 1.5), dout = random_vec(n, -1, 1);
    Vec dinp0 = random_vec(n, -0.5, 0.5), dw0 = random_vec(C, -1, 1), y = random_vec(n, -2, 2);
    bf16 *d_x = upload_bf16(x), *d_w = upload_bf16(w), *d_dout = upload_bf16(dout), *d_dinp = upload_bf16(dinp0);
    bf16* d_y = upload_bf16(y);
    float* d_dw = upload_f32(dw0);
    bf16* d_dinp2 = (bf16*)duplicate(d_dinp, n * sizeof(bf16));
    float* d_dw2 = (float*)duplicate(d_dw, C * sizeof(float));
    bf16* d_out = (bf16*)poisoned(n * sizeof(bf16));
    float* d_rstd = (float*)poisoned(N * sizeof(float));

    rmsnorm_forward(d_out, d_rstd, d_x, d_w, N, C, (float)eps, ctx);
    rmsnorm_backward(d_dinp, d_dw, scratch, d_dout, d_x, d_rstd, d_w, N, C, ctx);
    rmsnorm_backward(d_dinp2, d_dw2, scratch, d_dout, d_x, d_rstd, d_w, N, C, ctx);

    Vec out(n), rstd(N);
    ref_rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
    // the backward reference takes the GPU's rstd, so that dx and dw test the backward alone
    Vec grstd = get_f32(d_rstd, N), dinp = dinp0, dw = dw0;
    ref_rmsnorm_backward(dinp.data(), dw.data(), dout.data(), x.data(), grstd.data(), w.data(), N, C);
    check_close(label, "out", get_bf16(d_out, n), out, TOL_BF16, ATOL_BF16 * max_abs(out), C);
    check_close(label, "rstd", grstd, rstd, TOL_RSTD, 0, 1);
    check_close(label, "dx", get_bf16(d_dinp, n), dinp, TOL_BF16, ATOL_BF16 * max_abs(dinp), C);
    check_close(label, "dw", get_f32(d_dw, C), dw, TOL_DW, TOL_DW * max_abs(dw), C);
    check_bitwise(label, "backward", same_bits(d_dinp, d_dinp2, n * sizeof(bf16)) &&
                                     same_bits(d_dw, d_dw2, C * sizeof(float)));

    // the residual form, r = bf16(x + y) stored and normalized as rounded; then in place (resid_out = a)
    bf16* d_r = (bf16*)poisoned(n * sizeof(bf16));
    cuda_check(cudaMemset(d_out, 0xff, n * sizeof(bf16)));
    cuda_check(cudaDeviceSynchronize());
    residual_rmsnorm_forward(d_r, d_out, d_rstd, d_x, d_y, d_w, N, C, (float)eps, ctx);
    Vec r(n);
    for (size_t i = 0; i < n; i++) r[i] = __bfloat162float(__float2bfloat16((float)(x[i] + y[i])));
    ref_rmsnorm_forward(out.data(), rstd.data(), r.data(), w.data(), N, C, eps);
    check_close(label, "resid r", get_bf16(d_r, n), r, 0, 0, C);  // exact: one fp32 add of two bf16, rounded once
    check_close(label, "resid out", get_bf16(d_out, n), out, TOL_BF16, ATOL_BF16 * max_abs(out), C);
    bf16* d_a = (bf16*)duplicate(d_x, n * sizeof(bf16));
    bf16* d_out2 = (bf16*)poisoned(n * sizeof(bf16));
    float* d_rstd2 = (float*)poisoned(N * sizeof(float));
    residual_rmsnorm_forward(d_a, d_out2, d_rstd2, d_a, d_y, d_w, N, C, (float)eps, ctx);
    check_bitwise(label, "in place", same_bits(d_a, d_r, n * sizeof(bf16)) && same_bits(d_out2, d_out, n * sizeof(bf16)) &&
                                     same_bits(d_rstd2, d_rstd, N * sizeof(float)));

    void* bufs[] = {d_x, d_w, d_dout, d_dinp, d_y, d_dw, d_dinp2, d_dw2, d_out, d_rstd, d_r, d_a, d_out2, d_rstd2};
    for (void* p : bufs) cuda_check(cudaFree(p));
}

// --- SwiGLU -------------------------------------------------------------------------------------

static void test_swiglu(int N, int F, double gate_range, const GpuContext* ctx) {
    char label[64];
    snprintf(label, sizeof label, "swiglu N=%d F=%d |gate|<%g", N, F, gate_range);
    size_t nh = (size_t)N * F, ng = 2 * nh;
    Vec gu(ng), dout = random_vec(nh, -1, 1);
    for (size_t i = 0; i < ng; i++) gu[i] = (i % (2 * F)) < (size_t)F ? uniform(-gate_range, gate_range) : uniform(-2, 2);
    bf16 *d_gu = upload_bf16(gu), *d_dout = upload_bf16(dout);
    bf16 *d_h = (bf16*)poisoned(nh * sizeof(bf16)), *d_h2 = (bf16*)poisoned(nh * sizeof(bf16));
    bf16 *d_dgu = (bf16*)poisoned(ng * sizeof(bf16)), *d_dgu2 = (bf16*)poisoned(ng * sizeof(bf16));
    bf16* d_inplace = (bf16*)duplicate(d_gu, ng * sizeof(bf16));

    swiglu_forward(d_h, d_gu, N, F, ctx);
    swiglu_forward(d_h2, d_gu, N, F, ctx);
    swiglu_backward(d_dgu, d_dout, d_gu, N, F, ctx);
    swiglu_backward(d_dgu2, d_dout, d_gu, N, F, ctx);
    swiglu_backward(d_inplace, d_dout, d_inplace, N, F, ctx);

    Vec h(nh), dgu(ng);
    ref_swiglu_forward(h.data(), gu.data(), N, F);
    ref_swiglu_backward(dgu.data(), dout.data(), gu.data(), N, F);
    check_close(label, "h", get_bf16(d_h, nh), h, TOL_BF16, ATOL_BF16 * max_abs(h), F);
    check_close(label, "dgate|up", get_bf16(d_dgu, ng), dgu, TOL_BF16, ATOL_BF16 * max_abs(dgu), 2 * F);
    check_bitwise(label, "repeat", same_bits(d_h, d_h2, nh * sizeof(bf16)) && same_bits(d_dgu, d_dgu2, ng * sizeof(bf16)));
    check_bitwise(label, "in place", same_bits(d_inplace, d_dgu, ng * sizeof(bf16)));
    void* bufs[] = {d_gu, d_dout, d_h, d_h2, d_dgu, d_dgu2, d_inplace};
    for (void* p : bufs) cuda_check(cudaFree(p));
}

// --- RoPE ---------------------------------------------------------------------------------------

static void test_rope(int B, int T, int NH, int NKV, int hs, double theta, const GpuContext* ctx) {
    char label[64];
    snprintf(label, sizeof label, "rope B=%d T=%d NH=%d NKV=%d hs=%d theta=%.0e", B, T, NH, NKV, hs, theta);
    int half = hs / 2, heads = NH + NKV, stride = (NH + 2 * NKV) * hs, N = B * T;
    size_t n = (size_t)N * stride, ntab = (size_t)ROPE_MAX_T * hs;

    float* d_table = (float*)poisoned(ntab * sizeof(float));
    rope_table_fill(d_table, ROPE_MAX_T, hs, theta, ctx);
    Vec table(ntab);
    for (int t = 0; t < ROPE_MAX_T; t++)
        for (int i = 0; i < half; i++) {
            double angle = t * pow(theta, -2.0 * i / hs);
            table[2 * ((size_t)t * half + i)] = cos(angle);
            table[2 * ((size_t)t * half + i) + 1] = sin(angle);
        }
    check_close(label, "table", get_f32(d_table, ntab), table, TOL_TABLE, ATOL_TABLE, hs);

    Vec x = random_vec(n, -2, 2), dy = random_vec(n, -1, 1);
    bf16 *d_qkv = upload_bf16(x), *d_dy = upload_bf16(dy);
    bf16 *d_qkv2 = (bf16*)duplicate(d_qkv, n * sizeof(bf16)), *d_dy2 = (bf16*)duplicate(d_dy, n * sizeof(bf16));
    rope_forward(d_qkv, d_table, B, T, NH, NKV, hs, ctx);
    rope_forward(d_qkv2, d_table, B, T, NH, NKV, hs, ctx);
    rope_backward(d_dy, d_table, B, T, NH, NKV, hs, ctx);
    rope_backward(d_dy2, d_table, B, T, NH, NKV, hs, ctx);

    double atol = ATOL_ROPE * max_abs(x);
    Vec y = x, dx = dy, got = get_bf16(d_qkv, n);
    ref_rope_forward(y.data(), y.data(), B, T, heads, hs, stride, theta);
    ref_rope_backward(dx.data(), dx.data(), B, T, heads, hs, stride, theta);
    check_close(label, "forward", got, y, TOL_BF16, atol, stride);
    check_close(label, "backward", get_bf16(d_dy, n), dx, TOL_BF16, ATOL_ROPE * max_abs(dy), stride);
    // the v heads, and every head at position 0 (cos 1, sin 0), come back bitwise as they went in
    size_t moved = 0;
    for (size_t i = 0; i < n; i++)
        if (((int)(i % stride) >= heads * hs || (i / stride) % T == 0) && got[i] != x[i]) moved++;
    printf("  %-30s %-9s %zu elements of v or of position 0 changed\n", label, "untouched", moved);
    EXPECT(moved == 0, "%s: %zu elements of the v heads or of position 0 changed", label, moved);
    check_bitwise(label, "repeat", same_bits(d_qkv, d_qkv2, n * sizeof(bf16)) && same_bits(d_dy, d_dy2, n * sizeof(bf16)));

    // the backward is the forward's inverse: rotate the rotated q, k back and compare each pair with x
    rope_backward(d_qkv, d_table, B, T, NH, NKV, hs, ctx);
    Vec back = get_bf16(d_qkv, n);
    double worst = 0;
    size_t where = 0;
    for (size_t row = 0; row < (size_t)N; row++)
        for (int h = 0; h < heads; h++)
            for (int i = 0; i < half; i++) {
                size_t a = row * stride + (size_t)h * hs + i, b = a + half;
                double err = hypot(back[a] - x[a], back[b] - x[b]);
                double bound = (2.0 + 1.0 / 256) / 256 * hypot(x[a], x[b]) + 2 * atol;
                double ratio = isfinite(err) ? err / bound : INFINITY;
                if (ratio > worst) { worst = ratio; where = a; }
            }
    printf("  %-30s %-9s worst %5.2f of tol at [%zu, %zu]\n", label, "inverse", worst, where / stride, where % stride);
    EXPECT(worst <= 1.0, "%s: backward(forward(x)) differs from x by %.2f x the bound at [%zu, %zu]", label, worst,
           where / stride, where % stride);
    void* bufs[] = {d_table, d_qkv, d_dy, d_qkv2, d_dy2};
    for (void* p : bufs) cuda_check(cudaFree(p));
}

// every case of this family's layers, on ctx
static void run(GpuContext& ctx) {
    float* scratch;
    cuda_check(cudaMalloc(&scratch, (size_t)RMS_BWD_BLOCKS * RMS_MAX_C * sizeof(float)));

    typedef struct { int N, C; double eps, xscale; } RmsCase;
    const RmsCase rms[] = {{1, 8, 1e-5, 1}, {7, 128, 1e-5, 1}, {1003, 200, 1e-5, 1}, {517, 768, 1e-6, 1},
                           {4099, 768, 1e-5, 1}, {300, 1600, 1e-5, 1}, {64, 2048, 1e-5, 1}, {33, 2040, 1e-5, 1},
                           {100, 264, 1e-6, 1e-3}};  // mean(x²) ≈ 1.3e-6: eps changes rstd by ~1.6x
    for (const RmsCase& c : rms) test_rmsnorm(c.N, c.C, c.eps, c.xscale, scratch, &ctx);

    typedef struct { int N, F; double gate_range; } SwigluCase;
    const SwigluCase sw[] = {{1, 8, 6}, {7, 24, 6}, {1003, 200, 6}, {257, 1376, 6}, {64, 5632, 6}, {300, 8192, 6},
                             {33, 1000, 100}};
    for (const SwigluCase& c : sw) test_swiglu(c.N, c.F, c.gate_range, &ctx);

    typedef struct { int B, T, NH, NKV, hs; double theta; } RopeCase;
    const RopeCase rope[] = {{1, 1, 1, 1, 64, 1e4},   {2, 7, 4, 1, 64, 1e4},     {3, 100, 4, 2, 128, 1e4},
                             {2, 257, 6, 6, 64, 5e5}, {1, 1000, 3, 3, 128, 1e4}, {2, 4096, 4, 1, 64, 5e5},
                             {1, 4096, 8, 2, 128, 5e5}};
    for (const RopeCase& c : rope) test_rope(c.B, c.T, c.NH, c.NKV, c.hs, c.theta, &ctx);

    cuda_check(cudaFree(scratch));
}

}  // namespace llama_layers

int main(void) {
    test_require_cuda("test_layers");
    setvbuf(stdout, NULL, _IOLBF, 0);
    GpuContext ctx;
    gpu_context_build(&ctx, 0);
    gpt2_layers::run(ctx);
    llama_layers::run(ctx);
    gpu_context_free(&ctx);
    return test_summary("test_layers");
}
