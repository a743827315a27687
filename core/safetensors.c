/*
 * Safetensors reader and writer: see include/strata/safetensors.h.
 *
 * Opening reads each file's 8-byte length and JSON header with pread and
 * checks every claim against the file size before anything is trusted.  Data
 * is read later, on demand, with pread into the caller's buffer and converted
 * in place: a BF16/F16 range is read into the upper half of the float output
 * and widened from the front, which never overwrites bytes not yet converted
 * (element i's 4 output bytes end at 4i+4 <= 2n+2i+2, where element i+1's
 * input begins).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant.h"
#include "strata/json.h"
#include "strata/safetensors.h"
#include "strata/util.h"

#if defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#endif

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

static const struct {
	const char *name;
	uint32_t size;
} dtypes[STRATA_SAFETENSORS_DTYPE_COUNT] = {
	[STRATA_SAFETENSORS_BOOL] = { "BOOL", 1 },       [STRATA_SAFETENSORS_U8] = { "U8", 1 },
	[STRATA_SAFETENSORS_I8] = { "I8", 1 },           [STRATA_SAFETENSORS_F8_E4M3] = { "F8_E4M3", 1 },
	[STRATA_SAFETENSORS_F8_E5M2] = { "F8_E5M2", 1 }, [STRATA_SAFETENSORS_I16] = { "I16", 2 },
	[STRATA_SAFETENSORS_U16] = { "U16", 2 },         [STRATA_SAFETENSORS_F16] = { "F16", 2 },
	[STRATA_SAFETENSORS_BF16] = { "BF16", 2 },       [STRATA_SAFETENSORS_I32] = { "I32", 4 },
	[STRATA_SAFETENSORS_U32] = { "U32", 4 },         [STRATA_SAFETENSORS_F32] = { "F32", 4 },
	[STRATA_SAFETENSORS_F64] = { "F64", 8 },         [STRATA_SAFETENSORS_I64] = { "I64", 8 },
	[STRATA_SAFETENSORS_U64] = { "U64", 8 },
};

const char *strata_safetensors_dtype_name(int dtype)
{
	return dtype >= 0 && dtype < STRATA_SAFETENSORS_DTYPE_COUNT ? dtypes[dtype].name : "?";
}

int strata_safetensors_dtype_from_name(const char *name)
{
	for (int i = 0; i < STRATA_SAFETENSORS_DTYPE_COUNT; i++)
		if (!strcmp(dtypes[i].name, name))
			return i;
	return -1;
}

uint32_t strata_safetensors_dtype_size(int dtype)
{
	return dtype >= 0 && dtype < STRATA_SAFETENSORS_DTYPE_COUNT ? dtypes[dtype].size : 0;
}

bool strata_safetensors_dtype_is_float(int dtype)
{
	return dtype == STRATA_SAFETENSORS_F16 || dtype == STRATA_SAFETENSORS_BF16 || dtype == STRATA_SAFETENSORS_F32 || dtype == STRATA_SAFETENSORS_F64 ||
	       dtype == STRATA_SAFETENSORS_F8_E4M3 || dtype == STRATA_SAFETENSORS_F8_E5M2;
}

float strata_f8e4m3_to_f32(uint8_t b)
{
	/* OCP E4M3 ("fn"): bias 7, no infinities, S.1111.111 is NaN */
	int e = (b >> 3) & 15, m = b & 7;
	float v;
	if (e == 15 && m == 7)
		v = NAN;
	else if (e == 0)
		v = ldexpf((float)m, -9); /* m/8 * 2^-6 */
	else
		v = ldexpf((float)(8 + m), e - 10); /* (1 + m/8) * 2^(e-7) */
	return b & 0x80 ? -v : v;
}

float strata_f8e5m2_to_f32(uint8_t b)
{
	return strata_f16_to_f32((uint16_t)(b << 8)); /* E5M2 is the top byte of an IEEE half */
}

/* ---- reader ------------------------------------------------------------- */

struct st_file {
	char *path;
	int fd;         /* -1 for an in-memory image */
	uint64_t size;
	uint64_t data_start;
	int input_slot; /* strata_input_note */
};

struct st_meta {
	char *key, *value;
};

struct strata_safetensors {
	struct st_file *files;
	uint32_t n_files;
	struct strata_safetensors_tensor *t;
	uint32_t n, cap;
	struct st_meta *meta;
	uint32_t n_meta;
	const unsigned char *image; /* open_image: no reads */
	int dir_slot;               /* strata_input_note of a model directory */
};

