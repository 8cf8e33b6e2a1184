// test_safetensors.c: CPU tests of the safetensors reader and writer (llmc/io/safetensors.h), on files in a
// temporary directory. Checks: a write/read round trip (names, dtypes, shapes, metadata, bytes; the data
// section starts at a multiple of 8; nothing under the final name before close, nothing at all after an
// abort); BF16 and F16 to fp32 conversion of known values (subnormal, infinity); and that each bad file is
// refused with a message naming the file and, where there is one, the tensor: missing, shorter than the
// length field, header length 0 / beyond the file / over the limit, not JSON, JSON not an object, an entry
// not an object, an unknown dtype, no data_offsets, a shape that is not integers, shape and size not
// matching, offsets out of bounds, a truncated data section, overlapping offsets, a hole, bytes after the
// last tensor, a duplicate name, and a dtype that read_f32 does not convert. Every header reaches cJSON
// as a 0-terminated buffer (cJSON up to 1.7.17 reads one byte past an unterminated one): the test's own
// cJSON_ParseWithLength (dev/test/io/json_terminated.h), which the reader calls in place of the library's,
// looks at that byte.
#define _GNU_SOURCE  // RTLD_NEXT, for json_terminated.h
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../../../llmc/io/safetensors.h"
#include "json_terminated.h"
#include "../testing.h"

static char dir[256], path[512];

// A file of: the 8-byte length n_field, the JSON text, then data_bytes bytes of 0x11.
static void write_raw(uint64_t n_field, const char* json, size_t data_bytes) {
    FILE* f = fopen(path, "wb");
    unsigned char n8[8];
    for (int i = 0; i < 8; i++) n8[i] = (unsigned char)(n_field >> (8 * i));
    fwrite(n8, 1, 8, f);
    fwrite(json, 1, strlen(json), f);
    for (size_t i = 0; i < data_bytes; i++) fputc(0x11, f);
    fclose(f);
}

// A well-formed header of this JSON, followed by data_bytes bytes.
static void write_json(const char* json, size_t data_bytes) { write_raw(strlen(json), json, data_bytes); }

// The file at `path` must be refused with a message holding the path and each of the fragments.
static void expect_refused(const char* what, const char* frag1, const char* frag2) {
    SafetensorsReader r;
    int rc = safetensors_open(&r, path);
    int ok = rc != 0 && strstr(r.err, path) && (!frag1 || strstr(r.err, frag1)) && (!frag2 || strstr(r.err, frag2));
    EXPECT(ok, "%s: rc %d, message \"%s\" (wanted the path, \"%s\" and \"%s\")", what, rc, rc ? r.err : "",
           frag1 ? frag1 : "", frag2 ? frag2 : "");
    if (ok) printf("  refused, %s: %s\n", what, r.err + strlen("safetensors ") + strlen(path) + 2);
    if (rc == 0) safetensors_close(&r);
}

