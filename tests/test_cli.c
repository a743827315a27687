/* The `strata` program from the outside: every command and subcommand has
 * --help (exit 0, on stdout), rejects unknown options and bad values (exit 2),
 * and fails cleanly (exit 1, a message naming the file and the cause, no
 * crash) on missing files, corrupt or truncated shards and traces, traces of
 * the wrong shape, expert ids out of range, failing or runaway Lua policies,
 * budgets too small and unwritable outputs.  Also: results are valid JSON and
 * one-header CSV with the same columns across replay, sim and run, and a
 * write that fails half way leaves the file it replaces or appends to as it
 * was.  Table-driven: "@S" in a command is the strata binary, "@D" the
 * suite's temp dir (a tiny model, traces and scripts made once). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "strata/json.h"
#include "testutil.h"

static char *dir;
static char out[65536];

/* Expand @S and @D in fmt into buf. */
static void expand(char *buf, size_t len, const char *fmt)
{
	size_t n = 0;
	for (const char *p = fmt; *p && n + 1 < len; p++) {
		const char *sub = NULL;
		if (p[0] == '@' && p[1] == 'S')
			sub = test_bin("strata");
		else if (p[0] == '@' && p[1] == 'D')
			sub = dir;
		if (sub) {
			n += (size_t)snprintf(buf + n, len - n, "%s", sub);
			p++;
		} else {
			buf[n++] = *p;
		}
	}
	buf[n < len ? n : len - 1] = '\0';
}

static int sh(const char *fmt)
{
	char cmd[8192];
	expand(cmd, sizeof(cmd), fmt);
	return test_run(out, sizeof(out), "%s", cmd);
}

