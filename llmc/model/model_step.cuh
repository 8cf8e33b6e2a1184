// model_step.cuh: the parts of a training step that do not depend on the model's layers
// (llmc/model/model.cuh uses them):
//   ModelStaging  the batch on its way to the GPU: pinned host buffers, and the host's half of the token
//                 embedding's backward (positions grouped by token, llmc/layers/encoder.cuh)
//   ModelReduce   with world > 1, the reduce-scatter of each bucket of gradients (and with -zero 0 the
//                 all-gather of the sums) on a stream of its own, started as soon as the backward has
//                 completed the bucket (llmc/optim/zero.cuh), and the events that time it for -profile
//   model_carve   one allocation cut into 256-byte aligned pieces
// and the loss accumulator of gradient accumulation.
#pragma once
#include "../core/cuda_common.cuh"
#include "../layers/encoder.cuh"
#include "../dist/comm.cuh"
#include "../optim/zero.cuh"

// Carves one allocation into n pieces of the given byte sizes (each 256-byte aligned); base NULL: sizing.
static inline size_t model_carve(void** const ptrs[], const size_t bytes[], int n, char* base) {
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        if (base) *ptrs[i] = base + off;
        off += (bytes[i] + 255) / 256 * 256;
    }
    return off;
}

// acc (1,) += loss (1,) · w: the mean loss over the micro-steps, on the device.
__global__ void model_loss_accumulate_kernel(float* acc, const float* loss, float w) { *acc += *loss * w; }

static inline void model_loss_accumulate(float* acc, const float* loss, float w, const GpuContext* ctx) {
    model_loss_accumulate_kernel<<<1, 1, 0, ctx->stream>>>(acc, loss, w);
    cuda_check_launch();
}

// --- staging --------------------------------------------------------------------------------------

// Host staging (pinned): written only after `staged` has completed, i.e. after the last copy out of it.
typedef struct {
    int* inputs;              // (BT) the last forward's inputs (the embedding's backward groups them)
    int* targets;             // (BT)
    EncoderBuckets buckets;   // the positions of `inputs` grouped by token
    int* count;               // (V) pageable scratch of encoder_bucket
    cudaEvent_t staged;       // recorded after the last copy out of the staging buffers
} ModelStaging;

static inline void model_staging_build(ModelStaging* s, size_t BT, int V) {
    cuda_check(cudaMallocHost(&s->inputs, BT * sizeof(int)));
    cuda_check(cudaMallocHost(&s->targets, BT * sizeof(int)));
    cuda_check(cudaMallocHost(&s->buckets.tokens, BT * sizeof(int)));
    cuda_check(cudaMallocHost(&s->buckets.offsets, (BT + 1) * sizeof(int)));
    cuda_check(cudaMallocHost(&s->buckets.pos, BT * sizeof(int)));
    s->count = (int*)calloc_check((size_t)V, sizeof(int));
    cuda_check(cudaEventCreateWithFlags(&s->staged, cudaEventDisableTiming));
}

static inline void model_staging_free(ModelStaging* s) {
    cuda_check(cudaEventDestroy(s->staged));
    free(s->count);
    cuda_check(cudaFreeHost(s->buckets.pos));
    cuda_check(cudaFreeHost(s->buckets.offsets));
    cuda_check(cudaFreeHost(s->buckets.tokens));
    cuda_check(cudaFreeHost(s->targets));
    cuda_check(cudaFreeHost(s->inputs));
}

// Copies (n,) host ints into the pinned `staging` buffer and from there to `dev` (asynchronously), once
// the previous copies out of the staging buffers have completed.
static inline void model_stage(ModelStaging* s, int* dev, int* staging, const int* host, size_t n,
                               const GpuContext* ctx) {
    cuda_check(cudaEventSynchronize(s->staged));
    memcpy(staging, host, n * sizeof(int));
    cuda_check(cudaMemcpyAsync(dev, staging, n * sizeof(int), cudaMemcpyHostToDevice, ctx->stream));
    cuda_check(cudaEventRecord(s->staged, ctx->stream));
}