static void test_round_trip(void) {
    float a[6] = {1.0f, -2.0f, 3.5f, -0.0f, 1e-30f, 65504.0f};
    uint16_t b[4] = {0x3f80, 0xc020, 0x0001, 0x7f80};  // bf16: 1, -2.5, the smallest subnormal, inf
    int32_t s = 42;
    SafetensorsTensor t[3];
    int64_t sa[2] = {2, 3}, sb[1] = {4};
    safetensors_tensor(&t[0], "layer.a", ST_F32, 2, sa);
    safetensors_tensor(&t[1], "b", ST_BF16, 1, sb);
    safetensors_tensor(&t[2], "scalar", ST_I32, 0, NULL);
    const char* const meta[] = {"format", "pt", "note", "a test", NULL};
    SafetensorsWriter w;
    EXPECT(safetensors_writer_open(&w, path, t, 3, meta) == 0, "writer open: %s", w.err);
    EXPECT(safetensors_writer_append(&w, a, sizeof(a)) == 0, "append: %s", w.err);
    EXPECT(safetensors_writer_append(&w, b, sizeof(b)) == 0, "append: %s", w.err);
    EXPECT(access(path, F_OK) != 0, "%s exists before the writer closed", path);
    EXPECT(safetensors_writer_append(&w, &s, sizeof(s)) == 0, "append: %s", w.err);
    EXPECT(safetensors_writer_close(&w) == 0, "close: %s", w.err);

    SafetensorsReader r;
    int rc = safetensors_open(&r, path);
    EXPECT(rc == 0, "reading back: %s", r.err);
    if (rc != 0) return;
    printf("round trip: %d tensors, data section at byte %llu (%s)\n", r.num_tensors, (unsigned long long)r.data_start,
           r.data_start % 8 == 0 ? "a multiple of 8" : "NOT ALIGNED");
    EXPECT(r.num_tensors == 3, "%d tensors, wrote 3", r.num_tensors);
    EXPECT(r.data_start % 8 == 0, "the data section starts at %llu, not a multiple of 8", (unsigned long long)r.data_start);
    const char* fmt = safetensors_metadata(&r, "format");
    EXPECT(fmt && strcmp(fmt, "pt") == 0, "metadata format: %s", fmt ? fmt : "(none)");
    const SafetensorsTensor* ta = safetensors_find(&r, "layer.a");
    const SafetensorsTensor* tb = safetensors_find(&r, "b");
    const SafetensorsTensor* ts = safetensors_find(&r, "scalar");
    EXPECT(ta && ta->dtype == ST_F32 && ta->ndim == 2 && ta->shape[0] == 2 && ta->shape[1] == 3, "tensor layer.a header");
    EXPECT(tb && tb->dtype == ST_BF16 && tb->ndim == 1 && tb->shape[0] == 4, "tensor b header");
    EXPECT(ts && ts->dtype == ST_I32 && ts->ndim == 0 && safetensors_numel(ts) == 1, "tensor scalar header");
    if (!ta || !tb || !ts) { safetensors_close(&r); return; }
    float ga[6], gb[4];
    int32_t gs = 0;
    EXPECT(safetensors_read_f32(&r, ta, ga) == 0 && memcmp(ga, a, sizeof(a)) == 0, "layer.a not bitwise equal");
    EXPECT(safetensors_read_f32(&r, tb, gb) == 0, "reading b as fp32: %s", r.err);
    float want_b[4] = {1.0f, -2.5f, 9.18354962e-41f, INFINITY};
    EXPECT(memcmp(gb, want_b, sizeof(gb)) == 0, "bf16 -> fp32: %g %g %g %g", gb[0], gb[1], gb[2], gb[3]);
    EXPECT(safetensors_read(&r, ts, &gs) == 0 && gs == 42, "scalar: %d", gs);
    // I32 is not a float type: read_f32 refuses it, naming the tensor
    rc = safetensors_read_f32(&r, ts, ga);
    EXPECT(rc != 0 && strstr(r.err, "\"scalar\"") && strstr(r.err, "dtype I32"), "read_f32 of I32: rc %d, \"%s\"", rc, r.err);
    safetensors_close(&r);

    // an abandoned write leaves nothing
    remove(path);
    EXPECT(safetensors_writer_open(&w, path, t, 1, NULL) == 0, "writer open: %s", w.err);
    safetensors_writer_abort(&w);
    char tmp[600];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    EXPECT(access(path, F_OK) != 0 && access(tmp, F_OK) != 0, "an aborted write left a file behind");
    // closing before all data was appended fails and leaves nothing
    EXPECT(safetensors_writer_open(&w, path, t, 1, NULL) == 0, "writer open: %s", w.err);
    EXPECT(safetensors_writer_close(&w) != 0 && access(path, F_OK) != 0, "closing an incomplete file succeeded");
}