static void write_file(const char *name, const char *text)
{
	char p[4096];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	FILE *f = fopen(p, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

static char *read_file(const char *name, size_t *len)
{
	char p[4096];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	FILE *f = fopen(p, "rb");
	if (!f)
		return NULL;
	char *b = malloc(1 << 20);
	size_t n = fread(b, 1, (1 << 20) - 1, f);
	b[n] = '\0';
	fclose(f);
	if (len)
		*len = n;
	return b;
}

#define R "--vram 1M --ram 4M --gpu 0 --compute ref -q"

static int setup(void **state)
{
	dir = test_mkdtemp();
	if (!dir)
		return -1;
	setenv("STRATA_PROGRESS", "0", 1);
	const char *steps[] = {
		"@S synth --preset tiny --out @D/m --format tiered --codes random",
		"@S trace gen --layers 2 --experts 8 --top-k 2 --requests 1 --prompt 4 --gen 8 -o @D/t.strace",
		"@S trace gen --layers 3 --experts 8 --top-k 2 --requests 1 --prompt 4 --gen 8 -o @D/t3.strace",
		"@S trace convert @D/t.strace @D/t.jsonl",
		/* corrupt copies: a flipped header byte, a half shard, a cut trace */
		"cp -r @D/m @D/mflip && printf '\\132' | dd of=@D/mflip/shard-00000.strata bs=1 seek=40 conv=notrunc",
		"cp -r @D/m @D/mcut && truncate -s 100000 @D/mcut/shard-00000.strata",
		"cp -r @D/m @D/mdata && printf '\\132' | dd of=@D/mdata/shard-00000.strata bs=1 seek=4100 conv=notrunc",
		"cp @D/t.strace @D/tcut.strace && truncate -s -7 @D/tcut.strace",
		"sed '2s/\"layers\":\\[\\[[0-9]*,/\"layers\":[[99,/' @D/t.jsonl > @D/t99.jsonl",
		"touch @D/afile",
		/* hostile inputs: a FIFO named as a shard and as a trace, a raw log
		 * to import, a checkpoint whose config.json says top-k 0 */
		"mkdir @D/mfifo && mkfifo @D/mfifo/shard-00000.strata && mkfifo @D/tfifo.strace",
		"cp @D/t.jsonl @D/g.jsonl",
		"@S trace gen --layers 2 --experts 8 --top-k 2 --requests 1 --prompt 4 --gen 400 -o @D/tlong.strace",
		"printf '\\100\\0\\0\\0\\0\\0\\0\\0{\"a\":1}' > @D/hlen.safetensors",
		"@S quantize --make-test-model @D/hf --spec custom:layers=2,experts=8,top_k=2,hidden=256,inter=128",
		"cp -r @D/hf @D/hfk0 && printf '{\"num_experts_per_tok\": 0}\n' > @D/hfk0/config.json",
		NULL,
	};
	for (int i = 0; steps[i]; i++)
		if (sh(steps[i]) != 0) {
			fprintf(stderr, "setup step failed: %s\n%s\n", steps[i], out);
			return -1;
		}
	write_file("err.lua", "return { on_insert = function(e, n) end, on_access = function(e, n) error('boom') end,\n"
			      "  on_remove = function(e) end, victim = function(n) return nil end }\n");
	write_file("loop.lua", "return { on_insert = function(e, n) while true do end end, on_access = function(e, n) end,\n"
			       "  on_remove = function(e) end, victim = function(n) return nil end }\n");
	write_file("badvic.lua", "return { on_insert = function(e, n) end, on_access = function(e, n) end,\n"
				 "  on_remove = function(e) end, victim = function(n) return 12345 end }\n");
	write_file("syntax.lua", "return { on_insert = function(\n");
	write_file("rerr.lua", "error('script fails')\n");
	write_file("rsyn.lua", "x = = 1\n");
	write_file("badcost.json", "{\"nvme\": ");
	/* a sweep whose workers stay busy for seconds (a slow policy: each access
	 * spends ~1e7 Lua instructions, within the budget) */
	write_file("slow.lua", "return { on_insert = function(e, n) end, on_remove = function(e) end,\n"
			       "  on_access = function(e, n) local x = 0 for i = 1, 4000000 do x = x + i end end,\n"
			       "  victim = function(n) return nil end }\n");
	char sw[8192];
	for (int k = 0; k < 2; k++) {
		snprintf(sw, sizeof(sw),
			 "strata.sweep{ configs = strata.product({ seed = { 1, 2 } }, { mode = 'sim', model = 'tiny',\n"
			 "  trace = '%s/tlong.strace', vram = '300K', ram = '600K', place = 'cache', evict = '%s/slow.lua' }),\n"
			 "  out = '%s/slow%d.csv', jobs = 2 }\n", dir, dir, dir, k);
		char name[32];
		snprintf(name, sizeof(name), "slowsweep%d.lua", k);
		write_file(name, sw);
	}
	*state = NULL;
	return 0;
}

static int teardown(void **state)
{
	test_rmdir(dir);
	free(dir);
	return 0;
}

/* ---- --help and unknown options -------------------------------------- */

static const char *const commands[] = {
	"synth", "inspect", "quantize", "trace", "trace import", "trace gen", "trace stats", "trace convert",
	"trace head", "trace export", "replay", "sim", "calibrate", "run", "policies",
};

static void test_help(void **state)
{
	char cmd[256];
	assert_int_equal(sh("(@S --help 2>/dev/null)"), 0);
	assert_non_null(strstr(out, "usage:"));
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		/* stdout only: help goes to stdout, exit 0 */
		snprintf(cmd, sizeof(cmd), "(@S %s --help 2>/dev/null)", commands[i]);
		int rc = sh(cmd);
		if (rc != 0 || !strstr(out, "usage: strata"))
			fail_msg("strata %s --help: exit %d, stdout:\n%s", commands[i], rc, out);
		/* replay and sim list the built-in policies, the offline ones included */
		if ((!strcmp(commands[i], "replay") || !strcmp(commands[i], "sim")) &&
		    (!strstr(out, "static, cache, llama, future") || !strstr(out, "farthest") || !strstr(out, "oracle")))
			fail_msg("strata %s --help does not list the built-in policies:\n%s", commands[i], out);
		if (i % 4 == 0) { /* -h too, for a few */
			snprintf(cmd, sizeof(cmd), "(@S %s -h 2>/dev/null)", commands[i]);
			if (sh(cmd) != 0 || !strstr(out, "usage: strata"))
				fail_msg("strata %s -h: exit %d", commands[i], rc);
		}
	}
}

/* Progress on the long trace commands and dequantize: off a terminal a line
 * every STRATA_PROGRESS_SECS (0 here: every update) with the rate and ETA,
 * and a last "done in" line; --no-progress (and import's -q) silence it, and
 * --help says so. */
static void test_progress(void **state)
{
	static const char *const runs[][3] = {
		{ "trace gen", "trace gen --layers 2 --experts 8 --top-k 2 --requests 2 --prompt 4 --gen 40 -o @D/pg.strace",
		  "tokens" },
		{ "trace import", "trace import -o @D/pi.strace traces/mixtral-8x7b-instruct/gsm8k_2_routing-head.jsonl",
		  "MB/s" },
		{ "trace export", "trace export --format csv @D/tlong.strace @D/pe.csv", "tokens" },
		{ "trace convert", "trace convert @D/tlong.strace @D/pc.jsonl", "tokens" },
		{ "dequantize", "dequantize --model @D/m --out @D/pd.safetensors", "experts" },
	};
	char cmd[1024];
	for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
		snprintf(cmd, sizeof(cmd), "(STRATA_PROGRESS=1 STRATA_PROGRESS_SECS=0 @S %s >/dev/null)", runs[i][1]);
		if (sh(cmd) != 0 || !strstr(out, runs[i][0]) || !strstr(out, runs[i][2]) || !strstr(out, "elapsed, ETA ") ||
		    !strstr(out, "100.0%") || !strstr(out, "done in "))
			fail_msg("%s: want progress lines with rate, ETA and \"done in\" on stderr:\n%s", runs[i][1], out);
		snprintf(cmd, sizeof(cmd), "(STRATA_PROGRESS=1 STRATA_PROGRESS_SECS=0 @S %s --no-progress >/dev/null)",
			 runs[i][1]);
		if (sh(cmd) != 0 || strstr(out, "ETA"))
			fail_msg("%s --no-progress: want no progress line:\n%s", runs[i][1], out);
		snprintf(cmd, sizeof(cmd), "@S %s --help", runs[i][0]);
		if (sh(cmd) != 0 || !strstr(out, "--no-progress") || !strstr(out, "STRATA_PROGRESS=0"))
			fail_msg("strata %s --help does not document --no-progress:\n%s", runs[i][0], out);
	}
	/* the default interval (5 s) keeps a short job quiet off a terminal */
	assert_int_equal(sh("(STRATA_PROGRESS=1 @S trace export --format csv @D/tlong.strace @D/pe.csv >/dev/null)"), 0);
	assert_null(strstr(out, "trace export:"));
	/* import -q: no progress either; from a pipe the size is unknown: bytes and rate, no percentage */
	assert_int_equal(sh("STRATA_PROGRESS=1 STRATA_PROGRESS_SECS=0 @S trace import -q -o @D/pi.strace "
			    "traces/mixtral-8x7b-instruct/gsm8k_2_routing-head.jsonl"), 0);
	assert_string_equal(out, "");
	assert_int_equal(sh("cat traces/mixtral-8x7b-instruct/gsm8k_2_routing-head.jsonl | (STRATA_PROGRESS=1 "
			    "STRATA_PROGRESS_SECS=0 @S trace import -o @D/pi2.strace - >/dev/null)"), 0);
	if (!strstr(out, "trace import: ") || !strstr(out, "MB/s") || !strstr(out, "done in ") || strstr(out, "%"))
		fail_msg("import from a pipe: want bytes, rate and \"done in\", no percentage:\n%s", out);
}

