// test_dataloader.c: CPU tests of the shard format (llmc/data/shard.h) and the data loader (llmc/data/dataloader.h).
// Writes its own small shards into a temporary directory. Token values are chosen so that every token
// is unique: shard s holds base[s], base[s]+1, ... with bases far apart, so the first token of a batch
// row names its window, and a row that crosses a shard or starts off the stride T is caught.
// Checks: shard round trip; rows are windows with targets = inputs shifted by one; the sequential (val)
// stream and reset; shuffling is seeded, reproducible, changes with seed and epoch, keeps a shard's
// windows together; with 1, 2 and 3 ranks every window is taken exactly once per epoch; save/restore
// continues with the identical batches (also into another world size), and a position outside the
// stream (negative, or so large that index * B overflows) is refused naming it; each bad shard gives an error
// naming the file. The uint32 layout: the same ids in uint32 shards give the same batches; an id above
// 65535 survives; an id >= vocab is refused with its byte offset (1024 + 4 * index); a pattern mixing
// the layouts is refused naming a shard of each; each layout's magic with the other's version is refused.
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include "../../../llmc/data/dataloader.h"
#include "../testing.h"

#define B_ 3
#define T_ 4
#define N_SHARDS 4
static const int shard_len[N_SHARDS] = {30, 41, 13, 57};  // windows (n-1)/T: 7, 10, 3, 14 = 34 in all
static const int shard_base[N_SHARDS] = {100, 1000, 2000, 3000};
#define MAX_TOKEN 4096

static char tmp_dir[256];
static int n_windows;                    // 34
static int window_of_token[MAX_TOKEN];   // first token of a window -> window id (shard-major), else -1
static int shard_of_window[64];

// --- fixture -------------------------------------------------------------------------------------

static void path_in(char* out, size_t n, const char* sub, const char* name) {
    snprintf(out, n, "%s/%s/%s", tmp_dir, sub, name);
}

static void write_shard(const char* path, const uint16_t* tokens, int n) {
    ShardWriter w;
    shard_writer_open(&w, path);
    shard_writer_append(&w, tokens, (size_t)n);
    shard_writer_close(&w);
}

static void write_shard_u32(const char* path, const uint32_t* tokens, int n) {
    ShardWriter w;
    shard_writer_open_u32(&w, path);
    shard_writer_append_u32(&w, tokens, (size_t)n);
    shard_writer_close(&w);
}

static void write_counting_shard_u32(const char* path, int base, int n) {
    uint32_t* t = (uint32_t*)malloc_check((size_t)n * sizeof(uint32_t));
    for (int i = 0; i < n; i++) t[i] = (uint32_t)(base + i);
    write_shard_u32(path, t, n);
    free(t);
}

static void write_counting_shard(const char* path, int base, int n) {
    uint16_t* t = (uint16_t*)malloc_check((size_t)n * sizeof(uint16_t));
    for (int i = 0; i < n; i++) t[i] = (uint16_t)(base + i);
    write_shard(path, t, n);
    free(t);
}

static void make_subdir(const char* sub) {
    char p[512];
    snprintf(p, sizeof(p), "%s/%s", tmp_dir, sub);
    if (mkdir(p, 0700) != 0) { perror(p); exit(EXIT_FAILURE); }
}

static void fixture_build(void) {
    snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/test_dataloader.XXXXXX");
    if (!mkdtemp(tmp_dir)) { perror("mkdtemp"); exit(EXIT_FAILURE); }
    make_subdir("good");
    make_subdir("good32");  // the same ids as good/, in uint32 shards
    for (int i = 0; i < MAX_TOKEN; i++) window_of_token[i] = -1;
    n_windows = 0;
    for (int s = 0; s < N_SHARDS; s++) {
        char p[512], name[64];
        snprintf(name, sizeof(name), "part_%06d.bin", s);
        path_in(p, sizeof(p), "good", name);
        write_counting_shard(p, shard_base[s], shard_len[s]);
        path_in(p, sizeof(p), "good32", name);
        write_counting_shard_u32(p, shard_base[s], shard_len[s]);
        for (int w = 0; w < (shard_len[s] - 1) / T_; w++) {
            shard_of_window[n_windows] = s;
            window_of_token[shard_base[s] + w * T_] = n_windows++;
        }
    }
}

