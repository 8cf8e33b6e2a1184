// dev/cuda/attention.cu: the playground of causal-attention variants. Each variant is checked against
// the CPU fp64 reference (dev/ref/attention_check.cuh) at small, awkward sizes, then timed forward,
// backward and forward+backward on the trainer's d12 shape, long-context ones (T = 4096, hs = 128), and
// a grouped-query one (NH = 32 query heads sharing NKV = 8 kv heads, Llama-style).
//
//   build/dev/attention                 check every variant, then benchmark every variant and shape
//   build/dev/attention 3               only variant 3
//   build/dev/attention --check-only    correctness only      (--bench-only: timing only)
//
// Variants:
//   1 naive: (B, NH, T, T) fp32 scores and probabilities in device memory, smem-tiled scalar batched
//     GEMMs and a row softmax (this file; NKV == NH only)
//   2 simple exact: warp per row, no T x T matrix, scalar FMAs (llmc/attention/attention.cuh; T ≤ ~1400)
//   3 flash: mma.sync tiles, online softmax, deterministic 3-kernel backward (llmc/flash_attention*.cuh)
//   4 flash + RoPE passes: RoPE (θ = 5e5) as passes over memory, in place on q and k before the forward
//     and on dq and dk after the backward (llmc/layers/rope.cuh's rope_forward/rope_backward), around variant 3
//   5 flash, RoPE fused: the same math as the model runs it: a pass over the k heads, q rotated inside the
//     forward kernel, dq and dk rotated back in the backward kernels' epilogues; 4 against 5 is what
//     fusing saves (both rotate the timing loop's qkv a little further each repetition: no cost changes)
//   6 wgmma forward (sm_90a): TMA, a producer warp and two consumer warpgroups, P in registers
//     (llmc/attention/flash_attention_sm90.cuh), with variant 3's backward
//   7 wgmma forward and backward (sm_90a): variant 3's three backward kernels and order of sums, the dq
//     and dkdv kernels on TMA and wgmma (llmc/attention/flash_attention_sm90_backward.cuh): what the trainer runs
//     on an H100/H200;
//     its bench line below times the backward with the QKV bias gradient in its epilogues (GPT-2's layer)
//     against the backward and the bias kernel after it
// Columns: F = 4·B·NH·T²·hs/2 (causal, the forward's two GEMMs); TF/s counts fwd F, bwd 2.5F,
// fwd+bwd 3.5F (useful work: the naive variant does twice that); scratch = device memory beyond
// qkv, out, dout and dqkv (lse and D included). A shape NH=32/8 has 32 query heads on 8 kv heads.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../llmc/attention/attention.cuh"
#include "../ref/attention_kernels.cuh"
#include "timing.cuh"

// --- variant 1: naive ------------------------------------------------------------------------

// A strided view of a batch of matrices: element (z, i, j) at (z / NH)·sb + (z % NH)·sh + i·s0 + j·s1.
typedef struct { size_t sb, sh, s0, s1; } View;
__device__ __forceinline__ float ldf(const float* p) { return *p; }
__device__ __forceinline__ float ldf(const bf16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void stf(float* p, float v) { *p = v; }
__device__ __forceinline__ void stf(bf16* p, float v) { *p = __float2bfloat16(v); }

// c[z] (M, N) = alpha · a[z] (M, K) · b[z] (K, N), 16 x 16 output tile per block, fp32 accumulation.
template <typename TC, typename TA, typename TB>
__global__ void naive_bmm_kernel(TC* c, View vc, const TA* a, View va, const TB* b, View vb, int M, int N, int K,
                                 int NH, float alpha) {
    __shared__ float sa[16][17], sb[16][17];
    int tx = threadIdx.x, ty = threadIdx.y, z = blockIdx.z;
    int i = blockIdx.y * 16 + ty, j = blockIdx.x * 16 + tx;
    const TA* az = a + (z / NH) * va.sb + (z % NH) * va.sh;
    const TB* bz = b + (z / NH) * vb.sb + (z % NH) * vb.sh;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += 16) {
        sa[ty][tx] = i < M && k0 + tx < K ? ldf(az + i * va.s0 + (k0 + tx) * va.s1) : 0.0f;
        sb[ty][tx] = k0 + ty < K && j < N ? ldf(bz + (k0 + ty) * vb.s0 + j * vb.s1) : 0.0f;
        __syncthreads();
        for (int k = 0; k < 16; k++) acc += sa[ty][k] * sb[k][tx];
        __syncthreads();
    }
    if (i < M && j < N) stf(c + (z / NH) * vc.sb + (z % NH) * vc.sh + i * vc.s0 + j * vc.s1, alpha * acc);
}