static void test_unknown_option(void **state)
{
	char cmd[256];
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		snprintf(cmd, sizeof(cmd), "@S %s --no-such-option", commands[i]);
		int rc = sh(cmd);
		if (rc != 2 || !strstr(out, "--no-such-option"))
			fail_msg("strata %s --no-such-option: exit %d (want 2, naming the option):\n%s", commands[i], rc,
				 out);
		/* a short pointer to --help, not the whole help text */
		if (strstr(out, "usage:") || !strstr(out, "--help"))
			fail_msg("strata %s --no-such-option printed the help or no pointer to it:\n%s", commands[i], out);
	}
	/* a misspelt option or command gets "did you mean" */
	static const char *const typos[][2] = {
		{ "@S sim --evcit lru", "did you mean --evict?" },
		{ "@S synth --presett tiny", "did you mean --preset?" },
		{ "@S inspect --jsn", "did you mean --json?" },
		{ "@S trace import --max-warnigs 0", "did you mean --max-warnings?" },
		{ "@S policies --jsn", "did you mean --json?" },
		{ "@S simm", "did you mean 'sim'?" },
	};
	for (size_t i = 0; i < sizeof(typos) / sizeof(typos[0]); i++)
		if (sh(typos[i][0]) != 2 || !strstr(out, typos[i][1]))
			fail_msg("%s: want exit 2 and \"%s\":\n%s", typos[i][0], typos[i][1], out);
	assert_int_equal(sh("@S --version"), 0);
	assert_non_null(strstr(out, "strata 0."));
	assert_int_equal(sh("@S no-such-command"), 2);
	assert_non_null(strstr(out, "unknown command 'no-such-command'"));
	assert_int_equal(sh("@S trace no-such-sub"), 2);
	assert_non_null(strstr(out, "unknown subcommand 'no-such-sub'"));
	assert_int_equal(sh("@S"), 2);
	assert_int_equal(sh("@S trace"), 2);
}

/* ---- the table --------------------------------------------------------- */

struct cli_case {
	const char *cmd;
	int rc;
	const char *want[3]; /* substrings of stdout+stderr */
};

/* Shell: wait (up to 60 s) until the temporary of the output F exists. */
#define WAIT_TMP(f) "for i in $(seq 1200); do [ -e " f ".tmp ] && break; sleep 0.05; done;"

