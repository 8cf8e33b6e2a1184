// test_checkpoint.c: CPU tests of the checkpoint format and directory (llmc/io/checkpoint.h,
// llmc/io/checkpoint_dir.h), with small fake tensors in a temporary directory.
// Checks: write/read round trip of every header field, the settings text and the tensors (bitwise);
// the file size is what the format says; nothing appears under the final name before the writer closes;
// a crashed write (abandoned before close) leaves the previous checkpoint and `latest` intact; `latest`
// and -resume's resolution (latest, a directory, a file); keep-last-K; each bad file (missing, too short,
// bad magic, a token shard, bad version, truncated, too long, corrupt header, wrong model sizes) gives
// an error naming the file.
// Integrity: the checksum catches a flipped byte anywhere (header, settings, tensors); a NaN, an inf or a
// negative second moment written with a valid checksum is refused; a version 1 file (no checksum) is
// still read; every refusal names the file. The step: one at the most a run takes reads back; 2^31, 2^32 + 10
// and a negative one, with a valid checksum, are refused naming the step, and the writer refuses 2^31.
// Model families: a Llama-style header (family, NKV, F, RoPE theta, RMSNorm eps) round-trips; a GPT-2
// header leaves those slots 0; each family refuses the other's checkpoint naming the file and the family;
// another NKV, F, theta or eps is refused; an unknown family, stray Llama-style slots in a GPT-2 header
// and impossible Llama-style sizes are corrupt headers. Faults while writing: the write fails after N bytes (the
// LLMC_TEST_CKPT_FAIL_AFTER hook) at every part of the file, and the writing process is SIGKILLed, by
// the hook and at random moments from outside: the previous checkpoint and `latest` are intact and
// verify, and the next checkpoint is written. With ./train_gpt built: -resume of a checkpoint of other
// sizes, with a bad setting, of the other family than -model says (both ways), or whose settings hold a
// flag of the other family, is refused naming the file before CUDA starts.
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "../../../llmc/io/checkpoint.h"
#include "../../../llmc/io/checkpoint_dir.h"
#include "../testing.h"

#define P_ 1000  // parameters of the fake model

static char tmp_dir[256];

static CheckpointState fake_state(int64_t step) {
    CheckpointState s;
    memset(&s, 0, sizeof(s));
    s.model.num_layers = 2; s.model.channels = 16; s.model.num_heads = 2;
    s.model.vocab_size = 50257; s.model.padded_vocab_size = 50304; s.model.max_seq_len = 64;
    s.model.num_params = P_;
    s.step = step;
    s.rng = 0xfedcba9876543210ULL + (uint64_t)step;
    s.data.global_batch = 3 * step + 1; s.data.total_windows = 1LL << 40; s.data.seed = 0x8000000000000042ULL;
    s.data.B = 4; s.data.T = 64; s.data.shuffle = 1;
    snprintf(s.settings, sizeof(s.settings), "-depth 2 -lr 0.00100000005 -steps %lld -x", (long long)step);  // 43+ bytes: padding
    return s;
}

// master, m, v of step `step`: distinct, step-dependent values (including a negative zero and a
// subnormal); v (the last P_) is positive, as a second moment is
static void fake_tensors(float* t, int64_t step) {
    for (int i = 0; i < CHECKPOINT_TENSORS * P_; i++)
        t[i] = (float)(i * 0.001 + step) * (i % 2 && i < 2 * P_ ? -1.0f : 1.0f);
    t[5] = -0.0f;
    uint32_t subnormal_bits = 0x00001234u;
    memcpy(&t[7], &subnormal_bits, 4);
}

// A Llama-style model's state: fake_state with the family's own sizes.
static CheckpointState fake_llama_state(int64_t step) {
    CheckpointState s = fake_state(step);
    s.model.family = CHECKPOINT_FAMILY_LLAMA;
    s.model.num_kv_heads = 1;
    s.model.ffn_hidden = 40;
    s.model.rope_theta = 500000.0;
    s.model.norm_eps = 1e-5;
    return s;
}

// s and fake_tensors(s->step) with `value` at index `poison` (-1: none)
static int write_state_poisoned(const char* path, const CheckpointState* s, int poison, float value) {
    float t[CHECKPOINT_TENSORS * P_];
    fake_tensors(t, s->step);
    if (poison >= 0) t[poison] = value;
    CheckpointWriter w;
    if (checkpoint_writer_open(&w, path, s) != 0) { fprintf(stderr, "%s\n", w.err); return -1; }
    for (int k = 0; k < CHECKPOINT_TENSORS; k++)
        if (checkpoint_writer_append(&w, t + k * P_, P_ * sizeof(float)) != 0) { fprintf(stderr, "%s\n", w.err); return -1; }
    if (checkpoint_writer_close(&w) != 0) { fprintf(stderr, "%s\n", w.err); return -1; }
    return 0;
}

static int write_fake_poisoned(const char* path, int64_t step, int poison, float value) {
    CheckpointState s = fake_state(step);
    return write_state_poisoned(path, &s, poison, value);
}

static int write_fake(const char* path, int64_t step) { return write_fake_poisoned(path, step, -1, 0.0f); }