static void remove_tree(const char* dir) {
    DIR* d = opendir(dir);
    if (!d) return;
    struct dirent* e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[1024];
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        if (e->d_type == DT_DIR) remove_tree(p); else unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static DataLoaderConfig config(const char* sub, int shuffle, uint64_t seed, int rank, int world) {
    static char pattern[2][512];  // two loaders may be alive at once
    static int which = 0;
    which ^= 1;
    path_in(pattern[which], sizeof(pattern[which]), sub, "*.bin");
    DataLoaderConfig c = {.pattern = pattern[which], .B = B_, .T = T_, .rank = rank, .world_size = world,
                          .shuffle = shuffle, .seed = seed};
    return c;
}

static void init_or_fail(DataLoader* dl, DataLoaderConfig c) {
    if (dataloader_init(dl, &c) != 0) { fprintf(stderr, "FAIL: init: %s\n", dl->err); exit(EXIT_FAILURE); }
}

// Window id of each row of the last batch, or -1 where the row is not exactly a window of T+1
// consecutive tokens of one shard starting at a multiple of T (inputs, then targets shifted by one).
static void batch_ids(const DataLoader* dl, int* ids) {
    for (int b = 0; b < B_; b++) {
        const int32_t* in = dl->inputs + b * T_;
        const int32_t* tg = dl->targets + b * T_;
        int id = (in[0] >= 0 && in[0] < MAX_TOKEN) ? window_of_token[in[0]] : -1;
        for (int t = 0; t < T_ && id >= 0; t++) {
            if (in[t] != in[0] + t || tg[t] != in[0] + t + 1) id = -1;
            if (t + 1 < T_ && tg[t] != in[t + 1]) id = -1;
        }
        ids[b] = id;
    }
}

// The stream of window ids that one loader gives in `n_batches` batches.
static void take_stream(DataLoader* dl, int n_batches, int* stream) {
    for (int k = 0; k < n_batches; k++) {
        EXPECT(dataloader_next_batch(dl) == 0, "next_batch %d: %s", k, dl->err);
        batch_ids(dl, stream + k * B_);
    }
}

static int is_permutation(const int* ids, int n) {
    int seen[64] = {0};
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= n || seen[ids[i]]++) return 0;
    }
    return 1;
}

// --- tests ---------------------------------------------------------------------------------------

static void test_shard_round_trip(void) {
    char p[512], err[DATALOADER_ERR_LEN];
    make_subdir("round");
    path_in(p, sizeof(p), "round", "a.bin");
    uint16_t t[5] = {0, 1, 50256, 7, 65535};
    write_shard(p, t, 5);
    uint32_t back[5] = {0};
    int width = 0;
    int64_t n = shard_check_header(p, &width, err, sizeof(err));
    EXPECT(n == 5 && width == 2, "shard_check_header: %lld tokens of %d bytes, expected 5 of 2 (%s)", (long long)n,
           width, err);
    int same = 1;
    for (int i = 0; i < 5; i++) same &= back[i] == 0;
    EXPECT(shard_read_tokens(p, 5, 2, 65536, back, err, sizeof(err)) == 0, "shard_read_tokens: %s", err);
    for (int i = 0; i < 5; i++) same &= back[i] == t[i];
    EXPECT(same, "shard_read_tokens did not give back the 5 uint16 tokens written, widened");
    // a uint16 shard longer than the reader's 4096-id chunks widens every id
    enum { LONG_N = 10000 };
    path_in(p, sizeof(p), "round", "long.bin");
    uint16_t* lt = (uint16_t*)malloc_check(LONG_N * sizeof(uint16_t));
    uint32_t* lb = (uint32_t*)malloc_check(LONG_N * sizeof(uint32_t));
    for (int i = 0; i < LONG_N; i++) lt[i] = (uint16_t)(65535 - i * 7);
    write_shard(p, lt, LONG_N);
    int long_ok = shard_check_header(p, &width, err, sizeof(err)) == LONG_N && width == 2 &&
                  shard_read_tokens(p, LONG_N, 2, 65536, lb, err, sizeof(err)) == 0;
    for (int i = 0; long_ok && i < LONG_N; i++) long_ok = lb[i] == lt[i];
    EXPECT(long_ok, "a %d-token uint16 shard did not read back exactly: %s", LONG_N, err);
    free(lt); free(lb);
    // uint32: ids above 65535 come back whole
    path_in(p, sizeof(p), "round", "b32.bin");
    uint32_t t32[5] = {0, 65536, 100257, 199999, 2147483646u};
    write_shard_u32(p, t32, 5);
    uint32_t back32[5] = {0};
    width = 0;
    n = shard_check_header(p, &width, err, sizeof(err));
    EXPECT(n == 5 && width == 4, "uint32 shard_check_header: %lld tokens of %d bytes, expected 5 of 4 (%s)",
           (long long)n, width, err);
    EXPECT(shard_read_tokens(p, 5, 4, 2147483647LL, back32, err, sizeof(err)) == 0 && !memcmp(back32, t32, sizeof(t32)),
           "shard_read_tokens did not give back the 5 uint32 tokens written: %s", err);
    char tmp[520];
    snprintf(tmp, sizeof(tmp), "%s.tmp", p);
    EXPECT(access(p, F_OK) == 0 && access(tmp, F_OK) != 0, "the writer left its .tmp file");
    // a symlink planted at the temporary name is replaced, not written through
    char victim[520];
    path_in(victim, sizeof(victim), "round", "victim.txt");
    FILE* f = fopen_check(victim, "wb");
    fwrite_check("precious", 1, 8, f);
    fclose_check(f);
    path_in(p, sizeof(p), "round", "linked.bin");
    snprintf(tmp, sizeof(tmp), "%s.tmp", p);
    if (symlink(victim, tmp) != 0) { perror(tmp); exit(EXIT_FAILURE); }
    write_shard(p, t, 5);
    struct stat st;
    EXPECT(stat(victim, &st) == 0 && st.st_size == 8, "the shard writer wrote through a symlink at %s (%s is now %lld "
           "bytes)", tmp, victim, (long long)st.st_size);
    EXPECT(lstat(p, &st) == 0 && S_ISREG(st.st_mode) && shard_check_header(p, &width, err, sizeof(err)) == 5,
           "with a symlink at its temporary name, %s is not a regular 5-token shard: %s", p, err);
}

