// test_hf_weights.c: CPU tests of llmc/io/hf_weights.h, the weights of a Hugging Face model in one safetensors
// file or split into several with an index, on files in a temporary directory. Checks: a split model read
// through its directory (also named with trailing slashes) and through its index's path (every tensor found
// and read from the file that holds it, values exact; a name no file has not found); a directory with
// model.safetensors, and one with both it and an index (model.safetensors is read); a plain file; a file
// that shrank after open, refused on read naming it; and each bad index refused with a message naming it
// (or the file at fault), every file closed after: no files in the directory, over 64 MiB, not JSON, no
// weight_map, an empty one, a value that is not a string, a path for a file name, a missing file, a file
// that is not safetensors, a tensor placed in a file that lacks it, a tensor no entry names, one in two
// files, one named twice. Every index reaches cJSON as a 0-terminated buffer (dev/test/io/json_terminated.h).
#define _GNU_SOURCE  // RTLD_NEXT, for json_terminated.h
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../../../llmc/io/hf_weights.h"
#include "json_terminated.h"
#include "../testing.h"

static char root[256];
#define F1 "model-00001-of-00002.safetensors"
#define F2 "model-00002-of-00002.safetensors"

// dir/name: a safetensors file of the tensors named in `names` (space-separated), each (2, 3) F32, tensor
// "x<k>" holding k * 100 + 0 .. 5.
static void write_file(const char* dir, const char* name, const char* names) {
    char path[1024], list[256], *save = NULL;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(list, sizeof(list), "%s", names);
    SafetensorsTensor t[8];
    float v[8][6];
    int n = 0;
    int64_t shape[2] = {2, 3};
    for (char* s = strtok_r(list, " ", &save); s && n < 8; s = strtok_r(NULL, " ", &save), n++) {
        safetensors_tensor(&t[n], s, ST_F32, 2, shape);
        for (int i = 0; i < 6; i++) v[n][i] = (float)(atoi(s + 1) * 100 + i);
    }
    SafetensorsWriter w;
    int rc = safetensors_writer_open(&w, path, t, n, NULL);
    for (int k = 0; k < n && rc == 0; k++) rc = safetensors_writer_append(&w, v[k], sizeof(v[k]));
    if (rc == 0) rc = safetensors_writer_close(&w);
    EXPECT(rc == 0, "write %s: %s", path, w.err);
}

static void write_text(const char* dir, const char* name, const char* text) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE* f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
}

// A fresh directory root/name into out.
static void make_dir(char* out, size_t n, const char* name) {
    snprintf(out, n, "%s/%s", root, name);
    char err[HF_ERR_LEN];
    EXPECT(hf_make_dir(out, err, sizeof(err)) == 0, "%s", err);
}

// w holds tensor "x<k>" with k * 100 + 0 .. 5.
static void expect_tensor(HfWeights* w, int k, const char* what) {
    char name[16];
    snprintf(name, sizeof(name), "x%d", k);
    const SafetensorsTensor* t = hf_weights_find(w, name);
    EXPECT(t != NULL, "%s: tensor %s found", what, name);
    if (!t) return;
    float v[6] = {0};
    int rc = hf_weights_read_f32(w, t, v);
    EXPECT(rc == 0, "%s: tensor %s read: %s", what, name, rc ? w->err : "");
    int same = 1;
    for (int i = 0; i < 6; i++) same &= v[i] == (float)(k * 100 + i);
    EXPECT(same, "%s: tensor %s holds %d .. %d (got %g ..)", what, name, k * 100, k * 100 + 5, v[0]);
}

// The split model of root/split: x1 x2 in F1, x3 in F2, read through path.
static void test_split(const char* path, const char* what) {
    HfWeights w;
    int rc = hf_weights_open(&w, path);
    EXPECT(rc == 0, "%s: open: %s", what, rc ? w.err : "");
    if (rc) return;
    EXPECT(w.num_files == 2 && w.num_tensors == 3, "%s: 2 files and 3 tensors (got %d, %d)", what, w.num_files,
           w.num_tensors);
    EXPECT(strstr(w.path, HF_WEIGHTS_INDEX) != NULL, "%s: w.path %s names the index", what, w.path);
    for (int k = 3; k >= 1; k--) expect_tensor(&w, k, what);
    EXPECT(hf_weights_find(&w, "x4") == NULL, "%s: no tensor x4", what);
    hf_weights_close(&w);
}