// The full checkpoint protocol of the trainer: file, marker, prune.
static void save_step(const char* dir, int64_t step, int keep) {
    char path[CHECKPOINT_PATH_LEN], err[CHECKPOINT_ERR_LEN];
    checkpoint_path(path, sizeof(path), dir, step);
    EXPECT(write_fake(path, step) == 0, "writing %s", path);
    EXPECT(checkpoint_mark_latest(dir, path, err, sizeof(err)) == 0, "mark latest: %s", err);
    EXPECT(checkpoint_prune(dir, keep, step, err, sizeof(err)) == 0, "prune: %s", err);
}

static int exists(const char* path) { return access(path, F_OK) == 0; }

static int64_t file_size(const char* path) {
    struct stat st;
    return stat(path, &st) == 0 ? (int64_t)st.st_size : -1;
}

// Reads path back and compares everything with what write_state_poisoned(want, no poison) wrote;
// returns 1 when identical.
static int read_matches_state(const char* path, const CheckpointState* wanted) {
    CheckpointReader r;
    if (checkpoint_reader_open(&r, path) != 0) { fprintf(stderr, "%s\n", r.err); return 0; }
    CheckpointState want = *wanted;
    int64_t step = want.step;
    if (checkpoint_check_model(&r, &want.model) != 0) { fprintf(stderr, "%s\n", r.err); return 0; }
    if (checkpoint_reader_verify(&r) != 0) { fprintf(stderr, "%s\n", r.err); return 0; }
    float got[CHECKPOINT_TENSORS * P_], t[CHECKPOINT_TENSORS * P_];
    fake_tensors(t, step);
    int ok = checkpoint_reader_read(&r, got, sizeof(got)) == 0;
    char extra;
    ok = ok && fread(&extra, 1, 1, r.f) == 0;  // nothing after the tensors
    checkpoint_reader_close(&r);
    const CheckpointState* s = &r.state;
    ok = ok && memcmp(got, t, sizeof(t)) == 0 && memcmp(&s->model, &want.model, sizeof(want.model)) == 0 &&
         s->step == want.step && s->rng == want.rng && s->data.global_batch == want.data.global_batch &&
         s->data.total_windows == want.data.total_windows && s->data.seed == want.data.seed &&
         s->data.B == want.data.B && s->data.T == want.data.T && s->data.shuffle == want.data.shuffle &&
         strcmp(s->settings, want.settings) == 0;
    return ok;
}

static int read_matches(const char* path, int64_t step) {
    CheckpointState want = fake_state(step);
    return read_matches_state(path, &want);
}

// --- corrupt files -------------------------------------------------------------------------------

// A copy of `src` with `n` bytes at `offset` overwritten by `bytes` (or, with bytes NULL, cut to `offset`
// bytes, or grown by n bytes when offset < 0).
static void corrupt_copy(const char* dst, const char* src, int64_t offset, const void* bytes, size_t n) {
    FILE* f = fopen_check(src, "rb");
    int64_t size = file_size(src);
    char* buf = (char*)malloc_check((size_t)size + n);
    fread_check(buf, 1, (size_t)size, f);
    fclose(f);
    if (bytes) memcpy(buf + offset, bytes, n);
    else if (offset < 0) { memset(buf + size, 0, n); size += (int64_t)n; }
    else size = offset;
    f = fopen_check(dst, "wb");
    fwrite_check(buf, 1, (size_t)size, f);
    fclose_check(f);
    free(buf);
}

// Opening (and checking against `model`) `path` must fail with a message containing the path and `needle`.
static void expect_rejected_for(const char* what, const char* path, const CheckpointModel* model, const char* needle) {
    CheckpointReader r;
    int rc = checkpoint_reader_open(&r, path);
    if (rc == 0) rc = checkpoint_check_model(&r, model);
    if (rc == 0) rc = checkpoint_reader_verify(&r);
    checkpoint_reader_close(&r);
    int named = strstr(r.err, path) != NULL, said = strstr(r.err, needle) != NULL;
    printf("  %-22s -> %s\n", what, rc ? r.err : "ACCEPTED");
    EXPECT(rc != 0, "%s: %s was accepted", what, path);
    EXPECT(rc == 0 || (named && said), "%s: the message does not name %s or does not say \"%s\": %s", what, path,
           needle, r.err);
}

static void expect_rejected(const char* what, const char* path, const char* needle) {
    CheckpointState want = fake_state(0);
    expect_rejected_for(what, path, &want.model, needle);
}

