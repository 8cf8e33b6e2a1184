// safetensors.h: host-only. Reading and writing safetensors files, Hugging Face's tensor format, with
// cJSON (Debian libcjson-dev; link -lcjson) for the header. Used by the export to and the import from
// Hugging Face's layouts (llmc/io/hf_model.h, llmc/io/hf_model_import.h).
//
// The file, all little-endian:
//   uint64 N          bytes of the JSON header that follows
//   char header[N]    a JSON object: one entry per tensor,
//                       "<name>": {"dtype": "F32", "shape": [rows, cols], "data_offsets": [begin, end]},
//                     and optionally "__metadata__": {"<key>": "<string>", ...}; padded with spaces
//   data              the tensors' bytes, row-major; a tensor's [begin, end) are bytes of this section
// The writer lays the tensors out contiguously in the order given, pads the header with spaces so that
// the data section starts at a multiple of 8 bytes (as the reference implementation does), and writes
// atomically: <path>.tmp, flushed, fsync'ed, renamed to <path>, the directory fsync'ed.
//
// The reader refuses, with a message naming the file and the tensor: a file shorter than its 8-byte
// length; a header length of 0, beyond the file, or over 100 MB (the reference implementation's
// limit); a header that is not valid JSON or not an object; an entry that is not an object with a
// known dtype, a shape of non-negative integers and two integer data_offsets; a duplicate name; a
// byte size (end - begin) that is not the shape's element count times the dtype's size; offsets beyond
// the data section, overlapping another tensor's, or leaving bytes that belong to no tensor (the
// reference implementation refuses those files too). It reads the header only on open; the data of a
// tensor is read when asked for. Which names, dtypes and shapes a caller accepts is the caller's check.
//
// Errors: functions return 0, or -1 with the message in ->err; nothing exits (as llmc/io/checkpoint.h), so
// every bad file is testable in-process. Compiles as C11 (gcc) and as C++ (nvcc).
#pragma once
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "../core/atomic_file.h"
#include "../core/check.h"

#define SAFETENSORS_MAX_HEADER (100u << 20)  // bytes of JSON, as the reference implementation
#define SAFETENSORS_MAX_DIMS 8
#define SAFETENSORS_NAME_MAX 256
#define SAFETENSORS_PATH_MAX 4096
#define SAFETENSORS_ERR_LEN 5120

typedef enum {
    ST_BOOL, ST_U8, ST_I8, ST_I16, ST_U16, ST_F16, ST_BF16, ST_I32, ST_U32, ST_F32, ST_I64, ST_U64, ST_F64,
    ST_NUM_DTYPES
} SafetensorsDtype;

static inline const char* safetensors_dtype_name(SafetensorsDtype d) {
    static const char* const n[ST_NUM_DTYPES] = {"BOOL", "U8", "I8", "I16", "U16", "F16", "BF16", "I32", "U32",
                                                 "F32", "I64", "U64", "F64"};
    return (int)d >= 0 && d < ST_NUM_DTYPES ? n[d] : "?";
}

static inline size_t safetensors_dtype_size(SafetensorsDtype d) {
    static const size_t s[ST_NUM_DTYPES] = {1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 8, 8, 8};
    return s[d];
}

// The dtype named `name`, or -1.
static inline int safetensors_dtype_of(const char* name) {
    for (int d = 0; d < ST_NUM_DTYPES; d++)
        if (strcmp(name, safetensors_dtype_name((SafetensorsDtype)d)) == 0) return d;
    return -1;
}

typedef struct {
    char name[SAFETENSORS_NAME_MAX];
    SafetensorsDtype dtype;
    int ndim;                               // 0: a scalar
    int64_t shape[SAFETENSORS_MAX_DIMS];    // (ndim)
    uint64_t begin, end;                    // bytes of the data section, [begin, end); set by the writer
} SafetensorsTensor;

