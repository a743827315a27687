/* strata replay (real engine) and strata sim (virtual clock): one option parser. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "cmd_replay.h"
#include "strata/mover.h"
#include "strata/replay.h"
#include "strata/util.h"

/* The built-ins of a role, "a, b, c" (the registry's order). */
static const char *builtin_names(int role, char *buf, size_t len)
{
	size_t o = 0;
	buf[0] = '\0';
	for (unsigned i = 0; o < len; i++) {
		const struct strata_evict_ops *h = strata_policy_builtin_at(role, i); /* the common head */
		if (!h)
			break;
		o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? ", " : "", h->name);
	}
	return buf;
}

static void usage(FILE *f, int virt)
{
	const char *cmd = virt ? "sim" : "replay";
	char names[3][256];
	for (int r = 0; r < STRATA_ROLE_COUNT; r++)
		builtin_names(r, names[r], sizeof(names[r]));
	fprintf(f,
		"usage: strata %s --model DIR --trace FILE [options]\n\n"
		"%s\n\n"
		"  --model DIR          shard directory (strata synth / strata quantize)%s\n"
		"  --trace FILE         routing trace (.strace or .jsonl); its shape must match the model\n"
		"  --vram SIZE          VRAM tier budget (e.g. 8G; default: the engine's)\n"
		"  --ram SIZE           pinned RAM tier budget\n"
		"  --place SPEC         placement policy (default static): %s\n"
		"  --evict SPEC         eviction policy for both cached tiers (default lru):\n"
		"                       %s\n"
		"  --prefetch SPEC      prefetch policy (default none):\n"
		"                       %s\n"
		"                       (strata policies lists their options; future, farthest and\n"
		"                       oracle read the trace's future: offline references)\n"
		"  --on-miss SPEC       full (default) | lowbit[:gate=G,from=nvme|ram]: a miss on an\n"
		"                       expert whose gate weight is below G (0.1) reads its low-bit\n"
		"                       copy instead (stored with --lowbit-copies; strata policies)\n"
		"  --seed N             run seed (policies, activations; default 1)\n"
		"  --max-tokens N       replay the first N tokens only\n"
		"  --prefill-chunk N    prefill tokens per step (default: a request's whole prompt)\n"
		"  --no-hints           do not pass the trace's recorded predictions\n"
		"  --no-future          do not give policies the trace's future (Belady/oracle refuse)\n"
		"%s"
		"  --json FILE          results as JSON ('-' stdout, then no table)\n"
		"  --csv FILE           results as one CSV row with a header ('-' stdout, then no table)\n"
		"  --append             --csv: add a row to an existing file\n"
		"  --move-log FILE      CSV timeline: a row per move (link, kind, expert, bytes, when asked\n"
		"                       for, handed to its mover, submitted, done, collected) and per stall,\n"
		"                       layer computation and compaction; sim and replay write it alike\n"
		"                       (experiments/gpu-replay/movelog.py summarizes one or compares two)\n"
		"  -q, --quiet          no table\n"
		STRATA_CLI_NO_PROGRESS_HELP("        "),
		cmd,
		virt ? "Replay a trace on the engine's virtual clock: the same policies and bookkeeping as replay,\n"
		       "no bytes moved, link and kernel costs from a cost model (strata calibrate)."
		     : "Replay a trace on the real engine: per step and layer, hints, acquire, the expert\n"
		       "computation, release; reports hit rates, bytes per link, prefetch quality, stalls and speed.",
		virt ? ";\n"
		       "                       or a model spec (qwen3-30b-a3b:layers=8): no shards needed,\n"
		       "                       tiers and formats as strata synth would write them" : "",
		names[STRATA_ROLE_PLACE], names[STRATA_ROLE_EVICT], names[STRATA_ROLE_PREFETCH],
		virt ? "  --cost FILE          cost model JSON from strata calibrate (default: built-in defaults)\n"
		       "  --nvme-qd N          override the cost model's NVMe queue depth\n"
		       "  --tiers H,W,C        model spec only: hot/warm/cold share of each layer's experts,\n"
		       "                       percent (default 15,30,55) or fractions (0.15,0.30,0.55)\n"
		       "  --tier-trace FILE    model spec only: rank experts by their use in this trace (the\n"
		       "                       most used go hot, as strata quantize --trace does)\n"
		       "  --formats H,W,C      model spec only: each tier's format (default hot,warm,cold;\n"
		       "                       e.g. q4,warm,cold: the fast-decode q4 for the hot tier)\n"
		     : "  --cost FILE          cost model (strata calibrate) for the time bound, bound_tok_s\n"
		       "                       (default: built-in defaults)\n"
		       "  --compute C          ref (CPU reference) | gpu (CUDA kernels) | none | auto (default)\n"
		       "  --mover M            NVMe mover: uring (default) | mmap | pread\n"
		       "  --queue-depth N      io_uring depth / copies in flight\n"
		       "  --copy MODE          RAM -> VRAM: batch (default: one cudaMemcpyBatchAsync per\n"
		       "                       submit) | each (a cudaMemcpyAsync per expert) | sm (a copy\n"
		       "                       kernel reading pinned RAM)\n"
		       "  --bounce SIZE        NVMe -> VRAM reads through 8 pinned bounce buffers of SIZE\n"
		       "                       (default 4M): the size of each read of a streamed expert\n"
		       "  --prefetch-inflight N[,P]  bytes of prefetch reads (N) and RAM -> VRAM copies (P)\n"
		       "                       in flight at once while no demand waits on the link (default\n"
		       "                       32M,16M; at least one move; timing only, sim ignores it)\n"
		       "  --gpu G              auto (default) | 0 (host stand-in) | 1 (require a GPU)\n"
		       "  --verify             check extent checksums on every NVMe read (default: on each\n"
		       "                       expert's first read, preload included)\n"
		       "  --no-verify          check none (the results' verify field says so)\n");
}

