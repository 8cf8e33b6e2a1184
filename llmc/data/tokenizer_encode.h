// tokenizer_encode.h: encoding, text bytes -> token ids, for GPT-2, cl100k_base and o200k_base, with
// the semantics of tiktoken's `encode_ordinary` (the reference the tests compare against, id for id).
// Needs PCRE2 (-lpcre2-8).
//
// 1. Pre-tokenize with the encoding's regex through PCRE2 with UTF + UCP and JIT.
//    `\s` is written as an explicit class because PCRE2's UCP `\s` also matches U+180E, which the
//    reference does not treat as whitespace: GPT-2's pattern below is written that way, and the
//    patterns of the tiktoken files go through encoder_rewrite_pattern (`\s` -> the class, `\S` -> its
//    complement). Otherwise PCRE2 compiles them as they are: the case-insensitive contractions
//    `(?i:'s|...)` (PCRE2, like the reference, folds 's' with U+017F), `\p{N}{1,3}`, and o200k_base's
//    \p{Lu}/\p{Ll}/\p{Lt}/\p{Lm}/\p{Lo}/\p{M} classes. (The files of tiktoken@1.0.22 have no possessive
//    quantifiers; PCRE2 would accept those too.) Every position is matched by some alternative and
//    none matches empty, so the matches tile the text: piece k starts where piece k-1 ends.
//    PCRE2 10.42 knows Unicode 14; the reference's tables are newer, so characters assigned since
//    (Unicode 15's CJK extension H, Kawi, ...) may split differently. Text from before 2021 is not affected.
// 2. Each piece becomes ids as tiktoken does it: if the whole piece is a token, that token; else BPE
//    on its bytes: repeatedly join the adjacent pair whose joined bytes form the token of lowest
//    rank (leftmost on ties). Ranks grow with ids in every encoding, so "lowest rank" = "lowest id". A pair
//    counts when its joined bytes are a token, whatever merge line made that token (which can differ
//    from the pair itself; encoder.py's rule looks up the pair, tiktoken's the bytes, and we follow
//    tiktoken). The pair table therefore holds every split of every token into two tokens.
//
// Speed (napkin math): the regex alone costs ~8 ns/byte (~130 MB/s, ~40 ns per piece); a naive BPE
// that rescans all pairs after each merge is O(n^2) per piece and brings the total to ~20 MB/s.
// Here most pieces never reach BPE. One hash table maps piece bytes to ids: it holds every token
// (most pieces are whole tokens: words with their leading space) and, once seen, the BPE result of
// every other piece of up to ENCODER_CACHE_MAX_PIECE bytes. A slot keeps the piece's first 8 bytes
// inline, so a probe for a piece of <= 8 bytes (most of them) reads one cache line and no string,
// and the slot of piece k+1 is prefetched while piece k is handled: the lookups are bound by memory
// latency, not by arithmetic. Single bytes skip the table. The BPE itself keeps the parts in a
// linked list with a min-heap of (rank, position): O(n log n), so a 1 MB run of letters costs no
// more per byte than a word. Measured on the 18 MB starter corpus, one core (`tokenize bench`):
// regex alone ~130 MB/s, encoding ~80 MB/s with an empty cache and ~100 MB/s with a warm one.
//
// Special tokens are never parsed from text: "<|endoftext|>" in the input is ordinary text
// (tiktoken's encode_ordinary); tools insert the tokenizer's eot_id themselves.
//
// Invalid UTF-8 is rejected, not repaired: encoder_encode appends nothing, returns -1, and gives the
// byte offset of the first invalid byte (as found by PCRE2's UTF check, which rejects overlong forms,
// surrogates, code points above U+10FFFF and truncated sequences), with a message in e->err.
// Rationale: shards are built from text we prepared ourselves, so bad bytes mean a broken extractor
// or a wrongly decoded file; silently mapping them to U+FFFD would hide that, and byte-level ids of
// broken characters would produce pieces tiktoken never makes.
//
//     Encoder e;  encoder_init(&e, &tokenizer);
//     TokenBuf ids = {0};  size_t bad;
//     if (encoder_encode(&e, text, len, &ids, &bad) != 0) fprintf(stderr, "%s: %s\n", path, e.err);
//     token_buf_free(&ids);  encoder_free(&e);
#pragma once
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdint.h>
#include "../core/check.h"
#include "tokenizer.h"