static int st_pread(int fd, void *buf, uint64_t bytes, uint64_t off, const char *path, struct strata_error *err)
{
	unsigned char *p = buf;
	while (bytes) {
		size_t chunk = bytes > (1u << 30) ? (1u << 30) : (size_t)bytes;
		ssize_t r = pread(fd, p, chunk, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return STRATA_ERRNO(err, STRATA_EIO, "%s: read at byte %llu", path, (unsigned long long)off);
		if (r == 0)
			return STRATA_ERR(err, STRATA_ECORRUPT, "%s: truncated: file ends before byte %llu", path,
					  (unsigned long long)(off + bytes));
		p += r;
		off += (uint64_t)r;
		bytes -= (uint64_t)r;
	}
	return STRATA_OK;
}

static int add_meta(struct strata_safetensors *st, const char *key, const char *value, const char *path,
		    struct strata_error *err)
{
	struct st_meta *m = realloc(st->meta, (st->n_meta + 1) * sizeof(*m));
	if (!m)
		return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", path);
	st->meta = m;
	m[st->n_meta].key = strdup(key);
	m[st->n_meta].value = strdup(value);
	if (!m[st->n_meta].key || !m[st->n_meta].value) {
		free(m[st->n_meta].key);
		free(m[st->n_meta].value);
		return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", path);
	}
	st->n_meta++;
	return STRATA_OK;
}

static int parse_metadata(struct strata_safetensors *st, const struct strata_json *m, const char *path,
			  const char *what, struct strata_error *err)
{
	if (m->type != STRATA_JSON_OBJECT)
		return STRATA_ERR(err, STRATA_ECORRUPT, "%s: %s at byte %zu is a %s, not an object", path, what,
				  m->pos, strata_json_type_name(m->type));
	for (uint32_t i = 0; i < m->len; i++) {
		const struct strata_json *v = &m->items[i];
		if (v->type != STRATA_JSON_STRING)
			return STRATA_ERR(err, STRATA_ECORRUPT, "%s: %s key '%s' is a %s, not a string", path, what,
					  v->key, strata_json_type_name(v->type));
		if (strlen(v->key) != v->key_len || strlen(v->str) != v->len)
			return STRATA_ERR(err, STRATA_ECORRUPT, "%s: %s entry holds a NUL character", path, what);
		if (st->n_files <= 1) {
			int rc = add_meta(st, v->key, v->str, path, err);
			if (rc)
				return rc;
		}
	}
	return STRATA_OK;
}

static int get_u64(const struct strata_json *v, uint64_t *out)
{
	if (!v || v->type != STRATA_JSON_NUMBER || !v->is_uint)
		return -1;
	*out = v->u;
	return 0;
}

static int parse_tensor(struct strata_safetensors *st, uint32_t file, const struct strata_json *v, uint64_t data_bytes,
			const char *path, struct strata_error *err)
{
	const char *name = v->key;
	if (strlen(name) != v->key_len || !v->key_len)
		return STRATA_ERR(err, STRATA_ECORRUPT, "%s: tensor name at byte %zu is empty or holds a NUL", path,
				  v->pos);
	if (v->type != STRATA_JSON_OBJECT)
		return STRATA_ERR(err, STRATA_ECORRUPT, "%s: tensor '%s': entry is a %s, not an object", path, name,
				  strata_json_type_name(v->type));
	for (uint32_t i = 0; i < v->len; i++) {
		const char *k = v->items[i].key;
		if (strcmp(k, "dtype") && strcmp(k, "shape") && strcmp(k, "data_offsets"))
			return STRATA_ERR(err, STRATA_ECORRUPT, "%s: tensor '%s': unknown field '%s'", path, name, k);
	}
	const struct strata_json *dt = strata_json_get(v, "dtype");
	const struct strata_json *sh = strata_json_get(v, "shape");
	const struct strata_json *off = strata_json_get(v, "data_offsets");
	if (!dt || dt->type != STRATA_JSON_STRING)
		return STRATA_ERR(err, STRATA_ECORRUPT, "%s: tensor '%s': missing or non-string dtype", path, name);
	int dtype = strata_safetensors_dtype_from_name(dt->str);
	if (dtype < 0)
		return STRATA_ERR(err, STRATA_ECORRUPT, "%s: tensor '%s': bad dtype '%.32s'", path, name, dt->str);
	if (!sh || sh->type != STRATA_JSON_ARRAY)
		return STRATA_ERR(err, STRATA_ECORRUPT, "%s: tensor '%s': missing or non-array shape", path, name);
	if (sh->len > STRATA_SAFETENSORS_MAX_DIMS)
		return STRATA_ERR(err, STRATA_ECORRUPT, "%s: tensor '%s': %u dimensions (at most %d)", path, name,
				  sh->len, STRATA_SAFETENSORS_MAX_DIMS);
	if (!off || off->type != STRATA_JSON_ARRAY || off->len != 2)
		return STRATA_ERR(err, STRATA_ECORRUPT, "%s: tensor '%s': data_offsets must be [begin, end]", path,
				  name);
	struct strata_safetensors_tensor t = { .dtype = dtype, .ndim = sh->len, .file = file };
	uint64_t numel = 1;
	for (uint32_t d = 0; d < sh->len; d++) {
		if (get_u64(&sh->items[d], &t.shape[d]))
			return STRATA_ERR(err, STRATA_ECORRUPT, "%s: tensor '%s': shape[%u] is not a non-negative integer",
					  path, name, d);
		if (t.shape[d] && numel > UINT64_MAX / t.shape[d])
			return STRATA_ERR(err, STRATA_ECORRUPT, "%s: tensor '%s': shape overflows", path, name);
		numel *= t.shape[d];
	}
	uint64_t b, e;
	if (get_u64(&off->items[0], &b) || get_u64(&off->items[1], &e))
		return STRATA_ERR(err, STRATA_ECORRUPT, "%s: tensor '%s': data_offsets are not non-negative integers",
				  path, name);
	if (b > e)
		return STRATA_ERR(err, STRATA_ECORRUPT, "%s: tensor '%s': data_offsets [%llu, %llu) run backwards", path,
				  name, (unsigned long long)b, (unsigned long long)e);
	uint32_t es = strata_safetensors_dtype_size(dtype);
	if (numel > UINT64_MAX / es)
		return STRATA_ERR(err, STRATA_ECORRUPT, "%s: tensor '%s': size overflows", path, name);
	if (e - b != numel * es)
		return STRATA_ERR(err, STRATA_ECORRUPT,
				  "%s: tensor '%s': data_offsets [%llu, %llu) hold %llu bytes, but %s shape needs %llu",
				  path, name, (unsigned long long)b, (unsigned long long)e,
				  (unsigned long long)(e - b), dtypes[dtype].name, (unsigned long long)(numel * es));
	if (e > data_bytes)
		return STRATA_ERR(err, STRATA_ECORRUPT,
				  "%s: truncated: tensor '%s' data_offsets [%llu, %llu) run past the data region (%llu bytes)",
				  path, name, (unsigned long long)b, (unsigned long long)e, (unsigned long long)data_bytes);
	t.numel = numel;
	t.bytes = e - b;
	t.offset = st->files[file].data_start + b;
	if (st->n == st->cap) {
		uint32_t ncap = st->cap ? st->cap * 2 : 64;
		struct strata_safetensors_tensor *nt = realloc(st->t, ncap * sizeof(*nt));
		if (!nt)
			return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", path);
		st->t = nt;
		st->cap = ncap;
	}
	t.name = strdup(name);
	if (!t.name)
		return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", path);
	st->t[st->n++] = t;
	return STRATA_OK;
}

static int cmp_by_offset(const void *a, const void *b)
{
	const struct strata_safetensors_tensor *x = *(const struct strata_safetensors_tensor *const *)a;
	const struct strata_safetensors_tensor *y = *(const struct strata_safetensors_tensor *const *)b;
	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	return x->bytes < y->bytes ? -1 : x->bytes > y->bytes;
}

/* Parse the JSON header of file `file`; its tensors are appended to st->t. */
static int parse_header(struct strata_safetensors *st, uint32_t file, const char *json, size_t jlen, struct strata_error *err)
{
	struct st_file *f = &st->files[file];
	uint64_t data_bytes = f->size - f->data_start;
	struct strata_json_doc *doc;
	char what[PATH_MAX + 64];
	/* JSON byte positions count from the header's first byte (file byte 8) */
	snprintf(what, sizeof(what), "%s: header", f->path);
	int rc = strata_json_parse(json, jlen, what, &doc, err);
	if (rc)
		return rc;
	const struct strata_json *root = strata_json_root(doc);
	uint32_t first = st->n;
	if (root->type != STRATA_JSON_OBJECT) {
		rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: header is a JSON %s, not an object", f->path,
				strata_json_type_name(root->type));
		goto out;
	}
	int seen_meta = 0;
	for (uint32_t i = 0; i < root->len && !rc; i++) {
		const struct strata_json *v = &root->items[i];
		if (!strcmp(v->key, "__metadata__")) {
			if (seen_meta++)
				rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: duplicate __metadata__", f->path);
			else
				rc = parse_metadata(st, v, f->path, "__metadata__", err);
		} else {
			rc = parse_tensor(st, file, v, data_bytes, f->path, err);
		}
	}
	if (rc)
		goto out;
	/* overlap check within this file */
	uint32_t n = st->n - first;
	if (n > 1) {
		const struct strata_safetensors_tensor **v = malloc(n * sizeof(*v));
		if (!v) {
			rc = STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", f->path);
			goto out;
		}
		for (uint32_t i = 0; i < n; i++)
			v[i] = &st->t[first + i];
		qsort(v, n, sizeof(*v), cmp_by_offset);
		const struct strata_safetensors_tensor *prev = NULL;
		for (uint32_t i = 0; i < n && !rc; i++) {
			if (!v[i]->bytes)
				continue;
			if (prev && v[i]->offset < prev->offset + prev->bytes) {
				uint64_t ds = f->data_start;
				rc = STRATA_ERR(err, STRATA_ECORRUPT,
						"%s: tensor '%s' data_offsets [%llu, %llu) overlap tensor '%s' [%llu, %llu)",
						f->path, v[i]->name, (unsigned long long)(v[i]->offset - ds),
						(unsigned long long)(v[i]->offset - ds + v[i]->bytes), prev->name,
						(unsigned long long)(prev->offset - ds),
						(unsigned long long)(prev->offset - ds + prev->bytes));
			}
			if (!prev || v[i]->offset + v[i]->bytes > prev->offset + prev->bytes)
				prev = v[i];
		}
		free(v);
	}
out:
	strata_json_free(doc);
	return rc;
}

