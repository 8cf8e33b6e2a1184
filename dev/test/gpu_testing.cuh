// gpu_testing.cuh: the GPU test binaries' first step. dev/test/run_tests.sh alone decides whether a GPU
// suite runs at all (when nvidia-smi finds a GPU), so a suite that then cannot start CUDA fails, with a
// line that says so (dev/test/core/test_run_tests.sh looks for it).
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime.h>

// Exits 1 with `name: CUDA cannot start: why` when no CUDA device can be used.
static void test_require_cuda(const char* name) {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err == cudaSuccess && count > 0) return;
    fprintf(stderr, "%s: CUDA cannot start: %s\n  hint: check nvidia-smi, the driver and CUDA_VISIBLE_DEVICES\n", name,
            err != cudaSuccess ? cudaGetErrorString(err) : "no CUDA device");
    exit(1);
}
