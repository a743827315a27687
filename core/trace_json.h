/*
 * A small in-place JSON parser for one line of JSONL (private to the trace
 * code).  Strings are unescaped in the caller's mutable buffer; nodes live in
 * a growable array reused line after line, linked first-child/next-sibling.
 * Fast path for integers, since routing logs are mostly small integers.
 */
#ifndef STRATA_TRACE_JSON_H
#define STRATA_TRACE_JSON_H

#include <stddef.h>
#include <stdint.h>

enum { TJ_NULL, TJ_FALSE, TJ_TRUE, TJ_NUM, TJ_STR, TJ_ARR, TJ_OBJ };

struct tj_node {
	int type;
	int32_t next;         /* sibling index, -1 at the end */
	int32_t first;        /* first child (array/object), -1 if empty */
	uint32_t n;           /* children */
	const char *key;      /* member name inside an object, NUL-terminated */
	const char *str;      /* string value, NUL-terminated */
	double num;
	int is_int;
};

struct tj_doc {
	struct tj_node *nodes;
	uint32_t n, cap;
	char errmsg[96];
	size_t errpos;        /* byte offset of a parse error */
};

/* Parse buf[0..len) (modified in place; buf[len] must be writable: it gets
 * a NUL).  Returns 0 and the root index 0, or -1 with doc->errmsg. */
int tj_parse(struct tj_doc *doc, char *buf, size_t len);
void tj_free(struct tj_doc *doc);
/* Member of object node o by key, or NULL. */
const struct tj_node *tj_get(const struct tj_doc *doc, const struct tj_node *o, const char *key);
static inline const struct tj_node *tj_child(const struct tj_doc *d, const struct tj_node *n)
{ return n->first < 0 ? NULL : &d->nodes[n->first]; }
static inline const struct tj_node *tj_next(const struct tj_doc *d, const struct tj_node *n)
{ return n->next < 0 ? NULL : &d->nodes[n->next]; }

#endif