static void test_windows_and_val_stream(void) {
    DataLoader dl;
    init_or_fail(&dl, config("good", 0, 0, 0, 1));
    EXPECT(dl.n_shards == N_SHARDS && dl.total_windows == n_windows, "%d shards, %lld windows; expected %d, %d",
           dl.n_shards, (long long)dl.total_windows, N_SHARDS, n_windows);
    int n_batches = 2 * n_windows / B_ + 1;  // two epochs and a bit: the last rows wrap into epoch 2
    int stream[3 * 64];
    take_stream(&dl, n_batches, stream);
    int ok = 1, first_bad = -1;
    for (int i = 0; i < n_batches * B_; i++)
        if (stream[i] != i % n_windows) { ok = 0; if (first_bad < 0) first_bad = i; }
    EXPECT(ok, "sequential stream: row %d is window %d, expected %d (rows must be windows in shard order, "
           "targets = inputs shifted)", first_bad, first_bad >= 0 ? stream[first_bad] : 0, first_bad % n_windows);
    int64_t last_epoch = (int64_t)(n_batches - 1) * B_ / n_windows;  // of the batch's first row
    EXPECT(dl.epoch == last_epoch, "epoch of the last batch %lld, expected %lld",
           (long long)dl.epoch, (long long)last_epoch);
    EXPECT(dataloader_batches_per_epoch(&dl) == n_windows / B_, "batches per epoch %lld, expected %d",
           (long long)dataloader_batches_per_epoch(&dl), n_windows / B_);
    dataloader_reset(&dl);
    int again[B_];
    EXPECT(dataloader_next_batch(&dl) == 0, "next_batch after reset: %s", dl.err);
    batch_ids(&dl, again);
    EXPECT(!memcmp(again, stream, sizeof(again)), "after reset the first batch is window %d, expected %d",
           again[0], stream[0]);
    dataloader_free(&dl);
}

// The stream of the first n_batches global batches with `seed`, from one loader.
static void shuffled_stream(uint64_t seed, int n_batches, int* stream) {
    DataLoader dl;
    init_or_fail(&dl, config("good", 1, seed, 0, 1));
    take_stream(&dl, n_batches, stream);
    dataloader_free(&dl);
}

static void test_shuffle(void) {
    enum { EPOCHS = 8 };
    int n_batches = EPOCHS * n_windows / B_ + 1;
    int a[EPOCHS * 64], b[EPOCHS * 64], c[EPOCHS * 64];
    shuffled_stream(1337, n_batches, a);
    shuffled_stream(1337, n_batches, b);
    shuffled_stream(1338, n_batches, c);
    EXPECT(!memcmp(a, b, sizeof(int) * n_batches * B_), "two loaders with seed 1337 gave different batches");
    EXPECT(memcmp(a, c, sizeof(int) * n_windows), "seeds 1337 and 1338 gave the same first epoch");
    EXPECT(memcmp(a, a + n_windows, sizeof(int) * n_windows), "epochs 0 and 1 have the same order");
    int identity = 1, all_perm = 1, together = 1, ascending = 1, shard_orders_differ = 0, first_order = -1;
    for (int e = 0; e < EPOCHS; e++) {
        const int* ep = a + e * n_windows;
        all_perm &= is_permutation(ep, n_windows);
        int changes = 0, order = 0;
        for (int i = 0; i < n_windows; i++) {
            identity &= ep[i] == i;
            if (i > 0 && shard_of_window[ep[i]] != shard_of_window[ep[i - 1]]) changes++;
            if (i > 0 && shard_of_window[ep[i]] == shard_of_window[ep[i - 1]] && ep[i] < ep[i - 1]) ascending = 0;
            if (i == 0 || shard_of_window[ep[i]] != shard_of_window[ep[i - 1]])
                order = order * 10 + shard_of_window[ep[i]];  // the shard order as digits
        }
        together &= changes == N_SHARDS - 1;
        if (first_order < 0) first_order = order; else if (order != first_order) shard_orders_differ = 1;
    }
    EXPECT(all_perm, "a shuffled epoch is not a permutation of the %d windows", n_windows);
    EXPECT(!identity, "shuffling left the windows in their stored order");
    EXPECT(!ascending, "the windows within each shard are in their stored order in all %d epochs", EPOCHS);
    EXPECT(together, "a shard's windows are not contiguous within an epoch (one shard at a time)");
    EXPECT(shard_orders_differ, "the shard order is the same in all %d epochs", EPOCHS);
}

