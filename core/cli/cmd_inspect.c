/*
 * strata inspect: a model's tier table and sizes, printed like a model card,
 * either from a shard directory (optionally re-reading and checksumming every
 * extent) or from a spec alone (--preset), without any files.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "quant.h"
#include "strata/store.h"
#include "strata/synth.h"
#include "strata/tier_assign.h"
#include "strata/util.h"
#include "strata/json.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: strata inspect DIR [--json] [--verify] [--buffered]\n"
		"       strata inspect --preset NAME[:key=value,...] [--tiers H,W,C] [--format tiered|bf16]\n"
		"                      [--formats H,W,C] [--json]\n"
		"\n"
		"Print a model's tier table and sizes like a model card: experts, format, bits per\n"
		"weight, GB and GiB and parameters per tier, the reduction against BF16, and the\n"
		"non-routed parameters (from the model spec, at BF16).\n"
		"\n"
		"  --verify        re-read every extent (O_DIRECT where the filesystem allows) and\n"
		"                  check its checksum; exit 1 if any is corrupt\n"
		"  --buffered      with --verify: read through the page cache instead\n"
		"  --preset SPEC   compute the card from a spec alone (no files), with each\n"
		"                  layer's experts split by --tiers H,W,C (percent, default\n"
		"                  15,30,55, or fractions 0.15,0.30,0.55)\n"
		"  --format F      with --preset: tiered (default; each tier in its format) or bf16\n"
		"  --formats H,W,C with --preset: the tiers' formats (default hot,warm,cold; e.g.\n"
		"                  q4,warm,cold)\n"
		"  --json          print the card as JSON\n"
		STRATA_CLI_NO_PROGRESS_HELP("   "));
}

struct card {
	struct strata_model_spec spec;
	uint64_t experts[STRATA_TIER_COUNT], bytes[STRATA_TIER_COUNT], payload[STRATA_TIER_COUNT];
	uint64_t params[STRATA_TIER_COUNT];
	int fmt[STRATA_TIER_COUNT]; /* -1: none, -2: mixed */
	int have_store;
	uint32_t shards, tensors;
	uint64_t tensor_bytes, file_bytes;
	uint64_t copies, copy_bytes; /* low-bit copies stored beside their experts */
	const char *dir;
};

static const char *fmt_label(int f)
{
	return f == -1 ? "-" : f == -2 ? "mixed" : strata_fmt_traits(f)->name;
}

static void human_params(double p, char *buf, size_t len)
{
	if (p >= 1e12)
		snprintf(buf, len, "%.2fT", p / 1e12);
	else if (p >= 1e9)
		snprintf(buf, len, "%.2fB", p / 1e9);
	else if (p >= 1e6)
		snprintf(buf, len, "%.2fM", p / 1e6);
	else
		snprintf(buf, len, "%.0f", p);
}

