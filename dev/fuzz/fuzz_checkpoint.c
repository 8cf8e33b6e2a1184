// fuzz_checkpoint.c: a train_gpt checkpoint (llmc/io/checkpoint.h) through what reads one: the reader
// (open, the model's sizes, verify, the tensors), the restore of its data position on a train stream
// (llmc/data/dataloader.h, as train_gpt -resume does), and build/export_hf's export to Hugging Face's
// layout (llmc/io/hf_checkpoint.h), which our own import then reads back.
// The input is the checkpoint file. A version-2 file's checksum is recomputed before it is read, so that
// a mutation reaches the checks behind the checksum instead of failing it.
// Properties: every refusal names the file; a restore is refused or gives batches; an export that
// succeeds leaves exactly its family's files in the directory (which held the previous input's export),
// and the import of that directory gives back the checkpoint's master weights bit for bit (the padded
// vocabulary rows aside); a failed export leaves the directory as it was; no temporary one is left.
#define FUZZ_WRAP_CJSON
#include "fuzz.h"
#include <zlib.h>
#include "fixtures.h"
#include "../../llmc/io/checkpoint.h"
#include "../../llmc/io/hf_checkpoint.h"
#include "../../llmc/io/hf_model_import.h"

static char ckpt_path[1100], export_dir[1100], vocab_bpe[1100], pattern[1200];

int LLVMFuzzerInitialize(int* argc, char*** argv) {
    (void)argc; (void)argv;
    char dir[1100], p[1200];
    fuzz_path(ckpt_path, sizeof(ckpt_path), "ckpt_00000010.bin");
    fuzz_path(export_dir, sizeof(export_dir), "export");
    fuzz_path(dir, sizeof(dir), "data");
    mkdir(dir, 0700);
    fixture_shards(dir, pattern, sizeof(pattern));
    // the export copies GPT-2's tokenizer files as they are: small stand-ins
    fuzz_path(dir, sizeof(dir), "gpt2");
    mkdir(dir, 0700);
    snprintf(vocab_bpe, sizeof(vocab_bpe), "%s/vocab.bpe", dir);
    fuzz_write(vocab_bpe, "#version: 0.2\n", 14);
    snprintf(p, sizeof(p), "%s/encoder.json", dir);
    fuzz_write(p, "{}\n", 3);
    return 0;
}

// The files in dir, sorted, joined by spaces (empty when it does not exist).
static void list_dir(const char* dir, char* out, size_t n) {
    out[0] = '\0';
    DIR* d = opendir(dir);
    if (!d) return;
    char names[32][64];
    int k = 0;
    for (struct dirent* e; (e = readdir(d)) && k < 32;)
        if (e->d_name[0] != '.') snprintf(names[k++], sizeof(names[0]), "%s", e->d_name);
    closedir(d);
    qsort(names, (size_t)k, sizeof(names[0]), (int (*)(const void*, const void*))strcmp);
    size_t len = 0;
    for (int i = 0; i < k && len < n; i++) len += (size_t)snprintf(out + len, n - len, "%s%s", i ? " " : "", names[i]);
}

// The checkpoint's data position restored on the fixture's stream, and a few batches.
static void restore_position(const DataLoaderPosition* pos) {
    static DataLoader dl;
    DataLoaderConfig c = fixture_loader_config(pattern);
    if (dataloader_init(&dl, &c) != 0) FUZZ_FAIL("the fixture's loader failed: %s", dl.err);
    if (dataloader_restore(&dl, pos) == 0) {
        for (int i = 0; i < 3; i++)
            if (dataloader_next_batch(&dl) != 0) FUZZ_FAIL("a batch after the restore failed: %s", dl.err);
    } else if (!dl.err[0]) {
        FUZZ_FAIL("the restore failed without a message");
    }
    dataloader_free(&dl);
}

// The exported directory read back by our import: the master weights again (the padded rows aside).
static void import_back(const CheckpointModel* m, const float* master, size_t total) {
    float* got = (float*)calloc(total ? total : 1, sizeof(float));
    size_t V = (size_t)m->vocab_size, Vp = (size_t)m->padded_vocab_size, C = (size_t)m->channels;
    size_t pad_at[2] = {V * C, 0}, pad_n = (Vp - V) * C;  // the rows [V, Vp) of the embedding (and the head)
    int heads = 1;
    if (m->family == CHECKPOINT_FAMILY_GPT2) {
        static GptHfReader r;
        if (gpt_hf_open(&r, export_dir) != 0) FUZZ_FAIL("our import refuses our export: %s", r.err);
        ModelConfig g = model_config_gpt2_sizes(m->max_seq_len, m->vocab_size, m->padded_vocab_size, m->num_layers,
                                                m->num_heads, m->channels);
        if (gpt_hf_load(&r, &g, got) != 0) FUZZ_FAIL("our import refuses our export: %s", r.err);
    } else {
        static LlamaHfReader r;
        if (llama_hf_open(&r, export_dir) != 0) FUZZ_FAIL("our import refuses our export: %s", r.err);
        ModelConfig l = r.config;
        l.padded_vocab_size = m->padded_vocab_size;
        l.max_seq_len = m->max_seq_len;
        if (llama_hf_load(&r, &l, got) != 0) FUZZ_FAIL("our import refuses our export: %s", r.err);
        size_t s[MODEL_MAX_TENSORS], off[MODEL_MAX_TENSORS];
        model_tensor_layout(&l, s, off);
        pad_at[1] = off[model_tensor_index(model_spec(MODEL_FAMILY_LLAMA), MODEL_ROLE_LM_HEAD)] + V * C;
        heads = 2;
    }
    for (size_t i = 0; i < total; i++) {
        int padded = 0;
        for (int h = 0; h < heads; h++) padded |= i >= pad_at[h] && i < pad_at[h] + pad_n;
        if (padded ? got[i] != 0.0f : memcmp(&got[i], &master[i], sizeof(float)) != 0)
            FUZZ_FAIL("parameter %zu of %zu: exported %a, imported %a", i, total, (double)master[i], (double)got[i]);
    }
    free(got);
}