static void test_corrupt(const char* good) {
    printf("bad files:\n");
    char p[512];
    snprintf(p, sizeof(p), "%s/missing.bin", tmp_dir);
    expect_rejected("missing", p, "cannot open");
    snprintf(p, sizeof(p), "%s/short.bin", tmp_dir);
    corrupt_copy(p, good, 100, NULL, 0);
    expect_rejected("shorter than a header", p, "shorter than");
    int32_t v = 12345;
    snprintf(p, sizeof(p), "%s/magic.bin", tmp_dir);
    corrupt_copy(p, good, 0, &v, 4);
    expect_rejected("bad magic", p, "magic 12345");
    v = SHARD_MAGIC;
    snprintf(p, sizeof(p), "%s/shard.bin", tmp_dir);
    corrupt_copy(p, good, 0, &v, 4);
    expect_rejected("a token shard", p, "token shard");
    v = 3;
    snprintf(p, sizeof(p), "%s/version.bin", tmp_dir);
    corrupt_copy(p, good, 4 * CKPT_H_VERSION, &v, 4);
    expect_rejected("bad version", p, "version 3");
    snprintf(p, sizeof(p), "%s/truncated.bin", tmp_dir);
    corrupt_copy(p, good, file_size(good) - 4, NULL, 0);
    expect_rejected("truncated by 4 bytes", p, "truncated");
    snprintf(p, sizeof(p), "%s/long.bin", tmp_dir);
    corrupt_copy(p, good, -1, NULL, 8);
    expect_rejected("8 bytes too long", p, "size mismatch");
    v = 7;
    snprintf(p, sizeof(p), "%s/tensors.bin", tmp_dir);
    corrupt_copy(p, good, 4 * CKPT_H_TENSORS, &v, 4);
    expect_rejected("7 tensors", p, "corrupt header");
    v = 3 * P_;  // the file size no longer matches the parameter count
    snprintf(p, sizeof(p), "%s/params.bin", tmp_dir);
    corrupt_copy(p, good, 4 * CKPT_H_PARAMS, &v, 4);
    expect_rejected("parameter count", p, "truncated");
    v = 12;
    snprintf(p, sizeof(p), "%s/depth.bin", tmp_dir);
    corrupt_copy(p, good, 4 * CKPT_H_LAYERS, &v, 4);
    expect_rejected("another depth", p, "pass -depth 12");
    v = 64;
    snprintf(p, sizeof(p), "%s/channels.bin", tmp_dir);
    corrupt_copy(p, good, 4 * CKPT_H_CHANNELS, &v, 4);
    expect_rejected("other channels", p, "64 channels");
    v = 50000;
    snprintf(p, sizeof(p), "%s/vocab.bin", tmp_dir);
    corrupt_copy(p, good, 4 * CKPT_H_VOCAB, &v, 4);
    expect_rejected("another vocabulary", p, "another build");
    v = 1024;
    snprintf(p, sizeof(p), "%s/maxt.bin", tmp_dir);
    corrupt_copy(p, good, 4 * CKPT_H_MAX_SEQ_LEN, &v, 4);
    expect_rejected("another context", p, "context 1024");
}

// --- integrity: the checksum, non-finite state, version 1 ----------------------------------------

static void test_integrity(const char* good, int64_t step) {
    printf("integrity:\n");
    char p[512];
    int64_t size = file_size(good), settings_at = CHECKPOINT_HEADER_BYTES, tensors_at = size - CHECKPOINT_TENSORS * P_ * 4;
    struct { const char* what; int64_t at; } flips[] = {
        {"a header byte flipped", 4 * CKPT_H_RNG}, {"a settings byte flipped", settings_at + 3},
        {"a master byte flipped", tensors_at + 17}, {"a v byte flipped", size - 1}};
    for (int k = 0; k < 4; k++) {
        FILE* f = fopen_check(good, "rb");
        unsigned char b;
        if (fseek(f, (long)flips[k].at, SEEK_SET) != 0) { perror(good); exit(EXIT_FAILURE); }
        fread_check(&b, 1, 1, f);
        fclose(f);
        b ^= 0x10;
        snprintf(p, sizeof(p), "%s/flip%d.bin", tmp_dir, k);
        corrupt_copy(p, good, flips[k].at, &b, 1);
        expect_rejected(flips[k].what, p, "checksum mismatch");
    }
    uint32_t nan_bits = 0x7fc00000u;  // a NaN written into the file by something else: the checksum sees it
    snprintf(p, sizeof(p), "%s/nan_copied.bin", tmp_dir);
    corrupt_copy(p, good, tensors_at + 40, &nan_bits, 4);
    expect_rejected("NaN written into a copy", p, "checksum mismatch");
    // state that went bad before it was saved: the checksum is valid, the values are not
    snprintf(p, sizeof(p), "%s/nan_m.bin", tmp_dir);
    EXPECT(write_fake_poisoned(p, step, P_ + 7, NAN) == 0, "writing %s", p);
    expect_rejected("NaN in m", p, "AdamW first moment m 7 of 1000 is nan: not finite");
    snprintf(p, sizeof(p), "%s/inf_master.bin", tmp_dir);
    EXPECT(write_fake_poisoned(p, step, 3, -INFINITY) == 0, "writing %s", p);
    expect_rejected("-inf in the weights", p, "master weight 3 of 1000 is -inf");
    snprintf(p, sizeof(p), "%s/neg_v.bin", tmp_dir);
    EXPECT(write_fake_poisoned(p, step, 2 * P_ + 1, -1.0f) == 0, "writing %s", p);
    expect_rejected("negative v", p, "second moment v 1 of 1000 is -1");
    // version 1 (before the checksum): slot 28 is 0; still read, with every other check
    int32_t old[2] = {1, 0};
    snprintf(p, sizeof(p), "%s/v1.bin", tmp_dir);
    corrupt_copy(p, good, 4 * CKPT_H_VERSION, &old[0], 4);
    corrupt_copy(p, p, 4 * CKPT_H_CRC, &old[1], 4);
    int v1_ok = read_matches(p, step);
    printf("  %-22s -> %s\n", "version 1", v1_ok ? "read, identical" : "REFUSED");
    EXPECT(v1_ok, "a version 1 checkpoint %s was not read", p);
    corrupt_copy(p, p, size - 4, &nan_bits, 4);
    expect_rejected("version 1 with a NaN", p, "not finite");
}

