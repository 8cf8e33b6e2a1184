// timing.cuh: the one timer of the dev/cuda playgrounds: the median of `reps` runs of fn on a stream,
// in ms, by CUDA events, after two warm-up runs (first-call allocations, cuBLASLt heuristics, clocks).
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
