// dev/cuda/fused_lce.cu: the playground of LM-head loss variants. Each variant is checked against the
// CPU fp64 reference (dev/ref/fused_lce_ref.h) at awkward sizes, then timed on the benchmark shapes
// (BENCH_SHAPES) next to the three plain cuBLASLt GEMMs of the same shape (the floor: logits, dx, dW).
//
//   build/dev/fused_lce                 check every variant, then benchmark every variant and shape
//   build/dev/fused_lce 2               only variant 2
//   build/dev/fused_lce --check-only    correctness only      (--bench-only: timing only)
//   build/dev/fused_lce --small         only the N=1024 shapes
//   build/dev/fused_lce 2 --scratch 1024   variant 2 with a 1 GiB logits budget (speed against memory)
//   build/dev/fused_lce 7 --scratch 64     variant 7 (staged; default budget 512 MiB) within 64 MiB
//   build/dev/fused_lce 5 --vocab-block 2048   variant 5 with vocab blocks of at most 2048 columns
//   build/dev/fused_lce 5 --shape 2 --profile  only the third shape, with the time of each phase
//
// Variants (fused_lce_variants.cuh): 1 unfused, 2 chunks, 5 blocks, 7 staged are the paths of llmc/head/fused_lce.cuh;
// 3 and 4 (the fully fused mma.sync backward, fused_lce_sm80_backward.cuh) and 6 (the blocks with our
// own dx and dW GEMM, wgmma_gemm.cuh) are experiments that live here, reached through the head's hooks.
// The fwd column of variants 3 and 4 is the fused forward alone (what the chunked head also uses for
// loss-only calls).
// Columns: fwd = loss only; bwd = the recomputing backward with per-row upstream gradients; fwd+bwd =
// the training path (gradients with the forward); TF/s = 3F / (fwd+bwd time), F = 2·N·C·V; x GEMMs =
// fwd+bwd time over the three cuBLASLt GEMMs; scratch = device memory beyond inputs and gradients.
// the head with its experiment hooks (FusedLceHooks), which the variants reach it through
#define FUSED_LCE_DEV_HOOKS
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <vector>
#include "fused_lce_variants.cuh"
#include "../ref/fused_lce_check.cuh"
#include "timing.cuh"

typedef struct { int N, C, V, Vp; } Shape;
static const Shape BENCH_SHAPES[] = {
    {1024, 768, 50257, 50304}, {1024, 4096, 128256, 128256},
    {65536, 768, 50257, 50304}, {16384, 1600, 50257, 50304},
    {8192, 4096, 128256, 128256}, {16384, 4096, 128256, 128256},
};

static size_t g_scratch = 0;                       // --scratch MiB: the scratch budget (0: the variant's default)
#define STAGED_SCRATCH ((size_t)512 << 20)         // variant 7's default budget
static int g_vocab_block = 0;                      // --vocab-block: variants 5 and 6's widest vocab block (0: default)
static int g_profile = 0;                          // --profile: where the fwd+bwd time goes (variants 2, 5, 6)

static void build_variant(FusedLce* h, FusedLceVariantState* st, const FusedLceVariant* v, int max_n, int C, int V, int Vp,
                          FusedLceOptions opt) {
    size_t scratch = g_scratch ? g_scratch : v->path == FUSED_LCE_PATH_STAGED ? STAGED_SCRATCH : FUSED_LCE_DEFAULT_SCRATCH;
    fused_lce_variant_build(h, st, v, max_n, C, V, Vp, opt, scratch, g_vocab_block);
}

// --- inputs ------------------------------------------------------------------------------------

__device__ __forceinline__ float hash_uniform(uint64_t seed, uint64_t i) {  // in [-1, 1)
    uint64_t z = seed + i * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
}
__global__ void fill_uniform_kernel(bf16* p, size_t n, float scale, uint64_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = __float2bfloat16(scale * hash_uniform(seed, i));
}
__global__ void fill_targets_kernel(int* t, int n, int V, uint64_t seed) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        t[i] = (int)((hash_uniform(seed, i) * 0.5f + 0.5f) * V) % V;
}

// --- correctness -------------------------------------------------------------------------------

