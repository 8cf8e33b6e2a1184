// tokenizer_tiktoken.h: tiktoken's encodings cl100k_base and o200k_base, loaded from the encoder files
// of the npm package tiktoken@1.0.22 (data/fetch_tiktoken.sh puts them in data/tiktoken/), and the
// choice of an encoding by name. Host-only, no PCRE2.
//
// An encoder file is one JSON object with three members:
//   "pat_str":        the pre-tokenizer regex (tokenizer_encode.h compiles it with PCRE2), which
//                     must be the encoding's (TIKTOKEN_*_PATTERN below; another is refused);
//   "special_tokens": {"<|endoftext|>": 100257, ...}: the special tokens and their ids;
//   "bpe_ranks":      lines "! OFFSET TOKEN TOKEN ...", each TOKEN the base64 of the token's raw bytes,
//                     its rank OFFSET + its position on the line. The file holds one line from 0.
// The rank is the id, and the BPE merges the adjacent pair whose joined bytes have the lowest rank
// (tiktoken's algorithm), so the ranks alone define the encoder; there is no merge list. Ids 0-255
// are the single bytes, in the same order as GPT-2's. The JSON is read with cJSON (Debian's
// libcjson-dev; link with -lcjson).
//
//   encoding      ranks    specials (id)                                                  vocab_size
//   gpt2          50,256   <|endoftext|> 50256                                               50,257
//   cl100k_base  100,256   <|endoftext|> 100257, <|fim_prefix|> 100258, <|fim_middle|>      100,277
//                          100259, <|fim_suffix|> 100260, <|endofprompt|> 100276
//   o200k_base   199,998   <|endoftext|> 199999, <|endofprompt|> 200018                    200,019
//
//     Tokenizer t;
//     tokenizer_init_encoding(&t, "o200k_base", NULL);   // NULL: data/tiktoken/o200k_base.json
//     ... tokenizer_decode(&t, id, &n) ...;  tokenizer_free(&t);
#pragma once
#include <cjson/cJSON.h>
#include "tokenizer.h"

typedef struct {
    const char* name;
    const char* path;     // where `make data` / `make data-tiktoken` put the file
    int n_ranks, vocab_size, eot_id;
    const char* pattern;  // the file's "pat_str", which must be exactly this; NULL: built in (gpt2)
} TokenizerEncoding;

// tiktoken's pre-tokenizer patterns (the "pat_str" of the files that data/fetch_tiktoken.sh pins by
// sha256): a file whose ranks are right but whose pattern differs would split text differently, so
// give other ids than tiktoken, or not compile.
#define TIKTOKEN_CL100K_PATTERN                                                                     \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*" \
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define TIKTOKEN_O200K_PATTERN                                                                      \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"         \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"                                                                 \
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"        \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"                                                                 \
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

static const TokenizerEncoding tokenizer_encodings[] = {
    {"gpt2", "data/gpt2/vocab.bpe", 50256, 50257, 50256, NULL},
    {"cl100k_base", "data/tiktoken/cl100k_base.json", 100256, 100277, 100257, TIKTOKEN_CL100K_PATTERN},
    {"o200k_base", "data/tiktoken/o200k_base.json", 199998, 200019, 199999, TIKTOKEN_O200K_PATTERN},
};
#define TOKENIZER_N_ENCODINGS ((int)(sizeof(tokenizer_encodings) / sizeof(tokenizer_encodings[0])))
#define TOKENIZER_ENCODING_NAMES "gpt2, cl100k_base, o200k_base"

// The encoding called `name`, or NULL.
static inline const TokenizerEncoding* tokenizer_find_encoding(const char* name) {
    for (int i = 0; i < TOKENIZER_N_ENCODINGS; i++)
        if (strcmp(tokenizer_encodings[i].name, name) == 0) return &tokenizer_encodings[i];
    return NULL;
}

