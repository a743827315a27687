/*
 * Strict JSON reader: see include/strata/json.h.  Recursive descent over the
 * input, nodes and strings allocated from a per-document arena (a chain of
 * blocks freed together), so a document is one malloc chain and no node is
 * ever freed alone.  Containers collect their members in a scratch vector and
 * copy them into the arena when closed, so members are contiguous.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "strata/json.h"

struct arena_block {
	struct arena_block *next;
	size_t used, cap;
	_Alignas(16) unsigned char data[];
};

struct strata_json_doc {
	struct arena_block *blocks;
	struct strata_json root;
};

struct parser {
	const char *s;
	size_t n, p;
	const char *what;
	struct strata_json_doc *doc;
	struct strata_error *err;
	int depth;
};

static void *arena_alloc(struct strata_json_doc *d, size_t bytes)
{
	bytes = (bytes + 15) & ~(size_t)15;
	struct arena_block *b = d->blocks;
	if (!b || b->cap - b->used < bytes) {
		size_t cap = bytes > 65536 ? bytes : 65536;
		b = malloc(sizeof(*b) + cap);
		if (!b)
			return NULL;
		b->used = 0;
		b->cap = cap;
		b->next = d->blocks;
		d->blocks = b;
	}
	void *p = b->data + b->used;
	b->used += bytes;
	return p;
}

static int perr(struct parser *ps, size_t at, const char *msg)
{
	return STRATA_ERR(ps->err, STRATA_ECORRUPT, "%s: bad JSON at byte %zu: %s", ps->what, at, msg);
}

static int nomem(struct parser *ps)
{
	return STRATA_ERR(ps->err, STRATA_ENOMEM, "%s: out of memory parsing JSON", ps->what);
}

static void skip_ws(struct parser *ps)
{
	while (ps->p < ps->n) {
		char c = ps->s[ps->p];
		if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
			break;
		ps->p++;
	}
}

static int hex4(struct parser *ps, size_t at, uint32_t *out)
{
	if (ps->n - at < 4)
		return perr(ps, at, "truncated \\u escape");
	uint32_t v = 0;
	for (int i = 0; i < 4; i++) {
		char c = ps->s[at + i];
		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (uint32_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (uint32_t)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (uint32_t)(c - 'A' + 10);
		else
			return perr(ps, at + i, "bad hex digit in \\u escape");
	}
	*out = v;
	return 0;
}

static size_t put_utf8(char *o, uint32_t cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xc0 | (cp >> 6));
		o[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xe0 | (cp >> 12));
		o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | (cp >> 18));
	o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	o[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* Length of a valid UTF-8 sequence starting at s[0] (n bytes left), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	size_t len;
	uint32_t cp;
	if (c < 0x80)
		return 1;
	if ((c & 0xe0) == 0xc0) {
		len = 2;
		cp = c & 0x1f;
	} else if ((c & 0xf0) == 0xe0) {
		len = 3;
		cp = c & 0x0f;
	} else if ((c & 0xf8) == 0xf0) {
		len = 4;
		cp = c & 0x07;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
	    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

/* ps->p at the opening quote.  Decoded bytes never exceed the raw length. */
static int parse_string(struct parser *ps, const char **out, uint32_t *out_len)
{
	size_t start = ps->p++;
	size_t end = ps->p;
	while (end < ps->n && ps->s[end] != '"') {
		if (ps->s[end] == '\\')
			end++;
		end++;
	}
	if (end >= ps->n)
		return perr(ps, start, "unterminated string");
	if (end - start > UINT32_MAX)
		return perr(ps, start, "string too long");
	char *o = arena_alloc(ps->doc, end - start + 1);
	if (!o)
		return nomem(ps);
	size_t k = 0;
	while (ps->p < end) {
		unsigned char c = (unsigned char)ps->s[ps->p];
		if (c < 0x20)
			return perr(ps, ps->p, "control character in string");
		if (c != '\\') {
			size_t l = utf8_len((const unsigned char *)ps->s + ps->p, end - ps->p);
			if (!l)
				return perr(ps, ps->p, "invalid UTF-8 in string");
			memcpy(o + k, ps->s + ps->p, l);
			k += l;
			ps->p += l;
			continue;
		}
		size_t esc = ps->p;
		char e = ps->s[ps->p + 1];
		ps->p += 2;
		switch (e) {
		case '"': o[k++] = '"'; break;
		case '\\': o[k++] = '\\'; break;
		case '/': o[k++] = '/'; break;
		case 'b': o[k++] = '\b'; break;
		case 'f': o[k++] = '\f'; break;
		case 'n': o[k++] = '\n'; break;
		case 'r': o[k++] = '\r'; break;
		case 't': o[k++] = '\t'; break;
		case 'u': {
			uint32_t cp;
			if (ps->p + 4 > end)
				return perr(ps, esc, "truncated \\u escape");
			int rc = hex4(ps, ps->p, &cp);
			if (rc)
				return rc;
			ps->p += 4;
			if (cp >= 0xdc00 && cp <= 0xdfff)
				return perr(ps, esc, "unpaired low surrogate");
			if (cp >= 0xd800 && cp <= 0xdbff) {
				uint32_t lo;
				if (ps->p + 6 > end || ps->s[ps->p] != '\\' || ps->s[ps->p + 1] != 'u')
					return perr(ps, esc, "unpaired high surrogate");
				if ((rc = hex4(ps, ps->p + 2, &lo)))
					return rc;
				if (lo < 0xdc00 || lo > 0xdfff)
					return perr(ps, esc, "unpaired high surrogate");
				ps->p += 6;
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			}
			k += put_utf8(o + k, cp);
			break;
		}
		default:
			return perr(ps, esc, "bad escape in string");
		}
	}
	o[k] = '\0';
	ps->p = end + 1;
	*out = o;
	*out_len = (uint32_t)k;
	return 0;
}