// \s of the reference: Unicode White_Space (tab..CR, space, NEL, NBSP, ...), without U+180E
#define ENCODER_WS "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
static const char encoder_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" ENCODER_WS "\\p{L}\\p{N}]+"
    "|[" ENCODER_WS "]+(?![^" ENCODER_WS "])|[" ENCODER_WS "]+";

#define ENCODER_ID_BITS 21               // a pair entry packs left, right and the joined id in 21 bits each
#define ENCODER_PAIR_EMPTY UINT64_MAX    // no entry: ids are < 2^21 - 1
#define ENCODER_TABLE_BITS 18            // at least 2^18 slots (4 MiB; cl100k 2^19, o200k 2^20), refilled
                                         // when half full
#define ENCODER_CACHE_MAX_PIECE 256      // longer pieces are rare and would crowd the arena
#define ENCODER_ARENA_WORDS (1u << 21)   // 8 MiB of cached ids and piece tails
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "encoder_head reads 8 bytes as a little-endian word"
#endif

// A growable array of token ids.
typedef struct {
    int32_t* ids;  // (cap,) the first len are used
    size_t len, cap;
} TokenBuf;

static inline void token_buf_push(TokenBuf* b, int32_t id) {
    if (b->len == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 4096;
        b->ids = (int32_t*)realloc_check(b->ids, b->cap * sizeof(int32_t));
    }
    b->ids[b->len++] = id;
}

// Makes room for at least `extra` more ids.
static inline void token_buf_reserve(TokenBuf* b, size_t extra) {
    if (b->cap - b->len >= extra) return;
    b->cap = b->len + extra > 2 * b->cap ? b->len + extra : 2 * b->cap;
    b->ids = (int32_t*)realloc_check(b->ids, b->cap * sizeof(int32_t));
}

static inline void token_buf_free(TokenBuf* b) {
    free(b->ids);
    memset(b, 0, sizeof(*b));
}

typedef struct {
    uint64_t head;   // the piece's first 8 bytes (little-endian), zero-padded
    uint16_t len;    // the piece's length in bytes; 0 = empty slot
    uint16_t n_ids;  // 1: the piece is token `val`; > 1: cached BPE ids at arena[val ..], then the bytes
                     // past the first 8, so that long pieces can be compared
    uint32_t val;
} EncoderSlot;       // 16 bytes, 4 per cache line

typedef struct Encoder {
    const Tokenizer* tok;
    pcre2_code* re;
    pcre2_match_data* md;
    int jit;                       // 1 when PCRE2 compiled the pattern to machine code
    int32_t byte_id[256];          // byte -> its id (the same order in every encoding)
    uint64_t* pairs;               // (pair_mask + 1,) key << 21 | id of the token left + right, where
                                   // key = left << 21 | right; ENCODER_PAIR_EMPTY = empty slot.
                                   // Key and id share a word: a lookup is one cache miss, not two
    uint32_t pair_mask, pair_shift;
    uint32_t table_bits;           // the table has 2^table_bits slots: >= 4x the tokens
    EncoderSlot* table;            // (1 << table_bits,) piece bytes -> ids, linear probing
    uint32_t* arena;               // (ENCODER_ARENA_WORDS,) what cached slots point to
    uint32_t table_n, arena_used;  // slots filled (tokens included), arena words used
    // BPE scratch for one piece of up to scratch_n bytes; node i starts as byte i of the piece
    int32_t *node_id, *node_next, *node_prev;  // (scratch_n,) token, neighbours (-1 = none)
    int32_t* node_rank;            // (scratch_n,) id of node + next, -1 if no token or node is gone
    uint64_t* heap;                // (3 * scratch_n,) min-heap of rank << 32 | node
    size_t scratch_n;
    int64_t n_pieces, n_bpe, n_cache_hits, n_flushes;  // statistics for `tokenize bench`
    char err[256];                 // why the last encoder_encode failed
} Encoder;

