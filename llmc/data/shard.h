// shard.h: the token shard format, byte-compatible with llm.c's.
// A shard is int32 header[256] = {magic 20240520, version 1, token count, 0...}, then `count` uint16
// GPT-2 token ids. Vocabularies above 65,536 tokens (cl100k_base, o200k_base) use llm.c's Llama-3
// layout: magic 20240801, version 7, then uint32 ids (written by shard_writer_open_u32).
// Writers go through a temporary file (created afresh, never through a link: atomic_open_tmp) renamed
// into place at close, so a shard that exists under its final name is always complete. Readers check magic, version, size, that the file
// holds data behind its header's count (no holes), and that every id is below the vocabulary size; a
// shard is checked again each time its ids are read. Errors say which file is wrong and how to
// remake it.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "../core/atomic_file.h"
#include "../core/check.h"

#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define SHARD_HEADER_INTS 256
#define SHARD_HEADER_BYTES (SHARD_HEADER_INTS * (int)sizeof(int32_t))
#define SHARD_MAX_TOKENS 0x7fffffffLL   // the count is an int32
#define GPT2_EOT 50256                  // <|endoftext|>, written before every document
#define GPT2_VOCAB 50257
#define SHARD_U32_MAGIC 20240801        // llm.c's Llama-3 layout: uint32 ids
#define SHARD_U32_VERSION 7

// --- writing -----------------------------------------------------------------------------------

typedef struct {
    FILE* f;
    char path[4096];      // final name
    char tmp_path[4096];  // written here, renamed to `path` by shard_writer_close
    int64_t ntok;
    int32_t magic, version;  // the layout: SHARD_MAGIC/VERSION (uint16 ids) or SHARD_U32_MAGIC/VERSION
    int token_bytes;         // 2 or 4
} ShardWriter;

// A write to the shard's temporary file failed (`what`, errno set): says which shard, and exits.
// The caller's exit handler, if any, removes the temporary file.
static inline void shard_writer_fail_(const ShardWriter* w, const char* what) {
    check_failf("is the disk full, the directory read-only, or a file size limit (ulimit -f) reached? The shard is "
                "not written; make room and run again", "writing the shard %s failed (%s of its temporary file %s): %s",
                w->path, what, w->tmp_path, strerror(errno));
}

static inline void shard_writer_open(ShardWriter* w, const char* path) {
    if (snprintf(w->path, sizeof(w->path), "%s", path) >= (int)sizeof(w->path) ||
        snprintf(w->tmp_path, sizeof(w->tmp_path), "%s.tmp", path) >= (int)sizeof(w->tmp_path))
        check_failf("use a shorter output directory (a shard's path has at most 4091 bytes)", "shard path too long: %s",
                    path);
    w->f = atomic_open_tmp(w->tmp_path);  // a new file: a link planted at tmp_path is not followed
    if (!w->f)
        check_failf("check that its directory exists and is writable", "cannot create %s, the temporary file of the "
                    "shard %s: %s", w->tmp_path, w->path, strerror(errno));
    int32_t header[SHARD_HEADER_INTS] = {0};  // rewritten with the count at close
    if (fwrite(header, sizeof(int32_t), SHARD_HEADER_INTS, w->f) != SHARD_HEADER_INTS)
        shard_writer_fail_(w, "fwrite");
    w->ntok = 0;
    w->magic = SHARD_MAGIC;
    w->version = SHARD_VERSION;
    w->token_bytes = 2;
}

// Opens a shard in the Llama-3 layout (uint32 ids); append with shard_writer_append_u32.
static inline void shard_writer_open_u32(ShardWriter* w, const char* path) {
    shard_writer_open(w, path);
    w->magic = SHARD_U32_MAGIC;
    w->version = SHARD_U32_VERSION;
    w->token_bytes = 4;
}

static inline void shard_writer_write_(ShardWriter* w, const void* tokens, size_t n, int token_bytes) {
    if (w->token_bytes != token_bytes)
        check_failf("a bug in the caller: open the shard with shard_writer_open_u32 for uint32 ids",
                    "shard %s holds %d-byte ids; appending %d-byte ones is a bug in the caller", w->path,
                    w->token_bytes, token_bytes);
    if (w->ntok + (int64_t)n > SHARD_MAX_TOKENS)
        check_failf("use a smaller shard size", "shard %s would exceed %lld tokens (the header count is int32)", w->path,
                    SHARD_MAX_TOKENS);
    if (fwrite(tokens, (size_t)token_bytes, n, w->f) != n) shard_writer_fail_(w, "fwrite");
    w->ntok += (int64_t)n;
}

static inline void shard_writer_append(ShardWriter* w, const uint16_t* tokens, size_t n) {
    shard_writer_write_(w, tokens, n, 2);
}

