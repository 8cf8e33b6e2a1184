// train_model.cuh: the model as the trainer sees it, whichever family it is: GPT-2 (llmc/model/gpt.cuh) or
// Llama-style (llmc/model/llama.cuh). train_gpt.cu's loop, evaluation, sampling and checkpoints are written once
// against this. Each train_model_<role> calls the family's function of that role with the same
// arguments and does nothing else, so a run issues exactly the launches, in the same order, that calling
// the family directly would: the dispatch changes no bit of a run's results.
// A switch on the family in each function rather than a table of function pointers: two families, and
// the reader sees at each call what runs.
//   TrainModelConfig  the family and its sizes (host-only: -resume checks a checkpoint against it before
//                     the GPU is touched)
//   TrainModel        the built model, and views of it the trainer reads (loss, norm, logits, head ...)
// A TrainModel is built in place and never copied: its family's model points into itself (its Comm).
#pragma once
#include "../io/gpt_checkpoint.cuh"    // GptModel and its checkpoint
#include "../io/llama_checkpoint.cuh"  // LlamaModel and its checkpoint
#include "../io/gpt_hf.h"              // -export_hf for GPT-2
#include "../io/llama_hf.h"            // -export_hf for the Llama-style model

typedef struct {
    int family;          // CHECKPOINT_FAMILY_GPT2 or CHECKPOINT_FAMILY_LLAMA
    GptConfig gpt;       // family GPT-2
    LlamaConfig llama;   // family Llama-style
} TrainModelConfig;

typedef struct {
    int family;
    GptModel gpt;                // the model, when the family is GPT-2 (else all zero)
    LlamaModel llama;            // ... Llama-style
    // what the trainer reads, pointers into the model above
    size_t num_params;           // all of them, padded vocabulary rows included
    size_t embed_params;         // the token embedding table (Vp, C): a lookup, no FLOPs
    size_t head_params;          // a separate LM head's table (Vp, C), 0 when tied to the embedding (GPT-2)
    size_t acts_bytes;           // activations and backward scratch
    int num_layers, channels;    // L, C: attention's FLOPs
    int vocab_size, max_T;       // V (the sampler's logits), the longest sequence built for
    Comm* comm;                  // the ranks
    const ZeroPlan* zero;        // this rank's share of the optimizer state
    FusedLce* head;              // the LM head: its path, scratch, loss (device)
    float* grads;                // (num_params) fp32 gradients
    float* loss;                 // (1) device: the step's mean loss, after the update over the ranks
    float* norm;                 // (4) device: ‖g‖, clip scale, skipped, stop (llmc/optim/global_norm.cuh)
    float* logits_row;           // (Vp) device fp32: train_model_logits_row's output
    float* scratch;              // device scratch, free between steps (at least 2 · world floats)
} TrainModel;

// The checkpoint header's model (family and sizes) of config c, from the host alone.
static inline CheckpointModel train_model_checkpoint_of(const TrainModelConfig* c) {
    return c->family == CHECKPOINT_FAMILY_GPT2 ? gpt_checkpoint_model_of(&c->gpt) : llama_checkpoint_model_of(&c->llama);
}