// --- the pair table: (left, right) -> token -------------------------------------------------------

static inline uint64_t encoder_pair_key(int32_t a, int32_t b) { return (uint64_t)a << ENCODER_ID_BITS | (uint64_t)b; }

// Fibonacci hashing: the top bits of key * 2^64/phi.
static inline uint32_t encoder_pair_slot(const Encoder* e, uint64_t key) {
    return (uint32_t)((key * 0x9e3779b97f4a7c15ULL) >> e->pair_shift);
}

static inline int32_t encoder_pair(const Encoder* e, int32_t a, int32_t b) {
    uint64_t key = encoder_pair_key(a, b);
    for (uint32_t i = encoder_pair_slot(e, key);; i = (i + 1) & e->pair_mask) {
        uint64_t entry = e->pairs[i];
        if (entry >> ENCODER_ID_BITS == key) return (int32_t)(entry & ((1u << ENCODER_ID_BITS) - 1));
        if (entry == ENCODER_PAIR_EMPTY) return -1;
    }
}

// Counts (insert = 0) or inserts (insert = 1) every split of every token into two tokens:
// token id = left + right gives the entry (left, right) -> id. Returns the count.
static inline int64_t encoder_pairs_pass(Encoder* e, int insert) {
    const Tokenizer* t = e->tok;
    int64_t count = 0;
    for (int32_t id = 256; id < t->n_ranks; id++) {
        const unsigned char* s = t->bytes + t->offsets[id];
        size_t n = t->offsets[id + 1] - t->offsets[id];
        for (size_t k = 1; k < n; k++) {
            int a = tokenizer_lookup(t, s, k), b = a < 0 ? -1 : tokenizer_lookup(t, s + k, n - k);
            if (b < 0) continue;
            count++;
            if (!insert) continue;
            uint64_t key = encoder_pair_key(a, b);
            uint32_t i = encoder_pair_slot(e, key);
            while (e->pairs[i] != ENCODER_PAIR_EMPTY) i = (i + 1) & e->pair_mask;
            e->pairs[i] = key << ENCODER_ID_BITS | (uint64_t)id;
        }
    }
    return count;
}

// --- BPE of one piece ----------------------------------------------------------------------------

static inline void encoder_heap_push(uint64_t* heap, size_t* n, uint64_t key) {
    size_t i = (*n)++;
    for (; i > 0 && heap[(i - 1) / 2] > key; i = (i - 1) / 2) heap[i] = heap[(i - 1) / 2];
    heap[i] = key;
}

static inline uint64_t encoder_heap_pop(uint64_t* heap, size_t* n) {
    uint64_t top = heap[0], last = heap[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && heap[c + 1] < heap[c]) c++;
        if (heap[c] >= last) break;
        heap[i] = heap[c];
        i = c;
    }
    heap[i] = last;
    return top;
}

static inline void encoder_scratch_reserve(Encoder* e, size_t n) {
    if (n <= e->scratch_n) return;
    size_t cap = n < 1024 ? 1024 : 2 * n;
    e->node_id = (int32_t*)realloc_check(e->node_id, cap * sizeof(int32_t));
    e->node_next = (int32_t*)realloc_check(e->node_next, cap * sizeof(int32_t));
    e->node_prev = (int32_t*)realloc_check(e->node_prev, cap * sizeof(int32_t));
    e->node_rank = (int32_t*)realloc_check(e->node_rank, cap * sizeof(int32_t));
    e->heap = (uint64_t*)realloc_check(e->heap, 3 * cap * sizeof(uint64_t));
    e->scratch_n = cap;
}