// --- the step: bounded on read -------------------------------------------------------------------

// A copy of src with the 64-bit header slot `at` set to v and the checksum made right again: a file
// whose only fault is that value.
static void restamp_copy(const char* dst, const char* src, int at, uint64_t v) {
    int64_t size = file_size(src);
    unsigned char* buf = (unsigned char*)malloc_check((size_t)size);
    FILE* f = fopen_check(src, "rb");
    fread_check(buf, 1, (size_t)size, f);
    fclose(f);
    int32_t h[CHECKPOINT_HEADER_INTS];
    memcpy(h, buf, sizeof(h));
    checkpoint_put64(h, at, v);
    h[CKPT_H_CRC] = 0;
    memcpy(buf, h, sizeof(h));
    uint32_t crc = (uint32_t)crc32_z(crc32_z(0L, Z_NULL, 0), buf, (size_t)size);
    memcpy(buf + 4 * CKPT_H_CRC, &crc, 4);
    f = fopen_check(dst, "wb");
    fwrite_check(buf, 1, (size_t)size, f);
    fclose_check(f);
    free(buf);
}

static void test_steps(const char* good) {
    printf("the step:\n");
    char p[512];
    snprintf(p, sizeof(p), "%s/step_max.bin", tmp_dir);
    EXPECT(write_fake(p, CHECKPOINT_MAX_STEP) == 0 && read_matches(p, CHECKPOINT_MAX_STEP),
           "a checkpoint at step %lld (the most a run takes) does not read back", (long long)CHECKPOINT_MAX_STEP);
    printf("  step %lld: written and read back\n", (long long)CHECKPOINT_MAX_STEP);
    const uint64_t bad[3] = {(uint64_t)1 << 31, ((uint64_t)1 << 32) + 10, (uint64_t)-1};
    const char* said[3] = {"step 2147483648", "step 4294967306", "step -1"};
    for (int k = 0; k < 3; k++) {
        snprintf(p, sizeof(p), "%s/step%d.bin", tmp_dir, k);
        restamp_copy(p, good, CKPT_H_STEP, bad[k]);
        expect_rejected(said[k], p, said[k]);
    }
    CheckpointState s = fake_state(0);  // the writer refuses what the reader would
    s.step = CHECKPOINT_MAX_STEP + 1;
    CheckpointWriter w;
    snprintf(p, sizeof(p), "%s/step_write.bin", tmp_dir);
    int rc = checkpoint_writer_open(&w, p, &s);
    if (rc == 0) checkpoint_writer_abort(&w);
    EXPECT(rc != 0 && strstr(w.err, "step 2147483648") && !exists(p), "writing step 2^31: %s", rc ? w.err : "accepted");
}

// --- model families ------------------------------------------------------------------------------

static void read_header(int32_t h[CHECKPOINT_HEADER_INTS], const char* path) {
    FILE* f = fopen_check(path, "rb");
    fread_check(h, sizeof(int32_t), CHECKPOINT_HEADER_INTS, f);
    fclose(f);
}

static void test_families(void) {
    printf("model families:\n");
    char gpt[512], llama[512], p[512];
    snprintf(gpt, sizeof(gpt), "%s/family_gpt2.bin", tmp_dir);
    snprintf(llama, sizeof(llama), "%s/family_llama.bin", tmp_dir);
    CheckpointState g = fake_state(3), l = fake_llama_state(3);
    EXPECT(write_state_poisoned(gpt, &g, -1, 0.0f) == 0 && write_state_poisoned(llama, &l, -1, 0.0f) == 0,
           "writing %s and %s", gpt, llama);
    int32_t h[CHECKPOINT_HEADER_INTS];
    read_header(h, gpt);  // slots 29.. as in every checkpoint before the family existed: 0
    int zero = 1;
    for (int i = CKPT_H_FAMILY; i < CHECKPOINT_HEADER_INTS; i++) zero &= h[i] == 0;
    printf("  GPT-2 header, slots %d..%d all 0: %s\n", CKPT_H_FAMILY, CHECKPOINT_HEADER_INTS - 1, zero ? "yes" : "no");
    EXPECT(zero, "a GPT-2 checkpoint has non-zero slots from %d on", CKPT_H_FAMILY);
    read_header(h, llama);
    double theta = checkpoint_get_double(h, CKPT_H_ROPE_THETA), eps = checkpoint_get_double(h, CKPT_H_NORM_EPS);
    int slots = h[CKPT_H_FAMILY] == 1 && h[CKPT_H_KV_HEADS] == 1 && h[CKPT_H_FFN_HIDDEN] == 40 && theta == 500000.0 &&
                eps == 1e-5 && h[CKPT_H_NORM_EPS + 2] == 0;
    int same = read_matches_state(llama, &l);
    printf("  Llama-style header: family %d, NKV %d, F %d, theta %g, eps %g; round trip identical: %s\n",
           h[CKPT_H_FAMILY], h[CKPT_H_KV_HEADS], h[CKPT_H_FFN_HIDDEN], theta, eps, same ? "yes" : "no");
    EXPECT(slots, "the Llama-style slots of %s are not as the format says", llama);
    EXPECT(same, "the Llama-style checkpoint %s does not read back as written", llama);
    expect_rejected_for("Llama-style into GPT-2", llama, &g.model, "holds a Llama-style model, this run builds a GPT-2");
    expect_rejected_for("GPT-2 into Llama-style", gpt, &l.model, "holds a GPT-2 model, this run builds a Llama-style");
    CheckpointModel other[5] = {l.model, l.model, l.model, l.model, l.model};
    other[0].num_kv_heads = 2;
    other[1].ffn_hidden = 48;
    other[2].rope_theta = 10000.0;
    other[3].norm_eps = 1e-6;
    other[4].num_layers = 4;
    const char* what[5] = {"another NKV", "another F", "another theta", "another eps", "another Llama depth"};
    for (int k = 0; k < 5; k++) expect_rejected_for(what[k], llama, &other[k], k < 4 ? "another model shape" : "4 layers");
    int32_t v = 7;
    snprintf(p, sizeof(p), "%s/family7.bin", tmp_dir);
    corrupt_copy(p, gpt, 4 * CKPT_H_FAMILY, &v, 4);
    expect_rejected("unknown family", p, "model family 7");
    v = 5;
    snprintf(p, sizeof(p), "%s/family_stray.bin", tmp_dir);
    corrupt_copy(p, gpt, 4 * CKPT_H_FFN_HIDDEN, &v, 4);
    expect_rejected("GPT-2 with an FFN size", p, "only the Llama-style family uses");
    v = 0;
    snprintf(p, sizeof(p), "%s/family_nkv0.bin", tmp_dir);
    corrupt_copy(p, llama, 4 * CKPT_H_KV_HEADS, &v, 4);
    expect_rejected_for("Llama-style with NKV 0", p, &l.model, "corrupt header (Llama-style");
    int32_t neg[2];
    checkpoint_put_double(neg, 0, -1e-5);
    snprintf(p, sizeof(p), "%s/family_eps.bin", tmp_dir);
    corrupt_copy(p, llama, 4 * CKPT_H_NORM_EPS, neg, 8);
    expect_rejected_for("Llama-style with eps < 0", p, &l.model, "corrupt header (Llama-style");
}

