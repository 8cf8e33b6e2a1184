// optim.cuh: a model's optimizer state as the model families share it (GPT-2, llmc/model/gpt.cuh; Llama-style,
// llmc/model/llama.cuh): the parameters and their fp32 gradients, whole on every rank, and the fp32 master
// weights and AdamW moments, this rank's share of them (ZeRO-1, llmc/optim/zero.cuh). The master weights are
// kept split (llmc/optim/master.cuh): the bf16 parameters are their high halves, and the state holds only
// their int16 remainders. A model fills in an OptimState with pointers into its own blocks; what is done
// with the state does not depend on the layers: plan the sharding, set the parameters, take an
// optimizer step (llmc/optim/global_norm.cuh, llmc/optim/adamw.cuh), read a tensor of it whole, and save and load it
// (llmc/io/optim_checkpoint.cuh).
#pragma once
#include <stdio.h>
#include "../core/cuda_common.cuh"
#include "../dist/comm.cuh"
#include "zero.cuh"
#include "global_norm.cuh"
#include "adamw.cuh"
#include "master.cuh"

typedef struct {
    size_t num_params;
    bf16* params;          // (num_params) bf16: what the model computes with, the master weights' high halves
    int16_t* master_lo;    // (zero->shard_size) the master weights' remainders: this rank's share (all of them
                           // with world 1); master = master_join(params, master_lo) (llmc/optim/master_split.h)
    float* m;              // (zero->shard_size) AdamW first moment
    float* v;              // (zero->shard_size) AdamW second moment
    float* grads;          // (num_params) fp32; between steps also the scratch of whole-tensor gathers
    const ZeroPlan* zero;  // the slices of the parameters and this rank's parts of them
    Comm* comm;            // the ranks (world 1: no backend)
} OptimState;

// The state's tensors as a reader sees them, whole and fp32, in a checkpoint's order
enum { OPTIM_MASTER, OPTIM_M, OPTIM_V };

// The ZeRO plan of a model's slices over comm's ranks (sharded unless comm->zero is 0); exits with a
// hint when a slice does not divide by the world size. C and Vp are named in the hint: every slice of
// both families is a multiple of one.
static inline void optim_plan_build(ZeroPlan* z, const ZeroSlice* slices, int n, const Comm* comm, int C, int Vp) {
    char err[256];
    char hint[160];
    if (zero_plan_build(z, slices, n, comm->rank, comm->world, comm->zero, err, sizeof(err)) != 0) {
        snprintf(hint, sizeof(hint), "use a number of GPUs that divides the model's channels (%d) and its padded "
                 "vocabulary (%d), e.g. 1, 2, 4 or 8", C, Vp);
        check_failf(hint, "the model's gradients cannot be reduced over %d GPUs: %s", comm->world, err);
    }
}

// AdamW's moment k (OPTIM_M or OPTIM_V): this rank's share, fp32
static inline float* optim_moment(const OptimState* o, int k) { return k == OPTIM_M ? o->m : o->v; }

// The whole fp32 tensor k (OPTIM_MASTER, OPTIM_M, OPTIM_V), for readers between steps (checkpoints, the
// export, tests): gathered from the ranks' shares into the gradient buffer, or, for m and v when they
// are whole (world 1, or unsharded), in place. The gradients are scratch then: the next step clears them.
// Collective: every rank calls it.
static inline const float* optim_gather(const OptimState* o, int k, cudaStream_t stream) {
    if (k == OPTIM_MASTER) return master_gather(o->zero, o->comm, o->grads, o->params, o->master_lo, stream);
    return zero_gather_full(o->zero, o->comm, o->grads, optim_moment(o, k), stream);
}

// Where a writer puts the whole fp32 tensor k (num_params, device) for optim_take to keep
static inline float* optim_target(const OptimState* o, int k) {
    if (k == OPTIM_MASTER) return o->grads;
    return zero_full_target(o->zero, o->grads, optim_moment(o, k));
}

// Keeps this rank's share of the whole tensor k, written at optim_target(o, k); for the master weights
// also every bf16 parameter (their high halves). The caller clears the gradient buffer afterwards.
static inline void optim_take(const OptimState* o, int k, const float* full, cudaStream_t stream) {
    if (k == OPTIM_MASTER) master_set(o->params, o->master_lo, full, o->zero, stream);
    else zero_take_shard(o->zero, optim_moment(o, k), full, stream);
}

// Sets the parameters from host fp32 values (num_params, in layout order): master = values (this
// rank's share of them), bf16 params = their high halves, AdamW moments cleared.
static inline void optim_set_params(const OptimState* o, const float* values, const GpuContext* ctx) {
    size_t n = o->num_params, shard = o->zero->shard_size;
    float* full = optim_target(o, OPTIM_MASTER);
    cuda_check(cudaMemcpyAsync(full, values, n * sizeof(float), cudaMemcpyHostToDevice, ctx->stream));
    optim_take(o, OPTIM_MASTER, full, ctx->stream);
    cuda_check(cudaMemsetAsync(o->m, 0, shard * sizeof(float), ctx->stream));
    cuda_check(cudaMemsetAsync(o->v, 0, shard * sizeof(float), ctx->stream));
    cuda_check(cudaMemsetAsync(o->grads, 0, n * sizeof(float), ctx->stream));
    cuda_check(cudaStreamSynchronize(ctx->stream));
}

// One optimizer step: the gradient norm, clip scale and the step's flags into norm (4,) on the device
// (llmc/optim/global_norm.cuh; loss (1,) becomes its sum over the ranks), AdamW at step t = 1, 2, ... on this
// rank's parts (weight decay on the slices that ask for it), then (when sharded over world > 1) the
// updated bf16 parameters gathered from every rank. The gradients must have been reduced (world > 1).
// Collective.
static inline void optim_update(const OptimState* o, float* norm, float* loss, float lr, float beta1, float beta2,
                                float eps, float weight_decay, float clip, int t, int stop_request,
                                const GpuContext* ctx) {
    global_norm(norm, loss, o->grads, o->zero, clip, stop_request, o->comm, ctx);
    adamw_update(o->params, o->master_lo, o->m, o->v, o->grads, o->zero, norm + 1, norm + 2, lr, beta1, beta2, eps,
                 weight_decay, t, ctx);
    if (o->zero->shards > 1) {
        zero_gather_params(o->zero, o->comm, o->params, ctx->stream);
        profile_mark(ctx->prof, "param all-gather", ctx->stream);
    }
}
