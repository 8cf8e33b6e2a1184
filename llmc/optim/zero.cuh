// zero.cuh: ZeRO-1, the optimizer state sharded over the ranks of a data-parallel run. Each rank keeps
// 1/world of the fp32 master weights (their int16 remainders: llmc/optim/master.cuh) and of AdamW's m and v;
// the bf16 parameters and the fp32 gradients stay whole on every rank (the forward and backward need
// them). Or, when the plan is built unsharded (-zero 0, for comparison): every rank keeps all of the
// state, the gradients are all-reduced (a reduce-scatter, then an all-gather of the summed parts) and
// every rank updates every parameter, so nothing is gathered after AdamW.
//
// The unit of sharding is a slice: one layer's part of one tensor (or a whole tensor that has no
// layers), a contiguous range of the flat parameter array. Each slice is cut into `world` equal parts,
// part r owned by rank r. A step on rank r:
//   1. the backward fills the whole gradient; as each layer's slices are complete they are
//      reduce-scattered in place (one group of collectives per layer, on their own stream, behind the
//      backward of the layers below): part r of each slice of rank r now holds the sum over ranks;
//   2. the gradient norm over the parts (global_norm.cuh), added across ranks;
//   3. AdamW on the parts (adamw.cuh): master remainders, m and v of the shard, and the bf16
//      parameters of the parts;
//   4. the bf16 parameters all-gathered in place, slice by slice: every rank has the whole model again.
// Slices by layer, rather than one cut of the flat array, are what lets the reduction start while the
// backward still runs: in llm.c's layout a tensor's layers are contiguous, so layer l's gradients are
// spread over 12 ranges, complete once layer l's backward is done.
//
// The shard holds the parts in slice order, so with world 1 it is the flat array itself and nothing
// moves. Sizes: every slice must divide by world (GPT-2's do for world 1, 2, 4, 8, 16, ...: C is a
// multiple of 64, except d25's 1600 = 64·25); zero_plan_build refuses otherwise, naming the slice.
// The shard kernels run one grid over all the parts: ZERO_BLOCK_ELEMS elements a block, each part
// starting at its own block, a block finds its part by binary search over the parts' first blocks.
#pragma once
#include <stdio.h>
#include <string.h>
#include "../core/cuda_common.cuh"
#include "../dist/comm.cuh"

#define ZERO_THREADS 256
#define ZERO_PER_THREAD 16
#define ZERO_BLOCK_ELEMS (ZERO_THREADS * ZERO_PER_THREAD)
#define ZERO_STATS 4  // floats per rank in ZeroPlan.stats: sum of squares, loss, stop flag, unused

typedef struct {
    size_t offset;  // first element in the flat parameter (and gradient) array
    size_t size;    // elements, a multiple of world
    int bucket;     // when its gradient is complete: the backward's bucket (see llmc/model/model.cuh), -1: at the end
    int decay;      // 1: AdamW's weight decay applies
} ZeroSlice;

typedef struct {  // rank r's part of slice s
    size_t param;           // its first element in the flat arrays: offset + r·size/shards (r = 0 unsharded)
    size_t shard;           // its first element in the shard (master remainders, m, v)
    size_t n;               // elements: size/shards
    unsigned first_block;   // its first block in the shard kernels' grid
    int decay;
} ZeroPart;

typedef struct {
    int rank, world;
    int shards;            // ranks the state is split over: world (ZeRO-1), or 1 (unsharded: all on every rank)
    int n_slices;
    ZeroSlice* slices;     // (n_slices) host
    ZeroPart* h_parts;     // (n_slices) host
    ZeroPart* parts;       // (n_slices) device
    unsigned blocks;       // grid of the shard kernels
    size_t num_params;     // elements of the flat arrays (the sum of the slices)
    size_t shard_size;     // elements this rank owns: num_params / shards
    float* partial;        // (blocks) device: per-block sums of the gradient norm
    float* stats;          // (world, ZERO_STATS) device: every rank's contribution to the step's totals
} ZeroPlan;

// --- plan --------------------------------------------------------------------------------------