// Sets the rank of the pair (node i, its next) and queues it. Heap entries are never removed: an
// entry is stale when node_rank[i] no longer equals its rank. That test is exact because the pairs
// that start at node i only ever grow (i keeps its start, the end moves right), so each has a
// longer joined token than the last, hence a different id.
static inline void encoder_rank_pair(Encoder* e, int32_t i, size_t* heap_n) {
    int32_t j = e->node_next[i];
    int32_t r = j < 0 ? -1 : encoder_pair(e, e->node_id[i], e->node_id[j]);
    e->node_rank[i] = r;
    if (r >= 0) encoder_heap_push(e->heap, heap_n, (uint64_t)r << 32 | (uint32_t)i);
}

// BPE of piece s[0..n), n >= 1: writes its ids to out (at most n) and returns their count. The heap
// key rank << 32 | start position pops the lowest rank first and, among equal ranks (the same token
// at several places), the leftmost: tiktoken's order.
static inline size_t encoder_bpe(Encoder* e, const unsigned char* s, size_t n, int32_t* out) {
    encoder_scratch_reserve(e, n);
    for (size_t i = 0; i < n; i++) {
        e->node_id[i] = e->byte_id[s[i]];
        e->node_next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
        e->node_prev[i] = (int32_t)i - 1;
    }
    size_t heap_n = 0;
    for (size_t i = 0; i < n; i++) encoder_rank_pair(e, (int32_t)i, &heap_n);
    while (heap_n > 0) {
        uint64_t top = encoder_heap_pop(e->heap, &heap_n);
        int32_t r = (int32_t)(top >> 32), i = (int32_t)(uint32_t)top;
        if (e->node_rank[i] != r) continue;  // stale
        int32_t j = e->node_next[i], k = e->node_next[j];
        e->node_id[i] = r;  // the joined token
        e->node_next[i] = k;
        if (k >= 0) e->node_prev[k] = i;
        e->node_rank[j] = -1;  // j is gone
        if (e->node_prev[i] >= 0) encoder_rank_pair(e, e->node_prev[i], &heap_n);
        encoder_rank_pair(e, i, &heap_n);
    }
    size_t m = 0;
    for (int32_t i = 0; i >= 0; i = e->node_next[i]) out[m++] = e->node_id[i];
    return m;
}

// --- the piece table ------------------------------------------------------------------------------

// The first min(n, 8) bytes of s as a little-endian word. Reads 8 bytes at once when `end` (the end of
// the buffer) allows, which is almost always.
static inline uint64_t encoder_head(const unsigned char* s, size_t n, const unsigned char* end) {
    uint64_t w = 0;
    if (end - s >= 8) {
        memcpy(&w, s, 8);
        if (n < 8) w &= (1ULL << (8 * n)) - 1;
    } else {
        for (size_t i = 0; i < n && i < 8; i++) w |= (uint64_t)s[i] << (8 * i);
    }
    return w;
}

static inline uint64_t encoder_hash(uint64_t head, const unsigned char* s, size_t n) {
    uint64_t h = head + (uint64_t)n * 0x9e3779b97f4a7c15ULL;
    if (n > 8) h ^= tokenizer_hash(s + 8, n - 8);
    h = (h ^ (h >> 33)) * 0xff51afd7ed558ccdULL;
    return h ^ (h >> 33);
}

// The bytes of a slot's piece past the first 8.
static inline const unsigned char* encoder_slot_tail(const Encoder* e, const EncoderSlot* c) {
    if (c->n_ids == 1) return e->tok->bytes + e->tok->offsets[c->val] + 8;
    return (const unsigned char*)(e->arena + c->val + c->n_ids);
}

// The slot of piece s[0..n) (head and hash from above), or the empty slot where it would go.
static inline EncoderSlot* encoder_table_find(Encoder* e, const unsigned char* s, size_t n, uint64_t head, uint64_t h) {
    uint32_t mask = (1u << e->table_bits) - 1;
    for (uint32_t i = (uint32_t)h & mask;; i = (i + 1) & mask) {
        EncoderSlot* c = &e->table[i];
        if (c->len == 0) return c;
        if (c->head == head && c->len == n && (n <= 8 || memcmp(encoder_slot_tail(e, c), s + 8, n - 8) == 0)) return c;
    }
}

