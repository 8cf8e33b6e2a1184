// timing.cuh: the timers of the dev/cuda playgrounds: the median of `reps` runs of fn on a stream, in
// ms, by CUDA events, after two warm-up runs (first-call allocations, cuBLASLt heuristics, clocks); and
// the same for two functions run in alternation.
#pragma once
#include <algorithm>
#include "../../llmc/core/cuda_common.cuh"

template <typename F>
static float time_ms(F fn, cudaStream_t stream, int reps) {
    cudaEvent_t a, b;
    cuda_check(cudaEventCreate(&a)); cuda_check(cudaEventCreate(&b));
    fn(); fn();
    float times[64];
    reps = reps < 1 ? 1 : reps > 64 ? 64 : reps;
    for (int r = 0; r < reps; r++) {
        cuda_check(cudaEventRecord(a, stream));
        fn();
        cuda_check(cudaEventRecord(b, stream));
        cuda_check(cudaEventSynchronize(b));
        cuda_check(cudaEventElapsedTime(&times[r], a, b));
    }
    cuda_check(cudaEventDestroy(a)); cuda_check(cudaEventDestroy(b));
    std::sort(times, times + reps);
    return times[reps / 2];
}

// Two functions timed in alternation, a run of each per round, so that both see the same clocks and
// temperature (a power-capped GPU's clock moves by several percent over seconds): the medians of `reps`
// runs of each into *ta and *tb, after two warm-up rounds.
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
