// gpt_checkpoint.cuh: a GptModel to and from a checkpoint file: the model's sizes (CheckpointModel,
// family GPT-2) and its optimizer state, saved and loaded by llmc/io/optim_checkpoint.cuh (format and atomic
// writing in llmc/io/checkpoint.h). A checkpoint of another family is refused, naming the file.
#pragma once
#include "optim_checkpoint.cuh"
#include "../model/gpt.cuh"

// The sizes of the model of config c, from the host alone: -resume checks a checkpoint against them
// before the GPU is touched.
static inline CheckpointModel gpt_checkpoint_model_of(const GptConfig* c) {
    CheckpointModel k;
    memset(&k, 0, sizeof(k));  // family GPT-2, no Llama-style sizes
    k.family = CHECKPOINT_FAMILY_GPT2;
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
    return gpt_checkpoint_model_of(&m->config);
}

// Writes path atomically: the model's sizes and state, plus s's step, rng, data position and settings
// (s->model is filled in from m). Returns 0, or -1 with the reason in err. Collective with world > 1
// (optim_save_checkpoint): rank 0 writes the whole state, gathered from the ranks' shards.
static inline int gpt_save_checkpoint(GptModel* m, const char* path, CheckpointState* s, char* err, size_t errlen,
                                      const GpuContext* ctx) {
    s->model = gpt_checkpoint_model(m);
    OptimState o = gpt_optim(m);
    return optim_save_checkpoint(&o, path, s, err, errlen, ctx);
}

// Loads the tensors of an opened checkpoint (checkpoint_reader_open) into m after checking its family
// and sizes; the bf16 parameters are rederived from the master weights; every rank keeps its share.
// Returns 0, or -1 with the reason in r->err.
static inline int gpt_load_checkpoint(GptModel* m, CheckpointReader* r, const GpuContext* ctx) {
    CheckpointModel now = gpt_checkpoint_model(m);
    OptimState o = gpt_optim(m);
    return optim_load_checkpoint(&o, r, &now, ctx);
}
