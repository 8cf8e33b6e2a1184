// matmul.cuh: row-major GEMMs through cuBLASLt.
//   D (M, N) = alpha * op(A) (M, K) * op(B) (K, N) + beta * D
// A is stored (M, K) row-major, or (K, M) when trans_a; B is stored (K, N), or (N, K) when trans_b
// (so `x (M, K) times W (N, K) transposed`, the linear layer, is trans_b = 1). lda/ldb/ldd are row
// strides in elements. Inputs are bf16; D is bf16 or fp32 (fp32 D accumulates in place with beta = 1);
// accumulation is always fp32. cuBLASLt is column-major, so the call computes D^T = op(B)^T op(A)^T.
#pragma once
#include "../core/cuda_common.cuh"

// The epilogues: what cuBLASLt does with the fp32 product before D is stored, and what else it writes
// (row and column are the row-major D's). A run passes their pointers in a MatmulEpilogue.
enum {
    MATMUL_EPILOGUE_NONE = 0,
    MATMUL_EPILOGUE_BIAS,           // + bias (N,) bf16 on every row (the linear forward)
    MATMUL_EPILOGUE_GELU_AUX_BIAS,  // u = product + bias (N,) bf16 is stored to aux (M, N) bf16, D = GELU(u)
    MATMUL_EPILOGUE_DGELU,          // ⊙ GELU'(aux), aux (M, N) bf16 (the MLP's backward through its GELU)
    MATMUL_EPILOGUE_BGRAD_A,        // bias (M,) fp32 = Σ over k of op(A) (M, K), written (a linear layer's
                                    // bias gradient in its dW GEMM: op(A) = dyᵀ)
    MATMUL_EPILOGUE_DGELU_BGRAD,    // DGELU, and bias (N,) bf16 = Σ over the rows of the bf16 D, written (the
                                    // fc layer's bias gradient from the fc projection's dx GEMM; cuBLASLt 13
                                    // has no algorithm for it with an fp32 bias)
};
typedef struct {
    int kind;          // MATMUL_EPILOGUE_*
    const void* bias;  // BIAS, GELU_AUX_BIAS: the bias; BGRAD_A, DGELU_BGRAD: where the bias gradient goes
    const void* aux;   // GELU_AUX_BIAS: u, written; DGELU, DGELU_BGRAD: the GELU's input, read
    int ld_aux;        // aux's row stride in elements
} MatmulEpilogue;

// A plan (MatmulPlan, llmc/core/cuda_common.cuh: a context keeps the plans it tuned): cuBLASLt's
// descriptors and the algorithm its heuristic picked for one GEMM shape.

// The plan's descriptors, without an algorithm yet
static inline void matmul_plan_describe(MatmulPlan* p, cudaDataType_t d_type, int ldd, int lda, int trans_a,
                                        int ldb, int trans_b, int M, int N, int K, int epilogue, int ld_aux) {
    p->d_type = d_type; p->ldd = ldd; p->lda = lda; p->trans_a = trans_a; p->ldb = ldb; p->trans_b = trans_b;
    p->M = M; p->N = N; p->K = K; p->epilogue = epilogue; p->ld_aux = ld_aux;
    cublas_check(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // first column-major operand is B
    cublasOperation_t tb = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublas_check(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    cublas_check(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    if (epilogue != MATMUL_EPILOGUE_NONE) {
        // cuBLASLt sees the column-major D^T (N, M): its rows are our columns, along which the bias runs
        // (and its columns are cuBLASLt's first operand, our B: our op(A)'s sum over k is its BGRADB)
        static const cublasLtEpilogue_t lt_ep[] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS,
                                                   CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DGELU,
                                                   CUBLASLT_EPILOGUE_BGRADB, CUBLASLT_EPILOGUE_DGELU_BGRAD};
        cublasLtEpilogue_t ep = lt_ep[epilogue];
        cublas_check(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep)));
        if (epilogue == MATMUL_EPILOGUE_BGRAD_A) {  // an fp32 gradient
            cudaDataType_t bt = CUDA_R_32F;
            cublas_check(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
        }
        if (epilogue != MATMUL_EPILOGUE_BIAS && epilogue != MATMUL_EPILOGUE_BGRAD_A) {  // aux has D's shape, row stride ld_aux
            int64_t ld = ld_aux;
            cudaDataType_t at = CUDA_R_16BF;
            cublas_check(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
            cublas_check(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &at, sizeof(at)));
        }
    }
    // column-major shapes as stored: B^T-view is (N, K) or (K, N); A^T-view is (K, M) or (M, K)
    cublas_check(cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, trans_b ? K : N, trans_b ? N : K, ldb));
    cublas_check(cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, trans_a ? M : K, trans_a ? K : M, lda));
    cublas_check(cublasLtMatrixLayoutCreate(&p->ld, d_type, N, M, ldd));
}

