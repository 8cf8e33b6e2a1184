// test_sample.c: the trainer's token draw for text samples (llmc/model/sample.h), on the CPU:
//   - temperature 0 takes the argmax, the first on ties, and leaves the RNG state alone;
//   - top_k keeps exactly the k largest logits, and every logit tied with the k-th; 0 or >= V keeps all;
//   - the draws' frequencies match softmax(logits / temperature) over the kept logits, computed here
//     apart in double: within 5 standard deviations of a binomial count for each token, at temperature
//     1 and 2, with and without top_k (the seed is fixed, so the counts are too; 5σ leaves room for
//     any fixed seed while a wrong temperature or a wrong cut misses by tens of σ);
//   - logits of 1e4 and more draw as their differences say (no overflow), and a -inf logit is never drawn;
//   - the same RNG state draws the same tokens.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include "../../../llmc/model/sample.h"
#include "../testing.h"

#define MAXV 16
#define DRAWS 200000

// how often each token is drawn in DRAWS draws from one RNG stream
static void histogram(const float* logits, int V, float temperature, int top_k, uint64_t seed, long* count) {
    float sorted[MAXV];
    uint64_t rng = seed;
    for (int j = 0; j < V; j++) count[j] = 0;
    for (int i = 0; i < DRAWS; i++) {
        int t = sample_token(logits, V, temperature, top_k, sorted, &rng);
        if (t >= 0 && t < V) count[t]++;
    }
}

// the distribution the draws must follow: softmax(logits / temperature) over the kept tokens, where a
// token is kept when fewer than top_k logits are strictly larger than its own (0: all kept)
static void expected(const float* logits, int V, float temperature, int top_k, double* p) {
    double mx = -INFINITY, total = 0.0;
    for (int j = 0; j < V; j++) mx = logits[j] > mx ? logits[j] : mx;
    for (int j = 0; j < V; j++) {
        int larger = 0;
        for (int i = 0; i < V; i++) larger += logits[i] > logits[j];
        int kept = top_k <= 0 || larger < top_k;
        p[j] = kept ? exp(((double)logits[j] - mx) / temperature) : 0.0;
        total += p[j];
    }
    for (int j = 0; j < V; j++) p[j] /= total;
}

// every token's count within 5σ of DRAWS·p, and tokens of p = 0 never drawn
static void check_distribution(const char* what, const float* logits, int V, float temperature, int top_k) {
    long count[MAXV];
    double p[MAXV], worst = 0.0;
    int worst_j = 0, bad_zero = -1;
    histogram(logits, V, temperature, top_k, 0x5eed0000ULL + (uint64_t)top_k, count);
    expected(logits, V, temperature, top_k, p);
    for (int j = 0; j < V; j++) {
        if (p[j] == 0.0) {
            if (count[j] != 0) bad_zero = j;
            continue;
        }
        double sd = sqrt(DRAWS * p[j] * (1.0 - p[j])), z = sd > 0.0 ? fabs(count[j] - DRAWS * p[j]) / sd : 0.0;
        if (z > worst) { worst = z; worst_j = j; }
    }
    EXPECT(bad_zero < 0, "%s: token %d, outside the kept set, was drawn %ld times", what, bad_zero,
           bad_zero < 0 ? 0L : count[bad_zero]);
    EXPECT(worst <= 5.0, "%s: token %d drawn %ld times in %d, expected %.1f (p = %.5f): %.1f sigma", what, worst_j,
           count[worst_j], DRAWS, DRAWS * p[worst_j], p[worst_j], worst);
}

int main(void) {
    float sorted[MAXV];
    // temperature 0: the argmax, the first of tied maxima; the RNG is not advanced
    {
        float a[6] = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f, -INFINITY};
        uint64_t rng = 42;
        int t = sample_token(a, 6, 0.0f, 0, sorted, &rng);
        EXPECT(t == 1, "temperature 0: token %d, expected the first maximum, 1", t);
        EXPECT(rng == 42, "temperature 0 advanced the RNG state");
        float b[1] = {-7.0f};
        t = sample_token(b, 1, 0.0f, 0, sorted, &rng);
        EXPECT(t == 0, "V = 1 at temperature 0: token %d", t);
        t = sample_token(b, 1, 1.0f, 0, sorted, &rng);
        EXPECT(t == 0, "V = 1 at temperature 1: token %d", t);
    }
    // the distributions, with and without the cut
    {
        float a[8] = {0.0f, 1.0f, 2.0f, 3.0f, -1.0f, 0.5f, 2.5f, -3.0f};
        check_distribution("8 logits, temperature 1", a, 8, 1.0f, 0);
        check_distribution("8 logits, temperature 2", a, 8, 2.0f, 0);
        check_distribution("8 logits, temperature 0.5", a, 8, 0.5f, 0);
        check_distribution("8 logits, top_k 3", a, 8, 1.0f, 3);
        check_distribution("8 logits, top_k 1", a, 8, 1.0f, 1);
        check_distribution("8 logits, top_k 3, temperature 2", a, 8, 2.0f, 3);
        check_distribution("8 logits, top_k 8 (= V)", a, 8, 1.0f, 8);
        check_distribution("8 logits, top_k 100 (> V)", a, 8, 1.0f, 100);
    }
    // ties at the k-th logit are all kept: with top_k 2 the three 4s stay, the 1 does not
    {
        float a[5] = {5.0f, 4.0f, 4.0f, 4.0f, 1.0f};
        check_distribution("ties at the k-th, top_k 2", a, 5, 1.0f, 2);
        long count[MAXV];
        histogram(a, 5, 1.0f, 2, 7, count);
        EXPECT(count[1] > 0 && count[2] > 0 && count[3] > 0 && count[4] == 0,
               "ties at the k-th: counts %ld %ld %ld %ld %ld, expected tokens 1-3 drawn and 4 never", count[0], count[1],
               count[2], count[3], count[4]);
    }
    // large logits: only their differences count (a naive exp would overflow to inf and draw token 0)
    {
        float a[4] = {10000.0f, 10001.0f, 9999.0f, 10002.0f};
        check_distribution("logits near 1e4", a, 4, 1.0f, 0);
        float b[4] = {-INFINITY, 0.0f, -INFINITY, 1.0f};
        check_distribution("-inf logits", b, 4, 1.0f, 0);
    }
    // the same RNG state gives the same tokens; another state other tokens
    {
        float a[8] = {0.0f, 1.0f, 2.0f, 3.0f, -1.0f, 0.5f, 2.5f, -3.0f};
        uint64_t r1 = 99, r2 = 99, r3 = 100;
        int same = 1, differ = 0;
        for (int i = 0; i < 1000; i++) {
            int t1 = sample_token(a, 8, 1.0f, 0, sorted, &r1), t2 = sample_token(a, 8, 1.0f, 0, sorted, &r2);
            int t3 = sample_token(a, 8, 1.0f, 0, sorted, &r3);
            same &= t1 == t2;
            differ |= t1 != t3;
        }
        EXPECT(same, "two draws from equal RNG states differ");
        EXPECT(differ, "1000 draws from two different RNG states were all equal");
        EXPECT(r1 == r2, "equal states drew and ended unequal");
    }
    return test_summary("test_sample");
}
