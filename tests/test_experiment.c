/* Experiment scripts: strata.run/sweep over forked workers, CSV rows, error
 * rows, resume, script errors, helpers. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "strata/experiment.h"
#include "strata/trace.h"
#include "testutil.h"

static char *dir;

static int setup(void **state)
{
	dir = test_mkdtemp();
	setenv("STRATA_PROGRESS", "0", 1);
	return dir ? 0 : -1;
}

static int teardown(void **state)
{
	test_rmdir(dir);
	free(dir);
	return 0;
}

static const char *script(const char *name, const char *body)
{
	static char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(body, f);
	fclose(f);
	return path;
}

static int run(const char *path, int jobs, int fresh, struct strata_error *err)
{
	struct strata_experiment_opts o = { .script = path, .jobs = (uint32_t)jobs, .fresh = fresh };
	return strata_experiment_main(&o, err);
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	static char buf[1 << 16];
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = 0;
	fclose(f);
	return strdup(buf);
}

static int count_lines(const char *s, const char *needle)
{
	int n = 0;
	for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

/* The shared sweep: three configurations, one of which fails. */
static const char sweep_lua[] =
	"local d = strata.script_dir\n"
	"local model = 'custom:layers=2,experts=8,top_k=2,hidden=256,inter=128'\n"
	"local trace = strata.trace_gen{ path = d .. '/t.strace', model = model, seed = 3, requests = 2,\n"
	"  prompt = 4, gen = 24, pred_depth = 1, reuse_file = true }\n"
	"local configs = strata.product({ evict = { 'lru', 'no-such-policy', 'fifo' } },\n"
	"  { mode = 'sim', model = model, trace = trace, vram = 400000, ram = 800000, place = 'cache' })\n"
	"for _, c in ipairs(configs) do c.tags = { label = 'x' .. c.evict } end\n"
	"local rows = strata.sweep{ configs = configs, out = d .. '/out/rows.csv', jobs = tonumber(strata.args.jobs) }\n"
	"assert(#rows == 3)\n"
	"local ok, bad = 0, 0\n"
	"for _, r in ipairs(rows) do\n"
	"  if r.status == 'ok' then\n"
	"    ok = ok + 1\n"
	"    assert(r.accesses > 0 and r.hits_vram + r.hits_ram + r.hits_nvme == r.accesses, r.run_id)\n"
	"    assert(r.config:find('evict=' .. r.label:sub(2), 1, true), r.config)\n"
	"  else\n"
	"    bad = bad + 1\n"
	"    assert(r.error:find('no-such-policy', 1, true), r.error)\n"
	"  end\n"
	"end\n"
	"assert(ok == 2 and bad == 1)\n"
	"-- rows come back in configuration order\n"
	"assert(rows[1].label == 'xlru' and rows[2].label == 'xno-such-policy' and rows[3].label == 'xfifo')\n"
	"local back = strata.read_csv(d .. '/out/rows.csv')\n"
	"assert(#back == 3)\n"
	"strata.write_file(d .. '/table.md', strata.markdown(rows, { 'label', 'status', 'hit_rate_vram' }))\n";

