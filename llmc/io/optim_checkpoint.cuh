// optim_checkpoint.cuh: a model's optimizer state (llmc/optim/optim.cuh) to and from a checkpoint file (format
// and atomic writing in llmc/io/checkpoint.h), for every model family: llmc/io/model_checkpoint.cuh says what the model is (CheckpointModel)
// and calls these. Saved: fp32 master
// weights, AdamW m and v. On load the master weights are split again (llmc/optim/master.cuh), into the same
// bf16 parameters and remainders every AdamW step writes (llmc/optim/adamw.cuh), so the loaded model computes
// bitwise what the saved one would have.
// The tensors go through a 64 MiB host buffer, one chunk at a time: a d48 model's 18 GB of state never
// needs 18 GB of host memory. Checkpointing is outside the training step, so it may allocate.
#pragma once
#include "checkpoint.h"
#include "../optim/optim.cuh"

// Writes path atomically: s's model sizes (filled in by the caller), step, rng, data position and
// settings, then o's state. Returns 0, or -1 with the reason in err. With world > 1 it is collective:
// every rank calls it, each tensor is gathered whole from the ranks' shards into the gradient buffer
// (free between steps: the next step clears it; optim_gather), and rank 0 alone writes the file, so a
// checkpoint holds the whole state whatever the number of GPUs, and resumes on any number.
static inline int optim_save_checkpoint(const OptimState* o, const char* path, const CheckpointState* s, char* err,
                                        size_t errlen, const GpuContext* ctx) {
    int writer = o->comm->rank == 0;
    CheckpointWriter w;
    int rc = writer ? checkpoint_writer_open(&w, path, s) : 0;
    cuda_check(cudaStreamSynchronize(ctx->stream));  // the last update has landed in the parameters, lo, m, v
    char* buf = writer ? (char*)malloc_check(CHECKPOINT_CHUNK_BYTES) : NULL;
    size_t total = o->num_params * sizeof(float);
    for (int t = 0; t < CHECKPOINT_TENSORS; t++) {  // every rank takes part in every gather, even after a failed write
        const float* full = optim_gather(o, t, ctx->stream);  // t: OPTIM_MASTER, OPTIM_M, OPTIM_V
        comm_sync(o->comm, ctx->stream);
        for (size_t off = 0; writer && off < total && rc == 0; off += CHECKPOINT_CHUNK_BYTES) {
            size_t n = total - off < CHECKPOINT_CHUNK_BYTES ? total - off : CHECKPOINT_CHUNK_BYTES;
            cuda_check(cudaMemcpy(buf, (const char*)full + off, n, cudaMemcpyDeviceToHost));
            rc = checkpoint_writer_append(&w, buf, n);
        }
    }
    free(buf);
    if (writer && rc == 0) rc = checkpoint_writer_close(&w);
    if (rc != 0) snprintf(err, errlen, "%s", w.err);
    return rc;
}

// Loads the tensors of an opened checkpoint (checkpoint_reader_open) into o after checking its model
// against `now` (family and sizes); the master weights are split into the bf16 parameters and this
// rank's remainders. Every rank reads the whole file and keeps its share (through the gradient buffer,
// cleared afterwards; m and v in place when whole). Returns 0, or -1 with the reason in r->err.
static inline int optim_load_checkpoint(const OptimState* o, CheckpointReader* r, const CheckpointModel* now,
                                        const GpuContext* ctx) {
    if (checkpoint_check_model(r, now) != 0) return -1;
    char* buf = (char*)malloc_check(CHECKPOINT_CHUNK_BYTES);
    size_t total = o->num_params * sizeof(float);
    int rc = 0;
    cuda_check(cudaStreamSynchronize(ctx->stream));
    for (int t = 0; t < CHECKPOINT_TENSORS && rc == 0; t++) {
        float* full = optim_target(o, t);  // t: OPTIM_MASTER, OPTIM_M, OPTIM_V
        for (size_t off = 0; off < total && rc == 0; off += CHECKPOINT_CHUNK_BYTES) {
            size_t n = total - off < CHECKPOINT_CHUNK_BYTES ? total - off : CHECKPOINT_CHUNK_BYTES;
            rc = checkpoint_reader_read(r, buf, n);
            if (rc == 0) cuda_check(cudaMemcpy((char*)full + off, buf, n, cudaMemcpyHostToDevice));
        }
        if (rc != 0) break;
        cuda_check(cudaDeviceSynchronize());  // a pageable cudaMemcpy may return before its DMA has landed
        optim_take(o, t, full, ctx->stream);
        cuda_check(cudaStreamSynchronize(ctx->stream));
    }
    free(buf);
    // the gradient buffer held the tensors on their way (also when a read failed part of the way)
    cuda_check(cudaMemsetAsync(o->grads, 0, total, ctx->stream));
    cuda_check(cudaStreamSynchronize(ctx->stream));
    return rc != 0 ? -1 : 0;
}
