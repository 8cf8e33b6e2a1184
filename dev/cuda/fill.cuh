// fill.cuh: deterministic bf16 operands for the playground's benches: element i of a buffer is a hash
// of (i, seed) mapped to [-scale, scale), filled on the GPU.
#pragma once
#include "../../llmc/core/cuda_common.cuh"

__global__ void fill_kernel(bf16* p, size_t n, float scale, unsigned seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)(i * 2654435761u) ^ seed;
        h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
        p[i] = __float2bfloat16(scale * ((float)(h & 0xffff) / 32768.0f - 1.0f));
    }
}

// n bf16 in device memory, filled on `stream`
static bf16* alloc_filled(size_t n, float scale, unsigned seed, cudaStream_t stream = 0) {
    bf16* p;
    cuda_check(cudaMalloc(&p, n * sizeof(bf16)));
    fill_kernel<<<1024, 256, 0, stream>>>(p, n, scale, seed);
    cuda_check_launch();
    return p;
}