static inline void shard_writer_append_u32(ShardWriter* w, const uint32_t* tokens, size_t n) {
    shard_writer_write_(w, tokens, n, 4);
}

// Writes the real header, flushes to disk and closes the temporary file, leaving it under tmp_path:
// the caller renames it into place (shard_writer_close does both).
static inline void shard_writer_finish(ShardWriter* w) {
    int32_t header[SHARD_HEADER_INTS] = {0};
    header[0] = w->magic;
    header[1] = w->version;
    header[2] = (int32_t)w->ntok;
    if (fseek(w->f, 0, SEEK_SET) != 0) shard_writer_fail_(w, "fseek");  // flushes the buffered ids
    if (fwrite(header, sizeof(int32_t), SHARD_HEADER_INTS, w->f) != SHARD_HEADER_INTS) shard_writer_fail_(w, "fwrite");
    if (fflush(w->f) != 0 || fsync(fileno(w->f)) != 0) shard_writer_fail_(w, "flush and fsync");
    if (fclose(w->f) != 0) { w->f = NULL; shard_writer_fail_(w, "fclose"); }
    w->f = NULL;
}

// Writes the real header, flushes to disk and renames the temporary file into place.
static inline void shard_writer_close(ShardWriter* w) {
    shard_writer_finish(w);
    if (rename(w->tmp_path, w->path) != 0) shard_writer_fail_(w, "rename");
}

// --- reading -----------------------------------------------------------------------------------

// The two layouts a reader accepts, by the width of their ids in bytes.
static inline const char* shard_layout_name(int token_bytes) {
    return token_bytes == 4 ? "uint32 ids (Llama-3 layout, magic 20240801, version 7)"
                            : "uint16 ids (GPT-2 layout, magic 20240520, version 1)";
}

#ifndef SEEK_HOLE
#define SEEK_HOLE 4  // Linux's value; <unistd.h> names it only under _GNU_SOURCE
#endif

// The header check on an open shard (path names it in messages): magic, version, a size of exactly
// 1024 + width * count bytes, and data behind every byte of it: a sparse file (a hole, never written,
// where the count says ids are) is refused, so that a crafted count backed by no data does not size
// the loader's buffer. Returns the count and sets *token_bytes, or -1 with the message in err.
static inline int64_t shard_check_open_(int fd, const char* path, int* token_bytes, char* err, size_t errlen) {
    const char* fix = "regenerate it with `make data` (or the data/ tool that wrote it)";
    int32_t header[SHARD_HEADER_INTS];
    ssize_t got = pread(fd, header, sizeof(header), 0);
    struct stat st;
    int stat_ok = fstat(fd, &st) == 0;
    if (got < 0) { snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno)); return -1; }
    if (got != (ssize_t)sizeof(header)) {
        snprintf(err, errlen, "%s: only %zd bytes, shorter than the %d-byte shard header; %s", path, got,
                 SHARD_HEADER_BYTES, fix);
        return -1;
    }
    int width;
    if (header[0] == SHARD_MAGIC) width = 2;
    else if (header[0] == SHARD_U32_MAGIC) width = 4;
    else {
        snprintf(err, errlen, "%s: magic %d, expected %d (uint16 ids) or %d (uint32 ids): not a token shard; %s",
                 path, header[0], SHARD_MAGIC, SHARD_U32_MAGIC, fix);
        return -1;
    }
    int want_version = width == 2 ? SHARD_VERSION : SHARD_U32_VERSION;
    if (header[1] != want_version) {
        snprintf(err, errlen, "%s: magic %d with version %d: this program reads magic %d with version %d (uint16 ids) "
                 "and magic %d with version %d (uint32 ids); %s", path, header[0], header[1], SHARD_MAGIC,
                 SHARD_VERSION, SHARD_U32_MAGIC, SHARD_U32_VERSION, fix);
        return -1;
    }
    int64_t ntok = header[2];
    int64_t want = SHARD_HEADER_BYTES + width * ntok;
    if (ntok < 0 || !stat_ok || st.st_size != want) {
        snprintf(err, errlen, "%s: header says %lld tokens (%lld bytes of %d-byte ids) but the file has %lld bytes: "
                 "%s; %s", path, (long long)ntok, (long long)want, width, stat_ok ? (long long)st.st_size : -1LL,
                 (stat_ok && st.st_size < want) ? "truncated" : "size mismatch", fix);
        return -1;
    }
    off_t hole = lseek(fd, 0, SEEK_HOLE);  // the file's size where holes are not reported
    if (hole >= 0 && hole < st.st_size) {
        snprintf(err, errlen, "%s: header says %lld tokens (%lld bytes) but the file is sparse: byte %lld lies in a "
                 "hole that was never written, so the count is not backed by data (a damaged or crafted file; the "
                 "shard writers never leave holes); %s", path, (long long)ntok, (long long)want, (long long)hole, fix);
        return -1;
    }
    *token_bytes = width;
    return ntok;
}

