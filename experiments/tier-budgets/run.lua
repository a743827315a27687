-- Study 1 (CI-sized): hit rate and decode tok/s as the VRAM and RAM budgets
-- vary, for each eviction policy (C built-ins and the Lua LRU), against the
-- bounds of strata/bound.h (the "bound" rows: the most VRAM hits, VRAM+RAM
-- hits and decode tok/s any policy can reach), on the engine's virtual clock
-- (strata sim, default cost model) over a synthetic trace of a scaled
-- Qwen3-30B-A3B, one trace per seed (the routing is the random part).  The
-- script fails if a run beats a bound.
--
--   strata run experiments/tier-budgets/run.lua [tokens=128] [model=SPEC] [trace=PATH]
--       [vram=64M,128M,256M,512M] [ram=128M,256M,512M,1G] [name=tier-budgets] [seeds=7,8,9]
--
-- Every (policy, vram, ram) combination runs on every trace; with a given
-- trace= (a fixed one), once per seed as the run's seed (it draws which
-- experts of a spec-only model get which tier format, hence their sizes).  Results: results/NAME.csv (one
-- row per run; resumable), results/NAME-plot.csv (the columns the plots use),
-- results/NAME-vram.md and results/NAME-ram.md (tables: hit rate and tok/s
-- against the VRAM budget at the second RAM budget, and against the RAM
-- budget at the second VRAM budget; results/NAME-slices.txt names them;
-- mean over the seeds with the min-max range).  make.sh runs this and draws the plots.
local dir = strata.script_dir
local a = strata.arguments{
	out = "results folder (default: results/ beside this script)",
	name = "results name: NAME.csv, NAME-plot.csv, ... (default tier-budgets)",
	model = "model spec (default qwen3-30b-a3b:layers=8,experts=64)",
	trace = "routing trace (default: synthetic ones for the model, one per seed)",
	seeds = "seeds, comma-separated (default 7,8,9): of the synthetic traces, or with trace= the runs' seed",
	tokens = "decode tokens per request of the synthetic trace (default 128)",
	vram = "VRAM budgets, comma-separated (default 64M,128M,256M,512M)",
	ram = "RAM budgets, comma-separated (default 128M,256M,512M,1G)",
	policies = "eviction policies, comma-separated (default lru,fifo,lfu,lfu-decay,belady,policies/lua/lru.lua)",
}
local results = a.out or (dir .. "/results")
local name = a.name or "tier-budgets"
local model = a.model or "qwen3-30b-a3b:layers=8,experts=64"

local traces = {}
for _, s in ipairs(strata.items(a.seeds or "7,8,9")) do
	if a.trace then
		traces[#traces + 1] = { seed = tonumber(s), path = a.trace, fixed = true }
	else
		traces[#traces + 1] = { seed = tonumber(s), path = strata.trace_gen{
			path = string.format("%s/trace-seed%s.strace", results, s), model = model, seed = tonumber(s),
			requests = 4, prompt = 32, gen = tonumber(a.tokens or 128),
			pred_depth = 2, pred_accuracy = 0.8,
		} }
	end
end
-- One expert of the default model is about 1.6 MB at the tier mix; 512 experts in all (~830 MB).
local vrams = strata.items(a.vram or "64M,128M,256M,512M")
local rams = strata.items(a.ram or "128M,256M,512M,1G")
local policies = strata.items(a.policies or "lru,fifo,lfu,lfu-decay,farthest,policies/lua/lru.lua")

