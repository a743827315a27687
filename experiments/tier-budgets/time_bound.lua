-- The best policy against the time bound (issue 16), on a calibrated clock:
-- this study's synthetic traces (results/trace-seedS.strace, written by
-- run.lua), RAM 256 MiB, place=cache, the offline `farthest` eviction and the
-- oracle prefetch (the run's own future) among the policies, with the cost
-- model the GPU machine measured (experiments/gpu-replay/run1/cost_kimi.json).
-- Bound (c) is the decode speed no policy beats (strata/bound.h), bound (e)
-- the same from the residency the run really had as each decode segment
-- began.  The script fails if a run beats either.
--
--   strata run experiments/tier-budgets/time_bound.lua [out=DIR] [seeds=7,8,9] [cost=FILE]
--       [model=SPEC] [trace=PATH (instead of run.lua's traces)]
--
-- Results: results/time-bound.csv (one row per run; resumable) and
-- results/time-bound.md (mean (min-max) over the seeds).  make.sh runs it
-- after run.lua.
local dir = strata.script_dir
local a = strata.arguments{
	out = "results folder, where run.lua wrote trace-seedS.strace (default: results/ beside this script)",
	seeds = "seeds of the traces, comma-separated (default 7,8,9)",
	cost = "cost model (default experiments/gpu-replay/run1/cost_kimi.json)",
	model = "model spec (default qwen3-30b-a3b:layers=8,experts=64)",
	trace = "one routing trace for every seed (default: run.lua's, results/trace-seedS.strace)",
}
local results = a.out or (dir .. "/results")
local cost = a.cost or (dir .. "/../gpu-replay/run1/cost_kimi.json")
local model = a.model or "qwen3-30b-a3b:layers=8,experts=64"
local runs = {
	{ "128M", "farthest", "none" }, { "128M", "farthest", "oracle:depth=4" }, { "128M", "lru", "lookahead" },
	{ "256M", "farthest", "none" }, { "256M", "farthest", "oracle:depth=8" }, { "256M", "lfu", "none" },
	{ "512M", "farthest", "oracle:depth=8" }, { "512M", "lfu", "none" },
}
local configs = {}
for _, s in ipairs(strata.items(a.seeds or "7,8,9")) do
	local trace = a.trace or string.format("%s/trace-seed%s.strace", results, s)
	if not io.open(trace, "rb") then error(trace .. ": no such trace (make.sh's run.lua writes it)") end
	for _, r in ipairs(runs) do
		configs[#configs + 1] = {
			mode = "sim", model = model, trace = trace, place = "cache", vram = r[1], ram = "256M", evict = r[2],
			prefetch = r[3], cost = cost, seed = 1,
			tags = { vram_budget = r[1], evict_policy = r[2], prefetch_policy = r[3], trace_seed = tonumber(s) },
		}
	end
end
local rows = strata.sweep{ name = "time-bound", configs = configs, out = results .. "/time-bound.csv" }

local cells, order, bad, failed = {}, {}, {}, 0
for _, r in ipairs(rows) do
	if r.status ~= "ok" then
		failed = failed + 1
		io.stderr:write(string.format("%s: %s\n", r.run_id, tostring(r.error)))
	else
		if r.bound_violations > 0 or r.decode_tok_s > r.bound_tok_s * (1 + 1e-9)
			or r.decode_tok_s > r.bound_start_tok_s * (1 + 1e-9) then
			bad[#bad + 1] = string.format("%s: %d counters beat their bound, decode %.3f tok/s against %.3f / %.3f",
				r.run_id, r.bound_violations, r.decode_tok_s, r.bound_tok_s, r.bound_start_tok_s)
		end
		local evict, prefetch = r.evict_policy, r.prefetch_policy
		local key = r.vram_budget .. "/" .. tostring(evict) .. "/" .. tostring(prefetch)
		if not cells[key] then
			cells[key] = { row = { vram = r.vram_budget, evict = evict, prefetch = prefetch }, v = {} }
			order[#order + 1] = key
		end
		local v = cells[key].v
		local function add(k, x) v[k] = v[k] or {}; v[k][#v[k] + 1] = x end
		add("tok", r.decode_tok_s)
		add("c", r.bound_tok_s)
		add("of_c", r.bound_tok_s > 0 and r.decode_tok_s / r.bound_tok_s or 0)
		add("e", r.bound_start_tok_s)
		add("of_e", r.bound_start_tok_s > 0 and r.decode_tok_s / r.bound_start_tok_s or 0)
		add("gb", (r.bytes_nvme_ram + r.bytes_nvme_vram) / 1e9)
		add("min_gb", r.bound_bytes_nvme / 1e9)
	end
end
local cols = { "vram", "evict", "prefetch", "decode tok/s", "bound (c)", "of (c)", "bound (e)", "of (e)",
	"NVMe GB read", "NVMe GB, MIN over VRAM+RAM" }
local t = {}
for _, k in ipairs(order) do
	local c, row = cells[k], cells[k].row
	local function f(name, fmt) return select(4, strata.spread(c.v[name], fmt)) end
	row["decode tok/s"] = f("tok", "%.1f")
	row["bound (c)"] = f("c", "%.1f")
	row["of (c)"] = f("of_c", "%.3f")
	row["bound (e)"] = f("e", "%.1f")
	row["of (e)"] = f("of_e", "%.3f")
	row["NVMe GB read"] = f("gb", "%.2f")
	row["NVMe GB, MIN over VRAM+RAM"] = f("min_gb", "%.2f")
	t[#t + 1] = row
end
local md = strata.markdown(t, cols)
strata.write_file(results .. "/time-bound.md", md)
io.write("\nThe best policy against the time bound (cost model " .. cost .. ", RAM 256M; mean (min-max) over the seeds):\n\n", md)
if failed > 0 then io.write(string.format("\n%d configurations failed (see the CSV)\n", failed)) end
if #bad > 0 then error("bounds beaten (a bug):\n" .. table.concat(bad, "\n")) end