// Block per (z, t) row of att: causal mask, softmax in place, lse. Block reductions: every warp reads
// the per-warp partials by lane, so that all threads end with the block's value.
__global__ void naive_softmax_kernel(float* att, float* lse, int T) {
    __shared__ float red[32];
    size_t row = blockIdx.x;
    int t = (int)(row % T);
    float* a = att + row * T;
    float mx = -INFINITY, sum = 0.0f;
    for (int j = threadIdx.x; j <= t; j += blockDim.x) mx = fmaxf(mx, a[j]);
    mx = warp_reduce_max(mx);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = mx;
    __syncthreads();
    mx = warp_reduce_max(threadIdx.x % 32 < blockDim.x / 32 ? red[threadIdx.x % 32] : -INFINITY);
    __syncthreads();
    for (int j = threadIdx.x; j <= t; j += blockDim.x) sum += expf(a[j] - mx);
    sum = warp_reduce_sum(sum);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = sum;
    __syncthreads();
    sum = warp_reduce_sum(threadIdx.x % 32 < blockDim.x / 32 ? red[threadIdx.x % 32] : 0.0f);
    for (int j = threadIdx.x; j < T; j += blockDim.x) a[j] = j <= t ? expf(a[j] - mx) / sum : 0.0f;
    if (threadIdx.x == 0) lse[row] = mx + logf(sum);
}

// Block per row: D = Σ p·dp, then datt = p (dp − D) in place.
__global__ void naive_softmax_backward_kernel(float* datt, float* D, const float* att, int T) {
    __shared__ float red[32];
    size_t row = blockIdx.x;
    const float* p = att + row * T;
    float* d = datt + row * T;
    float s = 0.0f;
    for (int j = threadIdx.x; j < T; j += blockDim.x) s += p[j] * d[j];
    s = warp_reduce_sum(s);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = s;
    __syncthreads();
    s = warp_reduce_sum(threadIdx.x % 32 < blockDim.x / 32 ? red[threadIdx.x % 32] : 0.0f);
    for (int j = threadIdx.x; j < T; j += blockDim.x) d[j] = p[j] * (d[j] - s);
    if (threadIdx.x == 0) D[row] = s;
}

typedef struct { float *att, *datt; size_t cap; } Naive;  // (B, NH, T, T) fp32 each

static void naive_reserve(Naive* n, size_t elems) {
    if (n->cap >= elems) return;
    if (n->att) { cuda_check(cudaFree(n->att)); cuda_check(cudaFree(n->datt)); }
    cuda_check(cudaMalloc(&n->att, elems * sizeof(float)));
    cuda_check(cudaMalloc(&n->datt, elems * sizeof(float)));
    n->cap = elems;
}

template <typename TC, typename TA, typename TB>
static void naive_bmm(TC* c, View vc, const TA* a, View va, const TB* b, View vb, int M, int N, int K, int Z, int NH,
                      float alpha, cudaStream_t st) {
    naive_bmm_kernel<<<dim3(ceil_div(N, 16), ceil_div(M, 16), Z), dim3(16, 16), 0, st>>>(c, vc, a, va, b, vb, M, N, K, NH, alpha);
    cuda_check_launch();
}

