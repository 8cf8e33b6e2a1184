// test_master_split.c: the split master weights (llmc/optim/master_split.h) over every one of the 2^32 float
// bit patterns (under the sanitizers, build/asan/, every 4099th, plus the named cases):
//   - master_join(master_split(x)) gives x back bit for bit, for every x but NaN (-0, subnormals, ±inf,
//     FLT_MAX and the powers of two included); a NaN gives a NaN parameter and a NaN back;
//   - the parameter is x rounded to the nearest bf16 with ties away from zero, computed here apart in
//     double from the two bf16 neighbours of x (an overflow to inf counted as 2^128);
//   - it differs from round-to-nearest-even (what __float2bfloat16 does) only at ties whose bf16 below
//     is even.
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include "../../../llmc/optim/master_split.h"
#include "../testing.h"

#if defined(__SANITIZE_ADDRESS__)
#define PATTERN_STRIDE 4099u
#else
#define PATTERN_STRIDE 1u
#endif

// the value of the bf16 pattern h (upper 16 bits of a float), as if the exponent range went on: the
// pattern after the largest finite one stands for 2^128
static double bf16_value(uint32_t h_mag) {
    if (h_mag == 0x7F80u) return ldexp(1.0, 128);
    return (double)master_split_float(h_mag << 16);
}

// x's bf16 (magnitude pattern a) rounded to nearest from its two neighbours: *away with ties away from
// zero, *even with ties to even (__float2bfloat16's rounding of a finite value)
static void nearest(uint32_t a, uint32_t* away, uint32_t* even) {
    uint32_t below = a >> 16, above = below + 1;
    if ((a & 0xFFFFu) == 0) {
        *away = *even = below;
        return;
    }
    double x = (double)master_split_float(a), db = x - bf16_value(below), da = bf16_value(above) - x;
    *away = da <= db ? above : below;
    *even = da == db ? ((below & 1u) ? above : below) : *away;
}

typedef struct {
    long long checked, nan, round_trip_bad, param_bad, differs_from_even, differs_not_at_even_tie;
} Tally;

static void check_pattern(uint32_t u, Tally* t) {
    float x = master_split_float(u);
    uint16_t hi;
    int16_t lo;
    master_split(x, &hi, &lo);
    float back = master_join(hi, lo);
    uint32_t a = u & 0x7FFFFFFFu, hi_mag = hi & 0x7FFFu;
    t->checked++;
    if (a > 0x7F800000u) {  // NaN in, NaN parameter and NaN back
        t->nan++;
        int ok = hi_mag > 0x7F80u && isnan(back);
        if (!ok && t->round_trip_bad++ < 5) fprintf(stderr, "NaN 0x%08x -> hi 0x%04x back %g\n", u, hi, back);
        return;
    }
    if (master_split_bits(back) != u && t->round_trip_bad++ < 5)
        fprintf(stderr, "0x%08x -> hi 0x%04x lo %d -> back 0x%08x\n", u, hi, lo, master_split_bits(back));
    uint32_t away, even;
    nearest(a, &away, &even);
    uint32_t want = away | ((u >> 16) & 0x8000u);
    if (hi != want && t->param_bad++ < 5)
        fprintf(stderr, "0x%08x: parameter 0x%04x, nearest (ties away) 0x%04x\n", u, hi, want);
    if (hi_mag != even) {
        t->differs_from_even++;
        int even_tie = (a & 0xFFFFu) == 0x8000u && ((a >> 16) & 1u) == 0;
        if (!even_tie && t->differs_not_at_even_tie++ < 5)
            fprintf(stderr, "0x%08x: parameter 0x%04x, ties-to-even 0x%04x, not at an even tie\n", u, hi, even);
    }
}

static void check_named(const char* what, float x, uint16_t want_hi, int want_lo) {
    uint16_t hi;
    int16_t lo;
    master_split(x, &hi, &lo);
    float back = master_join(hi, lo);
    printf("  %-40s 0x%08x -> hi 0x%04x lo %6d -> 0x%08x\n", what, master_split_bits(x), hi, lo,
           master_split_bits(back));
    EXPECT(hi == want_hi && lo == want_lo, "%s: hi 0x%04x lo %d, expected 0x%04x %d", what, hi, lo, want_hi, want_lo);
    EXPECT(master_split_bits(back) == master_split_bits(x), "%s: not restored", what);
}

int main(void) {
    printf("named cases:\n");
    check_named("1", 1.0f, 0x3F80, 0);
    check_named("-0", -0.0f, 0x8000, 0);
    check_named("1 + 2^-8 (a tie, the bf16 below even)", master_split_float(0x3F808000u), 0x3F81, -32768);
    check_named("1 + 3*2^-8 (a tie, the bf16 below odd)", master_split_float(0x3F818000u), 0x3F82, -32768);
    check_named("just below 2: rounds to 2, the lower binade", master_split_float(0x3FFFFFFFu), 0x4000, -1);
    check_named("-(2 - 2^-9): the tie below 2", -master_split_float(0x3FFF8000u), 0xC000, -32768);
    check_named("FLT_MAX: parameter inf, restored", FLT_MAX, 0x7F80, -1);
    check_named("the smallest subnormal", master_split_float(1u), 0x0000, 1);
    check_named("-inf", -INFINITY, 0xFF80, 0);
    float p = master_param(master_split_float(0x3F808000u));
    EXPECT(p == master_split_float(0x3F810000u), "master_param of a tie: %.9g", p);

    Tally t = {0, 0, 0, 0, 0, 0};
    uint32_t u = 0;
    do {
        check_pattern(u, &t);
        u += PATTERN_STRIDE;
    } while (u >= PATTERN_STRIDE);  // until it wraps past 2^32
    printf("%lld patterns (every %u%s), %lld NaN: round trip wrong in %lld, parameter not the nearest "
           "(ties away) in %lld, different from ties-to-even in %lld (%lld of them not at an even tie)\n",
           t.checked, PATTERN_STRIDE, PATTERN_STRIDE == 1 ? ": all of them" : "", t.nan, t.round_trip_bad,
           t.param_bad, t.differs_from_even, t.differs_not_at_even_tie);
    EXPECT(t.round_trip_bad == 0, "%lld patterns not restored", t.round_trip_bad);
    EXPECT(t.param_bad == 0, "%lld parameters not the nearest bf16 (ties away from zero)", t.param_bad);
    EXPECT(t.differs_not_at_even_tie == 0, "%lld parameters differ from ties-to-even away from an even tie",
           t.differs_not_at_even_tie);
    if (PATTERN_STRIDE == 1)  // the even ties: a finite bf16 below with an even pattern (0x0000, 0x0002, ..,
                              // 0x7F7E: 0x7F80 / 2 of them), times 2 signs
        EXPECT(t.differs_from_even == 2 * 0x7F80 / 2, "%lld parameters differ from ties-to-even, expected the %d "
               "even ties", t.differs_from_even, 2 * 0x7F80 / 2);
    return test_summary("test_master_split");
}