static int parse_number(struct parser *ps, struct strata_json *v)
{
	size_t start = ps->p, p = ps->p;
	const char *s = ps->s;
	int neg = 0, frac = 0;
	if (p < ps->n && s[p] == '-') {
		neg = 1;
		p++;
	}
	if (p >= ps->n || s[p] < '0' || s[p] > '9')
		return perr(ps, start, "bad number");
	if (s[p] == '0' && p + 1 < ps->n && s[p + 1] >= '0' && s[p + 1] <= '9')
		return perr(ps, start, "leading zero in number");
	while (p < ps->n && s[p] >= '0' && s[p] <= '9')
		p++;
	size_t int_end = p;
	if (p < ps->n && s[p] == '.') {
		frac = 1;
		p++;
		if (p >= ps->n || s[p] < '0' || s[p] > '9')
			return perr(ps, p, "digit expected after '.'");
		while (p < ps->n && s[p] >= '0' && s[p] <= '9')
			p++;
	}
	if (p < ps->n && (s[p] == 'e' || s[p] == 'E')) {
		frac = 1;
		p++;
		if (p < ps->n && (s[p] == '+' || s[p] == '-'))
			p++;
		if (p >= ps->n || s[p] < '0' || s[p] > '9')
			return perr(ps, p, "digit expected in exponent");
		while (p < ps->n && s[p] >= '0' && s[p] <= '9')
			p++;
	}
	char buf[64];
	size_t len = p - start;
	char *tmp = len < sizeof(buf) ? buf : malloc(len + 1);
	if (!tmp)
		return nomem(ps);
	memcpy(tmp, s + start, len);
	tmp[len] = '\0';
	v->type = STRATA_JSON_NUMBER;
	v->num = strtod(tmp, NULL);
	if (tmp != buf)
		free(tmp);
	if (!isfinite(v->num))
		return perr(ps, start, "number out of range");
	if (!frac) {
		/* exact integer value, if it fits */
		uint64_t mag = 0;
		int over = 0;
		for (size_t i = start + (size_t)neg; i < int_end; i++) {
			uint64_t d = (uint64_t)(s[i] - '0');
			if (mag > (UINT64_MAX - d) / 10)
				over = 1;
			else
				mag = mag * 10 + d;
		}
		if (!over) {
			if (!neg) {
				v->is_uint = true;
				v->u = mag;
				if (mag <= (uint64_t)INT64_MAX) {
					v->is_int = true;
					v->i = (int64_t)mag;
				}
			} else if (mag <= (uint64_t)INT64_MAX + 1) {
				v->is_int = true;
				v->i = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
			}
		}
	}
	ps->p = p;
	return 0;
}