// The encoding whose vocabulary has vocab_size ids, or NULL: how a model read from elsewhere (a Hugging
// Face import, a checkpoint's export) is matched to its encoding. The three sizes differ.
static inline const TokenizerEncoding* tokenizer_encoding_of_vocab(int vocab_size) {
    for (int i = 0; i < TOKENIZER_N_ENCODINGS; i++)
        if (tokenizer_encodings[i].vocab_size == vocab_size) return &tokenizer_encodings[i];
    return NULL;
}

// --- the encoder file --------------------------------------------------------------------------

// Decodes base64 s[0..n) (with '=' padding) into out (room for 3 * n / 4 bytes); returns the byte
// count, or -1.
static inline int tiktoken_base64(const unsigned char* s, size_t n, unsigned char* out) {
    if (n % 4 != 0) return -1;
    int len = 0;
    for (size_t i = 0; i < n; i += 4) {
        uint32_t w = 0;
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            unsigned char c = s[i + k];
            int v = c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26
                  : c >= '0' && c <= '9' ? c - '0' + 52 : c == '+' ? 62 : c == '/' ? 63 : -1;
            if (c == '=' && i + 4 == n && k >= 2) { pad++; v = 0; }
            else if (v < 0 || pad) return -1;
            w = w << 6 | (uint32_t)v;
        }
        for (int k = 0; k < 3 - pad; k++) out[len++] = (unsigned char)(w >> (16 - 8 * k));
    }
    return len;
}

// The members of "special_tokens": {"TEXT": ID, ...} into names[] (malloc'd) and ids[]; returns the
// count, or -1 (not 1 to TOKENIZER_MAX_SPECIAL members, or an ID that is not an integer in [0, 2^24]).
static inline int tiktoken_specials(const cJSON* special, char** names, int32_t* ids) {
    int count = 0;
    const cJSON* e;
    cJSON_ArrayForEach(e, special) {
        double v = cJSON_IsNumber(e) ? e->valuedouble : -1.0;
        if (count == TOKENIZER_MAX_SPECIAL || v < 0.0 || v > (double)(1 << 24) || v != (double)(int32_t)v) break;
        names[count] = (char*)malloc_check(strlen(e->string) + 1);
        strcpy(names[count], e->string);
        ids[count++] = (int32_t)v;
    }
    if (!e && count > 0) return count;
    for (int k = 0; k < count; k++) free(names[k]);
    return -1;
}