static inline uint64_t safetensors_numel(const SafetensorsTensor* t) {
    uint64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (uint64_t)t->shape[i];
    return n;
}

// Fills a tensor description (the writer sets begin and end); shape has ndim entries.
static inline void safetensors_tensor(SafetensorsTensor* t, const char* name, SafetensorsDtype dtype, int ndim,
                                      const int64_t* shape) {
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim && i < SAFETENSORS_MAX_DIMS; i++) t->shape[i] = shape[i];
}

// "(768, 2304)": a shape for messages.
static inline const char* safetensors_shape_text(char* out, size_t n, int ndim, const int64_t* shape) {
    size_t len = (size_t)snprintf(out, n, "(");
    for (int i = 0; i < ndim && len < n; i++)
        len += (size_t)snprintf(out + len, n - len, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (len < n) snprintf(out + len, n - len, ndim == 1 ? ",)" : ")");
    return out;
}

// bf16 and fp16 to fp32, exactly (every bf16 and fp16 value is a float).
static inline float safetensors_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float safetensors_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
    if (e == 0x1f) {
        u = sign | 0x7f800000u | (m << 13);  // inf, NaN (payload kept)
    } else if (e != 0) {
        u = sign | ((e + 112) << 23) | (m << 13);  // normal: rebias 15 -> 127
    } else {
        float f = ldexpf((float)m, -24);  // subnormal (or zero): m * 2^-24, exact in fp32
        memcpy(&u, &f, 4);
        u |= sign;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// --- writing -------------------------------------------------------------------------------------

typedef struct {
    AtomicFile af;                            // <path>.tmp, renamed over the final name by safetensors_writer_close
    uint64_t data_bytes, written;             // of the data section: announced, appended so far
    char err[SAFETENSORS_ERR_LEN];
} SafetensorsWriter;

static inline int safetensors_writer_fail(SafetensorsWriter* w, const char* what) {
    snprintf(w->err, sizeof(w->err), "safetensors %s: %s failed: %s; is the disk full or the directory read-only?",
             w->af.path, what, strerror(errno));
    atomic_file_abort(&w->af);
    return -1;
}

// A non-negative integer as JSON text, exact: cJSON prints numbers through 15 significant digits when
// those read back within a relative DBL_EPSILON, which a 16-digit size (2^53, say) does, inexactly.
static inline cJSON* safetensors_json_int(uint64_t v) {
    char text[24];
    snprintf(text, sizeof(text), "%llu", (unsigned long long)v);
    return cJSON_CreateRaw(text);
}

// Opens <path>.tmp and writes the header for tensors (n), laid out in this order (their begin and end
// are set here), with the metadata pairs meta = {key, value, key, value, ..., NULL} (NULL: none). The
// tensors' bytes follow with safetensors_writer_append, in order.
static inline int safetensors_writer_open(SafetensorsWriter* w, const char* path, SafetensorsTensor* tensors, int n,
                                          const char* const* meta) {
    memset(w, 0, sizeof(*w));
    size_t plen = strlen(path);
    if (plen + 1 > sizeof(w->af.path)) {
        snprintf(w->err, sizeof(w->err), "safetensors path too long (%zu bytes): %.256s...", plen, path);
        return -1;
    }
    memcpy(w->af.path, path, plen + 1);  // for messages until the file is opened (its length checked above)
    cJSON* root = cJSON_CreateObject();
    if (meta && meta[0]) {
        cJSON* m = cJSON_AddObjectToObject(root, "__metadata__");
        for (int i = 0; meta[i] && meta[i + 1]; i += 2) cJSON_AddStringToObject(m, meta[i], meta[i + 1]);
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        SafetensorsTensor* t = &tensors[i];
        t->begin = off;
        t->end = off + safetensors_numel(t) * safetensors_dtype_size(t->dtype);
        off = t->end;
        cJSON* e = cJSON_AddObjectToObject(root, t->name);
        cJSON_AddStringToObject(e, "dtype", safetensors_dtype_name(t->dtype));
        cJSON* shape = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < t->ndim; d++) cJSON_AddItemToArray(shape, safetensors_json_int((uint64_t)t->shape[d]));
        cJSON* offsets = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(offsets, safetensors_json_int(t->begin));
        cJSON_AddItemToArray(offsets, safetensors_json_int(t->end));
    }
    char* json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!json) {
        errno = ENOMEM;
        return safetensors_writer_fail(w, "formatting the JSON header");
    }
    uint64_t len = strlen(json), padded = (8 + len + 7) / 8 * 8 - 8;  // data starts at a multiple of 8
    w->data_bytes = off;
    if (atomic_file_open(&w->af, path) != 0) {
        free(json);
        return safetensors_writer_fail(w, "fopen of the temporary file");
    }
    unsigned char n8[8];
    for (int i = 0; i < 8; i++) n8[i] = (unsigned char)(padded >> (8 * i));
    int ok = fwrite(n8, 1, 8, w->af.f) == 8 && fwrite(json, 1, len, w->af.f) == len;
    for (uint64_t i = len; i < padded && ok; i++) ok = fputc(' ', w->af.f) != EOF;
    free(json);
    if (!ok) return safetensors_writer_fail(w, "writing the header");
    return 0;
}

