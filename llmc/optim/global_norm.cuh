// global_norm.cuh: the L2 norm of the step's gradient, the clipping scale and the step's flags, computed
// on the device in fp32, over the parts of a ZeRO plan (llmc/optim/zero.cuh) and added across the ranks:
//   out[0] = ‖g‖,  out[1] = clip / ‖g‖ when ‖g‖ > clip > 0, else 1 (llm.c's rule, no epsilon),
//   out[2] = 1 when ‖g‖ or the step's loss is not finite (NaN or inf): the skip flag, else 0,
//   out[3] = 1 when any rank asked to stop after this step (Ctrl-C or SIGTERM reached it), else 0.
// The loss (1,) is replaced by its sum over the ranks (each rank's is already scaled by 1/world).
// AdamW reads out[1] and out[2] directly, so a bad step is dropped on the device with no host round trip
// inside the step; the host reads the flags with the loss it prints anyway. With world 1 this is the
// norm of the whole gradient, since the plan's one part per slice covers it.
// Deterministic, no atomics: one partial sum of squares per block of the plan's grid (fixed tree), one
// block adds a rank's partials in a fixed order, and the ranks' sums are all-gathered (16 bytes each)
// and added in rank order, so every rank computes the same bits. Unsharded (zero.cuh), each rank's
// parts are the whole gradient, the same on every rank: rank 0's sum alone counts.
// Napkin math: 4 bytes read per parameter of the shard: ~0.1 ms for 124M parameters at 4.8 TB/s.
#pragma once
#include "../core/cuda_common.cuh"
#include "../dist/comm.cuh"
#include "zero.cuh"

#define GN_THREADS 1024

// --- kernels ---------------------------------------------------------------------------------

__device__ float global_norm_block_sum(float v) {
    __shared__ float part[32];
    v = warp_reduce_sum(v);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
    __syncthreads();
    float s = 0.0f;
    if (threadIdx.x == 0)
        for (int w = 0; w < (int)(blockDim.x / 32); w++) s += part[w];
    return s;  // valid in thread 0
}

// by the bits: --use_fast_math may assume finite values
__device__ inline bool global_norm_is_finite(float x) { return (__float_as_uint(x) & 0x7f800000u) != 0x7f800000u; }

// partial[b] = sum of squares of block b's elements of grad (its part of the plan's grid)
__global__ void global_norm_parts_kernel(float* partial, const float* grad, const ZeroPart* parts, int n) {
    float acc = 0.0f;
    // a thread's elements 4 at a time: their loads in flight together, the squares added in the same order
    zero_for_each_group<4>(parts, n, [&](size_t j, size_t, const ZeroPart&, int count) {
        float x[4];
        #pragma unroll
        for (int g = 0; g < 4; g++) x[g] = g < count ? grad[j + (size_t)g * ZERO_THREADS] : 0.0f;
        #pragma unroll
        for (int g = 0; g < 4; g++)
            if (g < count) acc += x[g] * x[g];
    });
    float s = global_norm_block_sum(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// this rank's row of stats: {sum of the partials, its loss, its stop flag, 0}
__global__ void global_norm_rank_kernel(float* stats, const float* partial, unsigned blocks, const float* loss, float stop) {
    float acc = 0.0f;
    for (unsigned i = threadIdx.x; i < blocks; i += blockDim.x) acc += partial[i];
    float s = global_norm_block_sum(acc);
    if (threadIdx.x == 0) {
        stats[0] = s;
        stats[1] = loss ? *loss : 0.0f;
        stats[2] = stop;
        stats[3] = 0.0f;
    }
}

// the ranks' rows: the sums of squares of the first `shards` (unsharded, rank 0's alone: every rank
// summed the whole gradient), the losses and stop flags of all `world`
__global__ void global_norm_finish_kernel(float* out, float* loss, const float* stats, int world, int shards,
                                          float clip) {
    float s = stats[0], l = stats[1], stop = stats[2];
    for (int r = 1; r < world; r++) {
        if (r < shards) s += stats[r * ZERO_STATS];
        l += stats[r * ZERO_STATS + 1];
        stop = fmaxf(stop, stats[r * ZERO_STATS + 2]);
    }
    float norm = sqrtf(s);
    bool bad = !global_norm_is_finite(s) || (loss && !global_norm_is_finite(l));
    out[0] = norm;
    out[1] = bad ? 0.0f : (clip > 0.0f && norm > clip) ? clip / norm : 1.0f;
    out[2] = bad ? 1.0f : 0.0f;
    out[3] = stop;
    if (loss) *loss = l;
}

// --- launchers -------------------------------------------------------------------------------

// out (4,) fp32 as in the header, for grad (num_params) fp32 reduced over the ranks in this rank's parts
// (zero_reduce), and loss (1,) fp32 on the device, this rank's share (NULL: the norm alone decides);
// stop: this rank's request to stop; clip <= 0: no clipping. Collective: every rank calls it.
static inline void global_norm(float* out, float* loss, const float* grad, const ZeroPlan* z, float clip, int stop,
                               Comm* comm, const GpuContext* ctx) {
    global_norm_parts_kernel<<<z->blocks, ZERO_THREADS, 0, ctx->stream>>>(z->partial, grad, z->parts, z->n_slices);
    cuda_check_launch();
    global_norm_rank_kernel<<<1, GN_THREADS, 0, ctx->stream>>>(z->stats + (size_t)z->rank * ZERO_STATS, z->partial,
                                                               z->blocks, loss, stop ? 1.0f : 0.0f);
    cuda_check_launch();
    comm_all_gather(comm, z->stats, ZERO_STATS * sizeof(float), ctx->stream);
    global_norm_finish_kernel<<<1, 1, 0, ctx->stream>>>(out, loss, z->stats, z->world, z->shards, clip);
    cuda_check_launch();
    profile_mark(ctx->prof, "grad norm", ctx->stream);
}
