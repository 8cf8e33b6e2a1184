// llama_ref_fixture.h: one fixed Llama-style model and batch that both builds of llama_ref.h evaluate, so
// that the float build (the one CUDA tests will use) can be compared with the double build without
// linking the two: test_llama_ref (double) checks that it still reproduces the golden values below to
// 1e-10, and test_llama_ref_float checks that float agrees with them to the tolerances it states.
// Include after llama_ref.h. The parameters are the init rounded to float, so that both builds evaluate
// exactly the same model; the sizes are GPU-test-like in miniature (V not a power of 2, GQA 4:2, F odd).
#pragma once
#include "ref_fixture.h"

// Printed by build/test_llama_ref (double, %.17g). If the init recipe, the RNG or the fixture changes,
// rerun it and paste its "fixture:" lines here: the loss, then the gradient norm of each tensor.
#define LLAMA_FIXTURE_LOSS 6.2076577176240191
static const double llama_fixture_grad_norms[LLAMA_REF_NUM_TENSORS] = {
    1.0662942195718108, 0.0079819291138149093, 0.44708859640980747, 0.93512751913232439, 0.0033132728524881139,
    0.16559682980927892, 0.23494864550730016, 0.023905452135149805, 1.0697709584075423};

static void llama_fixture_build(llama_ref_model* m, int** inputs, int** targets, int* B, int* T) {
    llama_ref_config c;
    c.max_seq_len = 16;
    c.vocab_size = 500;
    c.padded_vocab_size = 512;
    c.num_layers = 2;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.channels = 64;
    c.ffn_hidden = 171;
    c.rope_theta = 10000;
    c.rms_norm_eps = 1e-5;
    *B = 4;
    *T = 16;
    llama_ref_build(m, &c, *B, *T);
    llama_ref_init_params(m, 1234);
    ref_fixture_round_params(m->params_memory, m->num_params);
    ref_fixture_batch(inputs, targets, *B * *T, c.vocab_size);
}

// Square root of the sum of squares of each tensor's gradient, in double.
static void llama_fixture_tensor_norms(double norms[LLAMA_REF_NUM_TENSORS], const llama_ref_model* m) {
    size_t sizes[LLAMA_REF_NUM_TENSORS], off = 0;
    llama_ref_tensor_sizes(sizes, &m->config);
    for (int i = 0; i < LLAMA_REF_NUM_TENSORS; i++) {
        norms[i] = sqrt(gpt_ref_sum_squares(m->grads_memory + off, sizes[i]));
        off += sizes[i];
    }
}

// Builds the fixture and evaluates it: the loss and the per-tensor gradient norms that both builds compare.
static void llama_fixture_run(double* loss, double norms[LLAMA_REF_NUM_TENSORS]) {
    llama_ref_model m;
    int *inputs, *targets, B, T;
    llama_fixture_build(&m, &inputs, &targets, &B, &T);
    *loss = llama_ref_forward(&m, inputs, targets, B, T);
    llama_ref_backward(&m);
    llama_fixture_tensor_norms(norms, &m);
    llama_ref_free(&m);
    free(inputs);
    free(targets);
}