// sharded: 1 for ZeRO-1, 0 for the whole state on every rank. Returns 0, or -1 with the slice that does
// not divide by world in err (the gradients' reduce-scatter needs it either way).
static inline int zero_plan_build(ZeroPlan* z, const ZeroSlice* slices, int n, int rank, int world, int sharded,
                                  char* err, size_t errlen) {
    memset(z, 0, sizeof(*z));
    for (int s = 0; s < n; s++)
        if (slices[s].size % (size_t)world != 0) {
            snprintf(err, errlen, "slice %d (%zu elements at offset %zu) does not divide into %d equal parts", s,
                     slices[s].size, slices[s].offset, world);
            return -1;
        }
    z->rank = rank;
    z->world = world;
    z->shards = sharded ? world : 1;
    int owner = sharded ? rank : 0;  // which part of each slice this rank keeps
    z->n_slices = n;
    z->slices = (ZeroSlice*)malloc_check(n * sizeof(ZeroSlice));
    memcpy(z->slices, slices, n * sizeof(ZeroSlice));
    z->h_parts = (ZeroPart*)malloc_check(n * sizeof(ZeroPart));
    size_t shard = 0;
    unsigned blocks = 0;
    for (int s = 0; s < n; s++) {
        ZeroPart* p = &z->h_parts[s];
        p->n = slices[s].size / z->shards;
        p->param = slices[s].offset + (size_t)owner * p->n;
        p->shard = shard;
        p->first_block = blocks;
        p->decay = slices[s].decay;
        shard += p->n;
        blocks += (unsigned)((p->n + ZERO_BLOCK_ELEMS - 1) / ZERO_BLOCK_ELEMS);
        z->num_params += slices[s].size;
    }
    z->shard_size = shard;
    z->blocks = blocks;
    cuda_check(cudaMalloc(&z->parts, n * sizeof(ZeroPart)));
    cuda_check(cudaMemcpy(z->parts, z->h_parts, n * sizeof(ZeroPart), cudaMemcpyHostToDevice));
    cuda_check(cudaMalloc(&z->partial, (blocks > 0 ? blocks : 1) * sizeof(float)));
    cuda_check(cudaMalloc(&z->stats, (size_t)world * ZERO_STATS * sizeof(float)));
    cuda_check(cudaMemset(z->stats, 0, (size_t)world * ZERO_STATS * sizeof(float)));
    return 0;
}

static inline void zero_plan_free(ZeroPlan* z) {
    cuda_check(cudaFree(z->stats));
    cuda_check(cudaFree(z->partial));
    cuda_check(cudaFree(z->parts));
    free(z->h_parts);
    free(z->slices);
    memset(z, 0, sizeof(*z));
}

// --- kernels ---------------------------------------------------------------------------------

// The part that block b works on: the last part whose first block is <= b.
__device__ __forceinline__ int zero_part_of_block(const ZeroPart* parts, int n, unsigned b) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (parts[mid].first_block <= b) lo = mid; else hi = mid - 1;
    }
    return lo;
}

// The shard kernels' walk, in groups of G consecutive elements of the thread (G divides ZERO_PER_THREAD):
// the thread takes ZERO_PER_THREAD elements of its block's part p, ZERO_THREADS apart, and f(j, s, p,
// count) runs once a group, for elements j + g·ZERO_THREADS of the flat arrays (s + g·ZERO_THREADS in
// the shard), g < count <= G. G > 1 is for kernels that issue a group's loads before its arithmetic and
// stores, so that G elements' loads are in flight at once: element by element, a thread's next loads
// wait behind its stores (they may alias).
template <int G, typename F>
__device__ __forceinline__ void zero_for_each_group(const ZeroPart* parts, int n, F f) {
    static_assert(ZERO_PER_THREAD % G == 0, "a group size that divides ZERO_PER_THREAD");
    const ZeroPart p = parts[zero_part_of_block(parts, n, blockIdx.x)];
    size_t base = (size_t)(blockIdx.x - p.first_block) * ZERO_BLOCK_ELEMS + threadIdx.x;
    for (int k = 0; k < ZERO_PER_THREAD; k += G) {
        size_t i = base + (size_t)k * ZERO_THREADS;
        if (i >= p.n) break;
        size_t left = (p.n - i + ZERO_THREADS - 1) / ZERO_THREADS;
        f(p.param + i, p.shard + i, p, left < (size_t)G ? (int)left : G);
    }
}

