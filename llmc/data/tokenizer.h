// tokenizer.h: a byte-level BPE vocabulary and decoding; GPT-2's, loaded from vocab.bpe. Host-only,
// no PCRE2: the trainer includes it to print samples; encoding lives in tokenizer_encode.h, and
// tiktoken's cl100k_base and o200k_base load through tokenizer_tiktoken.h into the same struct.
//
// vocab.bpe alone defines the vocabulary:
//   - ids 0-255 are the single bytes in GPT-2's bytes_to_unicode order: the 188 "printable" bytes
//     0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF first (in the file they are written as their own code point),
//     then the 68 others in byte order (written as U+0100, U+0101, ...). So '!' is 0, ' ' is 220 ('Ġ');
//   - after the `#version` line, merge line r (0-based) "A B" makes token A+B with id 256 + r;
//   - id 50256 is <|endoftext|>, which decodes to its 13 ASCII bytes.
// encoder.json (id of every token, written in the same byte-to-unicode alphabet) is redundant;
// tokenizer_check_encoder_json cross-checks it against the table built from vocab.bpe.
//
// Errors: tokenizer_load and tokenizer_check_encoder_json return 0, or -1 with a message naming the
// file in `err` (so bad files are testable); tokenizer_init wraps tokenizer_load and exits.
//     Tokenizer t;
//     tokenizer_init(&t, "data/gpt2/vocab.bpe");
//     size_t n; const unsigned char* s = tokenizer_decode(&t, 15496, &n);   // "Hello"
//     tokenizer_free(&t);
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "../core/check.h"

#define TOKENIZER_GPT2_MERGES 50000
#define TOKENIZER_GPT2_EOT 50256
#define TOKENIZER_LOOKUP_BITS 17       // GPT-2: 2^17 slots for 50,256 tokens: load 0.38, short probes
#define TOKENIZER_ERR_LEN 4608         // a 4096-byte path and the words around it
#define TOKENIZER_MAX_SPECIAL 8
static const char tokenizer_eot_text[] = "<|endoftext|>";

// Ids [0, n_ranks) are the BPE tokens, ranked by id (lower id = merged first); the special tokens
// come after them. Ids in [n_ranks, vocab_size) that are not special are unused (cl100k_base has 16,
// o200k_base 19) and decode to nothing.
typedef struct Tokenizer {
    char name[16];           // the encoding: "gpt2", "cl100k_base" or "o200k_base"
    int vocab_size;          // one past the largest id: 50257, 100277, 200019
    int n_ranks;             // BPE tokens: 50256, 100256, 199998
    int n_merges;            // n_ranks - 256 (GPT-2: the 50000 lines of vocab.bpe)
    int eot_id;              // <|endoftext|>: 50256, 100257, 199999
    int n_special;
    int32_t special_ids[TOKENIZER_MAX_SPECIAL];  // (n_special,) ascending; their bytes are in the table
    char* pattern;           // the pre-tokenizer regex as the encoder file gives it (NUL-terminated);
                             // NULL for GPT-2, whose pattern is built into tokenizer_encode.h
    unsigned char* bytes;    // (offsets[vocab_size],) every token's bytes, id after id
    uint32_t* offsets;       // (vocab_size + 1,) token id is bytes[offsets[id] .. offsets[id + 1])
    int32_t* merges;         // (n_merges, 2) GPT-2 only (else NULL): left and right id of merge r,
                             // which makes id 256 + r
    int lookup_bits;         // the lookup has 2^lookup_bits slots (load <= 0.4)
    int32_t* lookup;         // (1 << lookup_bits,) open addressing: token bytes -> id, -1 empty;
                             // holds the ids below n_ranks (special tokens are never looked up)
} Tokenizer;

// --- byte strings ------------------------------------------------------------------------------

// A fast hash of a short byte string (most tokens and pieces are under 8 bytes): 8-byte words, each
// folded in with a multiply, then the murmur3 finalizer so that the low bits (the slot) are mixed.
static inline uint64_t tokenizer_hash(const unsigned char* s, size_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (uint64_t)n;
    for (; n >= 8; s += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
    }
    uint64_t w = 0;
    for (size_t i = 0; i < n; i++) w |= (uint64_t)s[i] << (8 * i);
    h ^= w;
    h = (h ^ (h >> 33)) * 0xff51afd7ed558ccdULL;
    h = (h ^ (h >> 33)) * 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 33);
}

