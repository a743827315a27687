-- Study 2 (CI-sized): lookahead prefetch depth 0..3 against predictor
-- accuracy 50..100%: stall time and decode tok/s on the engine's virtual
-- clock (strata sim, default cost model).
--
--   strata run experiments/lookahead/run.lua [tokens=128] [model=SPEC]
--       [trace=PATH] [vram=256M] [ram=512M] [name=lookahead] [out=DIR]
--       [mode=replay compute=gpu gpu=auto spec=SPEC] [cost=FILE]   (see gpu.sh;
--       model= a shard directory, spec= its shape for the generated traces)
--
-- Without trace=: a scaled Qwen3-30B-A3B and one synthetic trace per
-- accuracy whose recorded predictions (3 layers ahead) are right with that
-- probability; the prefetcher is lookahead:depth=d over those predictions.
-- With trace= (e.g. the Mixtral logs, which carry no predictions): the
-- oracle prefetcher, oracle:depth=d:accuracy=p (the trace's true routing,
-- each predicted expert right with probability p, else a random wrong one).
-- Depth 0 is prefetch=none.  Besides the default lookahead (part
-- "default"), the options before issue 16 (part "fixed": adaptive=0,
-- keep_unused=1, via_ram=0, stage=0), reads landing in RAM (part "via-ram":
-- via_ram=1, stage=-1) and, at 100%, the oracle with the hints' horizon (part
-- "oracle", wrap=0).  Every row carries the bounds of strata/bound.h; the
-- script fails if a row beats one.  Results: results/NAME.csv (one row per
-- run, resumable), results/NAME-plot.csv and results/NAME.md.
local dir = strata.script_dir
local a = strata.arguments{
	out = "results folder (default: results/ beside this script)",
	name = "results name (default lookahead)",
	model = "model spec (default qwen3-30b-a3b:layers=8,experts=64)",
	trace = "routing trace (default: synthetic traces with recorded predictions)",
	tokens = "decode tokens per request of the synthetic traces (default 128)",
	vram = "VRAM budget (default 256M)",
	ram = "RAM budget (default 512M)",
	mode = "sim (default) or replay",
	compute = "replay: ref | gpu | none | auto",
	gpu = "replay: auto | 0 | 1",
	spec = "replay: the model spec of the shards",
	cost = "sim: cost model JSON (strata calibrate)",
}
local results = a.out or (dir .. "/results")
local name = a.name or "lookahead"
local model = a.model or "qwen3-30b-a3b:layers=8,experts=64"
local tokens = tonumber(a.tokens or 128)
local accuracies = { 0.5, 0.75, 0.9, 1.0 }
local depths = { 0, 1, 2, 3 }

local configs = {}
local function add(trace, pf, tags, acc)
	configs[#configs + 1] = {
		mode = a.mode or "sim", model = model, trace = trace, vram = a.vram or "256M", ram = a.ram or "512M",
		cost = a.cost, compute = a.compute, gpu = a.gpu and a.gpu ~= "auto" and tonumber(a.gpu) or nil,
		place = "static:promote=vram", evict = "lru", prefetch = pf, tags = tags,
	}
end
for _, acc in ipairs(accuracies) do
	local trace = a.trace
	if not trace then
		-- One trace per accuracy: the same seed; the predictions differ
		-- (and, since they come from the same random stream, a little of
		-- the routing: see the README).
		trace = strata.trace_gen{
			path = string.format("%s/trace-acc%03d.strace", results, math.floor(acc * 100 + 0.5)),
			model = a.spec or model, seed = 11, requests = 4, prompt = 32, gen = tokens,
			pred_depth = 3, pred_accuracy = acc,
		}
	end
	for _, d in ipairs(depths) do
		local pf = "none"
		if d > 0 then
			pf = a.trace and string.format("oracle:depth=%d:accuracy=%g", d, acc) or ("lookahead:depth=" .. d)
		end
		add(trace, pf, { part = "default", depth = d, accuracy = acc })
		-- the options before issue 16 (no adaptation, unused prefetches kept), for comparison
		if d > 0 and not a.trace then
			add(trace, "lookahead:adaptive=0:keep_unused=1:via_ram=0:stage=0:depth=" .. d, { part = "fixed", depth = d, accuracy = acc })
		end
		-- NVMe reads landing in RAM and staging one layer deeper (options, not the default)
		if d > 0 and not a.trace then
			add(trace, "lookahead:via_ram=1:stage=-1:depth=" .. d, { part = "via-ram", depth = d, accuracy = acc })
		end
		-- a perfect predictor with the recorded hints' horizon (the rest of the token): the
		-- gain a predictor can bring at most
		if d > 0 and acc == 1 and not a.trace then
			add(trace, string.format("oracle:depth=%d:wrap=0", d), { part = "oracle", depth = d, accuracy = acc })
		end
	end