// Up to n algorithms for the described plan, the heuristic's best first; returns how many it found (0
// also when cuBLASLt does not support the combination at all)
static inline int matmul_plan_candidates(const MatmulPlan* p, const GpuContext* ctx, int n,
                                         cublasLtMatmulHeuristicResult_t* out) {
    cublasLtMatmulPreference_t pref;
    cublas_check(cublasLtMatmulPreferenceCreate(&pref));
    cublas_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &ctx->lt_workspace_bytes, sizeof(ctx->lt_workspace_bytes)));
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(ctx->lt, p->op, p->la, p->lb, p->ld, p->ld, pref, n, out, &found);
    cublas_check(cublasLtMatmulPreferenceDestroy(pref));
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) return 0;
    cublas_check(st);
    return found;
}

static inline void matmul_plan_make(MatmulPlan* p, const GpuContext* ctx, cudaDataType_t d_type, int ldd,
                                    int lda, int trans_a, int ldb, int trans_b, int M, int N, int K,
                                    int epilogue, int ld_aux) {
    matmul_plan_describe(p, d_type, ldd, lda, trans_a, ldb, trans_b, M, N, K, epilogue, ld_aux);
    cublasLtMatmulHeuristicResult_t heur;
    if (matmul_plan_candidates(p, ctx, 1, &heur) == 0)
        check_failf("sizes and leading dimensions should be multiples of 8", "cuBLASLt has no algorithm for M=%d N=%d "
                    "K=%d (trans_a=%d trans_b=%d, lda=%d ldb=%d ldd=%d, epilogue %d)", M, N, K, trans_a, trans_b, lda,
                    ldb, ldd, epilogue);
    p->algo = heur.algo;
    p->waves = heur.wavesCount;
}

// whether plan q is for this GEMM shape (its key)
static inline int matmul_plan_matches(const MatmulPlan* q, cudaDataType_t d_type, int ldd, int lda, int trans_a,
                                      int ldb, int trans_b, int M, int N, int K, int epilogue, int ld_aux) {
    return q->d_type == d_type && q->ldd == ldd && q->lda == lda && q->trans_a == trans_a && q->ldb == ldb &&
           q->trans_b == trans_b && q->M == M && q->N == N && q->K == K && q->epilogue == epilogue &&
           q->ld_aux == ld_aux;
}

// ep: the pointers of the plan's epilogue (NULL when it has none). Returns cuBLASLt's status.
static inline cublasStatus_t matmul_plan_try(const MatmulPlan* p, const GpuContext* ctx, void* D, const bf16* A,
                                             const bf16* B, float alpha, float beta, const MatmulEpilogue* ep) {
    if (p->epilogue != MATMUL_EPILOGUE_NONE) {
        if (!ep || ep->kind != p->epilogue) check_fail("matmul: the epilogue's pointers do not match its plan", "a bug in the caller");
        if (ep->bias)
            cublas_check(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ep->bias, sizeof(ep->bias)));
        if (ep->aux)
            cublas_check(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &ep->aux, sizeof(ep->aux)));
    }
    return cublasLtMatmul(ctx->lt, p->op, &alpha, B, p->la, A, p->lb, &beta, D, p->ld, D, p->ld, &p->algo,
                          ctx->lt_workspace, ctx->lt_workspace_bytes, ctx->stream);
}

// matmul_plan_try, exiting on an error
static inline void matmul_plan_run(const MatmulPlan* p, const GpuContext* ctx, void* D, const bf16* A,
                                   const bf16* B, float alpha, float beta, const MatmulEpilogue* ep) {
    cublas_check(matmul_plan_try(p, ctx, D, A, B, alpha, beta, ep));
}