// The id of the token whose bytes are s[0..n), or -1 (also for <|endoftext|>).
static inline int tokenizer_lookup(const Tokenizer* t, const unsigned char* s, size_t n) {
    uint32_t mask = (1u << t->lookup_bits) - 1;
    for (uint32_t i = (uint32_t)tokenizer_hash(s, n) & mask;; i = (i + 1) & mask) {
        int id = t->lookup[i];
        if (id < 0) return -1;
        uint32_t off = t->offsets[id];
        if (t->offsets[id + 1] - off == n && memcmp(t->bytes + off, s, n) == 0) return id;
    }
}

static inline void tokenizer_lookup_insert(Tokenizer* t, int id) {
    uint32_t mask = (1u << t->lookup_bits) - 1;
    const unsigned char* s = t->bytes + t->offsets[id];
    uint32_t i = (uint32_t)tokenizer_hash(s, t->offsets[id + 1] - t->offsets[id]) & mask;
    while (t->lookup[i] >= 0) i = (i + 1) & mask;
    t->lookup[i] = id;
}

// Reads a whole file ("-" is stdin) into a malloc'd buffer (NUL-terminated, not counted in *len).
// Returns NULL with a message naming the file in `err` when it cannot be opened or read (a directory
// is named as one).
static inline unsigned char* tokenizer_read_file(const char* path, size_t* len, char* err, size_t errlen) {
    int is_stdin = strcmp(path, "-") == 0;
    FILE* f = is_stdin ? stdin : fopen(path, "rb");
    if (!f) { snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno)); return NULL; }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s: a directory, not a text file; give the files in it (for example DIR/*.txt)", path);
        if (!is_stdin) fclose(f);
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    unsigned char* buf = (unsigned char*)malloc_check(cap);
    for (;;) {
        if (n + 1 == cap) buf = (unsigned char*)realloc_check(buf, cap *= 2);
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) break;
    }
    int failed = ferror(f), saved = errno;
    if (!is_stdin) fclose(f);
    if (failed) {
        snprintf(err, errlen, "%s: read error: %s", path, strerror(saved));
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

// --- the byte alphabet of vocab.bpe and encoder.json ---------------------------------------------

// The 188 bytes that bytes_to_unicode writes as their own code point (and numbers first).
static inline int tokenizer_byte_printable(uint32_t b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

// order[i] = the byte whose id is i (GPT-2's bytes_to_unicode order, see the top of the file).
static inline void tokenizer_byte_order(unsigned char order[256]) {
    int k = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int b = 0; b < 256; b++)
            if (tokenizer_byte_printable((uint32_t)b) == (pass == 0)) order[k++] = (unsigned char)b;
}

// The byte written as code point cp in the files, or -1: printable bytes are their own code point,
// the 68 others (ids 188..255) are U+0100 + (id - 188).
static inline int tokenizer_codepoint_byte(const unsigned char order[256], uint32_t cp) {
    if (cp < 256) return tokenizer_byte_printable(cp) ? (int)cp : -1;
    return cp < 256 + 68 ? order[188 + cp - 256] : -1;
}

// Decodes one UTF-8 character of s[*i..n) and advances *i; returns -1 on a malformed sequence
// (the files are trusted to be mostly right, so no overlong/surrogate subtleties are needed).
static inline int32_t tokenizer_utf8_next(const unsigned char* s, size_t n, size_t* i) {
    unsigned c = s[*i];
    int extra = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    if (extra < 0 || *i + (size_t)extra >= n) return -1;
    uint32_t cp = extra == 0 ? c : c & (0x3Fu >> extra);
    for (int k = 1; k <= extra; k++) {
        if ((s[*i + k] & 0xC0) != 0x80) return -1;
        cp = (cp << 6) | (s[*i + k] & 0x3F);
    }
    *i += 1 + (size_t)extra;
    return (int32_t)cp;
}

// Converts a token written in the byte alphabet (s[0..n), UTF-8) into raw bytes; returns the byte
// count, or -1 when a character is not in the alphabet.
static inline int tokenizer_unicode_to_bytes(const unsigned char order[256], const unsigned char* s, size_t n,
                                             unsigned char* out) {
    int len = 0;
    for (size_t i = 0; i < n;) {
        int32_t cp = tokenizer_utf8_next(s, n, &i);
        int b = cp < 0 ? -1 : tokenizer_codepoint_byte(order, (uint32_t)cp);
        if (b < 0) return -1;
        out[len++] = (unsigned char)b;
    }
    return len;
}

// --- loading vocab.bpe -------------------------------------------------------------------------

static inline void tokenizer_free(Tokenizer* t) {
    free(t->bytes);
    free(t->offsets);
    free(t->merges);
    free(t->lookup);
    free(t->pattern);
    memset(t, 0, sizeof(*t));
}

// Appends token `id` = bytes s[0..n) to the table (ids are appended in order).
static inline void tokenizer_append(Tokenizer* t, int id, const unsigned char* s, size_t n, size_t* cap) {
    uint32_t off = t->offsets[id];
    while (off + n > *cap) t->bytes = (unsigned char*)realloc_check(t->bytes, *cap *= 2);
    memcpy(t->bytes + off, s, n);
    t->offsets[id + 1] = off + (uint32_t)n;
}

// Parses merge line `r` ("A B", in the byte alphabet) into token 256 + r. Returns 0, or -1 with a
// reason in `why`: a merge must join two tokens defined earlier and make a token not seen before.
static inline int tokenizer_parse_merge(Tokenizer* t, const unsigned char order[256], int r,
                                        const unsigned char* line, size_t n, size_t* cap, const char** why) {
    const unsigned char* sp = (const unsigned char*)memchr(line, ' ', n);
    if (!sp || sp == line || sp + 1 == line + n || memchr(sp + 1, ' ', line + n - sp - 1)) {
        *why = "not two halves separated by one space";
        return -1;
    }
    unsigned char buf[2][1024];
    int len[2], id[2];
    const unsigned char* half[2] = {line, sp + 1};
    size_t half_n[2] = {(size_t)(sp - line), (size_t)(line + n - sp - 1)};
    for (int h = 0; h < 2; h++) {
        len[h] = half_n[h] <= sizeof(buf[h]) ? tokenizer_unicode_to_bytes(order, half[h], half_n[h], buf[h]) : -1;
        if (len[h] < 0) { *why = "a character outside GPT-2's byte alphabet"; return -1; }
        id[h] = tokenizer_lookup(t, buf[h], (size_t)len[h]);
        if (id[h] < 0) { *why = "a half that is not a token defined on an earlier line"; return -1; }
    }
    int new_id = 256 + r;
    unsigned char joined[2048];
    memcpy(joined, buf[0], (size_t)len[0]);
    memcpy(joined + len[0], buf[1], (size_t)len[1]);
    if (tokenizer_lookup(t, joined, (size_t)(len[0] + len[1])) >= 0) { *why = "a duplicate token"; return -1; }
    tokenizer_append(t, new_id, joined, (size_t)(len[0] + len[1]), cap);
    tokenizer_lookup_insert(t, new_id);
    t->merges[2 * r] = id[0];
    t->merges[2 * r + 1] = id[1];
    return 0;
}

// Loads vocab.bpe. Returns 0, or -1 with a message naming the file and the fix in `err`.
static inline int tokenizer_load(Tokenizer* t, const char* path, char* err, size_t errlen) {
    const char* fix = "it should be GPT-2's vocab.bpe (50,000 merges); run `make data` to fetch it";
    memset(t, 0, sizeof(*t));
    size_t len;
    unsigned char* text = tokenizer_read_file(path, &len, err, errlen);
    if (!text) {
        size_t k = strlen(err);
        snprintf(err + k, errlen - k, "; %s", fix);
        return -1;
    }
    snprintf(t->name, sizeof(t->name), "gpt2");
    t->n_merges = TOKENIZER_GPT2_MERGES;
    t->n_ranks = 256 + t->n_merges;
    t->vocab_size = t->n_ranks + 1;
    t->eot_id = TOKENIZER_GPT2_EOT;
    t->n_special = 1;
    t->special_ids[0] = TOKENIZER_GPT2_EOT;
    size_t cap = 1 << 19;
    t->bytes = (unsigned char*)malloc_check(cap);
    t->offsets = (uint32_t*)calloc_check((size_t)t->vocab_size + 1, sizeof(uint32_t));
    t->merges = (int32_t*)malloc_check(2 * sizeof(int32_t) * (size_t)t->n_merges);
    t->lookup_bits = TOKENIZER_LOOKUP_BITS;
    t->lookup = (int32_t*)malloc_check(sizeof(int32_t) << t->lookup_bits);
    memset(t->lookup, 0xff, sizeof(int32_t) << t->lookup_bits);  // all -1
    unsigned char order[256];
    tokenizer_byte_order(order);
    for (int id = 0; id < 256; id++) {
        tokenizer_append(t, id, &order[id], 1, &cap);
        tokenizer_lookup_insert(t, id);
    }
    const unsigned char* p = text;
    const unsigned char* end = text + len;
    const unsigned char* eol = (const unsigned char*)memchr(p, '\n', len);
    int r = 0;  // declared before the first goto: C++ (nvcc) rejects jumping over an initialisation
    if (len < 8 || memcmp(text, "#version", 8) != 0 || !eol) {
        snprintf(err, errlen, "%s: the first line is not `#version: ...`: not a vocab.bpe file; %s", path, fix);
        goto fail;
    }
    for (p = eol + 1; p < end; p = eol + 1, r++) {
        eol = (const unsigned char*)memchr(p, '\n', (size_t)(end - p));
        if (!eol) eol = end;  // a last line without a newline
        const char* why = "more than 50,000 merges";
        if (r >= t->n_merges || tokenizer_parse_merge(t, order, r, p, (size_t)(eol - p), &cap, &why) != 0) {
            snprintf(err, errlen, "%s: line %d: %s; %s", path, r + 2, why, fix);
            goto fail;
        }
    }
    if (r != t->n_merges) {
        snprintf(err, errlen, "%s: %d merges, expected %d (truncated?); %s", path, r, t->n_merges, fix);
        goto fail;
    }
    tokenizer_append(t, t->eot_id, (const unsigned char*)tokenizer_eot_text, strlen(tokenizer_eot_text), &cap);
    free(text);
    return 0;
fail:
    free(text);
    tokenizer_free(t);
    return -1;
}

static inline void tokenizer_init(Tokenizer* t, const char* vocab_bpe_path) {
    char err[TOKENIZER_ERR_LEN];
    if (tokenizer_load(t, vocab_bpe_path, err, sizeof(err)) != 0)
        check_failf("GPT-2's tokenizer files (data/gpt2/vocab.bpe, encoder.json) are made by `make data` (doc/data.md)",
                    "%s", err);
}

// --- decoding ----------------------------------------------------------------------------------

// The bytes of token `id` (not NUL-terminated; a token may be part of a UTF-8 character) and their
// count in *len; NULL (and *len = 0) for an id outside [0, vocab_size) or an unused one (no token
// is empty, so an empty entry marks an unused id).
static inline const unsigned char* tokenizer_decode(const Tokenizer* t, int id, size_t* len) {
    *len = 0;
    if (id < 0 || id >= t->vocab_size) return NULL;
    *len = t->offsets[id + 1] - t->offsets[id];
    return *len ? t->bytes + t->offsets[id] : NULL;
}

// Decodes ids[0..n) into out (at most `cap` bytes written, like snprintf). Returns the full decoded
// length, or -1 when an id is outside the vocabulary.
static inline int64_t tokenizer_decode_ids(const Tokenizer* t, const int32_t* ids, size_t n, unsigned char* out,
                                           size_t cap) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const unsigned char* s = tokenizer_decode(t, ids[i], &len);
        if (!s) return -1;
        if (total < cap) memcpy(out + total, s, len < cap - total ? len : cap - total);
        total += len;
    }
    return (int64_t)total;
}

// --- the encoder.json cross-check --------------------------------------------------------------

// Parses the JSON string at s[*i] (on the opening quote) into raw bytes via the byte alphabet.
// Handles \" \\ \/ \b \f \n \r \t and \uXXXX escapes (surrogate pairs are not needed: the alphabet
// stays below U+0144). Returns the byte count, or -1.
static inline int tokenizer_json_key(const unsigned char order[256], const unsigned char* s, size_t n, size_t* i,
                                     unsigned char* out, int cap) {
    int len = 0;
    for ((*i)++; *i < n && s[*i] != '"';) {
        int32_t cp;
        if (s[*i] == '\\') {
            if (*i + 1 >= n) return -1;
            unsigned char c = s[*i + 1];
            const char* simple = strchr("\"\\/bfnrt", c);
            if (c && simple) {
                cp = (int32_t)"\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
                *i += 2;
            } else if (c == 'u' && *i + 6 <= n) {
                cp = 0;
                for (int k = 2; k < 6; k++) {
                    unsigned char h = s[*i + k];
                    int v = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                          : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                    if (v < 0) return -1;
                    cp = cp * 16 + v;
                }
                *i += 6;
            } else {
                return -1;
            }
        } else {
            cp = tokenizer_utf8_next(s, n, i);
        }
        int b = cp < 0 ? -1 : tokenizer_codepoint_byte(order, (uint32_t)cp);
        if (b < 0 || len == cap) return -1;
        out[len++] = (unsigned char)b;
    }
    if (*i >= n) return -1;
    (*i)++;  // closing quote
    return len;
}

// Checks that encoder.json maps exactly the tokens of `t` to their ids: vocab_size entries, each id
// once, each key's bytes equal to the table's. Returns 0, or -1 with the first difference in `err`.
static inline int tokenizer_check_encoder_json(const Tokenizer* t, const char* path, char* err, size_t errlen) {
    const char* fix = "encoder.json and vocab.bpe must both be GPT-2's; run `make data` to fetch them";
    size_t n;
    unsigned char* s = tokenizer_read_file(path, &n, err, errlen);
    if (!s) return -1;
    unsigned char order[256];
    tokenizer_byte_order(order);
    unsigned char* seen = (unsigned char*)calloc_check((size_t)t->vocab_size, 1);
    int entries = 0, rc = -1;
    size_t i = 0;
    while (i < n && s[i] != '{') i++;
    for (i++; i < n;) {
        while (i < n && s[i] && strchr(" \t\r\n,", s[i])) i++;
        if (i == n) break;  // truncated
        if (i < n && s[i] == '}') { rc = 0; break; }
        size_t at = i;
        unsigned char key[1024];
        int klen = i < n && s[i] == '"' ? tokenizer_json_key(order, s, n, &i, key, (int)sizeof(key)) : -1;
        while (i < n && (s[i] == ' ' || s[i] == ':')) i++;
        char* endp;
        long id = klen < 0 ? -1 : strtol((const char*)s + i, &endp, 10);
        if (klen < 0 || endp == (char*)s + i) {
            snprintf(err, errlen, "%s: byte %zu: not a `\"token\": id` entry; %s", path, at, fix);
            goto done;
        }
        i = (size_t)(endp - (char*)s);
        size_t tlen;
        const unsigned char* tb = id >= 0 && id < t->vocab_size ? tokenizer_decode(t, (int)id, &tlen) : NULL;
        if (!tb || seen[id] || tlen != (size_t)klen || memcmp(tb, key, tlen) != 0) {
            const char* what = !tb ? "is outside the vocabulary of" : seen[id] ? "appears twice, unlike in"
                                                                           : "has other bytes than in";
            snprintf(err, errlen, "%s: byte %zu: id %ld %s vocab.bpe; %s", path, at, id, what, fix);
            goto done;
        }
        seen[id] = 1;
        entries++;
    }
    if (rc != 0) snprintf(err, errlen, "%s: no closing `}`: truncated?; %s", path, fix);
    else if (entries != t->vocab_size) {
        snprintf(err, errlen, "%s: %d entries, vocab.bpe gives %d tokens; %s", path, entries, t->vocab_size, fix);
        rc = -1;
    }
done:
    free(seen);
    free(s);
    return rc;
}