static void test_sweep_rows_errors_resume(void **state)
{
	struct strata_error err = { 0 };
	const char *path = script("sweep.lua", sweep_lua);
	char csv[PATH_MAX];
	snprintf(csv, sizeof(csv), "%s/out/rows.csv", dir);
	int rc = run(path, 2, 0, &err);
	if (rc)
		fail_msg("%s", err.msg);
	char *first = slurp(csv);
	assert_non_null(first);
	/* header + 3 rows; the failing configuration has its own row */
	assert_int_equal(count_lines(first, "\n"), 4);
	const char *head = "run_id,status,error,label,config,mode,compute,trace,model,seed,vram_bytes,ram_bytes,tokens,";
	assert_true(!strncmp(first, head, strlen(head)));
	assert_int_equal(count_lines(first, ",ok,"), 2);
	assert_int_equal(count_lines(first, ",error,\""), 1);
	assert_non_null(strstr(first, "no-such-policy"));
	char md[PATH_MAX];
	snprintf(md, sizeof(md), "%s/table.md", dir);
	char *table = slurp(md);
	assert_non_null(table);
	assert_non_null(strstr(table, "| label | status | hit_rate_vram |\n|---|---|---|\n| xlru | ok | "));
	free(table);

	/* Resume: ok rows are kept byte for byte (a rerun would change wall_s),
	 * the failed one is retried and fails again. */
	rc = run(path, 1, 0, &err);
	if (rc)
		fail_msg("%s", err.msg);
	char *second = slurp(csv);
	assert_int_equal(count_lines(second, "\n"), 4);
	char *nl = first;
	for (int i = 0; i < 3; i++) {
		char *end = strchr(nl, '\n');
		if (strstr(nl, ",ok,") && strstr(nl, ",ok,") < end) {
			char line[8192];
			snprintf(line, sizeof(line), "%.*s", (int)(end - nl + 1), nl);
			assert_non_null(strstr(second, line));
		}
		nl = end + 1;
	}
	assert_int_equal(count_lines(second, ",error,\""), 1);
	free(second);

	/* --fresh runs everything again */
	rc = run(path, 2, 1, &err);
	assert_int_equal(rc, 0);
	second = slurp(csv);
	assert_int_equal(count_lines(second, "\n"), 4);
	free(second);

	/* Rows are keyed on the trace's content, not its path: a different
	 * trace at the same path (the script reuses the file) is run again,
	 * not resumed from rows of the old one. */
	char tpath[PATH_MAX + 16];
	snprintf(tpath, sizeof(tpath), "%s/t.strace", dir);
	uint64_t k_old, k_new;
	assert_int_equal(strata_trace_content_key(tpath, &k_old, &err), 0);
	struct strata_trace_gen_config g;
	strata_trace_gen_defaults(&g);
	g.n_moe_layers = 2;
	g.n_experts = 8;
	g.top_k = 2;
	g.requests = 1;
	g.prompt_len = 3;
	g.gen_len = 5;
	assert_int_equal(strata_trace_gen(&g, tpath, STRATA_TRACE_FMT_AUTO, &err), 0);
	assert_int_equal(strata_trace_content_key(tpath, &k_new, &err), 0);
	assert_true(k_old != k_new);
	rc = run(path, 2, 0, &err);
	if (rc)
		fail_msg("%s", err.msg);
	second = slurp(csv);
	char key[64];
	snprintf(key, sizeof(key), "trace_sum=%016llx", (unsigned long long)k_new);
	assert_int_equal(count_lines(second, key), 3);      /* every row is of the new trace */
	assert_int_equal(count_lines(second, ",8,3,5,"), 2); /* tokens, prefill, decode of the ok rows */
	free(second);
	free(first);
}

