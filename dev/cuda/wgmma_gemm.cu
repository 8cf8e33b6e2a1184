// dev/cuda/wgmma_gemm.cu: a Hopper GEMM built from llmc/wgmma.cuh, D (M, N) fp32 = A (M, K) · B (N, K)ᵀ
// (the LM head's logits GEMM: x · Wᵀ), checked against cuBLASLt and timed next to it. It is the first
// step towards the head's fused epilogues (row statistics, the gradient) on tensor cores as fast as
// cuBLAS: the main loop is what those kernels will share.
//
//   build/dev/wgmma_gemm               check, then time on the head's block shapes and a large square
//
// Tiling (llmc/wgmma.cuh): a block of 384 threads owns a 128 x 256 tile of D; warpgroup 0 copies the
// operand tiles with TMA into a ring of 4 stages, warpgroups 1 and 2 multiply with m64n256k16 wgmmas
// into fp32 registers and store them. Needs K % 64 == 0, N % 8 == 0.
// Napkin: per stage 2·128·256·64 = 4.2 MFLOP against 48 KiB of copies: 85 FLOP/B, below the H200's
// ~200 FLOP/B DRAM ridge, so the copies must mostly hit L2 (each A tile is re-read by every column block).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <vector>
#include "../../llmc/cuda_common.cuh"
#include "../../llmc/matmul.cuh"
#include "../../llmc/wgmma.cuh"
#include "timing.cuh"

// the plain GEMM: one tile per block, the accumulators stored as they are
__global__ void __launch_bounds__(WG_THREADS, 1)
wg_gemm_kernel(const __grid_constant__ CUtensorMap ta, const __grid_constant__ CUtensorMap tb, float* D,
               int M, int N, int K) {
#if defined(WG_DEVICE_CODE)
    extern __shared__ unsigned char smem_raw[];
    WgRing ring = wg_ring_init(smem_raw, WG_COOP_STAGES, WG_BM, 2);
    int wg = threadIdx.x / 128, t = threadIdx.x % 128, it = 0;
    int m0 = blockIdx.y * WG_BM, n0 = blockIdx.x * WG_BN;
    if (wg == 0) {  // producer
        regs_dec<40>();
        if (t == 0) wg_produce(ring, &ta, &tb, m0, n0, K / WG_BK, it);
        return;
    }
    regs_inc<232>();
    float d[128];
    wg_consume(ring, d, (wg - 1) * 64 * WG_BK * 2, K / WG_BK, it);
    // the accumulator fragment: warp w of the warpgroup holds rows 16w .. 16w+15; register 4j+e sits at
    // row lane/4 (+8 for e >= 2), column 8j + 2·(lane % 4) + (e & 1)
    int warp = t / 32, lane = t % 32;
    int row = m0 + (wg - 1) * 64 + warp * 16 + lane / 4;
    #pragma unroll
    for (int j = 0; j < 32; j++) {
        int col = n0 + j * 8 + (lane % 4) * 2;
        if (col >= N) continue;
        if (row < M) *(float2*)(D + (size_t)row * N + col) = make_float2(d[4 * j], d[4 * j + 1]);
        if (row + 8 < M) *(float2*)(D + (size_t)(row + 8) * N + col) = make_float2(d[4 * j + 2], d[4 * j + 3]);
    }
#endif
}

static void wg_gemm(float* D, const bf16* A, const bf16* B, int M, int N, int K, cudaStream_t stream) {
    if (K % WG_BK != 0 || N % 8 != 0) check_fail("wg_gemm: needs K % 64 == 0 and N % 8 == 0", "pad the operands");
    CUtensorMap ta = tma_map_bf16(A, M, K, K, WG_BM), tb = tma_map_bf16(B, N, K, K, WG_BN);
    dim3 grid(ceil_div(N, WG_BN), ceil_div(M, WG_BM));
    wg_gemm_kernel<<<grid, WG_THREADS, WG_COOP_SMEM, stream>>>(ta, tb, D, M, N, K);
    cuda_check_launch();
}

// --- inputs, check, timing ---------------------------------------------------------------------

__global__ void fill_kernel(bf16* p, size_t n, float scale, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
        p[i] = __float2bfloat16(scale * ((float)(h & 0xFFFFFF) / 8388608.0f - 1.0f));
    }
}

