// json_terminated.h: a test's own cJSON_ParseWithLength, which the readers (llmc/io/safetensors.h,
// llmc/io/hf_weights.h) call in place of the library's: it counts the buffers that are not 0-terminated
// at buffer_length (cJSON up to 1.7.17 reads that byte), then parses with the library's. Under ASan an
// unterminated malloc'ed buffer is reported here as a heap-buffer-overflow. The test defines
// _GNU_SOURCE before its first #include (for RTLD_NEXT) and links -lcjson.
#pragma once
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <cjson/cJSON.h>

#ifndef RTLD_NEXT
#error "json_terminated.h: define _GNU_SOURCE before the first #include"
#endif

static int json_parses = 0, json_unterminated = 0;

cJSON* cJSON_ParseWithLength(const char* value, size_t buffer_length) {
    static cJSON* (*library)(const char*, size_t) = NULL;
    if (!library) *(void**)&library = dlsym(RTLD_NEXT, "cJSON_ParseWithLength");
    if (!library) { fprintf(stderr, "json_terminated.h: cJSON_ParseWithLength not found in the cJSON library\n"); exit(1); }
    json_parses++;
    if (value[buffer_length] != '\0') json_unterminated++;
    return library(value, buffer_length);
}