static int check_variant(const FusedLceVariant* v, const GpuContext* ctx) {
    FusedLceOptions plain = fused_lce_options_default();
    FusedLceOptions all = plain;
    all.z_loss = 1e-4f; all.softcap = 15.0f; all.label_smoothing = 0.1f;
    FusedLceOptions capped = all, smoothed = all;
    capped.label_smoothing = 0.0f;
    smoothed.softcap = 0.0f;
    const FusedLceCase cases[] = {
        {300, 256, 5000, 5120, plain, 0, "N=300 C=256 V=5000 Vp=5120"},
        {1, 128, 1000, 1024, plain, 0, "N=1 C=128 V=1000"},
        {64, 64, 777, 784, plain, 1, "all rows ignored, V=777"},
        {200, 192, 3001, 3008, plain, 5, "every 5th row ignored, V=3001"},
        {257, 256, 4093, 4096, all, 7, "z-loss + softcap + smoothing, V=4093"},
        {257, 256, 4093, 4096, capped, 7, "z-loss + softcap, V=4093"},
        {257, 256, 4093, 4096, smoothed, 7, "z-loss + smoothing, V=4093"},
    };
    int ok = 1;
    printf("variant %d (%s): checks against the fp64 reference\n", v->id, v->name);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const FusedLceCase* cs = &cases[i];
        if (v->path == FUSED_LCE_PATH_STAGED && cs->opt.softcap > 0.0f && cs->opt.label_smoothing > 0.0f) {
            printf("%s: not a staged case (soft-capping with label smoothing runs on the blocks)\n", cs->what);
            continue;
        }
        FusedLceInputs in = fused_lce_inputs_make(cs, 1234 + i);
        FusedLceDevice d = fused_lce_device_make(cs, &in);
        FusedLce h;
        FusedLceVariantState st;
        build_variant(&h, &st, v, cs->N, cs->C, cs->V, cs->Vp, cs->opt);
        ok &= fused_lce_check_mode(&h, FUSED_LCE_MODE_TRAIN, cs, &in, &d, ctx);
        fused_lce_free(&h);
        fused_lce_device_free(&d);
        fused_lce_inputs_free(&in);
    }
    return ok;
}

// --- timing ------------------------------------------------------------------------------------

static void bench_shape(const Shape* s, int only_variant, const GpuContext* ctx) {
    int N = s->N, C = s->C, V = s->V, Vp = s->Vp;
    bf16 *x, *W, *dx, *logits; float *dW, *dloss_rows; int* t;
    cuda_check(cudaMalloc(&x, (size_t)N * C * sizeof(bf16)));
    cuda_check(cudaMalloc(&W, (size_t)Vp * C * sizeof(bf16)));
    cuda_check(cudaMalloc(&dx, (size_t)N * C * sizeof(bf16)));
    cuda_check(cudaMalloc(&dW, (size_t)Vp * C * sizeof(float)));
    cuda_check(cudaMalloc(&t, (size_t)N * sizeof(int)));
    cuda_check(cudaMalloc(&dloss_rows, (size_t)N * sizeof(float)));
    fill_uniform_kernel<<<1024, 256, 0, ctx->stream>>>(x, (size_t)N * C, 1.7320508f, 1);
    fill_uniform_kernel<<<1024, 256, 0, ctx->stream>>>(W, (size_t)Vp * C, 3.0f * 1.7320508f / sqrtf((float)C), 2);
    fill_targets_kernel<<<256, 256, 0, ctx->stream>>>(t, N, V, 3);
    cuda_check_launch();
    cuda_check(cudaMemsetAsync(dW, 0, (size_t)Vp * C * sizeof(float), ctx->stream));
    std::vector<float> ones(N, 1.0f / N);
    cuda_check(cudaMemcpy(dloss_rows, ones.data(), (size_t)N * sizeof(float), cudaMemcpyHostToDevice));
    cuda_check(cudaDeviceSynchronize());  // the copy is on the legacy stream, which ctx's does not wait for
    double F = 2.0 * N * C * (double)V;
    int reps = F > 5e12 ? 5 : 15;

    // the floor: three plain cuBLASLt GEMMs of the same shape, bf16 outputs; timed alone first, then
    // again in alternation with each variant's forward and backward, which its ratio is taken against
    cuda_check(cudaMalloc(&logits, (size_t)N * Vp * sizeof(bf16)));
    bf16* dWb;
    cuda_check(cudaMalloc(&dWb, (size_t)Vp * C * sizeof(bf16)));
    auto gemms = [&] {
        matmul(ctx, logits, CUDA_R_16BF, Vp, x, C, 0, W, C, 1, N, Vp, C, 1.0f, 0.0f);
        matmul(ctx, dx, CUDA_R_16BF, C, logits, Vp, 0, W, C, 0, N, C, Vp, 1.0f, 0.0f);
        matmul(ctx, dWb, CUDA_R_16BF, C, logits, Vp, 1, x, C, 0, Vp, C, N, 1.0f, 0.0f);
    };
    float t_gemm = time_ms(gemms, ctx->stream, reps);
    printf("%6d x %4d x %6d | %-34s |          |          | %8.2f | %6.0f |  1.00x |          |\n", N, C, V,
           "0 three cuBLASLt GEMMs", t_gemm, 3 * F / t_gemm * 1e-9);

    for (int vi = 0; vi < FUSED_LCE_NUM_VARIANTS; vi++) {
        const FusedLceVariant* v = &FUSED_LCE_VARIANTS[vi];
        if (only_variant && v->id != only_variant) continue;
        size_t free_b, total_b;
        cuda_check(cudaMemGetInfo(&free_b, &total_b));
        if (v->path == FUSED_LCE_PATH_UNFUSED && (size_t)N * Vp * sizeof(bf16) > free_b / 2) { printf("  variant %d: skipped, logits do not fit\n", v->id); continue; }
        FusedLce h;
        FusedLceVariantState st;
        build_variant(&h, &st, v, N, C, V, Vp, fused_lce_options_default());
        float t_fwd = time_ms([&] { fused_lce_forward(&h, x, W, t, N, ctx); }, ctx->stream, reps);
        double scratch = (double)(h.scratch_bytes + 2 * (size_t)N * sizeof(float)) / (1 << 20);
        float t_bwd = time_ms([&] { fused_lce_backward(&h, dx, dW, dloss_rows, x, W, t, N, ctx); }, ctx->stream, reps);
        float t_fb, t_pair;
        time_ms_pair([&] { fused_lce_forward_backward(&h, dx, dW, 1.0f, x, W, t, N, ctx); }, gemms, ctx->stream, reps,
                     &t_fb, &t_pair);
        printf("%6d x %4d x %6d | %d %-32s | %8.2f | %8.2f | %8.2f | %6.0f | %5.2fx | %8.2f | %9.1f MiB", N, C, V, v->id,
               v->name, t_fwd, t_bwd, t_fb, 3 * F / t_fb * 1e-9, t_fb / t_pair, t_pair, scratch);
        int blocks = h.cfg.path == FUSED_LCE_PATH_BLOCKS;
        if (blocks) printf("  (blocks of %d rows x %d columns)", h.blk.nb, h.blk.vb);
        if (h.sm90 && (blocks || h.fused_forward)) printf(blocks ? "  (forward and gradient: wgmma)" : "  (forward: wgmma)");
        if (blocks && h.blk.gemms) printf("  (dx, dW: wgmma_gemm)");
        if (h.cfg.path == FUSED_LCE_PATH_STAGED) printf("  (chunks of %d rows)", h.staged.rows);
        printf("\n");
        if (g_profile) {
            static Profile prof;  // big (an event per mark): not on the stack
            profile_build(&prof, 1);
            GpuContext pctx = *ctx;  // the same GPU context, with the head's marks going to prof
            pctx.prof = &prof;
            for (int r = 0; r < 3; r++) {
                profile_start(&prof, ctx->stream);
                fused_lce_forward_backward(&h, dx, dW, 1.0f, x, W, t, N, &pctx);
                profile_step_end(&prof);
            }
            profile_print(&prof, stdout);
            profile_free(&prof);
        }
        fused_lce_check(&h, ctx);
        fused_lce_free(&h);
    }
    cuda_check(cudaFree(logits)); cuda_check(cudaFree(dWb));
    cuda_check(cudaFree(x)); cuda_check(cudaFree(W)); cuda_check(cudaFree(dx));
    cuda_check(cudaFree(dW)); cuda_check(cudaFree(t)); cuda_check(cudaFree(dloss_rows));
}