static inline int safetensors_writer_append(SafetensorsWriter* w, const void* data, size_t bytes) {
    if (w->written + bytes > w->data_bytes) {
        errno = EINVAL;
        return safetensors_writer_fail(w, "appending more tensor data than the header announces");
    }
    if (bytes > 0 && fwrite(data, 1, bytes, w->af.f) != bytes) return safetensors_writer_fail(w, "fwrite");
    w->written += bytes;
    return 0;
}

// Checks that every announced byte was written, then flush, fsync, rename, fsync the directory.
static inline int safetensors_writer_close(SafetensorsWriter* w) {
    if (w->written != w->data_bytes) {
        errno = EINVAL;
        return safetensors_writer_fail(w, "closing before all tensors were written");
    }
    const char* step = NULL;
    if (atomic_file_commit(&w->af, &step) != 0) return safetensors_writer_fail(w, step);
    return 0;
}

// Gives up a write: the temporary file is removed, nothing appears under the final name.
static inline void safetensors_writer_abort(SafetensorsWriter* w) {
    atomic_file_abort(&w->af);
}

// --- reading -------------------------------------------------------------------------------------

typedef struct {
    FILE* f;
    char path[SAFETENSORS_PATH_MAX];
    uint64_t data_start, data_bytes;  // the data section: where it starts in the file, its size
    int num_tensors;
    SafetensorsTensor* tensors;       // (num_tensors) in the header's order
    cJSON* metadata;                  // the "__metadata__" object, or NULL
    cJSON* header;                    // the parsed header (owns metadata)
    char err[SAFETENSORS_ERR_LEN];
} SafetensorsReader;

static inline void safetensors_close(SafetensorsReader* r) {
    if (r->f) fclose(r->f);
    r->f = NULL;
    free(r->tensors);
    r->tensors = NULL;
    r->num_tensors = 0;
    cJSON_Delete(r->header);
    r->header = NULL;
    r->metadata = NULL;
}