static void test_script_errors(void **state)
{
	struct strata_error err = { 0 };
	const char *path = script("typo.lua",
		"local x = 1\n"
		"strata.run{ mode = 'sim', model = 'custom:layers=1,experts=4,top_k=1', trace = 't', evcit = 'lru' }\n");
	assert_int_equal(run(path, 1, 0, &err), STRATA_ESCRIPT);
	assert_non_null(strstr(err.msg, "typo.lua:2: config: unknown key 'evcit'"));

	path = script("syntax.lua", "local x = \n");
	assert_int_equal(run(path, 1, 0, &err), STRATA_ESCRIPT);
	assert_non_null(strstr(err.msg, "syntax.lua:2:"));

	/* a run whose trace is missing: an error row from strata.run, not a script error */
	path = script("missing.lua",
		"strata.arguments{ k = 'a test argument' }\n"
		"local r = strata.run{ mode = 'sim', model = 'custom:layers=1,experts=4,top_k=1,hidden=64,inter=32',\n"
		"  trace = '/nonexistent/t.strace' }\n"
		"assert(r.status == 'error' and r.error:find('/nonexistent/t.strace', 1, true), r.error)\n"
		"assert(strata.args.k == 'v' and strata.args[1] == 'k=v')\n");
	char *argv[] = { "k=v" };
	struct strata_experiment_opts o = { .script = path, .jobs = 1, .argc = 1, .argv = argv };
	int rc = strata_experiment_main(&o, &err);
	if (rc)
		fail_msg("%s", err.msg);

	/* unknown study arguments are errors, before anything runs: a typo
	 * against the declared ones, or any key=value to a script that
	 * declares none */
	path = script("declared.lua", "strata.arguments{ policies = 'eviction policies' }\n"
				      "strata.write_file(strata.script_dir .. '/ran', 'x')\n");
	char *typo[] = { "polices=lru" };
	struct strata_experiment_opts ot = { .script = path, .jobs = 1, .argc = 1, .argv = typo };
	assert_int_equal(strata_experiment_main(&ot, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "declared.lua: unknown argument 'polices' (this script takes: policies); "
					"did you mean 'policies'?"));
	assert_null(strchr(err.msg, '\n')); /* one line: no Lua traceback */
	char *positional[] = { "lru" };
	ot.argv = positional;
	assert_int_equal(strata_experiment_main(&ot, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "declared.lua: argument not of the form key=value: 'lru'"));
	char ran[PATH_MAX + 8];
	snprintf(ran, sizeof(ran), "%s/ran", dir);
	assert_int_equal(access(ran, F_OK), -1); /* stopped before it ran anything */
	char *help[] = { "help=1" };
	ot.argv = help;
	assert_int_equal(strata_experiment_main(&ot, &err), 0); /* listed on stdout */
	assert_int_equal(access(ran, F_OK), -1);
	ot.argv = typo;
	path = script("undeclared.lua", "strata.run{ mode = 'sim', model = 'x', trace = 'y' }\n");
	ot.script = path;
	assert_int_equal(strata_experiment_main(&ot, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "does not declare its arguments"));
	assert_null(strchr(err.msg, '\n'));

	/* results written by another sweep are not silently mixed */
	char csv[PATH_MAX];
	snprintf(csv, sizeof(csv), "%s/other.csv", dir);
	FILE *f = fopen(csv, "w");
	fputs("a,b,c\n1,2,3\n", f);
	fclose(f);
	path = script("mixed.lua",
		"strata.sweep{ out = strata.script_dir .. '/other.csv', configs = { { mode = 'sim',\n"
		"  model = 'custom:layers=1,experts=4,top_k=1,hidden=64,inter=32', trace = 'x' } } }\n");
	assert_int_equal(run(path, 1, 0, &err), STRATA_ESCRIPT);
	assert_non_null(strstr(err.msg, "other.csv: not a results file of strata run"));
	char *kept = slurp(csv);
	assert_string_equal(kept, "a,b,c\n1,2,3\n"); /* left as it was */
	free(kept);
}

/* A results file written under other columns (an older Strata, other tags)
 * is not an error: it moves whole to OUT.old-columns.csv (no row is lost),
 * rows that have every column of this sweep are carried over, the others
 * run again, and stderr says so. */