static int add_file(struct strata_safetensors *st, const char *path, struct strata_error *err)
{
	struct st_file *nf = realloc(st->files, (st->n_files + 1) * sizeof(*nf));
	if (!nf)
		return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", path);
	st->files = nf;
	struct st_file *f = &nf[st->n_files];
	memset(f, 0, sizeof(*f));
	f->fd = -1;
	f->input_slot = -1;
	f->path = strdup(path);
	if (!f->path)
		return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", path);
	st->n_files++;
	return STRATA_OK;
}

/* Validate the 8-byte length prefix against the file size; sets data_start. */
static int check_prefix(struct st_file *f, const unsigned char *le8, uint64_t *hlen, struct strata_error *err)
{
	if (f->size < 8)
		return STRATA_ERR(err, STRATA_ECORRUPT, "%s: truncated: %llu bytes, too short for a safetensors header",
				  f->path, (unsigned long long)f->size);
	uint64_t n = strata_le_get64(le8);
	if (n > STRATA_SAFETENSORS_MAX_HEADER)
		return STRATA_ERR(err, STRATA_ECORRUPT, "%s: header length %llu exceeds the %u-byte limit (not a safetensors file?)",
				  f->path, (unsigned long long)n, STRATA_SAFETENSORS_MAX_HEADER);
	if (n > f->size - 8)
		return STRATA_ERR(err, STRATA_ECORRUPT, "%s: truncated: header claims %llu bytes, file holds %llu after the prefix",
				  f->path, (unsigned long long)n, (unsigned long long)(f->size - 8));
	if (n < 2)
		return STRATA_ERR(err, STRATA_ECORRUPT, "%s: header length %llu is too small", f->path,
				  (unsigned long long)n);
	*hlen = n;
	f->data_start = 8 + n;
	return STRATA_OK;
}