static const struct cli_case cases[] = {
	/* missing required arguments and bad values: usage errors */
	{ "@S synth --out @D/x", 2, { "--preset and --out are required" } },
	{ "@S synth --preset tiny --out @D/x --seed abc", 2, { "--seed: 'abc': not a non-negative whole number" } },
	{ "@S synth --preset tiny --out @D/x --seed=abc", 2, { "--seed: 'abc': not a non-negative whole number" } },
	{ "@S quantize --in @D/x --out @D/q --threads -1", 2, { "--threads: '-1': not a non-negative whole number (0..1024)" } },
	{ "@S quantize --in @D/x --out @D/q --shard-size lots", 2, { "--shard-size" } },
	{ "@S quantize --in @D/x --out @D/q --dtype f64", 2, { "--make-test-model" } },
	{ "@S synth --preset tiny --out @D/x --threads 0", 2, { "bad value '0'" } },
	{ "@S synth --preset tiny --out @D/x --shard-size 0", 2, { "--shard-size" } },
	{ "@S synth --preset tiny --out @D/x --dist cauchy", 2, { "cauchy" } },
	{ "@S synth --preset tiny --out @D/x --seed", 2, { "seed" } },
	{ "@S inspect", 2, { "give one model directory" } },
	{ "@S quantize", 2, { "--in and --out are required" } },
	{ "@S replay --model @D/m", 2, { "need --model DIR and --trace FILE" } },
	{ "@S replay --model @D/m --trace @D/t.strace --vram lots", 2, { "--vram", "lots" } },
	{ "@S replay --model @D/m --trace @D/t.strace --seed -1", 2, { "--seed: '-1'" } },
	{ "@S replay --model @D/m --trace @D/t.strace --compute quantum", 2, { "quantum" } },
	{ "@S replay --model @D/m --trace @D/t.strace --mover carrier-pigeon", 2, { "carrier-pigeon" } },
	{ "@S replay --model @D/m --trace @D/t.strace --gpu 7", 2, { "--gpu" } },
	{ "@S replay --model @D/m --trace @D/t.strace --seed", 2, { "seed" } },
	{ "@S replay --model @D/m --trace @D/t.strace --queue-depth 99999999999", 2, { "--queue-depth", "0..4096" } },
	{ "@S sim --model @D/m --trace @D/t.strace --nvme-qd 5000", 2, { "--nvme-qd" } },
	{ "@S replay --model @D/m --trace @D/t.strace --prefill-chunk 9999999999", 2, { "--prefill-chunk" } },
	{ "@S replay --model @D/m --trace @D/t.strace extra", 2, { "positional" } },
	{ "@S sim --trace @D/t.strace", 2, { "need --model DIR and --trace FILE" } },
	{ "@S sim --model @D/m --trace @D/t.strace --csv @D/t.strace", 2, { "is the trace itself" } },
	{ "@S replay --model @D/m --trace @D/t.strace --json @D/./t.strace", 2, { "is the trace itself" } },
	{ "@S calibrate", 2, { "--model" } },
	{ "@S calibrate --model @D/m --queue-depth 0", 2, { "--queue-depth" } },
	{ "@S calibrate --model @D/m --compute fast", 2, { "fast" } },
	{ "@S run", 2, { "need a script" } },
	{ "@S run -j 0 x.lua", 2, { "--jobs" } },
	{ "@S run --one abc", 2, { "--out" } },
	{ "@S policies --role", 2, { "--role" } },
	{ "@S policies --role cook", 2, { "cook" } },
	{ "@S trace import @D/t.jsonl", 2, { "need -o OUT" } },
	{ "@S trace import -o @D/x.strace --gaps maybe @D/t.jsonl", 2, { "maybe" } },
	{ "@S trace gen", 2, { "need -o OUT" } },
	{ "@S trace gen -o @D/x.strace --seed x1", 2, { "x1" } },
	{ "@S trace gen -o @D/x.strace --alpha nan", 2, { "nan" } },
	{ "@S trace gen -o @D/x.strace --reuse inf", 2, { "inf" } },
	{ "@S trace gen -o @D/x.strace --format xml", 2, { "xml" } },
	{ "@S trace stats", 2, { "usage" } },
	{ "@S trace convert @D/t.strace", 2, { "usage" } },
	{ "@S trace head -n many @D/t.strace", 2, { "many" } },
	{ "@S trace head", 2, { "usage" } },
	/* values the library refuses */
	{ "@S synth --preset no-such-model --out @D/x", 1, { "unknown model preset 'no-such-model'" } },
	{ "@S synth --preset tiny:layers=0 --out @D/x", 1, { "must all be > 0" } },
	{ "@S trace gen -o @D/x.strace --layers 2 --experts 8 --top-k 9", 1, { "bad shape" } },
	{ "@S trace gen -o @D/x.strace --jitter 5", 1, { "jitter" } },
	{ "@S sim --model tiny --trace @D/t.strace -q --tiers 50,50,50", 1, { "sums to 150" } },
	/* a compared axis that cannot change the result is warned about */
	{ "@S sim --model @D/m --trace @D/t.strace -q --evict farthest", 0, { "warning", "did not affect", "place=cache" } },
	{ "@S sim --model @D/m --trace @D/t.strace -q --prefetch lookahead", 0, { "issued nothing", "has none" } },
	{ "@S replay --model @D/m --trace @D/t.strace --gpu 0 --compute none --json -", 0,
	  { "\"vram_tier\": \"host stand-in\"", "\"vram_host_stand_in\": 1", "\"partial\": 0" } },
	{ "@S replay --model @D/m --trace @D/t.strace --gpu 0 --compute none", 0, { "vram (host stand-in)" } },
	{ "@S sim --model @D/m --trace @D/t.strace -q --tiers 15,30,55", 1, { "model spec only" } },
	{ "@S sim --model tiny --trace @D/t.strace -q --tier-trace @D/t3.strace", 1, { "t3.strace", "3 MoE layers" } },
	{ "@S synth --preset tiny --out @D/x --popularity @D/nosuch.json", 1, { "nosuch.json", "No such file" } },
	/* missing files */
	{ "@S inspect @D/nosuch", 1, { "nosuch", "No such file" } },
	{ "@S inspect @D/afile", 1, { "afile", "Not a directory" } },
	{ "@S replay --model @D/nosuch --trace @D/t.strace " R, 1, { "nosuch", "No such file" } },
	{ "@S replay --model @D/m --trace @D/nosuch.strace " R, 1, { "nosuch.strace", "No such file" } },
	{ "@S sim --model @D/m --trace @D/t.strace --cost @D/nosuch.json -q", 1, { "nosuch.json", "No such file" } },
	{ "@S sim --model @D/m --trace @D/t.strace --cost @D/badcost.json -q", 1, { "badcost.json", "bad JSON" } },
	{ "@S calibrate --model @D/nosuch --compute none --gpu 0", 1, { "nosuch" } },
	{ "@S trace stats @D/nosuch.strace", 1, { "nosuch.strace", "No such file" } },
	{ "@S trace head @D/nosuch.strace", 1, { "nosuch.strace", "No such file" } },
	{ "@S trace convert @D/nosuch.strace @D/x.jsonl", 1, { "nosuch.strace", "No such file" } },
	{ "@S trace import -o @D/x.strace @D/nosuch.jsonl", 1, { "nosuch.jsonl", "No such file" } },
	{ "@S trace import -o @D/x.strace @D/afile", 1, { "afile", "no routing rows" } },
	{ "@S run @D/nosuch.lua", 1, { "nosuch.lua", "No such file" } },
	{ "@S quantize --in @D/nosuch --out @D/q", 1, { "nosuch" } },
	/* corrupt and truncated shards */
	{ "@S inspect @D/mflip", 1, { "mflip/shard-00000.strata", "checksum" } },
	{ "@S replay --model @D/mflip --trace @D/t.strace " R, 1, { "mflip/shard-00000.strata", "corrupt" } },
	{ "@S sim --model @D/mflip --trace @D/t.strace -q", 1, { "mflip/shard-00000.strata", "corrupt" } },
	{ "@S inspect @D/mcut", 1, { "mcut/shard-00000.strata", "truncated" } },
	{ "@S replay --model @D/mcut --trace @D/t.strace " R, 1, { "mcut/shard-00000.strata", "truncated" } },
	{ "@S inspect @D/mdata --verify", 1, { "mdata/shard-00000.strata", "checksum mismatch" } },
	/* traces: truncated, wrong shape, expert ids out of range */
	{ "@S trace head @D/tcut.strace", 1, { "tcut.strace", "truncated" } },
	{ "@S trace stats @D/tcut.strace", 1, { "tcut.strace", "truncated" } },
	{ "@S replay --model @D/m --trace @D/tcut.strace " R, 1, { "tcut.strace", "truncated" } },
	{ "@S replay --model @D/m --trace @D/t3.strace " R, 1, { "t3.strace", "does not match" } },
	{ "@S sim --model @D/m --trace @D/t3.strace -q", 1, { "t3.strace", "does not match" } },
	{ "@S replay --model @D/m --trace @D/t99.jsonl " R, 1, { "t99.jsonl:2", "expert id 99 out of range" } },
	{ "@S trace convert @D/t99.jsonl @D/x.strace", 1, { "t99.jsonl:2", "out of range" } },
	/* policies: unknown, bad options, Lua scripts that fail */
	{ "@S replay --model @D/m --trace @D/t.strace " R " --evict no-such", 1, { "no-such" } },
	{ "@S replay --model @D/m --trace @D/t.strace " R " --evict lru:bogus=1", 1, { "unknown option 'bogus'" } },
	{ "@S replay --model @D/m --trace @D/t.strace " R " --prefetch lookahead:depth=abc", 1, { "depth=abc" } },
	{ "@S replay --model @D/m --trace @D/t.strace " R " --evict @D/nosuch.lua", 1, { "nosuch.lua" } },
	{ "@S replay --model @D/m --trace @D/t.strace " R " --evict @D/syntax.lua", 1, { "syntax.lua:" } },
	{ "@S replay --model @D/m --trace @D/t.strace " R " --place cache --vram 300K --ram 600K --evict @D/err.lua", 1,
	  { "err.lua:1: boom", "on_access" } },
	{ "STRATA_LUA_INSTRUCTIONS=100000 @S replay --model @D/m --trace @D/t.strace " R
	  " --place cache --vram 300K --ram 600K --evict @D/loop.lua",
	  1, { "loop.lua", "instruction limit exceeded" } },
	{ "@S replay --model @D/m --trace @D/t.strace " R " --place cache --vram 300K --ram 600K --evict @D/badvic.lua", 1,
	  { "badvic.lua", "out of range" } },
	{ "@S sim --model @D/m --trace @D/t.strace -q --place cache --vram 300K --ram 600K --evict @D/err.lua", 1,
	  { "err.lua:1: boom" } },
	{ "@S run @D/rerr.lua", 1, { "rerr.lua:1: script fails" } },
	{ "@S run @D/rsyn.lua", 1, { "rsyn.lua:1:" } },
	/* budgets too small */
	{ "@S replay --model @D/m --trace @D/t.strace --vram 1 --ram 1M -q --gpu 0", 1, { "VRAM budget", "cannot hold" } },
	{ "@S sim --model @D/m --trace @D/t.strace --vram 1 --ram 1M -q", 1, { "cannot hold" } },
	/* unwritable outputs */
	{ "@S replay --model @D/m --trace @D/t.strace " R " --csv /proc/x/r.csv", 1, { "/proc/x/r.csv" } },
	{ "@S replay --model @D/m --trace @D/t.strace " R " --json @D/afile/r.json", 1, { "afile/r.json", "Not a directory" } },
	{ "@S sim --model @D/m --trace @D/t.strace -q --csv @D/afile/r.csv --append", 1, { "afile/r.csv", "Not a directory" } },
	{ "@S trace gen -o @D/afile/t.strace", 1, { "afile/t.strace", "Not a directory" } },
	{ "@S trace convert @D/t.strace @D/afile/t.jsonl", 1, { "afile/t.jsonl", "Not a directory" } },
	{ "@S trace import -o /proc/x/t.strace @D/t.jsonl", 1, { "/proc/x/t.strace" } },
	{ "@S trace stats @D/t.strace --json @D/afile/s.json", 1, { "strata trace stats", "afile/s.json", "Not a directory" } },
	{ "@S synth --preset tiny --out @D/afile/m", 1, { "afile/m", "Not a directory" } },
	{ "@S synth --preset tiny --out /proc/m", 1, { "/proc/m" } },
	{ "@S calibrate --model @D/m --bytes 1M --compute none --gpu 0 -o @D/afile/c.json", 1,
	  { "afile/c.json", "Not a directory" } },
	{ "@S run --merge @D/afile/x.csv", 1, { "afile/x.csv" } },
	/* no silent clamping: out-of-range values are refused with the value and the range */
	{ "@S quantize --in @D/hf --out @D/q0 --top-k 0", 2, { "--top-k: '0'", "out of range (1..65535)" } },
	{ "@S quantize --in @D/hf --out @D/q0 --top-k 99", 1, { "--top-k 99 is out of range: 1..8" } },
	{ "@S quantize --in @D/hfk0 --out @D/q0", 1, { "num_experts_per_tok is 0", "1..8" } },
	{ "@S quantize --in @D/hf --out @D/q0 --seed 99999999999999999999999", 2, { "too large" } },
	{ "@S synth --preset tiny --out @D/x --seed 99999999999999999999999", 2, { "--seed", "too large" } },
	{ "@S replay --model @D/m --trace @D/t.strace --seed 99999999999999999999999", 2, { "--seed", "too large" } },
	{ "@S trace gen --seed 99999999999999999999999 -o @D/x.strace", 2, { "--seed", "too large" } },
	/* one --force rule for every model writer */
	{ "@S quantize --in @D/hf --out @D/m", 1, { "already holds a model", "--force" } },
	{ "@S synth --preset tiny --out @D/m", 1, { "already holds a model", "--force" } },
	/* an output that is an input */
	{ "@S trace import -o @D/g.jsonl @D/g.jsonl", 1, { "g.jsonl", "refusing to write over an input" } },
	{ "@S trace convert @D/t.strace @D/t.strace", 1, { "refusing to write over an input" } },
	{ "@S trace stats @D/t.strace --json @D/t.strace", 1, { "refusing to write over an input" } },
	/* a test run that finds no suites fails */
	{ "bash tests/run-tests.sh @D", 1, { "no test suites ran", "1 failed" } },
	/* trace writers: the space is checked first, temporaries go on every signal
	 * (sent once the temporary exists: the handlers are in place by then, also
	 * when a sanitizer build under load starts slowly) */
	{ "@S trace gen --gen 4000000000 --requests 1000 -o @D/big.strace", 1, { "big.strace", "not enough space" } },
	{ "@S trace gen --gen 99999999999 -o @D/big.strace", 2, { "--gen", "out of range" } },
	{ "exec 2>&1; @S trace gen --gen 99999999 -o @D/sigint.strace & " WAIT_TMP("@D/sigint.strace") " kill -INT $!; wait $!; echo rc=$?; "
	  "ls @D/sigint.strace* || echo CLEAN", 0, { "interrupted after", "rc=1", "CLEAN" } },
	{ "exec 2>&1; @S trace gen --gen 99999999 -o @D/sigterm.strace & " WAIT_TMP("@D/sigterm.strace") " kill -TERM $!; wait $!; echo rc=$?; "
	  "ls @D/sigterm.strace* || echo CLEAN", 0, { "interrupted after", "rc=1", "CLEAN" } },
	{ "exec 2>&1; @S trace gen --gen 99999999 -o @D/sighup.strace & " WAIT_TMP("@D/sighup.strace") " kill -HUP $!; wait $!; echo rc=$?; "
	  "ls @D/sighup.strace* || echo CLEAN", 0, { "interrupted after", "rc=1", "CLEAN" } },
	/* found by fuzz_import: --gaps fill with a layer no token of a request has
	 * read before the importer's cell array (ASan heap-buffer-overflow) */
	{ "@S trace import --gaps fill -o @D/gf.strace tests/fuzz/corpus/import/gapfill-empty-layer.csv", 1,
	  { "request b layer 0: no row in any of its 3 tokens", "nothing to copy" } },
	/* a safetensors header length past the end of the file */
	{ "@S quantize --in @D/hlen.safetensors --out @D/q0", 1, { "hlen.safetensors", "header claims 64 bytes",
	  "file holds 7" } },
	/* sweep workers never outlive the sweep: SIGINT to the parent alone stops
	 * them (no row recorded for them), SIGKILL of the parent takes them down.
	 * cnt counts the processes running this run's script, by its path in
	 * this run's own temporary directory (another run of the suite on the
	 * machine has another @D; mkdtemp names are letters and digits), as the
	 * command's first word: the shell running this case names it too.
	 * SETTLE waits up to 10 s for the workers to go (a loaded machine schedules
	 * them late) */
#define SETTLE "i=0; while [ $(cnt) != 0 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; "
#define COUNT_RUN(k) "cnt() { n=0; for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' 2>/dev/null <$f | " \
	"grep -q '^[^ ]*/strata run @D/slowsweep" k "[.]lua ' && n=$((n+1)); done; echo $n; }; "
	{ "exec 2>&1; " COUNT_RUN("0") "@S run @D/slowsweep0.lua & P=$!; sleep 1.5; echo before=$(cnt); kill -INT $P; "
	  "wait $P; echo rc=$?; " SETTLE "echo after=$(cnt); "
	  "echo failedrows=$(cat @D/slow0.csv 2>/dev/null | grep -c -e crashed -e stopped)", 0,
	  { "before=3", "rc=130", "after=0" } },
	{ "exec 2>&1; " COUNT_RUN("1") "@S run @D/slowsweep1.lua & P=$!; sleep 1.5; echo before=$(cnt); kill -KILL $P; "
	  "wait $P; echo rc=$?; " SETTLE "echo after=$(cnt)", 0, { "before=3", "rc=137", "after=0" } },
	/* not regular files */
	{ "@S inspect @D/mfifo", 1, { "shard-00000.strata", "not a regular file (a FIFO)" } },
	{ "@S trace stats @D/tfifo.strace", 1, { "tfifo.strace", "FIFO" } },
};