int main(int argc, char** argv) {
    int only = 0, check = 1, bench = 1, small = 0, shape = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--check-only")) bench = 0;
        else if (!strcmp(argv[i], "--bench-only")) check = 0;
        else if (!strcmp(argv[i], "--small")) small = 1;
        else if (!strcmp(argv[i], "--scratch") && i + 1 < argc && atoi(argv[i + 1]) > 0) g_scratch = (size_t)atoi(argv[++i]) << 20;
        else if (!strcmp(argv[i], "--profile")) g_profile = 1;
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc) shape = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--vocab-block") && i + 1 < argc && atoi(argv[i + 1]) >= 16) g_vocab_block = atoi(argv[++i]);
        else if (atoi(argv[i]) >= 1 && atoi(argv[i]) <= FUSED_LCE_NUM_VARIANTS) only = atoi(argv[i]);
        else { fprintf(stderr, "usage: %s [variant 1..%d] [--check-only | --bench-only] [--small] [--shape i] [--scratch MiB]\n"
                        "          [--vocab-block N] [--profile]\n", argv[0], FUSED_LCE_NUM_VARIANTS); return 2; }
    }
    GpuContext ctx;
    gpu_context_build(&ctx, 0);
    int ok = 1;
    if (check)
        for (int vi = 0; vi < FUSED_LCE_NUM_VARIANTS; vi++)
            if (!only || FUSED_LCE_VARIANTS[vi].id == only) ok &= check_variant(&FUSED_LCE_VARIANTS[vi], &ctx);
    if (bench) {
        printf("\n%-22s | %-34s | %8s | %8s | %8s | %6s | %6s | %8s | %s\n", "N x C x V", "variant", "fwd ms", "bwd ms",
               "f+b ms", "TF/s", "xGEMMs", "GEMMs ms", "scratch");
        for (size_t i = 0; i < sizeof(BENCH_SHAPES) / sizeof(BENCH_SHAPES[0]); i++)
            if ((!small || BENCH_SHAPES[i].N == 1024) && (shape < 0 || shape == (int)i)) bench_shape(&BENCH_SHAPES[i], only, &ctx);
    }
    gpu_context_free(&ctx);
    if (!ok) { printf("CHECK FAILED\n"); return 1; }
    return 0;
}