static int open_file(struct strata_safetensors *st, const char *path, struct strata_error *err)
{
	int rc = add_file(st, path, err);
	if (rc)
		return rc;
	uint32_t idx = st->n_files - 1;
	struct st_file *f = &st->files[idx];
	f->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block the open */
	if (f->fd < 0)
		return strata_error_set(err, errno == ENOENT ? STRATA_ENOTFOUND : STRATA_EIO, errno, __FILE__,
					__LINE__, "%s: cannot open", path);
	f->input_slot = strata_input_note(path);
	struct stat sb;
	if (fstat(f->fd, &sb))
		return STRATA_ERRNO(err, STRATA_EIO, "%s: stat", path);
	if (!S_ISREG(sb.st_mode))
		return STRATA_ERR(err, STRATA_EINVAL, "%s: not a regular file", path);
	f->size = (uint64_t)sb.st_size;
	unsigned char le8[8] = { 0 };
	if (f->size >= 8 && (rc = st_pread(f->fd, le8, 8, 0, path, err)))
		return rc;
	uint64_t hlen;
	if ((rc = check_prefix(f, le8, &hlen, err)))
		return rc;
	char *json = malloc(hlen);
	if (!json)
		return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory for a %llu-byte header", path,
				  (unsigned long long)hlen);
	rc = st_pread(f->fd, json, hlen, 8, path, err);
	if (!rc)
		rc = parse_header(st, idx, json, hlen, err);
	free(json);
	return rc;
}

static int cmp_by_name(const void *a, const void *b)
{
	return strcmp(((const struct strata_safetensors_tensor *)a)->name, ((const struct strata_safetensors_tensor *)b)->name);
}

static int finish_index(struct strata_safetensors *st, struct strata_error *err)
{
	if (st->n > 1)
		qsort(st->t, st->n, sizeof(*st->t), cmp_by_name);
	for (uint32_t i = 1; i < st->n; i++)
		if (!strcmp(st->t[i].name, st->t[i - 1].name))
			return STRATA_ERR(err, STRATA_ECORRUPT, "%s: duplicate tensor '%s'%s%s",
					  st->files[st->t[i].file].path, st->t[i].name,
					  st->t[i].file != st->t[i - 1].file ? " (also in " : "",
					  st->t[i].file != st->t[i - 1].file ? st->files[st->t[i - 1].file].path : "");
	return STRATA_OK;
}

struct wm_entry {
	const char *name, *file;
};

static int cmp_wm(const void *a, const void *b)
{
	return strcmp(((const struct wm_entry *)a)->name, ((const struct wm_entry *)b)->name);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int open_index(struct strata_safetensors *st, const char *index_path, struct strata_error *err)
{
	struct strata_json_doc *doc;
	int rc = strata_json_parse_file(index_path, 0, &doc, err);
	if (rc)
		return rc;
	const struct strata_json *root = strata_json_root(doc);
	const struct strata_json *wm = strata_json_get(root, "weight_map");
	struct wm_entry *ent = NULL;
	const char **files = NULL;
	char *dir = strdup(index_path);
	if (!dir) {
		rc = STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", index_path);
		goto out;
	}
	char *slash = strrchr(dir, '/');
	if (slash)
		slash[1] = '\0';
	else
		dir[0] = '\0';
	if (root->type != STRATA_JSON_OBJECT || !wm || wm->type != STRATA_JSON_OBJECT) {
		rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: not a safetensors index (no \"weight_map\" object)", index_path);
		goto out;
	}
	ent = calloc(wm->len + 1, sizeof(*ent));
	files = calloc(wm->len + 1, sizeof(*files));
	if (!ent || !files) {
		rc = STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", index_path);
		goto out;
	}
	for (uint32_t i = 0; i < wm->len; i++) {
		const struct strata_json *v = &wm->items[i];
		if (v->type != STRATA_JSON_STRING || !v->len || strlen(v->str) != v->len) {
			rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: weight_map['%s'] is not a file name", index_path, v->key);
			goto out;
		}
		if (strchr(v->str, '/') || !strcmp(v->str, "..") || !strcmp(v->str, ".")) {
			rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: weight_map['%s'] = '%s' is not a plain file name",
					index_path, v->key, v->str);
			goto out;
		}
		ent[i].name = v->key;
		ent[i].file = v->str;
		files[i] = v->str;
	}
	qsort(ent, wm->len, sizeof(*ent), cmp_wm);
	for (uint32_t i = 1; i < wm->len; i++)
		if (!strcmp(ent[i].name, ent[i - 1].name)) {
			rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: tensor '%s' listed twice in weight_map", index_path,
					ent[i].name);
			goto out;
		}
	qsort(files, wm->len, sizeof(*files), cmp_str);
	const struct strata_json *meta = strata_json_get(root, "metadata");
	(void)meta; /* index metadata holds numbers (total_size); file metadata is used instead */
	for (uint32_t i = 0; i < wm->len; i++) {
		if (i && !strcmp(files[i], files[i - 1]))
			continue;
		char path[PATH_MAX];
		if ((size_t)snprintf(path, sizeof(path), "%s%s", dir, files[i]) >= sizeof(path)) {
			rc = STRATA_ERR(err, STRATA_EINVAL, "%s: path too long", files[i]);
			goto out;
		}
		uint32_t first = st->n;
		if ((rc = open_file(st, path, err))) {
			if (rc == STRATA_ENOTFOUND)
				strata_error_prefix(err, "%s lists a missing file: ", index_path);
			goto out;
		}
		/* every tensor in this file must be listed under this file */
		for (uint32_t k = first; k < st->n; k++) {
			struct wm_entry key = { .name = st->t[k].name };
			const struct wm_entry *hit = bsearch(&key, ent, wm->len, sizeof(*ent), cmp_wm);
			if (!hit || strcmp(hit->file, files[i])) {
				rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: tensor '%s' is in %s but %s%s", index_path,
						st->t[k].name, files[i],
						hit ? "the index lists it under " : "the index does not list it",
						hit ? hit->file : "");
				goto out;
			}
		}
	}
	if ((rc = finish_index(st, err)))
		goto out;
	/* every listed tensor must exist (in its file: checked above) */
	for (uint32_t i = 0; i < wm->len; i++)
		if (!strata_safetensors_find(st, ent[i].name)) {
			rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: tensor '%s' is listed in weight_map but missing from %s",
					index_path, ent[i].name, ent[i].file);
			goto out;
		}
