// model_checkpoint.cuh: a Model (llmc/model/model.cuh) to and from a checkpoint file: the model's family
// and sizes (CheckpointModel, llmc/io/checkpoint.h's checkpoint_model_of) and its optimizer state, saved
// and loaded by llmc/io/optim_checkpoint.cuh (format and atomic writing in llmc/io/checkpoint.h). A
// checkpoint of another family, or of other sizes, is refused, naming the file. And the model's fp32
// master weights exported in Hugging Face's layout (llmc/io/hf_model.h), gathered from the ranks.
#pragma once
#include "optim_checkpoint.cuh"
#include "hf_model.h"
#include "../model/model.cuh"

// Writes path atomically: the model's sizes and state, plus s's step, rng, data position and settings
// (s->model is filled in from m). Returns 0, or -1 with the reason in err. Collective with world > 1
// (optim_save_checkpoint): rank 0 writes the whole state, gathered from the ranks' shards.
static inline int model_save_checkpoint(Model* m, const char* path, CheckpointState* s, char* err, size_t errlen,
                                        const GpuContext* ctx) {
    s->model = checkpoint_model_of(&m->config);
    OptimState o = model_optim(m);
    return optim_save_checkpoint(&o, path, s, err, errlen, ctx);
}

// Loads the tensors of an opened checkpoint (checkpoint_reader_open) into m after checking its family
// and sizes; the bf16 parameters are rederived from the master weights; every rank keeps its share.
// Returns 0, or -1 with the reason in r->err.
static inline int model_load_checkpoint(Model* m, CheckpointReader* r, const GpuContext* ctx) {
    CheckpointModel now = checkpoint_model_of(&m->config);
    OptimState o = model_optim(m);
    return optim_load_checkpoint(&o, r, &now, ctx);
}

// The fp32 master weights to dir in Hugging Face's layout (llmc/io/hf_model.h's hf_model_export: GPT-2's
// with its tokenizer files, found beside vocab_bpe; Llama-style's with eot, the encoding's
// <|endoftext|>, as config.json's bos and eos). Collective: every rank takes part in the gather, rank 0
// alone writes. Returns 0, or -1 with the reason in err.
static inline int model_export_hf(Model* m, const char* dir, const char* vocab_bpe, int eot, char* err, size_t errlen,
                                  const GpuContext* ctx) {
    OptimState o = model_optim(m);
    const float* full = optim_gather(&o, OPTIM_MASTER, ctx->stream);
    comm_sync(m->comm, ctx->stream);
    if (m->comm->rank != 0) return 0;
    float* values = (float*)malloc_check(m->num_params * sizeof(float));
    cuda_check(cudaMemcpy(values, full, m->num_params * sizeof(float), cudaMemcpyDeviceToHost));
    int rc = hf_model_export(dir, &m->config, values, vocab_bpe, eot, err, errlen);
    free(values);
    return rc;
}
