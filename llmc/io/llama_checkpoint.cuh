// llama_checkpoint.cuh: a LlamaModel to and from a checkpoint file: the model's sizes (CheckpointModel,
// family Llama-style, with NKV, F, RoPE theta and RMSNorm eps in the header) and its optimizer state,
// saved and loaded by llmc/io/optim_checkpoint.cuh (format in llmc/io/checkpoint.h). A checkpoint of another
// family, or of other sizes, is refused, naming the file.
#pragma once
#include "optim_checkpoint.cuh"
#include "../model/llama.cuh"

// The sizes of the model of config c, from the host alone: -resume checks a checkpoint against them
// before the GPU is touched.
static inline CheckpointModel llama_checkpoint_model_of(const LlamaConfig* c) {
    CheckpointModel k;
    memset(&k, 0, sizeof(k));
    k.family = CHECKPOINT_FAMILY_LLAMA;
    k.num_layers = c->num_layers;
    k.channels = c->channels;
    k.num_heads = c->num_heads;
    k.vocab_size = c->vocab_size;
    k.padded_vocab_size = c->padded_vocab_size;
    k.max_seq_len = c->max_seq_len;
    k.num_params = (int64_t)llama_num_params(c);
    k.num_kv_heads = c->num_kv_heads;
    k.ffn_hidden = c->ffn_hidden;
    k.rope_theta = c->rope_theta;
    k.norm_eps = c->norm_eps;
    return k;
}

// Writes path atomically: the model's sizes and state, plus s's step, rng, data position and settings
// (s->model is filled in from m). Returns 0, or -1 with the reason in err. Collective with world > 1:
// rank 0 writes the whole state, gathered from the ranks' shards.
static inline int llama_save_checkpoint(LlamaModel* m, const char* path, CheckpointState* s, char* err, size_t errlen,
                                        const GpuContext* ctx) {
    s->model = llama_checkpoint_model_of(&m->config);
    OptimState o = llama_optim(m);
    return optim_save_checkpoint(&o, path, s, err, errlen, ctx);
}

// Loads the tensors of an opened checkpoint (checkpoint_reader_open) into m after checking its family
// and sizes; the bf16 parameters are rederived from the master weights; every rank keeps its share.
// Returns 0, or -1 with the reason in r->err.
static inline int llama_load_checkpoint(LlamaModel* m, CheckpointReader* r, const GpuContext* ctx) {
    CheckpointModel now = llama_checkpoint_model_of(&m->config);
    OptimState o = llama_optim(m);
    return optim_load_checkpoint(&o, r, &now, ctx);
}