end

local rows = strata.sweep{ name = name, configs = configs, out = results .. "/" .. name .. ".csv" }

-- depth 0 of each accuracy: the baseline every ratio is taken against
local base, oracle = {}, {}
for _, r in ipairs(rows) do
	if r.status == "ok" and r.part == "default" and r.depth == 0 then base[r.accuracy] = r.decode_tok_s end
	if r.status == "ok" and r.part == "oracle" then oracle[r.depth] = r.decode_tok_s end
end
local t, plot, bad = {}, {}, {}
for _, r in ipairs(rows) do
	local acc = string.format("%d%%", math.floor(r.accuracy * 100 + 0.5))
	if r.status == "ok" then
		-- a bound that a policy beats is a bug: the study fails on one
		if r.bound_violations > 0 or r.decode_tok_s > r.bound_tok_s * (1 + 1e-9) then
			bad[#bad + 1] = string.format("%s: %d counters beat their bound, decode %.3f tok/s against %.3f",
				r.run_id, r.bound_violations, r.decode_tok_s, r.bound_tok_s)
		end
		local b = base[r.accuracy]
		local gain = ""
		if r.part == "default" and r.accuracy == 1 and r.depth > 0 and oracle[r.depth] and b then
			gain = string.format("%.0f%%", 100 * (r.decode_tok_s - b) / (oracle[r.depth] - b))
		end
		t[#t + 1] = {
			part = r.part, accuracy = acc, depth = r.depth,
			["vram hit"] = string.format("%.1f%%", 100 * r.hit_rate_vram),
			["stall ms"] = string.format("%.1f", r.stall_ms),
			["decode tok/s"] = string.format("%.2f", r.decode_tok_s),
			["x depth 0"] = b and string.format("%.3f", r.decode_tok_s / b) or "",
			["of oracle gain"] = gain,
			["bound tok/s"] = string.format("%.1f", r.bound_tok_s),
			["prefetch accuracy"] = string.format("%.1f%%", 100 * r.prefetch_accuracy),
			issued = r.prefetch_issued, wasted = r.prefetch_wasted, cancelled = r.prefetch_cancelled,
			promoted = r.prefetch_promoted,
		}
		local hue = r.part == "default" and acc or (r.part == "oracle" and "oracle 100%" or nil)
		if hue then
			plot[#plot + 1] = {
				accuracy = hue, depth = r.depth, hit_vram_pct = 100 * r.hit_rate_vram,
				stall_ms_per_token = r.stall_ms / r.tokens, stall_ms = r.stall_ms,
				decode_tok_s = r.decode_tok_s, prefetch_wasted = r.prefetch_wasted,
				bound_tok_s = r.bound_tok_s,
			}
		end
		if r.part == "default" then
			-- the time bound of this trace (the same at every depth), drawn dashed
			plot[#plot + 1] = { accuracy = "bound " .. acc, depth = r.depth, decode_tok_s = r.bound_tok_s,
				bound_tok_s = r.bound_tok_s }
		end
	else
		t[#t + 1] = { part = r.part, accuracy = acc, depth = r.depth, ["vram hit"] = "error: " .. tostring(r.error) }
	end
end
strata.write_csv(results .. "/" .. name .. "-plot.csv", plot,
	{ "accuracy", "depth", "hit_vram_pct", "stall_ms_per_token", "stall_ms", "decode_tok_s", "prefetch_wasted",
	"bound_tok_s" })
local md = strata.markdown(t, { "part", "accuracy", "depth", "vram hit", "stall ms", "decode tok/s", "x depth 0",
	"of oracle gain", "bound tok/s", "prefetch accuracy", "issued", "wasted", "cancelled", "promoted" })
strata.write_file(results .. "/" .. name .. ".md", md)
io.write(md)
if #bad > 0 then error("bounds beaten (a bug):\n" .. table.concat(bad, "\n")) end
