// fused_lce.cuh: the language-model head loss, CE(x · Wᵀ, targets), and its gradients, without ever
// holding the (N, V) logits: tokens are processed in chunks whose fp32 logits fit a fixed scratch
// buffer (64 MiB by default), so memory does not grow with N.
//
// Per chunk of `chunk` rows (variant 2 of dev/cuda/fused_lce.cu, "gradient in the forward pass"):
//   1. logits (chunk, Vp) fp32 = x_c · Wᵀ               cuBLASLt, bf16 in, fp32 accumulate and out
//   2. one block per row: max, Σexp, lse, loss in fp32; then the gradient dL/dz, rounded once to bf16,
//      is written IN PLACE over the row's fp32 logits (row stride 2·Vp bf16 elements)
//   3. dx_c (chunk, C) bf16 = G · W                     cuBLASLt
//   4. dW (Vp, C) fp32    += Gᵀ · x_c                   cuBLASLt, beta = 1
// FLOPs 3F (F = 2·N·C·V) when the gradient comes with the forward pass; 4F for forward then backward.
// Bytes per chunk beyond the GEMM operands: logits written 4 B and read 8 B per element, G written 2 B
// and read 4 B, plus dW read+written once per chunk (8·Vp·C B): the last term is why bigger chunks
// are faster. When the buffer holds few rows (under 512: 64 MiB holds 320 at V = 50304), the
// two-dimensional blocks of fused_lce_blocks.cuh are faster (fused_lce_use_blocks; the trainer picks
// with fused_lce_use_fastest): dW swept once per ~3000-row block, for a second logits GEMM (4F).
//
// Semantics (shared with the CPU reference dev/cuda/fused_lce_ref.h): rows j >= V never count; s_j =
// softcap·tanh(z_j/softcap) when softcap > 0; lse = log Σ exp(s_j); loss_i = lse − (1−ε)·s_t − (ε/V)·Σ s_j
// + z_loss·lse²; ignored rows (target == ignore_index) have loss 0 and no gradient; the mean is over the
// N_valid other rows (0 when there are none). dL/ds_j = scale·(p_j·(1 + 2·z_loss·lse) − (1−ε)·[j=t] − ε/V)
// with scale = dloss/N_valid (or a per-row upstream gradient), times 1 − tanh² under softcap.
// A target outside [0, V) that is not ignore_index makes its row count as ignored and raises a device
// error flag that fused_lce_check() reports (no host synchronisation inside the step).
#pragma once
#include "cuda_common.cuh"
#include "matmul.cuh"
#include "fused_lce_options.h"
#include "fused_lce_mma.cuh"
#include "fused_lce_mma_backward.cuh"
#include "fused_lce_blocks.cuh"
#include "fused_lce_wgmma.cuh"
#include "profile.h"

#define FLCE_ROW_THREADS 512
#define FLCE_DEFAULT_SCRATCH (64u << 20)

typedef struct {
    int max_n, C, V, Vp;
    int sm_count;          // of the GPU the head was built on
    FlceOptions opt;
    int chunk;             // rows per chunk
    int logits_fp32;       // 1: fp32 logits (fused head); 0: bf16 logits for all rows at once (unfused baseline)
    int mma_forward;       // loss-only calls use the fully fused kernel of fused_lce_mma.cuh (no logits at all)
    int wgmma;             // 1 (Hopper, sm_90a build): that forward, and the blocks' pass 1, run the wgmma
                           // kernel of fused_lce_wgmma.cuh instead
    int rows_smem;         // bytes of shared memory the row kernel stages an fp32 row in (0: too wide)
    int fused_backward;    // 0: the chunks above; 3 or 4: the fused backward of fused_lce_mma_backward.cuh
                           // (atomics, or deterministic), dx accumulating in the logits buffer; see
                           // fused_lce_use_fused_backward
    int blocks;            // 1: the two-dimensional blocks of fused_lce_blocks.cuh instead of the chunks, in the
                           // same buffer (see fused_lce_use_blocks)
    FlceBlocks blk;        // their layout, when blocks
    int own_gemms;         // 1: with wgmma, the blocks' dx and dW GEMMs by wgmma_gemm.cuh (fused_lce_use_own_gemms)
    float* part;           // (part_floats) per-split row statistics of that kernel
    size_t part_floats;
    void* logits;          // (chunk, Vp) fp32 or bf16, overwritten in place by the bf16 gradient; or the blocks' buffers
    float* loss_rows;      // (max_n) fp32 per-row loss (also the caller's output when it asks for it)
    float* lse;            // (max_n) fp32 per-row logsumexp
    float* loss;           // (1) fp32 mean loss over valid rows
    int* n_valid;          // (1) rows that count
    int* error;            // (1) first bad target index + 1, 0 when all targets were in range
    size_t logits_bytes;   // the size of that buffer
    size_t budget;         // what the build was given to bound it
    size_t scratch_bytes;  // logits buffer, the memory this head adds beyond inputs and gradients
    Profile* prof;         // NULL, or where the chunk loop marks its phases (llmc/profile.h)
} FusedLce;

