// dev/cuda/wgmma_gemm.cu: GEMMs built from llmc/ptx/sm90_wgmma.cuh, checked against cuBLASLt and timed next to it.
//   plain: D (M, N) fp32 = A (M, K) · B, B stored (N, K) (the LM head's logits GEMM, x · Wᵀ) or (K, N)
//     ("MN-major" to the wgmmas): the main loop at its plainest, one tile per block, fp32 stored
//     straight from the registers (hence the 1.38x at 8192 x 50304 below: 1.6 GB of stores). The main
//     loop is what the head's forward and gradient kernels (llmc/head/fused_lce_sm90.cuh) share.
//   accumulating: dev/cuda/wgmma_gemm.cuh, D (+)= op(A) · op(B), persistent, the copy engine adding each
//     tile into D: the head's dx and dW GEMMs, on their shapes (A row-major or stored (K, M)), one by one
//     and as the head runs them, both in one launch (wg_gemm_run_pair).
//
//   build/dev/wgmma_gemm               check, then time on the head's block shapes and a large square
//
// Tiling (llmc/ptx/sm90_wgmma.cuh): a block of 384 threads owns a 128 x 256 tile of D; warpgroup 0 copies the
// operand tiles with TMA into a ring of 4 stages, warpgroups 1 and 2 multiply with m64n256k16 wgmmas
// into fp32 registers. The plain kernel needs K % 64 == 0, N % 8 == 0.
// Napkin: per stage 2·128·256·64 = 4.2 MFLOP against 48 KiB of copies: 85 FLOP/B, below the H200's
// ~200 FLOP/B DRAM ridge, so the copies must mostly hit L2 (each A tile is re-read by every column block).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <vector>
#include "../../llmc/core/cuda_common.cuh"
#include "../../llmc/layers/matmul.cuh"
#include "../../llmc/ptx/sm90_wgmma.cuh"
#include "wgmma_gemm.cuh"
#include "wgmma_gemm_plan.h"
#include "timing.cuh"