// --- faults while writing ------------------------------------------------------------------------

// After a failed or killed write of step `step`: no file under its name, `latest` still names `prev`,
// which verifies.
static void expect_intact(const char* what, const char* dir, int64_t step, int64_t prev) {
    char path[CHECKPOINT_PATH_LEN], resolved[CHECKPOINT_PATH_LEN], err[CHECKPOINT_ERR_LEN], want[CHECKPOINT_PATH_LEN];
    checkpoint_path(path, sizeof(path), dir, step);
    checkpoint_path(want, sizeof(want), dir, prev);
    int absent = !exists(path);
    int resolves = checkpoint_resolve(resolved, sizeof(resolved), "latest", dir, err, sizeof(err)) == 0 &&
                   strcmp(resolved, want) == 0;
    int intact = resolves && read_matches(resolved, prev);
    EXPECT(absent && intact, "%s: %s exists %d, latest -> %s (want %s), intact %d", what, path, !absent, resolved,
           want, intact);
}

// The trainer's protocol in this process, with the write hook set to `hook` (NULL: none); returns 0 when
// everything was written.
static int save_with_hook(const char* dir, int64_t step, const char* hook, char* err, size_t errlen) {
    char path[CHECKPOINT_PATH_LEN];
    checkpoint_path(path, sizeof(path), dir, step);
    if (hook) setenv("LLMC_TEST_CKPT_FAIL_AFTER", hook, 1); else unsetenv("LLMC_TEST_CKPT_FAIL_AFTER");
    float t[CHECKPOINT_TENSORS * P_];
    fake_tensors(t, step);
    CheckpointState s = fake_state(step);
    CheckpointWriter w;
    int rc = checkpoint_writer_open(&w, path, &s);
    for (int k = 0; k < CHECKPOINT_TENSORS && rc == 0; k++) rc = checkpoint_writer_append(&w, t + k * P_, P_ * sizeof(float));
    if (rc == 0) rc = checkpoint_writer_close(&w);
    unsetenv("LLMC_TEST_CKPT_FAIL_AFTER");
    if (rc != 0) { snprintf(err, errlen, "%s", w.err); return rc; }
    if (checkpoint_mark_latest(dir, path, err, errlen) != 0) return -1;
    return checkpoint_prune(dir, 2, step, err, errlen);
}