// The walk element by element: f(j, s, p) for each element this thread takes
template <typename F>
__device__ __forceinline__ void zero_for_each_elem(const ZeroPart* parts, int n, F f) {
    zero_for_each_group<1>(parts, n, [&](size_t j, size_t s, const ZeroPart& p, int) { f(j, s, p); });
}

// shard[part s] <-> full[rank's part of slice s], one direction or the other
__global__ void zero_copy_parts_kernel(float* shard, float* full, const ZeroPart* parts, int n, int to_full) {
    zero_for_each_elem(parts, n, [&](size_t j, size_t s, const ZeroPart&) {
        if (to_full) full[j] = shard[s];
        else shard[s] = full[j];
    });
}

// --- launchers -------------------------------------------------------------------------------

// Every rank's part (of world parts) of each slice of `bucket` (all the slices when bucket is -2) of the
// flat array `full` (num_params elements of elem_bytes each) to every rank, in place, as one group of
// collectives on stream.
static inline void zero_all_gather_parts(const ZeroPlan* z, Comm* comm, void* full, size_t elem_bytes, int bucket,
                                         cudaStream_t stream) {
    comm_group_start(comm);
    for (int s = 0; s < z->n_slices; s++)
        if (bucket == -2 || z->slices[s].bucket == bucket)
            comm_all_gather(comm, (char*)full + z->slices[s].offset * elem_bytes,
                            z->slices[s].size / z->world * elem_bytes, stream);
    comm_group_end(comm);
}

// Reduce-scatters, in place in grad (num_params) fp32, the slices of `bucket` (all the slices when
// bucket is -2), as one group of collectives on stream; unsharded, then all-gathers the summed parts
// as a second group (an all-reduce), so that every rank has every sum.
static inline void zero_reduce(const ZeroPlan* z, Comm* comm, float* grad, int bucket, cudaStream_t stream) {
    if (z->world == 1) return;
    comm_group_start(comm);
    for (int s = 0; s < z->n_slices; s++)
        if (bucket == -2 || z->slices[s].bucket == bucket)
            comm_reduce_scatter(comm, grad + z->slices[s].offset, z->slices[s].size / z->world, stream);
    comm_group_end(comm);
    if (z->shards == 1) zero_all_gather_parts(z, comm, grad, sizeof(float), bucket, stream);
}

// Every rank's parts of params (num_params) bf16 to every rank, in place: the whole model after AdamW
// updated each rank's parts (unsharded, every rank updated all of it: nothing to do).
static inline void zero_gather_params(const ZeroPlan* z, Comm* comm, bf16* params, cudaStream_t stream) {
    if (z->shards == 1) return;
    zero_all_gather_parts(z, comm, params, sizeof(bf16), -2, stream);
}

// The whole fp32 tensor of which `shard` (shard_size) is this rank's share: `shard` itself when it is
// whole (world 1, or unsharded); else every rank's parts gathered into full (num_params, scratch; the
// gradient buffer serves outside the step), which is returned. Collective: every rank calls it.
static inline const float* zero_gather_full(const ZeroPlan* z, Comm* comm, float* full, const float* shard,
                                            cudaStream_t stream) {
    if (z->shards == 1) return shard;
    zero_copy_parts_kernel<<<z->blocks, ZERO_THREADS, 0, stream>>>((float*)shard, full, z->parts, z->n_slices, 1);
    cuda_check_launch();
    zero_all_gather_parts(z, comm, full, sizeof(float), -2, stream);
    return full;
}

// Where a whole tensor should be written so that zero_take_shard can keep this rank's share: `shard`
// itself when it is whole, else the scratch `full` (num_params).
static inline float* zero_full_target(const ZeroPlan* z, float* full, float* shard) {
    return z->shards == 1 ? shard : full;
}

// shard (shard_size) = this rank's parts of full (num_params), written through zero_full_target.
static inline void zero_take_shard(const ZeroPlan* z, float* shard, const float* full, cudaStream_t stream) {
    if (z->shards == 1) return;
    zero_copy_parts_kernel<<<z->blocks, ZERO_THREADS, 0, stream>>>(shard, (float*)full, z->parts, z->n_slices, 0);
    cuda_check_launch();
}
