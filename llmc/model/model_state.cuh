// model_state.cuh: the blocks every model family's struct holds under the same names (GptModel in
// llmc/model/gpt_layout.cuh, LlamaModel in llmc/model/llama_layout.cuh), built, viewed and freed once for both:
//   num_params, zero, comm, single      the parameter count, the ZeRO-1 plan, the ranks
//   params_memory (num_params) bf16, grads_memory (num_params) fp32, and this rank's share of the
//   optimizer state: master_lo (int16 remainders), m_memory, v_memory (zero.shard_size each)
//   acts_memory, head, staging, reduce  the activations' block, the LM head, the batch staging, the
//                                       gradient reduce-scatters (llmc/model/model_step.cuh)
// The functions are templates over the model's struct (and its config: channels, vocab_size,
// padded_vocab_size, num_layers), so that a field added to both structs is allocated and freed here.
#pragma once
#include "../core/cuda_common.cuh"
#include "../head/fused_lce.cuh"
#include "model_step.cuh"
#include "../optim/optim.cuh"

// The ranks (comm, or this process alone when comm is NULL) and the ZeRO-1 plan over the n slices of
// the parameters, then the parameters, gradients (zeroed) and optimizer state; num_params set before.
// Every slice must divide by the world size, else optim_plan_build exits naming it.
template <typename Model, typename Config>
static inline void model_state_build(Model* m, const Config* c, const ZeroSlice* slices, int n, Comm* comm) {
    comm_single(&m->single);
    m->comm = comm ? comm : &m->single;
    optim_plan_build(&m->zero, slices, n, m->comm, c->channels, c->padded_vocab_size);
    size_t count = m->num_params, shard = m->zero.shard_size;
    cuda_check(cudaMalloc(&m->params_memory, count * sizeof(bf16)));
    cuda_check(cudaMalloc(&m->master_lo, shard * sizeof(int16_t)));
    cuda_check(cudaMalloc(&m->m_memory, shard * sizeof(float)));
    cuda_check(cudaMalloc(&m->v_memory, shard * sizeof(float)));
    cuda_check(cudaMalloc(&m->grads_memory, count * sizeof(float)));
    cuda_check(cudaMemset(m->grads_memory, 0, count * sizeof(float)));
}

// The LM head for batches of up to B x T tokens (path and scratch as the build was asked: see
// llmc/head/fused_lce.cuh), the batch staging, and the plan of the gradient reduce-scatters.
template <typename Model, typename Config>
static inline void model_head_build(Model* m, const Config* c, int B, int T, FusedLcePath head, size_t head_scratch) {
    FusedLceConfig hc = fused_lce_config(B * T, c->channels, c->vocab_size, c->padded_vocab_size);
    hc.path = head;
    hc.scratch = head_scratch;
    fused_lce_build(&m->head, &hc);
    model_staging_build(&m->staging, (size_t)B * T, c->vocab_size);
    model_reduce_build(&m->reduce, m->comm->world, c->num_layers);
}

// Everything the two builds above made, and the activations' block; the struct cleared.
template <typename Model>
static inline void model_state_free(Model* m) {
    model_reduce_free(&m->reduce);
    zero_plan_free(&m->zero);
    model_staging_free(&m->staging);
    fused_lce_free(&m->head);
    cuda_check(cudaFree(m->acts_memory));
    cuda_check(cudaFree(m->grads_memory));
    cuda_check(cudaFree(m->v_memory));
    cuda_check(cudaFree(m->m_memory));
    cuda_check(cudaFree(m->master_lo));
    cuda_check(cudaFree(m->params_memory));
    memset(m, 0, sizeof(*m));
}

// The model's optimizer state (llmc/optim/optim.cuh): pointers into its blocks.
template <typename Model>
static inline OptimState model_optim(Model* m) {
    OptimState o = {m->num_params, m->params_memory, m->master_lo, m->m_memory, m->v_memory, m->grads_memory,
                    &m->zero, m->comm};
    return o;
}