local configs = {}
for _, tr in ipairs(traces) do
	for _, c in ipairs(strata.product({ evict = policies, vram = vrams, ram = rams }, {
		mode = "sim", model = model, trace = tr.path, place = "cache", seed = tr.fixed and tr.seed or 1,
	})) do
		c.tags = { vram_budget = c.vram, ram_budget = c.ram, trace_seed = not tr.fixed and tr.seed or nil }
		configs[#configs + 1] = c
	end
end

local rows = strata.sweep{ name = name, configs = configs, out = results .. "/" .. name .. ".csv" }

-- The slices tabled and plotted: against VRAM at the second RAM budget,
-- against RAM at the second VRAM budget (or the only one).
local ram_mid = rams[math.min(#rams, 2)]
local vram_mid = vrams[math.min(#vrams, 2)]
strata.write_file(results .. "/" .. name .. "-slices.txt", vram_mid .. " " .. ram_mid .. "\n")
local short = { ["policies/lua/lru.lua"] = "lru.lua" }
local plot, failed, bad, bounds = {}, 0, {}, {}
for _, r in ipairs(rows) do
	if r.status == "ok" then
		-- a bound that a policy beats is a bug: the study fails on one
		if r.bound_violations > 0 or r.decode_tok_s > r.bound_tok_s * (1 + 1e-9) then
			bad[#bad + 1] = string.format("%s: %d counters beat their bound, decode %.3f tok/s against %.3f",
				r.run_id, r.bound_violations, r.decode_tok_s, r.bound_tok_s)
		end
		local key = r.vram_budget .. "/" .. r.ram_budget .. "/" .. tostring(r.trace_seed or r.seed)
		if not bounds[key] then
			-- place=cache preloads nothing and every miss is one move: hits <= accesses - fewest moves
			bounds[key] = true
			plot[#plot + 1] = {
				policy = "bound", seed = r.trace_seed or r.seed, vram = r.vram_budget, ram = r.ram_budget,
				vram_mib = r.vram_bytes / 1048576, ram_mib = r.ram_bytes / 1048576,
				hit_vram_pct = 100 * (1 - r.bound_moves_vram / r.accesses),
				hit_fast_pct = 100 * (1 - r.bound_moves_nvme / r.accesses),
				decode_tok_s = r.bound_tok_s, stall_ms = 0,
				vram_slice = r.ram_budget == ram_mid and 1 or 0, ram_slice = r.vram_budget == vram_mid and 1 or 0,
			}
		end
		plot[#plot + 1] = {
			policy = short[r.evict_spec or ""] or (r.config or ""):match("evict=([^,]+)"), seed = r.trace_seed or r.seed,
			vram = r.vram_budget, ram = r.ram_budget,
			vram_mib = r.vram_bytes / 1048576, ram_mib = r.ram_bytes / 1048576,
			hit_vram_pct = 100 * r.hit_rate_vram,
			hit_fast_pct = 100 * (r.hit_rate_vram + r.hit_rate_ram),
			decode_tok_s = r.decode_tok_s, stall_ms = r.stall_ms,
			vram_slice = r.ram_budget == ram_mid and 1 or 0, ram_slice = r.vram_budget == vram_mid and 1 or 0,
		}
	else
		failed = failed + 1
		io.stderr:write(string.format("%s: %s\n", r.run_id, tostring(r.error)))
	end
end
strata.write_csv(results .. "/" .. name .. "-plot.csv", plot,
	{ "policy", "seed", "vram", "ram", "vram_mib", "ram_mib", "hit_vram_pct", "hit_fast_pct", "decode_tok_s", "stall_ms",
	"vram_slice", "ram_slice" })

-- Tables: one line per policy; a slice of the grid along each axis; the
-- mean over the seeds with the min-max range.
local function slice(fixed_key, fixed, axis_key, axis, metric, mlabel)
	local by, order = {}, {}
	for _, p in ipairs(plot) do
		if p[fixed_key] == fixed then
			if not by[p.policy] then by[p.policy] = {}; order[#order + 1] = p.policy end
			local cell = by[p.policy][p[axis_key]] or { hit = {}, tok = {} }
			by[p.policy][p[axis_key]] = cell
			cell.hit[#cell.hit + 1] = p[metric]
			cell.tok[#cell.tok + 1] = p.decode_tok_s
		end
	end
	local cols = { "policy" }
	for _, v in ipairs(axis) do cols[#cols + 1] = mlabel .. " % " .. v end
	for _, v in ipairs(axis) do cols[#cols + 1] = "tok/s " .. v end
	local t = {}
	for _, k in ipairs(order) do
		local row = { policy = k }
		for v, cell in pairs(by[k]) do
			row[mlabel .. " % " .. v] = select(4, strata.spread(cell.hit, "%.1f"))
			row["tok/s " .. v] = select(4, strata.spread(cell.tok, "%.1f"))
		end
		t[#t + 1] = row
	end
	return strata.markdown(t, cols)
end
local md_v = slice("ram", ram_mid, "vram", vrams, "hit_vram_pct", "vram")
local md_r = slice("vram", vram_mid, "ram", rams, "hit_fast_pct", "fast")
strata.write_file(results .. "/" .. name .. "-vram.md", md_v)
strata.write_file(results .. "/" .. name .. "-ram.md", md_r)
local over = #traces > 1 and string.format("; mean (min-max) over %d seeds", #traces) or ""
io.write(string.format("VRAM hit rate and decode tok/s against the VRAM budget (RAM %s%s):\n\n", ram_mid, over), md_v)
io.write(string.format("\nVRAM+RAM hit rate and decode tok/s against the RAM budget (VRAM %s%s):\n\n", vram_mid, over), md_r)
if failed > 0 then io.write(string.format("\n%d configurations failed (see the CSV)\n", failed)) end
if #bad > 0 then error("bounds beaten (a bug):\n" .. table.concat(bad, "\n")) end