static void test_write_faults(void) {
    printf("faults while writing:\n");
    char dir[512], err[CHECKPOINT_ERR_LEN], hook[64], path[CHECKPOINT_PATH_LEN];
    snprintf(dir, sizeof(dir), "%s/faults", tmp_dir);
    EXPECT(checkpoint_make_dir(dir, err, sizeof(err)) == 0, "make_dir: %s", err);
    EXPECT(save_with_hook(dir, 1, NULL, err, sizeof(err)) == 0, "first checkpoint: %s", err);
    int64_t total = checkpoint_file_bytes(P_, (int64_t)strlen(fake_state(2).settings), CHECKPOINT_TENSORS);
    // in the header, at its end, in the settings, at the first tensor, inside each tensor, one byte short
    int64_t at[] = {0, 100, CHECKPOINT_HEADER_BYTES, CHECKPOINT_HEADER_BYTES + 20, total - 3 * P_ * 4,
                    total - 2 * P_ * 4 + 6, total - P_ * 4 - 4, total - 1};
    int n_at = (int)(sizeof(at) / sizeof(at[0]));
    for (int k = 0; k < n_at; k++) {
        snprintf(hook, sizeof(hook), "%lld", (long long)at[k]);
        int rc = save_with_hook(dir, 2, hook, err, sizeof(err));
        checkpoint_path(path, sizeof(path), dir, 2);
        int named = strstr(err, path) != NULL && strstr(err, "No space left on device") != NULL;
        if (k == 0) printf("  the disk fills up at byte 0: %s\n", err);
        EXPECT(rc != 0 && named, "a write failing after %lld bytes: rc %d, message %s", (long long)at[k], rc, err);
        char what[96];
        snprintf(what, sizeof(what), "a write failing after %lld of %lld bytes", (long long)at[k], (long long)total);
        expect_intact(what, dir, 2, 1);
        char tmp[CHECKPOINT_PATH_LEN + 8];
        snprintf(tmp, sizeof(tmp), "%s.tmp", path);
        EXPECT(!exists(tmp), "%s: the temporary %s was left behind", what, tmp);
    }
    printf("  a write failing at %d points of %lld bytes: the previous checkpoint and latest intact\n", n_at,
           (long long)total);
    // SIGKILL by the hook, in a child, at the same points
    for (int k = 0; k < n_at; k++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            snprintf(hook, sizeof(hook), "%lld:kill", (long long)at[k]);
            save_with_hook(dir, 2, hook, err, sizeof(err));
            _exit(0);  // not reached: the hook killed the process
        }
        int status = 0;
        waitpid(pid, &status, 0);
        char what[96];
        snprintf(what, sizeof(what), "SIGKILL after %lld of %lld bytes", (long long)at[k], (long long)total);
        EXPECT(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "%s: the child was not killed (status %d)", what, status);
        expect_intact(what, dir, 2, 1);
    }
    printf("  SIGKILL at %d points of the write: the previous checkpoint and latest intact\n", n_at);
    // SIGKILL from outside at random moments of a child that writes checkpoints without pause
    uint64_t rng = 12345;
    int64_t step = 2;
    for (int k = 0; k < 6; k++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            for (int64_t s = step;; s++) save_with_hook(dir, s, NULL, err, sizeof(err));
        }
        rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
        struct timespec ts = {0, (long)(1000000 + (rng >> 33) % 20000000)};  // 1 to 21 ms
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        char resolved[CHECKPOINT_PATH_LEN];
        int ok = checkpoint_resolve(resolved, sizeof(resolved), "latest", dir, err, sizeof(err)) == 0;
        const char* base = strrchr(resolved, '/');
        int64_t got = ok && base ? checkpoint_step_of_name(base + 1) : -1;
        ok = ok && got >= 1 && read_matches(resolved, got);
        EXPECT(ok, "killed at a random moment (round %d): latest -> %s does not verify: %s", k, resolved, err);
        if (got >= step) step = got + 1;
    }
    printf("  SIGKILL from outside at 6 random moments: latest verifies each time (last step %lld)\n",
           (long long)step - 1);
    // after all that, the next checkpoint is written and becomes latest
    EXPECT(save_with_hook(dir, step + 100, NULL, err, sizeof(err)) == 0, "writing after the faults: %s", err);
    expect_intact("the write after the faults", dir, step + 101, step + 100);
}

// --- the trainer refuses bad checkpoints before CUDA starts ---------------------------------------

// ./train_gpt -resume FILE ... must exit 1 with FILE and `needle` in its stderr, and not get as far as CUDA.
static void expect_trainer_refuses(const char* what, const char* file, const char* extra, const char* needle) {
    char cmd[2048], out[8192], log[600];
    snprintf(log, sizeof(log), "%s/trainer.txt", tmp_dir);
    snprintf(cmd, sizeof(cmd), "./train_gpt -resume %s -out %s/trainer_out %s > %s 2>&1", file, tmp_dir, extra, log);
    int status = system(cmd);
    FILE* f = fopen_check(log, "rb");
    size_t n = fread(out, 1, sizeof(out) - 1, f);
    fclose(f);
    out[n] = 0;
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    printf("  %-30s -> %s", what, out);
    EXPECT(rc == 1 && strstr(out, file) && strstr(out, needle) && !strstr(out, "CUDA"),
           "%s: rc %d, expected 1 and a message naming %s and \"%s\" before CUDA starts: %s", what, rc, file, needle, out);
}