// Empties the table, then puts every token (except the special ones) back in.
static inline void encoder_table_reset(Encoder* e) {
    const Tokenizer* t = e->tok;
    memset(e->table, 0, sizeof(EncoderSlot) << e->table_bits);
    e->table_n = e->arena_used = 0;
    const unsigned char* end = t->bytes + t->offsets[t->vocab_size];
    for (int id = 0; id < t->n_ranks; id++) {
        const unsigned char* s = t->bytes + t->offsets[id];
        size_t n = t->offsets[id + 1] - t->offsets[id];
        uint64_t head = encoder_head(s, n, end);
        EncoderSlot* c = encoder_table_find(e, s, n, head, encoder_hash(head, s, n));
        *c = (EncoderSlot){.head = head, .len = (uint16_t)n, .n_ids = 1, .val = (uint32_t)id};
        e->table_n++;
    }
}

// Caches the BPE ids[0..m) (m >= 2) of piece s[0..n) (n <= ENCODER_CACHE_MAX_PIECE) in the empty slot
// c. When the table is half full or the arena is full, the cached pieces are dropped first: simpler
// than eviction, and refilling the common pieces takes a few KB of text.
static inline void encoder_cache_insert(Encoder* e, EncoderSlot* c, const unsigned char* s, size_t n, uint64_t head,
                                        uint64_t h, const int32_t* ids, size_t m) {
    size_t words = m + (n > 8 ? (n - 8 + 3) / 4 : 0);
    if (e->table_n + 1 > (1u << (e->table_bits - 1)) || e->arena_used + words > ENCODER_ARENA_WORDS) {
        encoder_table_reset(e);
        e->n_flushes++;
        c = encoder_table_find(e, s, n, head, h);
    }
    uint32_t* w = e->arena + e->arena_used;
    memcpy(w, ids, m * sizeof(int32_t));
    if (n > 8) memcpy(w + m, s + 8, n - 8);
    *c = (EncoderSlot){.head = head, .len = (uint16_t)n, .n_ids = (uint16_t)m, .val = e->arena_used};
    e->arena_used += (uint32_t)words;
    e->table_n++;
}

// --- init / free ---------------------------------------------------------------------------------

// Writes `pattern` to out (cap bytes) with `\s` replaced by ENCODER_WS (a class of its own outside
// brackets, its members inside) and `\S` outside brackets by the complement class. Returns 0, or -1
// when out is too small or `\S` appears inside brackets (no pattern here does that).
static inline int encoder_rewrite_pattern(const char* pattern, char* out, size_t cap) {
    size_t o = 0;
    int in_class = 0;
    for (const char* p = pattern; *p; p++) {
        char piece[160] = {p[0], 0};
        if (p[0] == '\\' && p[1]) {
            if (p[1] == 's') snprintf(piece, sizeof(piece), in_class ? "%s" : "[%s]", ENCODER_WS);
            else if (p[1] == 'S' && !in_class) snprintf(piece, sizeof(piece), "[^%s]", ENCODER_WS);
            else if (p[1] == 'S') return -1;
            else { piece[1] = p[1]; piece[2] = 0; }
            p++;
        } else if (p[0] == '[' && !in_class) {
            in_class = 1;
            size_t k = 1;  // a ']' right after '[' or '[^' is a member, not the end
            if (p[1] == '^') piece[k++] = *++p;
            if (p[1] == ']') piece[k++] = *++p;
            piece[k] = 0;
        } else if (p[0] == ']' && in_class) {
            in_class = 0;
        }
        size_t k = strlen(piece);
        if (o + k + 1 > cap) return -1;
        memcpy(out + o, piece, k);
        o += k;
    }
    out[o] = 0;
    return 0;
}