static void test_schema_change(void **state)
{
	static char out[1 << 16];
	char sub[PATH_MAX], csv[PATH_MAX + 16], old[PATH_MAX + 64];
	snprintf(sub, sizeof(sub), "%s/schema", dir);
	mkdir(sub, 0777);
	snprintf(csv, sizeof(csv), "%s/s.csv", sub);
	char lua[PATH_MAX + 16];
	snprintf(lua, sizeof(lua), "%s/s.lua", sub);
	FILE *f = fopen(lua, "w");
	assert_non_null(f);
	fputs("local d = strata.script_dir\n"
	      "local t = strata.trace_gen{ path = d .. '/t.strace', model = 'tiny', seed = 3, requests = 1, prompt = 2,\n"
	      "  gen = 6, reuse_file = true }\n"
	      "strata.sweep{ out = d .. '/s.csv', configs = strata.product({ evict = { 'lru', 'fifo' } },\n"
	      "  { mode = 'sim', model = 'tiny', trace = t, vram = '600K', ram = '1200K', place = 'cache', tags = { k = 'a' } }) }\n",
	      f);
	fclose(f);
	const char *strata = test_bin("strata");
	assert_int_equal(test_run(out, sizeof(out), "%s run %s", strata, lua), 0);
	char *orig = slurp(csv);
	assert_int_equal(count_lines(orig, ",ok,"), 2);

	/* an older file with one more column (since dropped): carried over as is */
	assert_int_equal(test_run(out, sizeof(out), "sed -i '1s/$/,extra/; 2,$s/$/,7/' %s", csv), 0);
	assert_int_equal(test_run(out, sizeof(out), "%s run %s", strata, lua), 0);
	if (!strstr(out, "was written with other columns (gone: extra)") || !strstr(out, "its 2 rows moved to") ||
	    !strstr(out, "2 carried over") || !strstr(out, "2 of 2 rows already in"))
		fail_msg("want the rows carried over:\n%s", out);
	char *now = slurp(csv);
	assert_string_equal(now, orig); /* the rows, byte for byte, in this sweep's columns */
	free(now);
	snprintf(old, sizeof(old), "%s.old-columns.csv", csv);
	now = slurp(old);
	assert_non_null(now);
	assert_int_equal(count_lines(now, ",7\n"), 2);
	free(now);

	/* an older file that lacks a column this sweep writes (its last one):
	 * moved aside whole (beside the first, under a new name), the rows run again */
	assert_int_equal(test_run(out, sizeof(out), "awk -F, 'BEGIN { OFS = \",\" } { NF = NF - 1; print }' %s > %s.x && "
				  "mv %s.x %s", csv, csv, csv, csv), 0);
	assert_int_equal(test_run(out, sizeof(out), "%s run %s", strata, lua), 0);
	if (!strstr(out, "was written with other columns (new: ") || !strstr(out, "0 carried over") ||
	    !strstr(out, ".old-columns-2.csv"))
		fail_msg("want the rows run again:\n%s", out);
	now = slurp(csv);
	assert_int_equal(count_lines(now, ",ok,"), 2);
	assert_true(!strncmp(now, orig, strchr(orig, '\n') - orig + 1)); /* this sweep's header */
	free(now);
	snprintf(old, sizeof(old), "%s.old-columns-2.csv", csv);
	now = slurp(old);
	assert_non_null(now);
	assert_int_equal(count_lines(now, "\n"), 3); /* its header and both rows */
	free(now);
	free(orig);
}

static void test_helpers(void **state)
{
	struct strata_error err = { 0 };
	const char *path = script("helpers.lua",
		"local p = strata.product({ b = { 1, 2 }, a = { 'x', 'y', 'z' } }, { fixed = true })\n"
		"assert(#p == 6 and p[1].a == 'x' and p[1].b == 1 and p[2].b == 2 and p[6].a == 'z' and p[6].fixed)\n"
		"local md = strata.markdown({ { n = 1, v = 0.123456 }, { n = 2, v = 'a|b' } }, { 'n', 'v' })\n"
		"assert(md == '| n | v |\\n|---|---|\\n| 1 | 0.1235 |\\n| 2 | a\\\\|b |\\n', md)\n"
		"local f = strata.script_dir .. '/h.csv'\n"
		"strata.write_csv(f, { { a = 1, b = 'x,y' }, { a = 2.5 } }, { 'a', 'b' })\n"
		"local r = strata.read_csv(f)\n"
		"assert(#r == 2 and r[1].a == 1 and r[1].b == 'x,y' and r[2].a == 2.5 and r[2].b == nil)\n"
		"local m, lo, hi, t = strata.spread({ 2, 4, 9 }, '%.1f')\n"
		"assert(m == 5 and lo == 2 and hi == 9 and t == '5.0 (2.0-9.0)', t)\n"
		"assert(select(4, strata.spread({ 3.25 }, '%.2f')) == '3.25' and select(4, strata.spread({})) == '')\n"
		"assert(select(4, strata.spread({ -1, 1 }, '%g')) == '0 (-1 to 1)')\n"
		"local it = strata.items('7,,8'); assert(#it == 2 and it[1] == '7' and it[2] == '8')\n"
		"assert(#strata.items('a|b;c', ';') == 2 and strata.items('a|b;c', '|')[2] == 'b;c')\n"
		"assert(strata.cpus() >= 1 and strata.jobs >= 1)\n"
		"assert(io and io.open and os.getenv and not os.execute and not io.popen)\n");
	int rc = run(path, 1, 0, &err);
	if (rc)
		fail_msg("%s", err.msg);
}

