// gpt_checkpoint.cuh: a GptModel's optimizer state to and from a checkpoint file (format and atomic
// writing in llmc/checkpoint.h). Saved: fp32 master weights, AdamW m and v. On load the bf16 parameters
// are rederived as round-to-nearest(master), exactly what every AdamW step writes (llmc/adamw.cuh), so
// the loaded model computes bitwise what the saved one would have.
// The tensors go through a 64 MiB host buffer, one chunk at a time: a d48 model's 18 GB of state never
// needs 18 GB of host memory. Checkpointing is outside the training step, so it may allocate.
#pragma once
#include "checkpoint.h"
#include "gpt.cuh"

#define GPT_CHECKPOINT_CHUNK_BYTES CHECKPOINT_CHUNK_BYTES

// The sizes of the model of config c, from the host alone: -resume checks a checkpoint against them
// before the GPU is touched.
static inline CheckpointModel gpt_checkpoint_model_of(const GptConfig* c) {
    CheckpointModel k;
    k.num_layers = c->num_layers;
    k.channels = c->channels;
    k.num_heads = c->num_heads;
    k.vocab_size = c->vocab_size;
    k.padded_vocab_size = c->padded_vocab_size;
    k.max_seq_len = c->max_seq_len;
    size_t sizes[GPT_NUM_TENSORS], n = 0;
    gpt_tensor_sizes(sizes, c);
    for (int i = 0; i < GPT_NUM_TENSORS; i++) n += sizes[i];
    k.num_params = (int64_t)n;
    return k;
}

static inline CheckpointModel gpt_checkpoint_model(const GptModel* m) {
    CheckpointModel c;
    c.num_layers = m->config.num_layers;
    c.channels = m->config.channels;
    c.num_heads = m->config.num_heads;
    c.vocab_size = m->config.vocab_size;
    c.padded_vocab_size = m->config.padded_vocab_size;
    c.max_seq_len = m->config.max_seq_len;
    c.num_params = (int64_t)m->num_params;
    return c;
}

// Writes path atomically: the model's sizes and state, plus s's step, rng, data position and settings
// (s->model is filled in from m). Returns 0, or -1 with the reason in err. With world > 1 it is
// collective: every rank calls it, each tensor is gathered whole from the ranks' shards into the
// gradient buffer (free between steps: the next step clears it), and rank 0 alone writes the file, so
// a checkpoint holds the whole state whatever the number of GPUs, and resumes on any number.
static inline int gpt_save_checkpoint(GptModel* m, const char* path, CheckpointState* s, char* err, size_t errlen,
                                      const GpuContext* ctx) {
    int writer = m->comm->rank == 0;
    s->model = gpt_checkpoint_model(m);
    CheckpointWriter w;
    int rc = writer ? checkpoint_writer_open(&w, path, s) : 0;
    cuda_check(cudaStreamSynchronize(ctx->stream));  // the last update has landed in master, m, v
    char* buf = writer ? (char*)malloc_check(GPT_CHECKPOINT_CHUNK_BYTES) : NULL;
    const float* shards[CHECKPOINT_TENSORS] = {m->master_memory, m->m_memory, m->v_memory};
    size_t total = m->num_params * sizeof(float);
    for (int t = 0; t < CHECKPOINT_TENSORS; t++) {  // every rank takes part in every gather, even after a failed write
        const float* full = zero_gather_full(&m->zero, m->comm, m->grads_memory, shards[t], ctx->stream);
        comm_sync(m->comm, ctx->stream);
        for (size_t off = 0; writer && off < total && rc == 0; off += GPT_CHECKPOINT_CHUNK_BYTES) {
            size_t n = total - off < GPT_CHECKPOINT_CHUNK_BYTES ? total - off : GPT_CHECKPOINT_CHUNK_BYTES;
            cuda_check(cudaMemcpy(buf, (const char*)full + off, n, cudaMemcpyDeviceToHost));
            rc = checkpoint_writer_append(&w, buf, n);
        }
    }
    free(buf);
    if (writer && rc == 0) rc = checkpoint_writer_close(&w);
    if (rc != 0) snprintf(err, errlen, "%s", w.err);
    return rc;
}

// Loads the tensors of an opened checkpoint (checkpoint_reader_open) into m after checking its sizes;
// the bf16 parameters are rederived from the master weights. Every rank reads the whole file and keeps
// its share (with world > 1 through the gradient buffer, cleared afterwards). Returns 0, or -1 with the
// reason in r->err.
static inline int gpt_load_checkpoint(GptModel* m, CheckpointReader* r, const GpuContext* ctx) {
    CheckpointModel now = gpt_checkpoint_model(m);
    if (checkpoint_check_model(r, &now) != 0) return -1;
    char* buf = (char*)malloc_check(GPT_CHECKPOINT_CHUNK_BYTES);
    float* shards[CHECKPOINT_TENSORS] = {m->master_memory, m->m_memory, m->v_memory};
    size_t total = m->num_params * sizeof(float);
    int rc = 0;
    cuda_check(cudaStreamSynchronize(ctx->stream));
    for (int t = 0; t < CHECKPOINT_TENSORS && rc == 0; t++) {
        float* full = zero_full_target(&m->zero, m->grads_memory, shards[t]);
        for (size_t off = 0; off < total && rc == 0; off += GPT_CHECKPOINT_CHUNK_BYTES) {
            size_t n = total - off < GPT_CHECKPOINT_CHUNK_BYTES ? total - off : GPT_CHECKPOINT_CHUNK_BYTES;
            rc = checkpoint_reader_read(r, buf, n);
            if (rc == 0) cuda_check(cudaMemcpy((char*)full + off, buf, n, cudaMemcpyHostToDevice));
        }
        if (rc != 0) break;
        cuda_check(cudaDeviceSynchronize());  // a pageable cudaMemcpy may return before its DMA has landed
        if (t == 0) adamw_copy_master(m->params_memory, full, m->num_params, ctx->stream);
        zero_take_shard(&m->zero, shards[t], full, ctx->stream);
        cuda_check(cudaStreamSynchronize(ctx->stream));
    }
    free(buf);
    if (rc != 0) return -1;
    if (m->comm->world > 1) cuda_check(cudaMemsetAsync(m->grads_memory, 0, total, ctx->stream));
    cuda_check(cudaStreamSynchronize(ctx->stream));
    return 0;
}