out:
	free(dir);
	free(ent);
	free(files);
	strata_json_free(doc);
	return rc;
}

static int ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);
	return a >= b && !strcmp(s + a - b, suffix);
}

static int open_dir(struct strata_safetensors *st, const char *dir, struct strata_error *err)
{
	char path[PATH_MAX];
	struct stat sb;
	snprintf(path, sizeof(path), "%s/model.safetensors.index.json", dir);
	if (!stat(path, &sb))
		return open_index(st, path, err);
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	if (!stat(path, &sb)) {
		int rc = open_file(st, path, err);
		return rc ? rc : finish_index(st, err);
	}
	DIR *d = opendir(dir);
	if (!d)
		return STRATA_ERRNO(err, errno == ENOENT ? STRATA_ENOTFOUND : STRATA_EIO, "%s: cannot open directory", dir);
	char **names = NULL;
	size_t n = 0;
	int rc = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!ends_with(de->d_name, ".safetensors") || de->d_name[0] == '.')
			continue;
		char **nn = realloc(names, (n + 1) * sizeof(*nn));
		if (!nn || !(nn[n] = strdup(de->d_name))) {
			names = nn ? nn : names;
			rc = STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", dir);
			break;
		}
		names = nn;
		n++;
	}
	closedir(d);
	if (!rc && !n)
		rc = STRATA_ERR(err, STRATA_ENOTFOUND, "%s: no *.safetensors files and no model.safetensors.index.json", dir);
	if (!rc) {
		qsort(names, n, sizeof(*names), cmp_str);
		for (size_t i = 0; i < n && !rc; i++) {
			snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
			rc = open_file(st, path, err);
		}
		if (!rc)
			rc = finish_index(st, err);
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return rc;
}

int strata_safetensors_open(const char *path, struct strata_safetensors **out, struct strata_error *err)
{
	*out = NULL;
	struct strata_safetensors *st = calloc(1, sizeof(*st));
	if (!st)
		return STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
	st->dir_slot = -1;
	struct stat sb;
	int rc;
	if (stat(path, &sb))
		rc = strata_error_set(err, errno == ENOENT ? STRATA_ENOTFOUND : STRATA_EIO, errno, __FILE__, __LINE__,
				      "%s: cannot open", path);
	else if (S_ISDIR(sb.st_mode) && ((st->dir_slot = strata_input_note(path)), 1))
		rc = open_dir(st, path, err);
	else if (ends_with(path, ".json"))
		rc = open_index(st, path, err);
	else if (!(rc = open_file(st, path, err)))
		rc = finish_index(st, err);
	if (rc) {
		strata_safetensors_close(st);
		return rc;
	}
	*out = st;
	return STRATA_OK;
}

int strata_safetensors_open_image(const void *data, size_t len, const char *what, struct strata_safetensors **out,
			 struct strata_error *err)
{
	*out = NULL;
	struct strata_safetensors *st = calloc(1, sizeof(*st));
	if (!st)
		return STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
	st->dir_slot = -1;
	st->image = data;
	int rc = add_file(st, what ? what : "image", err);
	if (!rc) {
		struct st_file *f = &st->files[0];
		f->size = len;
		uint64_t hlen;
		unsigned char le8[8] = { 0 };
		memcpy(le8, data, len < 8 ? len : 8);
		rc = check_prefix(f, le8, &hlen, err);
		if (!rc)
			rc = parse_header(st, 0, (const char *)data + 8, hlen, err);
		if (!rc)
			rc = finish_index(st, err);
	}
	if (rc) {
		strata_safetensors_close(st);
		return rc;
	}
	*out = st;
	return STRATA_OK;
}

void strata_safetensors_close(struct strata_safetensors *st)
{
	if (!st)
		return;
	for (uint32_t i = 0; i < st->n_files; i++) {
		if (st->files[i].fd >= 0)
			close(st->files[i].fd);
		strata_input_forget(st->files[i].input_slot);
		free(st->files[i].path);
	}
	for (uint32_t i = 0; i < st->n; i++)
		free((char *)st->t[i].name);
	for (uint32_t i = 0; i < st->n_meta; i++) {
		free(st->meta[i].key);
		free(st->meta[i].value);
	}
	strata_input_forget(st->dir_slot);
	free(st->files);
	free(st->t);
	free(st->meta);
	free(st);
}

uint32_t strata_safetensors_file_count(const struct strata_safetensors *st)
{
	return st->n_files;
}

const char *strata_safetensors_file_path(const struct strata_safetensors *st, uint32_t file)
{
	return file < st->n_files ? st->files[file].path : NULL;
}

uint32_t strata_safetensors_tensor_count(const struct strata_safetensors *st)
{
	return st->n;
}

const struct strata_safetensors_tensor *strata_safetensors_tensor_at(const struct strata_safetensors *st, uint32_t i)
{
	return i < st->n ? &st->t[i] : NULL;
}

const struct strata_safetensors_tensor *strata_safetensors_find(const struct strata_safetensors *st, const char *name)
{
	struct strata_safetensors_tensor key = { .name = name };
	return st->n ? bsearch(&key, st->t, st->n, sizeof(*st->t), cmp_by_name) : NULL;
}

const char *strata_safetensors_metadata(const struct strata_safetensors *st, const char *key)
{
	for (uint32_t i = 0; i < st->n_meta; i++)
		if (!strcmp(st->meta[i].key, key))
			return st->meta[i].value;
	return NULL;
}

uint64_t strata_safetensors_total_params(const struct strata_safetensors *st)
{
	uint64_t s = 0;
	for (uint32_t i = 0; i < st->n; i++)
		s += st->t[i].numel;
	return s;
}