/* Run cases[first..first+n) at once (the suite spends its time starting
 * processes: 4 in flight keep it short under ASan). */
#define BATCH 4
static int run_batch(size_t first, size_t n)
{
	FILE *p[BATCH];
	char cmd[8192];
	int failed = 0;
	for (size_t j = 0; j < n; j++) {
		expand(cmd, sizeof(cmd) - 8, cases[first + j].cmd);
		strcat(cmd, " 2>&1");
		p[j] = popen(cmd, "r");
		assert_non_null(p[j]);
	}
	for (size_t j = 0; j < n; j++) {
		const struct cli_case *c = &cases[first + j];
		size_t got = fread(out, 1, sizeof(out) - 1, p[j]);
		out[got] = '\0';
		char sink[4096];
		while (fread(sink, 1, sizeof(sink), p[j]) > 0)
			;
		int st = pclose(p[j]);
		int rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
		int ok = rc == c->rc;
		for (int k = 0; k < 3 && ok && c->want[k]; k++)
			ok = strstr(out, c->want[k]) != NULL;
		/* never a crash, a sanitizer report or an abort */
		if (strstr(out, "Sanitizer") || strstr(out, "Assertion") || strstr(out, "core dumped"))
			ok = 0;
		if (!ok) {
			fprintf(stderr, "FAIL case %zu: %s\n  exit %d (want %d), want '%s' '%s' '%s'; output:\n%s\n",
				first + j, c->cmd, rc, c->rc, c->want[0] ? c->want[0] : "", c->want[1] ? c->want[1] : "",
				c->want[2] ? c->want[2] : "", out);
			failed++;
		}
	}
	return failed;
}

