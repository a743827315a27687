/*
 * The packed shard store (see include/strata/store.h for the format).
 *
 * Reader: strata_store_open lists the shard files, parses and validates every
 * header (strata_store_parse_header does all field checks and is what the
 * fuzzer drives), checks that the shards belong to one write of one model,
 * and builds a flat index: one extent per expert id, one entry per tensor.
 *
 * Writer: the layout of every shard is planned in writer_open (sizes follow
 * from the spec and the format table), each shard is created as
 * "shard-N.strata.tmp" at its final size (fallocate, so a full disk shows up
 * before any data is written), extents are pwrite()n at their planned offsets
 * (several threads may add different experts at once), and finish writes the
 * headers, fsyncs, and renames.  Nothing is renamed until every shard is
 * complete and synced, so a failure leaves only .tmp files, which abort
 * removes.  The output directory is locked for the whole write (a second
 * writer is refused, told the holder's pid).  Replacing a model (force) builds
 * the new one in a sibling directory ".NAME.new-PID" and swaps the two in one
 * step (renameat2 RENAME_EXCHANGE), so a write killed at any point leaves the
 * old model whole or the new one whole; the files of the old directory that
 * are not the model's move into the new one, then the old model is removed.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "quant.h"
#include "strata/mover.h"
#include "strata/store.h"
#include "strata/util.h"

#define ALIGN_4K(x) (((x) + (uint64_t)STRATA_EXTENT_ALIGN - 1) / STRATA_EXTENT_ALIGN * STRATA_EXTENT_ALIGN)
#define ALIGN_8(x) (((x) + 7ull) & ~7ull)
#define MAX_HEADER_BYTES (1ull << 30)
#define MAX_SHARDS 100000u

uint64_t strata_store_fail_after_bytes;

/* Fixed part offsets. */
enum {
	H_MAGIC = 0, H_VERSION = 8, H_FIXED = 12, H_HSIZE = 16, H_DATA = 24, H_FSIZE = 32,
	H_INDEX = 40, H_COUNT = 44, H_STOREID = 48, H_CSUM = 56, H_FLAGS = 60, H_NTOTAL = 64,
	H_NEXP = 68, H_NTEN = 72, H_NTENTOT = 76, H_SPECOFF = 80, H_TABOFF = 88, H_EXPOFF = 96,
	H_TENOFF = 104, H_EXPREC = 112, H_TENREC = 116, H_CREATED = 120, H_NCOPY = 128,
};

static uint64_t tensor_payload(const struct strata_tensor_info *t, int *ok)
{
	uint64_t n = t->fmt == STRATA_FMT_F32 ? 4 : 2;
	*ok = t->ndim >= 1 && t->ndim <= 4 && (t->fmt == STRATA_FMT_F32 || t->fmt == STRATA_FMT_BF16);
	for (uint32_t d = 0; d < 4 && *ok; d++) {
		if (d >= t->ndim) {
			*ok = t->shape[d] == 0;
			continue;
		}
		if (!t->shape[d] || t->shape[d] > (1ull << 40) / n)
			*ok = 0;
		else
			n *= t->shape[d];
		if (n > (1ull << 40))
			*ok = 0;
	}
	return *ok ? n : 0;
}

uint64_t strata_store_header_bytes(uint32_t n_total_experts, uint32_t n_experts, uint32_t n_tensors)
{
	return STRATA_SHARD_FIXED_BYTES + STRATA_SHARD_SPEC_BYTES + 2 * ALIGN_8((uint64_t)n_total_experts) +
	       (uint64_t)n_experts * STRATA_SHARD_EXPERT_REC + (uint64_t)n_tensors * STRATA_SHARD_TENSOR_REC + 8;
}

static void encode_spec(uint8_t *p, const struct strata_model_spec *s)
{
	memset(p, 0, STRATA_SHARD_SPEC_BYTES);
	memcpy(p, s->name, strnlen(s->name, STRATA_NAME_MAX - 1));
	const uint32_t v[9] = { s->n_layers, s->first_moe_layer, s->n_moe_layers, s->n_experts, s->top_k,
				s->hidden, s->inter, s->n_shared, s->shared_inter };
	for (int i = 0; i < 9; i++)
		strata_le_put32(p + 48 + 4 * i, v[i]);
	strata_le_put64(p + 88, s->nonrouted_params);
}

static int decode_spec(const uint8_t *p, struct strata_model_spec *s)
{
	memset(s, 0, sizeof(*s));
	if (!memchr(p, 0, STRATA_NAME_MAX))
		return -1;
	memcpy(s->name, p, STRATA_NAME_MAX);
	uint32_t *v[9] = { &s->n_layers, &s->first_moe_layer, &s->n_moe_layers, &s->n_experts, &s->top_k,
			   &s->hidden, &s->inter, &s->n_shared, &s->shared_inter };
	for (int i = 0; i < 9; i++)
		*v[i] = strata_le_get32(p + 48 + 4 * i);
	s->nonrouted_params = strata_le_get64(p + 88);
	return 0;
}

/* ---- header parsing --------------------------------------------------- */

void strata_store_header_free(struct strata_shard_header *h)
{
	if (!h)
		return;
	free(h->tier_table);
	free(h->fmt_table);
	free(h->experts);
	free(h->copies);
	free(h->tensors);
	free(h);
}

struct span {
	uint64_t off, len;
	int what; /* >= 0: expert entry index, < 0: -(tensor entry index) - 1 */
};

static int span_cmp(const void *a, const void *b)
{
	const struct span *x = a, *y = b;
	return x->off < y->off ? -1 : x->off > y->off;
}

/* Section [off, off + len) must lie inside the header, after the fixed part,
 * before the checksum. */
static int section_ok(uint64_t off, uint64_t len, uint64_t hsize)
{
	return off >= STRATA_SHARD_FIXED_BYTES && off % 8 == 0 && len <= hsize && off <= hsize - 8 - len;
}