static void test_ranks(int world) {
    int steps = 2 * n_windows / (B_ * world) + 1;  // past the end of epoch 1
    int stream[2 * 64 + 3 * B_ * 3];
    DataLoader dl[3];
    for (int r = 0; r < world; r++) init_or_fail(&dl[r], config("good", 1, 42, r, world));
    for (int k = 0; k < steps; k++)
        for (int r = 0; r < world; r++) {
            EXPECT(dataloader_next_batch(&dl[r]) == 0, "rank %d: %s", r, dl[r].err);
            batch_ids(&dl[r], stream + (k * world + r) * B_);  // rank r's k-th batch is global batch k*W + r
        }
    for (int r = 0; r < world; r++) dataloader_free(&dl[r]);
    int single[2 * 64 + 3 * B_ * 3];
    shuffled_stream(42, steps * world, single);
    EXPECT(is_permutation(stream, n_windows) && is_permutation(stream + n_windows, n_windows),
           "world size %d: the ranks together do not take every window exactly once in epochs 0 and 1", world);
    EXPECT(!memcmp(stream, single, sizeof(int) * steps * world * B_),
           "world size %d: the ranks' batches interleaved differ from the single-process order", world);
}

// A checkpoint's global batch index is data: one so large that index * B (or index + rank) overflows
// must be refused, naming the index, before any window is looked up; a large one that fits restores
// to a batch of whole windows.
static void test_restore_bounds(const DataLoaderPosition* good) {
    static const int64_t bad[] = {-1, INT64_MIN, (int64_t)1 << 62, INT64_MAX, INT64_MAX / B_ + 1,
                                  DATALOADER_MAX_WINDOWS / B_ - 1};
    for (int rank = 0; rank < 2; rank++) {
        for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
            DataLoader dl;
            init_or_fail(&dl, config("good", 1, 7, rank, 2));
            DataLoaderPosition pos = *good;
            pos.global_batch = bad[k];
            char index[32];
            snprintf(index, sizeof(index), "%lld", (long long)bad[k]);
            int rc = dataloader_restore(&dl, &pos);
            EXPECT(rc != 0 && strstr(dl.err, "global batch") && strstr(dl.err, index) && strstr(dl.err, dl.pattern),
                   "rank %d of 2: restore of global batch %s: rc %d, expected a refusal naming it: %s", rank, index, rc,
                   dl.err);
            if (rank == 0 && k == 2) printf("  global batch 2^62 -> %s\n", dl.err);
            dataloader_free(&dl);
        }
    }
    // the largest index accepted: every row is still a whole window
    DataLoader dl;
    init_or_fail(&dl, config("good", 1, 7, 1, 2));
    DataLoaderPosition pos = *good;
    pos.global_batch = DATALOADER_MAX_WINDOWS / B_ - 2;
    int ids[B_];
    EXPECT(dataloader_restore(&dl, &pos) == 0 && dataloader_next_batch(&dl) == 0,
           "restore of global batch %lld (the largest for rank 1 of 2): %s", (long long)pos.global_batch, dl.err);
    batch_ids(&dl, ids);
    EXPECT(ids[0] >= 0 && ids[1] >= 0 && ids[2] >= 0, "after restoring global batch %lld the rows are windows %d %d %d",
           (long long)pos.global_batch, ids[0], ids[1], ids[2]);
    // the stream ends there: the next batch is refused, not computed with an overflowing index
    EXPECT(dataloader_next_batch(&dl) != 0 && strstr(dl.err, "global batch"),
           "the batch after the last one the stream holds was not refused: %s", dl.err);
    dataloader_free(&dl);
}

