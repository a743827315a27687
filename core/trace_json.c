/* In-place JSON parser for JSONL trace lines: see trace_json.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_json.h"

struct tj_p {
	struct tj_doc *d;
	char *s, *end, *base;
	int depth;
};

static int fail(struct tj_p *p, const char *msg)
{
	if (!p->d->errmsg[0]) {
		snprintf(p->d->errmsg, sizeof(p->d->errmsg), "%s", msg);
		p->d->errpos = (size_t)(p->s - p->base);
	}
	return -1;
}

static int32_t new_node(struct tj_p *p, int type)
{
	struct tj_doc *d = p->d;
	if (d->n == d->cap) {
		uint32_t cap = d->cap ? d->cap * 2 : 256;
		struct tj_node *nn = realloc(d->nodes, cap * sizeof(*nn));
		if (!nn)
			return fail(p, "out of memory");
		d->nodes = nn;
		d->cap = cap;
	}
	struct tj_node *n = &d->nodes[d->n];
	memset(n, 0, sizeof(*n));
	n->type = type;
	n->next = n->first = -1;
	return (int32_t)d->n++;
}

static void ws(struct tj_p *p)
{
	while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\r' || *p->s == '\n'))
		p->s++;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Unescape in place; returns the start of the NUL-terminated string. */
static char *parse_string(struct tj_p *p)
{
	p->s++; /* opening quote */
	char *out = p->s, *start = p->s;
	while (p->s < p->end && *p->s != '"') {
		char c = *p->s++;
		if (c == '\\') {
			if (p->s >= p->end)
				break;
			char e = *p->s++;
			switch (e) {
			case 'n': *out++ = '\n'; break;
			case 't': *out++ = '\t'; break;
			case 'r': *out++ = '\r'; break;
			case 'b': *out++ = '\b'; break;
			case 'f': *out++ = '\f'; break;
			case 'u': {
				if (p->end - p->s < 4) {
					fail(p, "bad \\u escape");
					return NULL;
				}
				unsigned v = 0;
				for (int i = 0; i < 4; i++) {
					int h = hexval(p->s[i]);
					if (h < 0) {
						fail(p, "bad \\u escape");
						return NULL;
					}
					v = v * 16 + (unsigned)h;
				}
				p->s += 4;
				/* UTF-8 encode (surrogates kept as-is: names only) */
				if (v < 0x80) {
					*out++ = (char)v;
				} else if (v < 0x800) {
					*out++ = (char)(0xC0 | (v >> 6));
					*out++ = (char)(0x80 | (v & 0x3F));
				} else {
					*out++ = (char)(0xE0 | (v >> 12));
					*out++ = (char)(0x80 | ((v >> 6) & 0x3F));
					*out++ = (char)(0x80 | (v & 0x3F));
				}
				break;
			}
			default: *out++ = e; break;
			}
		} else {
			*out++ = c;
		}
	}
	if (p->s >= p->end) {
		fail(p, "unterminated string");
		return NULL;
	}
	p->s++; /* closing quote */
	*out = 0; /* safe: out <= closing quote position */
	return start;
}

static int32_t parse_value(struct tj_p *p);

static int32_t parse_number(struct tj_p *p)
{
	int32_t i = new_node(p, TJ_NUM);
	if (i < 0)
		return -1;
	char *s = p->s;
	int neg = 0;
	if (s < p->end && *s == '-') {
		neg = 1;
		s++;
	}
	uint64_t v = 0;
	char *digits = s;
	while (s < p->end && *s >= '0' && *s <= '9' && s - digits < 18)
		v = v * 10 + (uint64_t)(*s++ - '0');
	struct tj_node *n = &p->d->nodes[i];
	if (s > digits && (s >= p->end || (*s != '.' && *s != 'e' && *s != 'E' && !(*s >= '0' && *s <= '9')))) {
		n->num = neg ? -(double)v : (double)v;
		n->is_int = 1;
		p->s = s;
		return i;
	}
	char save = *p->end; /* strtod needs a terminator: end is writable by contract */
	*p->end = 0;
	char *e;
	n->num = strtod(p->s, &e);
	*p->end = save;
	if (e == p->s)
		return fail(p, "bad number");
	n->is_int = 0;
	p->s = e;
	return i;
}