// Builds the model of config c for batches of up to B x T tokens (gpt_build_dist, llama_build_dist:
// the LM head's path and scratch, the ranks). recompute is GPT-2's (GELU); the Llama-style model has none.
static inline void train_model_build(TrainModel* m, const TrainModelConfig* c, int B, int T, int recompute,
                                     FusedLcePath head, size_t head_scratch, Comm* comm) {
    memset(m, 0, sizeof(*m));
    m->family = c->family;
    m->max_T = T;
    if (c->family == CHECKPOINT_FAMILY_GPT2) {
        GptModel* g = &m->gpt;
        gpt_build_dist(g, &c->gpt, B, T, recompute, head, head_scratch, comm);
        m->num_params = g->num_params; m->embed_params = g->tensor_size[GPT_WTE]; m->head_params = 0;
        m->acts_bytes = g->acts_bytes; m->num_layers = c->gpt.num_layers; m->channels = c->gpt.channels;
        m->vocab_size = c->gpt.vocab_size; m->comm = g->comm; m->zero = &g->zero; m->head = &g->head;
        m->grads = g->grads_memory; m->loss = g->acts.loss; m->norm = g->acts.norm;
        m->logits_row = g->acts.logits_row; m->scratch = g->acts.scratch;
    } else {
        LlamaModel* l = &m->llama;
        llama_build_dist(l, &c->llama, B, T, head, head_scratch, comm);
        m->num_params = l->num_params; m->embed_params = l->tensor_size[LLAMA_EMBED];
        m->head_params = l->tensor_size[LLAMA_LM_HEAD];
        m->acts_bytes = l->acts_bytes; m->num_layers = c->llama.num_layers; m->channels = c->llama.channels;
        m->vocab_size = c->llama.vocab_size; m->comm = l->comm; m->zero = &l->zero; m->head = &l->head;
        m->grads = l->grads_memory; m->loss = l->acts.loss; m->norm = l->acts.norm;
        m->logits_row = l->acts.logits_row; m->scratch = l->acts.scratch;
    }
}

static inline void train_model_free(TrainModel* m) {
    if (m->family == CHECKPOINT_FAMILY_GPT2) gpt_free(&m->gpt);
    else llama_free(&m->llama);
    memset(m, 0, sizeof(*m));
}

// FLOPs per token of a training step at sequence length T, for MFU. Llama-style: 6 per parameter of a
// matmul (2 forward, 4 backward), i.e. all but the token embedding (a lookup; the untied LM head's table
// is a matmul and counts), plus attention's 6·L·C·T, llm.c's count: QKᵀ and A·V take 2·C·T FLOPs each
// per token and layer in the forward over all T keys, halved for the causal mask, times 3 for forward
// + backward (grouped-query attention changes neither: the query heads span C). GPT-2 keeps llm.c's
// count exactly, 6·N + 6·L·C·T with every parameter in N: its token table is also its LM head (a
// matmul), and its position table (a lookup, maxT·C) is the small overcount llm.c accepts.
static inline double train_model_flops_per_token(const TrainModel* m, int T) {
    double matmul_params = m->family == CHECKPOINT_FAMILY_GPT2 ? (double)m->num_params
                                                              : (double)(m->num_params - m->embed_params);
    return 6.0 * matmul_params + 6.0 * m->num_layers * m->channels * (double)T;
}

// --- the step --------------------------------------------------------------------------------------

static inline void train_model_init_params(TrainModel* m, uint64_t seed, const GpuContext* ctx) {
    if (m->family == CHECKPOINT_FAMILY_GPT2) gpt_init_params(&m->gpt, seed, ctx);
    else llama_init_params(&m->llama, seed, ctx);
}

// values: num_params host fp32, in the family's layout order.
static inline void train_model_set_params(TrainModel* m, const float* values, const GpuContext* ctx) {
    if (m->family == CHECKPOINT_FAMILY_GPT2) gpt_set_params(&m->gpt, values, ctx);
    else llama_set_params(&m->llama, values, ctx);
}

static inline void train_model_forward(TrainModel* m, const int* inputs, int B, int T, const GpuContext* ctx) {
    if (m->family == CHECKPOINT_FAMILY_GPT2) gpt_forward(&m->gpt, inputs, B, T, ctx);
    else llama_forward(&m->llama, inputs, B, T, ctx);
}

// The mean loss of the last forward into m->head->loss (device).
static inline void train_model_eval_loss(TrainModel* m, const int* targets, const GpuContext* ctx) {
    if (m->family == CHECKPOINT_FAMILY_GPT2) gpt_eval_loss(&m->gpt, targets, ctx);
    else llama_eval_loss(&m->llama, targets, ctx);
}

// fp32 logits of position `row` of the last forward into m->logits_row.
static inline void train_model_logits_row(TrainModel* m, int row, const GpuContext* ctx) {
    if (m->family == CHECKPOINT_FAMILY_GPT2) gpt_logits_row(&m->gpt, row, ctx);
    else llama_logits_row(&m->llama, row, ctx);
}

