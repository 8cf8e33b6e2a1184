// ref_fixture.h: what the golden-value fixtures of the CPU reference models (gpt_ref_fixture.h,
// llama_ref_fixture.h) build the same way: parameters rounded to float and the fixed batch. One copy,
// so that both fixtures keep meaning "the same model and batch in either build" in the same way.
// Compiles in the float and the double build (gpt_real).
#pragma once
#include <stdint.h>
#include <stdlib.h>
#include "../../llmc/core/check.h"
#include "../../llmc/core/rand.h"
#include "gpt_ref_layers.h" // gpt_real

// Float values are exact in both builds: after this the float and the double build evaluate exactly
// the same model, and what differs between them is their own arithmetic.
static inline void ref_fixture_round_params(gpt_real* params, size_t n) {
    for (size_t i = 0; i < n; i++) params[i] = (gpt_real)(float)params[i];
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