static void test_trainer(void) {
    if (access("./train_gpt", X_OK) != 0) {
        printf("trainer: ./train_gpt not built, its -resume checks left out\n");
        return;
    }
    printf("trainer (-resume, before CUDA):\n");
    char p[512];
    CheckpointState s = fake_state(5);  // d6's shape (d6 has 30M parameters; this file 1000)
    s.model.num_layers = 6; s.model.channels = 384; s.model.num_heads = 6; s.model.max_seq_len = 1024;
    float t[CHECKPOINT_TENSORS * P_];
    fake_tensors(t, 5);
    const char* settings[] = {"-depth 6 -b 4 -t 64 -seed 42", "-depth 6 -b 4 -t 64 -seed 42 -beta1 1.5",
                              "-depth 6 -b 4 -t 64 -seed 42 -lr fast"};
    const char* names[] = {"params", "beta1", "lr"};
    for (int k = 0; k < 3; k++) {
        snprintf(p, sizeof(p), "%s/trainer_%s.bin", tmp_dir, names[k]);
        snprintf(s.settings, sizeof(s.settings), "%s", settings[k]);
        CheckpointWriter w;
        int rc = checkpoint_writer_open(&w, p, &s);
        for (int i = 0; i < CHECKPOINT_TENSORS && rc == 0; i++) rc = checkpoint_writer_append(&w, t + i * P_, P_ * 4);
        if (rc == 0) rc = checkpoint_writer_close(&w);
        EXPECT(rc == 0, "writing %s: %s", p, w.err);
    }
    snprintf(p, sizeof(p), "%s/trainer_params.bin", tmp_dir);
    expect_trainer_refuses("1000 parameters for d6", p, "-train 'data/starter/starter_train_*.bin'", "parameters");
    snprintf(p, sizeof(p), "%s/trainer_beta1.bin", tmp_dir);
    expect_trainer_refuses("-beta1 1.5 in its settings", p, "", "-beta1 1.5");
    snprintf(p, sizeof(p), "%s/trainer_lr.bin", tmp_dir);
    expect_trainer_refuses("-lr fast in its settings", p, "", "-lr");
    char out_dir[600];
    snprintf(out_dir, sizeof(out_dir), "%s/trainer_out", tmp_dir);
    CheckpointState ls = s;  // the same sizes, of the Llama-style family
    ls.model.family = CHECKPOINT_FAMILY_LLAMA;
    ls.model.num_kv_heads = 2; ls.model.ffn_hidden = 1024; ls.model.rope_theta = 500000.0; ls.model.norm_eps = 1e-5;
    snprintf(ls.settings, sizeof(ls.settings), "%s", "-model llama -size llama-30m -encoding o200k_base -b 4 -t 64");
    snprintf(p, sizeof(p), "%s/trainer_llama.bin", tmp_dir);
    EXPECT(write_state_poisoned(p, &ls, -1, 0.0f) == 0, "writing %s", p);
    expect_trainer_refuses("Llama-style, -model gpt2", p, "-model gpt2", "holds a Llama-style model");
    snprintf(p, sizeof(p), "%s/trainer_params.bin", tmp_dir);  // GPT-2's family
    expect_trainer_refuses("GPT-2, -model llama", p, "-model llama", "holds a GPT-2 model");
    // a setting of the other family in a checkpoint's settings: -depth is GPT-2's
    snprintf(ls.settings, sizeof(ls.settings), "%s", settings[0]);
    snprintf(p, sizeof(p), "%s/trainer_llama_depth.bin", tmp_dir);
    EXPECT(write_state_poisoned(p, &ls, -1, 0.0f) == 0, "writing %s", p);
    expect_trainer_refuses("Llama-style with -depth", p, "", "which a Llama-style model does not have");
    // a step past an int's range: 2^32 + 10 read as an int would be step 10
    char good[512];
    snprintf(good, sizeof(good), "%s/trainer_params.bin", tmp_dir);
    snprintf(p, sizeof(p), "%s/trainer_step.bin", tmp_dir);
    restamp_copy(p, good, CKPT_H_STEP, ((uint64_t)1 << 32) + 10);
    expect_trainer_refuses("step 2^32 + 10", p, "", "step 4294967306");
    EXPECT(!exists(out_dir), "the refused runs created %s", out_dir);
}

// --- main ----------------------------------------------------------------------------------------

