/*
 * A small, strict JSON reader (RFC 8259) shared by every part of Strata that
 * reads JSON: safetensors headers and index files, expert-count files, trace
 * imports, importance matrices.
 *
 * strata_json_parse() builds a read-only tree in one document that owns all
 * of its memory; strata_json_free() releases it.  Node pointers stay valid
 * until the document is freed.  The parser is strict: one value, optionally
 * surrounded by whitespace; no comments, trailing commas, NaN/Infinity,
 * leading zeros, control characters in strings, or unpaired surrogates.
 * Nesting deeper than STRATA_JSON_MAX_DEPTH is rejected (no stack overflow on
 * hostile input).  Errors name the input and the byte offset:
 *   "model.safetensors: bad JSON at byte 1234: expected ':' after object key"
 *
 * Duplicate object keys are kept in order; callers that need uniqueness
 * check it themselves (strata_json_get returns the first).
 *
 * Why not Debian's jansson or json-c (reviewed; the answer may change when
 * the build machines do):
 *   - reach: the GPU machine gets its build dependencies from a fixed list of
 *     Debian packages (shared/device/fetch-debs.sh: liburing, Lua, cmocka,
 *     SCons, numa, hwloc, xxhash) and cannot reach a registry, so a new
 *     library there means a vendored copy or a second JSON path, which is
 *     worse than this one file;
 *   - strictness: this reader rejects what RFC 8259 forbids by default and
 *     names the byte offset; json-c's default tokener accepts comments and
 *     trailing commas (strictness is a flag), jansson keeps the last of
 *     duplicate keys unless asked;
 *   - hostile input: its one big user is the safetensors header, an
 *     attacker-sized string, and it is fuzzed there (tests/fuzz/
 *     fuzz_safetensors.c, scripts/fuzz.sh); the depth limit is explicit;
 *   - speed and memory: a document is one arena chain (no malloc per node,
 *     one free), which trace import (one document per JSONL line, millions
 *     of lines) depends on.
 * The writers (strata_json_write_str and the printf-built outputs) are
 * likewise small and checked by the readers in the tests.
 */
#ifndef STRATA_JSON_H
#define STRATA_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "strata/error.h"

#define STRATA_JSON_MAX_DEPTH 64

enum strata_json_type {
	STRATA_JSON_NULL = 0,
	STRATA_JSON_BOOL,
	STRATA_JSON_NUMBER,
	STRATA_JSON_STRING,
	STRATA_JSON_ARRAY,
	STRATA_JSON_OBJECT,
};

struct strata_json {
	int type;           /* enum strata_json_type */
	uint32_t len;       /* string: bytes (may contain \0 from \u0000); array/object: members */
	size_t pos;         /* byte offset of the value in the input, for error messages */
	const char *key;    /* object members: the member's key (NUL-terminated); else NULL */
	uint32_t key_len;
	bool boolean;       /* STRATA_JSON_BOOL */
	bool is_uint;       /* NUMBER written as a non-negative integer that fits uint64 */
	bool is_int;        /* NUMBER written as an integer that fits int64 */
	double num;         /* NUMBER, as double */
	uint64_t u;         /* NUMBER, exact when is_uint */
	int64_t i;          /* NUMBER, exact when is_int */
	const char *str;    /* STRING: NUL-terminated UTF-8 */
	struct strata_json *items; /* ARRAY/OBJECT: len members */
};

struct strata_json_doc;

/* Parse len bytes of text.  `what` names the input in error messages (a file
 * name).  On success *out owns the tree. */
int strata_json_parse(const char *text, size_t len, const char *what, struct strata_json_doc **out,
		      struct strata_error *err);
/* Read and parse a whole file (at most max_bytes; 0: 256 MiB). */
int strata_json_parse_file(const char *path, size_t max_bytes, struct strata_json_doc **out,
			   struct strata_error *err);
void strata_json_free(struct strata_json_doc *d);
const struct strata_json *strata_json_root(const struct strata_json_doc *d);

/* Object member by key (first match), or NULL if v is not an object or lacks it. */
const struct strata_json *strata_json_get(const struct strata_json *v, const char *key);
/* Array element / object member i, or NULL if out of range or not a container. */
const struct strata_json *strata_json_at(const struct strata_json *v, uint32_t i);
const char *strata_json_type_name(int type);

/* Write s to f as a JSON string literal: '"' and '\\' escaped, control bytes
 * as \u00XX (the one string writer of every JSON Strata writes). */
void strata_json_write_str(FILE *f, const char *s);

#endif
