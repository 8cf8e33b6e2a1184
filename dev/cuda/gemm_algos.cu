// dev/cuda/gemm_algos.cu: cuBLASLt's candidate algorithms for the trainer's linear-layer GEMMs (the
// forward with its bias, dx (through GELU' for the fc projection), dW accumulated in fp32), each timed,
// described (tile, stages, split-k, reduction scheme, swizzle, cluster shape) and hashed: whether its
// result is bitwise the same as the heuristic's first pick. `-gemm_tune 1` (llmc/layers/matmul.cuh) takes the
// fastest candidate that is bitwise the same.
//   build/dev/gemm_algos            N = 65536, C = 768 (GPT-2 124M at B = 64, T = 1024)
//   build/dev/gemm_algos N C
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../llmc/layers/matmul.cuh"
#include "fill.cuh"
#include "timing.cuh"

static unsigned long long hash_bytes(const void* p, size_t bytes) {
    unsigned long long* slot;
    cuda_check(cudaMalloc(&slot, sizeof(*slot)));
    unsigned long long h = matmul_hash(p, bytes, slot, 0);
    cuda_check(cudaFree(slot));
    return h;
}

static void describe_algo(const cublasLtMatmulAlgo_t* a, char* out, size_t n) {
    uint32_t tile = 0, stages = 0, swz = 0, cluster = 0, red = 0;
    int32_t splitk = 0, id = 0;
    size_t w;
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof(stages), &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof(splitk), &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof(red), &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz, sizeof(swz), &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof(cluster), &w);
    snprintf(out, n, "algo %2d tile %2u stages %2u splitk %d red %u swz %u cluster %2u", id, tile, stages, splitk, red,
             swz, cluster);
}

// Every candidate of one GEMM: D (M, N) of d_type, row stride ldd, from A, B as matmul_plan_make's
// arguments; beta 1: D starts from zeros before each run, so the hashes compare.
static void sweep(const char* name, cudaDataType_t d_type, int ldd, const bf16* A, int lda, int trans_a, const bf16* B,
                  int ldb, int trans_b, int M, int N, int K, float beta, const MatmulEpilogue* ep, void* D,
                  const GpuContext* ctx) {
    MatmulPlan p;
    matmul_plan_describe(&p, d_type, ldd, lda, trans_a, ldb, trans_b, M, N, K, ep ? ep->kind : MATMUL_EPILOGUE_NONE,
                         ep ? ep->ld_aux : 0);
    cublasLtMatmulHeuristicResult_t cand[16];
    int n = matmul_plan_candidates(&p, ctx, 16, cand);
    size_t bytes = (size_t)M * N * (d_type == CUDA_R_32F ? 4 : 2);
    printf("\n%s: M = %d, N = %d, K = %d, %s D%s\n", name, M, N, K, d_type == CUDA_R_32F ? "fp32" : "bf16",
           beta != 0.0f ? " accumulated" : "");
    unsigned long long h0 = 0;
    float t0 = 0;
    for (int i = 0; i < n; i++) {
        p.algo = cand[i].algo;
        cuda_check(cudaMemsetAsync(D, 0, bytes, ctx->stream));
        matmul_plan_run(&p, ctx, D, A, B, 1.0f, beta, ep);
        cuda_check(cudaStreamSynchronize(ctx->stream));
        unsigned long long h = hash_bytes(D, bytes);
        float ms = time_ms([&] { matmul_plan_run(&p, ctx, D, A, B, 1.0f, beta, ep); }, ctx->stream, 10);
        if (i == 0) { h0 = h; t0 = ms; }
        char desc[128];
        describe_algo(&cand[i].algo, desc, sizeof(desc));
        printf("  #%-2d %s | %7.3f ms %5.2fx | %s\n", i, desc, ms, ms / t0, h == h0 ? "same bits" : "other bits");
    }
    matmul_plan_free(&p);
}

int main(int argc, char** argv) {
    int N = 65536, C = 768;
    if (argc == 3) { N = atoi(argv[1]); C = atoi(argv[2]); }
    if (argc != 1 && argc != 3) { fprintf(stderr, "usage: %s [N C]\n", argv[0]); return 2; }
    if (N <= 0 || C <= 0 || C % 8 != 0) { fprintf(stderr, "error: need N > 0 and C a positive multiple of 8\n"); return 2; }
    GpuContext ctx;
    gpu_context_build(&ctx, 0);
    size_t big = (size_t)N * 4 * C;
    bf16* x = alloc_filled(big, 1.0f, 1);   // a layer's input, up to (N, 4C)
    bf16* dy = alloc_filled(big, 0.01f, 2); // a layer's output gradient, up to (N, 4C)
    bf16* u = alloc_filled(big, 1.0f, 3);   // the GELU's input
    bf16* W = alloc_filled((size_t)4 * C * C, 0.02f, 4);
    bf16* b = alloc_filled(4 * C, 0.02f, 5);
    void* D;
    cuda_check(cudaMalloc(&D, big * sizeof(float)));
    struct { const char* name; int IC, OC, gelu; } layers[] = {
        {"qkv", C, 3 * C, 0}, {"attproj", C, C, 0}, {"fc", C, 4 * C, 0}, {"fcproj", 4 * C, C, 1}};
    for (auto& l : layers) {
        char nm[64];
        MatmulEpilogue eb = {MATMUL_EPILOGUE_BIAS, b, NULL, 0};
        snprintf(nm, sizeof(nm), "%s forward (bias)", l.name);
        sweep(nm, CUDA_R_16BF, l.OC, x, l.IC, 0, W, l.IC, 1, N, l.OC, l.IC, 0.0f, &eb, D, &ctx);
        MatmulEpilogue eg = {MATMUL_EPILOGUE_DGELU, NULL, u, l.IC};
        snprintf(nm, sizeof(nm), "%s dx%s", l.name, l.gelu ? " (DGELU)" : "");
        sweep(nm, CUDA_R_16BF, l.IC, dy, l.OC, 0, W, l.IC, 0, N, l.IC, l.OC, 0.0f, l.gelu ? &eg : NULL, D, &ctx);
        snprintf(nm, sizeof(nm), "%s dW", l.name);
        sweep(nm, CUDA_R_32F, l.IC, dy, l.OC, 1, x, l.IC, 0, l.OC, l.IC, N, 1.0f, NULL, D, &ctx);
    }
    bf16* bufs[] = {x, dy, u, W, b};
    for (bf16* q : bufs) cuda_check(cudaFree(q));
    cuda_check(cudaFree(D));
    gpu_context_free(&ctx);
    return 0;
}