static void test_save_restore(void) {
    DataLoader a, b;
    int want[6 * B_], got[6 * B_];
    // same world size: save after 5 batches, restore in a fresh loader
    init_or_fail(&a, config("good", 1, 7, 0, 1));
    int skip[20 * B_];
    take_stream(&a, 5, skip);
    DataLoaderPosition pos = dataloader_save(&a);
    take_stream(&a, 6, want);
    init_or_fail(&b, config("good", 1, 7, 0, 1));
    EXPECT(dataloader_restore(&b, &pos) == 0, "restore: %s", b.err);
    take_stream(&b, 6, got);
    EXPECT(!memcmp(want, got, sizeof(want)), "after restore the next 6 batches differ (first row %d, expected %d)",
           got[0], want[0]);
    dataloader_free(&b);
    // into world size 2: rank 1 continues at global batch 5 + 1
    init_or_fail(&b, config("good", 1, 7, 1, 2));
    EXPECT(dataloader_restore(&b, &pos) == 0, "restore into rank 1 of 2: %s", b.err);
    take_stream(&b, 1, got);
    EXPECT(!memcmp(want + B_, got, sizeof(int) * B_), "rank 1 of 2 after restore: row %d, expected global batch 6's %d",
           got[0], want[B_]);
    dataloader_free(&b);
    // every rank saves the same position: rank 1 of 2 after 3 batches has taken global batch 5
    init_or_fail(&b, config("good", 1, 7, 1, 2));
    take_stream(&b, 3, skip);
    DataLoaderPosition pos1 = dataloader_save(&b);
    EXPECT(pos1.global_batch == 6, "rank 1 of 2 after 3 batches saved global batch %lld, expected 6",
           (long long)pos1.global_batch);
    dataloader_free(&b);
    // refused for another stream
    init_or_fail(&b, config("good", 1, 8, 0, 1));
    EXPECT(dataloader_restore(&b, &pos) != 0 && strstr(b.err, "seed"),
           "restore with another seed was not refused: %s", b.err);
    dataloader_free(&b);
    dataloader_free(&a);
    test_restore_bounds(&pos);
}

// Expects init on sub/*.bin (or, when `late`, a later next_batch) to fail with a message naming bad.bin
// (and saying `needle`, when not NULL); a late failure must leave the loader usable: the next call fails
// the same way instead of crashing or exiting.
static void expect_bad_saying(const char* sub, const char* what, int late, const char* needle) {
    char bad[512];
    path_in(bad, sizeof(bad), sub, "bad.bin");
    DataLoader dl;
    DataLoaderConfig c = config(sub, 0, 0, 0, 1);
    int rc = dataloader_init(&dl, &c);
    int batches = 0;
    if (late && rc == 0) {
        for (; batches < 100 && rc == 0; batches++) rc = dataloader_next_batch(&dl);
        EXPECT(batches > 1, "%s: expected good batches before the bad shard, got %d", what, batches - 1);
    }
    EXPECT(rc != 0 && strstr(dl.err, bad), "%s: expected an error naming %s, got rc %d: %s", what, bad, rc, dl.err);
    EXPECT(!needle || strstr(dl.err, needle), "%s: the message does not say \"%s\": %s", what, needle, dl.err);
    if (rc != 0) printf("  %s -> %s\n", what, dl.err);
    if (late && rc != 0) {
        char first[DATALOADER_ERR_LEN];
        snprintf(first, sizeof(first), "%s", dl.err);
        EXPECT(dataloader_next_batch(&dl) != 0 && strcmp(dl.err, first) == 0,
               "%s: the call after the error did not fail the same way: %s", what, dl.err);
    }
    dataloader_free(&dl);
}

static void expect_bad(const char* sub, const char* what, int late) { expect_bad_saying(sub, what, late, NULL); }

static void patch_header(const char* path, int index, int32_t value) {
    FILE* f = fopen_check(path, "r+b");
    if (fseek(f, index * 4, SEEK_SET) != 0) { perror(path); exit(EXIT_FAILURE); }
    fwrite_check(&value, sizeof(value), 1, f);
    fclose_check(f);
}

// Writes sub/a_good.bin and sub/bad.bin: n_tokens zeros (the last one `last`), then header int
// patch_index set to patch_value (if >= 0), then cut_bytes removed from the end.
static void bad_case(const char* sub, int n_tokens, int patch_index, int32_t patch_value, int cut_bytes,
                     uint16_t last) {
    char p[512];
    make_subdir(sub);
    path_in(p, sizeof(p), sub, "a_good.bin");
    write_counting_shard(p, 1, 40);
    path_in(p, sizeof(p), sub, "bad.bin");
    uint16_t* t = (uint16_t*)calloc_check((size_t)n_tokens, sizeof(uint16_t));
    if (last) t[n_tokens - 1] = last;
    write_shard(p, t, n_tokens);
    free(t);
    if (patch_index >= 0) patch_header(p, patch_index, patch_value);
    if (cut_bytes && truncate(p, SHARD_HEADER_BYTES + 2 * n_tokens - cut_bytes) != 0) { perror(p); exit(EXIT_FAILURE); }
}