// Whether a temporary directory of an export (<dir>.tmp.XXXXXX beside it) is left in fuzz_dir.
static int export_temporary_left(void) {
    DIR* d = opendir(fuzz_dir);
    int left = 0;
    for (struct dirent* e; d && (e = readdir(d));) left |= strncmp(e->d_name, "export.tmp", 10) == 0;
    if (d) closedir(d);
    return left;
}

// 1 when the export succeeded.
static int export_dir_files(const char* family_files) {
    static char err[HF_ERR_LEN], before[2048], after[2048];
    list_dir(export_dir, before, sizeof(before));
    HfExported ex;
    if (hf_export_checkpoint(ckpt_path, export_dir, vocab_bpe, &ex, err, sizeof(err)) != 0) {
        if (!strstr(err, ckpt_path) && !strstr(err, export_dir))
            FUZZ_FAIL("the export's message names neither the checkpoint nor the directory: %s", err);
        list_dir(export_dir, after, sizeof(after));
        if (strcmp(before, after) != 0) FUZZ_FAIL("a failed export changed its directory: [%s] became [%s]", before, after);
        if (export_temporary_left()) FUZZ_FAIL("a failed export left its temporary directory");
        return 0;
    }
    if (export_temporary_left()) FUZZ_FAIL("an export left its temporary directory");
    list_dir(export_dir, after, sizeof(after));
    if (strcmp(after, family_files) != 0)
        FUZZ_FAIL("the %s export left [%s] in its directory, expected [%s]", checkpoint_family_name(ex.model.family),
                  after, family_files);
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > (64u << 20)) return 0;
    uint8_t* b = (uint8_t*)malloc(size ? size : 1);
    memcpy(b, data, size);
    int32_t h[CHECKPOINT_HEADER_INTS];
    if (size >= sizeof(h)) {
        memcpy(h, b, sizeof(h));
        if (h[CKPT_H_VERSION] == 2) {  // the checksum the writer would have written
            h[CKPT_H_CRC] = 0;
            uint32_t crc = (uint32_t)crc32_z(crc32_z(0L, Z_NULL, 0), (const Bytef*)h, sizeof(h));
            crc = (uint32_t)crc32_z(crc, b + sizeof(h), size - sizeof(h));
            memcpy(b + CKPT_H_CRC * sizeof(int32_t), &crc, sizeof(crc));
        }
    }
    fuzz_write(ckpt_path, b, size);
    free(b);

    static CheckpointReader r;
    if (checkpoint_reader_open(&r, ckpt_path) != 0) { FUZZ_NAMES(r.err, ckpt_path); return 0; }
    CheckpointModel want = r.state.model;
    ModelConfig c;
    memset(&c, 0, sizeof(c));
    size_t total = 0;
    char why[512];
    int sane = hf_checkpoint_config(&want, &c, &total, why, sizeof(why));
    want.num_params = (int64_t)total;
    if (!sane) { checkpoint_reader_close(&r); return 0; }  // sizes that make no model: export_hf refuses them
    if (checkpoint_check_model(&r, &want) != 0) { FUZZ_NAMES(r.err, ckpt_path); return 0; }
    if (checkpoint_reader_verify(&r) != 0) { FUZZ_NAMES(r.err, ckpt_path); return 0; }
    float* master = (float*)malloc(total * sizeof(float));
    if (checkpoint_reader_read(&r, master, total * sizeof(float)) != 0)
        FUZZ_FAIL("reading the master weights of a verified checkpoint failed: %s", r.err);
    DataLoaderPosition pos = r.state.data;
    checkpoint_reader_close(&r);

    restore_position(&pos);
    int gpt = want.family == CHECKPOINT_FAMILY_GPT2;
    if (!gpt || want.vocab_size == GPT_HF_VOCAB) {  // a GPT-2 of another vocabulary is refused: no tokenizer files
        if (export_dir_files(gpt ? "config.json merges.txt model.safetensors special_tokens_map.json "
                                   "tokenizer_config.json vocab.json"
                                 : "config.json model.safetensors"))
            import_back(&want, master, total);
    }
    free(master);
    return 0;
}