// Loads a tiktoken encoder file into t (named `name`). Returns 0, or -1 with a message naming the
// file and the fix in `err`.
static inline int tokenizer_load_tiktoken(Tokenizer* t, const char* name, const char* path, char* err, size_t errlen) {
    char fix[160];
    snprintf(fix, sizeof(fix), "it should be tiktoken's %s.json; run `make data-tiktoken` to fetch it", name);
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    size_t n, cap = 1 << 20;
    char* names[TOKENIZER_MAX_SPECIAL] = {NULL};
    const char* ranks = NULL;
    int n_special = -1, id = 0, n_tokens = 0;
    const char* why = NULL;
    cJSON* root = NULL;
    // before the first goto: C++ (nvcc builds train_gpt.cu) forbids jumping over an initialisation
    const cJSON *pat = NULL, *special = NULL, *ranks_j = NULL;
    unsigned char tok[1024];
    unsigned char* s = tokenizer_read_file(path, &n, err, errlen);
    if (!s) {
        size_t k = strlen(err);
        snprintf(err + k, errlen - k, "; %s", fix);
        return -1;
    }
    root = cJSON_ParseWithLength((const char*)s, n);
    if (!cJSON_IsObject(root)) {
        why = "not a JSON object (truncated, or not a tiktoken encoder file)";
        goto fail;
    }
    pat = cJSON_GetObjectItemCaseSensitive(root, "pat_str");
    special = cJSON_GetObjectItemCaseSensitive(root, "special_tokens");
    ranks_j = cJSON_GetObjectItemCaseSensitive(root, "bpe_ranks");
    if (!cJSON_IsString(pat) || !cJSON_IsObject(special) || !cJSON_IsString(ranks_j)) {
        why = "no \"pat_str\", \"special_tokens\" or \"bpe_ranks\" member: not a tiktoken encoder file";
        goto fail;
    }
    {
        const TokenizerEncoding* enc = tokenizer_find_encoding(name);
        if (enc && enc->pattern && strcmp(pat->valuestring, enc->pattern) != 0) {
            const char* other = NULL;
            for (int k = 0; k < TOKENIZER_N_ENCODINGS; k++)
                if (tokenizer_encodings[k].pattern && !strcmp(pat->valuestring, tokenizer_encodings[k].pattern))
                    other = tokenizer_encodings[k].name;
            if (other)
                snprintf(err, errlen, "%s: \"pat_str\" is %s's pre-tokenizer pattern, not %s's: the file of another "
                         "encoding? run `make data-tiktoken` and pass the matching file", path, other, name);
            else
                snprintf(err, errlen, "%s: \"pat_str\" is not %s's pre-tokenizer pattern (the file is damaged or "
                         "edited: its pattern would split text differently from tiktoken, or not compile); %s", path,
                         name, fix);
            cJSON_Delete(root);
            free(s);
            tokenizer_free(t);
            return -1;
        }
    }
    t->pattern = (char*)malloc_check(strlen(pat->valuestring) + 1);
    strcpy(t->pattern, pat->valuestring);
    ranks = ranks_j->valuestring;
    n_special = tiktoken_specials(special, names, t->special_ids);
    if (n_special < 1) {
        why = "\"special_tokens\" is not an object of 1 to 8 \"TEXT\": ID members";
        goto fail;
    }
    // size the tables for at most one token per space (a line is "! OFFSET" and then the tokens)
    for (const char* p = ranks; *p; p++) n_tokens += *p == ' ';
    t->n_special = n_special;
    t->vocab_size = n_tokens;
    for (int k = 0; k < n_special; k++)
        if (t->special_ids[k] + 1 > t->vocab_size) t->vocab_size = t->special_ids[k] + 1;
    if (n_tokens < 256 || t->vocab_size > (1 << 21)) { why = "fewer than 256 or more than 2^21 tokens"; goto fail; }
    t->bytes = (unsigned char*)malloc_check(cap);
    t->offsets = (uint32_t*)calloc_check((size_t)t->vocab_size + 1, sizeof(uint32_t));
    t->lookup_bits = TOKENIZER_LOOKUP_BITS;
    while ((1 << t->lookup_bits) < 5 * n_tokens / 2) t->lookup_bits++;  // load <= 0.4
    t->lookup = (int32_t*)malloc_check(sizeof(int32_t) << t->lookup_bits);
    memset(t->lookup, 0xff, sizeof(int32_t) << t->lookup_bits);  // all -1
    for (const char* line = ranks; *line; line++) {
        const char* eol = strchr(line, '\n');
        if (!eol) eol = line + strlen(line);
        char* end;
        long offset = line[0] == '!' && line[1] == ' ' ? strtol(line + 2, &end, 10) : -1;
        if (offset != id) { why = "a \"bpe_ranks\" line that does not start with \"! NEXT_RANK\""; goto fail; }
        for (const char* p = end; p < eol;) {
            while (p < eol && *p == ' ') p++;
            const char* q = p;
            while (q < eol && *q != ' ') q++;
            if (q == p) break;
            int m = (size_t)(q - p) <= 4 * sizeof(tok) / 3 ? tiktoken_base64((const unsigned char*)p, (size_t)(q - p), tok) : -1;
            if (m <= 0) { why = "a token that is not base64 of 1 to 1024 bytes"; goto fail; }
            if (tokenizer_lookup(t, tok, (size_t)m) >= 0) { why = "a duplicate token"; goto fail; }
            tokenizer_append(t, id, tok, (size_t)m, &cap);
            tokenizer_lookup_insert(t, id++);
            p = q;
        }
        line = *eol ? eol : eol - 1;
    }
    t->n_ranks = id;
    t->n_merges = id - 256;
    t->vocab_size = id;  // now exact: the ranks, then the special tokens (below)
    for (int k = 0; k < n_special; k++)
        if (t->special_ids[k] + 1 > t->vocab_size) t->vocab_size = t->special_ids[k] + 1;
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        if (tokenizer_lookup(t, &c, 1) < 0) { why = "a byte without a token"; goto fail; }
    }
    // the special tokens go after the ranks, in id order; the ids in between stay empty (unused)
    for (int k = 1; k < n_special; k++)  // insertion sort of a handful
        for (int j = k; j > 0 && t->special_ids[j - 1] > t->special_ids[j]; j--) {
            int32_t tid = t->special_ids[j]; t->special_ids[j] = t->special_ids[j - 1]; t->special_ids[j - 1] = tid;
            char* tn = names[j]; names[j] = names[j - 1]; names[j - 1] = tn;
        }
    t->eot_id = -1;
    for (int k = 0; k < n_special; k++) {
        if (t->special_ids[k] < id || (k > 0 && t->special_ids[k] == t->special_ids[k - 1]) || !names[k][0]) {
            why = "a special token with an empty name or an id that is already taken";
            goto fail;
        }
        for (; id < t->special_ids[k]; id++) t->offsets[id + 1] = t->offsets[id];
        tokenizer_append(t, id++, (const unsigned char*)names[k], strlen(names[k]), &cap);
        if (strcmp(names[k], tokenizer_eot_text) == 0) t->eot_id = t->special_ids[k];
    }
    if (t->eot_id < 0) { why = "no <|endoftext|> among the special tokens"; goto fail; }
    for (int k = 0; k < n_special; k++) free(names[k]);
    cJSON_Delete(root);
    free(s);
    return 0;