static void naive_forward(void* self, bf16* out, float* lse, bf16* qkv, int B, int T, int C, int NH, int NKV,
                          cudaStream_t st) {
    if (NKV != NH) check_fail("naive attention: NKV != NH", "variant 1 runs multi-head attention only");
    Naive* n = (Naive*)self;
    size_t hs = C / NH, T3C = (size_t)T * 3 * C, TT = (size_t)T * T, C3 = 3 * (size_t)C;
    naive_reserve(n, (size_t)B * NH * TT);
    View vatt = {NH * TT, TT, (size_t)T, 1}, vq = {T3C, hs, C3, 1}, vkT = {T3C, hs, 1, C3}, vout = {(size_t)T * C, hs, (size_t)C, 1};
    naive_bmm(n->att, vatt, qkv, vq, qkv + C, vkT, T, T, (int)hs, B * NH, NH, 1.0f / sqrtf((float)hs), st);
    naive_softmax_kernel<<<B * NH * T, 256, 0, st>>>(n->att, lse, T);
    cuda_check_launch();
    naive_bmm(out, vout, n->att, vatt, qkv + 2 * C, vq, T, (int)hs, T, B * NH, NH, 1.0f, st);
}

static void naive_backward(void* self, bf16* dqkv, float* D, const bf16* dout, const bf16* out, const bf16* qkv,
                           const float* lse, int B, int T, int C, int NH, int NKV, cudaStream_t st) {
    (void)out; (void)lse;  // uses the probabilities that its forward left in att
    if (NKV != NH) check_fail("naive attention: NKV != NH", "variant 1 runs multi-head attention only");
    Naive* n = (Naive*)self;
    size_t hs = C / NH, T3C = (size_t)T * 3 * C, TT = (size_t)T * T, C3 = 3 * (size_t)C;
    View vatt = {NH * TT, TT, (size_t)T, 1}, vattT = {NH * TT, TT, 1, (size_t)T};
    View vq = {T3C, hs, C3, 1}, vkT = {T3C, hs, 1, C3}, vdo = {(size_t)T * C, hs, (size_t)C, 1};
    float scale = 1.0f / sqrtf((float)hs);
    naive_bmm(n->datt, vatt, dout, vdo, qkv + 2 * C, vkT, T, T, (int)hs, B * NH, NH, 1.0f, st);  // dP = dO·Vᵀ
    naive_softmax_backward_kernel<<<B * NH * T, 256, 0, st>>>(n->datt, D, n->att, T);
    cuda_check_launch();
    naive_bmm(dqkv, vq, n->datt, vatt, qkv + C, vq, T, (int)hs, T, B * NH, NH, scale, st);       // dQ = dS·K
    naive_bmm(dqkv + C, vq, n->datt, vattT, qkv, vq, T, (int)hs, T, B * NH, NH, scale, st);      // dK = dSᵀ·Q
    naive_bmm(dqkv + 2 * C, vq, n->att, vattT, dout, vdo, T, (int)hs, T, B * NH, NH, 1.0f, st);  // dV = Pᵀ·dO
}

// --- variants 2 to 5: the llmc/ kernels -------------------------------------------------------

static void simple_forward(void*, bf16* out, float* lse, bf16* qkv, int B, int T, int C, int NH, int NKV,
                           cudaStream_t st) {
    attention_simple_forward(out, lse, qkv, B, T, C, NH, NKV, st);
}
static void simple_backward(void*, bf16* dqkv, float* D, const bf16* dout, const bf16*, const bf16* qkv, const float* lse,
                            int B, int T, int C, int NH, int NKV, cudaStream_t st) {
    attention_simple_backward(dqkv, D, dout, qkv, lse, B, T, C, NH, NKV, st);
}

