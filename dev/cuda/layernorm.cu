// dev/cuda/layernorm.cu: the LayerNorm kernels of llmc/layers/layernorm.cuh and the RMSNorm ones of
// llmc/layers/rmsnorm.cuh timed at the trainer's shapes,
// against the GPU's copy bandwidth: each time beside a device-to-device copy of as many bytes (half
// read, half written), the floor for a kernel that moves them once. The kernels' correctness is tested
// against the CPU references by dev/test/layers/test_layers.cu.
//   build/dev/layernorm          N = 65536, C = 768 (d12, B = 64) and N = 16384, C = 1600 (d48, B = 16)
//   build/dev/layernorm N C      one shape
// The LayerNorm backward runs twice: alone, and with the column sums of the rows it writes (the bias
// gradient of the projection below it, llmc/model/model.cuh), beside the bias kernels (llmc/layers/column_sums.cuh)
// that those sums replace.
// Bytes per call: forward, residual form: a, b read, r and out written (4·N·C·2); backward: dout, x read,
// dinp read and written (4·N·C·2), plus mean, rstd and the partial sums.
#include <stdio.h>
#include <stdlib.h>
#include "../../llmc/layers/layernorm.cuh"
#include "../../llmc/layers/rmsnorm.cuh"
#include "fill.cuh"
#include "timing.cuh"

static void bench(int N, int C, const GpuContext* ctx) {
    size_t n = (size_t)N * C, bytes = 4 * n * sizeof(bf16);
    bf16 *a = alloc_filled(n, 1.0f, 1), *b = alloc_filled(n, 1.0f, 2), *dout = alloc_filled(n, 0.01f, 3);
    bf16 *dinp = alloc_filled(n, 0.01f, 4), *w = alloc_filled(C, 1.0f, 5), *bias = alloc_filled(C, 0.1f, 6);
    bf16 *r, *out, *copy;
    float *mean, *rstd, *dw, *db, *ds, *scratch;
    cuda_check(cudaMalloc(&r, n * sizeof(bf16))); cuda_check(cudaMalloc(&out, n * sizeof(bf16)));
    cuda_check(cudaMalloc(&copy, 4 * n * sizeof(bf16)));
    cuda_check(cudaMalloc(&mean, N * sizeof(float))); cuda_check(cudaMalloc(&rstd, N * sizeof(float)));
    cuda_check(cudaMalloc(&dw, C * sizeof(float))); cuda_check(cudaMalloc(&db, C * sizeof(float)));
    cuda_check(cudaMalloc(&ds, C * sizeof(float)));
    size_t sf = (size_t)LN_BWD_BLOCKS * 3 * C;  // the most of the three: RMS_BWD_BLOCKS · C, COLUMN_SUMS_CHUNKS · C
    if (sf < (size_t)RMS_BWD_BLOCKS * C) sf = (size_t)RMS_BWD_BLOCKS * C;
    if (sf < (size_t)COLUMN_SUMS_CHUNKS * C) sf = (size_t)COLUMN_SUMS_CHUNKS * C;
    cuda_check(cudaMalloc(&scratch, sf * sizeof(float)));
    const int reps = 20;
    float fwd = time_ms([&] { residual_layernorm_forward(r, out, mean, rstd, a, b, w, bias, N, C, ctx); }, ctx->stream, reps);
    float bwd = time_ms([&] { layernorm_backward(dinp, dw, db, NULL, scratch, dout, r, mean, rstd, w, N, C, ctx); },
                        ctx->stream, reps);
    float bwds = time_ms([&] { layernorm_backward(dinp, dw, db, ds, scratch, dout, r, mean, rstd, w, N, C, ctx); },
                         ctx->stream, reps);
    // what linear_backward runs for the same bias gradient from the same rows
    float biask = time_ms([&] { column_sums_bf16(ds, dinp, N, C, scratch, ctx->stream); }, ctx->stream, reps);
    // a copy of 2·N·C bf16: 4·N·C·2 bytes moved
    float cp = time_ms([&] {
        cuda_check(cudaMemcpyAsync(copy + 2 * n, copy, 2 * n * sizeof(bf16), cudaMemcpyDeviceToDevice, ctx->stream));
    }, ctx->stream, reps);
    float rfwd = time_ms([&] { residual_rmsnorm_forward(r, out, rstd, a, b, w, N, C, 1e-5f, ctx); }, ctx->stream, reps);
    float rbwd = time_ms([&] { rmsnorm_backward(dinp, dw, scratch, dout, r, rstd, w, N, C, ctx); }, ctx->stream, reps);
    printf("N = %5d, C = %4d | copy of %.0f MB %.3f ms, %.2f TB/s\n", N, C, bytes * 1e-6, cp, bytes / cp * 1e-9);
    printf("  layernorm: forward %.3f ms (%.2fx copy), backward %.3f ms (%.2fx copy)\n", fwd, fwd / cp, bwd, bwd / cp);
    printf("  layernorm backward + the written rows' column sums %.3f ms, against %.3f + %.3f ms of bias kernels: "
           "%.3f ms saved\n", bwds, bwd, biask, bwd + biask - bwds);
    printf("  rmsnorm:   forward %.3f ms (%.2fx copy), backward %.3f ms (%.2fx copy)\n", rfwd, rfwd / cp, rbwd, rbwd / cp);
    bf16* bufs[] = {a, b, dout, dinp, w, bias, r, out, copy};
    for (bf16* q : bufs) cuda_check(cudaFree(q));
    float* fbufs[] = {mean, rstd, dw, db, ds, scratch};
    for (float* q : fbufs) cuda_check(cudaFree(q));
}

int main(int argc, char** argv) {
    if (argc != 1 && argc != 3) { fprintf(stderr, "usage: %s [N C]\n", argv[0]); return 2; }
    GpuContext ctx;
    gpu_context_build(&ctx, 0);
    if (argc == 3) {
        int N = atoi(argv[1]), C = atoi(argv[2]);
        if (N <= 0 || C <= 0 || C % 8 != 0 || C > LN_MAX_C) {
            fprintf(stderr, "error: N = %s, C = %s: need N > 0 and C a multiple of 8, at most %d\n", argv[1], argv[2], LN_MAX_C);
            return 2;
        }
        bench(N, C, &ctx);
    } else {
        bench(65536, 768, &ctx);
        bench(16384, 1600, &ctx);
    }
    gpu_context_free(&ctx);
    return 0;
}
