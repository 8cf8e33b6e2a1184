// test_fuzz_readers.c: random corruption of a token shard and of a checkpoint, fed to their readers in
// this process (llmc/data/shard.h with the data loader on top, llmc/io/checkpoint.h): every input must be
// accepted as valid or refused with a message naming the file; nothing may crash, hang or exit (make
// test also runs this under AddressSanitizer and UndefinedBehaviorSanitizer, build/asan/).
// Fixed seed, a fixed number of inputs per reader, and a time bound: a slow machine checks fewer.
// An accepted shard must be what its header says (size, every id below the vocabulary); an accepted
// checkpoint must be the original bytes (any change is caught by the checksum or a size check).
// Mutations: bytes flipped, a header int set to an edge value, the file cut or grown, a run of 0xff.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "../../../llmc/io/checkpoint.h"
#include "../../../llmc/data/dataloader.h"
#include "../testing.h"

#define ROUNDS 1500        // inputs per reader
#define TIME_LIMIT_S 20.0  // per reader
#define SHARD_TOKENS 300
#define CKPT_PARAMS 64
// a wrong verdict on one input: printed here, counted in the one check per property at the end
#define FUZZ_FAIL(...) do { fprintf(stderr, "FAIL "); fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); } while (0)

static char tmp_dir[] = "/tmp/test_fuzz_readers.XXXXXX";
static uint64_t rng = 0x5eed2026ULL;