static void test_bad_shards(void) {
    bad_case("magic", 40, 0, 12345, 0, 0);
    expect_bad("magic", "bad magic", 0);
    bad_case("version", 40, 1, 2, 0, 0);
    expect_bad("version", "bad version", 0);
    bad_case("trunc", 40, -1, 0, 3, 0);
    expect_bad("trunc", "truncated", 0);
    bad_case("short_header", 1, -1, 0, SHARD_HEADER_BYTES + 2 - 100, 0);  // 100 bytes: cut into the header
    expect_bad("short_header", "truncated header", 0);
    bad_case("vocab", 40, -1, 0, 0, GPT2_VOCAB);  // read when the stream reaches it: after a_good.bin
    expect_bad_saying("vocab", "token >= vocab", 1, "token 39 (byte offset 1102) has id 50257");
    make_subdir("dir");  // a directory that the pattern matches, beside a good shard
    make_subdir("dir/bad.bin");
    char p[512];
    path_in(p, sizeof(p), "dir", "a_good.bin");
    write_counting_shard(p, 1, 40);
    expect_bad_saying("dir", "a directory as a shard", 0, "a directory, not a shard file");
    bad_case("few", B_ * T_, -1, 0, 0, 0);  // one token short of a batch
    expect_bad("few", "too few tokens", 0);
    DataLoader dl;
    DataLoaderConfig c = config("nothing_here", 0, 0, 0, 1);
    EXPECT(dataloader_init(&dl, &c) != 0 && strstr(dl.err, c.pattern) && strstr(dl.err, "make data"),
           "no match: expected an error naming %s and `make data`: %s", c.pattern, dl.err);
    printf("  no match -> %s\n", dl.err);
    dataloader_free(&dl);
    c = config("good", 0, 0, 3, 2);
    EXPECT(dataloader_init(&dl, &c) != 0 && strstr(dl.err, "rank 3"), "rank 3 of 2 was accepted: %s", dl.err);
    dataloader_free(&dl);
}

// A shard replaced after init (checked then) is read again when the stream reaches it: the header is
// checked again, so a uint16 shard swapped for a uint32 one of the same size, or for one of another
// count, or cut short, is refused naming the file, instead of read with the layout init saw.
static void test_shard_replaced(void) {
    static const char* const subs[] = {"swap32", "swap_count", "swap_cut"};
    for (int k = 0; k < 3; k++) {
        char p[512], tmp[512];
        bad_case(subs[k], 40, -1, 0, 0, 0);  // a_good.bin and bad.bin, 40 uint16 ids each
        path_in(p, sizeof(p), subs[k], "bad.bin");
        path_in(tmp, sizeof(tmp), subs[k], "new.tmp");
        DataLoader dl;
        DataLoaderConfig c = config(subs[k], 0, 0, 0, 1);
        int rc = dataloader_init(&dl, &c);  // loads a_good.bin; bad.bin's header is checked
        EXPECT(rc == 0, "%s: init: %s", subs[k], dl.err);
        if (rc != 0) continue;
        if (k == 0) write_counting_shard_u32(tmp, 1, 20);  // 1024 + 4 * 20 = 1024 + 2 * 40 bytes
        if (k == 1) write_counting_shard(tmp, 1, 44);
        if (k == 2) {
            write_counting_shard(tmp, 1, 40);
            if (truncate(tmp, SHARD_HEADER_BYTES + 2 * 30) != 0) { perror(tmp); exit(EXIT_FAILURE); }
        }
        if (rename(tmp, p) != 0) { perror(p); exit(EXIT_FAILURE); }
        for (int b = 0; b < 100 && rc == 0; b++) rc = dataloader_next_batch(&dl);
        EXPECT(rc != 0 && strstr(dl.err, p) && strstr(dl.err, "changed"),
               "%s: a shard replaced during the run: rc %d, expected an error naming %s: %s", subs[k], rc, p, dl.err);
        if (rc != 0) printf("  %s -> %s\n", subs[k], dl.err);
        dataloader_free(&dl);
    }
}

