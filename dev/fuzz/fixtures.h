// fixtures.h: what dev/fuzz/make_seeds.c writes into its seeds and the harnesses rebuild, so that the
// two agree: the train stream that the checkpoint seeds were saved from (fuzz_checkpoint.c restores
// their position on it, as train_gpt -resume does), and the small models of the checkpoint and
// safetensors seeds.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "../../llmc/data/dataloader.h"

// The train stream: two uint16 shards in dir, loaded as the trainer would with these flags.
#define FIXTURE_B 2
#define FIXTURE_T 8
#define FIXTURE_SEED 1337
#define FIXTURE_SHUFFLE 1

static inline void fixture_shards(const char* dir, char* pattern, size_t n) {
    static const int tokens[2] = {300, 170};
    for (int s = 0; s < 2; s++) {
        char path[1200];
        snprintf(path, sizeof(path), "%s/fixture_%d.bin", dir, s);
        uint16_t t[300];
        for (int i = 0; i < tokens[s]; i++) t[i] = (uint16_t)((i * 7919 + s * 31) % GPT2_VOCAB);
        ShardWriter w;
        shard_writer_open(&w, path);
        shard_writer_append(&w, t, (size_t)tokens[s]);
        shard_writer_close(&w);
    }
    snprintf(pattern, n, "%s/fixture_*.bin", dir);
}

static inline DataLoaderConfig fixture_loader_config(const char* pattern) {
    DataLoaderConfig c;
    memset(&c, 0, sizeof(c));
    c.pattern = pattern;
    c.B = FIXTURE_B;
    c.T = FIXTURE_T;
    c.shuffle = FIXTURE_SHUFFLE;
    c.seed = FIXTURE_SEED;
    return c;
}