static inline int safetensors_fail(SafetensorsReader* r, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int safetensors_fail(SafetensorsReader* r, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    err_vformat(r->err, sizeof(r->err), "safetensors", r->path, fmt, ap);
    va_end(ap);
    safetensors_close(r);
    return -1;
}

// A JSON number that is a non-negative integer up to 2^53 (exact in a double), into *v.
static inline int safetensors_json_u64(const cJSON* j, uint64_t* v) {
    if (!cJSON_IsNumber(j)) return -1;
    double d = j->valuedouble;
    if (!(d >= 0.0) || d > 9007199254740992.0 || d != floor(d)) return -1;
    *v = (uint64_t)d;
    return 0;
}

// One header entry into t; returns 0, or -1 with r->err set (and r closed).
static inline int safetensors_parse_entry(SafetensorsReader* r, const cJSON* e, SafetensorsTensor* t) {
    const char* name = e->string;
    if (strlen(name) >= sizeof(t->name))
        return safetensors_fail(r, "tensor \"%.64s...\": name longer than %d bytes", name, SAFETENSORS_NAME_MAX - 1);
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    if (!cJSON_IsObject(e)) return safetensors_fail(r, "tensor \"%s\": its header entry is not a JSON object", name);
    const cJSON* dtype = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON* shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON* offsets = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dtype) || !cJSON_IsArray(shape) || !cJSON_IsArray(offsets))
        return safetensors_fail(r, "tensor \"%s\": the entry needs \"dtype\" (a string), \"shape\" and \"data_offsets\" "
                                "(arrays)", name);
    int d = safetensors_dtype_of(dtype->valuestring);
    if (d < 0)
        return safetensors_fail(r, "tensor \"%s\": unknown dtype \"%s\" (known: BOOL, U8, I8, I16, U16, F16, BF16, I32, "
                                "U32, F32, I64, U64, F64)", name, dtype->valuestring);
    t->dtype = (SafetensorsDtype)d;
    t->ndim = cJSON_GetArraySize(shape);
    if (t->ndim > SAFETENSORS_MAX_DIMS)
        return safetensors_fail(r, "tensor \"%s\": %d dimensions, at most %d are read", name, t->ndim, SAFETENSORS_MAX_DIMS);
    // element count with overflow checks: a shape too large for the file is a size mismatch below
    uint64_t numel = 1, cap = UINT64_MAX / 8;
    int too_big = 0;
    for (int i = 0; i < t->ndim; i++) {
        uint64_t v;
        if (safetensors_json_u64(cJSON_GetArrayItem(shape, i), &v) != 0)
            return safetensors_fail(r, "tensor \"%s\": shape entry %d is not a non-negative integer", name, i);
        t->shape[i] = (int64_t)v;
        if (v != 0 && numel > cap / v) too_big = 1; else numel *= v;
    }
    uint64_t b, en;
    if (cJSON_GetArraySize(offsets) != 2 || safetensors_json_u64(cJSON_GetArrayItem(offsets, 0), &b) != 0 ||
        safetensors_json_u64(cJSON_GetArrayItem(offsets, 1), &en) != 0 || en < b)
        return safetensors_fail(r, "tensor \"%s\": data_offsets must be [begin, end], integers with begin <= end", name);
    t->begin = b;
    t->end = en;
    char s[160];
    uint64_t want = numel * safetensors_dtype_size(t->dtype);
    if (too_big || want != en - b)
        return safetensors_fail(r, "tensor \"%s\": shape %s of %s needs %s%llu bytes, data_offsets [%llu, %llu] hold %llu: "
                                "shape and size do not match", name, safetensors_shape_text(s, sizeof(s), t->ndim, t->shape),
                                dtype->valuestring, too_big ? "more than " : "", (unsigned long long)(too_big ? UINT64_MAX / 8 : want),
                                (unsigned long long)b, (unsigned long long)en, (unsigned long long)(en - b));
    if (en > r->data_bytes)
        return safetensors_fail(r, "tensor \"%s\": data_offsets [%llu, %llu] run past the data section's %llu bytes: "
                                "truncated file or bad offsets", name, (unsigned long long)b, (unsigned long long)en,
                                (unsigned long long)r->data_bytes);
    return 0;
}

static inline int safetensors_compare_begin(const void* a, const void* b) {
    const SafetensorsTensor *x = *(const SafetensorsTensor* const*)a, *y = *(const SafetensorsTensor* const*)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end ? 1 : 0;
}