static void test_cases(void **state)
{
	int failed = 0;
	size_t n = sizeof(cases) / sizeof(cases[0]);
	for (size_t i = 0; i < n; i += BATCH)
		failed += run_batch(i, n - i < BATCH ? n - i : BATCH);
	assert_int_equal(failed, 0);
}

/* ---- results: JSON a notebook can read, one-header CSV, same columns ---- */

static void assert_json_file(const char *name)
{
	char p[4096];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	struct strata_json_doc *d = NULL;
	struct strata_error err = { 0 };
	if (strata_json_parse_file(p, 0, &d, &err))
		fail_msg("%s: %s", name, err.msg);
	strata_json_free(d);
}

static void assert_json_stdout(const char *cmd, const char *name)
{
	char redirected[4096];
	snprintf(redirected, sizeof(redirected), "(%s 2>/dev/null > @D/%s)", cmd, name);
	if (sh(redirected) != 0)
		fail_msg("%s failed:\n%s", cmd, out);
	assert_json_file(name);
}

/* The first line of a file (without the newline). */
static char *header_of(const char *name)
{
	char *b = read_file(name, NULL);
	assert_non_null(b);
	char *nl = strchr(b, '\n');
	if (nl)
		*nl = '\0';
	return b;
}

static int count_lines(const char *s)
{
	int n = 0;
	for (; *s; s++)
		n += *s == '\n';
	return n;
}

