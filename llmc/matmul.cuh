// matmul.cuh: row-major GEMMs through cuBLASLt.
//   D (M, N) = alpha * op(A) (M, K) * op(B) (K, N) + beta * D
// A is stored (M, K) row-major, or (K, M) when trans_a; B is stored (K, N), or (N, K) when trans_b
// (so `x (M, K) times W (N, K) transposed`, the linear layer, is trans_b = 1). lda/ldb/ldd are row
// strides in elements. Inputs are bf16; D is bf16 or fp32 (fp32 D accumulates in place with beta = 1);
// accumulation is always fp32. cuBLASLt is column-major, so the call computes D^T = op(B)^T op(A)^T.
#pragma once
#include "cuda_common.cuh"

// matmul_ex: the general form. bias (N,) bf16, or NULL: added to every row of D in cuBLASLt's epilogue
// (the linear layer's forward, y = x Wᵀ + b, in one GEMM; needs a bf16 D). dgelu_at (M, N) bf16 with row
// stride ld_dgelu, or NULL: the product is multiplied elementwise by GELU'(dgelu_at) before it is
// stored (cuBLASLt's DGELU epilogue, GPT-2's tanh GELU: the MLP's backward through the GELU in the GEMM
// that produces its input gradient). At most one of the two.
static inline void matmul_ex(const GpuContext* ctx, void* D, cudaDataType_t d_type, int ldd,
                             const bf16* A, int lda, int trans_a, const bf16* B, int ldb, int trans_b,
                             int M, int N, int K, float alpha, float beta, const bf16* bias,
                             const bf16* dgelu_at, int ld_dgelu) {
    cublasLtMatmulDesc_t op;
    cublas_check(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // first column-major operand is B
    cublasOperation_t tb = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublas_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    cublas_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    if (bias) {
        // column-major D is (N, M): the bias runs along its rows, i.e. along our columns
        cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
        cublas_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep)));
        cublas_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    } else if (dgelu_at) {
        // the auxiliary matrix has D's column-major shape (N, M), leading dimension ld_dgelu
        cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_DGELU;
        int64_t ld = ld_dgelu;
        cudaDataType_t at = CUDA_R_16BF;
        cublas_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep)));
        cublas_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &dgelu_at, sizeof(dgelu_at)));
        cublas_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
        cublas_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &at, sizeof(at)));
    }
    // column-major shapes as stored: B^T-view is (N, K) or (K, N); A^T-view is (K, M) or (M, K)
    cublasLtMatrixLayout_t la, lb, ld;
    cublas_check(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, trans_b ? K : N, trans_b ? N : K, ldb));
    cublas_check(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, trans_a ? M : K, trans_a ? K : M, lda));
    cublas_check(cublasLtMatrixLayoutCreate(&ld, d_type, N, M, ldd));
    cublasLtMatmulPreference_t pref;
    cublas_check(cublasLtMatmulPreferenceCreate(&pref));
    cublas_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &ctx->lt_workspace_bytes, sizeof(ctx->lt_workspace_bytes)));
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    cublas_check(cublasLtMatmulAlgoGetHeuristic(ctx->lt, op, la, lb, ld, ld, pref, 1, &heur, &found));
    if (found == 0) {
        fprintf(stderr, "error: cuBLASLt has no algorithm for M=%d N=%d K=%d (trans_a=%d trans_b=%d, lda=%d ldb=%d ldd=%d)\n"
                "  hint: sizes and leading dimensions should be multiples of 8\n", M, N, K, trans_a, trans_b, lda, ldb, ldd);
        exit(EXIT_FAILURE);
    }
    cublas_check(cublasLtMatmul(ctx->lt, op, &alpha, B, la, A, lb, &beta, D, ld, D, ld, &heur.algo,
                                ctx->lt_workspace, ctx->lt_workspace_bytes, ctx->stream));
    cublas_check(cublasLtMatmulPreferenceDestroy(pref));
    cublas_check(cublasLtMatrixLayoutDestroy(la));
    cublas_check(cublasLtMatrixLayoutDestroy(lb));
    cublas_check(cublasLtMatrixLayoutDestroy(ld));
    cublas_check(cublasLtMatmulDescDestroy(op));
}

// plus bias (N,) bf16 added to every row (bias == NULL: plain matmul)
static inline void matmul_bias(const GpuContext* ctx, void* D, cudaDataType_t d_type, int ldd,
                               const bf16* A, int lda, int trans_a, const bf16* B, int ldb, int trans_b,
                               int M, int N, int K, float alpha, float beta, const bf16* bias) {
    matmul_ex(ctx, D, d_type, ldd, A, lda, trans_a, B, ldb, trans_b, M, N, K, alpha, beta, bias, NULL, 0);
}

static inline void matmul(const GpuContext* ctx, void* D, cudaDataType_t d_type, int ldd,
                          const bf16* A, int lda, int trans_a, const bf16* B, int ldb, int trans_b,
                          int M, int N, int K, float alpha, float beta) {
    matmul_ex(ctx, D, d_type, ldd, A, lda, trans_a, B, ldb, trans_b, M, N, K, alpha, beta, NULL, NULL, 0);
}
