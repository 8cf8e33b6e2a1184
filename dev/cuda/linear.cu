// dev/cuda/linear.cu: the trainer's linear layers (llmc/layers/linear.cuh) timed next to plain cuBLASLt GEMMs
// of the same shapes and FLOPs: the price of what linear.cuh adds to the GEMMs (the bias in the forward
// epilogue, the GELU backward in the dx epilogue, the bias gradient kernel). One transformer block's
// four layers at GPT-2's shapes, N = B·T rows:
//   qkv     C -> 3C      attproj C -> C      fc  C -> 4C      fcproj 4C -> C (its dx through GELU')
// Columns: forward (ours: y = x·Wᵀ + b; plain: y = x·Wᵀ), backward (ours: dx, dW += dyᵀ·x, db; plain: the
// two GEMMs dx = dy·W, dW += dyᵀ·x), TF/s over the layer's 2·N·IC·OC (fwd) and 4·N·IC·OC (bwd) FLOPs.
// The layers' correctness is tested against the CPU reference by dev/test/layers/test_layers.cu.
// Only the fc layer's bias gradient is in its layer's backward here, as in the trainer (llmc/model/model.cuh):
// the LayerNorm backward adds up the attention and fc projections' (timed by dev/cuda/layernorm.cu),
// the attention backward the QKV layer's (dev/cuda/attention.cu).
// Then, at C = 768: the bias gradient in the dW GEMM's epilogue, which the trainer does not take
// (bench_bias_epilogue); the fc layer's bias gradient in the fc projection's dx GEMM, in bf16
// (bench_dgelu_bgrad); and the fc layer's GELU as the trainer runs it with and without -recompute:
// a kernel after the GEMM, or in the GEMM's epilogue (bench_gelu_fusion; dev/cuda/README.md says why
// both). dev/cuda/gemm_algos.cu tries cuBLASLt's other algorithms for the GEMMs.
//   build/dev/linear              N = 65536 (B = 64, T = 1024), C = 768 (d12) and C = 1600 (d48)
//   build/dev/linear N C          one shape
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <vector>
#include "../../llmc/layers/linear.cuh"
#include "../../llmc/layers/gelu.cuh"
#include "fill.cuh"
#include "timing.cuh"

// One layer IC -> OC over N rows; gelu: its input came out of a GELU (dx through GELU'); bias_grad: its
// backward computes the bias gradient (else the LayerNorm backward does). Adds its times to the totals
// t[4] (ours fwd, plain fwd, ours bwd, plain bwd).
static void bench_layer(const char* name, int N, int IC, int OC, int gelu, int bias_grad, float t[4],
                        const GpuContext* ctx) {
    bf16* x = alloc_filled((size_t)N * IC, 1.0f, 1, ctx->stream);
    bf16* u = alloc_filled((size_t)N * IC, 1.0f, 2, ctx->stream);  // the GELU's input, for gelu layers
    bf16* W = alloc_filled((size_t)OC * IC, 0.02f, 3, ctx->stream);
    bf16* b = alloc_filled(OC, 0.02f, 4, ctx->stream);
    bf16* dy = alloc_filled((size_t)N * OC, 0.01f, 5, ctx->stream);
    bf16 *y, *dx;
    float *dW, *db, *scratch;
    cuda_check(cudaMalloc(&y, (size_t)N * OC * sizeof(bf16)));
    cuda_check(cudaMalloc(&dx, (size_t)N * IC * sizeof(bf16)));
    cuda_check(cudaMalloc(&dW, (size_t)OC * IC * sizeof(float)));
    cuda_check(cudaMalloc(&db, OC * sizeof(float)));
    cuda_check(cudaMalloc(&scratch, (size_t)COLUMN_SUMS_CHUNKS * OC * sizeof(float)));
    cuda_check(cudaMemsetAsync(dW, 0, (size_t)OC * IC * sizeof(float), ctx->stream));
    cuda_check(cudaMemsetAsync(db, 0, OC * sizeof(float), ctx->stream));
    const int reps = 20;
    float f_ours = time_ms([&] { linear_forward(y, x, W, b, N, IC, OC, ctx); }, ctx->stream, reps);
    float f_plain = time_ms([&] { matmul(ctx, y, CUDA_R_16BF, OC, x, IC, 0, W, IC, 1, N, OC, IC, 1.0f, 0.0f); },
                            ctx->stream, reps);
    float b_ours = time_ms([&] {
        linear_backward(dx, dW, bias_grad ? db : NULL, scratch, dy, x, W, N, IC, OC, gelu ? u : NULL, ctx);
    }, ctx->stream, reps);
    float b_plain = time_ms([&] {
        matmul(ctx, dx, CUDA_R_16BF, IC, dy, OC, 0, W, IC, 0, N, IC, OC, 1.0f, 0.0f);
        matmul(ctx, dW, CUDA_R_32F, IC, dy, OC, 1, x, IC, 0, OC, IC, N, 1.0f, 1.0f);
    }, ctx->stream, reps);
    double F = 2.0 * N * (double)IC * OC;
    printf("%-8s %5d -> %5d | %7.3f %7.3f %5.2fx | %7.3f %7.3f %5.2fx | %4.0f %4.0f TF/s\n", name, IC, OC, f_ours,
           f_plain, f_ours / f_plain, b_ours, b_plain, b_ours / b_plain, F / f_ours * 1e-9, 2 * F / b_ours * 1e-9);
    t[0] += f_ours; t[1] += f_plain; t[2] += b_ours; t[3] += b_plain;
    cuda_check(cudaFree(x)); cuda_check(cudaFree(u)); cuda_check(cudaFree(W)); cuda_check(cudaFree(b));
    cuda_check(cudaFree(dy)); cuda_check(cudaFree(y)); cuda_check(cudaFree(dx)); cuda_check(cudaFree(dW));
    cuda_check(cudaFree(db)); cuda_check(cudaFree(scratch));
}