// RoPE's table for the variants that rotate: one, grown to the largest T asked for at a head size.
#define BENCH_ROPE_THETA 5e5
static float* rope_table(int T, int hs, cudaStream_t st) {
    static float* table = NULL;
    static int table_T = 0, table_hs = 0;
    if (table && table_T >= T && table_hs == hs) return table;
    if (table) cuda_check(cudaFree(table));
    cuda_check(cudaMalloc(&table, (size_t)T * hs * sizeof(float)));
    GpuContext c;
    memset(&c, 0, sizeof(c));
    c.stream = st;
    rope_table_fill(table, T, hs, BENCH_ROPE_THETA, &c);
    table_T = T;
    table_hs = hs;
    return table;
}
static GpuContext on_stream(cudaStream_t st) {
    GpuContext c;
    memset(&c, 0, sizeof(c));
    c.stream = st;
    return c;
}
static void rope_pass_forward(void*, bf16* out, float* lse, bf16* qkv, int B, int T, int C, int NH, int NKV,
                              cudaStream_t st) {
    GpuContext c = on_stream(st);
    rope_forward(qkv, rope_table(T, C / NH, st), B, T, NH, NKV, C / NH, &c);
    flash_attention_forward(out, lse, qkv, NULL, B, T, C, NH, NKV, st);
}
static void rope_pass_backward(void*, bf16* dqkv, float* D, const bf16* dout, const bf16* out, const bf16* qkv,
                               const float* lse, int B, int T, int C, int NH, int NKV, cudaStream_t st) {
    GpuContext c = on_stream(st);
    flash_attention_backward(dqkv, D, dout, out, qkv, NULL, lse, B, T, C, NH, NKV, st);
    rope_backward(dqkv, rope_table(T, C / NH, st), B, T, NH, NKV, C / NH, &c);
}
static void rope_fused_forward(void*, bf16* out, float* lse, bf16* qkv, int B, int T, int C, int NH, int NKV,
                               cudaStream_t st) {
    flash_attention_forward(out, lse, qkv, rope_table(T, C / NH, st), B, T, C, NH, NKV, st);
}
static void rope_fused_backward(void*, bf16* dqkv, float* D, const bf16* dout, const bf16* out, const bf16* qkv,
                                const float* lse, int B, int T, int C, int NH, int NKV, cudaStream_t st) {
    flash_attention_backward(dqkv, D, dout, out, qkv, rope_table(T, C / NH, st), lse, B, T, C, NH, NKV, st);
}

typedef struct { int id; const char* name; AttFwdFn fwd; AttBwdFn bwd; double theta; } Variant;
static const Variant VARIANTS[] = {
    {1, "naive (B,NH,T,T) fp32 scores", naive_forward, naive_backward, 0},
    {2, "simple exact (llmc/attention)", simple_forward, simple_backward, 0},
    {3, "flash mma.sync (llmc/flash_attn)", att_flash_forward, att_flash_backward, 0},
    {4, "flash + RoPE passes (llmc/rope)", rope_pass_forward, rope_pass_backward, BENCH_ROPE_THETA},
    {5, "flash, RoPE fused", rope_fused_forward, rope_fused_backward, BENCH_ROPE_THETA},
    {6, "wgmma fwd (sm_90a), flash bwd", att_sm90_forward, att_flash_backward, 0},
    {7, "wgmma fwd and bwd (sm_90a)", att_sm90_forward, att_sm90_backward, 0},
};
#define NUM_VARIANTS ((int)(sizeof(VARIANTS) / sizeof(VARIANTS[0])))

// what each variant can run, without letting its launcher exit
static int variant_supports(int id, int T, int NH, int NKV, int hs) {
    if (NKV < 1 || NH % NKV != 0) return 0;
    if (id == 1) return NKV == NH;
    if (id == 2) return hs % 8 == 0 && hs <= 256 && (size_t)ATT_WARPS * (2 * hs + 2 * T) * sizeof(float) <= 48 * 1024;
    if (id == 6 || id == 7) return flash_sm90_available() && (hs == 64 || hs == 128);
    if (id >= 3) return hs == 64 || hs == 128;
    return 1;
}
static size_t variant_scratch(int id, int B, int T, int NH) {
    size_t rows = (size_t)B * NH * T * 2 * sizeof(float);  // lse and D
    return id == 1 ? rows + 2 * (size_t)B * NH * T * T * sizeof(float) : rows;
}

// --- correctness -------------------------------------------------------------------------------

typedef struct { int B, T, NH, NKV, hs; } Shape;