static int parse_value(struct parser *ps, struct strata_json *v);

static int parse_container(struct parser *ps, struct strata_json *v, int object)
{
	char close = object ? '}' : ']';
	size_t open_at = ps->p;
	if (++ps->depth > STRATA_JSON_MAX_DEPTH)
		return perr(ps, ps->p, "nesting too deep");
	ps->p++;
	struct strata_json *tmp = NULL;
	size_t n = 0, cap = 0;
	int rc = 0;
	skip_ws(ps);
	if (ps->p < ps->n && ps->s[ps->p] == close) {
		ps->p++;
		goto done;
	}
	for (;;) {
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 8;
			struct strata_json *t = realloc(tmp, ncap * sizeof(*t));
			if (!t) {
				rc = nomem(ps);
				goto out;
			}
			tmp = t;
			cap = ncap;
		}
		struct strata_json *m = &tmp[n];
		memset(m, 0, sizeof(*m));
		skip_ws(ps);
		if (object) {
			if (ps->p >= ps->n || ps->s[ps->p] != '"') {
				rc = perr(ps, ps->p, ps->p >= ps->n ? "unexpected end inside object"
								   : "expected string key in object");
				goto out;
			}
			if ((rc = parse_string(ps, &m->key, &m->key_len)))
				goto out;
			skip_ws(ps);
			if (ps->p >= ps->n || ps->s[ps->p] != ':') {
				rc = perr(ps, ps->p, "expected ':' after object key");
				goto out;
			}
			ps->p++;
			skip_ws(ps);
		}
		const char *key = m->key;
		uint32_t key_len = m->key_len;
		if ((rc = parse_value(ps, m)))
			goto out;
		m->key = key;
		m->key_len = key_len;
		n++;
		skip_ws(ps);
		if (ps->p >= ps->n) {
			rc = perr(ps, open_at, object ? "unterminated object" : "unterminated array");
			goto out;
		}
		if (ps->s[ps->p] == ',') {
			ps->p++;
			continue;
		}
		if (ps->s[ps->p] == close) {
			ps->p++;
			break;
		}
		rc = perr(ps, ps->p, object ? "expected ',' or '}' in object" : "expected ',' or ']' in array");
		goto out;
	}
done:
	if (n > UINT32_MAX) {
		rc = perr(ps, open_at, "too many members");
		goto out;
	}
	v->type = object ? STRATA_JSON_OBJECT : STRATA_JSON_ARRAY;
	v->len = (uint32_t)n;
	if (n) {
		v->items = arena_alloc(ps->doc, n * sizeof(*tmp));
		if (!v->items) {
			rc = nomem(ps);
			goto out;
		}
		memcpy(v->items, tmp, n * sizeof(*tmp));
	}
out:
	free(tmp);
	ps->depth--;
	return rc;
}

static int parse_literal(struct parser *ps, const char *lit)
{
	size_t l = strlen(lit);
	if (ps->n - ps->p < l || memcmp(ps->s + ps->p, lit, l))
		return perr(ps, ps->p, "unexpected character");
	ps->p += l;
	return 0;
}

static int parse_value(struct parser *ps, struct strata_json *v)
{
	skip_ws(ps);
	memset(v, 0, sizeof(*v));
	v->pos = ps->p;
	if (ps->p >= ps->n)
		return perr(ps, ps->p, "unexpected end of input");
	switch (ps->s[ps->p]) {
	case '{':
		return parse_container(ps, v, 1);
	case '[':
		return parse_container(ps, v, 0);
	case '"':
		v->type = STRATA_JSON_STRING;
		return parse_string(ps, &v->str, &v->len);
	case 't':
		v->type = STRATA_JSON_BOOL;
		v->boolean = true;
		return parse_literal(ps, "true");
	case 'f':
		v->type = STRATA_JSON_BOOL;
		return parse_literal(ps, "false");
	case 'n':
		v->type = STRATA_JSON_NULL;
		return parse_literal(ps, "null");
	default:
		if (ps->s[ps->p] == '-' || (ps->s[ps->p] >= '0' && ps->s[ps->p] <= '9'))
			return parse_number(ps, v);
		return perr(ps, ps->p, "unexpected character");
	}
}

