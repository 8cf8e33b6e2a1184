// model_ref_fixture.h: one fixed model of each family and one fixed batch that both builds of
// model_ref.h evaluate, so that the float build (the one test_gpt.cu uses) can be compared with the
// double build without linking the two: test_model_ref (double) checks that it still reproduces the
// golden values below to 1e-10, and test_model_ref_float checks that float agrees with them to the
// tolerance it states. Include after model_ref.h. The parameters are the family's init, whose values
// are floats (model_init_values), exact in both builds: both evaluate exactly the same model, and what
// differs between them is their own arithmetic; the sizes are GPU-test-like in miniature (C 64, V not
// a power of 2; the Llama-style model with GQA 4:2 and an odd F).
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include "../../llmc/core/check.h"
#include "../../llmc/core/rand.h"
#include "../../llmc/model/spec.h"

// Printed by build/test_model_ref (double, %.17g). If the init recipe, the RNG or the fixture changes,
// rerun it and paste its "fixture" lines here: the loss, the global gradient norm, then the gradient
// norm of each tensor in the family's table order.
typedef struct {
    double loss, grad_norm;
    double tensor_grad_norms[MODEL_MAX_TENSORS];
} ref_fixture_golden;

static const ref_fixture_golden ref_fixture_goldens[MODEL_NUM_FAMILIES] = {
    {6.2206090233045925, 2.4429780907321268,
     {1.2986072271290048, 0.73819571847713883, 0.0063927796460109066, 0.011753322024700013, 0.30303729009713876,
      0.07140182406257603, 0.61334728243530157, 0.88241709659690104, 0.012234813450946838, 0.011008897399342143,
      0.60080087944455873, 0.070522292542417125, 1.178982498396318, 0.85315841069316933, 0.018694959128706525,
      0.020740535771456674}},
    {6.2076577176240191, 1.8544579509663663,
     {1.0662942195718108, 0.0079819291138149093, 0.44708859640980747, 0.93512751913232439, 0.0033132728524881139,
      0.16559682980927892, 0.23494864550730016, 0.023905452135149805, 1.0697709584075423}},
};

// The fixture's config of a family: V 500 padded to 512, maxT 16, L 2, C 64, NH 4; GPT-2's NKV = NH and
// F = 4C, the Llama-style NKV 2, F 171, RoPE theta 1e4, eps 1e-5.
static inline ModelConfig ref_fixture_config(int family) {
    if (family == MODEL_FAMILY_GPT2) return model_config_gpt2_sizes(16, 500, 512, 2, 4, 64);
    return model_config_llama_sizes(500, 512, 16, 2, 64, 4, 2, 171, 10000.0, 1e-5);
}

// The batch, allocated (free both): n ids in [0, V) from seed 99, and targets likewise, except that the
// positions i % 7 == 3 are ignored (-1) and draw no number. The golden values depend on this exact
// sequence of draws.
static inline void ref_fixture_batch(int** inputs, int** targets, int n, int V) {
    *inputs = (int*)malloc_check((size_t)n * sizeof(int));
    *targets = (int*)malloc_check((size_t)n * sizeof(int));
    uint64_t rng = 99;
    for (int i = 0; i < n; i++) {
        (*inputs)[i] = (int)(rand_next(&rng) % (uint64_t)V);
        (*targets)[i] = i % 7 == 3 ? -1 : (int)(rand_next(&rng) % (uint64_t)V);
    }
}

// The family's fixture model at B 4, T 16, initialized from seed 1234, and its batch.
static inline void ref_fixture_build(ref_model* m, int family, int** inputs, int** targets, int* B, int* T) {
    ModelConfig c = ref_fixture_config(family);
    *B = 4;
    *T = 16;
    ref_model_build(m, &c, *B, *T);
    ref_model_init_params(m, 1234);
    ref_fixture_batch(inputs, targets, *B * *T, c.vocab_size);
}

// Builds the family's fixture and evaluates it: the loss, the global gradient norm and each tensor's
// (the family's table order) that both builds compare.
static inline void ref_fixture_run(int family, ref_fixture_golden* out) {
    ref_model m;
    int *inputs, *targets, B, T;
    ref_fixture_build(&m, family, &inputs, &targets, &B, &T);
    out->loss = ref_model_forward(&m, inputs, targets, B, T);
    ref_model_backward(&m);
    out->grad_norm = ref_model_grad_norm(&m);
    for (int i = 0; i < MODEL_MAX_TENSORS; i++)
        out->tensor_grad_norms[i] = i < m.spec->num_tensors ? ref_model_tensor_grad_norm(&m, i) : 0.0;
    ref_model_free(&m);
    free(inputs);
    free(targets);
}