static inline void train_model_zero_grad(TrainModel* m, const GpuContext* ctx) {
    if (m->family == CHECKPOINT_FAMILY_GPT2) gpt_zero_grad(&m->gpt, ctx);
    else llama_zero_grad(&m->llama, ctx);
}

// reduce: the last micro-step of a step, whose backward also reduce-scatters the gradients over the
// ranks (gpt_backward_reduce, llama_backward_reduce); else gpt_backward, llama_backward.
static inline void train_model_backward(TrainModel* m, const int* targets, float dloss, int reduce,
                                        const GpuContext* ctx) {
    if (m->family == CHECKPOINT_FAMILY_GPT2) {
        if (reduce) gpt_backward_reduce(&m->gpt, targets, dloss, ctx);
        else gpt_backward(&m->gpt, targets, dloss, ctx);
    } else {
        if (reduce) llama_backward_reduce(&m->llama, targets, dloss, ctx);
        else llama_backward(&m->llama, targets, dloss, ctx);
    }
}

static inline void train_model_update(TrainModel* m, float lr, float beta1, float beta2, float eps, float weight_decay,
                                      float clip, int t, int stop_request, const GpuContext* ctx) {
    if (m->family == CHECKPOINT_FAMILY_GPT2)
        gpt_update(&m->gpt, lr, beta1, beta2, eps, weight_decay, clip, t, stop_request, ctx);
    else
        llama_update(&m->llama, lr, beta1, beta2, eps, weight_decay, clip, t, stop_request, ctx);
}

static inline float train_model_reduce_ms(const TrainModel* m) {
    return m->family == CHECKPOINT_FAMILY_GPT2 ? gpt_reduce_ms(&m->gpt) : llama_reduce_ms(&m->llama);
}

// --- checkpoints and export -----------------------------------------------------------------------

// As gpt_save_checkpoint / llama_save_checkpoint: collective with world > 1, rank 0 writes.
static inline int train_model_save_checkpoint(TrainModel* m, const char* path, CheckpointState* s, char* err,
                                              size_t errlen, const GpuContext* ctx) {
    return m->family == CHECKPOINT_FAMILY_GPT2 ? gpt_save_checkpoint(&m->gpt, path, s, err, errlen, ctx)
                                               : llama_save_checkpoint(&m->llama, path, s, err, errlen, ctx);
}

// As gpt_load_checkpoint / llama_load_checkpoint: the family and sizes are checked first.
static inline int train_model_load_checkpoint(TrainModel* m, CheckpointReader* r, const GpuContext* ctx) {
    return m->family == CHECKPOINT_FAMILY_GPT2 ? gpt_load_checkpoint(&m->gpt, r, ctx)
                                               : llama_load_checkpoint(&m->llama, r, ctx);
}

// The fp32 master weights to dir in Hugging Face's layout: GPT2LMHeadModel (with GPT-2's tokenizer
// files, found beside vocab_bpe) or LlamaForCausalLM (eot: the encoding's <|endoftext|>, config.json's
// bos and eos). Collective: every rank takes part in the gather, rank 0 alone writes. Returns 0, or -1
// with the reason in err.
static inline int train_model_export_hf(TrainModel* m, const char* dir, const char* vocab_bpe, int eot, char* err,
                                        size_t errlen, const GpuContext* ctx) {
    OptimState o = m->family == CHECKPOINT_FAMILY_GPT2 ? gpt_optim(&m->gpt) : llama_optim(&m->llama);
    const float* full = optim_gather(&o, OPTIM_MASTER, ctx->stream);
    comm_sync(m->comm, ctx->stream);
    if (m->comm->rank != 0) return 0;
    float* values = (float*)malloc_check(m->num_params * sizeof(float));
    cuda_check(cudaMemcpy(values, full, m->num_params * sizeof(float), cudaMemcpyDeviceToHost));
    int rc = m->family == CHECKPOINT_FAMILY_GPT2 ? gpt_hf_export(dir, &m->gpt.config, values, vocab_bpe, err, errlen)
                                                 : llama_hf_export(dir, &m->llama.config, values, eot, err, errlen);
    free(values);
    return rc;
}