_Static_assert(STRATA_COMPUTE_NONE == 0 && STRATA_COMPUTE_REF == 1 && STRATA_COMPUTE_GPU == 2 &&
		       STRATA_COMPUTE_AUTO == 3 && STRATA_NVME_URING == 0 && STRATA_NVME_MMAP == 1 && STRATA_NVME_PREAD == 2,
	       "strata_cli_compute_names / strata_cli_mover_names are indexed by these values");

/* 1 if output path a names the existing file b (a typo like --csv run.strace). */
static int same_file(const char *a, const char *b)
{
	struct stat sa, sb;
	return a && b && strcmp(a, "-") && !stat(a, &sa) && !stat(b, &sb) && sa.st_dev == sb.st_dev &&
	       sa.st_ino == sb.st_ino;
}

int strata_cli_replay_main(int argc, char **argv, int virt)
{
	const char *cmd = virt ? "sim" : "replay";
	enum { O_MODEL = 256, O_TRACE, O_VRAM, O_RAM, O_PLACE, O_EVICT, O_PREFETCH, O_SEED, O_MAXTOK, O_CHUNK,
	       O_NOHINTS, O_NOFUT, O_COMPUTE, O_MOVER, O_QD, O_GPU, O_VERIFY, O_NOVERIFY, O_JSON, O_CSV, O_APPEND, O_COST,
	       O_NVMEQD, O_PROGRESS, O_TIERS, O_TIER_TRACE, O_COPY, O_NOPROG, O_FORMATS, O_BOUNCE, O_ONMISS, O_PFINFL, O_MOVELOG };
	static const struct option opts[] = {
		{ "model", required_argument, 0, O_MODEL }, { "trace", required_argument, 0, O_TRACE },
		{ "vram", required_argument, 0, O_VRAM }, { "ram", required_argument, 0, O_RAM },
		{ "place", required_argument, 0, O_PLACE }, { "evict", required_argument, 0, O_EVICT },
		{ "prefetch", required_argument, 0, O_PREFETCH }, { "seed", required_argument, 0, O_SEED },
		{ "max-tokens", required_argument, 0, O_MAXTOK }, { "prefill-chunk", required_argument, 0, O_CHUNK },
		{ "no-hints", no_argument, 0, O_NOHINTS }, { "no-future", no_argument, 0, O_NOFUT },
		{ "compute", required_argument, 0, O_COMPUTE }, { "mover", required_argument, 0, O_MOVER },
		{ "queue-depth", required_argument, 0, O_QD }, { "gpu", required_argument, 0, O_GPU },
		{ "verify", no_argument, 0, O_VERIFY }, { "no-verify", no_argument, 0, O_NOVERIFY }, { "json", required_argument, 0, O_JSON },
		{ "csv", required_argument, 0, O_CSV }, { "append", no_argument, 0, O_APPEND },
		{ "cost", required_argument, 0, O_COST }, { "nvme-qd", required_argument, 0, O_NVMEQD },
		{ "progress", no_argument, 0, O_PROGRESS }, { "tiers", required_argument, 0, O_TIERS },
		{ "tier-trace", required_argument, 0, O_TIER_TRACE }, { "formats", required_argument, 0, O_FORMATS },
		{ "copy", required_argument, 0, O_COPY },
		{ "no-progress", no_argument, 0, O_NOPROG }, { "bounce", required_argument, 0, O_BOUNCE },
		{ "on-miss", required_argument, 0, O_ONMISS }, { "prefetch-inflight", required_argument, 0, O_PFINFL },
		{ "move-log", required_argument, 0, O_MOVELOG },
		{ "quiet", no_argument, 0, 'q' }, { "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 },
	};
	struct strata_replay_config c;
	strata_replay_config_defaults(&c);
	c.engine.mode = virt ? STRATA_ENGINE_VIRTUAL : STRATA_ENGINE_REAL;
	struct strata_error err = { 0 };
	const char *json = NULL, *csv = NULL, *cost = NULL;
	int quiet = 0, append = 0, ch, progress = -1;
	uint64_t nvme_qd = 0;
	optind = 1;
	int li = -1;
	for (; (ch = getopt_long(argc, argv, "qh", opts, &li)) != -1; li = -1) {
		uint64_t v = 0;
		switch (ch) {
		case O_MODEL: c.model_dir = optarg; break;
		case O_TRACE: c.trace_path = optarg; break;
		case O_VRAM:
		case O_RAM:
			if (strata_parse_size(optarg, &v, &err)) {
				strata_error_prefix(&err, "--%s", ch == O_VRAM ? "vram" : "ram");
				fprintf(stderr, "strata %s: %s\n", cmd, err.msg);
				return 2;
			}
			c.engine.budget[ch == O_VRAM ? 0 : 1] = v;
			break;
		case O_BOUNCE:
			if (strata_parse_size(optarg, &v, &err) || v < 4096 || v > (1ull << 30)) {
				fprintf(stderr, "strata %s: --bounce: '%s' is not a size from 4K to 1G\n", cmd, optarg);
				return 2;
			}
			c.engine.bounce_bytes = v;
			break;
		case O_PFINFL: {
			char a[64] = "", *p = NULL;
			snprintf(a, sizeof(a), "%s", optarg);
			if ((p = strchr(a, ',')))
				*p++ = 0;
			uint64_t w = 0;
			if (strata_parse_size(a, &v, &err) || !v || (p && (strata_parse_size(p, &w, &err) || !w))) {
				fprintf(stderr, "strata %s: --prefetch-inflight: '%s' is not N or N,P (sizes > 0)\n", cmd,
					optarg);
				return 2;
			}
			c.engine.prefetch_inflight[STRATA_LINK_NVME] = v;
			c.engine.prefetch_inflight[STRATA_LINK_PCIE] = w;
			break;
		}
		case O_PLACE: c.engine.place = optarg; break;
		case O_EVICT: c.engine.evict = optarg; break;
		case O_PREFETCH: c.engine.prefetch = optarg; break;
		case O_ONMISS: c.engine.on_miss = optarg; break;
		case O_SEED:
		case O_MAXTOK:
		case O_CHUNK:
		case O_QD:
		case O_NVMEQD:
			if (strata_cli_u64(cmd, strata_cli_optname(opts, li, ch), optarg, 0, UINT64_MAX, 0, &v))
				return 2;
			if ((ch == O_QD || ch == O_NVMEQD) && v > 4096) {
				fprintf(stderr, "strata %s: %s: '%s' (0..4096; 0: the default)\n", cmd,
					strata_cli_optname(opts, li, ch), optarg);
				return 2;
			}
			if (ch == O_CHUNK && v > UINT32_MAX) {
				fprintf(stderr, "strata %s: --prefill-chunk: '%s' is too large\n", cmd, optarg);
				return 2;
			}
			if (ch == O_SEED)
				c.engine.seed = v;
			else if (ch == O_MAXTOK)
				c.max_tokens = v;
			else if (ch == O_CHUNK)
				c.prefill_chunk = (uint32_t)v;
			else if (ch == O_QD)
				c.engine.queue_depth = (uint32_t)v;
			else
				nvme_qd = v;
			break;
		case O_NOHINTS: c.hints = false; break;
		case O_NOFUT: c.future = false; break;
		case O_COMPUTE:
			if ((c.compute = strata_cli_choice(cmd, "--compute", optarg, strata_cli_compute_names)) < 0)
				return 2;
			break;
		case O_MOVER:
			if ((c.engine.nvme_mover = strata_cli_choice(cmd, "--mover", optarg, strata_cli_mover_names)) < 0)
				return 2;
			break;
		case O_GPU:
			if ((c.engine.use_gpu = strata_cli_choice(cmd, "--gpu", optarg, strata_cli_gpu_names)) < 0)
				return 2;
			if (c.engine.use_gpu == 2)
				c.engine.use_gpu = -1;
			break;
		case O_COPY: {
			int cm = strata_cli_choice(cmd, "--copy", optarg, strata_copy_names);
			if (cm < 0)
				return 2;
			c.engine.copy = (uint32_t)cm;
			break;
		}
		case O_VERIFY: c.engine.verify = STRATA_VERIFY_EVERY; break;
		case O_NOVERIFY: c.engine.verify = STRATA_VERIFY_OFF; break;
		case O_JSON: json = optarg; break;
		case O_MOVELOG: c.engine.move_log = optarg; break;
		case O_CSV: csv = optarg; break;
		case O_APPEND: append = 1; break;
		case O_COST: cost = optarg; break;
		case O_PROGRESS: progress = 1; break;
		case O_NOPROG: progress = 0; strata_cli_no_progress(); break;
		case O_TIERS: c.tiers = optarg; break;
		case O_TIER_TRACE: c.tier_trace = optarg; break;
		case O_FORMATS: c.formats = optarg; break;
		case 'q': quiet = 1; break;
		case 'h': usage(stdout, virt); return 0;
		default: return strata_cli_bad_option(cmd, opts, argc, argv);
		}
	}
	if (optind < argc || !c.model_dir || !c.trace_path) {
		fprintf(stderr, "strata %s: need --model DIR and --trace FILE%s\n", cmd,
			optind < argc ? " (and no positional arguments)" : "");
		usage(stderr, virt);
		return 2;
	}
	if (virt || cost) { /* replay: the links and kernels of the time bound (bound_tok_s) */
		struct strata_cost_file cf;
		if (cost) {
			if (strata_cost_file_load(cost, &cf, &err))
				return strata_cli_fail(cmd, &err);
		} else {
			strata_cost_file_defaults(&cf);
		}
		if (nvme_qd)
			cf.cost.nvme_queue_depth = (uint32_t)nvme_qd;
		c.engine.cost = cf.cost;
		c.kernel_us_per_mb_token = cf.kernel_us_per_mb_token;
		c.kernel_speed_q4 = cf.kernel_speed_q4, c.kernel_speed_q3 = cf.kernel_speed_q3;
		if (virt)
			c.compute = STRATA_COMPUTE_NONE;
	}
	if (same_file(json, c.trace_path) || same_file(csv, c.trace_path)) {
		fprintf(stderr, "strata %s: --%s %s is the trace itself: results would replace it\n", cmd,
			same_file(json, c.trace_path) ? "json" : "csv", same_file(json, c.trace_path) ? json : csv);
		return 2;
	}
	if ((json && !strcmp(json, "-")) || (csv && !strcmp(csv, "-"))) {
		if (json && csv && !strcmp(json, "-") && !strcmp(csv, "-")) {
			fprintf(stderr, "strata %s: --json - and --csv - would mix on stdout; send one to a file\n", cmd);
			return 2;
		}
		quiet = 1; /* stdout carries the results alone */
	}
	if (progress < 0) {
		const char *e = getenv("STRATA_PROGRESS");
		progress = !e || atoi(e) != 0;
	}
	c.progress = progress && !quiet;
	strata_install_sigint();
	struct strata_replay_result r;
	int rc = strata_replay_run(&c, &r, &err);
	if (rc && !(rc == STRATA_EINTR && r.partial))
		return strata_cli_fail(cmd, &err);
	struct strata_error run_err = err;
	/* interrupted: what finished is still written, marked partial */
	if (!quiet)
		strata_replay_print(&r, stdout);
	for (const char *w = r.warning; *w;) {
		const char *nl = strchr(w, '\n');
		int l = nl ? (int)(nl - w) : (int)strlen(w);
		fprintf(stderr, "strata %s: warning: %.*s\n", cmd, l, w);
		w += l + (nl != NULL);
	}
	if (json && strata_replay_write_json(&r, json, &err))
		return strata_cli_fail(cmd, &err);
	if (csv && strata_replay_write_csv(&r, csv, append, &err))
		return strata_cli_fail(cmd, &err);
	if (rc) {
		fprintf(stderr, "strata %s: %s: the %" PRIu64 " steps that finished are %s, marked partial\n", cmd,
			run_err.msg, r.steps, json || csv ? "written" : "shown");
		return 130;
	}
	return 0;
}

int strata_cmd_replay(int argc, char **argv)
{
	return strata_cli_replay_main(argc, argv, 0);
}
