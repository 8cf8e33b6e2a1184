// master_split.h: the fp32 master weights kept as two 16-bit halves: the bf16 parameter the model
// computes with, and a signed 16-bit remainder. The master then costs 2 bytes a parameter beyond the
// bf16 copy instead of 4 (3.1 GB at GPT-2 1.5B), and it is still exactly fp32: AdamW reads and writes the
// same fp32 values it would with a separate fp32 copy.
//
// Why it is exact: the bit patterns of non-negative floats are in the order of their values. Round the
// pattern a of |x| to the nearest multiple of 2^16, ties up: b = (a + 0x8000) & 0xFFFF0000 is the pattern
// of a bf16, which with x's sign is the parameter; the remainder a − b lies in [−32768, 32767] and is
// stored as int16. Back: a = b + remainder, an integer addition on the patterns, which undoes the
// subtraction whatever the values are, also where b is a power of two above a (there a − b counts ulps of
// a's binade, and adding them back lands on a all the same). So every finite x comes back bit for bit. An
// |x| that rounds past bf16's largest value gives the parameter ±inf, as any rounding to bf16 would (x
// itself still comes back); a NaN becomes the canonical NaN.
//
// The parameter is x rounded to the nearest bf16 with ties away from zero; __float2bfloat16 rounds ties
// to even. The two differ only when x's low 16 bits are exactly 0x8000 and the bf16 below is even. So
// every place that derives parameters from master weights (AdamW, the init, a checkpoint's load) goes
// through master_split, and a model computes with the same parameters however it got them.
//
// Host and device: dev/test/optim/test_master_split.c checks every one of the 2^32 patterns on the CPU.
#pragma once
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define MASTER_SPLIT_FN static inline __host__ __device__
#else
#define MASTER_SPLIT_FN static inline
#endif

MASTER_SPLIT_FN uint32_t master_split_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    return u;
}

MASTER_SPLIT_FN float master_split_float(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

// x -> (*hi: the bf16 parameter's bits, *lo: the remainder)
MASTER_SPLIT_FN void master_split(float x, uint16_t* hi, int16_t* lo) {
    uint32_t u = master_split_bits(x), sign = u & 0x80000000u, a = u ^ sign;
    if (a > 0x7F800000u) {  // NaN
        *hi = (uint16_t)((sign >> 16) | 0x7FC0u);
        *lo = 0;
        return;
    }
    uint32_t b = (a + 0x8000u) & 0xFFFF0000u;
    *hi = (uint16_t)((sign | b) >> 16);
    *lo = (int16_t)(int32_t)(a - b);
}

// (hi, lo) -> the fp32 master weight
MASTER_SPLIT_FN float master_join(uint16_t hi, int16_t lo) {
    uint32_t h = (uint32_t)hi << 16, sign = h & 0x80000000u;
    return master_split_float(sign | ((h ^ sign) + (uint32_t)(int32_t)lo));
}

// The bf16 parameter of master weight x, as a float (for CPU references that compute as the GPU does)
MASTER_SPLIT_FN float master_param(float x) {
    uint16_t hi;
    int16_t lo;
    master_split(x, &hi, &lo);
    return master_split_float((uint32_t)hi << 16);
}