/* Export the sweep as job lines, run them as a cluster would, merge the
 * parts, and the script resumes from the merged CSV without running. */
static void test_export_one_merge(void **state)
{
	struct strata_error err = { 0 };
	char sub[PATH_MAX], jobs[PATH_MAX], out[PATH_MAX + 32], cmd[3 * PATH_MAX];
	snprintf(sub, sizeof(sub), "%s/cluster", dir);
	mkdir(sub, 0777);
	snprintf(jobs, sizeof(jobs), "%s/jobs.txt", sub);
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/run.lua", sub);
	FILE *f = fopen(path, "w");
	fputs(sweep_lua, f);
	fclose(f);
	setenv("STRATA_EXE", test_bin("strata"), 1);
	struct strata_experiment_opts o = { .script = path, .jobs = 1, .export_jobs = jobs };
	/* the script asserts on finished rows: in export mode they are pending,
	 * so run it with a guard */
	f = fopen(path, "w");
	fprintf(f, "local real_sweep = strata.sweep\n"
		   "strata.sweep = function(t) local r = real_sweep(t)\n"
		   "  if r[1].status == 'pending' then error('exported') end return r end\n%s", sweep_lua);
	fclose(f);
	int rc = strata_experiment_main(&o, &err);
	assert_int_equal(rc, STRATA_ESCRIPT);
	assert_non_null(strstr(err.msg, "exported"));
	unsetenv("STRATA_EXE");
	char *list = slurp(jobs);
	assert_non_null(list);
	assert_int_equal(count_lines(list, "\n"), 3);
	assert_non_null(strstr(list, " run --one 'mode=sim;"));
	free(list);
	char outbuf[4096];
	snprintf(cmd, sizeof(cmd), "bash '%s'", jobs);
	assert_int_equal(test_run(outbuf, sizeof(outbuf), "%s", cmd), 0);
	snprintf(out, sizeof(out), "%s/out/rows.csv", sub);
	snprintf(cmd, sizeof(cmd), "'%s' run --merge '%s' '%s'/out/rows.csv.parts/*.csv", test_bin("strata"), out, sub);
	assert_int_equal(test_run(outbuf, sizeof(outbuf), "%s", cmd), 0);
	assert_non_null(strstr(outbuf, "merged 3 rows"));
	char *merged = slurp(out);
	assert_int_equal(count_lines(merged, "\n"), 4);
	assert_int_equal(count_lines(merged, ",ok,"), 2);
	/* the script now finds the two ok rows and retries only the failed one */
	o.export_jobs = NULL;
	rc = strata_experiment_main(&o, &err);
	if (rc)
		fail_msg("%s", err.msg);
	char *after = slurp(out);
	char *ok1 = strstr(merged, "\n") + 1;
	char line[8192];
	snprintf(line, sizeof(line), "%.*s", (int)(strchr(ok1, '\n') - ok1 + 1), ok1);
	if (strstr(line, ",ok,"))
		assert_non_null(strstr(after, line));
	free(after);
	free(merged);
	/* a malformed run_id is refused */
	snprintf(cmd, sizeof(cmd), "'%s' run --one 'mode=sim;bogus' --out '%s/x.csv'", test_bin("strata"), sub);
	assert_int_equal(test_run(outbuf, sizeof(outbuf), "%s", cmd), 1);
	assert_non_null(strstr(outbuf, "not key=value"));
}