// --- tuning: the fastest algorithm that gives the heuristic's bits --------------------------------
// cuBLASLt's heuristic pick is not always its fastest candidate (dev/cuda/gemm_algos.cu: the fc
// projection's dx GEMM with the GELU backward runs 10% faster on its third candidate on an H200).
// With ctx->gemm_tune, the first call of each GEMM shape runs the heuristic's first MATMUL_TUNE_CANDIDATES
// candidates on the call's own operands, hashes each result, times those whose result is bitwise the
// first candidate's, and keeps the fastest of them on the context. A candidate must also split K as
// the first does (the same split-k count and reduction scheme): another summation order could give the
// first call's bits by luck (a small bf16 output has few roundings to tell) and others' not. So tuning
// changes the time, never the numbers, and a run resumed in another process computes the same bits. A
// candidate that fails to run is passed over. D is saved and restored around the trials when beta != 0
// (the caller's own run comes after). Epilogues that write beyond D (GELU_AUX_BIAS, BGRAD_A,
// DGELU_BGRAD) are not tuned. The tuned plans are the context's (ctx->gemm_tuned), not locked: one
// thread uses a context at a time.
#define MATMUL_TUNE_CANDIDATES 8
#define MATMUL_TUNE_REPS 3

// an order-independent 64-bit hash of n 16-bit words (a bf16 D of odd length counts whole), added into
// *out: Σ mix(word, index) mod 2^64
__global__ void matmul_hash_kernel(unsigned long long* out, const uint16_t* w, size_t n) {
    unsigned long long acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned long long x = ((unsigned long long)w[i] << 48 | (i & 0xFFFFFFFFFFFFull)) * 0x9E3779B97F4A7C15ull;
        acc += x ^ (x >> 29);
    }
    atomicAdd(out, acc);  // integer addition: the same sum in any order
}

// the hash of the first bytes (even) at p (slot: one device word of scratch)
static inline unsigned long long matmul_hash(const void* p, size_t bytes, unsigned long long* slot, cudaStream_t st) {
    unsigned long long h = 0;
    cuda_check(cudaMemsetAsync(slot, 0, sizeof(h), st));
    matmul_hash_kernel<<<512, 256, 0, st>>>(slot, (const uint16_t*)p, bytes / 2);
    cuda_check_launch();
    cuda_check(cudaMemcpyAsync(&h, slot, sizeof(h), cudaMemcpyDeviceToHost, st));
    cuda_check(cudaStreamSynchronize(st));
    return h;
}

// how the algorithm splits K: its split-k count and reduction scheme, in one number
static inline unsigned long long matmul_algo_split(const cublasLtMatmulAlgo_t* algo) {
    int32_t splits = 1;
    uint32_t scheme = 0;
    size_t got = 0;
    cublas_check(cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits), &got));
    cublas_check(cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                                      sizeof(scheme), &got));
    return (unsigned long long)(uint32_t)splits << 32 | scheme;
}

// The tuning rule: of n candidates with result hashes hash[] and times ms[], the fastest whose hash is
// candidate 0's (0 when none is faster). A candidate that was not timed (another split, a failed run,
// other bits) has ms = INFINITY.
static inline int matmul_tune_pick(int n, const unsigned long long* hash, const float* ms) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (hash[i] == hash[0] && ms[i] < ms[best]) best = i;
    return best;
}