// Opens path, reads and checks the header (see the top of this file). On success the tensors are
// described in r->tensors; their data is read with safetensors_read / safetensors_read_f32.
static inline int safetensors_open(SafetensorsReader* r, const char* path) {
    memset(r, 0, sizeof(*r));
    size_t plen = strlen(path);
    if (plen + 1 > sizeof(r->path)) return safetensors_fail(r, "path too long (%zu bytes): %.256s...", plen, path);
    memcpy(r->path, path, plen + 1);
    r->f = fopen(path, "rb");
    if (!r->f) return safetensors_fail(r, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fileno(r->f), &st) != 0) return safetensors_fail(r, "fstat failed: %s", strerror(errno));
    uint64_t size = (uint64_t)st.st_size;
    unsigned char n8[8];
    if (size < 8 || fread(n8, 1, 8, r->f) != 8)
        return safetensors_fail(r, "%llu bytes, shorter than the 8-byte header length: truncated or not a safetensors file",
                                (unsigned long long)size);
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)n8[i] << (8 * i);
    if (n == 0 || n > SAFETENSORS_MAX_HEADER || n > size - 8)
        return safetensors_fail(r, "header length %llu out of range (the file has %llu bytes after the length, the limit "
                                "is %u): truncated or not a safetensors file", (unsigned long long)n,
                                (unsigned long long)(size - 8), SAFETENSORS_MAX_HEADER);
    char* json = (char*)malloc((size_t)n + 1);  // 0-terminated: cJSON (up to 1.7.17) may read one byte past n
    if (!json) return safetensors_fail(r, "cannot allocate %llu bytes for the header", (unsigned long long)n);
    if (fread(json, 1, (size_t)n, r->f) != (size_t)n) {
        free(json);
        return safetensors_fail(r, "could not read the %llu-byte header: %s", (unsigned long long)n, strerror(errno));
    }
    json[n] = '\0';
    r->header = cJSON_ParseWithLength(json, (size_t)n);
    free(json);
    if (!r->header) return safetensors_fail(r, "the %llu-byte header is not valid JSON", (unsigned long long)n);
    if (!cJSON_IsObject(r->header)) return safetensors_fail(r, "the header is JSON but not an object");
    r->data_start = 8 + n;
    r->data_bytes = size - 8 - n;
    int entries = cJSON_GetArraySize(r->header);
    r->tensors = (SafetensorsTensor*)calloc(entries > 0 ? (size_t)entries : 1, sizeof(SafetensorsTensor));
    if (!r->tensors) return safetensors_fail(r, "cannot allocate the tensor table (%d entries)", entries);
    for (const cJSON* e = r->header->child; e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            if (!cJSON_IsObject(e)) return safetensors_fail(r, "\"__metadata__\" is not a JSON object");
            for (const cJSON* m = e->child; m; m = m->next)
                if (!cJSON_IsString(m)) return safetensors_fail(r, "__metadata__ \"%s\": not a string", m->string);
            r->metadata = (cJSON*)e;
            continue;
        }
        for (int i = 0; i < r->num_tensors; i++)
            if (strcmp(r->tensors[i].name, e->string) == 0)
                return safetensors_fail(r, "tensor \"%s\": named twice in the header", e->string);
        if (safetensors_parse_entry(r, e, &r->tensors[r->num_tensors]) != 0) return -1;
        r->num_tensors++;
    }
    // the tensors tile the data section: sorted by begin, each starts where the previous one ended
    const SafetensorsTensor** by = (const SafetensorsTensor**)calloc((size_t)r->num_tensors + 1, sizeof(*by));
    if (!by) return safetensors_fail(r, "cannot allocate the tensor table (%d entries)", r->num_tensors);
    for (int i = 0; i < r->num_tensors; i++) by[i] = &r->tensors[i];
    qsort(by, (size_t)r->num_tensors, sizeof(*by), safetensors_compare_begin);
    uint64_t pos = 0;
    const SafetensorsTensor* prev = NULL;
    for (int i = 0; i < r->num_tensors; i++) {
        const SafetensorsTensor* t = by[i];
        // (the message is formatted before safetensors_fail frees the table, so the names may point into it)
        if (t->begin < pos) {
            free(by);
            return safetensors_fail(r, "tensor \"%s\": data_offsets [%llu, %llu] overlap those of tensor \"%s\" "
                                    "[%llu, %llu]", t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                                    prev->name, (unsigned long long)prev->begin, (unsigned long long)prev->end);
        }
        if (t->begin > pos) {
            free(by);
            return safetensors_fail(r, "tensor \"%s\" starts at byte %llu of the data section: bytes [%llu, %llu) "
                                    "belong to no tensor", t->name, (unsigned long long)t->begin,
                                    (unsigned long long)pos, (unsigned long long)t->begin);
        }
        pos = t->end;
        prev = t;
    }
    free(by);
    if (pos != r->data_bytes)
        return safetensors_fail(r, "the data section has %llu bytes, the tensors cover %llu: %llu bytes after the last "
                                "tensor%s%s%s", (unsigned long long)r->data_bytes, (unsigned long long)pos,
                                (unsigned long long)(r->data_bytes - pos), prev ? " (\"" : "", prev ? prev->name : "",
                                prev ? "\")" : "");
    return 0;
}