int strata_json_parse(const char *text, size_t len, const char *what, struct strata_json_doc **out,
		      struct strata_error *err)
{
	*out = NULL;
	struct strata_json_doc *d = calloc(1, sizeof(*d));
	if (!d)
		return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", what ? what : "JSON");
	struct parser ps = { .s = text, .n = len, .what = what ? what : "JSON", .doc = d, .err = err };
	int rc = parse_value(&ps, &d->root);
	if (!rc) {
		skip_ws(&ps);
		if (ps.p != ps.n)
			rc = perr(&ps, ps.p, "trailing data after the JSON value");
	}
	if (rc) {
		strata_json_free(d);
		return rc;
	}
	*out = d;
	return STRATA_OK;
}

int strata_json_parse_file(const char *path, size_t max_bytes, struct strata_json_doc **out,
			   struct strata_error *err)
{
	*out = NULL;
	if (!max_bytes)
		max_bytes = 256u << 20;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return strata_error_set(err, errno == ENOENT ? STRATA_ENOTFOUND : STRATA_EIO, errno, __FILE__,
					__LINE__, "%s: cannot open", path);
	struct stat st;
	if (fstat(fd, &st)) {
		close(fd);
		return STRATA_ERRNO(err, STRATA_EIO, "%s: stat", path);
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return STRATA_ERR(err, STRATA_EINVAL, "%s: not a regular file", path);
	}
	if ((uint64_t)st.st_size > max_bytes) {
		close(fd);
		return STRATA_ERR(err, STRATA_EINVAL, "%s: JSON file too large (%lld bytes, limit %zu)", path,
				  (long long)st.st_size, max_bytes);
	}
	size_t n = (size_t)st.st_size;
	char *buf = malloc(n ? n : 1);
	if (!buf) {
		close(fd);
		return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", path);
	}
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, buf + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			int e = errno;
			free(buf);
			close(fd);
			if (r == 0)
				return STRATA_ERR(err, STRATA_EIO, "%s: file shrank while reading", path);
			return strata_error_set(err, STRATA_EIO, e, __FILE__, __LINE__, "%s: read", path);
		}
		got += (size_t)r;
	}
	close(fd);
	int rc = strata_json_parse(buf, n, path, out, err);
	free(buf);
	return rc;
}

void strata_json_free(struct strata_json_doc *d)
{
	if (!d)
		return;
	while (d->blocks) {
		struct arena_block *b = d->blocks;
		d->blocks = b->next;
		free(b);
	}
	free(d);
}

const struct strata_json *strata_json_root(const struct strata_json_doc *d)
{
	return &d->root;
}

const struct strata_json *strata_json_get(const struct strata_json *v, const char *key)
{
	if (!v || v->type != STRATA_JSON_OBJECT)
		return NULL;
	size_t kl = strlen(key);
	for (uint32_t i = 0; i < v->len; i++)
		if (v->items[i].key_len == kl && !memcmp(v->items[i].key, key, kl))
			return &v->items[i];
	return NULL;
}

const struct strata_json *strata_json_at(const struct strata_json *v, uint32_t i)
{
	if (!v || (v->type != STRATA_JSON_ARRAY && v->type != STRATA_JSON_OBJECT) || i >= v->len)
		return NULL;
	return &v->items[i];
}

const char *strata_json_type_name(int type)
{
	static const char *const names[] = { "null", "bool", "number", "string", "array", "object" };
	return type >= 0 && type <= STRATA_JSON_OBJECT ? names[type] : "?";
}

void strata_json_write_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; p && *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p < 0x20)
			fprintf(f, "\\u%04x", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}