// the plain GEMM: one tile per block, the accumulators stored as they are. MN_B: B stored (K, N).
template <int MN_B>
__global__ void __launch_bounds__(WG_THREADS, 1)
plain_gemm_kernel(const __grid_constant__ CUtensorMap ta, const __grid_constant__ CUtensorMap tb, float* D,
               int M, int N, int K) {
#if defined(WG_DEVICE_CODE)
    extern __shared__ unsigned char smem_raw[];
    WgRing ring = wg_ring_init(smem_raw, WG_COOP_STAGES, WG_BM, 2);
    int wg = threadIdx.x / 128, t = threadIdx.x % 128, it = 0;
    int m0 = blockIdx.y * WG_BM, n0 = blockIdx.x * WG_BN;
    if (wg == 0) {  // producer
        regs_dec<40>();
        if (t == 0) wg_produce<0, MN_B>(ring, &ta, &tb, m0, n0, K / WG_BK, it);
        return;
    }
    regs_inc<232>();
    float d[128];
    wg_consume<0, MN_B>(ring, d, (wg - 1) * 64 * WG_BK * 2, K / WG_BK, it);
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

// The plain GEMM's tensor maps (trans_b: B stored (N, K), else (K, N), read in boxes of 64 x 64)
typedef struct { CUtensorMap ta, tb; int M, N, K, mn_b; } PlainGemm;

static PlainGemm plain_gemm_make(const bf16* A, const bf16* B, int M, int N, int K, int trans_b) {
    if (K % WG_BK != 0 || N % 8 != 0) check_fail("plain_gemm: needs K % 64 == 0 and N % 8 == 0", "pad the operands");
    PlainGemm g = {tma_map_bf16(A, M, K, K, WG_BM),
                   trans_b ? tma_map_bf16(B, N, K, K, WG_BN) : tma_map_bf16(B, K, N, N, 64), M, N, K, !trans_b};
    return g;
}

static void plain_gemm(const PlainGemm* g, float* D, cudaStream_t stream) {
    dim3 grid(ceil_div(g->N, WG_BN), ceil_div(g->M, WG_BM));
    if (g->mn_b) plain_gemm_kernel<1><<<grid, WG_THREADS, WG_COOP_SMEM, stream>>>(g->ta, g->tb, D, g->M, g->N, g->K);
    else plain_gemm_kernel<0><<<grid, WG_THREADS, WG_COOP_SMEM, stream>>>(g->ta, g->tb, D, g->M, g->N, g->K);
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

__global__ void fill_f32_kernel(float* p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
        p[i] = 100.0f * ((float)(h & 0xFFFFFF) / 8388608.0f - 1.0f);
    }
}

// Both accumulate the same bf16 products in fp32; a wrong tile, swizzle or fragment is off by O(1), a
// different summation order by ~1e-6 of the largest |D|. Prints the largest difference and how many
// elements differ at all; ok when the largest is within 1e-5 of max |D|.
static int compare(const char* what, const float* D, const float* R, int M, int N) {
    std::vector<float> d((size_t)M * N), r((size_t)M * N);
    // the kernels ran on the context's non-blocking stream, which a plain cudaMemcpy does not wait for
    cuda_check(cudaDeviceSynchronize());
    cuda_check(cudaMemcpy(d.data(), D, d.size() * sizeof(float), cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(r.data(), R, r.size() * sizeof(float), cudaMemcpyDeviceToHost));
    double maxd = 0.0, maxr = 0.0;
    size_t where = 0, differ = 0;
    for (size_t i = 0; i < d.size(); i++) {
        double e = fabs((double)d[i] - r[i]);
        if (!(e <= maxd)) { maxd = e; where = i; }
        differ += !(d[i] == r[i]);
        maxr = fmax(maxr, fabs((double)r[i]));
    }
    int ok = maxd <= 1e-5 * maxr;
    printf("%s: max |ours - cuBLASLt| %.2e of max |D| %.2e at (%zu, %zu), %zu differ: %s", what, maxd, maxr,
           where / N, where % N, differ, ok ? "ok" : "WRONG");
    return ok;
}

// the time of one call, from 10 calls back to back (so the host's launch cost hides behind the GPU's)
template <typename F>
static float time_one(F fn, cudaStream_t stream) {
    return time_ms([&] { for (int i = 0; i < 10; i++) fn(); }, stream, 10) / 10.0f;
}

static void print_times(float t_ours, float t_lt, int M, int N, int K) {
    double F = 2.0 * M * N * (double)K;
    printf(" | ours %.3f ms (%.0f TF/s), cuBLASLt %.3f ms (%.0f TF/s): %.2fx", t_ours, F / t_ours * 1e-9, t_lt,
           F / t_lt * 1e-9, t_ours / t_lt);
}

// The operands of a check: A (M·K) and B (N·K) filled with values in [-1, 1), D and R (M·N) fp32 for our
// result and cuBLASLt's
static void operands_alloc(bf16** A, bf16** B, float** D, float** R, int M, int N, int K, const GpuContext* ctx) {
    cuda_check(cudaMalloc(A, (size_t)M * K * sizeof(bf16)));
    cuda_check(cudaMalloc(B, (size_t)N * K * sizeof(bf16)));
    cuda_check(cudaMalloc(D, (size_t)M * N * sizeof(float)));
    cuda_check(cudaMalloc(R, (size_t)M * N * sizeof(float)));
    fill_kernel<<<1024, 256, 0, ctx->stream>>>(*A, (size_t)M * K, 1.0f, 1);
    fill_kernel<<<1024, 256, 0, ctx->stream>>>(*B, (size_t)N * K, 1.0f, 2);
    cuda_check_launch();
}
static void operands_free(bf16* A, bf16* B, float* D, float* R) {
    cuda_check(cudaFree(A)); cuda_check(cudaFree(B)); cuda_check(cudaFree(D)); cuda_check(cudaFree(R));
}

// the plain GEMM against cuBLASLt (fp32 out, beta 0) on one shape; trans_b: B stored (N, K)
static int check_plain(int M, int N, int K, int trans_b, int time_it, const GpuContext* ctx) {
    bf16 *A, *B; float *D, *R;
    operands_alloc(&A, &B, &D, &R, M, N, K, ctx);
    cuda_check(cudaMemsetAsync(D, 0xff, (size_t)M * N * sizeof(float), ctx->stream));  // NaN: unwritten shows
    PlainGemm g = plain_gemm_make(A, B, M, N, K, trans_b);
    MatmulPlan lt;
    matmul_plan_make(&lt, ctx, CUDA_R_32F, N, K, 0, trans_b ? K : N, trans_b, M, N, K, MATMUL_EPILOGUE_NONE, 0);
    plain_gemm(&g, D, ctx->stream);
    matmul_plan_run(&lt, ctx, R, A, B, 1.0f, 0.0f, NULL);
    char what[96];
    snprintf(what, sizeof what, "plain %6d x %6d x %5d%s", M, N, K, trans_b ? "" : ", B (K, N)");
    int ok = compare(what, D, R, M, N);
    if (time_it && ok)
        print_times(time_one([&] { plain_gemm(&g, D, ctx->stream); }, ctx->stream),
                    time_one([&] { matmul_plan_run(&lt, ctx, R, A, B, 1.0f, 0.0f, NULL); }, ctx->stream), M, N, K);
    printf("\n");
    matmul_plan_free(&lt);
    operands_free(A, B, D, R);
    return ok;
}

// the accumulating GEMM (dev/cuda/wgmma_gemm.cuh) against cuBLASLt, operands as matmul.cuh takes them: from
// the same random D, D += the product (beta 1), then D = it (beta 0) over a NaN-filled D, for tiles of
// each width; time_it: each width timed adding, and cuBLASLt
static int check_acc(int M, int N, int K, int trans_a, int trans_b, int time_it, const GpuContext* ctx) {
    bf16 *A, *B; float *D, *R;
    int lda = trans_a ? M : K, ldb = trans_b ? K : N, ok = 1;
    operands_alloc(&A, &B, &D, &R, M, N, K, ctx);
    MatmulPlan lt;
    matmul_plan_make(&lt, ctx, CUDA_R_32F, N, lda, trans_a, ldb, trans_b, M, N, K, MATMUL_EPILOGUE_NONE, 0);
    float t[3];
    for (int bn = 128; bn <= 256; bn += 64) {
        fill_f32_kernel<<<1024, 256, 0, ctx->stream>>>(D, (size_t)M * N, 3);
        fill_f32_kernel<<<1024, 256, 0, ctx->stream>>>(R, (size_t)M * N, 3);
        cuda_check_launch();
        WgGemm g = wg_gemm_make(D, N, A, lda, trans_a, B, ldb, trans_b, M, N, K, bn);
        char what[96];
        snprintf(what, sizeof what, "acc   %6d x %6d x %5d, A %s, B %s, %d-column tiles", M, N, K,
                 trans_a ? "(K, M)" : "(M, K)", trans_b ? "(N, K)" : "(K, N)", bn);
        wg_gemm_run(&g, 1, ctx);
        matmul_plan_run(&lt, ctx, R, A, B, 1.0f, 1.0f, NULL);
        ok &= compare(what, D, R, M, N);
        printf(" (D +=); ");
        cuda_check(cudaMemsetAsync(D, 0xff, (size_t)M * N * sizeof(float), ctx->stream));
        wg_gemm_run(&g, 0, ctx);
        matmul_plan_run(&lt, ctx, R, A, B, 1.0f, 0.0f, NULL);
        ok &= compare("D =", D, R, M, N);
        printf("\n");
        if (time_it) t[bn / 64 - 2] = time_one([&] { wg_gemm_run(&g, 1, ctx); }, ctx->stream);
    }
    if (time_it && ok) {
        float t_lt = time_one([&] { matmul_plan_run(&lt, ctx, R, A, B, 1.0f, 1.0f, NULL); }, ctx->stream);
        double F = 2.0 * M * N * (double)K;
        printf("  time, D +=: cuBLASLt %.3f ms (%.0f TF/s); ours", t_lt, F / t_lt * 1e-9);
        for (int i = 0; i < 3; i++)
            printf(", %d columns %.3f ms (%.0f TF/s, %.2fx)", 128 + 64 * i, t[i], F / t[i] * 1e-9, t[i] / t_lt);
        printf("\n");
    }
    matmul_plan_free(&lt);
    operands_free(A, B, D, R);
    return ok;
}

// The LM head's dx and dW GEMMs of a block in one launch (wg_gemm_run_pair): G (n, vb), W_v (vb, C),
// x_r (n, C); dxacc (n, C) += G · W_v and dW_v (vb, C) += Gᵀ · x_r, against cuBLASLt from the same random
// D's; bn_dx, bn_dw: the tiles' widths (0: the head's choice, fused_lce_plan_pair_bn). time_it: the launch,
// the two GEMMs launched one after the other, and cuBLASLt's two.
static int check_pair(int n, int C, int vb, int bn_dx, int bn_dw, int time_it, const GpuContext* ctx) {
    if (!bn_dx) fused_lce_plan_pair_bn(n, C, vb, ctx->sm_count, &bn_dx, &bn_dw);
    bf16 *G, *Wv, *xr, *unused; float *dx, *rx, *dw, *rw;
    operands_alloc(&G, &Wv, &dx, &rx, n, C, vb, ctx);  // G (n, vb), W_v (vb, C), dx and its reference (n, C)
    operands_alloc(&unused, &xr, &dw, &rw, vb, C, n, ctx);  // x_r (n, C), dW and its reference (vb, C)
    MatmulPlan lx, lw;
    matmul_plan_make(&lx, ctx, CUDA_R_32F, C, vb, 0, C, 0, n, C, vb, MATMUL_EPILOGUE_NONE, 0);
    matmul_plan_make(&lw, ctx, CUDA_R_32F, C, vb, 1, C, 0, vb, C, n, MATMUL_EPILOGUE_NONE, 0);
    fill_f32_kernel<<<1024, 256, 0, ctx->stream>>>(dx, (size_t)n * C, 3);
    fill_f32_kernel<<<1024, 256, 0, ctx->stream>>>(rx, (size_t)n * C, 3);
    fill_f32_kernel<<<1024, 256, 0, ctx->stream>>>(dw, (size_t)vb * C, 4);
    fill_f32_kernel<<<1024, 256, 0, ctx->stream>>>(rw, (size_t)vb * C, 4);
    cuda_check_launch();
    WgGemm gx = wg_gemm_make(dx, C, G, vb, 0, Wv, C, 0, n, C, vb, bn_dx);
    WgGemm gw = wg_gemm_make(dw, C, G, vb, 1, xr, C, 0, vb, C, n, bn_dw);
    wg_gemm_run_pair(&gx, 1, &gw, 1, ctx);
    matmul_plan_run(&lx, ctx, rx, G, Wv, 1.0f, 1.0f, NULL);
    matmul_plan_run(&lw, ctx, rw, G, xr, 1.0f, 1.0f, NULL);
    char what[112];
    snprintf(what, sizeof what, "pair  dx %5d x %4d x %5d (%d columns) then dW", n, C, vb, bn_dx);
    int ok = compare(what, dx, rx, n, C);
    snprintf(what, sizeof what, "; dW (%d columns)", bn_dw);
    ok &= compare(what, dw, rw, vb, C);
    printf("\n");
    if (time_it && ok) {
        float t_pair = time_one([&] { wg_gemm_run_pair(&gx, 1, &gw, 1, ctx); }, ctx->stream);
        float t_two = time_one([&] { wg_gemm_run(&gx, 1, ctx); wg_gemm_run(&gw, 1, ctx); }, ctx->stream);
        float t_lt = time_one([&] {
            matmul_plan_run(&lx, ctx, rx, G, Wv, 1.0f, 1.0f, NULL);
            matmul_plan_run(&lw, ctx, rw, G, xr, 1.0f, 1.0f, NULL);
        }, ctx->stream);
        double F = 4.0 * n * C * (double)vb;
        printf("  time: one launch %.3f ms (%.0f TF/s), two launches %.3f ms (%.0f TF/s), cuBLASLt %.3f ms (%.0f TF/s): "
               "%.2fx, %.2fx\n", t_pair, F / t_pair * 1e-9, t_two, F / t_two * 1e-9, t_lt, F / t_lt * 1e-9,
               t_pair / t_lt, t_two / t_lt);
    }
    matmul_plan_free(&lx);
    matmul_plan_free(&lw);
    operands_free(G, Wv, dx, rx);
    operands_free(unused, xr, dw, rw);
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
    cuda_check(cudaFuncSetAttribute(plain_gemm_kernel<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, WG_COOP_SMEM));
    cuda_check(cudaFuncSetAttribute(plain_gemm_kernel<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, WG_COOP_SMEM));
    wg_gemm_setup();
    int ok = 1;
    // plain: awkward sizes (M and N not multiples of the tile, one K step, a single row); the blocks'
    // logits GEMMs at C = 768 and 4096, the whole logits of a d12 chunk, a large square
    ok &= check_plain(300, 1000, 256, 1, 0, &ctx);
    ok &= check_plain(1, 264, 64, 1, 0, &ctx);
    ok &= check_plain(129, 50304, 768, 1, 0, &ctx);
    ok &= check_plain(3584, 3872, 768, 1, 1, &ctx);
    ok &= check_plain(2048, 4016, 4096, 1, 1, &ctx);
    ok &= check_plain(8192, 50304, 768, 1, 1, &ctx);
    ok &= check_plain(8192, 8192, 8192, 1, 1, &ctx);
    // plain, B stored (K, N): awkward sizes, a large square
    ok &= check_plain(300, 1000, 256, 0, 0, &ctx);
    ok &= check_plain(1, 264, 64, 0, 0, &ctx);
    ok &= check_plain(8192, 8192, 8192, 0, 1, &ctx);
    // accumulating: every operand layout at awkward sizes, K not a multiple of 64 (zero-filled copies)
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            ok &= check_acc(328, 1000, 256, ta, tb, 0, &ctx);
            ok &= check_acc(72, 264, 200, ta, tb, 0, &ctx);
        }
    ok &= check_acc(1, 264, 64, 0, 0, 0, &ctx);
    // the blocks' dx GEMMs (G (n, vb) · W_v (vb, C)) and dW GEMMs (Gᵀ (vb, n) · x_r (n, C)) at C = 768,
    // 1600 and 4096 in the layouts the head takes (llmc/head/fused_lce_blocks_plan.h), and a large square
    const int blocks[][3] = {{5552, 768, 4096}, {4096, 768, 5632}, {4800, 1600, 3584}, {3696, 1600, 5632},
                             {2048, 4096, 4096}};
    for (int i = 0; i < 5; i++) {
        ok &= check_acc(blocks[i][0], blocks[i][1], blocks[i][2], 0, 0, 1, &ctx);
        ok &= check_acc(blocks[i][2], blocks[i][1], blocks[i][0], 1, 0, 1, &ctx);
    }
    // the dW GEMM a head that kept a chunk's logits would run per chunk (656 rows: 64 MiB of 2-byte logits
    // at Vp = 50304), reading and writing all of dW for a short K (dev/cuda/fused_lce_log.md)
    ok &= check_acc(50304, 768, 656, 1, 0, 1, &ctx);
    ok &= check_acc(8192, 8192, 8192, 0, 1, 1, &ctx);
    // the head's dx and dW GEMMs in one launch: awkward sizes with every pair of tile widths (a ring sized
    // for the wider tiles feeding the narrower), then the blocks above at the widths the head picks
    for (int bx = 128; bx <= 256; bx += 64)
        for (int bw = 128; bw <= 256; bw += 64) ok &= check_pair(328, 264, 200, bx, bw, 0, &ctx);
    for (int i = 0; i < 5; i++) ok &= check_pair(blocks[i][0], blocks[i][1], blocks[i][2], 0, 0, 1, &ctx);
    gpu_context_free(&ctx);
    printf(ok ? "wgmma_gemm: all checks passed\n" : "wgmma_gemm: CHECK FAILED\n");
    return ok ? 0 : 1;
}
