-- The leaderboard: every policy (the textbook built-ins and the published
-- baselines: llama.cpp's expert cache, LFRU, MoE-Infinity, SpecMD
-- Least-Stale, ProMoE's stride prefetch, ExpertFlow's adaptive horizon) on every trace at three VRAM budgets, on the engine's virtual
-- clock (strata sim; the default cost model, or cost=FILE from strata
-- calibrate).  Hit rates per tier and decode tok/s, with the bounds (bound_*
-- columns) that no policy may beat.
--
--   strata run experiments/leaderboard/run.lua [traces=LIST] [ram=SIZE] [cost=FILE] [name=leaderboard]
--
-- traces: ';'-separated label|model|trace|vram1,vram2,vram3 entries (a
-- trace path, or "gen" for a seeded synthetic trace of the model); default:
-- two synthetic traces (Qwen3-30B-A3B scaled to 8x64, and OLMoE-shaped 16x64
-- with a flatter popularity).  make.sh adds the trained models' own routing
-- and the Mixtral-8x7B-Instruct traces when present.  Results: results/NAME.csv (one row per run; resumable: a
-- rerun skips what is there), results/NAME-table.md and results/NAME-plot.csv.
local dir = strata.script_dir
local a = strata.arguments{
	out = "results folder (default: results/ beside this script)",
	name = "results name: NAME.csv, NAME-table.md, NAME-plot.csv (default leaderboard)",
	traces = "';'-separated label|model|trace|vram1,vram2,vram3 entries (default: two synthetic traces)",
	ram = "RAM budget (default 256M)",
	cost = "cost model from strata calibrate (default: the built-in one)",
	tokens = "decode tokens per request of the synthetic traces (default 96)",
}
local results = a.out or (dir .. "/results")
local name = a.name or "leaderboard"
local ram = a.ram or "256M"

-- Every eviction policy with demand fetching, every prefetcher with LRU,
-- and the bound pair.  llama.cpp's cache is its placement and eviction.
local entries = {
	{ "lru", "cache", "lru", "none" }, { "fifo", "cache", "fifo", "none" },
	{ "lfu", "cache", "lfu", "none" }, { "lfu-decay", "cache", "lfu-decay", "none" },
	{ "random", "cache", "random", "none" }, { "lfru", "cache", "lfru", "none" },
	{ "llama.cpp", "llama", "llama", "none" }, { "llama.cpp inserts=2", "llama:inserts=2", "llama", "none" },
	{ "moe-infinity", "cache", "moe-infinity", "moe-infinity" },
	{ "moe-infinity evict", "cache", "moe-infinity", "none" },
	{ "least-stale", "cache", "least-stale", "none" },
	{ "lru+lookahead", "cache", "lru", "lookahead:depth=2" }, { "lru+history", "cache", "lru", "history" },
	{ "lru+promoe", "cache", "lru", "promoe" }, { "lru+expertflow", "cache", "lru", "expertflow" },
	{ "farthest", "cache", "farthest", "none" }, { "farthest+oracle", "cache", "farthest", "oracle:depth=2" },
}

local traces = {}
local spec = a.traces or ("qwen-syn|qwen3-30b-a3b:layers=8,experts=64|gen|48M,96M,192M;" ..
	"olmoe-syn|olmoe:layers=16|gen|96M,192M,384M")
for _, e in ipairs(strata.items(spec, ";")) do
	local f = strata.items(e, "|")
	if #f ~= 4 then error("traces: '" .. e .. "' is not label|model|trace|vram1,vram2,vram3") end
	local path = f[3]
	if path == "gen" then
		path = strata.trace_gen{
			path = results .. "/" .. f[1] .. ".strace", model = f[2], seed = 17, requests = 4,
			prompt = 32, gen = tonumber(a.tokens or 96), interleave = true, pred_depth = 2,
			pred_accuracy = 0.8, alpha = f[1]:match("olmoe") and 0.6 or 1.0,
		}
	end
	traces[#traces + 1] = { label = f[1], model = f[2], trace = path, vram = strata.items(f[4]) }
end

local configs = {}
for _, t in ipairs(traces) do
	for bi, v in ipairs(t.vram) do
		for _, p in ipairs(entries) do
			configs[#configs + 1] = {
				mode = "sim", model = t.model, trace = t.trace, vram = v, ram = ram, seed = 1,
				place = p[2], evict = p[3], prefetch = p[4], cost = a.cost,
				tags = { trace_label = t.label, policy = p[1], budget = tostring(bi) },
			}
		end
	end
end

local rows = strata.sweep{ name = name, configs = configs, out = results .. "/" .. name .. ".csv" }

local plot, failed = {}, 0
for _, r in ipairs(rows) do
	if r.status == "ok" then
		plot[#plot + 1] = {
			trace = r.trace_label, policy = r.policy, budget = r.budget, vram_mib = r.vram_bytes / 1048576,
			hit_vram_pct = 100 * r.hit_rate_vram, hit_ram_pct = 100 * r.hit_rate_ram,
			hit_nvme_pct = 100 * r.hit_rate_nvme, decode_tok_s = r.decode_tok_s,
			bound_hit_vram_pct = 100 * (1 - r.bound_moves_vram / r.accesses), bound_tok_s = r.bound_tok_s,
			bound_ratio = r.bound_ratio,
		}
	else
		failed = failed + 1
		io.stderr:write(string.format("%s: %s\n", r.run_id, tostring(r.error)))
	end
end
strata.write_csv(results .. "/" .. name .. "-plot.csv", plot,
	{ "trace", "policy", "budget", "vram_mib", "hit_vram_pct", "hit_ram_pct", "hit_nvme_pct", "decode_tok_s",
	  "bound_hit_vram_pct", "bound_tok_s", "bound_ratio" })

-- One table per trace: a line per policy, VRAM hit rate and tok/s at each budget.
local md = {}
for _, t in ipairs(traces) do
	local by, order = {}, {}
	for _, p in ipairs(plot) do
		if p.trace == t.label then
			if not by[p.policy] then by[p.policy] = { policy = p.policy }; order[#order + 1] = p.policy end
			local b = t.vram[tonumber(p.budget)]
			by[p.policy]["vram hit " .. b] = string.format("%.1f%%", p.hit_vram_pct)
			by[p.policy]["ram hit " .. b] = string.format("%.1f%%", p.hit_ram_pct)
			by[p.policy]["tok/s " .. b] = string.format("%.1f", p.decode_tok_s)
			by[p.policy]["bound_tok_s " .. b] = string.format("%.1f", p.bound_tok_s)
		end
	end
	local cols = { "policy" }
	for _, k in ipairs({ "vram hit ", "ram hit ", "tok/s ", "bound_tok_s " }) do
		for _, b in ipairs(t.vram) do cols[#cols + 1] = k .. b end
	end
	local list = {}
	for _, k in ipairs(order) do list[#list + 1] = by[k] end
	md[#md + 1] = string.format("### %s (%s, RAM %s)\n\n%s", t.label, t.model, ram, strata.markdown(list, cols))
end
local text = table.concat(md, "\n")
strata.write_file(results .. "/" .. name .. "-table.md", text)
io.write(text)
if failed > 0 then io.write(string.format("\n%d configurations failed (see the CSV)\n", failed)) end