// --- the MLP's GELU in the fc GEMM's epilogue (cuBLASLt GELU_AUX_BIAS), against the GELU kernel --------

static std::vector<bf16> download(const bf16* d, size_t n) {
    std::vector<bf16> h(n);
    cuda_check(cudaMemcpy(h.data(), d, n * sizeof(bf16), cudaMemcpyDeviceToHost));
    return h;
}

// fc forward, x (N, C) -> u (N, 4C) -> GELU(u): the GEMM with the bias, then the GELU kernel
// (llmc/layers/gelu.cuh; the trainer at -recompute 1), against one GEMM that stores u and GELU(u)
// (linear_forward_gelu; the trainer at -recompute 0). Prints both times, whether the two u are
// bitwise equal, how many GELU(u) differ and by how much at most (relative to max |GELU(u)|), and whether
// two runs of the fused GEMM give the same bits.
static void bench_gelu_fusion(int N, int C, const GpuContext* ctx) {
    const int reps = 20, H = 4 * C;
    size_t n = (size_t)N * H;
    bf16* x = alloc_filled((size_t)N * C, 1.0f, 11, ctx->stream);
    bf16* W = alloc_filled((size_t)H * C, 0.02f, 12, ctx->stream);
    bf16* b = alloc_filled(H, 0.02f, 13, ctx->stream);
    bf16 *u, *g, *u2, *g2;
    cuda_check(cudaMalloc(&u, n * sizeof(bf16))); cuda_check(cudaMalloc(&g, n * sizeof(bf16)));
    cuda_check(cudaMalloc(&u2, n * sizeof(bf16))); cuda_check(cudaMalloc(&g2, n * sizeof(bf16)));
    float now = time_ms([&] { linear_forward(u, x, W, b, N, C, H, ctx); gelu_forward(g, u, n, ctx); }, ctx->stream, reps);
    auto fused = [&] { linear_forward_gelu(g2, u2, x, W, b, N, C, H, ctx); };
    float cand = time_ms(fused, ctx->stream, reps);
    std::vector<bf16> hu = download(u, n), hu2 = download(u2, n), hg = download(g, n), hg2 = download(g2, n);
    fused();
    std::vector<bf16> again = download(g2, n);
    size_t differ = 0;
    double emax = 0, gmax = 0;
    for (size_t i = 0; i < n; i++) {
        double a = (float)hg[i], c = (float)hg2[i];
        differ += a != c;
        emax = fmax(emax, fabs(a - c)); gmax = fmax(gmax, fabs(a));
    }
    printf("\nN = %d, C = %d: fc forward and GELU | ms: GEMM + bias, GELU kernel %.3f; GELU_AUX_BIAS %.3f (%+.3f)\n",
           N, C, now, cand, cand - now);
    printf("  u bitwise equal: %s; GELU(u) differs in %.1f%% of elements, by at most %.2e of max |GELU(u)|; "
           "two fused runs bitwise equal: %s\n", memcmp(hu.data(), hu2.data(), n * sizeof(bf16)) ? "no" : "yes",
           100.0 * differ / n, gmax > 0 ? emax / gmax : emax, memcmp(hg2.data(), again.data(), n * sizeof(bf16)) ? "no" : "yes");
    bf16* bufs[] = {x, W, b, u, g, u2, g2};
    for (bf16* q : bufs) cuda_check(cudaFree(q));
}