int strata_store_parse_header(const void *buf, size_t len, uint64_t file_size, const char *name,
			      unsigned flags, struct strata_shard_header **out, struct strata_error *err)
{
	const uint8_t *p = buf;
	*out = NULL;
	if (!name)
		name = "shard";
	if (len < 16 || memcmp(p + H_MAGIC, STRATA_SHARD_MAGIC, 8))
		return STRATA_ERR(err, STRATA_ECORRUPT, "%s: not a Strata shard (bad magic)", name);
	uint32_t version = strata_le_get32(p + H_VERSION);
	if (version < STRATA_STORE_VERSION_MIN || version > STRATA_STORE_VERSION)
		return STRATA_ERR(err, STRATA_EVERSION, "%s: shard format version %u, this build reads versions %u - %u%s",
				  name, version, STRATA_STORE_VERSION_MIN, STRATA_STORE_VERSION,
				  version == 1 ? " (version 1 tier codes use the old table codebook: re-quantize "
						 "with `strata quantize`)" : "");
	if (len < STRATA_SHARD_FIXED_BYTES)
		return STRATA_ERR(err, STRATA_ECORRUPT, "%s: truncated header (%zu bytes, need at least %u)",
				  name, len, STRATA_SHARD_FIXED_BYTES);
	if (strata_le_get32(p + H_FIXED) != STRATA_SHARD_FIXED_BYTES || strata_le_get32(p + H_EXPREC) != STRATA_SHARD_EXPERT_REC ||
	    strata_le_get32(p + H_TENREC) != STRATA_SHARD_TENSOR_REC)
		return STRATA_ERR(err, STRATA_ECORRUPT, "%s: header record sizes disagree with version %u",
				  name, version);
	uint64_t hsize = strata_le_get64(p + H_HSIZE);
	if (hsize < STRATA_SHARD_FIXED_BYTES + STRATA_SHARD_SPEC_BYTES + 8 || hsize > MAX_HEADER_BYTES ||
	    hsize % 8)
		return STRATA_ERR(err, STRATA_ECORRUPT, "%s: bad header size %" PRIu64, name, hsize);
	if (hsize > len)
		return STRATA_ERR(err, STRATA_ECORRUPT, "%s: truncated header (%zu bytes, header size is %" PRIu64 ")",
				  name, len, hsize);
	if (!(flags & STRATA_PARSE_NO_CHECKSUM)) {
		uint64_t want = strata_le_get64(p + hsize - 8), got = XXH3_64bits(p, hsize - 8);
		if (want != got)
			return STRATA_ERR(err, STRATA_ECORRUPT,
					  "%s: header checksum mismatch (stored %016" PRIx64 ", computed %016" PRIx64
					  "): the header is corrupt", name, want, got);
	}
	if (strata_le_get32(p + H_CSUM) != STRATA_SHARD_CSUM_XXH3)
		return STRATA_ERR(err, STRATA_ECORRUPT, "%s: unknown checksum algorithm %u", name, strata_le_get32(p + H_CSUM));

	struct strata_shard_header *h = calloc(1, sizeof(*h));
	if (!h)
		return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", name);
	int rc = STRATA_ECORRUPT;
	struct span *spans = NULL;
	uint8_t *seen = NULL;
	h->version = version;
	h->header_size = hsize;
	h->data_off = strata_le_get64(p + H_DATA);
	h->file_size = strata_le_get64(p + H_FSIZE);
	h->shard_index = strata_le_get32(p + H_INDEX);
	h->shard_count = strata_le_get32(p + H_COUNT);
	h->store_id = strata_le_get64(p + H_STOREID);
	h->created_unix = strata_le_get64(p + H_CREATED);
	h->n_total_experts = strata_le_get32(p + H_NTOTAL);
	h->n_experts = strata_le_get32(p + H_NEXP);
	h->n_tensors = strata_le_get32(p + H_NTEN);
	h->n_tensors_total = strata_le_get32(p + H_NTENTOT);
	h->flags = strata_le_get32(p + H_FLAGS);
	h->n_copies = strata_le_get32(p + H_NCOPY);
	uint64_t spec_off = strata_le_get64(p + H_SPECOFF), tab_off = strata_le_get64(p + H_TABOFF);
	uint64_t exp_off = strata_le_get64(p + H_EXPOFF), ten_off = strata_le_get64(p + H_TENOFF);

	if (h->data_off != ALIGN_4K(hsize) || h->file_size % STRATA_EXTENT_ALIGN || h->file_size < h->data_off) {
		STRATA_ERR(err, rc, "%s: header sizes disagree (header %" PRIu64 ", data at %" PRIu64
			   ", file %" PRIu64 ")", name, hsize, h->data_off, h->file_size);
		goto fail;
	}
	if (file_size && file_size < h->file_size) {
		STRATA_ERR(err, rc, "%s: truncated: file is %" PRIu64 " bytes, its header says %" PRIu64,
			   name, file_size, h->file_size);
		goto fail;
	}
	if (file_size && file_size > h->file_size) {
		STRATA_ERR(err, rc, "%s: file is %" PRIu64 " bytes but its header says %" PRIu64
			   " (trailing data)", name, file_size, h->file_size);
		goto fail;
	}
	if (h->flags & ~STRATA_SHARD_F_COPIES) {
		rc = STRATA_EVERSION;
		STRATA_ERR(err, rc, "%s: unknown feature flags 0x%x (written by a newer build)", name,
			   h->flags & ~STRATA_SHARD_F_COPIES);
		goto fail;
	}
	if ((!(h->flags & STRATA_SHARD_F_COPIES) && h->n_copies) || h->n_copies > h->n_experts) {
		STRATA_ERR(err, rc, "%s: %u low-bit copies for %u experts%s", name, h->n_copies, h->n_experts,
			   h->flags & STRATA_SHARD_F_COPIES ? "" : " without the copies flag");
		goto fail;
	}
	if (!h->shard_count || h->shard_count > MAX_SHARDS || h->shard_index >= h->shard_count) {
		STRATA_ERR(err, rc, "%s: bad shard index %u of %u", name, h->shard_index, h->shard_count);
		goto fail;
	}
	if (h->n_tensors > h->n_tensors_total) {
		STRATA_ERR(err, rc, "%s: %u tensors in a store of %u", name, h->n_tensors, h->n_tensors_total);
		goto fail;
	}
	uint64_t tab_len = ALIGN_8((uint64_t)h->n_total_experts);
	if (!section_ok(spec_off, STRATA_SHARD_SPEC_BYTES, hsize) || !section_ok(tab_off, 2 * tab_len, hsize) ||
	    !section_ok(exp_off, ((uint64_t)h->n_experts + h->n_copies) * STRATA_SHARD_EXPERT_REC, hsize) ||
	    !section_ok(ten_off, (uint64_t)h->n_tensors * STRATA_SHARD_TENSOR_REC, hsize)) {
		STRATA_ERR(err, rc, "%s: a header section lies outside the header (%" PRIu64 " bytes)", name, hsize);
		goto fail;
	}
	if (decode_spec(p + spec_off, &h->spec)) {
		STRATA_ERR(err, rc, "%s: model name not terminated", name);
		goto fail;
	}
	struct strata_error serr = { 0 };
	if (strata_model_spec_validate(&h->spec, &serr)) {
		STRATA_ERR(err, rc, "%s: bad model spec in header: %s", name, serr.msg);
		goto fail;
	}
	const struct strata_model_spec *sp = &h->spec;
	if (h->n_total_experts != strata_model_total_experts(sp) || h->n_experts > h->n_total_experts) {
		STRATA_ERR(err, rc, "%s: expert counts disagree with the model spec (%u experts in all, %u here)",
			   name, h->n_total_experts, h->n_experts);
		goto fail;
	}
	h->tier_table = malloc(tab_len ? tab_len : 1);
	h->fmt_table = malloc(tab_len ? tab_len : 1);
	h->experts = calloc(h->n_experts ? h->n_experts : 1, sizeof(*h->experts));
	h->copies = calloc(h->n_copies ? h->n_copies : 1, sizeof(*h->copies));
	h->tensors = calloc(h->n_tensors ? h->n_tensors : 1, sizeof(*h->tensors));
	spans = malloc(((uint64_t)h->n_experts + h->n_copies + h->n_tensors + 1) * sizeof(*spans));
	seen = calloc(2 * (h->n_total_experts / 8 + 1), 1); /* experts, then copies */
	if (!h->tier_table || !h->fmt_table || !h->experts || !h->copies || !h->tensors || !spans || !seen) {
		rc = STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", name);
		goto fail;
	}
	memcpy(h->tier_table, p + tab_off, h->n_total_experts);
	memcpy(h->fmt_table, p + tab_off + tab_len, h->n_total_experts);
	for (uint32_t i = 0; i < h->n_total_experts; i++) {
		if (h->tier_table[i] >= STRATA_TIER_COUNT || h->fmt_table[i] >= STRATA_FMT_COUNT) {
			STRATA_ERR(err, rc, "%s: bad tier/format table entry %u (tier %u, format %u)", name, i,
				   h->tier_table[i], h->fmt_table[i]);
			goto fail;
		}
		if (version < 3 && h->fmt_table[i] == STRATA_FMT_Q3) {
			rc = STRATA_EVERSION;
			STRATA_ERR(err, rc, "%s: shard format version %u stores q3 codes in the old bit layout "
				   "(layer %u, expert %u; version 3 changed it): re-quantize with `strata quantize`", name,
				   version, i / sp->n_experts, i % sp->n_experts);
			goto fail;
		}
	}
	/* Expected extent size per format (the layout is a function of the spec). */
	struct strata_expert_layout lay[STRATA_FMT_COUNT];
	for (int f = 0; f < STRATA_FMT_COUNT; f++)
		if (strata_expert_layout(f, sp->hidden, sp->inter, &lay[f])) {
			STRATA_ERR(err, rc, "%s: no expert layout for format %d", name, f);
			goto fail;
		}
	uint64_t fsz = h->file_size;
	size_t ns = 0;
	/* the experts, then their low-bit copies: the same records; a copy lies in
	 * its expert's shard, in a packed format smaller than the expert's own */
	uint8_t *seen_copy = seen + h->n_total_experts / 8 + 1;
	for (uint32_t i = 0; i < h->n_experts + h->n_copies; i++) {
		const uint8_t *r = p + exp_off + (uint64_t)i * STRATA_SHARD_EXPERT_REC;
		bool copy = i >= h->n_experts;
		const char *what = copy ? "low-bit copy of expert" : "expert";
		struct strata_shard_expert *x = copy ? &h->copies[i - h->n_experts] : &h->experts[i];
		x->layer = strata_le_get32(r);
		x->expert = strata_le_get32(r + 4);
		x->ext.shard = h->shard_index;
		x->ext.fmt = strata_le_get32(r + 8);
		x->ext.offset = strata_le_get64(r + 16);
		x->ext.bytes = strata_le_get64(r + 24);
		x->ext.payload = strata_le_get64(r + 32);
		x->ext.xxh64 = strata_le_get64(r + 40);
		if (x->layer >= sp->n_moe_layers || x->expert >= sp->n_experts) {
			STRATA_ERR(err, rc, "%s: %s entry %u names (layer %u, expert %u) outside the model", name, what,
				   copy ? i - h->n_experts : i, x->layer, x->expert);
			goto fail;
		}
		uint32_t eid = strata_eid(sp, x->layer, x->expert);
		uint8_t bit = (uint8_t)(1u << (eid % 8)), *mark = copy ? &seen_copy[eid / 8] : &seen[eid / 8];
		if ((*mark & bit) || (copy && !(seen[eid / 8] & bit))) {
			STRATA_ERR(err, rc, "%s: %s (layer %u, expert %u) %s", name, what, x->layer, x->expert,
				   *mark & bit ? "listed twice" : "without its expert in this shard");
			goto fail;
		}
		*mark |= bit;
		const struct strata_expert_layout *L = x->ext.fmt < STRATA_FMT_COUNT ? &lay[x->ext.fmt] : NULL;
		if (!L || x->ext.bytes != L->bytes || x->ext.payload != L->payload ||
		    (!copy && x->ext.fmt != h->fmt_table[eid]) ||
		    (copy && (x->ext.fmt < STRATA_FMT_HOT || L->payload >= lay[h->fmt_table[eid]].payload))) {
			STRATA_ERR(err, rc, "%s: %s (layer %u, expert %u): format %u / %" PRIu64 " bytes %s", name, what,
				   x->layer, x->expert, x->ext.fmt, x->ext.bytes,
				   copy ? "is not a packed format smaller than the expert's own"
					: "disagree with the format table and the model spec");
			goto fail;
		}
		if (copy && version < 3 && x->ext.fmt == STRATA_FMT_Q3) { /* (an expert's own: the table above) */
			rc = STRATA_EVERSION;
			STRATA_ERR(err, rc, "%s: shard format version %u stores q3 codes in the old bit layout "
				   "(low-bit copy of expert (layer %u, expert %u); version 3 changed it): re-quantize "
				   "with `strata quantize`", name, version, x->layer, x->expert);
			goto fail;
		}
		if (x->ext.offset % STRATA_EXTENT_ALIGN || x->ext.offset < h->data_off || x->ext.offset > fsz ||
		    x->ext.bytes > fsz - x->ext.offset) {
			STRATA_ERR(err, rc, "%s: %s (layer %u, expert %u) extent at %" PRIu64 " (+%" PRIu64
				   ") is misaligned or outside the data area (%" PRIu64 "..%" PRIu64 ")", name, what,
				   x->layer, x->expert, x->ext.offset, x->ext.bytes, h->data_off, fsz);
			goto fail;
		}
		spans[ns++] = (struct span){ x->ext.offset, x->ext.bytes, (int)i };
	}
	for (uint32_t i = 0; i < h->n_tensors; i++) {
		const uint8_t *r = p + ten_off + (uint64_t)i * STRATA_SHARD_TENSOR_REC;
		struct strata_tensor_info *t = &h->tensors[i];
		if (!memchr(r, 0, STRATA_TENSOR_NAME_MAX) || !r[0]) {
			STRATA_ERR(err, rc, "%s: tensor entry %u: empty or unterminated name", name, i);
			goto fail;
		}
		memcpy(t->name, r, STRATA_TENSOR_NAME_MAX);
		t->fmt = strata_le_get32(r + 96);
		t->ndim = strata_le_get32(r + 100);
		for (int d = 0; d < 4; d++)
			t->shape[d] = strata_le_get64(r + 104 + 8 * d);
		t->ext.shard = h->shard_index;
		t->ext.fmt = t->fmt;
		t->ext.offset = strata_le_get64(r + 136);
		t->ext.bytes = strata_le_get64(r + 144);
		t->ext.payload = strata_le_get64(r + 152);
		t->ext.xxh64 = strata_le_get64(r + 160);
		int ok;
		uint64_t want = tensor_payload(t, &ok);
		if (!ok || t->ext.payload != want || t->ext.bytes != ALIGN_4K(want)) {
			STRATA_ERR(err, rc, "%s: tensor '%s': format, shape and size disagree", name, t->name);
			goto fail;
		}
		if (t->ext.offset % STRATA_EXTENT_ALIGN || t->ext.offset < h->data_off || t->ext.offset > fsz ||
		    t->ext.bytes > fsz - t->ext.offset) {
			STRATA_ERR(err, rc, "%s: tensor '%s' extent at %" PRIu64 " is misaligned or outside the data "
				   "area", name, t->name, t->ext.offset);
			goto fail;
		}
		spans[ns++] = (struct span){ t->ext.offset, t->ext.bytes, -(int)i - 1 };
	}
	qsort(spans, ns, sizeof(*spans), span_cmp);
	for (size_t i = 1; i < ns; i++)
		if (spans[i].off < spans[i - 1].off + spans[i - 1].len) {
			STRATA_ERR(err, rc, "%s: extents at %" PRIu64 " and %" PRIu64 " overlap", name,
				   spans[i - 1].off, spans[i].off);
			goto fail;
		}
	free(spans);
	free(seen);
	*out = h;
	return STRATA_OK;
fail:
	free(spans);
	free(seen);
	strata_store_header_free(h);
	return rc;
}