static void test_results_formats(void **state)
{
	assert_int_equal(sh("@S replay --model @D/m --trace @D/t.strace " R " --json @D/r.json --csv @D/r.csv"), 0);
	assert_json_file("r.json");
	assert_int_equal(sh("@S sim --model @D/m --trace @D/t.strace -q --json @D/s.json --csv @D/s.csv"), 0);
	assert_json_file("s.json");
	assert_int_equal(sh("@S sim --model @D/m --trace @D/t.strace -q --csv @D/s.csv --append --seed 2"), 0);
	assert_int_equal(sh("@S sim --model @D/m --trace @D/t.strace -q --csv @D/s.csv --append --seed 3"), 0);
	assert_json_stdout("@S sim --model @D/m --trace @D/t.strace --json -", "s2.json"); /* no table mixed in */
	assert_int_equal(sh("(@S sim --model @D/m --trace @D/t.strace --csv - 2>/dev/null)"), 0);
	assert_int_equal(count_lines(out), 2);
	assert_int_equal(sh("@S sim --model @D/m --trace @D/t.strace --csv - --json -"), 2);
	/* a device is written in place (not replaced by a rename), a symlink's target is replaced */
	assert_json_stdout("@S sim --model @D/m --trace @D/t.strace -q --json /dev/stdout", "s3.json");
	assert_int_equal(sh("ln -s s3.json @D/link.json && @S sim --model @D/m --trace @D/t.strace -q --json @D/link.json "
			    "--seed 5 && test -L @D/link.json && grep -c '\"seed\": 5' @D/s3.json"), 0);
	assert_string_equal(out, "1\n");
	assert_json_stdout("@S trace stats @D/t.strace --json -", "ts.json");
	assert_int_equal(sh("@S trace stats @D/t.strace --json @D/ts2.json"), 0);
	assert_json_file("ts2.json");
	assert_json_stdout("@S inspect @D/m --json", "i.json");
	assert_json_stdout("@S inspect --preset qwen3-30b-a3b --json", "ip.json");
	assert_json_stdout("@S policies --json", "p.json");
	assert_json_stdout("@S synth --list-presets --json", "presets.json");
	assert_json_stdout("@S synth --preset tiny --out @D/m2 --json", "synth.json");
	/* paths with quotes and backslashes are escaped, not pasted */
	assert_int_equal(sh("cp @D/t.strace '@D/q\"uo\\te.strace'"), 0);
	assert_json_stdout("@S trace stats '@D/q\"uo\\te.strace' --json -", "tsq.json");
	assert_json_stdout("@S sim --model @D/m --trace '@D/q\"uo\\te.strace' -q --json -", "simq.json");
	assert_json_stdout("@S synth --preset tiny --out '@D/m\"q' --json", "synthq.json");
	assert_json_stdout("@S inspect '@D/m\"q' --json", "iq.json");
	assert_int_equal(sh("@S calibrate --model @D/m --bytes 1M --compute none --gpu 0 -o @D/cost.json"), 0);
	assert_json_file("cost.json");
	assert_int_equal(sh("@S sim --model @D/m --trace @D/t.strace -q --cost @D/cost.json"), 0);

	/* CSV: one header line; replay and sim share their columns */
	char *rh = header_of("r.csv"), *sh_ = header_of("s.csv");
	assert_string_equal(rh, sh_);
	char *s = read_file("s.csv", NULL);
	assert_int_equal(count_lines(s), 4);
	assert_null(strstr(strchr(s, '\n') + 1, "config,mode"));
	free(s);

	/* strata run's sweep rows: run_id,status,error, then replay's columns */
	char script[8192];
	snprintf(script, sizeof(script),
		 "strata.sweep{ configs = { {model='tiny', trace='%s/t.strace', vram='300K', ram='600K', place='cache'},\n"
		 "  {model='tiny', trace='%s/t.strace', evict='no-such'} }, out = '%s/sweep.csv', jobs = 1 }\n",
		 dir, dir, dir);
	write_file("sweep.lua", script);
	assert_int_equal(sh("@S run @D/sweep.lua"), 0);
	char *wh = header_of("sweep.csv");
	assert_non_null(strstr(wh, "run_id,status,error,"));
	size_t lw = strlen(wh), lr = strlen(rh);
	assert_true(lw > lr);
	assert_string_equal(wh + lw - lr, rh);
	s = read_file("sweep.csv", NULL);
	assert_int_equal(count_lines(s), 3);
	/* a row torn by a crash (no newline; counters cut short) is run again on
	 * resume, never kept half */
	char *ok = strstr(s, ",ok,");
	assert_non_null(ok);
	char *bol = ok;
	while (bol > s && bol[-1] != '\n')
		bol--;
	char *eol = strchr(ok, '\n');
	size_t rowlen = (size_t)(eol - bol);
	char *torn = calloc(1, strlen(s) + 1);
	memcpy(torn, s, (size_t)(bol - s));
	memcpy(torn + (bol - s), eol + 1, strlen(eol + 1)); /* the other rows */
	strncat(torn, bol, rowlen / 2);                       /* half the ok row, no newline */
	write_file("sweep.csv", torn);
	assert_int_equal(sh("@S run @D/sweep.lua"), 0);
	char *again = read_file("sweep.csv", NULL);
	assert_int_equal(count_lines(again), 3);
	assert_non_null(strstr(again, ",ok,"));
	for (char *line = strchr(again, '\n') + 1; *line; line = strchr(line, '\n') + 1) {
		int commas = 0;
		for (char *p = line; *p != '\n'; p++)
			commas += *p == ',';
		assert_true(commas >= 10); /* whole rows only */
	}
	free(again);
	free(torn);
	free(s);
	/* a configuration the script no longer runs: its row moves aside */
	snprintf(script, sizeof(script),
		 "strata.sweep{ configs = { {model='tiny', trace='%s/t.strace', evict='no-such'} },\n"
		 "  out = '%s/sweep.csv', jobs = 1 }\n", dir, dir);
	write_file("sweep.lua", script);
	assert_int_equal(sh("@S run @D/sweep.lua"), 0);
	assert_non_null(strstr(out, "moved to"));
	s = read_file("sweep.csv.dropped.csv", NULL);
	assert_non_null(s);
	assert_int_equal(count_lines(s), 2);
	assert_non_null(strstr(s, ",ok,"));
	free(s);
	s = read_file("sweep.csv", NULL);
	assert_int_equal(count_lines(s), 2);
	assert_null(strstr(s, ",ok,"));
	free(s);
	free(wh);
	free(rh);
	free(sh_);
}

/* ---- nothing already written is lost ----------------------------------- */

/* Run cmd with writes limited to the first KiB blocks of a file (SIGXFSZ
 * ignored: write() fails with EFBIG), as a full disk would. */
#define FSIZE(kib, cmd) "(trap '' XFSZ; ulimit -f " #kib "; " cmd ")"

/* Ctrl-C during a replay: the steps that finished are written, marked partial, exit 130. */
static void test_replay_interrupted(void **state)
{
	assert_int_equal(sh("@S synth --preset qwen3-30b-a3b:layers=1,experts=16 --out @D/mq --format tiered "
			    "--codes random && @S trace gen --model qwen3-30b-a3b:layers=1,experts=16 --requests 4 "
			    "--prompt 0 --gen 256 -o @D/tq.strace"), 0);
	/* a signal during the engine's open (a loaded machine) stops it before any
	 * step, with nothing to write: wait longer and try again */
	int rc = sh("( for t in 1 3 8; do rm -f @D/p.json @D/p.csv; @S replay --model @D/mq --trace @D/tq.strace "
		    "--compute ref --gpu 0 --json @D/p.json --csv @D/p.csv -q & pid=$!; sleep $t; kill -INT $pid; "
		    "wait $pid; r=$?; [ -s @D/p.json ] && break; done; echo rc=$r; cat @D/p.json; tail -1 @D/p.csv )");
	assert_int_equal(rc, 0);
	if (!strstr(out, "rc=130") || !strstr(out, "\"partial\": 1") || !strstr(out, "marked partial"))
		fail_msg("want exit 130 and a JSON marked partial:\n%s", out);
	/* the CSV row says so too: its last two columns are partial=1, host stand-in=1 */
	const char *nl = strrchr(out, '\n'), *end = nl;
	while (nl > out && nl[-1] != '\n')
		nl--;
	if (end - nl < 4 || strncmp(end - 4, ",1,1", 4))
		fail_msg("CSV row not marked partial: %.*s", (int)(end - nl), nl);
}