// A header's count backed by no data: a sparse file whose size matches a header of 2^24 tokens but
// that holds 8 KB. Refused at init naming the file, before a buffer is sized by the count.
static void test_sparse_shard(void) {
    char p[512];
    bad_case("sparse", 4096, -1, 0, 0, 0);
    path_in(p, sizeof(p), "sparse", "bad.bin");
    patch_header(p, 2, 1 << 24);
    if (truncate(p, SHARD_HEADER_BYTES + 2 * ((int64_t)1 << 24)) != 0) { perror(p); exit(EXIT_FAILURE); }
    expect_bad_saying("sparse", "a sparse shard", 0, "sparse");
}

// A shard whose buffer cannot be allocated: the message names the shard and its size, not the
// batch or the model. In a child whose address space is capped just above its current size (not
// under ASan, whose shadow memory needs the address space).
static void test_shard_too_big_for_memory(void) {
#if defined(__SANITIZE_ADDRESS__)
    printf("  a shard too big for memory: skipped under ASan\n");
#else
    char p[512], want[600];
    make_subdir("big");
    path_in(p, sizeof(p), "big", "bad.bin");
    write_counting_shard(p, 1, 1 << 21);  // 4 MB of uint16 ids: an 8 MB buffer
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        long pages = 0;
        FILE* f = fopen("/proc/self/statm", "r");
        if (!f || fscanf(f, "%ld", &pages) != 1) _exit(4);
        fclose(f);
        struct rlimit r;
        getrlimit(RLIMIT_AS, &r);
        r.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (2 << 20);
        if (setrlimit(RLIMIT_AS, &r) != 0) _exit(4);
        DataLoader dl;
        DataLoaderConfig c = config("big", 0, 0, 0, 1);
        int rc = dataloader_init(&dl, &c);
        printf("  a shard too big for memory -> %s\n", dl.err);
        fflush(stdout);
        snprintf(want, sizeof(want), "%s holds 2097152 tokens", p);
        _exit(rc == 0 ? 2 : strstr(dl.err, want) && strstr(dl.err, "--shard-tokens") ? 0 : 3);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "a shard too big for memory: the child exited with %d "
           "(0: refused naming the shard; 1: exited elsewhere; 2: loaded; 3: another message; 4: no limit set)",
           WIFEXITED(status) ? WEXITSTATUS(status) : -1);
#endif
}

// --- the uint32 layout ---------------------------------------------------------------------------

// good/ and good32/ hold the same ids in the two layouts: every batch must be identical, for the
// sequential and the shuffled stream, on every rank, across epochs.
static void test_u32_same_batches(void) {
    static const int settings[][4] = {{0, 0, 0, 1}, {1, 1337, 0, 1}, {1, 99, 1, 2}};  // shuffle, seed, rank, world
    for (int k = 0; k < 3; k++) {
        DataLoader a, b;
        init_or_fail(&a, config("good", settings[k][0], (uint64_t)settings[k][1], settings[k][2], settings[k][3]));
        init_or_fail(&b, config("good32", settings[k][0], (uint64_t)settings[k][1], settings[k][2], settings[k][3]));
        EXPECT(a.token_bytes == 2 && b.token_bytes == 4, "layouts: %d- and %d-byte ids, expected 2 and 4",
               a.token_bytes, b.token_bytes);
        EXPECT(a.total_windows == b.total_windows, "uint16: %lld windows, uint32: %lld", (long long)a.total_windows,
               (long long)b.total_windows);
        int n_batches = 3 * n_windows / B_ + 1, same = 1, first_diff = -1;
        for (int i = 0; i < n_batches; i++) {
            EXPECT(dataloader_next_batch(&a) == 0 && dataloader_next_batch(&b) == 0, "next_batch: %s %s", a.err, b.err);
            int eq = !memcmp(a.inputs, b.inputs, sizeof(int32_t) * B_ * T_) &&
                     !memcmp(a.targets, b.targets, sizeof(int32_t) * B_ * T_);
            if (!eq && first_diff < 0) first_diff = i;
            same &= eq;
        }
        EXPECT(same, "setting %d: batch %d of the uint32 shards differs from the same ids in uint16 shards", k, first_diff);
        DataLoaderPosition pa = dataloader_save(&a), pb = dataloader_save(&b);
        EXPECT(!memcmp(&pa, &pb, sizeof(pa)), "setting %d: the saved positions differ between the layouts", k);
        dataloader_free(&a);
        dataloader_free(&b);
    }
}

// Writes sub/a_good.bin and sub/bad.bin as uint32 shards, like bad_case.
static void bad_case_u32(const char* sub, int n_tokens, int patch_index, int32_t patch_value, int cut_bytes,
                         uint32_t last) {
    char p[512];
    make_subdir(sub);
    path_in(p, sizeof(p), sub, "a_good.bin");
    write_counting_shard_u32(p, 1, 40);
    path_in(p, sizeof(p), sub, "bad.bin");
    uint32_t* t = (uint32_t*)calloc_check((size_t)n_tokens, sizeof(uint32_t));
    if (last) t[n_tokens - 1] = last;
    write_shard_u32(p, t, n_tokens);
    free(t);
    if (patch_index >= 0) patch_header(p, patch_index, patch_value);
    if (cut_bytes && truncate(p, SHARD_HEADER_BYTES + 4 * n_tokens - cut_bytes) != 0) { perror(p); exit(EXIT_FAILURE); }
}