fail:
    snprintf(err, errlen, "%s: %s (at token %d); %s", path, why, id, fix);
    for (int k = 0; k < n_special; k++) free(names[k]);
    cJSON_Delete(root);
    free(s);
    tokenizer_free(t);
    return -1;
}

// --- by name -----------------------------------------------------------------------------------

// Loads the encoding `name` (see tokenizer_encodings) from `path` (NULL: its default path) and checks
// that the file gives the encoding's sizes. Returns 0, or -1 with a message in `err`.
static inline int tokenizer_load_encoding(Tokenizer* t, const char* name, const char* path, char* err, size_t errlen) {
    memset(t, 0, sizeof(*t));
    const TokenizerEncoding* enc = tokenizer_find_encoding(name);
    if (!enc) {
        snprintf(err, errlen, "unknown encoding \"%s\"; the encodings are %s", name, TOKENIZER_ENCODING_NAMES);
        return -1;
    }
    if (!path) path = enc->path;
    int rc = strcmp(name, "gpt2") == 0 ? tokenizer_load(t, path, err, errlen)
                                       : tokenizer_load_tiktoken(t, name, path, err, errlen);
    if (rc != 0) return -1;
    if (t->n_ranks != enc->n_ranks || t->vocab_size != enc->vocab_size || t->eot_id != enc->eot_id) {
        snprintf(err, errlen, "%s: %d ranks, %d ids, <|endoftext|> %d; %s has %d, %d, %d: the file of another encoding?"
                 " run `make data-tiktoken` and pass the matching file", path, t->n_ranks, t->vocab_size, t->eot_id,
                 name, enc->n_ranks, enc->vocab_size, enc->eot_id);
        tokenizer_free(t);
        return -1;
    }
    return 0;
}

static inline void tokenizer_init_encoding(Tokenizer* t, const char* name, const char* path) {
    char err[TOKENIZER_ERR_LEN];
    if (tokenizer_load_encoding(t, name, path, err, sizeof(err)) != 0)
        check_failf("tiktoken's encoding files (data/tiktoken/*.json) are made by `make data-tiktoken` (doc/data.md)",
                    "%s", err);
}
