// fuzz_shard.c: token shards (llmc/data/shard.h) through the data loader (llmc/data/dataloader.h): init,
// batches, save, restore, a restore to any position, and a shard replaced while the loader runs.
// The input is parts (fuzz.h): settings, shard a.bin, shard b.bin (may be empty: then one shard), and
// the bytes that replace a.bin during the run. Settings, byte by byte (missing bytes are 0):
//   0 B = 1 + s % 4     1 T = 1 + s % 16     2 flags: 1 shuffle, 2 sparse (each shard file is extended
//   with a hole to the size its header claims), 4 replace a.bin after init, 8 restore to the position
//   in bytes 5..12, 16/32 world size 1 + (s >> 4) % 3     3 rank (mod world size)     4 batches taken
//   before the save (mod 16)     5..12 a global batch index (int64)     13..20 the seed
// Properties: init, a batch and a restore return 0 or -1 with a message naming the directory of the
// shards; targets are inputs shifted by one and every id is below the vocabulary; the batch after a
// restore to a saved position is the batch the loader that saved it returned next; a replaced a.bin
// whose header differs is refused when the loader reads it again.
#include "fuzz.h"
#include "../../llmc/data/dataloader.h"

#define MAX_BATCHES 4096

static uint64_t get64(const uint8_t* s, size_t n, size_t at) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)(at + i < n ? s[at + i] : 0) << (8 * i);
    return v;
}

// The header of a shard's bytes: magic, version, count (0 where too short).
static void header_of(const uint8_t* b, size_t n, int32_t h[3]) {
    memset(h, 0, 3 * sizeof(int32_t));
    if (n >= 12) memcpy(h, b, 12);
}

// Writes a shard file; with `sparse`, extends it with a hole to the size that its header claims.
static void put_shard(const char* path, const uint8_t* b, size_t n, int sparse) {
    char tmp[1200];
    snprintf(tmp, sizeof(tmp), "%s.new", path);
    fuzz_write(tmp, b, n);
    int32_t h[3];
    header_of(b, n, h);
    int width = h[0] == SHARD_MAGIC ? 2 : h[0] == SHARD_U32_MAGIC ? 4 : 0;
    if (sparse && width && h[2] > 0) {
        int64_t want = SHARD_HEADER_BYTES + (int64_t)width * h[2];
        if (want > (int64_t)n && truncate(tmp, want) != 0) { perror(tmp); abort(); }
    }
    if (rename(tmp, path) != 0) { perror(path); abort(); }
}

static void check_batch(const DataLoader* dl) {
    int B = dl->cfg.B, T = dl->cfg.T;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int32_t x = dl->inputs[b * T + t], y = dl->targets[b * T + t];
            if (x < 0 || x >= dl->cfg.vocab_size || y < 0 || y >= dl->cfg.vocab_size)
                FUZZ_FAIL("batch row %d position %d: ids %d, %d outside the vocabulary %d", b, t, x, y, dl->cfg.vocab_size);
            if (t + 1 < T && dl->inputs[b * T + t + 1] != y)
                FUZZ_FAIL("batch row %d position %d: the target %d is not the next input %d", b, t, y,
                          dl->inputs[b * T + t + 1]);
        }
}