static int32_t parse_container(struct tj_p *p, int type)
{
	int32_t i = new_node(p, type);
	if (i < 0)
		return -1;
	if (++p->depth > 32)
		return fail(p, "nesting too deep");
	char close = type == TJ_ARR ? ']' : '}';
	p->s++;
	ws(p);
	int32_t last = -1;
	if (p->s < p->end && *p->s == close) {
		p->s++;
		p->depth--;
		return i;
	}
	for (;;) {
		ws(p);
		const char *key = NULL;
		if (type == TJ_OBJ) {
			if (p->s >= p->end || *p->s != '"')
				return fail(p, "expected a member name");
			key = parse_string(p);
			if (!key)
				return -1;
			ws(p);
			if (p->s >= p->end || *p->s != ':')
				return fail(p, "expected ':'");
			p->s++;
		}
		int32_t c = parse_value(p);
		if (c < 0)
			return -1;
		p->d->nodes[c].key = key;
		if (last < 0)
			p->d->nodes[i].first = c;
		else
			p->d->nodes[last].next = c;
		last = c;
		p->d->nodes[i].n++;
		ws(p);
		if (p->s < p->end && *p->s == ',') {
			p->s++;
			continue;
		}
		if (p->s < p->end && *p->s == close) {
			p->s++;
			break;
		}
		return fail(p, type == TJ_ARR ? "expected ',' or ']'" : "expected ',' or '}'");
	}
	p->depth--;
	return i;
}

static int32_t parse_value(struct tj_p *p)
{
	ws(p);
	if (p->s >= p->end)
		return fail(p, "unexpected end of line");
	char c = *p->s;
	if (c == '{')
		return parse_container(p, TJ_OBJ);
	if (c == '[')
		return parse_container(p, TJ_ARR);
	if (c == '"') {
		int32_t i = new_node(p, TJ_STR);
		if (i < 0)
			return -1;
		char *s = parse_string(p);
		if (!s)
			return -1;
		p->d->nodes[i].str = s;
		return i;
	}
	if (c == '-' || (c >= '0' && c <= '9'))
		return parse_number(p);
	static const struct { const char *w; int t; } words[] = {
		{ "true", TJ_TRUE }, { "false", TJ_FALSE }, { "null", TJ_NULL },
		{ "NaN", TJ_NUM }, { "Infinity", TJ_NUM },
	};
	for (size_t k = 0; k < sizeof(words) / sizeof(words[0]); k++) {
		size_t l = strlen(words[k].w);
		if ((size_t)(p->end - p->s) >= l && !memcmp(p->s, words[k].w, l)) {
			int32_t i = new_node(p, words[k].t);
			if (i < 0)
				return -1;
			if (words[k].t == TJ_NUM)
				p->d->nodes[i].num = k == 3 ? 0.0 / 0.0 : 1.0 / 0.0;
			p->s += l;
			return i;
		}
	}
	return fail(p, "unexpected character");
}

int tj_parse(struct tj_doc *doc, char *buf, size_t len)
{
	struct tj_p p = { .d = doc, .s = buf, .end = buf + len, .base = buf };
	doc->n = 0;
	doc->errmsg[0] = 0;
	doc->errpos = 0;
	buf[len] = 0;
	if (parse_value(&p) < 0)
		return -1;
	ws(&p);
	if (p.s != p.end) {
		fail(&p, "trailing characters");
		return -1;
	}
	return 0;
}

void tj_free(struct tj_doc *doc)
{
	free(doc->nodes);
	memset(doc, 0, sizeof(*doc));
}

const struct tj_node *tj_get(const struct tj_doc *doc, const struct tj_node *o, const char *key)
{
	if (!o || o->type != TJ_OBJ)
		return NULL;
	for (const struct tj_node *c = tj_child(doc, o); c; c = tj_next(doc, c))
		if (!strcmp(c->key, key))
			return c;
	return NULL;
}