static void test_f16(void) {
    const uint16_t h[6] = {0x3c00, 0xc000, 0x0001, 0x7bff, 0xfc00, 0x0000};
    const float want[6] = {1.0f, -2.0f, 5.96046448e-08f, 65504.0f, -INFINITY, 0.0f};
    int same = 1;
    for (int i = 0; i < 6; i++) same &= safetensors_f16_to_f32(h[i]) == want[i];
    uint32_t nan = 0;
    float fn = safetensors_f16_to_f32(0x7e01);
    memcpy(&nan, &fn, 4);
    EXPECT(same, "f16 -> fp32 of known values");
    EXPECT(fn != fn && (nan & 0x7fffff) == (0x201u << 13), "f16 NaN payload: %08x", nan);
    printf("f16 -> fp32: 1, -2, 2^-24, 65504, -inf, 0, NaN payload kept: %s\n", same ? "exact" : "WRONG");
}

static void test_bad_files(void) {
    printf("bad files:\n");
    remove(path);
    expect_refused("missing file", "cannot open", NULL);
    FILE* f = fopen(path, "wb");
    fwrite("\x05\0\0", 1, 3, f);
    fclose(f);
    expect_refused("shorter than the length", "shorter than the 8-byte", NULL);
    write_raw(0, "", 16);
    expect_refused("header length 0", "header length 0 out of range", NULL);
    write_raw(4096, "{}", 0);
    expect_refused("header length beyond the file", "header length 4096 out of range", NULL);
    write_raw((uint64_t)1 << 40, "{}", 0);
    expect_refused("header length over the limit", "out of range", NULL);
    write_json("{\"a\": {\"dtype\": \"F32\", ", 0);
    expect_refused("not JSON", "not valid JSON", NULL);
    write_json("[1, 2, 3]", 0);
    expect_refused("JSON not an object", "not an object", NULL);
    write_json("{\"w\": 3}", 0);
    expect_refused("entry not an object", "\"w\"", "not a JSON object");
    write_json("{\"w\": {\"dtype\": \"F31\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 8);
    expect_refused("unknown dtype", "\"w\"", "unknown dtype \"F31\"");
    write_json("{\"w\": {\"dtype\": \"F32\", \"shape\": [2]}}", 8);
    expect_refused("no data_offsets", "\"w\"", "data_offsets");
    write_json("{\"w\": {\"dtype\": \"F32\", \"shape\": [-2], \"data_offsets\": [0, 8]}}", 8);
    expect_refused("negative shape", "\"w\"", "shape entry 0");
    write_json("{\"w\": {\"dtype\": \"F32\", \"shape\": [2.5], \"data_offsets\": [0, 8]}}", 8);
    expect_refused("fractional shape", "\"w\"", "shape entry 0");
    write_json("{\"w\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 20]}}", 20);
    expect_refused("shape and size mismatch", "\"w\"", "shape and size do not match");
    write_json("{\"w\": {\"dtype\": \"BF16\", \"shape\": [4294967296, 4294967296], \"data_offsets\": [0, 8]}}", 8);
    expect_refused("shape overflowing", "\"w\"", "shape and size do not match");
    write_json("{\"w\": {\"dtype\": \"F32\", \"shape\": [6], \"data_offsets\": [0, 24]}}", 16);
    expect_refused("offsets out of bounds", "\"w\"", "run past the data section");
    write_json("{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 0]}}", 8);
    expect_refused("end before begin", "\"w\"", "begin <= end");
    write_json("{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]},"
               " \"b\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [8, 24]}}", 24);
    expect_refused("overlapping offsets", "\"b\"", "overlap those of tensor \"a\"");
    write_json("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
               " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [16, 24]}}", 24);
    expect_refused("a hole between tensors", "\"b\"", "bytes [8, 16) belong to no tensor");
    write_json("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 16);
    expect_refused("bytes after the last tensor", "\"a\"", "8 bytes after the last tensor");
    write_json("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
               " \"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}", 16);
    expect_refused("duplicate name", "\"a\"", "named twice");
    write_json("{\"__metadata__\": {\"format\": 1}}", 0);
    expect_refused("metadata not strings", "format", "not a string");
    // the 19-byte file that made cJSON 1.7.17 read past its buffer: a header that stops after a comma;
    // then a 24-byte header, whose byte after malloc's 24 is the next heap chunk's size, never 0
    write_json("{\"e\":\"F32\",", 0);
    expect_refused("header ending after a comma", "not valid JSON", NULL);
    write_json("{\"e\": {\"dtype\": \"F32\",  ", 0);  // 24 bytes
    expect_refused("a 24-byte unfinished header", "not valid JSON", NULL);

    // a good file cut short: its last tensor runs past the end
    float v[8] = {0};
    SafetensorsTensor t[2];
    int64_t s1[1] = {4};
    safetensors_tensor(&t[0], "first", ST_F32, 1, s1);
    safetensors_tensor(&t[1], "last", ST_F32, 1, s1);
    SafetensorsWriter w;
    int ok = safetensors_writer_open(&w, path, t, 2, NULL) == 0 && safetensors_writer_append(&w, v, sizeof(v)) == 0 &&
             safetensors_writer_close(&w) == 0;
    EXPECT(ok, "writing the file to truncate: %s", w.err);
    long size = 0;
    f = fopen(path, "rb");
    if (f) { fseek(f, 0, SEEK_END); size = ftell(f); fclose(f); }
    EXPECT(truncate(path, size - 4) == 0, "truncate %s", path);
    expect_refused("truncated data", "\"last\"", "run past the data section");
}

// Sizes up to 2^53 (the reader's bound) come back exact: a tensor of 0 bytes whose first dimension has
// 16 digits, and 2^53 itself (cJSON prints a number through 15 significant digits when that reads back
// within a relative DBL_EPSILON, which these are)
static void test_large_sizes(void) {
    int64_t dims[][2] = {{1000000000000001LL, 0}, {9007199254740992LL, 0}, {1234567890123457LL, 0}};
    for (int i = 0; i < 3; i++) {
        SafetensorsTensor t;
        safetensors_tensor(&t, "empty", ST_F32, 2, dims[i]);
        SafetensorsWriter w;
        EXPECT(safetensors_writer_open(&w, path, &t, 1, NULL) == 0 && safetensors_writer_close(&w) == 0,
               "writing shape (%lld, 0): %s", (long long)dims[i][0], w.err);
        SafetensorsReader r;
        int rc = safetensors_open(&r, path);
        EXPECT(rc == 0, "reading shape (%lld, 0) back: %s", (long long)dims[i][0], r.err);
        if (rc != 0) continue;
        const SafetensorsTensor* b = safetensors_find(&r, "empty");
        EXPECT(b && b->ndim == 2 && b->shape[0] == dims[i][0] && b->shape[1] == 0,
               "shape (%lld, 0) read back as (%lld, %lld)", (long long)dims[i][0], b ? (long long)b->shape[0] : -1LL,
               b ? (long long)b->shape[1] : -1LL);
        safetensors_close(&r);
    }
    printf("large sizes: shapes with 16-digit dimensions read back exact\n");
}

int main(void) {
    snprintf(dir, sizeof(dir), "%s/test_safetensors.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    snprintf(path, sizeof(path), "%s/t.safetensors", dir);
    test_round_trip();
    test_f16();
    test_bad_files();
    test_large_sizes();
    printf("headers handed to cJSON: %d, not 0-terminated: %d\n", json_parses, json_unterminated);
    EXPECT(json_parses > 10 && json_unterminated == 0, "%d of the %d headers handed to cJSON were not 0-terminated",
           json_unterminated, json_parses);
    remove(path);
    rmdir(dir);
    return test_summary("test_safetensors");
}
