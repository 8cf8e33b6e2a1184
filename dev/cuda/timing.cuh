// timing.cuh: the timers of the dev/cuda playgrounds: the median of `reps` runs of a function on a
// stream, in ms, by CUDA events, alone or in alternation with another.
#pragma once
#include <algorithm>
#include "../../llmc/core/cuda_common.cuh"

// Two functions timed in alternation, a run of each per round, so that both see the same clocks and
// temperature (a power-capped GPU's clock moves by several percent over seconds): the medians of `reps`
// runs of each into *ta and *tb, after two warm-up rounds (first-call allocations, cuBLASLt heuristics,
// clocks).
template <typename FA, typename FB>
static void time_ms_pair(FA fa, FB fb, cudaStream_t stream, int reps, float* ta, float* tb) {
    cudaEvent_t e[3];
    for (int i = 0; i < 3; i++) cuda_check(cudaEventCreate(&e[i]));
    fa(); fb(); fa(); fb();
    float a[64], b[64];
    reps = reps < 1 ? 1 : reps > 64 ? 64 : reps;
    for (int r = 0; r < reps; r++) {
        cuda_check(cudaEventRecord(e[0], stream));
        fa();
        cuda_check(cudaEventRecord(e[1], stream));
        fb();
        cuda_check(cudaEventRecord(e[2], stream));
        cuda_check(cudaEventSynchronize(e[2]));
        cuda_check(cudaEventElapsedTime(&a[r], e[0], e[1]));
        cuda_check(cudaEventElapsedTime(&b[r], e[1], e[2]));
    }
    for (int i = 0; i < 3; i++) cuda_check(cudaEventDestroy(e[i]));
    std::sort(a, a + reps);
    std::sort(b, b + reps);
    *ta = a[reps / 2];
    *tb = b[reps / 2];
}

// One function alone: time_ms_pair with nothing beside it
template <typename F>
static float time_ms(F fn, cudaStream_t stream, int reps) {
    float t, none;
    time_ms_pair(fn, [] {}, stream, reps, &t, &none);
    return t;
}