/* ---- reading ---------------------------------------------------------- */

struct shard {
	char *path;
	int fd_buf, fd_direct;
	uint64_t file_size;
};

struct strata_store {
	char *dir;
	struct strata_model_spec spec;
	uint64_t store_id;
	uint32_t n_shards;
	struct shard *shards;
	uint32_t n_total;
	uint8_t *tiers, *fmts;
	struct strata_extent *experts; /* by expert id */
	struct strata_extent *copies;  /* by expert id: its low-bit copy (bytes 0: none) */
	uint8_t *checked;              /* by expert id, then by copy: a read was checked (STRATA_VERIFY_FIRST) */
	int input_slot;                /* strata_input_note of dir */
	uint32_t n_tensors, n_tensors_total;
	struct strata_tensor_info *tensors;
	pthread_mutex_t fd_lock;
};

static char *shard_path(const char *dir, uint32_t i, const char *suffix)
{
	size_t n = strlen(dir) + 40;
	char *p = malloc(n);
	if (p)
		snprintf(p, n, "%s/shard-%05u.strata%s", dir, i, suffix);
	return p;
}

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');
	return s ? s + 1 : path;
}

/* Shard index of a final shard file name, or -1. */
static long shard_file_index(const char *name)
{
	unsigned idx;
	char tail[16];
	if (strlen(name) != 18 || sscanf(name, "shard-%5u.%15s", &idx, tail) != 2 || strcmp(tail, "strata"))
		return -1;
	return idx;
}

/* Read and parse the header of one shard file. */
static int read_shard_header(const char *path, struct strata_shard_header **out, uint64_t *fsize,
			     struct strata_error *err)
{
	/* O_NONBLOCK: a FIFO named like a shard must not block the open */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return STRATA_ERRNO(err, errno == ENOENT ? STRATA_ENOTFOUND : STRATA_EIO, "%s: open", path);
	struct stat st;
	uint8_t fixed[STRATA_SHARD_FIXED_BYTES];
	uint8_t *buf = NULL;
	int rc;
	if (fstat(fd, &st)) {
		rc = STRATA_ERRNO(err, STRATA_EIO, "%s: stat", path);
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: not a regular file (a %s), so not a shard", path,
				S_ISDIR(st.st_mode) ? "directory" : S_ISFIFO(st.st_mode) ? "FIFO" : "device or socket");
		goto out;
	}
	*fsize = (uint64_t)st.st_size;
	ssize_t n = pread(fd, fixed, sizeof(fixed), 0);
	if (n < 0) {
		rc = STRATA_ERRNO(err, STRATA_EIO, "%s: read", path);
		goto out;
	}
	if (n < 16) {
		rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: truncated: %zd bytes, not a shard", path, n);
		goto out;
	}
	if ((size_t)n < sizeof(fixed)) {
		/* let the parser say "bad magic" / "version" / "truncated" */
		rc = strata_store_parse_header(fixed, (size_t)n, *fsize, path, 0, out, err);
		if (rc == STRATA_ECORRUPT && n >= 16 && !memcmp(fixed, STRATA_SHARD_MAGIC, 8))
			rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: truncated: %zd bytes, shorter than a shard header",
					path, n);
		goto out;
	}
	uint64_t hsize = strata_le_get64(fixed + H_HSIZE);
	if (memcmp(fixed, STRATA_SHARD_MAGIC, 8) || strata_le_get32(fixed + H_VERSION) < STRATA_STORE_VERSION_MIN ||
	    strata_le_get32(fixed + H_VERSION) > STRATA_STORE_VERSION ||
	    hsize < sizeof(fixed) || hsize > MAX_HEADER_BYTES) {
		rc = strata_store_parse_header(fixed, sizeof(fixed), *fsize, path, 0, out, err);
		goto out;
	}
	if (hsize > *fsize) {
		rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: truncated: file is %" PRIu64
				" bytes, its header alone is %" PRIu64, path, *fsize, hsize);
		goto out;
	}
	buf = malloc(hsize);
	if (!buf) {
		rc = STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory for a %" PRIu64 "-byte header", path, hsize);
		goto out;
	}
	uint64_t got = 0;
	while (got < hsize) {
		n = pread(fd, buf + got, hsize - got, (off_t)got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? STRATA_ERRNO(err, STRATA_EIO, "%s: read header", path)
				   : STRATA_ERR(err, STRATA_ECORRUPT, "%s: truncated header", path);
			goto out;
		}
		got += (uint64_t)n;
	}
	rc = strata_store_parse_header(buf, hsize, *fsize, path, 0, out, err);
out:
	free(buf);
	close(fd);
	return rc;
}

void strata_store_close(struct strata_store *s)
{
	if (!s)
		return;
	for (uint32_t i = 0; s->shards && i < s->n_shards; i++) {
		if (s->shards[i].fd_buf >= 0)
			close(s->shards[i].fd_buf);
		if (s->shards[i].fd_direct >= 0)
			close(s->shards[i].fd_direct);
		free(s->shards[i].path);
	}
	pthread_mutex_destroy(&s->fd_lock);
	free(s->shards);
	free(s->dir);
	free(s->tiers);
	free(s->fmts);
	free(s->experts);
	free(s->copies);
	free(s->checked);
	strata_input_forget(s->input_slot);
	free(s->tensors);
	free(s);
}