static void test_good(void) {
    char d[512], p[1024];
    make_dir(d, sizeof(d), "split");
    write_file(d, F1, "x1 x2");
    write_file(d, F2, "x3");
    write_text(d, HF_WEIGHTS_INDEX, "{\"metadata\": {\"total_size\": 72}, \"weight_map\": {\"x3\": \"" F2 "\", "
               "\"x1\": \"" F1 "\", \"x2\": \"" F1 "\"}}");
    test_split(d, "a split model's directory");
    snprintf(p, sizeof(p), "%s//", d);
    HfWeights w;
    EXPECT(hf_weights_open(&w, p) == 0, "a directory named with trailing slashes: %s", w.err);
    snprintf(p, sizeof(p), "%s/%s", d, HF_WEIGHTS_INDEX);
    EXPECT(strcmp(w.path, p) == 0, "a directory named with trailing slashes: its index is %s (got %s)", p, w.path);
    hf_weights_close(&w);
    test_split(p, "a split model's index");  // p: the index's path

    make_dir(d, sizeof(d), "one");
    write_file(d, HF_WEIGHTS_FILE, "x7 x8");
    EXPECT(hf_weights_open(&w, d) == 0, "a directory with model.safetensors: %s", w.err);
    EXPECT(w.num_files == 1 && w.num_tensors == 2, "one file, 2 tensors (got %d, %d)", w.num_files, w.num_tensors);
    expect_tensor(&w, 8, "model.safetensors");
    expect_tensor(&w, 7, "model.safetensors");
    hf_weights_close(&w);

    // both: model.safetensors is read, as transformers reads it
    write_file(d, F1, "x1");
    write_text(d, HF_WEIGHTS_INDEX, "{\"weight_map\": {\"x1\": \"" F1 "\"}}");
    EXPECT(hf_weights_open(&w, d) == 0, "a directory with model.safetensors and an index: %s", w.err);
    EXPECT(hf_weights_find(&w, "x7") && !hf_weights_find(&w, "x1") && strstr(w.path, "/" HF_WEIGHTS_FILE),
           "a directory with model.safetensors and an index reads model.safetensors (%s)", w.path);
    hf_weights_close(&w);

    snprintf(p, sizeof(p), "%s/%s", d, F1);
    EXPECT(hf_weights_open(&w, p) == 0, "a file: %s", w.err);
    expect_tensor(&w, 1, "a file by its path");
    hf_weights_close(&w);

    // the file shrinks after open: the read is refused, naming the file and the tensor, and w closed (x1
    // after 64 KiB of other data, beyond what the open read into the stream's buffer)
    snprintf(p, sizeof(p), "%s/big.safetensors", d);
    SafetensorsTensor t[2];
    int64_t shape[2] = {16384, 6};
    safetensors_tensor(&t[0], "pad", ST_F32, 1, shape);
    safetensors_tensor(&t[1], "x1", ST_F32, 1, shape + 1);
    static float pad[16384];
    const float x1[6] = {100, 101, 102, 103, 104, 105};
    SafetensorsWriter sw;
    int ok = safetensors_writer_open(&sw, p, t, 2, NULL) == 0 && safetensors_writer_append(&sw, pad, sizeof(pad)) == 0 &&
             safetensors_writer_append(&sw, x1, sizeof(x1)) == 0 && safetensors_writer_close(&sw) == 0;
    EXPECT(ok, "write %s: %s", p, sw.err);
    EXPECT(hf_weights_open(&w, p) == 0, "a file: %s", w.err);
    EXPECT(truncate(p, 40) == 0, "truncate %s", p);
    float v[6];
    int rc = hf_weights_read_f32(&w, hf_weights_find(&w, "x1"), v);
    EXPECT(rc != 0 && strstr(w.err, p) && strstr(w.err, "\"x1\"") && w.num_files == 0,
           "a file that shrank after open: refused on read, naming it and the tensor (%s)", rc ? w.err : "read");
    hf_weights_close(&w);
}