int strata_safetensors_read_raw(struct strata_safetensors *st, const struct strata_safetensors_tensor *t, uint64_t off, uint64_t bytes,
		       void *buf, struct strata_error *err)
{
	if (t->file >= st->n_files)
		return STRATA_ERR(err, STRATA_EINVAL, "tensor '%s': bad file index", t->name);
	struct st_file *f = &st->files[t->file];
	if (off > t->bytes || bytes > t->bytes - off)
		return STRATA_ERR(err, STRATA_EINVAL, "%s: tensor '%s': read [%llu, +%llu) outside its %llu bytes",
				  f->path, t->name, (unsigned long long)off, (unsigned long long)bytes,
				  (unsigned long long)t->bytes);
	if (f->fd < 0) {
		if (!st->image)
			return STRATA_ERR(err, STRATA_EINVAL, "%s: not open for reading", f->path);
		memcpy(buf, st->image + t->offset + off, bytes);
		return STRATA_OK;
	}
	return st_pread(f->fd, buf, bytes, t->offset + off, f->path, err);
}

static float lut_f8[2][256];

static void f8_tables(void)
{
	for (int b = 0; b < 256; b++) {
		lut_f8[0][b] = strata_f8e4m3_to_f32((uint8_t)b);
		lut_f8[1][b] = strata_f8e5m2_to_f32((uint8_t)b);
	}
}

int strata_safetensors_read_f32(struct strata_safetensors *st, const struct strata_safetensors_tensor *t, uint64_t first, uint64_t count,
		       float *out, struct strata_error *err)
{
	if (!strata_safetensors_dtype_is_float(t->dtype))
		return STRATA_ERR(err, STRATA_EUNSUPPORTED, "%s: tensor '%s': dtype %s is not a float type",
				  strata_safetensors_file_path(st, t->file), t->name, strata_safetensors_dtype_name(t->dtype));
	if (first > t->numel || count > t->numel - first)
		return STRATA_ERR(err, STRATA_EINVAL, "tensor '%s': elements [%llu, +%llu) out of range", t->name,
				  (unsigned long long)first, (unsigned long long)count);
	uint32_t es = strata_safetensors_dtype_size(t->dtype);
	if (t->dtype == STRATA_SAFETENSORS_F64) {
		/* 8 bytes in, 4 out: convert through a bounded bounce buffer */
		double buf[4096];
		for (uint64_t done = 0; done < count;) {
			uint64_t n = count - done < 4096 ? count - done : 4096;
			int rc = strata_safetensors_read_raw(st, t, (first + done) * 8, n * 8, buf, err);
			if (rc)
				return rc;
			for (uint64_t i = 0; i < n; i++)
				out[done + i] = (float)buf[i];
			done += n;
		}
		return STRATA_OK;
	}
	if (es == 1) {
		/* FP8: read into the last quarter and widen from the front; block
		 * i's outputs (4i .. 4i+63) end before the next block's inputs
		 * (3n + i + 16) whenever i + 16 <= n */
		unsigned char *raw8 = (unsigned char *)out + count * 3;
		int rc = strata_safetensors_read_raw(st, t, first, count, raw8, err);
		if (rc)
			return rc;
		static pthread_once_t once = PTHREAD_ONCE_INIT;
		pthread_once(&once, f8_tables);
		const float *tab = lut_f8[t->dtype == STRATA_SAFETENSORS_F8_E5M2];
		uint64_t i = 0;
		for (; i + 16 <= count; i += 16) {
			uint8_t b[16];
			float f[16];
			memcpy(b, raw8 + i, 16);
			for (int k = 0; k < 16; k++)
				f[k] = tab[b[k]];
			memcpy(out + i, f, sizeof(f));
		}
		for (; i < count; i++)
			out[i] = tab[raw8[i]];
		return STRATA_OK;
	}
	unsigned char *raw = (unsigned char *)out + (es == 2 ? count * 2 : 0);
	int rc = strata_safetensors_read_raw(st, t, first * es, count * es, raw, err);
	if (rc || es == 4)
		return rc;
	/* widen in blocks of 16: a block's inputs are copied out before its
	 * outputs are stored, and block i's outputs (bytes 4i .. 4i+63) end
	 * before the next block's inputs begin (2n + 2i + 32) whenever i + 16 <= n */
	uint64_t i = 0;
	if (t->dtype == STRATA_SAFETENSORS_BF16) {
#ifdef __AVX2__
		for (; i + 16 <= count; i += 16) {
			__m128i a = _mm_loadu_si128((const __m128i *)(raw + 2 * i));
			__m128i b = _mm_loadu_si128((const __m128i *)(raw + 2 * i + 16));
			_mm256_storeu_si256((__m256i *)(out + i), _mm256_slli_epi32(_mm256_cvtepu16_epi32(a), 16));
			_mm256_storeu_si256((__m256i *)(out + i + 8), _mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
		}
#endif
		for (; i + 16 <= count; i += 16) {
			uint16_t h[16];
			uint32_t u[16];
			memcpy(h, raw + 2 * i, sizeof(h));
			for (int k = 0; k < 16; k++)
				u[k] = (uint32_t)h[k] << 16;
			memcpy(out + i, u, sizeof(u));
		}
	} else {
#ifdef __F16C__
		/* hardware half -> float where the build targets it (x86-64-v3) */
		for (; i + 16 <= count; i += 16) {
			__m128i a = _mm_loadu_si128((const __m128i *)(raw + 2 * i));
			__m128i b = _mm_loadu_si128((const __m128i *)(raw + 2 * i + 16));
			_mm256_storeu_ps(out + i, _mm256_cvtph_ps(a));
			_mm256_storeu_ps(out + i + 8, _mm256_cvtph_ps(b));
		}
#endif
		for (; i + 16 <= count; i += 16) {
			uint16_t h[16];
			float f[16];
			memcpy(h, raw + 2 * i, sizeof(h));
			for (int k = 0; k < 16; k++)
				f[k] = strata_f16_to_f32(h[k]);
			memcpy(out + i, f, sizeof(f));
		}
	}
	for (; i < count; i++) {
		uint16_t h;
		memcpy(&h, raw + 2 * i, 2);
		out[i] = t->dtype == STRATA_SAFETENSORS_BF16 ? strata_bf16_to_f32(h) : strata_f16_to_f32(h);
	}
	return STRATA_OK;
}

/* ---- writer ------------------------------------------------------------- */

struct st_wtensor {
	char *name;
	int dtype;
	uint32_t ndim;
	uint64_t shape[STRATA_SAFETENSORS_MAX_DIMS];
	uint64_t bytes;
};

struct strata_safetensors_writer {
	char *path, *tmp;
	int fd;
	struct st_wtensor *t;
	uint32_t n;
	struct st_meta *meta;
	uint32_t n_meta;
	int started;
	uint32_t cur;       /* tensor being written */
	uint64_t cur_done;  /* its bytes written */
	uint64_t pos;       /* file position */
	int failed;
	struct strata_outlock lock;
	int tmp_slot;
};

int strata_safetensors_writer_open(const char *path, struct strata_safetensors_writer **out, struct strata_error *err)
{
	*out = NULL;
	struct strata_safetensors_writer *w = calloc(1, sizeof(*w));
	if (!w)
		return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", path);
	w->fd = -1;
	w->lock.fd = -1;
	w->tmp_slot = -1;
	w->path = strdup(path);
	w->tmp = malloc(strlen(path) + 5);
	if (!w->path || !w->tmp) {
		strata_safetensors_writer_abort(w);
		return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", path);
	}
	sprintf(w->tmp, "%s.tmp", path);
	w->tmp_slot = -1;
	int lrc = strata_outlock_take(&w->lock, path, err);
	if (lrc) {
		free(w->tmp);
		w->tmp = NULL; /* the holder's, not ours */
		strata_safetensors_writer_abort(w);
		return lrc;
	}
	w->tmp_slot = strata_tmp_register(w->tmp);
	w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (w->fd < 0) {
		int rc = STRATA_ERRNO(err, STRATA_EIO, "%s: cannot create", w->tmp);
		strata_safetensors_writer_abort(w);
		return rc;
	}
	*out = w;
	return STRATA_OK;
}

int strata_safetensors_writer_metadata(struct strata_safetensors_writer *w, const char *key, const char *value,
			      struct strata_error *err)
{
	if (w->started)
		return STRATA_ERR(err, STRATA_EINVAL, "%s: metadata after data", w->path);
	struct st_meta *m = realloc(w->meta, (w->n_meta + 1) * sizeof(*m));
	if (!m)
		return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", w->path);
	w->meta = m;
	m[w->n_meta].key = strdup(key);
	m[w->n_meta].value = strdup(value);
	w->n_meta++;
	if (!m[w->n_meta - 1].key || !m[w->n_meta - 1].value)
		return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", w->path);
	return STRATA_OK;
}

int strata_safetensors_writer_declare(struct strata_safetensors_writer *w, const char *name, int dtype, uint32_t ndim,
			     const uint64_t *shape, struct strata_error *err)
{
	if (w->started)
		return STRATA_ERR(err, STRATA_EINVAL, "%s: tensor '%s' declared after data", w->path, name);
	if (!strata_safetensors_dtype_size(dtype) || ndim > STRATA_SAFETENSORS_MAX_DIMS)
		return STRATA_ERR(err, STRATA_EINVAL, "%s: tensor '%s': bad dtype or rank", w->path, name);
	struct st_wtensor *t = realloc(w->t, (w->n + 1) * sizeof(*t));
	if (!t)
		return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", w->path);
	w->t = t;
	struct st_wtensor *x = &t[w->n];
	memset(x, 0, sizeof(*x));
	x->name = strdup(name);
	if (!x->name)
		return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", w->path);
	x->dtype = dtype;
	x->ndim = ndim;
	x->bytes = strata_safetensors_dtype_size(dtype);
	for (uint32_t d = 0; d < ndim; d++) {
		x->shape[d] = shape[d];
		x->bytes *= shape[d];
	}
	w->n++;
	return STRATA_OK;
}

static int write_all(struct strata_safetensors_writer *w, const void *data, size_t bytes, struct strata_error *err)
{
	const unsigned char *p = data;
	while (bytes) {
		ssize_t r = write(w->fd, p, bytes);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			w->failed = 1;
			return STRATA_ERRNO(err, errno == ENOSPC ? STRATA_ENOSPC : STRATA_EIO, "%s: write", w->tmp);
		}
		p += r;
		bytes -= (size_t)r;
		w->pos += (uint64_t)r;
	}
	return STRATA_OK;
}