int strata_store_open(const char *dir, struct strata_store **out, struct strata_error *err)
{
	*out = NULL;
	DIR *d = opendir(dir);
	if (!d)
		return STRATA_ERRNO(err, errno == ENOENT ? STRATA_ENOTFOUND : STRATA_EIO, "%s: open model directory",
				    dir);
	long max_idx = -1;
	int n_found = 0, n_tmp = 0;
	for (struct dirent *de; (de = readdir(d));) {
		long idx = shard_file_index(de->d_name);
		if (idx >= 0) {
			n_found++;
			if (idx > max_idx)
				max_idx = idx;
		} else if (!strncmp(de->d_name, "shard-", 6) && strstr(de->d_name, ".strata.tmp")) {
			n_tmp++;
		}
	}
	closedir(d);
	if (!n_found)
		return STRATA_ERR(err, STRATA_ENOTFOUND, "%s: no shard files (shard-00000.strata ...)%s", dir,
				  n_tmp ? "; only .tmp files of an unfinished write" : "");

	struct strata_store *s = calloc(1, sizeof(*s));
	if (!s)
		return STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
	pthread_mutex_init(&s->fd_lock, NULL);
	s->input_slot = strata_input_note(dir);
	s->dir = strdup(dir);
	struct strata_shard_header *h0 = NULL, *h = NULL;
	int rc;
	char *p0 = shard_path(dir, 0, "");
	if (!s->dir || !p0) {
		rc = STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
		goto fail;
	}
	uint64_t fsize;
	rc = read_shard_header(p0, &h0, &fsize, err);
	if (rc == STRATA_ENOTFOUND) {
		STRATA_ERR(err, rc, "%s: missing shard 0 (shard-00000.strata)%s", dir,
			   n_tmp ? "; .tmp files of an unfinished write are present" : "");
		goto fail;
	}
	if (rc)
		goto fail;
	if (h0->shard_index != 0) {
		rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: header says it is shard %u", p0, h0->shard_index);
		goto fail;
	}
	uint32_t M = h0->shard_count;
	if (max_idx >= (long)M) {
		rc = STRATA_ERR(err, STRATA_ECORRUPT,
				"%s/shard-%05ld.strata: unexpected: shard-00000.strata says the store has %u shard%s "
				"(a stale file from another write?)", dir, max_idx, M, M == 1 ? "" : "s");
		goto fail;
	}
	s->spec = h0->spec;
	s->store_id = h0->store_id;
	s->n_shards = M;
	s->n_total = h0->n_total_experts;
	s->n_tensors_total = h0->n_tensors_total;
	s->shards = calloc(M, sizeof(*s->shards));
	s->experts = calloc(s->n_total ? s->n_total : 1, sizeof(*s->experts));
	s->tensors = calloc(h0->n_tensors_total ? h0->n_tensors_total : 1, sizeof(*s->tensors));
	s->tiers = malloc(s->n_total ? s->n_total : 1);
	s->fmts = malloc(s->n_total ? s->n_total : 1);
	s->copies = calloc(s->n_total ? s->n_total : 1, sizeof(*s->copies));
	s->checked = calloc(s->n_total ? 2 * (size_t)s->n_total : 1, 1);
	if (!s->shards || !s->experts || !s->copies || !s->tensors || !s->tiers || !s->fmts || !s->checked) {
		rc = STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
		goto fail;
	}
	for (uint32_t i = 0; i < M; i++)
		s->shards[i].fd_buf = s->shards[i].fd_direct = -1;
	memcpy(s->tiers, h0->tier_table, s->n_total);
	memcpy(s->fmts, h0->fmt_table, s->n_total);
	for (uint32_t i = 0; i < s->n_total; i++)
		s->experts[i].bytes = 0; /* bytes == 0: not found yet */
	for (uint32_t i = 0; i < M; i++) {
		char *path = shard_path(dir, i, "");
		if (!path) {
			rc = STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
			goto fail;
		}
		s->shards[i].path = path;
		if (i == 0) {
			h = h0;
			h0 = NULL;
		} else {
			rc = read_shard_header(path, &h, &fsize, err);
			if (rc == STRATA_ENOTFOUND) {
				STRATA_ERR(err, rc, "%s: missing shard %u of %u", path, i, M);
				goto fail;
			}
			if (rc)
				goto fail;
		}
		s->shards[i].file_size = fsize;
		if (h->store_id != s->store_id || memcmp(&h->spec, &s->spec, sizeof(s->spec)) ||
		    h->shard_count != M || h->n_total_experts != s->n_total ||
		    h->n_tensors_total != s->n_tensors_total ||
		    memcmp(h->tier_table, s->tiers, s->n_total) || memcmp(h->fmt_table, s->fmts, s->n_total)) {
			rc = STRATA_ERR(err, STRATA_ECORRUPT,
					"%s: belongs to a different model or write than shard-00000.strata "
					"(store id %016" PRIx64 " vs %016" PRIx64 ", model %s vs %s)", path,
					h->store_id, s->store_id, h->spec.name, s->spec.name);
			goto fail;
		}
		if (h->shard_index != i) {
			rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: header says it is shard %u", path, h->shard_index);
			goto fail;
		}
		for (uint32_t k = 0; k < h->n_experts; k++) {
			uint32_t eid = strata_eid(&s->spec, h->experts[k].layer, h->experts[k].expert);
			if (s->experts[eid].bytes) {
				rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: expert (layer %u, expert %u) is also in shard %u",
						path, h->experts[k].layer, h->experts[k].expert, s->experts[eid].shard);
				goto fail;
			}
			s->experts[eid] = h->experts[k].ext;
		}
		for (uint32_t k = 0; k < h->n_copies; k++) /* each beside its expert: unique (parse) */
			s->copies[strata_eid(&s->spec, h->copies[k].layer, h->copies[k].expert)] = h->copies[k].ext;
		if (s->n_tensors + (uint64_t)h->n_tensors > h->n_tensors_total) {
			rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: more tensors than the store's %u", path,
					h->n_tensors_total);
			goto fail;
		}
		for (uint32_t k = 0; k < h->n_tensors; k++) {
			if (strata_store_find_tensor(s, h->tensors[k].name)) {
				rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: tensor '%s' stored twice", path,
						h->tensors[k].name);
				goto fail;
			}
			s->tensors[s->n_tensors++] = h->tensors[k];
		}
		strata_store_header_free(h);
		h = NULL;
	}
	for (uint32_t eid = 0; eid < s->n_total; eid++)
		if (!s->experts[eid].bytes) {
			rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: expert (layer %u, expert %u) is in no shard", dir,
					eid / s->spec.n_experts, eid % s->spec.n_experts);
			goto fail;
		}
	if (s->n_tensors != s->n_tensors_total) {
		rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: %u of the store's %u tensors found in its shards", dir,
				s->n_tensors, s->n_tensors_total);
		goto fail;
	}
	free(p0);
	*out = s;
	return STRATA_OK;
fail:
	free(p0);
	strata_store_header_free(h0);
	strata_store_header_free(h);
	strata_store_close(s);
	return rc;
}

const struct strata_model_spec *strata_store_spec(const struct strata_store *s) { return &s->spec; }
const char *strata_store_dir(const struct strata_store *s) { return s->dir; }
uint32_t strata_store_shard_count(const struct strata_store *s) { return s->n_shards; }
const uint8_t *strata_store_tier_table(const struct strata_store *s) { return s->tiers; }
const uint8_t *strata_store_fmt_table(const struct strata_store *s) { return s->fmts; }
uint32_t strata_store_tensor_count(const struct strata_store *s) { return s->n_tensors; }

const char *strata_store_shard_path(const struct strata_store *s, uint32_t shard)
{
	return shard < s->n_shards ? s->shards[shard].path : NULL;
}

const struct strata_extent *strata_store_expert(const struct strata_store *s, uint32_t layer, uint32_t e)
{
	if (layer >= s->spec.n_moe_layers || e >= s->spec.n_experts)
		return NULL;
	return &s->experts[strata_eid(&s->spec, layer, e)];
}

const struct strata_extent *strata_store_copy(const struct strata_store *s, uint32_t layer, uint32_t e)
{
	if (layer >= s->spec.n_moe_layers || e >= s->spec.n_experts)
		return NULL;
	const struct strata_extent *x = &s->copies[strata_eid(&s->spec, layer, e)];
	return x->bytes ? x : NULL;
}

const struct strata_tensor_info *strata_store_tensor(const struct strata_store *s, uint32_t i)
{
	return i < s->n_tensors ? &s->tensors[i] : NULL;
}

const struct strata_tensor_info *strata_store_find_tensor(const struct strata_store *s, const char *name)
{
	for (uint32_t i = 0; i < s->n_tensors; i++)
		if (!strcmp(s->tensors[i].name, name))
			return &s->tensors[i];
	return NULL;
}