/* The RAM -> VRAM copy mode of a replay configuration: in the run id only
 * when set (older ids stay valid), parsed back, run, and a bad one refused
 * naming the choices. */
static void test_copy_key(void **state)
{
	struct strata_error err = { 0 };
	char mdir[PATH_MAX], trace[PATH_MAX], cmd[3 * PATH_MAX], outbuf[4096];
	const char *spec = "custom:layers=2,experts=8,top_k=2,hidden=256,inter=128";
	snprintf(mdir, sizeof(mdir), "%s/copy-model", dir);
	snprintf(trace, sizeof(trace), "%s/copy.strace", dir);
	snprintf(cmd, sizeof(cmd), "'%s' synth --preset %s --out '%s' --format tiered --codes random", test_bin("strata"),
		 spec, mdir);
	assert_int_equal(test_run(outbuf, sizeof(outbuf), "%s", cmd), 0);
	snprintf(cmd, sizeof(cmd), "'%s' trace gen -o '%s' --model %s --requests 1 --prompt 4 --gen 8 --seed 2",
		 test_bin("strata"), trace, spec);
	assert_int_equal(test_run(outbuf, sizeof(outbuf), "%s", cmd), 0);
	struct strata_experiment_config c, back;
	strata_experiment_config_defaults(&c);
	c.virt = 0;
	snprintf(c.model, sizeof(c.model), "%s", mdir);
	snprintf(c.trace, sizeof(c.trace), "%s", trace);
	/* auto: the GPU kernels where a GPU is (the engine's VRAM tier is then
	 * device memory, which --compute ref cannot read), else the reference */
	snprintf(c.compute, sizeof(c.compute), "auto");
	c.vram = 200000, c.ram = 400000;
	strata_experiment_config_id(&c);
	assert_null(strstr(c.run_id, "copy="));
	snprintf(c.copy, sizeof(c.copy), "each");
	strata_experiment_config_id(&c);
	assert_non_null(strstr(c.run_id, ";copy=each"));
	assert_int_equal(strata_experiment_config_parse_id(c.run_id, &back, &err), 0);
	assert_string_equal(back.copy, "each");
	struct strata_replay_result res;
	int rc = strata_experiment_run_one(&back, &res, &err);
	if (rc)
		fail_msg("%s", err.msg);
	assert_true(res.stats.accesses > 0);
	snprintf(back.copy, sizeof(back.copy), "bogus");
	assert_int_equal(strata_experiment_run_one(&back, &res, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "copy 'bogus' (auto, each, batch, sm)"));
	snprintf(back.copy, sizeof(back.copy), "sm");
	snprintf(back.mover, sizeof(back.mover), "aio");
	assert_int_equal(strata_experiment_run_one(&back, &res, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "mover 'aio' (uring, mmap, pread)"));
	snprintf(back.mover, sizeof(back.mover), "pread");
	snprintf(back.compute, sizeof(back.compute), "tpu");
	assert_int_equal(strata_experiment_run_one(&back, &res, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "compute 'tpu' (none, ref, gpu, auto)"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sweep_rows_errors_resume),
		cmocka_unit_test(test_script_errors),
		cmocka_unit_test(test_schema_change),
		cmocka_unit_test(test_helpers),
		cmocka_unit_test(test_export_one_merge),
		cmocka_unit_test(test_copy_key),
	};
	return cmocka_run_group_tests_name("experiment", tests, setup, teardown);
}