static int write_header(struct strata_safetensors_writer *w, struct strata_error *err)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *b = open_memstream(&buf, &len);
	if (!b)
		return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", w->path);
	fputc('{', b);
	int first = 1;
	if (w->n_meta) {
		fputs("\"__metadata__\":{", b);
		for (uint32_t i = 0; i < w->n_meta; i++) {
			if (i)
				fputc(',', b);
			strata_json_write_str(b, w->meta[i].key);
			fputc(':', b);
			strata_json_write_str(b, w->meta[i].value);
		}
		fputc('}', b);
		first = 0;
	}
	uint64_t off = 0;
	for (uint32_t i = 0; i < w->n; i++) {
		struct st_wtensor *t = &w->t[i];
		if (!first)
			fputc(',', b);
		first = 0;
		strata_json_write_str(b, t->name);
		fprintf(b, ":{\"dtype\":\"%s\",\"shape\":[", strata_safetensors_dtype_name(t->dtype));
		for (uint32_t d = 0; d < t->ndim; d++)
			fprintf(b, "%s%llu", d ? "," : "", (unsigned long long)t->shape[d]);
		fprintf(b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
			(unsigned long long)(off + t->bytes));
		off += t->bytes;
	}
	fputc('}', b);
	/* pad with spaces so the data region starts 8-byte aligned, as the
	 * reference implementation does */
	long cur = ftell(b);
	while ((cur + 8) % 8)
		cur++, fputc(' ', b);
	if (fclose(b)) {
		free(buf);
		return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", w->path);
	}
	uint8_t le8[8];
	strata_le_put64(le8, (uint64_t)len);
	int rc = write_all(w, le8, 8, err);
	if (!rc)
		rc = write_all(w, buf, len, err);
	free(buf);
	w->started = 1;
	return rc;
}