static void print_card(const struct card *c, int json)
{
	const struct strata_model_spec *s = &c->spec;
	uint64_t pe = strata_model_expert_params(s), n_total = strata_model_total_experts(s);
	uint64_t tb = 0, tp = 0, tpar = 0;
	for (int t = 0; t < STRATA_TIER_COUNT; t++) {
		tb += c->bytes[t];
		tp += c->payload[t];
		tpar += c->params[t];
	}
	double bf16_bytes = 2.0 * (double)tpar;
	double reduction = strata_card_reduction(tpar, tb);
	double nr_bytes = 2.0 * (double)s->nonrouted_params;
	char spec[256];
	strata_model_spec_format(s, spec, sizeof(spec));
	if (json) {
		printf("{\"model\":\"%s\",\"spec\":\"%s\",\"layers\":%u,\"first_moe_layer\":%u,\"moe_layers\":%u,"
		       "\"experts_per_layer\":%u,\"top_k\":%u,\"hidden\":%u,\"inter\":%u,\"shared\":%u,"
		       "\"expert_params\":%" PRIu64 ",\"experts\":%" PRIu64 ",\"tiers\":[",
		       s->name, spec, s->n_layers, s->first_moe_layer, s->n_moe_layers, s->n_experts, s->top_k,
		       s->hidden, s->inter, s->n_shared, pe, n_total);
		for (int t = 0; t < STRATA_TIER_COUNT; t++) {
			double bpw = strata_card_bpw(c->payload[t], c->params[t]);
			printf("%s{\"tier\":%d,\"where\":\"%s\",\"experts\":%" PRIu64 ",\"format\":\"%s\",\"bpw\":%.4f,"
			       "\"payload_bytes\":%" PRIu64 ",\"extent_bytes\":%" PRIu64 ",\"gb\":%.3f,\"gib\":%.3f,"
			       "\"params\":%" PRIu64 "}", t ? "," : "", t, strata_tier_name(t), c->experts[t],
			       fmt_label(c->fmt[t]), bpw, c->payload[t], c->bytes[t], (double)c->bytes[t] / 1e9,
			       (double)c->bytes[t] / (1u << 30), c->params[t]);
		}
		printf("],\"total\":{\"experts\":%" PRIu64 ",\"payload_bytes\":%" PRIu64 ",\"extent_bytes\":%" PRIu64
		       ",\"gb\":%.3f,\"gib\":%.3f,\"params\":%" PRIu64 ",\"bpw\":%.4f},"
		       "\"bf16_routed_bytes\":%.0f,\"reduction_vs_bf16\":%.4f,\"nonrouted_params\":%" PRIu64
		       ",\"nonrouted_bf16_bytes\":%.0f",
		       n_total, tp, tb, (double)tb / 1e9, (double)tb / (1u << 30), tpar,
		       strata_card_bpw(tp, tpar), bf16_bytes, reduction, s->nonrouted_params, nr_bytes);
		if (c->have_store) {
			printf(",\"dir\":");
			strata_json_write_str(stdout, c->dir);
			printf(",\"shards\":%u,\"tensors_stored\":%u,\"tensor_bytes_stored\":%" PRIu64
			       ",\"file_bytes\":%" PRIu64 ",\"lowbit_copies\":%" PRIu64 ",\"lowbit_copy_bytes\":%" PRIu64,
			       c->shards, c->tensors, c->tensor_bytes, c->file_bytes, c->copies, c->copy_bytes);
		}
		printf("}\n");
		return;
	}
	char a[32], b[32], d[32];
	human_params((double)pe, a, sizeof(a));
	human_params((double)tpar, b, sizeof(b));
	printf("model    %s\n", s->name);
	printf("shape    %u layers (%u MoE from layer %u), %u routed experts/layer, top-%u, hidden %u, inter %u",
	       s->n_layers, s->n_moe_layers, s->first_moe_layer, s->n_experts, s->top_k, s->hidden, s->inter);
	if (s->n_shared)
		printf(", %u shared (inter %u)", s->n_shared, s->shared_inter);
	printf("\nexperts  %" PRIu64 " routed x %s params = %s routed params\n\n", n_total, a, b);
	printf("%-5s %-5s %8s  %-6s %7s %10s %10s %10s\n", "tier", "where", "experts", "format", "bpw", "GB", "GiB",
	       "params");
	static const char *names[STRATA_TIER_COUNT] = { "hot", "warm", "cold" };
	for (int t = 0; t < STRATA_TIER_COUNT; t++) {
		double bpw = strata_card_bpw(c->payload[t], c->params[t]);
		human_params((double)c->params[t], a, sizeof(a));
		printf("%-5s %-5s %8" PRIu64 "  %-6s %7.4f %10.3f %10.3f %10s\n", names[t], strata_tier_name(t),
		       c->experts[t], fmt_label(c->fmt[t]), bpw, (double)c->bytes[t] / 1e9,
		       (double)c->bytes[t] / (1u << 30), a);
	}
	human_params((double)tpar, a, sizeof(a));
	printf("%-5s %-5s %8" PRIu64 "  %-6s %7.4f %10.3f %10.3f %10s\n", "total", "", n_total, "",
	       strata_card_bpw(tp, tpar), (double)tb / 1e9, (double)tb / (1u << 30), a);
	printf("\nrouted experts: %.3f GB at BF16 -> %.3f GB, %.2fx smaller than BF16\n", bf16_bytes / 1e9,
	       (double)tb / 1e9, reduction);
	human_params((double)s->nonrouted_params, a, sizeof(a));
	printf("non-routed: %s params (from the spec), %.2f GB at BF16, not counted above\n", a, nr_bytes / 1e9);
	if (c->have_store) {
		printf("stored:   %u shard%s in %s, %s on disk (headers and 4 KiB padding included); %u non-routed "
		       "tensors, %s\n", c->shards, c->shards == 1 ? "" : "s", c->dir,
		       strata_fmt_bytes(c->file_bytes, d, sizeof(d)), c->tensors,
		       strata_fmt_bytes(c->tensor_bytes, b, sizeof(b)));
		if (c->copies)
			printf("copies:   %" PRIu64 " low-bit (%s) copies of hot/warm experts beside them, %s "
			       "(read instead on a miss under --on-miss lowbit)\n", c->copies,
			       strata_fmt_traits(STRATA_FMT_COLD)->name, strata_fmt_bytes(c->copy_bytes, b, sizeof(b)));
	}
}