static int check_variant(const Variant* v, cudaStream_t st) {
    const Shape shapes[] = {{1, 100, 1, 1, 64}, {2, 257, 3, 3, 64}, {2, 64, 2, 2, 64}, {1, 100, 1, 1, 128},
                            {2, 257, 1, 1, 128}, {1, 1, 1, 1, 64}, {2, 100, 4, 2, 64}, {1, 257, 8, 1, 128}};
    Naive naive = {NULL, NULL, 0};
    int ok = 1;
    printf("variant %d (%s): checks against the fp64 reference (rel L2 tol %.0e, lse abs %.0e)\n", v->id, v->name,
           ATT_TOL_GRAD, ATT_TOL_LSE);
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        Shape s = shapes[i];
        if (!variant_supports(v->id, s.T, s.NH, s.NKV, s.hs)) continue;
        AttCheck r = att_check_rope(v->fwd, v->bwd, &naive, s.B, s.T, s.NH, s.NKV, s.hs, v->theta, 77 + i, st);
        int good = att_check_ok(&r, 1);
        printf("  B=%d T=%4d NH=%d NKV=%d hs=%3d: %s\n", s.B, s.T, s.NH, s.NKV, s.hs, good ? "ok" : "FAILED");
        att_check_print(&r, 1);
        ok &= good;
    }
    if (naive.att) { cuda_check(cudaFree(naive.att)); cuda_check(cudaFree(naive.datt)); }
    return ok;
}

// --- timing ------------------------------------------------------------------------------------

__global__ void fill_uniform_kernel(bf16* p, size_t n, float scale, uint64_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = __float2bfloat16(scale * att_hash_uniform(seed, i));
}

// Variant 7's backward with the QKV layer's bias gradient (the trainer's GPT-2 path): summed in the dq
// and dkdv kernels' epilogues (then the partial rows added up), against the same backward followed by
// the bias kernel over dqkv (llmc/layers/column_sums.cuh). t_b: the backward alone, as timed above.
static void bench_qkv_bias(const bf16* qkv, bf16* dqkv, const bf16* out, const bf16* dout, const float* lse, float* D,
                           int B, int T, int NH, int NKV, int hs, float t_b, cudaStream_t st) {
    int C = NH * hs, W = C + 2 * NKV * hs, rows = B * ceil_div(T, FA90_BQ);
    float *db, *scratch;
    cuda_check(cudaMalloc(&db, W * sizeof(float)));
    cuda_check(cudaMalloc(&scratch, attention_bias_scratch(B, T, W) * sizeof(float)));
    cuda_check(cudaMemsetAsync(db, 0, W * sizeof(float), st));
    ColumnSumsOut to = {{db, NULL, NULL}};
    float t_in = time_ms([&] {
        flash_sm90_backward(dqkv, D, dout, out, qkv, NULL, lse, scratch, B, T, C, NH, NKV, st);
        column_sums_finish(to, scratch, rows, W, 1, st);
    }, st, 20);
    float t_after = time_ms([&] {
        flash_sm90_backward(dqkv, D, dout, out, qkv, NULL, lse, NULL, B, T, C, NH, NKV, st);
        column_sums_bf16(db, dqkv, B * T, W, scratch, st);
    }, st, 20);
    printf("%-26s |   with the qkv bias gradient       | %8s | %8.3f in the epilogues (%+.3f), %.3f with the bias "
           "kernel after it (%+.3f)\n", "", "", t_in, t_in - t_b, t_after, t_after - t_b);
    cuda_check(cudaFree(db)); cuda_check(cudaFree(scratch));
}