/* Advance past finished (and zero-size) tensors. */
static void skip_done(struct strata_safetensors_writer *w)
{
	while (w->cur < w->n && w->cur_done == w->t[w->cur].bytes) {
		w->cur++;
		w->cur_done = 0;
	}
}

int strata_safetensors_writer_write_raw(struct strata_safetensors_writer *w, const void *data, uint64_t bytes,
			       struct strata_error *err)
{
	int rc;
	if (w->failed)
		return STRATA_ERR(err, STRATA_EIO, "%s: writer failed earlier", w->path);
	if (!w->started && (rc = write_header(w, err)))
		return rc;
	const unsigned char *p = data;
	while (bytes) {
		skip_done(w);
		if (w->cur >= w->n)
			return STRATA_ERR(err, STRATA_EINVAL, "%s: more data written than declared", w->path);
		uint64_t room = w->t[w->cur].bytes - w->cur_done;
		uint64_t n = bytes < room ? bytes : room;
		if ((rc = write_all(w, p, (size_t)n, err)))
			return rc;
		w->cur_done += n;
		p += n;
		bytes -= n;
	}
	skip_done(w);
	return STRATA_OK;
}

int strata_safetensors_writer_write_f32(struct strata_safetensors_writer *w, const float *data, uint64_t count,
			       struct strata_error *err)
{
	skip_done(w);
	if (w->cur >= w->n)
		return STRATA_ERR(err, STRATA_EINVAL, "%s: more data written than declared", w->path);
	int dt;
	uint16_t buf[4096];
	for (uint64_t done = 0; done < count;) {
		/* a call may span tensors of different dtypes: convert per current tensor */
		skip_done(w);
		if (w->cur >= w->n)
			return STRATA_ERR(err, STRATA_EINVAL, "%s: more data written than declared", w->path);
		dt = w->t[w->cur].dtype;
		if (dt != STRATA_SAFETENSORS_F32 && dt != STRATA_SAFETENSORS_BF16 && dt != STRATA_SAFETENSORS_F16)
			return STRATA_ERR(err, STRATA_EINVAL, "%s: tensor '%s' is %s: write it raw", w->path,
					  w->t[w->cur].name, strata_safetensors_dtype_name(dt));
		uint64_t room = (w->t[w->cur].bytes - w->cur_done) / strata_safetensors_dtype_size(dt);
		uint64_t n = count - done;
		if (dt != STRATA_SAFETENSORS_F32 && n > 4096)
			n = 4096;
		if (n > room)
			n = room;
		if (!n)
			return STRATA_ERR(err, STRATA_EINVAL, "%s: tensor '%s': partial element written raw", w->path,
					  w->t[w->cur].name);
		int rc;
		if (dt == STRATA_SAFETENSORS_F32) {
			rc = strata_safetensors_writer_write_raw(w, data + done, n * 4, err);
		} else {
			for (uint64_t i = 0; i < n; i++) {
				float f = data[done + i];
				if (dt == STRATA_SAFETENSORS_BF16) {
					uint32_t u;
					memcpy(&u, &f, 4);
					buf[i] = (u & 0x7fffffffu) > 0x7f800000u
							 ? (uint16_t)((u >> 16) | 0x40)
							 : (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
				} else {
					buf[i] = strata_f32_to_f16(f);
				}
			}
			rc = strata_safetensors_writer_write_raw(w, buf, n * 2, err);
		}
		if (rc)
			return rc;
		done += n;
	}
	return STRATA_OK;
}

int strata_safetensors_writer_finish(struct strata_safetensors_writer *w, struct strata_error *err)
{
	int rc = STRATA_OK;
	if (!w->started)
		rc = write_header(w, err);
	skip_done(w);
	if (!rc && w->cur < w->n)
		rc = STRATA_ERR(err, STRATA_EINVAL, "%s: tensor '%s' not fully written", w->path, w->t[w->cur].name);
	if (!rc && fsync(w->fd))
		rc = STRATA_ERRNO(err, STRATA_EIO, "%s: fsync", w->tmp);
	if (!rc) {
		int fd = w->fd;
		w->fd = -1;
		if (close(fd))
			rc = STRATA_ERRNO(err, STRATA_EIO, "%s: close", w->tmp);
	}
	if (!rc && rename(w->tmp, w->path))
		rc = STRATA_ERRNO(err, STRATA_EIO, "%s: rename to %s", w->tmp, w->path);
	if (rc) {
		strata_safetensors_writer_abort(w);
		return rc;
	}
	free(w->tmp);
	w->tmp = NULL;
	strata_safetensors_writer_abort(w); /* frees the rest; no tmp left to remove */
	return STRATA_OK;
}

void strata_safetensors_writer_abort(struct strata_safetensors_writer *w)
{
	if (!w)
		return;
	if (w->fd >= 0)
		close(w->fd);
	if (w->tmp)
		unlink(w->tmp);
	strata_tmp_unregister(w->tmp_slot);
	strata_outlock_release(&w->lock);
	for (uint32_t i = 0; i < w->n; i++)
		free(w->t[i].name);
	for (uint32_t i = 0; i < w->n_meta; i++) {
		free(w->meta[i].key);
		free(w->meta[i].value);
	}
	free(w->t);
	free(w->meta);
	free(w->path);
	free(w->tmp);
	free(w);
}