int strata_store_shard_fd(struct strata_store *s, uint32_t shard, bool direct, struct strata_error *err)
{
	if (shard >= s->n_shards)
		return STRATA_ERR(err, STRATA_EINVAL, "%s: no shard %u (store has %u)", s->dir, shard, s->n_shards);
	struct shard *sh = &s->shards[shard];
	pthread_mutex_lock(&s->fd_lock);
	int *slot = direct ? &sh->fd_direct : &sh->fd_buf;
	int fd = *slot;
	if (fd < 0) {
		fd = open(sh->path, O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
		if (fd < 0) {
			int e = errno;
			pthread_mutex_unlock(&s->fd_lock);
			errno = e;
			if (direct && e == EINVAL)
				return STRATA_ERRNO(err, STRATA_EUNSUPPORTED,
						    "%s: the filesystem does not support O_DIRECT", sh->path);
			return STRATA_ERRNO(err, STRATA_EIO, "%s: open", sh->path);
		}
		*slot = fd;
	}
	pthread_mutex_unlock(&s->fd_lock);
	return fd;
}

/* "expert (layer 3, expert 17)" or "tensor 'x'" for messages. */
static void extent_name(const struct strata_store *s, const struct strata_extent *ext, char *buf, size_t len)
{
	if (ext >= s->experts && ext < s->experts + s->n_total) {
		uint32_t eid = (uint32_t)(ext - s->experts);
		snprintf(buf, len, "expert (layer %u, expert %u)", eid / s->spec.n_experts, eid % s->spec.n_experts);
		return;
	}
	if (ext >= s->copies && ext < s->copies + s->n_total) {
		uint32_t eid = (uint32_t)(ext - s->copies);
		snprintf(buf, len, "low-bit copy of expert (layer %u, expert %u)", eid / s->spec.n_experts,
			 eid % s->spec.n_experts);
		return;
	}
	for (uint32_t i = 0; i < s->n_tensors; i++)
		if (ext == &s->tensors[i].ext) {
			snprintf(buf, len, "tensor '%s'", s->tensors[i].name);
			return;
		}
	snprintf(buf, len, "extent at offset %" PRIu64, ext->offset);
}

int strata_store_verify_extent(const struct strata_store *s, const struct strata_extent *ext, const void *buf,
			       struct strata_error *err)
{
	uint64_t got = XXH3_64bits(buf, ext->payload);
	if (got == ext->xxh64)
		return STRATA_OK;
	char what[160];
	extent_name(s, ext, what, sizeof(what));
	return STRATA_ERR(err, STRATA_ECORRUPT,
			  "%s: checksum mismatch in %s at offset %" PRIu64 " (stored %016" PRIx64 ", computed %016" PRIx64
			  ")", ext->shard < s->n_shards ? s->shards[ext->shard].path : s->dir, what, ext->offset,
			  ext->xxh64, got);
}

int strata_store_content_key(const char *dir, uint64_t *key, struct strata_error *err)
{
	char *p = shard_path(dir, 0, "");
	if (!p)
		return STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
	int fd = open(p, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	uint8_t fixed[STRATA_SHARD_FIXED_BYTES];
	int rc = STRATA_OK;
	if (fd < 0)
		rc = STRATA_ERRNO(err, errno == ENOENT ? STRATA_ENOTFOUND : STRATA_EIO, "%s: open", p);
	else if (pread(fd, fixed, sizeof(fixed), 0) != (ssize_t)sizeof(fixed))
		rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: truncated header", p);
	else
		*key = XXH3_64bits(fixed, sizeof(fixed));
	if (fd >= 0)
		close(fd);
	free(p);
	return rc;
}

const char *strata_verify_name(int mode)
{
	return mode == STRATA_VERIFY_EVERY ? "every" : mode == STRATA_VERIFY_OFF ? "off" : "first";
}

bool strata_store_arm_check(struct strata_store *s, const struct strata_extent *ext, int mode,
			    struct strata_move *mv)
{
	mv->check_bytes = 0;
	if (mode == STRATA_VERIFY_OFF || !ext->payload)
		return false;
	size_t ci = ext >= s->experts && ext < s->experts + s->n_total   ? (size_t)(ext - s->experts)
		    : ext >= s->copies && ext < s->copies + s->n_total ? s->n_total + (size_t)(ext - s->copies)
									 : SIZE_MAX;
	if (mode == STRATA_VERIFY_FIRST && ci != SIZE_MAX) {
		uint8_t *c = &s->checked[ci];
		if (*c)
			return false;
		*c = 1; /* a failed check fails the run, so it is never read unchecked */
	}
	mv->check_bytes = ext->payload;
	mv->check_xxh3 = ext->xxh64;
	return true;
}

int strata_store_read_extent(struct strata_store *s, const struct strata_extent *ext, void *buf, bool direct,
			     bool verify, struct strata_error *err)
{
	if (ext->shard >= s->n_shards)
		return STRATA_ERR(err, STRATA_EINVAL, "%s: extent names shard %u of %u", s->dir, ext->shard,
				  s->n_shards);
	const char *path = s->shards[ext->shard].path;
	if (direct && (((uintptr_t)buf | ext->offset | ext->bytes) % STRATA_EXTENT_ALIGN))
		return STRATA_ERR(err, STRATA_EINVAL, "%s: O_DIRECT read needs a 4 KiB aligned buffer and extent",
				  path);
	int fd = strata_store_shard_fd(s, ext->shard, direct, err);
	if (fd < 0)
		return fd;
	uint8_t *p = buf;
	uint64_t got = 0;
	while (got < ext->bytes) {
		ssize_t n = pread(fd, p + got, ext->bytes - got, (off_t)(ext->offset + got));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return STRATA_ERRNO(err, STRATA_EIO, "%s: read at offset %" PRIu64, path, ext->offset + got);
		if (n == 0)
			return STRATA_ERR(err, STRATA_ECORRUPT, "%s: truncated: end of file at offset %" PRIu64
					  " inside an extent", path, ext->offset + got);
		got += (uint64_t)n;
	}
	return verify ? strata_store_verify_extent(s, ext, buf, err) : STRATA_OK;
}

void strata_store_summary(const struct strata_store *s, struct strata_store_tier_summary *out)
{
	memset(out, 0, sizeof(*out));
	uint64_t pe = strata_model_expert_params(&s->spec);
	for (uint32_t i = 0; i < s->n_total; i++) {
		int t = s->tiers[i];
		out->experts[t]++;
		out->bytes[t] += s->experts[i].bytes;
		out->payload[t] += s->experts[i].payload;
		out->params[t] += pe;
		if (s->copies[i].bytes) {
			out->copies++;
			out->copy_bytes += s->copies[i].bytes;
		}
	}
	for (uint32_t i = 0; i < s->n_tensors; i++)
		out->tensor_bytes += s->tensors[i].ext.payload;
}

/* ---- writing ---------------------------------------------------------- */

struct wshard {
	char *path, *tmp;
	int fd, fd_direct; /* fd_direct: O_DIRECT, -1 where the filesystem refuses it */
	uint64_t header_size, data_off, file_size;
	uint32_t first_item, n_items; /* items [first, first + n) in plan order */
	uint32_t n_experts, n_tensors, n_copies;
	int renamed;
};

struct strata_store_writer {
	char *dir;                          /* where the shards are written */
	char *final;                        /* replacing a model: the directory swapped with dir */
	struct strata_outlock lock;
	struct strata_model_spec spec;
	uint32_t n_total, n_tensors;
	uint8_t *tiers, *fmts;
	struct strata_extent *experts;      /* by eid */
	struct strata_tensor_info *tensors; /* config order */
	struct strata_extent *copies;       /* by eid: its low-bit copy (bytes 0: none) */
	uint32_t n_copies;
	atomic_uchar *added;                /* n_total + n_tensors + n_total (copies) flags */
	uint32_t *order;                    /* plan order: tensors (as n_total + i) then eids, each
					     * followed by its copy (as n_total + n_tensors + eid) */
	uint32_t n_shards;
	struct wshard *shards;
	uint64_t store_id;
	atomic_uint_fast64_t written;       /* data bytes written (fault-injection hook) */
	int finished;
};

int strata_store_kill_after_renames;

/* rename(2), counted for the kill test hook (see store.h). */
static int wrename(const char *from, const char *to)
{
	static int renames;
	if (strata_store_kill_after_renames && ++renames > strata_store_kill_after_renames)
		raise(SIGKILL);
	return rename(from, to);
}

/* Shards of a model in dir (final files, not .tmp). */
static uint32_t count_shards(const char *dir)
{
	uint32_t n = 0;
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	for (struct dirent *de; (de = readdir(d));)
		n += shard_file_index(de->d_name) >= 0;
	closedir(d);
	return n;
}

/* Remove dir: its shard files (final and .tmp) and the directory; anything
 * else in it is left (then so is the directory). */
static void remove_model_dir(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	for (struct dirent *de; (de = readdir(d));) {
		if (strncmp(de->d_name, "shard-", 6))
			continue;
		char p[PATH_MAX];
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		unlink(p);
	}
	closedir(d);
	rmdir(dir);
}

/* "parent/.name.new-PID" for dir "parent/name". */
static char *staging_path(const char *dir)
{
	char tag[32];
	snprintf(tag, sizeof(tag), "new-%ld", (long)getpid());
	return strata_sibling_path(dir, tag);
}

/* Leftover staging directories of killed writes of dir (we hold its lock). */
static void remove_stale_staging(const char *dir)
{
	char *mine = staging_path(dir);
	if (!mine)
		return;
	char *dash = strrchr(mine, '-');
	size_t keep = (size_t)(dash - mine) + 1; /* "parent/.name.new-" */
	char *slash = strrchr(mine, '/');
	char parent[PATH_MAX];
	snprintf(parent, sizeof(parent), "%.*s", slash ? (int)(slash - mine) : 1, slash ? mine : ".");
	const char *prefix = slash ? slash + 1 : mine;
	size_t plen = keep - (size_t)(prefix - mine);
	DIR *d = opendir(parent);
	if (d) {
		for (struct dirent *de; (de = readdir(d));)
			if (!strncmp(de->d_name, prefix, plen)) {
				char p[PATH_MAX];
				snprintf(p, sizeof(p), "%s/%s", parent, de->d_name);
				remove_model_dir(p);
			}
		closedir(d);
	}
	free(mine);
}

/* After the swap: move what the old directory held besides its model into
 * the new one (names the new model does not use), then remove the old. */
static void carry_over(const char *old, const char *cur)
{
	DIR *d = opendir(old);
	if (d) {
		for (struct dirent *de; (de = readdir(d));) {
			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") || !strncmp(de->d_name, "shard-", 6))
				continue;
			char a[PATH_MAX], b[PATH_MAX];
			struct stat st;
			snprintf(a, sizeof(a), "%s/%s", old, de->d_name);
			snprintf(b, sizeof(b), "%s/%s", cur, de->d_name);
			if (lstat(b, &st))
				rename(a, b);
			else if (!S_ISDIR(st.st_mode))
				unlink(a); /* the new model wrote its own */
		}
		closedir(d);
	}
	remove_model_dir(old);
}

static int mkdir_p(const char *dir, struct strata_error *err)
{
	char tmp[PATH_MAX];
	if (strlen(dir) >= sizeof(tmp))
		return STRATA_ERR(err, STRATA_EINVAL, "%s: path too long", dir);
	strcpy(tmp, dir);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, 0755) && errno != EEXIST)
			return STRATA_ERRNO(err, STRATA_EIO, "%s: mkdir", tmp);
		*p = '/';
	}
	if (mkdir(tmp, 0755) && errno != EEXIST)
		return STRATA_ERRNO(err, STRATA_EIO, "%s: mkdir", tmp);
	struct stat st;
	if (stat(tmp, &st) || !S_ISDIR(st.st_mode))
		return STRATA_ERR(err, STRATA_EINVAL, "%s: not a directory", dir);
	return STRATA_OK;
}