static int card_from_store(struct strata_store *st, struct card *c)
{
	memset(c, 0, sizeof(*c));
	c->spec = *strata_store_spec(st);
	struct strata_store_tier_summary sum;
	strata_store_summary(st, &sum);
	const uint8_t *tiers = strata_store_tier_table(st), *fmts = strata_store_fmt_table(st);
	for (int t = 0; t < STRATA_TIER_COUNT; t++) {
		c->experts[t] = sum.experts[t];
		c->bytes[t] = sum.bytes[t];
		c->payload[t] = sum.payload[t];
		c->params[t] = sum.params[t];
		c->fmt[t] = -1;
	}
	for (uint32_t i = 0; i < strata_model_total_experts(&c->spec); i++) {
		int *f = &c->fmt[tiers[i]];
		*f = *f == -1 ? fmts[i] : (*f == fmts[i] ? *f : -2);
	}
	c->have_store = 1;
	c->dir = strata_store_dir(st);
	c->shards = strata_store_shard_count(st);
	c->tensors = strata_store_tensor_count(st);
	c->tensor_bytes = sum.tensor_bytes;
	c->copies = sum.copies;
	c->copy_bytes = sum.copy_bytes;
	return 0;
}

static void card_from_spec(const struct strata_model_spec *s, const double frac[STRATA_TIER_COUNT], int tiered,
			   const uint8_t tf[STRATA_TIER_COUNT], struct card *c)
{
	memset(c, 0, sizeof(*c));
	c->spec = *s;
	uint32_t cnt[STRATA_TIER_COUNT];
	strata_tier_frac_counts(s->n_experts, frac, cnt);
	for (int t = 0; t < STRATA_TIER_COUNT; t++) {
		int f = tiered ? tf[t] : STRATA_FMT_BF16;
		struct strata_expert_layout L;
		strata_expert_layout(f, s->hidden, s->inter, &L);
		c->experts[t] = (uint64_t)cnt[t] * s->n_moe_layers;
		c->bytes[t] = c->experts[t] * L.bytes;
		c->payload[t] = c->experts[t] * L.payload;
		c->params[t] = c->experts[t] * strata_model_expert_params(s);
		c->fmt[t] = c->experts[t] ? f : -1;
	}
}

/* Extent i of the store: experts, then tensors, then low-bit copies (NULL: none). */
static const struct strata_extent *nth_extent(struct strata_store *st, uint32_t i)
{
	const struct strata_model_spec *s = strata_store_spec(st);
	uint32_t n_total = strata_model_total_experts(s), nt = strata_store_tensor_count(st);
	if (i < n_total)
		return strata_store_expert(st, i / s->n_experts, i % s->n_experts);
	if (i < n_total + nt)
		return &strata_store_tensor(st, i - n_total)->ext;
	i -= n_total + nt;
	return strata_store_copy(st, i / s->n_experts, i % s->n_experts);
}

/* Re-read every extent and check its checksum. Returns the number of bad ones. */
static int verify_store(struct strata_store *st, int direct, uint64_t *bytes_read, struct strata_error *first)
{
	const struct strata_model_spec *s = strata_store_spec(st);
	uint32_t n = 2 * strata_model_total_experts(s) + strata_store_tensor_count(st);
	uint64_t total = 0, maxb = 0;
	for (uint32_t i = 0; i < n; i++) {
		const struct strata_extent *x = nth_extent(st, i);
		total += x ? x->bytes : 0;
		maxb = x && x->bytes > maxb ? x->bytes : maxb;
	}
	void *buf = strata_aligned_alloc(STRATA_EXTENT_ALIGN, maxb);
	if (!buf) {
		STRATA_ERR(first, STRATA_ENOMEM, "out of memory");
		return -1;
	}
	struct strata_progress p;
	strata_progress_start(&p, "verify", total, "B");
	uint64_t done = 0;
	int bad = 0;
	for (uint32_t i = 0; i < n && !strata_interrupted; i++) {
		const struct strata_extent *x = nth_extent(st, i);
		if (!x)
			continue;
		struct strata_error e = { 0 };
		int rc = strata_store_read_extent(st, x, buf, direct, true, &e);
		if (rc == STRATA_EUNSUPPORTED && direct) {
			direct = 0; /* filesystem without O_DIRECT (tmpfs): read buffered */
			rc = strata_store_read_extent(st, x, buf, false, true, &e);
		}
		if (rc) {
			if (!bad)
				*first = e;
			if (bad < 10)
				fprintf(stderr, "strata inspect: %s\n", e.msg);
			bad++;
		}
		done += x->bytes;
		strata_progress_update(&p, done);
	}
	strata_progress_finish(&p);
	free(buf);
	*bytes_read = done;
	if (strata_interrupted) {
		STRATA_ERR(first, STRATA_EINTR, "verify interrupted");
		return -1;
	}
	return bad;
}