/* Per-tier formats: synth and quantize write the chosen format for each tier
 * (the shard's format table, strata inspect), inspect and sim of a spec size
 * the tiers by it, a replay runs over a q4-hot model, and bad choices are
 * refused with the option and the entry named. */
static void test_tier_formats(void **state)
{
	assert_int_equal(sh("@S synth --preset tiny --out @D/mq4 --format tiered --formats q4,q3,cold --json"), 0);
	if (!strstr(out, "\"formats\":\"q4,q3,cold\""))
		fail_msg("synth --json does not name the formats:\n%s", out);
	assert_int_equal(sh("@S inspect @D/mq4 --json"), 0);
	if (!strstr(out, "\"format\":\"q4\"") || !strstr(out, "\"format\":\"q3\"") || !strstr(out, "\"format\":\"cold\""))
		fail_msg("inspect of a q4,q3,cold model:\n%s", out);
	assert_int_equal(sh("@S replay --model @D/mq4 --trace @D/t.strace " R), 0);
	assert_int_equal(sh("@S inspect --preset qwen3-30b-a3b --formats q4,warm,cold --json"), 0);
	if (!strstr(out, "\"format\":\"q4\",\"bpw\":4.5000"))
		fail_msg("inspect --preset --formats:\n%s", out);
	assert_int_equal(sh("@S sim --model qwen3-30b-a3b:layers=2,experts=8 --trace @D/t.strace --formats q4,warm,cold -q"), 0);
	assert_int_equal(sh("@S quantize --in @D/hf --out @D/hfq4 --formats q4,q3,q3 --tiers 50,25,25 --threads 1 --json "
			    "--no-progress"), 0);
	if (!strstr(out, "\"format\":\"q4\"") || !strstr(out, "\"format\":\"q3\""))
		fail_msg("quantize --formats card:\n%s", out);
	assert_int_equal(sh("@S inspect @D/hfq4 --verify"), 0);
	static const char *const bad[] = {
		"@S synth --preset tiny --out @D/mx --format tiered --formats q4,warm",
		"@S synth --preset tiny --out @D/mx --format tiered --formats bf16,warm,cold",
		"@S synth --preset tiny --out @D/mx --format tiered --formats q5,warm,cold",
		"@S synth --preset tiny --out @D/mx --formats q4,warm,cold",
		"@S quantize --in @D/hf --out @D/mx --formats f32,warm,cold",
		"@S quantize --in @D/hf --out @D/mx --formats q4,warm,cold --budget-bytes 1G",
		"@S inspect --preset tiny --formats q4,,cold",
		"@S sim --model @D/m --trace @D/t.strace --formats q4,warm,cold -q",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = sh(bad[i]);
		if (rc == 0 || (!strstr(out, "formats") && !strstr(out, "format")))
			fail_msg("want a clear refusal from: %s\ngot rc %d:\n%s", bad[i], rc, out);
	}
}

static void test_no_half_files(void **state)
{
	size_t n0, n1;
	/* --json over an existing file: a failing write leaves it as it was */
	write_file("keep.json", "{\"prior\": true}\n");
	assert_int_equal(sh(FSIZE(1, "@S sim --model @D/m --trace @D/t.strace -q --json @D/keep.json")), 1);
	char *k = read_file("keep.json", NULL);
	assert_string_equal(k, "{\"prior\": true}\n");
	free(k);
	assert_int_equal(sh("ls @D | grep -c keep.json"), 0);
	assert_string_equal(out, "1\n"); /* no temp file left behind */

	/* --csv --append: a failing append leaves every earlier row intact.
	 * Rows are added until the next one would cross a KiB boundary, which
	 * is then the file size limit. */
	const char *cmd = "@S sim --model @D/m --trace @D/t.strace -q --csv @D/keep.csv --append";
	assert_int_equal(sh(cmd), 0);
	size_t row = 0;
	for (int i = 0; i < 16; i++) {
		char *b = read_file("keep.csv", &n0);
		free(b);
		if (row && (n0 + 1023) / 1024 * 1024 < n0 + row - 8)
			break;
		assert_int_equal(sh(cmd), 0);
		b = read_file("keep.csv", &n1);
		free(b);
		row = n1 - n0;
	}
	char *before = read_file("keep.csv", &n0);
	assert_true(count_lines(before) >= 3);
	char lim[9000], cmdx[8192];
	expand(cmdx, sizeof(cmdx), cmd);
	snprintf(lim, sizeof(lim), "(trap '' XFSZ; ulimit -f %zu; %s)", (n0 + 1023) / 1024, cmdx);
	assert_int_equal(test_run(out, sizeof(out), "%s", lim), 1);
	assert_non_null(strstr(out, "keep.csv"));
	char *after = read_file("keep.csv", &n1);
	assert_int_equal(n1, n0);
	assert_memory_equal(before, after, n0);
	free(before);
	free(after);

	/* --csv without --append replaces the file whole or not at all */
	snprintf(lim, sizeof(lim), "(trap '' XFSZ; ulimit -f 1; %s)", "@S sim --model @D/m --trace @D/t.strace -q --csv @D/keep.csv");
	assert_int_equal(sh(lim), 1);
	after = read_file("keep.csv", &n1);
	assert_int_equal(n1, n0);
	free(after);

	/* trace stats --json, trace gen/convert, calibrate -o: the same */
	write_file("keep2.json", "[1]\n");
	assert_int_equal(sh(FSIZE(1, "@S trace stats @D/t.strace --json @D/keep2.json")), 1);
	k = read_file("keep2.json", NULL);
	assert_string_equal(k, "[1]\n");
	free(k);
	write_file("keep.jsonl", "prior\n");
	assert_int_equal(sh(FSIZE(1, "@S trace convert @D/t.strace @D/keep.jsonl")), 1);
	k = read_file("keep.jsonl", NULL);
	assert_string_equal(k, "prior\n");
	free(k);
	assert_int_equal(sh("ls -a @D | grep -c tmp"), 1);
	assert_string_equal(out, "0\n");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_help),
		cmocka_unit_test(test_unknown_option),
		cmocka_unit_test(test_progress),
		cmocka_unit_test(test_cases),
		cmocka_unit_test(test_results_formats),
		cmocka_unit_test(test_tier_formats),
		cmocka_unit_test(test_no_half_files),
		cmocka_unit_test(test_replay_interrupted),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