static inline void encoder_init(Encoder* e, const Tokenizer* t) {
    memset(e, 0, sizeof(*e));
    e->tok = t;
    if (t->vocab_size >= (1 << ENCODER_ID_BITS) - 1)
        check_fail("vocabulary too large for the 21-bit ids of the pair table", "the encodings here have at most 200019 tokens");
    char pattern[4096];
    if (t->pattern && encoder_rewrite_pattern(t->pattern, pattern, sizeof(pattern)) != 0) {
        fprintf(stderr, "error: the %s pattern cannot be rewritten for PCRE2: %s\n", t->name, t->pattern);
        check_fail("encoder_rewrite_pattern", "a pattern over 1 KB or with \\S inside brackets; is the encoder file right?");
    }
    int errcode;
    PCRE2_SIZE erroff;
    e->re = pcre2_compile((PCRE2_SPTR)(t->pattern ? pattern : encoder_pattern), PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP, &errcode, &erroff, NULL);
    if (!e->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(errcode, msg, sizeof(msg));
        fprintf(stderr, "error: PCRE2 cannot compile the %s pattern at offset %zu: %s\n", t->name, (size_t)erroff, msg);
        check_fail("pcre2_compile", "PCRE2 must be built with Unicode support (Debian's libpcre2-dev is)");
    }
    e->jit = pcre2_jit_compile(e->re, PCRE2_JIT_COMPLETE) == 0;  // without JIT: 3x slower, same ids
    e->md = pcre2_match_data_create_from_pattern(e->re, NULL);
    if (!e->md) check_fail("pcre2_match_data_create_from_pattern", "host memory is exhausted");
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        e->byte_id[b] = tokenizer_lookup(t, &c, 1);  // every byte is a token (the loaders check)
    }
    // Pairs: GPT-2 108,299 for 50,000 merges. Size the table at >= 2x (load <= 0.5), then fill it.
    int64_t n_pairs = encoder_pairs_pass(e, 0);
    int bits = 1;
    while ((1LL << bits) < 2 * n_pairs) bits++;
    e->pair_mask = (1u << bits) - 1;
    e->pair_shift = 64 - (uint32_t)bits;
    e->pairs = (uint64_t*)malloc_check(sizeof(uint64_t) << bits);
    memset(e->pairs, 0xff, sizeof(uint64_t) << bits);
    encoder_pairs_pass(e, 1);
    e->table_bits = ENCODER_TABLE_BITS;
    while ((1u << e->table_bits) < 4u * (uint32_t)t->n_ranks) e->table_bits++;  // tokens fill <= 1/4
    e->table = (EncoderSlot*)malloc_check(sizeof(EncoderSlot) << e->table_bits);
    e->arena = (uint32_t*)malloc_check(ENCODER_ARENA_WORDS * sizeof(uint32_t));
    encoder_table_reset(e);
}

static inline void encoder_free(Encoder* e) {
    pcre2_match_data_free(e->md);
    pcre2_code_free(e->re);
    free(e->pairs);
    free(e->table);
    free(e->arena);
    free(e->node_id);
    free(e->node_next);
    free(e->node_prev);
    free(e->node_rank);
    free(e->heap);
    memset(e, 0, sizeof(*e));
}

// --- pieces ----------------------------------------------------------------------------------------

// Where piece s[0..n) lives in the table: its first bytes and hash (for 2 <= n <= the cache limit).
typedef struct {
    uint64_t head, hash;
} EncoderKey;

static inline EncoderKey encoder_key(const unsigned char* s, size_t n, const unsigned char* end) {
    EncoderKey k = {0, 0};
    if (n >= 2 && n <= ENCODER_CACHE_MAX_PIECE) {
        k.head = encoder_head(s, n, end);
        k.hash = encoder_hash(k.head, s, n);
    }
    return k;
}