int strata_cmd_inspect(int argc, char **argv)
{
	enum { O_JSON = 256, O_VERIFY, O_PRESET, O_TIERS, O_FORMAT, O_BUFFERED, O_NOPROG, O_FMTS };
	static const struct option opts[] = {
		{ "json", no_argument, 0, O_JSON }, { "verify", no_argument, 0, O_VERIFY },
		{ "buffered", no_argument, 0, O_BUFFERED }, { "preset", required_argument, 0, O_PRESET },
		{ "tiers", required_argument, 0, O_TIERS }, { "format", required_argument, 0, O_FORMAT },
		{ "formats", required_argument, 0, O_FMTS },
		{ "no-progress", no_argument, 0, O_NOPROG }, { "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 },
	};
	int json = 0, verify = 0, tiered = 1, buffered = 0;
	uint8_t tf[STRATA_TIER_COUNT] = STRATA_TIER_FMTS_DEFAULT;
	const char *preset = NULL;
	double frac[STRATA_TIER_COUNT] = { 0 };
	struct strata_error err = { 0 };
	optind = 1;
	opterr = 0;
	for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
		switch (c) {
		case O_JSON: json = 1; break;
		case O_VERIFY: verify = 1; break;
		case O_BUFFERED: buffered = 1; break;
		case O_PRESET: preset = optarg; break;
		case O_TIERS:
			if (strata_tier_frac_parse(optarg, frac, &err)) {
				fprintf(stderr, "strata inspect: %s\n", err.msg);
				return 2;
			}
			break;
		case O_FMTS:
			if (strata_tier_fmts_parse(optarg, tf, &err)) {
				fprintf(stderr, "strata inspect: --formats: %s\n", err.msg);
				return 2;
			}
			break;
		case O_FORMAT:
			if (!strcmp(optarg, "tiered"))
				tiered = 1;
			else if (!strcmp(optarg, "bf16"))
				tiered = 0;
			else {
				fprintf(stderr, "strata inspect: bad --format '%s' (tiered or bf16)\n", optarg);
				return 2;
			}
			break;
		case O_NOPROG: strata_cli_no_progress(); break;
		case 'h': usage(stdout); return 0;
		default: return strata_cli_bad_option("inspect", opts, argc, argv);
		}
	}
	struct card c;
	if (preset) {
		if (optind < argc || verify) {
			fprintf(stderr, "strata inspect: --preset takes no directory and no --verify\n");
			return 2;
		}
		struct strata_model_spec s;
		if (strata_model_spec_parse(preset, &s, &err))
			return strata_cli_fail("inspect", &err);
		card_from_spec(&s, frac, tiered, tf, &c);
		print_card(&c, json);
		return 0;
	}
	if (optind != argc - 1) {
		fprintf(stderr, "strata inspect: give one model directory (or --preset)\n");
		usage(stderr);
		return 2;
	}
	struct strata_store *st;
	if (strata_store_open(argv[optind], &st, &err))
		return strata_cli_fail("inspect", &err);
	card_from_store(st, &c);
	for (uint32_t i = 0; i < c.shards; i++) {
		FILE *f = fopen(strata_store_shard_path(st, i), "rb");
		if (f) {
			fseek(f, 0, SEEK_END);
			c.file_bytes += (uint64_t)ftell(f);
			fclose(f);
		}
	}
	int rc = 0;
	if (verify) {
		strata_install_sigint();
		uint64_t n = 0;
		int bad = verify_store(st, !buffered, &n, &err);
		if (bad < 0) {
			rc = strata_cli_fail("inspect", &err);
		} else if (bad > 0) {
			fprintf(stderr, "strata inspect: verify: %d corrupt extent%s in %s\n", bad, bad == 1 ? "" : "s",
				argv[optind]);
			rc = 1;
		} else if (!json) {
			char b[32];
			printf("verify: ok, every extent's checksum matches (%s read)\n\n",
			       strata_fmt_bytes(n, b, sizeof(b)));
		}
	}
	if (!rc)
		print_card(&c, json);
	strata_store_close(st);
	return rc;
}
