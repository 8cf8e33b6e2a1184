// rand.h: a small, self-contained, seeded random number generator (splitmix64) for host code.
// The same seed gives the same sequence on every machine and compiler: nothing depends on libc's
// rand() or on floating point. rand_mix derives independent streams from (seed, a, b), e.g.
// (seed, epoch, shard), without keeping any state between them.
#pragma once
#include <math.h>
#include <stdint.h>

// One splitmix64 step: advances the state by a fixed odd constant and scrambles it. Passes BigCrush;
// its state is a plain uint64_t, so it can be saved and restored by copying.
static inline uint64_t rand_next(uint64_t* state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

// A state for the stream named by (seed, a, b): each input goes through a full scramble, so nearby
// values (epoch 3 and 4, shard 0 and 1) give unrelated streams.
static inline uint64_t rand_mix(uint64_t seed, uint64_t a, uint64_t b) {
    uint64_t s = seed;
    uint64_t h = rand_next(&s);
    s = h ^ a; h = rand_next(&s);
    s = h ^ b; h = rand_next(&s);
    return h;
}

// Uniform in [0, n) for 0 < n < 2^32: the high 32 bits scaled by n (Lemire's multiply-shift; the bias
// is below n / 2^32, irrelevant for shuffling data).
static inline uint32_t rand_below(uint64_t* state, uint32_t n) {
    return (uint32_t)(((rand_next(state) >> 32) * (uint64_t)n) >> 32);
}

// Fisher-Yates shuffle of a (n,) int32 array in place.
static inline void rand_shuffle_int32(uint64_t* state, int32_t* a, int32_t n) {
    for (int32_t i = n - 1; i > 0; i--) {
        int32_t j = (int32_t)rand_below(state, (uint32_t)i + 1);
        int32_t t = a[i]; a[i] = a[j]; a[j] = t;
    }
}

// Uniform in [0, 1) with 24 random bits: every value is exact in float (test data).
static inline float rand_uniform(uint64_t* state) {
    return (float)(rand_next(state) >> 40) * (1.0f / 16777216.0f);
}

// Uniform in (0, 1) with 53 bits, never 0, so that log() below stays finite.
static inline double rand_uniform_open(uint64_t* state) {
    return ((double)(rand_next(state) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// Standard normal by Box-Muller, one value per call (two draws): simple and the same on every machine.
// The model init (llmc/model/spec.h's model_init_values) and its CPU references both draw from it, so a seed is one model.
static inline double rand_normal(uint64_t* state) {
    double u1 = rand_uniform_open(state), u2 = rand_uniform_open(state);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