// ours against cuBLASLt (fp32 out) on one shape: both accumulate bf16 products in fp32 in different
// orders, so they agree to ~1e-6 of the largest |D|; a wrong tile, swizzle or fragment is off by O(1)
static int check_and_time(int M, int N, int K, int time_it, const GpuContext* ctx) {
    bf16 *A, *B; float *D, *R;
    cuda_check(cudaMalloc(&A, (size_t)M * K * sizeof(bf16)));
    cuda_check(cudaMalloc(&B, (size_t)N * K * sizeof(bf16)));
    cuda_check(cudaMalloc(&D, (size_t)M * N * sizeof(float)));
    cuda_check(cudaMalloc(&R, (size_t)M * N * sizeof(float)));
    fill_kernel<<<1024, 256, 0, ctx->stream>>>(A, (size_t)M * K, 1.0f, 1);
    fill_kernel<<<1024, 256, 0, ctx->stream>>>(B, (size_t)N * K, 1.0f, 2);
    cuda_check_launch();
    cuda_check(cudaMemsetAsync(D, 0xff, (size_t)M * N * sizeof(float), ctx->stream));  // NaN: unwritten shows
    wg_gemm(D, A, B, M, N, K, ctx->stream);
    matmul(ctx, R, CUDA_R_32F, N, A, K, 0, B, K, 1, M, N, K, 1.0f, 0.0f);
    std::vector<float> d((size_t)M * N), r((size_t)M * N);
    cuda_check(cudaMemcpy(d.data(), D, d.size() * sizeof(float), cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(r.data(), R, r.size() * sizeof(float), cudaMemcpyDeviceToHost));
    double maxd = 0.0, maxr = 0.0;
    size_t where = 0;
    for (size_t i = 0; i < d.size(); i++) {
        double e = fabs((double)d[i] - r[i]);
        if (!(e <= maxd)) { maxd = e; where = i; }
        maxr = fmax(maxr, fabs((double)r[i]));
    }
    int ok = maxd <= 1e-5 * maxr;
    printf("%6d x %6d x %5d: max |ours - cuBLASLt| %.2e of max |D| %.2e at (%zu, %zu): %s", M, N, K, maxd, maxr,
           where / N, where % N, ok ? "ok" : "WRONG");
    if (time_it && ok) {
        int reps = 20;
        float t_ours = time_ms([&] { wg_gemm(D, A, B, M, N, K, ctx->stream); }, ctx->stream, reps);
        float t_lt = time_ms([&] { matmul(ctx, R, CUDA_R_32F, N, A, K, 0, B, K, 1, M, N, K, 1.0f, 0.0f); }, ctx->stream, reps);
        double F = 2.0 * M * N * (double)K;
        printf(" | ours %.3f ms (%.0f TF/s), cuBLASLt %.3f ms (%.0f TF/s): %.2fx", t_ours, F / t_ours * 1e-9, t_lt,
               F / t_lt * 1e-9, t_ours / t_lt);
    }
    printf("\n");
    cuda_check(cudaFree(A)); cuda_check(cudaFree(B)); cuda_check(cudaFree(D)); cuda_check(cudaFree(R));
    return ok;
}

int main(void) {
    GpuContext ctx;
    gpu_context_build(&ctx, 0);
    cudaDeviceProp prop;
    cuda_check(cudaGetDeviceProperties(&prop, ctx.device));
#ifndef LLMC_SM90A
    printf("wgmma_gemm: built without sm_90a (make GPU_ARCH=90): nothing to run\n");
    return 0;
#endif
    if (prop.major != 9) { printf("wgmma_gemm: needs a Hopper GPU (sm_90), found sm_%d%d\n", prop.major, prop.minor); return 0; }
    cuda_check(cudaFuncSetAttribute(wg_gemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, WG_COOP_SMEM));
    int ok = 1;
    // awkward sizes: M and N not multiples of the tile, one K step, a single row
    ok &= check_and_time(300, 1000, 256, 0, &ctx);
    ok &= check_and_time(1, 264, 64, 0, &ctx);
    ok &= check_and_time(129, 50304, 768, 0, &ctx);
    // the blocks' logits GEMMs at C = 768 and 4096, the whole logits of a d12 chunk, a large square
    ok &= check_and_time(3584, 3872, 768, 1, &ctx);
    ok &= check_and_time(2048, 4016, 4096, 1, &ctx);
    ok &= check_and_time(8192, 50304, 768, 1, &ctx);
    ok &= check_and_time(8192, 8192, 8192, 1, &ctx);
    gpu_context_free(&ctx);
    printf(ok ? "wgmma_gemm: all checks passed\n" : "wgmma_gemm: CHECK FAILED\n");
    return ok ? 0 : 1;
}
