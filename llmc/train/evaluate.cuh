// evaluate.cuh: what the trainer measures and shows of a model between steps: the mean loss over the
// first batches of the val split (on any number of ranks, over the same batches), and a text sample,
// token by token (llmc/model/sample.h draws each from the logits row the model computes for the last position).
// Both run on a Model (llmc/model/model.cuh), whichever its family.
#pragma once
#include <signal.h>
#include "../model/model.cuh"
#include "../data/dataloader.h"
#include "../data/tokenizer.h"
#include "../model/sample.h"

// Mean loss over `batches` batches from the start of the val split into *out. With several ranks each
// evaluates its share (the loader deals batch i to rank i mod world) and the sums are gathered, so the
// mean is over the same batches at any number of GPUs. Returns 0, or -1 when a shard is bad (the reason
// in val->err).
static int evaluate_loss(Model* m, DataLoader* val, int batches, float* out, const GpuContext* ctx) {
    dataloader_reset(val);
    int rank = m->comm->rank, world = m->comm->world, mine = 0;
    double sum = 0.0;
    for (int i = rank; i < batches; i += world, mine++) {
        if (dataloader_next_batch(val) != 0) return -1;
        model_forward(m, val->inputs, val->cfg.B, val->cfg.T, ctx);
        model_eval_loss(m, val->targets, ctx);
        float loss;
        cuda_check(cudaMemcpyAsync(&loss, m->head.loss, sizeof(float), cudaMemcpyDeviceToHost, ctx->stream));
        cuda_check(cudaStreamSynchronize(ctx->stream));
        sum += loss;
    }
    fused_lce_check(&m->head, ctx);
    if (world == 1) {
        *out = (float)(sum / batches);
        return 0;
    }
    float part[2] = {(float)sum, (float)mine};
    float* all = (float*)malloc_check(2 * (size_t)world * sizeof(float));
    comm_gather_host(m->comm, part, 2, all, m->acts.scratch, ctx->stream);  // scratch: free between steps
    double total = 0.0, count = 0.0;
    for (int r = 0; r < world; r++) { total += all[2 * r]; count += all[2 * r + 1]; }
    free(all);
    *out = (float)(total / count);
    return 0;
}

// Samples n tokens after the encoding's <|endoftext|> (no KV cache: one forward of the whole prefix per
// token, B = 1) and prints them decoded with its tokenizer, after `sample (step S): `. The RNG state is
// the caller's, kept in checkpoints: a resumed run samples the same text as the uninterrupted one. The
// sample ends early once *stop is non-zero (a signal handler's flag: Ctrl-C; NULL: never).
static void evaluate_sample(Model* m, const Tokenizer* tok, int n, float temperature, int top_k, uint64_t* rng,
                            int step, const volatile sig_atomic_t* stop, const GpuContext* ctx) {
    int V = m->config.vocab_size, maxT = m->max_T;
    int* ids = (int*)malloc_check((size_t)maxT * sizeof(int));
    float* logits = (float*)malloc_check((size_t)V * sizeof(float));
    float* sorted = (float*)malloc_check((size_t)V * sizeof(float));
    int len = 1;
    ids[0] = tok->eot_id;
    printf("sample (step %d): ", step);
    for (int i = 0; i < n && !(stop && *stop); i++) {
        int window = len < maxT ? len : maxT;  // past T tokens the context slides
        model_forward(m, ids + len - window, 1, window, ctx);
        model_logits_row(m, window - 1, ctx);
        cuda_check(cudaMemcpyAsync(logits, m->acts.logits_row, (size_t)V * sizeof(float), cudaMemcpyDeviceToHost, ctx->stream));
        cuda_check(cudaStreamSynchronize(ctx->stream));
        int next = sample_token(logits, V, temperature, top_k, sorted, rng);
        size_t blen;
        const unsigned char* s = tokenizer_decode(tok, next, &blen);
        if (s) fwrite(s, 1, blen, stdout);
        fflush(stdout);
        if (len == maxT) memmove(ids, ids + 1, (size_t)(maxT - 1) * sizeof(int)); else len++;
        ids[len - 1] = next;
    }
    printf("\n");
    free(sorted);
    free(logits);
    free(ids);
}