static void check_err(const DataLoader* dl, const char* dir) { FUZZ_NAMES(dl->err, dir); }

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FuzzParts p;
    fuzz_parts(&p, data, size);
    if (p.n < 2) return 0;
    const uint8_t* s = p.at[0];
    size_t sn = p.len[0];
    uint8_t st[24] = {0};
    memcpy(st, s, sn < sizeof(st) ? sn : sizeof(st));
    int flags = st[2];
    DataLoaderConfig cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.B = 1 + st[0] % 4;
    cfg.T = 1 + st[1] % 16;
    cfg.shuffle = flags & 1;
    cfg.world_size = 1 + (flags >> 4) % 3;
    cfg.rank = st[3] % cfg.world_size;
    cfg.seed = get64(s, sn, 13);
    int before_save = st[4] % 16;
    int64_t fuzzed_batch = (int64_t)get64(s, sn, 5);

    char dir[1100], a[1200], b[1200], pattern[1200];
    fuzz_path(dir, sizeof(dir), "shards");
    fuzz_rm_rf(dir);
    if (mkdir(dir, 0700) != 0) { perror(dir); abort(); }
    snprintf(a, sizeof(a), "%s/a.bin", dir);
    snprintf(b, sizeof(b), "%s/b.bin", dir);
    snprintf(pattern, sizeof(pattern), "%s/*.bin", dir);
    put_shard(a, p.at[1], p.len[1], flags & 2);
    if (p.n > 2 && p.len[2] > 0) put_shard(b, p.at[2], p.len[2], flags & 2);
    cfg.pattern = pattern;

    static DataLoader dl, dl2;
    if (dataloader_init(&dl, &cfg) != 0) {
        check_err(&dl, dir);
        return 0;
    }
    int rc = 0;
    for (int i = 0; i < before_save && rc == 0; i++) {
        rc = dataloader_next_batch(&dl);
        if (rc == 0) check_batch(&dl);
    }
    if (rc != 0) { check_err(&dl, dir); dataloader_free(&dl); return 0; }

    // save, the next batch, and the same batch from a second loader restored to the saved position
    DataLoaderPosition pos = dataloader_save(&dl);
    rc = dataloader_next_batch(&dl);
    if (rc != 0) { check_err(&dl, dir); dataloader_free(&dl); return 0; }
    check_batch(&dl);
    if (dataloader_init(&dl2, &cfg) != 0) FUZZ_FAIL("a second init over the same shards failed: %s", dl2.err);
    if (dataloader_restore(&dl2, &pos) != 0) FUZZ_FAIL("restoring a position this loader saved failed: %s", dl2.err);
    if (dataloader_next_batch(&dl2) != 0) FUZZ_FAIL("the batch after a restore failed: %s", dl2.err);
    size_t bt = (size_t)cfg.B * cfg.T * sizeof(int32_t);
    if (memcmp(dl.inputs, dl2.inputs, bt) != 0 || memcmp(dl.targets, dl2.targets, bt) != 0)
        FUZZ_FAIL("the batch after a restore to global batch %lld differs from the one the saving loader returned",
                  (long long)pos.global_batch);

    // a restore to any position (what a checkpoint may hold): refused, or batches that hold
    if (flags & 8) {
        DataLoaderPosition any = pos;
        any.global_batch = fuzzed_batch;
        if (dataloader_restore(&dl2, &any) != 0) {
            check_err(&dl2, dir);
        } else {
            for (int i = 0; i < 3 && rc == 0; i++) {
                rc = dataloader_next_batch(&dl2);
                if (rc == 0) check_batch(&dl2);
                else check_err(&dl2, dir);
            }
        }
    }
    dataloader_free(&dl2);

    // a.bin replaced while the loader runs: with another header it must be refused when read again
    if (flags & 4 && p.n > 3) {
        int32_t h0[3], h1[3];
        header_of(p.at[1], p.len[1], h0);
        header_of(p.at[3], p.len[3], h1);
        put_shard(a, p.at[3], p.len[3], 0);
        // a.bin is shard 0; it is read again when the loader loads it after another one (seen between
        // batches: a rank may never leave it, and a switch inside one batch is not seen)
        int64_t batches = 4 * dl.total_windows / ((int64_t)cfg.B * cfg.world_size) + 2;
        if (batches > MAX_BATCHES) batches = MAX_BATCHES;
        int refused = 0, left = dl.loaded_shard != 0, read_again = 0;
        for (int64_t i = 0; i < batches && !refused; i++) {
            if (dataloader_next_batch(&dl) != 0) {
                FUZZ_NAMES(dl.err, dir);
                refused = 1;
            } else {
                check_batch(&dl);
                if (dl.loaded_shard != 0) left = 1;
                else if (left) read_again = 1;
            }
        }
        if (!refused && read_again && memcmp(h0, h1, sizeof(h0)) != 0)
            FUZZ_FAIL("a.bin was replaced by a file whose header is {%d, %d, %d} instead of {%d, %d, %d}, and was read "
                      "again without an error", h1[0], h1[1], h1[2], h0[0], h0[1], h0[2]);
    }
    dataloader_free(&dl);
    return 0;
}