static void bench_shape(const Shape* s, int only, cudaStream_t st) {
    int B = s->B, T = s->T, NH = s->NH, NKV = s->NKV, hs = s->hs, C = NH * hs;
    size_t nqkv = (size_t)B * T * (C + 2 * NKV * hs), nout = (size_t)B * T * C, nrow = (size_t)B * NH * T;
    bf16 *qkv, *dqkv, *out, *dout;
    float *lse, *D;
    cuda_check(cudaMalloc(&qkv, nqkv * sizeof(bf16)));
    cuda_check(cudaMalloc(&dqkv, nqkv * sizeof(bf16)));
    cuda_check(cudaMalloc(&out, nout * sizeof(bf16)));
    cuda_check(cudaMalloc(&dout, nout * sizeof(bf16)));
    cuda_check(cudaMalloc(&lse, nrow * sizeof(float)));
    cuda_check(cudaMalloc(&D, nrow * sizeof(float)));
    fill_uniform_kernel<<<1024, 256, 0, st>>>(qkv, nqkv, 2.0f, 1);
    fill_uniform_kernel<<<1024, 256, 0, st>>>(dout, nout, 1.0f, 2);
    cuda_check_launch();
    double F = 4.0 * B * NH * (double)T * T * hs / 2;
    for (int vi = 0; vi < NUM_VARIANTS; vi++) {
        const Variant* v = &VARIANTS[vi];
        if (only && v->id != only) continue;
        char shape[64];
        if (NKV == NH) snprintf(shape, sizeof(shape), "B=%d T=%d NH=%d hs=%d", B, T, NH, hs);
        else snprintf(shape, sizeof(shape), "B=%d T=%d NH=%d/%d hs=%d", B, T, NH, NKV, hs);
        if (!variant_supports(v->id, T, NH, NKV, hs)) {
            printf("%-26s | %d %-32s | not supported at this T / hs / NKV\n", shape, v->id, v->name);
            continue;
        }
        Naive naive = {NULL, NULL, 0};
        int reps = v->id >= 3 ? 20 : 5;
        float t_f = time_ms([&] { v->fwd(&naive, out, lse, qkv, B, T, C, NH, NKV, st); }, st, reps);
        float t_b = time_ms([&] { v->bwd(&naive, dqkv, D, dout, out, qkv, lse, B, T, C, NH, NKV, st); }, st, reps);
        float t_fb = time_ms([&] {
            v->fwd(&naive, out, lse, qkv, B, T, C, NH, NKV, st);
            v->bwd(&naive, dqkv, D, dout, out, qkv, lse, B, T, C, NH, NKV, st);
        }, st, reps);
        printf("%-26s | %d %-32s | %8.3f | %8.3f | %8.3f | %6.0f | %6.0f | %6.0f | %9.1f MiB\n", shape, v->id, v->name,
               t_f, t_b, t_fb, F / t_f * 1e-9, 2.5 * F / t_b * 1e-9, 3.5 * F / t_fb * 1e-9,
               (double)variant_scratch(v->id, B, T, NH) / (1 << 20));
        if (v->id == 7) bench_qkv_bias(qkv, dqkv, out, dout, lse, D, B, T, NH, NKV, hs, t_b, st);
        if (naive.att) { cuda_check(cudaFree(naive.att)); cuda_check(cudaFree(naive.datt)); }
    }
    cuda_check(cudaFree(qkv)); cuda_check(cudaFree(dqkv)); cuda_check(cudaFree(out));
    cuda_check(cudaFree(dout)); cuda_check(cudaFree(lse)); cuda_check(cudaFree(D));
}

int main(int argc, char** argv) {
    int only = 0, check = 1, bench = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--check-only")) bench = 0;
        else if (!strcmp(argv[i], "--bench-only")) check = 0;
        else if (atoi(argv[i]) >= 1 && atoi(argv[i]) <= NUM_VARIANTS) only = atoi(argv[i]);
        else { fprintf(stderr, "usage: %s [variant 1..%d] [--check-only | --bench-only]\n", argv[0], NUM_VARIANTS); return 2; }
    }
    GpuContext ctx;
    gpu_context_build(&ctx, 0);
    int ok = 1;
    if (check)
        for (int vi = 0; vi < NUM_VARIANTS; vi++)
            if (!only || VARIANTS[vi].id == only) ok &= check_variant(&VARIANTS[vi], ctx.stream);
    if (bench) {
        // grouped-query attention: 32 query heads on 8 kv heads (qkv 48 heads wide, not 96); the last two
        // are llama-125m's and llama-1b's attention (llmc/model/spec.h) at B·T = 65536
        const Shape shapes[] = {{64, 1024, 12, 12, 64}, {4, 4096, 16, 16, 128}, {4, 4096, 32, 32, 128},
                                {4, 4096, 32, 8, 128}, {64, 1024, 12, 3, 64}, {64, 1024, 16, 4, 128}};
        printf("\n%-26s | %-34s | %8s | %8s | %8s | %6s | %6s | %6s | %s\n", "shape", "variant", "fwd ms", "bwd ms",
               "f+b ms", "fwdTF", "bwdTF", "f+b TF", "scratch");
        for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) bench_shape(&shapes[i], only, ctx.stream);
    }
    gpu_context_free(&ctx);
    if (!ok) { printf("CHECK FAILED\n"); return 1; }
    return 0;
}
