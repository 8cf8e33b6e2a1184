// model_testing.cuh: what the whole-model test (test_gpt.cu, both families) uses to compare a CUDA model
// with its CPU reference and with itself: reading its buffers back, the per-tensor error, and the resume
// check. They take plain buffers, so they serve either family.
#pragma once
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "../../llmc/core/cuda_common.cuh"
#include "testing.h"

static float bf16_round(float x) { return __bfloat162float(__float2bfloat16(x)); }

// The model's loss (device, 1 float), once ctx's stream has computed it.
static float model_loss(const float* loss, const GpuContext* ctx) {
    float l;
    cuda_check(cudaMemcpyAsync(&l, loss, sizeof(float), cudaMemcpyDeviceToHost, ctx->stream));
    cuda_check(cudaStreamSynchronize(ctx->stream));
    return l;
}

static void copy_to_host(float* dst, const float* src, size_t n) {
    cuda_check(cudaDeviceSynchronize());
    cuda_check(cudaMemcpy(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost));
}

static int bitwise_equal(const float* a, const float* b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

// One tensor of n floats (host), got against ref: relative L2 error ‖a − b‖/‖b‖ (must be at most tol) and
// max |a − b| (with where and the reference's max |b|), printed under what and the tensor's name.
static void compare_tensor(const char* what, const char* name, const float* got, const float* ref, size_t n, double tol) {
    double d2 = 0.0, b2 = 0.0, maxd = 0.0, maxb = 0.0;
    size_t where = 0;
    for (size_t j = 0; j < n; j++) {
        double d = fabs((double)got[j] - ref[j]);
        d2 += d * d;
        b2 += (double)ref[j] * ref[j];
        if (d > maxd || d != d) { maxd = d; where = j; }
        if (fabs(ref[j]) > maxb) maxb = fabs(ref[j]);
    }
    double rel = b2 > 0 ? sqrt(d2 / b2) : sqrt(d2);
    printf("  %-12s %-24s rel L2 %.2e (tol %.0e) | max |diff| %.2e at %zu (max |ref| %.2e)\n", what, name, rel, tol,
           maxd, where, maxb);
    EXPECT(rel <= tol, "%s %s: relative L2 error %.3e > %.0e", what, name, rel, tol);
}

// The resume check: a run resumed after step N of 2N against the uninterrupted one. The losses of steps
// N .. 2N-1 and the master, m and v tensors (device, n floats each, in that order) must be bitwise equal.
// a, b: host scratch of n floats each.
static void expect_resumed(int N, const float* loss_full, const float* loss_resumed, const float* const full[3],
                           const float* const resumed[3], size_t n, float* a, float* b) {
    int same_loss = memcmp(loss_full + N, loss_resumed + N, N * sizeof(float)) == 0;
    const char* names[3] = {"master", "m", "v"};
    int same[3];
    for (int k = 0; k < 3; k++) {
        copy_to_host(a, full[k], n);
        copy_to_host(b, resumed[k], n);
        same[k] = bitwise_equal(a, b, n);
    }
    printf("resume after step %d of %d: losses", N, 2 * N);
    for (int s = N; s < 2 * N; s++) printf(" %.7f/%.7f", loss_full[s], loss_resumed[s]);
    printf(" (uninterrupted/resumed) %s; master %s, m %s, v %s\n", same_loss ? "bitwise equal" : "DIFFERENT",
           same[0] ? "equal" : "DIFFERENT", same[1] ? "equal" : "DIFFERENT", same[2] ? "equal" : "DIFFERENT");
    EXPECT(same_loss, "the resumed run's losses differ from the uninterrupted run's");
    for (int k = 0; k < 3; k++) EXPECT(same[k], "after resume the %s tensor differs from the uninterrupted run's", names[k]);
}