// Appends the ids of one piece s[0..n), n >= 1, whose key is k.
static inline void encoder_encode_piece(Encoder* e, const unsigned char* s, size_t n, EncoderKey k, TokenBuf* out) {
    e->n_pieces++;
    if (n == 1) { token_buf_push(out, e->byte_id[s[0]]); return; }
    EncoderSlot* c = NULL;
    uint64_t head = k.head, h = k.hash;
    if (n <= ENCODER_CACHE_MAX_PIECE) {
        c = encoder_table_find(e, s, n, head, h);
        if (c->n_ids == 1) { token_buf_push(out, (int32_t)c->val); return; }
        if (c->n_ids > 1) {
            e->n_cache_hits++;
            token_buf_reserve(out, c->n_ids);
            memcpy(out->ids + out->len, e->arena + c->val, c->n_ids * sizeof(int32_t));
            out->len += c->n_ids;
            return;
        }
    } else {
        int id = tokenizer_lookup(e->tok, s, n);  // a long piece may still be one (long) token
        if (id >= 0) { token_buf_push(out, id); return; }
    }
    e->n_bpe++;
    token_buf_reserve(out, n);  // BPE writes into the buffer: a piece of n bytes has at most n ids
    size_t m = encoder_bpe(e, s, n, out->ids + out->len);
    if (c) encoder_cache_insert(e, c, s, n, head, h, out->ids + out->len, m);
    out->len += m;
}

// The end of the piece that starts at `off` (< len). The first call on a text (check_utf = 1) also
// validates the whole text as UTF-8: returns -1 then, with the offset of the first invalid byte in
// *bad_offset and a message in e->err.
static inline int64_t encoder_next_piece(Encoder* e, const unsigned char* text, size_t len, size_t off,
                                         int check_utf, size_t* bad_offset) {
    int rc = e->jit && !check_utf
        ? pcre2_jit_match(e->re, text, len, off, PCRE2_NO_UTF_CHECK, e->md, NULL)
        : pcre2_match(e->re, text, len, off, check_utf ? 0 : PCRE2_NO_UTF_CHECK, e->md, NULL);
    if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21) {
        *bad_offset = (size_t)pcre2_get_startchar(e->md);
        PCRE2_UCHAR msg[128];
        pcre2_get_error_message(rc, msg, sizeof(msg));
        snprintf(e->err, sizeof(e->err), "invalid UTF-8 at byte offset %zu (%s)", *bad_offset, (const char*)msg);
        return -1;
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(e->md);
    if (rc < 1 || ov[0] != off || ov[1] <= off) {
        fprintf(stderr, "error: the %s pattern did not match at byte %zu (rc %d)\n", e->tok->name, off, rc);
        check_fail("encoder_next_piece", "an internal bug: every position should start a non-empty piece");
    }
    return (int64_t)ov[1];
}

// Appends the ids of text[0..len) to out. Returns 0, or -1 for invalid UTF-8 (see the top of the file):
// then nothing is appended, *bad_offset is the offset of the first invalid byte, e->err says why.
// Software pipelining: the regex finds piece k+1 and its table slot is prefetched before piece k is
// looked up, so the likely cache miss on the 4 MiB table overlaps with the next regex match.
static inline int encoder_encode(Encoder* e, const unsigned char* text, size_t len, TokenBuf* out,
                                 size_t* bad_offset) {
    if (len == 0) return 0;
    const unsigned char* end = text + len;
    int64_t stop = encoder_next_piece(e, text, len, 0, 1, bad_offset);
    if (stop < 0) return -1;
    size_t start = 0;
    EncoderKey k = encoder_key(text, (size_t)stop, end);
    uint32_t mask = (1u << e->table_bits) - 1;
    while (start < len) {
        int64_t next_stop = (size_t)stop < len ? encoder_next_piece(e, text, len, (size_t)stop, 0, bad_offset) : -1;
        EncoderKey next_k = {0, 0};
        if (next_stop > 0) {
            next_k = encoder_key(text + stop, (size_t)(next_stop - stop), end);
            __builtin_prefetch(&e->table[(uint32_t)next_k.hash & mask]);
        }
        encoder_encode_piece(e, text + start, (size_t)stop - start, k, out);
        start = (size_t)stop;
        stop = next_stop;
        k = next_k;
    }
    return 0;
}