// The host's half of a backward: targets (BT) to dev_targets, and the positions of the staged inputs
// grouped by token (encoder_bucket) to dev_buckets, while the GPU runs the head. Returns the number of
// distinct tokens.
static inline int model_stage_backward(ModelStaging* s, int* dev_targets, EncoderBuckets* dev_buckets,
                                       const int* targets, int BT, int V, const GpuContext* ctx) {
    cudaStream_t st = ctx->stream;
    cuda_check(cudaEventSynchronize(s->staged));
    memcpy(s->targets, targets, (size_t)BT * sizeof(int));
    encoder_bucket(&s->buckets, s->count, s->inputs, BT, V);
    int nu = s->buckets.n_unique;
    cuda_check(cudaMemcpyAsync(dev_targets, s->targets, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice, st));
    cuda_check(cudaMemcpyAsync(dev_buckets->tokens, s->buckets.tokens, nu * sizeof(int), cudaMemcpyHostToDevice, st));
    cuda_check(cudaMemcpyAsync(dev_buckets->offsets, s->buckets.offsets, (nu + 1) * sizeof(int), cudaMemcpyHostToDevice, st));
    cuda_check(cudaMemcpyAsync(dev_buckets->pos, s->buckets.pos, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice, st));
    cuda_check(cudaEventRecord(s->staged, st));
    return nu;
}

// --- gradient reduction behind the backward ---------------------------------------------------------

// Buckets 0 .. L-1 are the layers, L what the backward completes before them (the final norm, ...), and
// -1 what it completes last (the token embedding); event pair k = bucket (L + 1 for -1).
typedef struct {
    int active;               // world > 1: everything below exists
    int n_buckets;            // L + 2
    cudaStream_t stream;      // the gradient reduce-scatters, behind the backward
    cudaEvent_t bucket_done;  // recorded on the compute stream when a bucket's gradients are complete
    cudaEvent_t reduced;      // recorded on `stream` after the last bucket
    cudaEvent_t* ev;          // (2 · n_buckets) start and end of each bucket's reduction, for -profile
} ModelReduce;

static inline void model_reduce_build(ModelReduce* r, int world, int num_layers) {
    memset(r, 0, sizeof(*r));
    if (world == 1) return;
    r->active = 1;
    r->n_buckets = num_layers + 2;
    cuda_check(cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking));
    cuda_check(cudaEventCreateWithFlags(&r->bucket_done, cudaEventDisableTiming));
    cuda_check(cudaEventCreateWithFlags(&r->reduced, cudaEventDisableTiming));
    r->ev = (cudaEvent_t*)malloc_check(2 * r->n_buckets * sizeof(cudaEvent_t));
    for (int i = 0; i < 2 * r->n_buckets; i++) cuda_check(cudaEventCreate(&r->ev[i]));
}

static inline void model_reduce_free(ModelReduce* r) {
    if (!r->active) return;
    for (int i = 0; i < 2 * r->n_buckets; i++) cuda_check(cudaEventDestroy(r->ev[i]));
    free(r->ev);
    cuda_check(cudaEventDestroy(r->reduced));
    cuda_check(cudaEventDestroy(r->bucket_done));
    cuda_check(cudaStreamDestroy(r->stream));
    memset(r, 0, sizeof(*r));
}

// Bucket b's gradients are complete on the compute stream: with world > 1 and `reduce`, they are
// reduce-scattered (and, unsharded, all-gathered: zero_reduce) on r->stream as soon as the compute
// stream gets there, while the backward goes on below.
static inline void model_reduce_bucket(ModelReduce* r, const ZeroPlan* z, Comm* comm, float* grads, int bucket,
                                       int reduce, const GpuContext* ctx) {
    if (!reduce || !r->active) return;
    int k = bucket < 0 ? r->n_buckets - 1 : bucket;
    cuda_check(cudaEventRecord(r->bucket_done, ctx->stream));
    cuda_check(cudaStreamWaitEvent(r->stream, r->bucket_done, 0));
    cuda_check(cudaEventRecord(r->ev[2 * k], r->stream));
    zero_reduce(z, comm, grads, bucket, r->stream);
    cuda_check(cudaEventRecord(r->ev[2 * k + 1], r->stream));
}

// The end of a reducing backward: the last bucket (-1), then the compute stream waits for them all.
static inline void model_reduce_finish(ModelReduce* r, const ZeroPlan* z, Comm* comm, float* grads, int reduce,
                                       const GpuContext* ctx) {
    if (!reduce || !r->active) return;
    model_reduce_bucket(r, z, comm, grads, -1, reduce, ctx);
    cuda_check(cudaEventRecord(r->reduced, r->stream));
    cuda_check(cudaStreamWaitEvent(ctx->stream, r->reduced, 0));
    profile_mark(ctx->prof, "grad reduce: exposed", ctx->stream);
}

// GPU time of the last step's gradient reduce-scatters on their own stream, in ms (after the step has
// been synchronised); 0 with world 1.
static inline float model_reduce_ms(const ModelReduce* r) {
    if (!r->active) return 0.0f;
    float total = 0.0f;
    for (int k = 0; k < r->n_buckets; k++) {
        float ms = 0.0f;
        cuda_check(cudaEventElapsedTime(&ms, r->ev[2 * k], r->ev[2 * k + 1]));
        total += ms;
    }
    return total;
}