static void test_u32_bad_shards(void) {
    // an id >= vocab: the byte offset counts 4-byte ids
    bad_case_u32("vocab32", 40, -1, 0, 0, GPT2_VOCAB);
    expect_bad_saying("vocab32", "uint32 token >= vocab", 1, "token 39 (byte offset 1180) has id 50257");
    expect_bad_saying("vocab32", "uint32 token >= vocab", 1, "encoding does not match");
    bad_case_u32("vocab32_big", 40, -1, 0, 0, 4000000000u);  // above 2^31: not negative, still refused
    expect_bad_saying("vocab32_big", "uint32 token >= 2^31", 1, "has id 4000000000");
    // the same shards with a vocabulary that holds the ids load
    DataLoader dl;
    DataLoaderConfig c = config("vocab32_big", 0, 0, 0, 1);
    c.vocab_size = 2147483647;
    int rc = dataloader_init(&dl, &c);
    for (int k = 0; k < 30 && rc == 0; k++) rc = dataloader_next_batch(&dl);
    EXPECT(rc != 0 && strstr(dl.err, "has id 4000000000"), "vocab 2^31-1: id 4000000000 was not refused: %s", dl.err);
    dataloader_free(&dl);
    bad_case_u32("o200k", 41, -1, 0, 0, 200018);  // 41 tokens: the last one ends window 9
    c = config("o200k", 0, 0, 0, 1);
    c.vocab_size = 200019;
    rc = dataloader_init(&dl, &c);
    int maxid = 0;
    for (int k = 0; k < 20 && rc == 0; k++) {
        rc = dataloader_next_batch(&dl);
        for (int i = 0; rc == 0 && i < B_ * T_; i++) if (dl.targets[i] > maxid) maxid = dl.targets[i];
    }
    EXPECT(rc == 0 && maxid == 200018, "vocab 200019: rc %d, largest target %d, expected 200018: %s", rc, maxid, dl.err);
    dataloader_free(&dl);
    // each layout's magic with the other's version
    bad_case_u32("magic32_v1", 40, 1, SHARD_VERSION, 0, 0);
    expect_bad_saying("magic32_v1", "magic 20240801, version 1", 0, "magic 20240801 with version 1");
    bad_case("magic16_v7", 40, 1, SHARD_U32_VERSION, 0, 0);
    expect_bad_saying("magic16_v7", "magic 20240520, version 7", 0, "magic 20240520 with version 7");
    // the size is checked with the layout's width: 2 bytes short, or a count that fits 2-byte ids
    bad_case_u32("trunc32", 40, -1, 0, 2, 0);
    expect_bad_saying("trunc32", "uint32 truncated", 0, "truncated");
    bad_case_u32("count32", 40, 2, 80, 0, 0);  // 1024 + 2*80 = the file size, but the ids are 4 bytes
    expect_bad_saying("count32", "uint32 count as if uint16", 0, "80 tokens (1344 bytes of 4-byte ids)");
    // a pattern that mixes the layouts, refused at init naming a shard of each
    char p16[512], p32[512];
    make_subdir("mixed");
    path_in(p16, sizeof(p16), "mixed", "a16.bin");
    write_counting_shard(p16, 1, 40);
    path_in(p32, sizeof(p32), "mixed", "b32.bin");
    write_counting_shard_u32(p32, 1, 40);
    c = config("mixed", 1, 5, 0, 1);
    rc = dataloader_init(&dl, &c);
    EXPECT(rc != 0 && strstr(dl.err, p16) && strstr(dl.err, p32) && strstr(dl.err, "mixes"),
           "a pattern mixing the layouts: expected an error naming %s and %s, got rc %d: %s", p16, p32, rc, dl.err);
    if (rc != 0) printf("  mixed layouts -> %s\n", dl.err);
    dataloader_free(&dl);
}

int main(void) {
    fixture_build();
    test_shard_round_trip();
    test_windows_and_val_stream();
    test_shuffle();
    for (int world = 1; world <= 3; world++) test_ranks(world);
    test_save_restore();
    test_bad_shards();
    test_shard_replaced();
    test_sparse_shard();
    test_shard_too_big_for_memory();
    test_u32_same_batches();
    test_u32_bad_shards();
    remove_tree(tmp_dir);
    return test_summary("test_dataloader");
}