// Sets p->algo by the rule above, trying the candidates on this call's operands (see above).
static inline void matmul_plan_tune(MatmulPlan* p, const GpuContext* ctx, void* D, const bf16* A, const bf16* B,
                                    float alpha, float beta, const MatmulEpilogue* ep) {
    if (p->epilogue == MATMUL_EPILOGUE_GELU_AUX_BIAS || p->epilogue == MATMUL_EPILOGUE_BGRAD_A ||
        p->epilogue == MATMUL_EPILOGUE_DGELU_BGRAD)
        return;
    cublasLtMatmulHeuristicResult_t cand[MATMUL_TUNE_CANDIDATES];
    int n = matmul_plan_candidates(p, ctx, MATMUL_TUNE_CANDIDATES, cand);
    if (n <= 1) return;
    cudaStream_t st = ctx->stream;
    size_t bytes = ((size_t)(p->M - 1) * p->ldd + p->N) * (p->d_type == CUDA_R_32F ? 4 : 2);
    void* saved = NULL;
    unsigned long long* slot = NULL;
    if (cudaMalloc(&slot, sizeof(*slot)) != cudaSuccess ||
        (beta != 0.0f && cudaMalloc(&saved, bytes) != cudaSuccess)) {  // no room: the heuristic's pick
        cudaGetLastError();
        if (slot) cuda_check(cudaFree(slot));
        return;
    }
    if (saved) cuda_check(cudaMemcpyAsync(saved, D, bytes, cudaMemcpyDeviceToDevice, st));
    cudaEvent_t e0, e1;
    cuda_check(cudaEventCreate(&e0));
    cuda_check(cudaEventCreate(&e1));
    unsigned long long hash[MATMUL_TUNE_CANDIDATES], split0 = matmul_algo_split(&cand[0].algo);
    float ms[MATMUL_TUNE_CANDIDATES];
    for (int i = 0; i < n; i++) {
        p->algo = cand[i].algo;
        hash[i] = i == 0 ? 0 : ~hash[0];  // unless it runs: not candidate 0's
        ms[i] = INFINITY;
        if (i > 0 && matmul_algo_split(&cand[i].algo) != split0) continue;
        if (saved) cuda_check(cudaMemcpyAsync(D, saved, bytes, cudaMemcpyDeviceToDevice, st));
        if (matmul_plan_try(p, ctx, D, A, B, alpha, beta, ep) != CUBLAS_STATUS_SUCCESS) {
            cudaGetLastError();
            if (i == 0) { n = 1; break; }  // the heuristic's own pick fails: the caller's run will say so
            continue;
        }
        hash[i] = matmul_hash(D, bytes, slot, st);
        if (hash[i] != hash[0]) continue;
        for (int r = 0; r < MATMUL_TUNE_REPS; r++) {  // the fastest of a few runs (D's values do not matter now)
            float t;
            cuda_check(cudaEventRecord(e0, st));
            matmul_plan_run(p, ctx, D, A, B, alpha, beta, ep);
            cuda_check(cudaEventRecord(e1, st));
            cuda_check(cudaEventSynchronize(e1));
            cuda_check(cudaEventElapsedTime(&t, e0, e1));
            ms[i] = fminf(ms[i], t);
        }
    }
    int best = matmul_tune_pick(n, hash, ms);
    p->algo = cand[best].algo;
    p->waves = cand[best].wavesCount;
    if (saved) cuda_check(cudaMemcpyAsync(D, saved, bytes, cudaMemcpyDeviceToDevice, st));
    cuda_check(cudaStreamSynchronize(st));
    cuda_check(cudaEventDestroy(e0));
    cuda_check(cudaEventDestroy(e1));
    if (saved) cuda_check(cudaFree(saved));
    cuda_check(cudaFree(slot));
}

// The context's tuned plan for this shape (ctx->gemm_tuned, MATMUL_TUNED_PLANS of them, kept until
// gpu_context_free), tuned now on this call's operands if it is the shape's first call on the context;
// NULL when the table is full or the context has none (the caller plans as without tuning).
static inline MatmulPlan* matmul_tuned_plan(const GpuContext* ctx, void* D, cudaDataType_t d_type, int ldd,
                                            const bf16* A, int lda, int trans_a, const bf16* B, int ldb, int trans_b,
                                            int M, int N, int K, float alpha, float beta, const MatmulEpilogue* ep) {
    MatmulTuned* t = ctx->gemm_tuned;
    if (!t) return NULL;
    int epi = ep ? ep->kind : MATMUL_EPILOGUE_NONE, ld_aux = ep ? ep->ld_aux : 0;
    for (int i = 0; i < t->n; i++)
        if (matmul_plan_matches(&t->plan[i], d_type, ldd, lda, trans_a, ldb, trans_b, M, N, K, epi, ld_aux))
            return &t->plan[i];
    if (t->n == MATMUL_TUNED_PLANS) return NULL;
    MatmulPlan* p = &t->plan[t->n++];
    matmul_plan_make(p, ctx, d_type, ldd, lda, trans_a, ldb, trans_b, M, N, K, epi, ld_aux);
    matmul_plan_tune(p, ctx, D, A, B, alpha, beta, ep);
    return p;
}