// Checks the header of `path` against the file size (see shard_check_open_). On success returns the
// token count and sets *token_bytes to the width of its ids: 2 (magic SHARD_MAGIC, version
// SHARD_VERSION) or 4 (magic SHARD_U32_MAGIC, version SHARD_U32_VERSION); the size must be exactly
// 1024 + width * count bytes. On failure returns -1 with a message naming the file and the fix in
// `err`. Never exits: the loader decides.
static inline int64_t shard_check_header(const char* path, int* token_bytes, char* err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {  // before open: a FIFO would block it
        snprintf(err, errlen, "%s: %s, not a shard file; a shard pattern names .bin files (for a directory of "
                 "shards, add /*.bin to it)", path, S_ISDIR(st.st_mode) ? "a directory" : "not a regular file");
        return -1;
    }
    FILE* f = fopen(path, "rb");
    if (!f) { snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno)); return -1; }
    int64_t n = shard_check_open_(fileno(f), path, token_bytes, err, errlen);
    fclose(f);
    return n;
}

// Reads all tokens of a checked shard (ntok ids of token_bytes = 2 or 4 bytes, as shard_check_header
// said) into `out` (ntok uint32; uint16 ids are widened) and verifies every id < vocab_size. The
// header is checked again on the file as opened now, and must still give ntok ids of token_bytes:
// a shard replaced since it was checked (another layout, another count, cut short) is refused, never
// read with the old layout. Returns 0, or -1 with a message in `err` naming the file (and for a bad id,
// the token and its byte offset).
static inline int shard_read_tokens(const char* path, int64_t ntok, int token_bytes, int64_t vocab_size,
                                    uint32_t* out, char* err, size_t errlen) {
    if (token_bytes != 2 && token_bytes != 4) {
        snprintf(err, errlen, "%s: %d-byte token ids; shards hold 2- or 4-byte ids", path, token_bytes);
        return -1;
    }
    const char* changed = "the file changed after it was checked: a shard must not be replaced while a run "
                          "reads it; put the original back and resume, or start a new run on the new shards";
    FILE* f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s (%s)", path, strerror(errno), changed);
        return -1;
    }
    int now_bytes = 0;
    int64_t now = shard_check_open_(fileno(f), path, &now_bytes, err, errlen);
    if (now < 0) {
        size_t k = strlen(err);
        snprintf(err + k, errlen - k, " (%s)", changed);
        fclose(f);
        return -1;
    }
    if (now != ntok || now_bytes != token_bytes) {
        snprintf(err, errlen, "%s: holds %lld tokens of %s now, %lld tokens of %s when first checked; %s", path,
                 (long long)now, shard_layout_name(now_bytes), (long long)ntok, shard_layout_name(token_bytes), changed);
        fclose(f);
        return -1;
    }
    int ok = fseek(f, SHARD_HEADER_BYTES, SEEK_SET) == 0;
    if (ok && token_bytes == 4) {
        ok = fread(out, sizeof(uint32_t), (size_t)ntok, f) == (size_t)ntok;
    } else if (ok) {  // in chunks through a small buffer, widened into out
        uint16_t chunk[4096];
        for (int64_t i = 0; ok && i < ntok; i += 4096) {
            size_t n = (size_t)(ntok - i < 4096 ? ntok - i : 4096);
            ok = fread(chunk, sizeof(uint16_t), n, f) == n;
            for (size_t j = 0; ok && j < n; j++) out[i + (int64_t)j] = chunk[j];
        }
    }
    fclose(f);
    if (!ok) {
        snprintf(err, errlen, "%s: could not read %lld tokens (%s)", path, (long long)ntok, changed);
        return -1;
    }
    for (int64_t i = 0; i < ntok; i++) {
        if ((int64_t)out[i] >= vocab_size) {
            snprintf(err, errlen, "%s: token %lld (byte offset %lld) has id %lu, not below the vocabulary size %lld: %s",
                     path, (long long)i, (long long)SHARD_HEADER_BYTES + token_bytes * i, (unsigned long)out[i],
                     (long long)vocab_size,
                     token_bytes == 2 ? "not a GPT-2 shard, or corrupt"
                                      : "the shard's encoding does not match the model's vocabulary (for GPT-2, make "
                                        "the shards with `build/make_shards --encoding gpt2`), or the file is corrupt");
            return -1;
        }
    }
    return 0;
}