static uint64_t random_id(void)
{
	uint64_t v = 0;
	if (getrandom(&v, sizeof(v), 0) != sizeof(v))
		v = strata_store_fail_after_bytes ^ (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	return v ? v : 1;
}

/* errno of a failed write -> status, naming the file. */
static int write_error(const char *path, int e, struct strata_error *err)
{
	errno = e;
	if (e == ENOSPC || e == EDQUOT)
		return STRATA_ERRNO(err, STRATA_ENOSPC, "%s: disk full while writing", path);
	return STRATA_ERRNO(err, STRATA_EIO, "%s: write", path);
}

static int pwrite_all(struct strata_store_writer *w, struct wshard *sh, int fd, const void *data, uint64_t len,
		      uint64_t off, struct strata_error *err)
{
	const uint8_t *p = data;
	while (len) {
		size_t chunk = len > (1u << 30) ? (1u << 30) : (size_t)len;
		if (strata_store_fail_after_bytes) {
			uint64_t before = atomic_fetch_add(&w->written, chunk);
			if (before + chunk > strata_store_fail_after_bytes)
				return write_error(sh->tmp, ENOSPC, err);
		}
		ssize_t n = pwrite(fd, p, chunk, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return write_error(sh->tmp, errno, err);
		if (n == 0)
			return write_error(sh->tmp, ENOSPC, err);
		p += n;
		off += (uint64_t)n;
		len -= (uint64_t)n;
	}
	return STRATA_OK;
}

static void writer_free(struct strata_store_writer *w)
{
	for (uint32_t i = 0; w->shards && i < w->n_shards; i++) {
		free(w->shards[i].path);
		free(w->shards[i].tmp);
	}
	free(w->shards);
	if (w->final && !w->finished)
		remove_model_dir(w->dir);
	strata_outlock_release(&w->lock);
	free(w->dir);
	free(w->final);
	free(w->tiers);
	free(w->fmts);
	free(w->experts);
	free(w->copies);
	free(w->tensors);
	free(w->added);
	free(w->order);
	free(w);
}

uint32_t strata_store_writer_shard_count(const struct strata_store_writer *w)
{
	return w->n_shards;
}

void strata_store_writer_free(struct strata_store_writer *w)
{
	strata_store_writer_abort(w);
}

void strata_store_writer_abort(struct strata_store_writer *w)
{
	if (!w)
		return;
	for (uint32_t i = 0; w->shards && i < w->n_shards; i++) {
		struct wshard *sh = &w->shards[i];
		if (sh->fd >= 0)
			close(sh->fd);
		if (sh->fd_direct >= 0)
			close(sh->fd_direct);
		sh->fd = sh->fd_direct = -1;
		if (!w->finished && sh->tmp)
			unlink(sh->tmp);
	}
	writer_free(w);
}

/* The extent of plan item it (an expert, a tensor or a copy: struct strata_store_writer's order). */
static struct strata_extent *item_ext(struct strata_store_writer *w, uint32_t it)
{
	if (it < w->n_total)
		return &w->experts[it];
	if (it < w->n_total + w->n_tensors)
		return &w->tensors[it - w->n_total].ext;
	return &w->copies[it - w->n_total - w->n_tensors];
}

int strata_store_writer_open(const struct strata_store_writer_config *cfg, struct strata_store_writer **out,
			     struct strata_error *err)
{
	*out = NULL;
	if (!cfg->dir || !*cfg->dir)
		return STRATA_ERR(err, STRATA_EINVAL, "store writer: no output directory");
	int rc = strata_model_spec_validate(&cfg->spec, err);
	if (rc)
		return rc;
	struct strata_store_writer *w = calloc(1, sizeof(*w));
	if (!w)
		return STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
	w->lock.fd = -1;
	w->spec = cfg->spec;
	w->n_total = strata_model_total_experts(&cfg->spec);
	w->n_tensors = cfg->n_tensors;
	w->dir = strdup(cfg->dir);
	w->tiers = malloc(w->n_total);
	w->fmts = malloc(w->n_total);
	w->experts = calloc(w->n_total, sizeof(*w->experts));
	w->copies = calloc(w->n_total ? w->n_total : 1, sizeof(*w->copies));
	w->tensors = calloc(w->n_tensors ? w->n_tensors : 1, sizeof(*w->tensors));
	w->added = calloc(2 * (size_t)w->n_total + w->n_tensors, 1);
	w->order = malloc((2 * (size_t)w->n_total + w->n_tensors) * sizeof(*w->order));
	if (!w->dir || !w->tiers || !w->fmts || !w->experts || !w->copies || !w->tensors || !w->added || !w->order) {
		rc = STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
		goto fail;
	}
	for (uint32_t i = 0; i < w->n_total; i++) {
		uint8_t t = cfg->tier_table ? cfg->tier_table[i] : STRATA_TIER_NVME;
		uint8_t f = cfg->fmt_table ? cfg->fmt_table[i] : (uint8_t)(STRATA_FMT_HOT + t);
		if (t >= STRATA_TIER_COUNT || f >= STRATA_FMT_COUNT) {
			rc = STRATA_ERR(err, STRATA_EINVAL, "store writer: expert %u: bad tier %u or format %u", i, t, f);
			goto fail;
		}
		w->tiers[i] = t;
		w->fmts[i] = f;
	}
	struct strata_expert_layout lay[STRATA_FMT_COUNT];
	for (int f = 0; f < STRATA_FMT_COUNT; f++)
		if (strata_expert_layout(f, w->spec.hidden, w->spec.inter, &lay[f])) {
			rc = STRATA_ERR(err, STRATA_EINVAL, "store writer: no layout for format %d", f);
			goto fail;
		}
	for (uint32_t i = 0; i < w->n_tensors; i++) {
		struct strata_tensor_info *t = &w->tensors[i];
		*t = cfg->tensors[i];
		t->name[STRATA_TENSOR_NAME_MAX - 1] = '\0';
		int ok;
		uint64_t pl = tensor_payload(t, &ok);
		if (!ok || !t->name[0]) {
			rc = STRATA_ERR(err, STRATA_EINVAL, "store writer: tensor %u '%s': bad name, format or shape",
					i, t->name);
			goto fail;
		}
		for (uint32_t j = 0; j < i; j++)
			if (!strcmp(w->tensors[j].name, t->name)) {
				rc = STRATA_ERR(err, STRATA_EINVAL, "store writer: tensor '%s' given twice", t->name);
				goto fail;
			}
		t->ext = (struct strata_extent){ .fmt = t->fmt, .payload = pl, .bytes = ALIGN_4K(pl) };
	}
	for (uint32_t i = 0; i < w->n_total; i++) {
		const struct strata_expert_layout *L = &lay[w->fmts[i]];
		w->experts[i] = (struct strata_extent){ .fmt = w->fmts[i], .bytes = L->bytes, .payload = L->payload };
		const struct strata_expert_layout *C = &lay[STRATA_FMT_COLD];
		if (cfg->lowbit_copies && C->payload < L->payload) {
			w->copies[i] = (struct strata_extent){ .fmt = STRATA_FMT_COLD, .bytes = C->bytes, .payload = C->payload };
			w->n_copies++;
		}
	}

	/* Plan: tensors first, then experts by id; start a new shard when the
	 * next extent would push this one past the target size. */
	uint64_t target = cfg->shard_bytes ? cfg->shard_bytes : (4ull << 30);
	uint32_t n_items = w->n_total + w->n_tensors + w->n_copies;
	for (uint32_t i = 0; i < w->n_tensors; i++)
		w->order[i] = w->n_total + i;
	for (uint32_t i = 0, k = w->n_tensors; i < w->n_total; i++) {
		w->order[k++] = i;
		if (w->copies[i].bytes)
			w->order[k++] = w->n_total + w->n_tensors + i;
	}
	w->shards = calloc(n_items ? n_items : 1, sizeof(*w->shards));
	if (!w->shards) {
		rc = STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
		goto fail;
	}
	uint64_t cur = 0;
	for (uint32_t k = 0; k < n_items; k++) {
		uint32_t it = w->order[k];
		struct strata_extent *x = item_ext(w, it);
		/* a copy stays beside its expert (in its shard) */
		if (w->n_shards == 0 || (w->shards[w->n_shards - 1].n_items && cur + x->bytes > target &&
					 it < w->n_total + w->n_tensors)) {
			w->shards[w->n_shards++].first_item = k;
			cur = 0;
		}
		struct wshard *sh = &w->shards[w->n_shards - 1];
		sh->n_items++;
		if (it < w->n_total)
			sh->n_experts++;
		else if (it < w->n_total + w->n_tensors)
			sh->n_tensors++;
		else
			sh->n_copies++;
		x->shard = w->n_shards - 1;
		cur += x->bytes;
	}
	if (w->n_shards > MAX_SHARDS) {
		rc = STRATA_ERR(err, STRATA_EINVAL, "store writer: %u shards (at most %u; raise the shard size)",
				w->n_shards, MAX_SHARDS);
		goto fail;
	}
	for (uint32_t s = 0; s < w->n_shards; s++) {
		struct wshard *sh = &w->shards[s];
		sh->fd = sh->fd_direct = -1;
		sh->header_size = strata_store_header_bytes(w->n_total, sh->n_experts + sh->n_copies, sh->n_tensors);
		if (sh->header_size > MAX_HEADER_BYTES) {
			rc = STRATA_ERR(err, STRATA_EINVAL, "store writer: shard %u's header would be %" PRIu64
					" bytes (at most %llu): too many experts", s, sh->header_size, MAX_HEADER_BYTES);
			goto fail;
		}
		sh->data_off = ALIGN_4K(sh->header_size);
		uint64_t off = sh->data_off;
		for (uint32_t k = sh->first_item; k < sh->first_item + sh->n_items; k++) {
			struct strata_extent *x = item_ext(w, w->order[k]);
			x->offset = off;
			off += x->bytes;
		}
		sh->file_size = off;
	}
	w->store_id = random_id();

	rc = mkdir_p(w->dir, err);
	if (!rc)
		rc = strata_outlock_take(&w->lock, w->dir, err);
	if (rc)
		goto fail;
	uint32_t had = count_shards(w->dir);
	if (had && !cfg->force) {
		rc = STRATA_ERR(err, STRATA_EEXIST, "%s already holds a model (%u shard%s); use --force to replace it",
				w->dir, had, had == 1 ? "" : "s");
		goto fail;
	}
	remove_stale_staging(w->dir);
	if (had) {
		/* build the new model beside the old one; finish swaps them */
		w->final = w->dir;
		if (!(w->dir = staging_path(w->final))) {
			rc = STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
			goto fail;
		}
		if (mkdir(w->dir, 0755)) {
			rc = STRATA_ERRNO(err, STRATA_EIO, "%s: mkdir (to build the new model beside %s)", w->dir,
					  w->final);
			goto fail;
		}
	}
	/* Refuse up front a write that cannot fit, rather than fill the disk
	 * shard by shard (others may be writing to it too). */
	uint64_t need = 0;
	for (uint32_t s = 0; s < w->n_shards; s++)
		need += w->shards[s].file_size;
	struct statvfs vfs;
	if (!statvfs(w->dir, &vfs) && (uint64_t)vfs.f_bavail * vfs.f_frsize < need) {
		char a[32], b[32];
		rc = STRATA_ERR(err, STRATA_ENOSPC, "%s: not enough space: the model needs %s in %u shard%s, %s free",
				w->dir, strata_fmt_bytes(need, a, sizeof(a)), w->n_shards, w->n_shards == 1 ? "" : "s",
				strata_fmt_bytes((uint64_t)vfs.f_bavail * vfs.f_frsize, b, sizeof(b)));
		goto fail;
	}
	for (uint32_t s = 0; s < w->n_shards; s++) {
		struct wshard *sh = &w->shards[s];
		sh->path = shard_path(w->dir, s, "");
		sh->tmp = shard_path(w->dir, s, ".tmp");
		if (!sh->path || !sh->tmp) {
			rc = STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
			goto fail_files;
		}
		sh->fd = open(sh->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (sh->fd < 0) {
			rc = STRATA_ERRNO(err, errno == ENOSPC ? STRATA_ENOSPC : STRATA_EIO, "%s: create", sh->tmp);
			goto fail_files;
		}
		/* Reserve the space now: a full disk fails here, before any data. */
		int e = posix_fallocate(sh->fd, 0, (off_t)sh->file_size);
		if (e && e != EOPNOTSUPP && e != EINVAL) {
			char nb[32];
			rc = write_error(sh->tmp, e, err);
			strata_error_prefix(err, "reserving %s for shard %u of %u",
					    strata_fmt_bytes(sh->file_size, nb, sizeof(nb)), s, w->n_shards);
			goto fail_files;
		}
		if (e && ftruncate(sh->fd, (off_t)sh->file_size)) {
			rc = write_error(sh->tmp, errno, err);
			goto fail_files;
		}
		sh->fd_direct = open(sh->tmp, O_WRONLY | O_CLOEXEC | O_DIRECT); /* -1 (tmpfs): buffered */
	}
	*out = w;
	return STRATA_OK;
fail_files:
	strata_store_writer_abort(w);
	return rc;
fail:
	writer_free(w);
	return rc;
}

int strata_store_writer_add_expert(struct strata_store_writer *w, uint32_t layer, uint32_t e, const void *data,
				   size_t bytes, struct strata_error *err)
{
	if (layer >= w->spec.n_moe_layers || e >= w->spec.n_experts)
		return STRATA_ERR(err, STRATA_EINVAL, "%s: expert (layer %u, expert %u) outside the model", w->dir,
				  layer, e);
	uint32_t eid = strata_eid(&w->spec, layer, e);
	struct strata_extent *x = &w->experts[eid];
	if (bytes != x->payload)
		return STRATA_ERR(err, STRATA_EINVAL, "%s: expert (layer %u, expert %u): %zu bytes, format %s needs %"
				  PRIu64, w->dir, layer, e, bytes, strata_fmt_traits((int)x->fmt)->name, x->payload);
	if (atomic_exchange(&w->added[eid], 1))
		return STRATA_ERR(err, STRATA_EINVAL, "%s: expert (layer %u, expert %u) added twice", w->dir, layer, e);
	x->xxh64 = XXH3_64bits(data, bytes);
	int rc = pwrite_all(w, &w->shards[x->shard], w->shards[x->shard].fd, data, bytes, x->offset, err);
	if (rc)
		atomic_store(&w->added[eid], 0);
	return rc;
}

int strata_store_writer_add_expert_aligned(struct strata_store_writer *w, uint32_t layer, uint32_t e,
					   void *data, size_t buf_bytes, struct strata_error *err)
{
	if (layer >= w->spec.n_moe_layers || e >= w->spec.n_experts)
		return STRATA_ERR(err, STRATA_EINVAL, "%s: expert (layer %u, expert %u) outside the model", w->dir,
				  layer, e);
	uint32_t eid = strata_eid(&w->spec, layer, e);
	struct strata_extent *x = &w->experts[eid];
	struct wshard *sh = &w->shards[x->shard];
	if (sh->fd_direct < 0 || (uintptr_t)data % STRATA_EXTENT_ALIGN || buf_bytes < x->bytes)
		return strata_store_writer_add_expert(w, layer, e, data, x->payload, err);
	if (atomic_exchange(&w->added[eid], 1))
		return STRATA_ERR(err, STRATA_EINVAL, "%s: expert (layer %u, expert %u) added twice", w->dir, layer, e);
	memset((uint8_t *)data + x->payload, 0, x->bytes - x->payload);
	x->xxh64 = XXH3_64bits(data, x->payload);
	int rc = pwrite_all(w, sh, sh->fd_direct, data, x->bytes, x->offset, err);
	if (rc)
		atomic_store(&w->added[eid], 0);
	return rc;
}

bool strata_store_writer_has_copy(const struct strata_store_writer *w, uint32_t layer, uint32_t e)
{
	return layer < w->spec.n_moe_layers && e < w->spec.n_experts && w->copies[strata_eid(&w->spec, layer, e)].bytes;
}

int strata_store_writer_add_copy(struct strata_store_writer *w, uint32_t layer, uint32_t e, const void *data,
				 size_t bytes, struct strata_error *err)
{
	if (!strata_store_writer_has_copy(w, layer, e))
		return STRATA_ERR(err, STRATA_EINVAL, "%s: no low-bit copy of (layer %u, expert %u) was planned", w->dir,
				  layer, e);
	uint32_t eid = strata_eid(&w->spec, layer, e);
	struct strata_extent *x = &w->copies[eid];
	if (bytes != x->payload)
		return STRATA_ERR(err, STRATA_EINVAL, "%s: low-bit copy of (layer %u, expert %u): %zu bytes, format %s "
				  "needs %" PRIu64, w->dir, layer, e, bytes, strata_fmt_traits((int)x->fmt)->name, x->payload);
	atomic_uchar *added = &w->added[w->n_total + w->n_tensors + eid];
	if (atomic_exchange(added, 1))
		return STRATA_ERR(err, STRATA_EINVAL, "%s: low-bit copy of (layer %u, expert %u) added twice", w->dir,
				  layer, e);
	x->xxh64 = XXH3_64bits(data, bytes);
	int rc = pwrite_all(w, &w->shards[x->shard], w->shards[x->shard].fd, data, bytes, x->offset, err);
	if (rc)
		atomic_store(added, 0);
	return rc;
}

int strata_store_writer_add_tensor(struct strata_store_writer *w, const char *name, const void *data,
				   size_t bytes, struct strata_error *err)
{
	for (uint32_t i = 0; i < w->n_tensors; i++) {
		struct strata_tensor_info *t = &w->tensors[i];
		if (strcmp(t->name, name))
			continue;
		if (bytes != t->ext.payload)
			return STRATA_ERR(err, STRATA_EINVAL, "%s: tensor '%s': %zu bytes, its shape needs %" PRIu64,
					  w->dir, name, bytes, t->ext.payload);
		if (atomic_exchange(&w->added[w->n_total + i], 1))
			return STRATA_ERR(err, STRATA_EINVAL, "%s: tensor '%s' added twice", w->dir, name);
		t->ext.xxh64 = XXH3_64bits(data, bytes);
		int rc = pwrite_all(w, &w->shards[t->ext.shard], w->shards[t->ext.shard].fd, data, bytes,
				    t->ext.offset, err);
		if (rc)
			atomic_store(&w->added[w->n_total + i], 0);
		return rc;
	}
	return STRATA_ERR(err, STRATA_ENOTFOUND, "%s: tensor '%s' was not planned in the writer config", w->dir, name);
}

static void encode_header(const struct strata_store_writer *w, uint32_t s, uint8_t *p)
{
	const struct wshard *sh = &w->shards[s];
	uint64_t tab_len = ALIGN_8((uint64_t)w->n_total);
	uint64_t spec_off = STRATA_SHARD_FIXED_BYTES, tab_off = spec_off + STRATA_SHARD_SPEC_BYTES;
	uint64_t exp_off = tab_off + 2 * tab_len;
	uint64_t ten_off = exp_off + ((uint64_t)sh->n_experts + sh->n_copies) * STRATA_SHARD_EXPERT_REC;
	memset(p, 0, sh->header_size);
	memcpy(p + H_MAGIC, STRATA_SHARD_MAGIC, 8);
	strata_le_put32(p + H_VERSION, STRATA_STORE_VERSION);
	strata_le_put32(p + H_FIXED, STRATA_SHARD_FIXED_BYTES);
	strata_le_put64(p + H_HSIZE, sh->header_size);
	strata_le_put64(p + H_DATA, sh->data_off);
	strata_le_put64(p + H_FSIZE, sh->file_size);
	strata_le_put32(p + H_INDEX, s);
	strata_le_put32(p + H_COUNT, w->n_shards);
	strata_le_put64(p + H_STOREID, w->store_id);
	strata_le_put32(p + H_CSUM, STRATA_SHARD_CSUM_XXH3);
	strata_le_put32(p + H_NTOTAL, w->n_total);
	strata_le_put32(p + H_NEXP, sh->n_experts);
	strata_le_put32(p + H_NTEN, sh->n_tensors);
	strata_le_put32(p + H_NTENTOT, w->n_tensors);
	strata_le_put64(p + H_SPECOFF, spec_off);
	strata_le_put64(p + H_TABOFF, tab_off);
	strata_le_put64(p + H_EXPOFF, exp_off);
	strata_le_put64(p + H_TENOFF, ten_off);
	strata_le_put32(p + H_EXPREC, STRATA_SHARD_EXPERT_REC);
	strata_le_put32(p + H_TENREC, STRATA_SHARD_TENSOR_REC);
	strata_le_put64(p + H_CREATED, (uint64_t)time(NULL));
	if (w->n_copies) {
		strata_le_put32(p + H_FLAGS, STRATA_SHARD_F_COPIES);
		strata_le_put32(p + H_NCOPY, sh->n_copies);
	}
	encode_spec(p + spec_off, &w->spec);
	memcpy(p + tab_off, w->tiers, w->n_total);
	memcpy(p + tab_off + tab_len, w->fmts, w->n_total);
	uint8_t *er = p + exp_off, *cr = er + (uint64_t)sh->n_experts * STRATA_SHARD_EXPERT_REC, *tr = p + ten_off;
	for (uint32_t k = sh->first_item; k < sh->first_item + sh->n_items; k++) {
		uint32_t it = w->order[k];
		if (it < w->n_total || it >= w->n_total + w->n_tensors) {
			bool copy = it >= w->n_total;
			uint32_t eid = copy ? it - w->n_total - w->n_tensors : it;
			const struct strata_extent *x = copy ? &w->copies[eid] : &w->experts[eid];
			uint8_t **rp = copy ? &cr : &er, *r = *rp;
			*rp += STRATA_SHARD_EXPERT_REC;
			strata_le_put32(r, eid / w->spec.n_experts);
			strata_le_put32(r + 4, eid % w->spec.n_experts);
			strata_le_put32(r + 8, x->fmt);
			strata_le_put64(r + 16, x->offset);
			strata_le_put64(r + 24, x->bytes);
			strata_le_put64(r + 32, x->payload);
			strata_le_put64(r + 40, x->xxh64);
		} else {
			const struct strata_tensor_info *t = &w->tensors[it - w->n_total];
			memcpy(tr, t->name, strnlen(t->name, STRATA_TENSOR_NAME_MAX - 1));
			strata_le_put32(tr + 96, t->fmt);
			strata_le_put32(tr + 100, t->ndim);
			for (int d = 0; d < 4; d++)
				strata_le_put64(tr + 104 + 8 * d, t->shape[d]);
			strata_le_put64(tr + 136, t->ext.offset);
			strata_le_put64(tr + 144, t->ext.bytes);
			strata_le_put64(tr + 152, t->ext.payload);
			strata_le_put64(tr + 160, t->ext.xxh64);
			tr += STRATA_SHARD_TENSOR_REC;
		}
	}
	strata_le_put64(p + sh->header_size - 8, XXH3_64bits(p, sh->header_size - 8));
}

int strata_store_writer_finish(struct strata_store_writer *w, struct strata_error *err)
{
	for (uint32_t i = 0; i < w->n_total; i++)
		if (w->copies[i].bytes && !atomic_load(&w->added[w->n_total + w->n_tensors + i]))
			return STRATA_ERR(err, STRATA_EINVAL, "%s: low-bit copy of (layer %u, expert %u) was never written",
					  w->dir, i / w->spec.n_experts, i % w->spec.n_experts);
	for (uint32_t i = 0; i < w->n_total + w->n_tensors; i++)
		if (!atomic_load(&w->added[i])) {
			if (i < w->n_total)
				return STRATA_ERR(err, STRATA_EINVAL, "%s: expert (layer %u, expert %u) was never written",
						  w->dir, i / w->spec.n_experts, i % w->spec.n_experts);
			return STRATA_ERR(err, STRATA_EINVAL, "%s: tensor '%s' was never written", w->dir,
					  w->tensors[i - w->n_total].name);
		}
	int rc = STRATA_OK;
	for (uint32_t s = 0; s < w->n_shards && !rc; s++) {
		struct wshard *sh = &w->shards[s];
		uint8_t *hdr = calloc(1, sh->header_size);
		if (!hdr)
			return STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
		encode_header(w, s, hdr);
		rc = pwrite_all(w, sh, sh->fd, hdr, sh->header_size, 0, err);
		free(hdr);
		if (!rc && sh->fd_direct >= 0 && fsync(sh->fd_direct))
			rc = write_error(sh->tmp, errno, err);
		if (!rc && sh->fd_direct >= 0 && close(sh->fd_direct))
			rc = write_error(sh->tmp, errno, err);
		sh->fd_direct = -1;
		if (!rc && fsync(sh->fd))
			rc = write_error(sh->tmp, errno, err);
		if (!rc && close(sh->fd))
			rc = write_error(sh->tmp, errno, err);
		sh->fd = -1;
	}
	if (rc)
		return rc;
	/* Every shard is complete and synced: now make them visible. */
	for (uint32_t s = 0; s < w->n_shards; s++) {
		struct wshard *sh = &w->shards[s];
		if (wrename(sh->tmp, sh->path)) {
			rc = STRATA_ERRNO(err, STRATA_EIO, "%s: rename to %s", sh->tmp, base_name(sh->path));
			for (uint32_t k = 0; k < s; k++) /* leave no half-renamed store behind */
				unlink(w->shards[k].path);
			return rc;
		}
		sh->renamed = 1;
	}
	w->finished = 1;
	/* Remove shards (and .tmp leftovers) of an older, larger store in the
	 * same directory. */
	DIR *d = opendir(w->dir);
	if (d) {
		for (struct dirent *de; (de = readdir(d));) {
			long idx = shard_file_index(de->d_name);
			unsigned t;
			char tail[16];
			if (idx < 0 && strlen(de->d_name) == 22 &&
			    sscanf(de->d_name, "shard-%5u.%15s", &t, tail) == 2 && !strcmp(tail, "strata.tmp"))
				idx = t; /* a leftover .tmp of an older, killed write */
			if (idx >= (long)w->n_shards) {
				char p[PATH_MAX];
				snprintf(p, sizeof(p), "%s/%s", w->dir, de->d_name);
				unlink(p);
			}
		}
		closedir(d);
	}
	int dfd = open(w->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		fsync(dfd);
		close(dfd);
	}
	if (w->final) {
		/* one step: the old model is whole until here, the new one after */
		if (strata_store_kill_after_renames && strata_store_kill_after_renames <= (int)w->n_shards)
			raise(SIGKILL);
		if (renameat2(AT_FDCWD, w->dir, AT_FDCWD, w->final, RENAME_EXCHANGE)) {
			int e = errno;
			w->finished = 0;
			errno = e;
			return STRATA_ERRNO(err, STRATA_EIO, "%s: cannot swap in the new model built in %s", w->final,
					    w->dir);
		}
		carry_over(w->dir, w->final);
		char *parent = strdup(w->final);
		char *sl = parent ? strrchr(parent, '/') : NULL;
		if (sl && sl != parent) {
			*sl = 0;
			if ((dfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
				fsync(dfd);
				close(dfd);
			}
		}
		free(parent);
	}
	return STRATA_OK;
}