// The tensor called `name`, or NULL.
static inline const SafetensorsTensor* safetensors_find(const SafetensorsReader* r, const char* name) {
    for (int i = 0; i < r->num_tensors; i++)
        if (strcmp(r->tensors[i].name, name) == 0) return &r->tensors[i];
    return NULL;
}

// The metadata string for `key`, or NULL.
static inline const char* safetensors_metadata(const SafetensorsReader* r, const char* key) {
    const cJSON* v = r->metadata ? cJSON_GetObjectItemCaseSensitive(r->metadata, key) : NULL;
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

// The raw bytes of t (t->end - t->begin of them) into dst. A failed read closes r, as every error does.
static inline int safetensors_read(SafetensorsReader* r, const SafetensorsTensor* t, void* dst) {
    size_t bytes = (size_t)(t->end - t->begin);
    if (fseeko(r->f, (off_t)(r->data_start + t->begin), SEEK_SET) != 0 ||
        (bytes > 0 && fread(dst, 1, bytes, r->f) != bytes))
        return safetensors_fail(r, "tensor \"%s\": could not read %zu bytes: %s", t->name, bytes,
                                feof(r->f) ? "unexpected end of file (did the file change?)" : strerror(errno));
    return 0;
}

// t's values as fp32 into dst (numel of t): F32 as it is, BF16 and F16 converted exactly; any other
// dtype is refused with a message naming the tensor.
static inline int safetensors_read_f32(SafetensorsReader* r, const SafetensorsTensor* t, float* dst) {
    if (t->dtype == ST_F32) return safetensors_read(r, t, dst);
    if (t->dtype != ST_BF16 && t->dtype != ST_F16)
        return safetensors_fail(r, "tensor \"%s\": dtype %s, expected F32, BF16 or F16", t->name,
                                safetensors_dtype_name(t->dtype));
    size_t n = (size_t)safetensors_numel(t);
    uint16_t* h = (uint16_t*)malloc(n ? n * sizeof(uint16_t) : 1);
    if (!h) return safetensors_fail(r, "tensor \"%s\": cannot allocate %zu bytes", t->name, n * sizeof(uint16_t));
    if (safetensors_read(r, t, h) != 0) {
        free(h);
        return -1;
    }
    for (size_t i = 0; i < n; i++) dst[i] = t->dtype == ST_BF16 ? safetensors_bf16_to_f32(h[i]) : safetensors_f16_to_f32(h[i]);
    free(h);
    return 0;
}