int main(void) {
    snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/test_checkpoint.XXXXXX");
    if (!mkdtemp(tmp_dir)) { perror("mkdtemp"); return 1; }
    char dir[512], err[CHECKPOINT_ERR_LEN], path[CHECKPOINT_PATH_LEN], resolved[CHECKPOINT_PATH_LEN];
    snprintf(dir, sizeof(dir), "%s/out/run1", tmp_dir);
    EXPECT(checkpoint_make_dir(dir, err, sizeof(err)) == 0, "make_dir: %s", err);
    EXPECT(checkpoint_make_dir(dir, err, sizeof(err)) == 0, "make_dir of an existing directory: %s", err);

    // round trip and size
    checkpoint_path(path, sizeof(path), dir, 10);
    EXPECT(write_fake(path, 10) == 0, "write %s", path);
    int64_t want_size = CHECKPOINT_HEADER_BYTES + checkpoint_settings_padded((int64_t)strlen(fake_state(10).settings)) +
                        CHECKPOINT_TENSORS * P_ * 4;
    printf("round trip: %s, %lld bytes (expected %lld), identical: %s\n", path, (long long)file_size(path),
           (long long)want_size, read_matches(path, 10) ? "yes" : "no");
    EXPECT(file_size(path) == want_size, "file size %lld, expected %lld", (long long)file_size(path), (long long)want_size);
    EXPECT(read_matches(path, 10), "read back differs from what was written");
    EXPECT(checkpoint_step_of_name("ckpt_00000010.bin") == 10 && checkpoint_step_of_name("ckpt_1x.bin") < 0 &&
           checkpoint_step_of_name("ckpt_.bin") < 0 && checkpoint_step_of_name("latest") < 0 &&
           checkpoint_step_of_name("ckpt_00000010.bin.tmp") < 0, "checkpoint_step_of_name");

    // the writer must refuse to close before all tensors are written, and to write past them
    {
        CheckpointState s = fake_state(11);
        CheckpointWriter w;
        float t[P_] = {0};
        checkpoint_path(path, sizeof(path), dir, 11);
        EXPECT(checkpoint_writer_open(&w, path, &s) == 0, "open: %s", w.err);
        checkpoint_writer_append(&w, t, sizeof(t));
        EXPECT(checkpoint_writer_close(&w) != 0 && !exists(path), "closing a short checkpoint succeeded");
        printf("short write refused: %s\n", w.err);
        EXPECT(checkpoint_writer_open(&w, path, &s) == 0, "open: %s", w.err);
        for (int k = 0; k < CHECKPOINT_TENSORS; k++) checkpoint_writer_append(&w, t, sizeof(t));
        EXPECT(checkpoint_writer_append(&w, t, 4) != 0 && !exists(path), "appending past the tensors succeeded");
        checkpoint_writer_abort(&w);
    }

    // the protocol: a file under a final name is complete; a crash leaves the previous one and `latest`
    save_step(dir, 20, 3);
    EXPECT(checkpoint_resolve(resolved, sizeof(resolved), "latest", dir, err, sizeof(err)) == 0, "resolve: %s", err);
    checkpoint_path(path, sizeof(path), dir, 20);
    EXPECT(strcmp(resolved, path) == 0, "latest resolves to %s, expected %s", resolved, path);
    {
        CheckpointState s = fake_state(30);
        CheckpointWriter w;
        float t[P_] = {0};
        checkpoint_path(path, sizeof(path), dir, 30);
        EXPECT(checkpoint_writer_open(&w, path, &s) == 0, "open: %s", w.err);
        checkpoint_writer_append(&w, t, sizeof(t));
        int early = exists(path), tmp = exists(w.af.tmp);
        printf("during a write: final name present %s, temporary present %s\n", early ? "yes" : "no", tmp ? "yes" : "no");
        EXPECT(!early && tmp, "during the write the final name exists (%d) or the temporary does not (%d)", early, tmp);
        fclose(w.af.f);  // the crash: the process dies here, the temporary stays behind
        EXPECT(!exists(path), "a crashed write left %s", path);
        EXPECT(checkpoint_resolve(resolved, sizeof(resolved), "latest", dir, err, sizeof(err)) == 0, "resolve: %s", err);
        checkpoint_path(path, sizeof(path), dir, 20);
        int intact = strcmp(resolved, path) == 0 && read_matches(resolved, 20);
        printf("after a crashed write: latest -> %s, intact: %s\n", resolved, intact ? "yes" : "no");
        EXPECT(intact, "after a crashed write latest is %s or step 20 is damaged", resolved);
        // the next attempt overwrites the leftover temporary
        save_step(dir, 30, 3);
        checkpoint_path(path, sizeof(path), dir, 30);
        EXPECT(read_matches(path, 30) && !exists(w.af.tmp), "the retried write of step 30");
    }

    // -resume forms: a directory, a file; and a directory without `latest`
    EXPECT(checkpoint_resolve(resolved, sizeof(resolved), dir, "elsewhere", err, sizeof(err)) == 0 &&
           strcmp(resolved, path) == 0, "resolve of the directory: %s", resolved);
    EXPECT(checkpoint_resolve(resolved, sizeof(resolved), path, "elsewhere", err, sizeof(err)) == 0 &&
           strcmp(resolved, path) == 0, "resolve of a file: %s", resolved);
    EXPECT(checkpoint_resolve(resolved, sizeof(resolved), "latest", tmp_dir, err, sizeof(err)) != 0 &&
           strstr(err, "no checkpoint was completed") != NULL, "resolve without a marker: %s", err);
    printf("resume without a marker: %s\n", err);

    // keep-last-K: steps 10 (older write), 20, 30 exist; keep 2 at step 40 leaves 30 and 40
    save_step(dir, 40, 2);
    int64_t steps[] = {10, 20, 30, 40};
    int kept[4];
    for (int i = 0; i < 4; i++) { checkpoint_path(path, sizeof(path), dir, steps[i]); kept[i] = exists(path); }
    printf("keep 2 after step 40: 10 %d, 20 %d, 30 %d, 40 %d\n", kept[0], kept[1], kept[2], kept[3]);
    EXPECT(!kept[0] && !kept[1] && kept[2] && kept[3], "keep 2: expected only steps 30 and 40");
    // keep 1; a newer checkpoint (of a run resumed from an earlier one) is left alone
    save_step(dir, 35, 1);
    for (int i = 0; i < 4; i++) { checkpoint_path(path, sizeof(path), dir, steps[i]); kept[i] = exists(path); }
    checkpoint_path(path, sizeof(path), dir, 35);
    printf("keep 1 after step 35: 30 %d, 35 %d, 40 %d\n", kept[2], exists(path), kept[3]);
    EXPECT(!kept[2] && exists(path) && kept[3], "keep 1 at step 35: expected 35 and the newer 40 only");
    EXPECT(checkpoint_resolve(resolved, sizeof(resolved), "latest", dir, err, sizeof(err)) == 0 &&
           strcmp(resolved, path) == 0, "latest after step 35: %s", resolved);

    test_corrupt(path);
    test_integrity(path, 35);
    test_steps(path);
    test_families();
    test_write_faults();
    test_trainer();

    test_remove_dir(tmp_dir);
    return test_summary("test_checkpoint");
}