// --- the bias gradient in the dW GEMM's epilogue (cuBLASLt BGRADB), against the bias kernel ---

// max |a - b| over max |a|, n fp32 values on the GPU
static double rel_diff(const float* a, const float* b, int n) {
    std::vector<float> ha(n), hb(n);
    cuda_check(cudaMemcpy(ha.data(), a, n * sizeof(float), cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(hb.data(), b, n * sizeof(float), cudaMemcpyDeviceToHost));
    double e = 0, m = 0;
    for (int i = 0; i < n; i++) { e = fmax(e, fabs((double)ha[i] - hb[i])); m = fmax(m, fabs((double)ha[i])); }
    return m > 0 ? e / m : e;
}

// One layer: dW += dyᵀ·x alone, the bias kernel alone, and dW's GEMM with the bias gradient in its
// epilogue (MATMUL_EPILOGUE_BGRAD_A), whose sum is checked against the kernel's on the same dy.
static void bench_bias_layer(const char* name, int N, int IC, int OC, const GpuContext* ctx) {
    bf16* x = alloc_filled((size_t)N * IC, 1.0f, 21, ctx->stream);
    bf16* dy = alloc_filled((size_t)N * OC, 0.01f, 24, ctx->stream);
    float *dW, *db, *db_ep, *scratch;
    cuda_check(cudaMalloc(&dW, (size_t)OC * IC * sizeof(float)));
    cuda_check(cudaMalloc(&db, OC * sizeof(float))); cuda_check(cudaMalloc(&db_ep, OC * sizeof(float)));
    cuda_check(cudaMalloc(&scratch, (size_t)COLUMN_SUMS_CHUNKS * OC * sizeof(float)));
    cuda_check(cudaMemsetAsync(dW, 0, (size_t)OC * IC * sizeof(float), ctx->stream));
    cuda_check(cudaMemsetAsync(db, 0, OC * sizeof(float), ctx->stream));
    const int reps = 20;
    float gemm = time_ms([&] { matmul(ctx, dW, CUDA_R_32F, IC, dy, OC, 1, x, IC, 0, OC, IC, N, 1.0f, 1.0f); },
                         ctx->stream, reps);
    float kern = time_ms([&] { column_sums_bf16(db, dy, N, OC, scratch, ctx->stream); }, ctx->stream, reps);
    MatmulEpilogue ep = {MATMUL_EPILOGUE_BGRAD_A, db_ep, NULL, 0};
    float fused = time_ms([&] { matmul_ex(ctx, dW, CUDA_R_32F, IC, dy, OC, 1, x, IC, 0, OC, IC, N, 1.0f, 1.0f, &ep); },
                          ctx->stream, reps);
    // the kernel adds into db over the timing runs: one more from zero, to compare
    cuda_check(cudaMemsetAsync(db, 0, OC * sizeof(float), ctx->stream));
    column_sums_bf16(db, dy, N, OC, scratch, ctx->stream);
    printf("%-8s %5d -> %5d | dW %.3f + bias kernel %.3f = %.3f | dW with BGRAD_A %.3f (%+.3f) | db differs by %.1e of max |db|\n",
           name, IC, OC, gemm, kern, gemm + kern, fused, fused - gemm - kern, rel_diff(db, db_ep, OC));
    cuda_check(cudaFree(x)); cuda_check(cudaFree(dy));
    float* fbufs[] = {dW, db, db_ep, scratch};
    for (float* q : fbufs) cuda_check(cudaFree(q));
}

static void bench_bias_epilogue(int N, int C, const GpuContext* ctx) {
    printf("\nN = %d, C = %d: the bias gradient, ms\n", N, C);
    bench_bias_layer("qkv", N, C, 3 * C, ctx);
    bench_bias_layer("attproj", N, C, C, ctx);
    bench_bias_layer("fc", N, C, 4 * C, ctx);
    bench_bias_layer("fcproj", N, 4 * C, C, ctx);
}

// --- the fc layer's bias gradient in the fc projection's dx GEMM (cuBLASLt DGELU_BGRAD, bf16) ---------

// The fc projection's dx GEMM, dfch (N, 4C) = dy (N, C) · W ⊙ GELU'(u), then the bias kernel's fp32 sum
// of dfch's rows (the fc layer's bias gradient), against one GEMM whose epilogue also writes that sum,
// in bf16 (cuBLASLt 13 has no fp32 bias for DGELU_BGRAD). Prints the times, whether cuBLASLt has an
// algorithm at all, whether dfch is bitwise the DGELU GEMM's, the bias's difference from the kernel's
// sum (relative to its largest value; bf16 rounding alone is up to 2^-9) and whether two runs give
// the same bits.
static void bench_dgelu_bgrad(int N, int C, const GpuContext* ctx) {
    const int reps = 20, H = 4 * C;
    size_t n = (size_t)N * H;
    bf16* dy = alloc_filled((size_t)N * C, 0.01f, 31, ctx->stream);
    bf16* W = alloc_filled((size_t)C * H, 0.02f, 32, ctx->stream);
    bf16* u = alloc_filled(n, 1.0f, 33, ctx->stream);
    bf16 *dx, *dx2, *db16, *db16b;
    float *db, *scratch;
    cuda_check(cudaMalloc(&dx, n * sizeof(bf16))); cuda_check(cudaMalloc(&dx2, n * sizeof(bf16)));
    cuda_check(cudaMalloc(&db16, H * sizeof(bf16))); cuda_check(cudaMalloc(&db16b, H * sizeof(bf16)));
    cuda_check(cudaMalloc(&db, H * sizeof(float)));
    cuda_check(cudaMalloc(&scratch, (size_t)COLUMN_SUMS_CHUNKS * H * sizeof(float)));
    MatmulEpilogue dgelu = {MATMUL_EPILOGUE_DGELU, NULL, u, H};
    auto bias_kernel = [&] { column_sums_bf16(db, dx, N, H, scratch, ctx->stream); };
    float now = time_ms([&] {
        matmul_ex(ctx, dx, CUDA_R_16BF, H, dy, C, 0, W, H, 0, N, H, C, 1.0f, 0.0f, &dgelu);
        bias_kernel();
    }, ctx->stream, reps);
    MatmulPlan p;
    matmul_plan_describe(&p, CUDA_R_16BF, H, C, 0, H, 0, N, H, C, MATMUL_EPILOGUE_DGELU_BGRAD, H);
    cublasLtMatmulHeuristicResult_t heur;
    int found = matmul_plan_candidates(&p, ctx, 1, &heur);
    printf("\nN = %d, C = %d: the fc layer's bias gradient | ms: fc projection dx GEMM (DGELU) + bias kernel %.3f", N,
           C, now);
    if (!found) {
        printf("; DGELU_BGRAD with a bf16 bias: cuBLASLt has no algorithm\n");
    } else {
        p.algo = heur.algo;
        MatmulEpilogue ep = {MATMUL_EPILOGUE_DGELU_BGRAD, db16, u, H};
        float fused = time_ms([&] { matmul_plan_run(&p, ctx, dx2, dy, W, 1.0f, 0.0f, &ep); }, ctx->stream, reps);
        cuda_check(cudaMemsetAsync(db, 0, H * sizeof(float), ctx->stream));
        matmul_ex(ctx, dx, CUDA_R_16BF, H, dy, C, 0, W, H, 0, N, H, C, 1.0f, 0.0f, &dgelu);
        bias_kernel();
        std::vector<bf16> hdx = download(dx, n), hdx2 = download(dx2, n), hb1 = download(db16, H);
        MatmulEpilogue ep2 = {MATMUL_EPILOGUE_DGELU_BGRAD, db16b, u, H};
        matmul_plan_run(&p, ctx, dx2, dy, W, 1.0f, 0.0f, &ep2);
        std::vector<bf16> hb2 = download(db16b, H), hdx3 = download(dx2, n);
        std::vector<float> hdb(H);
        cuda_check(cudaMemcpy(hdb.data(), db, H * sizeof(float), cudaMemcpyDeviceToHost));
        double e = 0, m = 0;
        for (int i = 0; i < H; i++) {
            e = fmax(e, fabs((double)__bfloat162float(hb1[i]) - hdb[i]));
            m = fmax(m, fabs((double)hdb[i]));
        }
        printf("; DGELU_BGRAD (bf16 bias) %.3f (%+.3f)\n  dfch bitwise the DGELU GEMM's: %s; the bias differs from the "
               "kernel's fp32 sum by %.1e of its largest value; two runs bitwise equal: %s\n", fused, fused - now,
               memcmp(hdx.data(), hdx2.data(), n * sizeof(bf16)) ? "no" : "yes", m > 0 ? e / m : e,
               memcmp(hb1.data(), hb2.data(), H * sizeof(bf16)) || memcmp(hdx2.data(), hdx3.data(), n * sizeof(bf16))
                   ? "no" : "yes");
    }
    matmul_plan_free(&p);
    bf16* bufs[] = {dy, W, u, dx, dx2, db16, db16b};
    for (bf16* q : bufs) cuda_check(cudaFree(q));
    cuda_check(cudaFree(db)); cuda_check(cudaFree(scratch));
}

static void bench_block(int N, int C, const GpuContext* ctx) {
    printf("\nN = %d, C = %d            | fwd ms: ours  plain  ratio | bwd ms: ours  plain  ratio | ours fwd, bwd\n", N, C);
    float t[4] = {0, 0, 0, 0};
    bench_layer("qkv", N, C, 3 * C, 0, 0, t, ctx);
    bench_layer("attproj", N, C, C, 0, 0, t, ctx);
    bench_layer("fc", N, C, 4 * C, 0, 1, t, ctx);
    bench_layer("fcproj", N, 4 * C, C, 1, 0, t, ctx);
    printf("%-21s | %7.3f %7.3f %5.2fx | %7.3f %7.3f %5.2fx | fwd+bwd %.3f against %.3f ms: %.3fx\n", "block",
           t[0], t[1], t[0] / t[1], t[2], t[3], t[2] / t[3], t[0] + t[2], t[1] + t[3], (t[0] + t[2]) / (t[1] + t[3]));
}

int main(int argc, char** argv) {
    if (argc != 1 && argc != 3) {
        fprintf(stderr, "usage: %s [N C]   (default: N = 65536 at C = 768 and C = 1600)\n", argv[0]);
        return 2;
    }
    GpuContext ctx;
    gpu_context_build(&ctx, 0);
    if (argc == 3) {
        int N = atoi(argv[1]), C = atoi(argv[2]);
        if (N <= 0 || C <= 0 || C % 8 != 0) {
            fprintf(stderr, "error: N = %s, C = %s: need N > 0 and C a positive multiple of 8\n", argv[1], argv[2]);
            return 2;
        }
        bench_block(N, C, &ctx);
        bench_bias_epilogue(N, C, &ctx);
        bench_dgelu_bgrad(N, C, &ctx);
        bench_gelu_fusion(N, C, &ctx);
    } else {
        bench_block(65536, 768, &ctx);
        bench_block(65536, 1600, &ctx);
        bench_bias_epilogue(65536, 768, &ctx);
        bench_dgelu_bgrad(65536, 768, &ctx);
        bench_gelu_fusion(65536, 768, &ctx);
    }
    gpu_context_free(&ctx);
    return 0;
}