static uint64_t next_rand(void) {  // splitmix64
    uint64_t z = (rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static unsigned char* read_all(const char* path, size_t* n) {
    FILE* f = fopen_check(path, "rb");
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char* b = (unsigned char*)malloc_check(*n + 1);
    fread_check(b, 1, *n, f);
    fclose(f);
    return b;
}

static void write_all(const char* path, const unsigned char* b, size_t n) {
    FILE* f = fopen_check(path, "wb");
    if (n) fwrite_check(b, 1, n, f);
    fclose_check(f);
}

// A random corruption of orig (n bytes) into out (room for n + 4096 bytes); returns the new length.
static size_t mutate(unsigned char* out, const unsigned char* orig, size_t n) {
    memcpy(out, orig, n);
    size_t len = n;
    int kinds = 1 + (int)(next_rand() % 3);
    for (int k = 0; k < kinds; k++) {
        switch (next_rand() % 5) {
        case 0:  // flip a few bits anywhere
            for (int i = 0, m = 1 + (int)(next_rand() % 8); i < m && len; i++) out[next_rand() % len] ^= (unsigned char)(1u << (next_rand() % 8));
            break;
        case 1: {  // a header int set to an edge value
            const int32_t edge[] = {0, 1, -1, 2, 3, 255, 1024, 2047, 2048, 65535, 65536, 0x7fffffff, (int32_t)0x80000000,
                                    20240520, 20251202, 50257, 50304};
            int32_t v = edge[next_rand() % (sizeof(edge) / sizeof(edge[0]))];
            size_t at = 4 * (next_rand() % 32);
            if (at + 4 <= len) memcpy(out + at, &v, 4);
            break;
        }
        case 2:  // cut
            len = len ? (size_t)(next_rand() % len) : 0;
            break;
        case 3: {  // grow by up to 4 KiB of random bytes
            size_t add = 1 + next_rand() % 4096;
            if (len + add > n + 4096) add = n + 4096 - len;
            for (size_t i = 0; i < add; i++) out[len + i] = (unsigned char)next_rand();
            len += add;
            break;
        }
        default: {  // a run of 0xff (token ids 65535, NaNs)
            if (!len) break;
            size_t at = next_rand() % len, m = 1 + next_rand() % 64;
            if (at + m > len) m = len - at;
            memset(out + at, 0xff, m);
        }
        }
    }
    return len;
}

// --- the shard reader and the loader --------------------------------------------------------------

static void fuzz_shards(void) {
    char dir[600], path[700], pattern[700], good[700];
    snprintf(dir, sizeof(dir), "%s/shards", tmp_dir);
    if (mkdir(dir, 0700) != 0) { perror(dir); exit(EXIT_FAILURE); }
    snprintf(good, sizeof(good), "%s/a_good.bin", dir);
    snprintf(path, sizeof(path), "%s/b_fuzz.bin", dir);
    snprintf(pattern, sizeof(pattern), "%s/*.bin", dir);
    uint16_t t[SHARD_TOKENS];
    for (int i = 0; i < SHARD_TOKENS; i++) t[i] = (uint16_t)((i * 7919) % GPT2_VOCAB);
    ShardWriter w;
    shard_writer_open(&w, good);
    shard_writer_append(&w, t, SHARD_TOKENS);
    shard_writer_close(&w);
    size_t n;
    unsigned char* orig = read_all(good, &n);
    unsigned char* buf = (unsigned char*)malloc_check(n + 4096);
    uint32_t* tokens = (uint32_t*)malloc_check(2 * (n + 4096));  // accepted: ntok <= (len - 1024) / 2 ids
    int rounds = 0, accepted = 0, bad_verdict = 0;
    double t0 = now_s();
    for (; rounds < ROUNDS && now_s() - t0 < TIME_LIMIT_S; rounds++) {
        size_t len = mutate(buf, orig, n);
        write_all(path, buf, len);
        char err[1024] = "";
        int width = 0;
        int64_t ntok = shard_check_header(path, &width, err, sizeof(err));
        int ok = ntok >= 0;
        if (ok) ok = shard_read_tokens(path, ntok, width, GPT2_VOCAB, tokens, err, sizeof(err)) == 0;
        if (ok) {
            accepted++;
            int consistent = (width == 2 || width == 4) && (int64_t)len == SHARD_HEADER_BYTES + width * ntok;
            for (int64_t i = 0; i < ntok && consistent; i++) consistent = tokens[i] < GPT2_VOCAB;
            if (!consistent) {
                bad_verdict++;
                FUZZ_FAIL("round %d: accepted a shard of %zu bytes that is not what its header says", rounds, len);
            }
        } else if (!strstr(err, path)) {
            bad_verdict++;
            FUZZ_FAIL("round %d: refused without naming %s: %s", rounds, path, err);
        }
        // the loader over the good shard and this one: init and a few batches, each 0 or an error
        DataLoader dl;
        DataLoaderConfig c;
        memset(&c, 0, sizeof(c));
        c.pattern = pattern; c.B = 2; c.T = 8; c.shuffle = 1; c.seed = (uint64_t)rounds;
        int rc = dataloader_init(&dl, &c);
        for (int b = 0; b < 40 && rc == 0; b++) rc = dataloader_next_batch(&dl);
        if (rc != 0 && !dl.err[0]) { bad_verdict++; FUZZ_FAIL("round %d: the loader failed without a message", rounds); }
        dataloader_free(&dl);
    }
    printf("shards: %d corrupted inputs in %.1f s, %d accepted (consistent), %d refused with the file named\n",
           rounds, now_s() - t0, accepted, rounds - accepted);
    EXPECT(rounds >= 100, "only %d shard inputs within %.0f s", rounds, TIME_LIMIT_S);
    EXPECT(bad_verdict == 0, "%d shard inputs got a wrong verdict", bad_verdict);
    free(orig); free(buf); free(tokens);
}

// --- the checkpoint reader -----------------------------------------------------------------------

static CheckpointState fuzz_state(void) {
    CheckpointState s;
    memset(&s, 0, sizeof(s));
    s.model.num_layers = 1; s.model.channels = 8; s.model.num_heads = 1;
    s.model.vocab_size = 16; s.model.padded_vocab_size = 16; s.model.max_seq_len = 8;
    s.model.num_params = CKPT_PARAMS;
    s.step = 7;
    s.data.B = 2; s.data.T = 8; s.data.total_windows = 100; s.data.shuffle = 1;
    snprintf(s.settings, sizeof(s.settings), "-depth 1 -lr 0.001");
    return s;
}

static void fuzz_checkpoints(void) {
    char good[700], path[700];
    snprintf(good, sizeof(good), "%s/good.bin", tmp_dir);
    snprintf(path, sizeof(path), "%s/fuzz.bin", tmp_dir);
    CheckpointState s = fuzz_state();
    float t[3 * CKPT_PARAMS];
    for (int i = 0; i < 3 * CKPT_PARAMS; i++) t[i] = 0.01f * (float)(i + 1);
    CheckpointWriter w;
    int rc = checkpoint_writer_open(&w, good, &s);
    if (rc == 0) rc = checkpoint_writer_append(&w, t, sizeof(t));
    if (rc == 0) rc = checkpoint_writer_close(&w);
    if (rc != 0) { fprintf(stderr, "%s\n", w.err); exit(EXIT_FAILURE); }
    size_t n;
    unsigned char* orig = read_all(good, &n);
    unsigned char* buf = (unsigned char*)malloc_check(n + 4096);
    int rounds = 0, accepted = 0, bad_verdict = 0;
    double t0 = now_s();
    for (; rounds < ROUNDS && now_s() - t0 < TIME_LIMIT_S; rounds++) {
        size_t len = mutate(buf, orig, n);
        write_all(path, buf, len);
        CheckpointReader r;
        rc = checkpoint_reader_open(&r, path);
        if (rc == 0) rc = checkpoint_check_model(&r, &s.model);
        if (rc == 0) rc = checkpoint_reader_verify(&r);
        float back[3 * CKPT_PARAMS];
        if (rc == 0) rc = checkpoint_reader_read(&r, back, sizeof(back));
        checkpoint_reader_close(&r);
        if (rc == 0) {
            accepted++;
            int same = len == n && memcmp(buf, orig, n) == 0;
            if (!same) {
                bad_verdict++;
                FUZZ_FAIL("round %d: accepted a checkpoint that differs from the one written", rounds);
            }
        } else if (!strstr(r.err, path)) {
            bad_verdict++;
            FUZZ_FAIL("round %d: refused without naming %s: %s", rounds, path, r.err);
        }
    }
    printf("checkpoints: %d corrupted inputs in %.1f s, %d accepted (all unchanged), %d refused with the file named\n",
           rounds, now_s() - t0, accepted, rounds - accepted);
    EXPECT(rounds >= 100, "only %d checkpoint inputs within %.0f s", rounds, TIME_LIMIT_S);
    EXPECT(bad_verdict == 0, "%d checkpoint inputs got a wrong verdict", bad_verdict);
    free(orig); free(buf);
}

int main(void) {
    if (!mkdtemp(tmp_dir)) { perror("mkdtemp"); return 1; }
    fuzz_shards();
    fuzz_checkpoints();
    test_remove_dir(tmp_dir);
    return test_summary("test_fuzz_readers");
}