// root/name, made with the index text (NULL: none) and the files F1 (x1 x2) and F2 (x3, or f2's list),
// must be refused on open with a message holding frag, and every file closed.
static void expect_refused(const char* name, const char* index, const char* f2, const char* frag) {
    char d[512];
    make_dir(d, sizeof(d), name);
    write_file(d, F1, "x1 x2");
    if (f2) write_file(d, F2, f2);
    if (index) write_text(d, HF_WEIGHTS_INDEX, index);
    HfWeights w;
    int rc = hf_weights_open(&w, d);
    EXPECT(rc != 0 && strstr(w.err, frag) && w.num_files == 0 && !w.files,
           "%s: refused with \"%s\", its files closed (%s)", name, frag, rc ? w.err : "opened");
    if (rc == 0) hf_weights_close(&w);
    else printf("  refused, %s: %s\n", name, w.err);
}

static void test_bad(void) {
    expect_refused("no files", NULL, NULL, "a directory with neither model.safetensors nor model.safetensors.index.json");
    expect_refused("not JSON", "{\"weight_map\": ", "x3", HF_WEIGHTS_INDEX ": is not a JSON object");
    expect_refused("no weight_map", "{\"metadata\": {}}", "x3", "has no \"weight_map\" object");
    expect_refused("empty weight_map", "{\"weight_map\": {}}", "x3", "has an empty \"weight_map\"");
    expect_refused("a number for a file", "{\"weight_map\": {\"x1\": 3}}", "x3",
                   "tensor \"x1\" is mapped to something other than a string");
    expect_refused("a path for a file", "{\"weight_map\": {\"x1\": \"../" F1 "\"}}", "x3",
                   "tensor \"x1\" is mapped to a path, expected the name of a file in the index's directory");
    expect_refused("a missing file", "{\"weight_map\": {\"x1\": \"" F1 "\", \"x2\": \"" F1 "\", \"x3\": \"" F2 "\"}}",
                   NULL, F2 ": cannot open: No such file or directory (one of the files that");
    expect_refused("a tensor placed in a file that lacks it",
                   "{\"weight_map\": {\"x1\": \"" F1 "\", \"x2\": \"" F2 "\", \"x3\": \"" F2 "\"}}", "x3",
                   "weight_map places tensor \"x2\" in " F2 ", which does not hold it");
    expect_refused("a tensor no entry names", "{\"weight_map\": {\"x1\": \"" F1 "\", \"x3\": \"" F2 "\"}}", "x3",
                   F1 " holds tensor \"x2\", which weight_map does not name");
    expect_refused("a tensor in two files",
                   "{\"weight_map\": {\"x1\": \"" F1 "\", \"x2\": \"" F1 "\", \"x3\": \"" F2 "\"}}", "x3 x2",
                   F2 " holds tensor \"x2\", which weight_map places in " F1 " (a tensor in two files, or named twice)");
    expect_refused("a tensor named twice",
                   "{\"weight_map\": {\"x1\": \"" F1 "\", \"x2\": \"" F1 "\", \"x3\": \"" F2 "\", \"x3\": \"" F1 "\"}}",
                   "x3", "weight_map places tensor \"x3\" in " F1 ", which does not hold it");
    char d[512], p[1024];
    make_dir(d, sizeof(d), "too large");  // 65 MiB, sparse: refused before it is read
    snprintf(p, sizeof(p), "%s/%s", d, HF_WEIGHTS_INDEX);
    write_text(d, HF_WEIGHTS_INDEX, "{}");
    EXPECT(truncate(p, 65 << 20) == 0, "truncate %s", p);
    expect_refused("too large", NULL, "x3", HF_WEIGHTS_INDEX ": 68157440 bytes, more than an index of safetensors "
                   "files has (at most 67108864)");
    make_dir(d, sizeof(d), "not safetensors");
    write_text(d, "junk.safetensors", "hello");
    expect_refused("not safetensors", "{\"weight_map\": {\"x1\": \"" F1 "\", \"x9\": \"junk.safetensors\"}}", "x3",
                   "junk.safetensors: 5 bytes, shorter than the 8-byte header length");
}

int main(void) {
    snprintf(root, sizeof(root), "%s/test_hf_weights.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(root)) { perror("mkdtemp"); return 1; }
    test_good();
    test_bad();
    printf("indexes and headers handed to cJSON: %d, not 0-terminated: %d\n", json_parses, json_unterminated);
    EXPECT(json_parses > 10 && json_unterminated == 0, "%d of the %d buffers handed to cJSON were not 0-terminated",
           json_unterminated, json_parses);
    test_remove_dir(root);
    return test_summary("test_hf_weights");
}
