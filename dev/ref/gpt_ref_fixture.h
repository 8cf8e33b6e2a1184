// gpt_ref_fixture.h: one fixed model and batch that both builds of gpt_ref.h evaluate, so that the float
// build (the one test_gpt.cu uses) can be compared with the double build without linking the two:
// test_gpt_ref (double) checks that it still reproduces the golden values below to 1e-10, and
// test_gpt_ref_float checks that float agrees with them to the tolerances it states.
// Include after gpt_ref.h. The parameters are GPT-2's init rounded to float, so that both builds
// evaluate exactly the same model; the sizes are GPU-test-like in miniature (C 64, V not a power of 2).
#pragma once
#include "ref_fixture.h"

// Printed by build/test_gpt_ref (double, %.17g). If the init recipe, the RNG or the fixture changes,
// rerun it and paste its "fixture: loss ... grad norm ..." line here.
#define FIXTURE_LOSS 6.2206090233045925
#define FIXTURE_GRAD_NORM 2.4429780907321268

static void fixture_build(gpt_ref_model* m, int** inputs, int** targets, int* B, int* T) {
    gpt_ref_config c;
    c.max_seq_len = 16;
    c.vocab_size = 500;
    c.padded_vocab_size = 512;
    c.num_layers = 2;
    c.num_heads = 4;
    c.channels = 64;
    *B = 4;
    *T = 16;
    gpt_ref_build(m, &c, *B, *T);
    gpt_ref_init_params(m, 1234);
    ref_fixture_round_params(m->params_memory, m->num_params);
    ref_fixture_batch(inputs, targets, *B * *T, c.vocab_size);
}

// Builds the fixture and evaluates it: the loss and the gradient norm that both builds compare.
static void fixture_run(double* loss, double* grad_norm) {
    gpt_ref_model m;
    int *inputs, *targets, B, T;
    fixture_build(&m, &inputs, &targets, &B, &T);
    *loss = gpt_ref_forward(&m, inputs, targets, B, T);
    gpt_ref_backward(&m);
    *grad_norm = gpt_ref_grad_norm(&m);
    gpt_ref_free(&m);
    free(inputs);
    free(targets);
}