// matmul_ex: the general form, with an epilogue (ep NULL: none). BIAS needs a bf16 D (the linear layer's
// forward, y = x Wᵀ + b, in one GEMM); GELU_AUX_BIAS too (the MLP's first layer and its GELU in one
// GEMM, as the trainer runs it at -recompute 0: linear_forward_gelu, llmc/layers/linear.cuh); DGELU:
// GPT-2's tanh GELU (cuBLASLt's GELU is the same tanh form), the MLP's backward through the GELU in the
// GEMM that produces its input gradient. Plans the GEMM anew on every call (the heuristic
// costs microseconds of CPU); loops of many small GEMMs keep a MatmulCache instead.
static inline void matmul_ex(const GpuContext* ctx, void* D, cudaDataType_t d_type, int ldd,
                             const bf16* A, int lda, int trans_a, const bf16* B, int ldb, int trans_b,
                             int M, int N, int K, float alpha, float beta, const MatmulEpilogue* ep) {
    if (ctx->gemm_tune) {
        MatmulPlan* t = matmul_tuned_plan(ctx, D, d_type, ldd, A, lda, trans_a, B, ldb, trans_b, M, N, K, alpha, beta, ep);
        if (t) { matmul_plan_run(t, ctx, D, A, B, alpha, beta, ep); return; }
    }
    MatmulPlan p;
    matmul_plan_make(&p, ctx, d_type, ldd, lda, trans_a, ldb, trans_b, M, N, K, ep ? ep->kind : MATMUL_EPILOGUE_NONE,
                     ep ? ep->ld_aux : 0);
    matmul_plan_run(&p, ctx, D, A, B, alpha, beta, ep);
    matmul_plan_free(&p);
}

// A few plans kept for a loop that repeats the same shapes (the LM head's blocks: a dozen shapes,
// thousands of calls per step). Full: the oldest plan is replaced.
#define MATMUL_CACHE_PLANS 16
typedef struct {
    MatmulPlan plan[MATMUL_CACHE_PLANS];
    int n, next;
} MatmulCache;

static inline void matmul_cache_build(MatmulCache* c) { c->n = 0; c->next = 0; }

static inline void matmul_cache_free(MatmulCache* c) {
    for (int i = 0; i < c->n; i++) matmul_plan_free(&c->plan[i]);
    c->n = 0; c->next = 0;
}

// matmul (no epilogue) through the cache: same arguments as matmul below, plus the cache.
static inline void matmul_cached(const GpuContext* ctx, MatmulCache* c, void* D, cudaDataType_t d_type, int ldd,
                                 const bf16* A, int lda, int trans_a, const bf16* B, int ldb, int trans_b,
                                 int M, int N, int K, float alpha, float beta) {
    MatmulPlan* p = NULL;
    for (int i = 0; i < c->n && !p; i++)
        if (matmul_plan_matches(&c->plan[i], d_type, ldd, lda, trans_a, ldb, trans_b, M, N, K, MATMUL_EPILOGUE_NONE, 0))
            p = &c->plan[i];
    if (!p) {
        if (c->n < MATMUL_CACHE_PLANS) p = &c->plan[c->n++];
        else { p = &c->plan[c->next]; c->next = (c->next + 1) % MATMUL_CACHE_PLANS; matmul_plan_free(p); }
        matmul_plan_make(p, ctx, d_type, ldd, lda, trans_a, ldb, trans_b, M, N, K, MATMUL_EPILOGUE_NONE, 0);
        if (ctx->gemm_tune) matmul_plan_tune(p, ctx, D, A, B, alpha, beta, NULL);
    }
    matmul_plan_run(p, ctx, D, A, B, alpha, beta, NULL);
}

// plus bias (N,) bf16 added to every row (bias == NULL: plain matmul)
static inline void matmul_bias(const GpuContext* ctx, void* D, cudaDataType_t d_type, int ldd,
                               const bf16* A, int lda, int trans_a, const bf16* B, int ldb, int trans_b,
                               int M, int N, int K, float alpha, float beta, const bf16* bias) {
    MatmulEpilogue ep = {MATMUL_EPILOGUE_BIAS, bias, NULL, 0};
    matmul_ex(ctx, D, d_type, ldd, A, lda, trans_a, B, ldb, trans_b, M, N, K, alpha, beta, bias ? &ep : NULL);
}

static inline void matmul(const GpuContext* ctx, void* D, cudaDataType_t d_type, int ldd,
                          const bf16* A, int lda, int trans_a, const bf16* B, int ldb, int trans_b,
                          int M, int N, int K, float alpha, float beta) {
    matmul_ex(ctx, D, d_type, ldd, A, lda, trans_a, B, ldb, trans_b, M, N, K, alpha, beta, NULL);
}
