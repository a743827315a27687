-- Study 2 (CI-sized): lookahead prefetch depth 0..3 against predictor
-- accuracy 50..100%: stall time and decode tok/s on the engine's virtual
-- clock (strata sim, default cost model).
--
--   strata run experiments/lookahead/run.lua [tokens=128] [model=SPEC]
--       [trace=PATH | drawn=PATTERN] [vram=256M] [ram=512M] [name=lookahead] [out=DIR] [seeds=11,12,13]
--       [mode=replay compute=gpu gpu=auto spec=SPEC] [cost=FILE]   (see gpu.sh;
--       model= a shard directory, spec= its shape for the generated traces)
--
-- Without trace=: a scaled Qwen3-30B-A3B and one synthetic trace per
-- accuracy whose recorded predictions (3 layers ahead) are right with that
-- probability; the prefetcher is lookahead:depth=d over those predictions.
-- With trace= (e.g. the Mixtral logs, which carry no predictions): the
-- oracle prefetcher, oracle:depth=d:accuracy=p (the trace's true routing,
-- each predicted expert right with probability p, else a random wrong one).
-- With drawn= (e.g. the Mixtral logs with predictions drawn by `strata trace
-- convert --pred-depth 3 --pred-accuracy P --pred-seed S`; PATTERN names them,
-- %d the accuracy in percent, %s the seed): lookahead:depth=d over those
-- predictions, as without trace= but for part "fixed".
-- Depth 0 is prefetch=none.  Besides the default lookahead (part
-- "default"), the options before issue 16 (part "fixed": adaptive=0,
-- keep_unused=1, via_ram=0, stage=0), NVMe reads straight into VRAM (part
-- "direct": via_ram=0, stage=0, the default before via_ram=auto), no staging
-- (part "no-stage": stage=0, the default before staging one layer deeper
-- into free RAM), reads landing in RAM always (part "via-ram": via_ram=1,
-- stage=-1) and, at 100%, the oracle
-- with the hints' horizon (part "oracle", wrap=0).  Every row carries the bounds of strata/bound.h; the
-- script fails if a row beats one.  Every configuration runs once per seed:
-- the seed of the synthetic traces, or with trace= the run's seed (the
-- oracle's wrong guesses); tables and plots give the mean and the min-max
-- range.  Results: results/NAME.csv (one row per run, resumable),
-- results/NAME-plot.csv and results/NAME.md.
local dir = strata.script_dir
local a = strata.arguments{
	out = "results folder (default: results/ beside this script)",
	name = "results name (default lookahead)",
	model = "model spec (default qwen3-30b-a3b:layers=8,experts=64)",
	trace = "routing trace (default: synthetic traces with recorded predictions)",
	drawn = "routing traces with drawn predictions, a pattern (%d: accuracy percent, %s: seed)",
	tokens = "decode tokens per request of the synthetic traces (default 128)",
	vram = "VRAM budget (default 256M)",
	ram = "RAM budget (default 512M)",
	mode = "sim (default) or replay",
	compute = "replay: ref | gpu | none | auto",
	gpu = "replay: auto | 0 | 1",
	spec = "replay: the model spec of the shards",
	cost = "sim: cost model JSON (strata calibrate)",
	seeds = "seeds, comma-separated (default 11,12,13): of the synthetic traces, or with trace= of the oracle's wrong guesses",
}
local results = a.out or (dir .. "/results")
local name = a.name or "lookahead"
local model = a.model or "qwen3-30b-a3b:layers=8,experts=64"
local tokens = tonumber(a.tokens or 128)
local accuracies = { 0.5, 0.75, 0.9, 1.0 }
local depths = { 0, 1, 2, 3 }
local seeds = {}
for _, v in ipairs(strata.items(a.seeds or "11,12,13")) do seeds[#seeds + 1] = tonumber(v) end

local configs = {}
local function add(trace, pf, tags, seed)
	tags.trace_seed = not a.trace and seed or nil -- drawn=: the seed of the predictions and of the run
	configs[#configs + 1] = {
		mode = a.mode or "sim", model = model, trace = trace, vram = a.vram or "256M", ram = a.ram or "512M",
		cost = a.cost, compute = a.compute, gpu = a.gpu and a.gpu ~= "auto" and tonumber(a.gpu) or nil,
		place = "static:promote=vram", evict = "lru", prefetch = pf, tags = tags, seed = (a.trace or a.drawn) and seed or nil,
	}
end
for _, seed in ipairs(seeds) do
for _, acc in ipairs(accuracies) do
	local trace = a.trace
	if a.drawn then
		trace = a.drawn:gsub("%%d", string.format("%d", math.floor(acc * 100 + 0.5))):gsub("%%s", tostring(seed))
	elseif not trace then
		-- One trace per accuracy and seed: at one seed the predictions differ
		-- (and, since they come from the same random stream, a little of
		-- the routing: see the README).
		trace = strata.trace_gen{
			path = string.format("%s/trace-acc%03d-seed%d.strace", results, math.floor(acc * 100 + 0.5), seed),
			model = a.spec or model, seed = seed, requests = 4, prompt = 32, gen = tokens,
			pred_depth = 3, pred_accuracy = acc,
		}
	end
	for _, d in ipairs(depths) do
		local pf = "none"
		if d > 0 then
			pf = a.trace and string.format("oracle:depth=%d:accuracy=%g", d, acc) or ("lookahead:depth=" .. d)
		end
		add(trace, pf, { part = "default", depth = d, accuracy = acc }, seed)
		-- the options before issue 16 (no adaptation, unused prefetches kept), for comparison
		if d > 0 and not a.trace and not a.drawn then
			add(trace, "lookahead:adaptive=0:keep_unused=1:via_ram=0:stage=0:depth=" .. d,
				{ part = "fixed", depth = d, accuracy = acc }, seed)
		end
		-- NVMe reads straight into VRAM, no staging (the default before via_ram=auto)
		if d > 0 and not a.trace then
			add(trace, "lookahead:via_ram=0:stage=0:depth=" .. d, { part = "direct", depth = d, accuracy = acc },
				seed)
		end
		-- no staging (the default before stage=-1, staging one layer deeper into free RAM)
		if d > 0 and not a.trace then
			add(trace, "lookahead:stage=0:depth=" .. d, { part = "no-stage", depth = d, accuracy = acc }, seed)
		end
		-- NVMe reads landing in RAM always, evicting for them, and staging one layer deeper (not the default)
		if d > 0 and not a.trace then
			add(trace, "lookahead:via_ram=1:stage=-1:depth=" .. d, { part = "via-ram", depth = d, accuracy = acc },
				seed)
		end
		-- a perfect predictor with the recorded hints' horizon (the rest of the token): the
		-- gain a predictor can bring at most
		if d > 0 and acc == 1 and not a.trace then
			add(trace, string.format("oracle:depth=%d:wrap=0", d), { part = "oracle", depth = d, accuracy = acc },
				seed)
		end
	end
end
end

local rows = strata.sweep{ name = name, configs = configs, out = results .. "/" .. name .. ".csv" }

-- depth 0 of each accuracy and seed: the baseline every ratio is taken against
local function seed_of(r) return r.trace_seed or r.seed end
local base, oracle = {}, {}
for _, r in ipairs(rows) do
	local s = seed_of(r)
	if r.status == "ok" and r.part == "default" and r.depth == 0 then base[r.accuracy .. "/" .. s] = r.decode_tok_s end
	if r.status == "ok" and r.part == "oracle" then oracle[r.depth .. "/" .. s] = r.decode_tok_s end
end
-- table rows: one per (part, accuracy, depth), each value a list over the seeds
local t, cells, plot, bad, failed = {}, {}, {}, {}, false
local function cell(r, acc)
	local key = r.part .. "/" .. acc .. "/" .. r.depth
	if not cells[key] then
		cells[key] = { row = { part = r.part, accuracy = acc, depth = r.depth }, v = {} }
		t[#t + 1] = cells[key].row
	end
	return cells[key]
end
local function put(c, col, v)
	c.v[col] = c.v[col] or {}
	c.v[col][#c.v[col] + 1] = v
end
for _, r in ipairs(rows) do
	local acc = string.format("%d%%", math.floor(r.accuracy * 100 + 0.5))
	local s = seed_of(r)
	if r.status == "ok" then
		-- a bound that a policy beats is a bug: the study fails on one
		if r.bound_violations > 0 or r.decode_tok_s > r.bound_tok_s * (1 + 1e-9) then
			bad[#bad + 1] = string.format("%s: %d counters beat their bound, decode %.3f tok/s against %.3f",
				r.run_id, r.bound_violations, r.decode_tok_s, r.bound_tok_s)
		end
		local b = base[r.accuracy .. "/" .. s]
		local o = oracle[r.depth .. "/" .. s]
		local c = cell(r, acc)
		if r.part == "default" and r.accuracy == 1 and r.depth > 0 and o and b then
			put(c, "of oracle gain %", 100 * (r.decode_tok_s - b) / (o - b))
		end
		put(c, "vram hit %", 100 * r.hit_rate_vram)
		put(c, "stall ms", r.stall_ms)
		put(c, "decode tok/s", r.decode_tok_s)
		if b then put(c, "x depth 0", r.decode_tok_s / b) end
		put(c, "bound tok/s", r.bound_tok_s)
		put(c, "prefetch accuracy %", 100 * r.prefetch_accuracy)
		put(c, "issued", r.prefetch_issued)
		put(c, "wasted", r.prefetch_wasted)
		put(c, "cancelled", r.prefetch_cancelled)
		put(c, "promoted", r.prefetch_promoted)
		local hue = r.part == "default" and acc or (r.part == "oracle" and "oracle 100%" or nil)
		if hue then
			plot[#plot + 1] = {
				accuracy = hue, seed = s, depth = r.depth, hit_vram_pct = 100 * r.hit_rate_vram,
				stall_ms_per_token = r.stall_ms / r.tokens, stall_ms = r.stall_ms,
				decode_tok_s = r.decode_tok_s, prefetch_wasted = r.prefetch_wasted,
				bound_tok_s = r.bound_tok_s,
			}
		end
		if r.part == "default" then
			-- the time bound of this trace (the same at every depth), drawn dashed
			plot[#plot + 1] = { accuracy = "bound " .. acc, seed = s, depth = r.depth, decode_tok_s = r.bound_tok_s,
				bound_tok_s = r.bound_tok_s }
		end
	else
		failed = true
		cell(r, acc).row.error = string.format("seed %s: %s", tostring(s), tostring(r.error))
	end
end
-- the cells: mean (min-max) over the seeds; the prefetch counts: their mean
local fmts = { ["vram hit %"] = "%.1f", ["stall ms"] = "%.1f", ["decode tok/s"] = "%.2f", ["x depth 0"] = "%.3f",
	["of oracle gain %"] = "%.0f", ["bound tok/s"] = "%.1f", ["prefetch accuracy %"] = "%.1f" }
for _, c in pairs(cells) do
	for col, vals in pairs(c.v) do
		if fmts[col] then
			c.row[col] = select(4, strata.spread(vals, fmts[col]))
		else
			c.row[col] = string.format("%.0f", (strata.spread(vals)))
		end
	end
end
strata.write_csv(results .. "/" .. name .. "-plot.csv", plot,
	{ "accuracy", "seed", "depth", "hit_vram_pct", "stall_ms_per_token", "stall_ms", "decode_tok_s", "prefetch_wasted",
	"bound_tok_s" })
local md = strata.markdown(t, { "part", "accuracy", "depth", "vram hit %", "stall ms", "decode tok/s", "x depth 0",
	"of oracle gain %", "bound tok/s", "prefetch accuracy %", "issued", "wasted", "cancelled", "promoted",
	failed and "error" or nil })
if #seeds > 1 then md = string.format("Mean (min-max) over %d seeds; prefetch counts: their mean.\n\n%s", #seeds, md) end
strata.write_file(results .. "/" .. name .. ".md", md)
io.write(md)
if #bad > 0 then error("bounds beaten (a bug):\n" .. table.concat(bad, "\n")) end