// --- kernels ---------------------------------------------------------------------------------

// One block: counts rows that count, flags targets out of range (the first bad index + 1).
__global__ void flce_count_kernel(int* n_valid, int* error, const int* targets, int N, int V, int ignore_index) {
    __shared__ int block_sum[32];
    int count = 0;
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        int t = targets[i];
        if (t == ignore_index) continue;
        if (t < 0 || t >= V) { atomicCAS(error, 0, i + 1); continue; }
        count++;
    }
    for (int o = 16; o > 0; o >>= 1) count += __shfl_xor_sync(0xffffffffu, count, o);
    if ((threadIdx.x & 31) == 0) block_sum[threadIdx.x >> 5] = count;
    __syncthreads();
    if (threadIdx.x == 0) {
        int total = 0;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) total += block_sum[w];
        *n_valid = total;
    }
}

// One block per row. Pass 1 reads the row's logits (fp32 or bf16) and forms max, Σexp, Σs; pass 2, when
// `grad` is set, reads them again and writes the bf16 gradient over them. For fp32 logits the gradient
// of element j lands on bytes [2j, 2j+2), i.e. on fp32 element j/2: each step reads a span, waits at a
// barrier, then writes the half-width span, which only covers elements read in this or earlier steps.
// staged (fp32 rows whose Vp floats fit the block's shared memory): pass 1 also copies the row into
// shared memory and pass 2 reads it from there, so the row leaves DRAM once, not twice (a chunk's 64 MiB
// of logits do not stay in the 50 MB L2 between the passes), and no barrier is needed per span. Every
// thread reads back only the spans it wrote (same mapping in both passes).
template <typename T>
__global__ void __launch_bounds__(FLCE_ROW_THREADS)
flce_rows_kernel(void* logits_v, float* loss_rows, float* lse_out, const int* targets, const int* n_valid,
                 const float* dloss_rows, float dloss, int V, int Vp, FlceOptions opt, int grad, int staged) {
    extern __shared__ __align__(16) float srow[];  // (Vp) when staged
    int row = blockIdx.x;
    T* z = (T*)logits_v + (size_t)row * Vp;
    bf16* g = (bf16*)logits_v + (size_t)row * (sizeof(T) / sizeof(bf16)) * Vp;  // in place, same row start
    int t = targets[row];
    int ignored = flce_ignored(t, opt, V);
    float cap = opt.softcap, inv_cap = cap > 0.0f ? 1.0f / cap : 0.0f;

    // pass 1: online max and Σexp per thread, then across the block. A thread takes spans of 8 consecutive
    // logits (16-byte loads; Vp % 8 == 0 keeps every row start aligned), two spans per step: four loads in
    // flight before any arithmetic.
    const int per = 8, stride = FLCE_ROW_THREADS * per;
    float m = -INFINITY, s = 0.0f, sum = 0.0f;
    for (int j0 = threadIdx.x * per; j0 < V; j0 += 2 * stride) {
        float v[2][per];
        flce_load8(v[0], z + j0);
        if (j0 + stride < V) flce_load8(v[1], z + j0 + stride);
        if (staged) {
            for (int k = 0; k < per; k++) srow[j0 + k] = v[0][k];
            if (j0 + stride < V) for (int k = 0; k < per; k++) srow[j0 + stride + k] = v[1][k];
        }
        for (int u = 0; u < 2; u++) {
            int j = j0 + u * stride;
            float vm = -INFINITY;
            for (int k = 0; k < per; k++) {
                if (cap > 0.0f) v[u][k] = cap * flce_tanh(v[u][k] * inv_cap);
                if (j + k >= V) v[u][k] = -INFINITY;  // padded columns, and a second span past the end
                vm = fmaxf(vm, v[u][k]);
            }
            if (vm > m) { s *= __expf(m - vm); m = vm; }
            for (int k = 0; k < per; k++)
                if (j + k < V) { s += __expf(v[u][k] - m); sum += v[u][k]; }
        }
    }
    flce_block_reduce(&m, &s, &sum);
    float lse = m + logf(s);
    float st = 0.0f;
    if (!ignored) { st = flce_load(z + t); if (cap > 0.0f) st = cap * flce_tanh(st * inv_cap); }
    if (threadIdx.x == 0) {
        lse_out[row] = lse;
        loss_rows[row] = ignored ? 0.0f : flce_row_loss(lse, st, sum, opt, V);
    }
    if (!grad) return;

    // pass 2: dL/dz, scaled, rounded once to bf16
    int nv = *n_valid;
    float scale = ignored ? 0.0f : (dloss_rows ? dloss_rows[row] : (nv > 0 ? dloss / nv : 0.0f));
    FlceRowGrad rg = flce_row_grad(lse, t, scale, opt, V);
    for (int j0 = 0; j0 < Vp; j0 += blockDim.x * per) {  // per elements per thread: one 16-byte bf16 store
        int j = j0 + threadIdx.x * per;
        float v[per];
        if (staged) {
            if (j < Vp) for (int k = 0; k < per; k++) v[k] = srow[j + k];  // entries >= V are never used
        } else {
            if (j < Vp) flce_load8(v, z + j);
            if (sizeof(T) > sizeof(bf16)) __syncthreads();  // every read of this span precedes any write
        }
        for (int k = 0; k < per; k++) v[k] = j + k < V ? flce_dlogit(rg, v[k], j + k) : 0.0f;
        if (j + per <= Vp) {
            __align__(16) bf16 out[per];
            for (int k = 0; k < per; k++) out[k] = __float2bfloat16(v[k]);
            *(uint4*)(g + j) = *(uint4*)out;
        } else {
            for (int k = 0; k < per && j + k < Vp; k++) g[j + k] = __float2bfloat16(v[k]);
        }
    }
}

// One block: mean of the per-row losses over the valid rows, in a fixed order (deterministic).
__global__ void flce_mean_kernel(float* loss, const float* loss_rows, const int* n_valid, int N) {
    float acc = 0.0f;
    for (int i = threadIdx.x; i < N; i += blockDim.x) acc += loss_rows[i];
    __shared__ float part[32];
    acc = warp_reduce_sum(acc);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        float total = 0.0f;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) total += part[w];
        *loss = *n_valid > 0 ? total / *n_valid : 0.0f;
    }
}

// --- launchers -------------------------------------------------------------------------------

// Sizes everything up front. scratch_budget bounds the logits buffer (fp32 head); logits_fp32 = 0 builds
// the unfused baseline instead (bf16 logits for all max_n rows, the memory the fused head avoids).
static inline void fused_lce_build(FusedLce* h, int max_n, int C, int V, int Vp, FlceOptions opt,
                                   int logits_fp32, size_t scratch_budget) {
    if (max_n <= 0 || C <= 0 || C % 8 != 0 || V <= 0 || V > Vp || Vp % 8 != 0) {
        fprintf(stderr, "error: fused_lce_build: bad sizes max_n=%d C=%d V=%d Vp=%d\n"
                "  hint: need max_n > 0, C and Vp multiples of 8 (cuBLASLt alignment), 0 < V <= Vp\n", max_n, C, V, Vp);
        exit(EXIT_FAILURE);
    }
    if (opt.softcap < 0.0f || opt.z_loss < 0.0f || opt.label_smoothing < 0.0f || opt.label_smoothing >= 1.0f) {
        fprintf(stderr, "error: fused_lce_build: softcap (%g) and z_loss (%g) must be >= 0, label_smoothing (%g) in [0, 1)\n",
                opt.softcap, opt.z_loss, opt.label_smoothing);
        exit(EXIT_FAILURE);
    }
    h->max_n = max_n; h->C = C; h->V = V; h->Vp = Vp; h->opt = opt; h->logits_fp32 = logits_fp32;
    h->prof = NULL;
    h->fused_backward = 0;
    h->blocks = 0;
    h->own_gemms = 0;
    if (logits_fp32) {
        size_t rows = scratch_budget / ((size_t)Vp * sizeof(float));
        if (rows < 16) {
            fprintf(stderr, "error: fused_lce_build: a scratch budget of %zu bytes holds fewer than 16 rows of %d fp32 logits\n",
                    scratch_budget, Vp);
            exit(EXIT_FAILURE);
        }
        rows = rows / 16 * 16;  // keeps chunk offsets 16-byte aligned for every C
        h->chunk = (int)(rows < (size_t)max_n ? rows : (size_t)max_n);
    } else {
        h->chunk = max_n;
    }
    // the fused forward writes (splits, N, 3) floats; splits·N <= 2·SMs·BM + N + BM (see flce_mma_splits)
    int dev, sms, smem_optin;
    cuda_check(cudaGetDevice(&dev));
    cuda_check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    cuda_check(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    h->sm_count = sms;
    // the row kernel stages an fp32 row in shared memory when it fits (Vp = 50304: 197 KiB of 227 on an H200)
    size_t row_bytes = (size_t)Vp * sizeof(float) + 1024;  // + the block reduction's static arrays
    h->rows_smem = logits_fp32 && row_bytes <= (size_t)smem_optin ? (int)((size_t)Vp * sizeof(float)) : 0;
    if (h->rows_smem)
        cuda_check(cudaFuncSetAttribute(flce_rows_kernel<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, h->rows_smem));
    h->mma_forward = logits_fp32 && C % FLCE_MMA_BK == 0;
    h->wgmma = h->mma_forward && flce_wgmma_available();
    if (h->wgmma) flce_wgmma_setup();
    h->part_floats = h->mma_forward ? 3 * ((size_t)2 * sms * FLCE_MMA_BM + max_n + FLCE_MMA_BM) : 1;
    size_t wg_floats = h->wgmma ? flce_wgmma_part_floats(max_n, V, sms) : 0;
    if (wg_floats > h->part_floats) h->part_floats = wg_floats;
    cuda_check(cudaMalloc(&h->part, h->part_floats * sizeof(float)));
    h->budget = scratch_budget;
    h->logits_bytes = (size_t)h->chunk * Vp * (logits_fp32 ? sizeof(float) : sizeof(bf16));
    h->scratch_bytes = h->logits_bytes + h->part_floats * sizeof(float);
    cuda_check(cudaMalloc(&h->logits, h->logits_bytes));
    cuda_check(cudaMalloc(&h->loss_rows, (size_t)max_n * sizeof(float)));
    cuda_check(cudaMalloc(&h->lse, (size_t)max_n * sizeof(float)));
    cuda_check(cudaMalloc(&h->loss, sizeof(float)));
    cuda_check(cudaMalloc(&h->n_valid, sizeof(int)));
    cuda_check(cudaMalloc(&h->error, sizeof(int)));
    cuda_check(cudaMemset(h->error, 0, sizeof(int)));
    cuda_check(cudaDeviceSynchronize());  // that memset ran on the legacy stream, which a non-blocking one does not wait for
}

static inline void fused_lce_free(FusedLce* h) {
    if (h->blocks) flce_blocks_free(&h->blk);
    cuda_check(cudaFree(h->logits));
    cuda_check(cudaFree(h->part));
    cuda_check(cudaFree(h->loss_rows));
    cuda_check(cudaFree(h->lse));
    cuda_check(cudaFree(h->loss));
    cuda_check(cudaFree(h->n_valid));
    cuda_check(cudaFree(h->error));
}

// The shared loop: per chunk, logits GEMM, row kernel, and (when dx != NULL) the two gradient GEMMs.
static void flce_run(FusedLce* h, bf16* dx, float* dW, const float* dloss_rows, float dloss,
                     const bf16* x, const bf16* W, const int* targets, int N, const GpuContext* ctx) {
    if (N <= 0 || N > h->max_n) {
        fprintf(stderr, "error: fused_lce: N=%d rows, the head was built for 1..%d\n", N, h->max_n);
        exit(EXIT_FAILURE);
    }
    int C = h->C, Vp = h->Vp, grad = dx != NULL;
    flce_count_kernel<<<1, 1024, 0, ctx->stream>>>(h->n_valid, h->error, targets, N, h->V, h->opt.ignore_index);
    cuda_check_launch();
    if (h->blocks) {
        // pass 1 (lse of every row) in one fused kernel on Hopper; else in the blocks
        if (h->wgmma) {
            flce_wgmma_forward(h->loss_rows, h->lse, h->part, h->part_floats, x, W, targets, N, C, h->V, Vp, h->opt,
                               ctx);
            profile_mark(h->prof, "head: forward (wgmma)", ctx->stream);
        }
        if (grad || !h->wgmma)
            flce_blocks_run(&h->blk, h->loss_rows, h->lse, dx, dW, dloss_rows, dloss, h->n_valid, x, W, targets, N,
                            C, h->V, Vp, h->opt, h->wgmma, h->prof, ctx);
        flce_mean_kernel<<<1, 1024, 0, ctx->stream>>>(h->loss, h->loss_rows, h->n_valid, N);
        cuda_check_launch();
        return;
    }
    cudaDataType_t ltype = h->logits_fp32 ? CUDA_R_32F : CUDA_R_16BF;
    int ldg = h->logits_fp32 ? 2 * Vp : Vp;  // row stride of the in-place bf16 gradient
    for (int r0 = 0; r0 < N; r0 += h->chunk) {
        int n = N - r0 < h->chunk ? N - r0 : h->chunk;
        matmul(ctx, h->logits, ltype, Vp, x + (size_t)r0 * C, C, 0, W, C, 1, n, Vp, C, 1.0f, 0.0f);
        profile_mark(h->prof, "head: logits GEMM", ctx->stream);
        const float* dlr = dloss_rows ? dloss_rows + r0 : NULL;
        if (h->logits_fp32)
            flce_rows_kernel<float><<<n, FLCE_ROW_THREADS, h->rows_smem, ctx->stream>>>(h->logits, h->loss_rows + r0,
                h->lse + r0, targets + r0, h->n_valid, dlr, dloss, h->V, Vp, h->opt, grad, h->rows_smem > 0);
        else
            flce_rows_kernel<bf16><<<n, FLCE_ROW_THREADS, 0, ctx->stream>>>(h->logits, h->loss_rows + r0, h->lse + r0,
                targets + r0, h->n_valid, dlr, dloss, h->V, Vp, h->opt, grad, 0);
        cuda_check_launch();
        profile_mark(h->prof, "head: softmax rows", ctx->stream);
        if (!grad) continue;
        const bf16* G = (const bf16*)h->logits;
        matmul(ctx, dx + (size_t)r0 * C, CUDA_R_16BF, C, G, ldg, 0, W, C, 0, n, C, Vp, 1.0f, 0.0f);
        profile_mark(h->prof, "head: dx GEMM", ctx->stream);
        matmul(ctx, dW, CUDA_R_32F, C, G, ldg, 1, x + (size_t)r0 * C, C, 0, Vp, C, n, 1.0f, 1.0f);
        profile_mark(h->prof, "head: dW GEMM", ctx->stream);
    }
    flce_mean_kernel<<<1, 1024, 0, ctx->stream>>>(h->loss, h->loss_rows, h->n_valid, N);
    cuda_check_launch();
}

// Variants 3 and 4 of the playground instead of the chunks: forward and backward without any logits in
// memory (4F and 5F of work; slower than the chunks today, see dev/cuda/fused_lce_log.md). Needs
// C % 64 == 0.
static inline void fused_lce_use_fused_backward(FusedLce* h, int deterministic) {
    if (!h->mma_forward) check_fail("fused_lce_use_fused_backward: needs the fused forward (fp32 head, C % 64 == 0, not the blocks)",
                                    "use the chunked head");
    h->fused_backward = deterministic ? 4 : 3;
}

static inline void fused_lce_forward(FusedLce* h, const bf16* x, const bf16* W, const int* targets, int N,
                                     const GpuContext* ctx);

// Variant 5 of the playground instead of the chunks: rows and vocabulary in blocks (fused_lce_blocks.cuh),
// vocab blocks at most vb_max wide (0: flce_plan_vocab_max, wider for few rows on Hopper), carved from
// the same buffer. Every entry point then goes through them.
static inline void fused_lce_use_blocks(FusedLce* h, int vb_max) {
    if (!h->logits_fp32) check_fail("fused_lce_use_blocks: needs the fused head (fp32 logits)", "build it with logits_fp32 = 1");
    if (h->blocks) flce_blocks_free(&h->blk);
    // within the budget: the blocks, the per-row loss and lse, and the wgmma forward's statistics (the
    // mma.sync forward's go: the blocks replace it)
    cuda_check(cudaFree(h->part));
    h->part = NULL;
    h->part_floats = 0;
    int sms = h->sm_count;
    if (h->wgmma) {  // only what the wgmma forward needs (the mma.sync forward's bound can be far larger)
        h->part_floats = flce_wgmma_part_floats(h->max_n, h->V, sms);
        cuda_check(cudaMalloc(&h->part, h->part_floats * sizeof(float)));
    }
    size_t rows_bytes = (2 * (size_t)h->max_n + h->part_floats) * sizeof(float);
    size_t budget = h->budget > rows_bytes ? h->budget - rows_bytes : 0;
    if (vb_max == 0) vb_max = flce_plan_vocab_max(h->max_n, budget, h->C, h->wgmma);
    size_t bytes = vb_max < 16 ? 0 : flce_blocks_plan(&h->blk, budget, h->max_n, h->C, h->V, vb_max, h->wgmma,
                                                           h->own_gemms, sms);
    if (bytes == 0) {
        fprintf(stderr, "error: fused_lce_use_blocks: a scratch budget of %zu bytes holds fewer than 16 rows of vocab "
                "blocks of %d columns and C = %d\n  hint: a larger budget, or a smaller vb_max (at least 16)\n",
                h->budget, vb_max, h->C);
        exit(EXIT_FAILURE);
    }
    // the buffer is re-cut for the blocks (it may grow up to the budget when max_n is small)
    cuda_check(cudaFree(h->logits));
    cuda_check(cudaMalloc(&h->logits, bytes));
    h->mma_forward = 0;  // loss-only calls go through the blocks' pass 1 too; the fused backward is off
    h->fused_backward = 0;
    h->logits_bytes = bytes;
    h->scratch_bytes = bytes + h->part_floats * sizeof(float);
    flce_blocks_carve(&h->blk, h->logits, h->C);
    if (h->blk.own_gemms) wg_gemm_setup();
    h->blocks = 1;
}

// On Hopper (wgmma), the blocks' dx and dW GEMMs by our own kernel (llmc/wgmma_gemm.cuh: persistent, a
// block's two GEMMs in one launch, the copy engine adding each tile into the fp32 accumulator, tiles of
// 128 x 128/192/256 counted exactly by the layout) instead of cuBLASLt: variant 6 of the playground,
// within ~3% of variant 5 either way (README, Results). Takes effect at the next fused_lce_use_blocks;
// without wgmma it changes nothing.
static inline void fused_lce_use_own_gemms(FusedLce* h) { h->own_gemms = 1; }

// The faster of the two cuBLASLt paths for the buffer the build sized, as measured on an H200
// (dev/cuda/fused_lce_log.md): the blocks while a chunk holds fewer than FLCE_CHUNK_ROWS_MIN rows and not
// all of them (64 MiB holds 320 rows at V = 50304, 128 at V = 128256), the chunks from there on, where the
// per-chunk dW sweep has become cheaper than the blocks' second logits GEMM (at 512 MiB and C = 768:
// 1.45x the GEMMs against 1.96x).
#define FLCE_CHUNK_ROWS_MIN 512
static inline void fused_lce_use_fastest(FusedLce* h) {
    if (h->logits_fp32 && h->chunk < FLCE_CHUNK_ROWS_MIN && h->chunk < h->max_n) fused_lce_use_blocks(h, 0);
}

// The fused path: lse from the fused forward, then the gradient tiles recomputed and used on the chip.
static void flce_run_fused(FusedLce* h, bf16* dx, float* dW, const float* dloss_rows, float dloss,
                           const bf16* x, const bf16* W, const int* targets, int N, const GpuContext* ctx) {
    fused_lce_forward(h, x, W, targets, N, ctx);
    flce_mma_backward(dx, dW, h->logits, h->logits_bytes, h->lse, h->n_valid, dloss_rows,
                      dloss, x, W, targets, N, h->C, h->V, h->opt, h->fused_backward == 4, ctx);
}

// Training: mean loss (h->loss), per-row loss and lse (h->loss_rows, h->lse), dx (N, C) bf16 written,
// dW (Vp, C) fp32 accumulated, for the upstream gradient dloss of the mean (1 in training). 3F.
static inline void fused_lce_forward_backward(FusedLce* h, bf16* dx, float* dW, float dloss,
                                              const bf16* x, const bf16* W, const int* targets, int N,
                                              const GpuContext* ctx) {
    if (h->fused_backward) flce_run_fused(h, dx, dW, NULL, dloss, x, W, targets, N, ctx);
    else flce_run(h, dx, dW, NULL, dloss, x, W, targets, N, ctx);
}

// Loss only (eval, or when the caller needs the loss before it knows the upstream gradient). F, through
// the fully fused kernel (no logits in memory) when C % 64 == 0, else through the chunks.
static inline void fused_lce_forward(FusedLce* h, const bf16* x, const bf16* W, const int* targets, int N,
                                     const GpuContext* ctx) {
    if (!h->mma_forward) { flce_run(h, NULL, NULL, NULL, 0.0f, x, W, targets, N, ctx); return; }
    if (N <= 0 || N > h->max_n) {
        fprintf(stderr, "error: fused_lce: N=%d rows, the head was built for 1..%d\n", N, h->max_n);
        exit(EXIT_FAILURE);
    }
    flce_count_kernel<<<1, 1024, 0, ctx->stream>>>(h->n_valid, h->error, targets, N, h->V, h->opt.ignore_index);
    cuda_check_launch();
    if (h->wgmma)
        flce_wgmma_forward(h->loss_rows, h->lse, h->part, h->part_floats, x, W, targets, N, h->C, h->V, h->Vp, h->opt,
                           ctx);
    else
        flce_mma_forward(h->loss_rows, h->lse, h->part, x, W, targets, N, h->C, h->V, h->Vp, h->opt, ctx);
    flce_mean_kernel<<<1, 1024, 0, ctx->stream>>>(h->loss, h->loss_rows, h->n_valid, N);
    cuda_check_launch();
}

// Recomputing backward with a per-row upstream gradient dloss_rows (N) fp32 (per-token weights). 3F more.
static inline void fused_lce_backward(FusedLce* h, bf16* dx, float* dW, const float* dloss_rows,
                                      const bf16* x, const bf16* W, const int* targets, int N,
                                      const GpuContext* ctx) {
    if (h->fused_backward) flce_run_fused(h, dx, dW, dloss_rows, 0.0f, x, W, targets, N, ctx);
    else flce_run(h, dx, dW, dloss_rows, 0.0f, x, W, targets, N, ctx);
}

// The first row whose target was outside [0, V) and not ignore_index, since the build; -1 if none.
// Synchronises the stream: call it where the loop synchronises anyway (e.g. when printing the loss).
static inline int fused_lce_bad_target_row(const FusedLce* h, const GpuContext* ctx) {
    int err = 0;
    cuda_check(cudaMemcpyAsync(&err, h->error, sizeof(int), cudaMemcpyDeviceToHost, ctx->stream));
    cuda_check(cudaStreamSynchronize(ctx->stream));
    return err - 1;
}

// Exits with a message naming the row when a bad target was seen.
static inline void fused_lce_check(const FusedLce* h, const GpuContext* ctx) {
    int row = fused_lce_bad_target_row(h, ctx);
    if (row >= 0) {
        fprintf(stderr, "error: fused_lce: target of row %d is outside [0, %d) and is not ignore_index (%d)\n"
                "  hint: the token data does not match the vocabulary size\n", row, h->V, h->opt.ignore_index);
        exit(EXIT_FAILURE);
    }
}
