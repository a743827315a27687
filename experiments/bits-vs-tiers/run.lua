-- Study 3 (CI-sized), the simulation half: decode speed of a scaled
-- Qwen3-30B-A3B as the hot/warm/cold split moves, at fixed VRAM and RAM
-- budgets, on the engine's virtual clock (strata sim, the GPU machine's
-- calibrated cost model).
-- make.sh adds the model sizes (strata inspect) and the per-tier cosines
-- (bench_quant) and joins everything (combine.py).
--
--   strata run experiments/bits-vs-tiers/run.lua [tokens=128] [vram=256M] [ram=512M]
--       [splits=0/0/100,5/20/75,...] [formats=hot,warm,cold;q4,warm,cold;...] [cost=FILE|default]
--
-- formats: the tiers' formats, one choice per ;-separated entry (hot first):
-- each split runs with each choice (e.g. the hot tier in the fast-decode q4
-- instead of the trellis hot format), on the same budgets and traces.
--
-- Per split (hot/warm/cold percent of each layer's experts; experts ranked
-- by their use in the trace itself: the most used go hot), three runs:
--   shares  place=static with budgets that hold every tier at home: its hit
--           rates per tier are the share of expert accesses each tier's
--           format serves (what the access-weighted cosine uses);
--   static  place=static (the released runtime: tiers stay at home, spilling
--           down when a tier outgrows its budget; misses stream);
--   cache   place=static:promote=all, evict=lru (misses are kept);
--   fit     the same with budgets that hold the whole model in VRAM: after
--           the first reads every expert computes where it lives, so the
--           kernels' speed per format decides (one run per fit_costs entry,
--           e.g. a cost model whose kernel_speed_q4 says how much faster the
--           q4 kernel decodes a packed byte than the trellis kernels).
-- Results: results/bits-vs-tiers.csv (resumable) and results/sim.csv.
local dir = strata.script_dir
local a = strata.arguments{
	out = "results folder (default: results/ beside this script)",
	model = "model spec (default qwen3-30b-a3b:layers=8,experts=64)",
	trace = "routing trace (default: synthetic ones for the model, one per seed)",
	seeds = "seeds of the synthetic traces, comma-separated (default 7,8,9: the spread in speed.png)",
	tokens = "decode tokens per request of the synthetic trace (default 128)",
	vram = "VRAM budget (default 256M)",
	ram = "RAM budget (default 512M)",
	splits = "hot/warm/cold splits, comma-separated (default 0/0/100,5/20/75,...)",
	formats = "the tiers' formats, ;-separated choices of H,W,C (default hot,warm,cold)",
	cost = "cost model JSON, or default",
	fit_costs = "cost models of the fit variant, ;-separated (default: cost alone)",
}
local results = a.out or (dir .. "/results")
local model = a.model or "qwen3-30b-a3b:layers=8,experts=64"
-- One synthetic trace per seed (the routing is the stochastic part): every
-- split runs on each, and the plots show the mean and the spread.
local traces = {}
if a.trace then
	traces[1] = { seed = 0, path = a.trace }
else
	for _, s in ipairs(strata.items(a.seeds or "7,8,9")) do
		local seed = tonumber(s)
		traces[#traces + 1] = { seed = seed, path = strata.trace_gen{
			path = string.format("%s/trace-seed%d.strace", results, seed), model = model, seed = seed,
			requests = 4, prompt = 32, gen = tonumber(a.tokens or 128),
		} }
	end
end
-- The cost model: strata calibrate on the GPU machine with Qwen3-30B-A3B-shaped
-- shards (experiments/gpu-replay/run1/cost_qwen.json) when present, else
-- strata's built-in defaults; cost=FILE or cost=default to choose.
local cost = a.cost or "experiments/gpu-replay/run1/cost_qwen.json"
if cost == "default" then
	cost = nil
else
	local f = io.open(cost, "r")
	if f then f:close() else
		io.stderr:write(cost .. ": not found, using the default cost model\n")
		cost = nil
	end
end
local splits = {}
for _, s in ipairs(strata.items(a.splits or "0/0/100,5/20/75,15/30/55,30/40/30,50/30/20,0/100/0,100/0/0")) do
	splits[#splits + 1] = s
end
local formats = {}
for _, f in ipairs(strata.items(a.formats or "hot,warm,cold", ";")) do
	formats[#formats + 1] = f
end
local variants = {
	{ "shares", { place = "static", vram = "1T", ram = "1T" } },
	{ "static", { place = "static", vram = a.vram or "256M", ram = a.ram or "512M" } },
	{ "cache", { place = "static:promote=all", vram = a.vram or "256M", ram = a.ram or "512M" } },
}
local fit_costs = {}
for _, c in ipairs(strata.items(a.fit_costs or (cost or "default"), ";")) do
	fit_costs[#fit_costs + 1] = c
end
local configs = {}
for _, tr in ipairs(traces) do
	for _, s in ipairs(splits) do
		for _, f in ipairs(formats) do
			for _, v in ipairs(variants) do
				configs[#configs + 1] = {
					mode = "sim", model = model, trace = tr.path, tiers = s:gsub("/", ","), tier_trace = tr.path,
					formats = f, place = v[2].place, vram = v[2].vram, ram = v[2].ram, seed = 1, cost = cost,
					evict = v[1] == "cache" and "lru" or nil,
					tags = { split = s, formats = f, variant = v[1], trace_seed = tr.seed },
				}
			end
			for _, fc in ipairs(fit_costs) do
				configs[#configs + 1] = {
					mode = "sim", model = model, trace = tr.path, tiers = s:gsub("/", ","), tier_trace = tr.path,
					formats = f, place = "static:promote=all", evict = "lru", vram = "1T", ram = "1T", seed = 1,
					cost = fc ~= "default" and fc or nil,
					tags = { split = s, formats = f, variant = "fit " .. fc:match("([^/]*)%.json$"), trace_seed = tr.seed },
				}
			end
		end
	end
end
local rows = strata.sweep{ name = "bits-vs-tiers", configs = configs, out = results .. "/bits-vs-tiers.csv" }
local out = {}
for _, r in ipairs(rows) do
	if r.status ~= "ok" then error(r.run_id .. ": " .. tostring(r.error)) end
	out[#out + 1] = {
		split = r.split, formats = r.formats, variant = r.variant, trace_seed = r.trace_seed, vram = r.vram_bytes,
		ram = r.ram_bytes,
		hit_vram = r.hit_rate_vram, hit_ram = r.hit_rate_ram, hit_nvme = r.hit_rate_nvme,
		decode_tok_s = r.decode_tok_s, stall_ms = r.stall_ms, cold_start_ms = r.cold_start_ms,
	}
end
strata.write_csv(results .. "/sim.csv", out, { "split", "formats", "variant", "trace_seed", "vram", "ram", "hit_vram",
	"hit_ram", "hit_nvme", "decode_tok_s", "stall_ms", "cold_start_ms" })
io.write(strata.markdown(out, { "split", "formats", "variant", "trace_seed", "hit_vram", "hit_ram", "hit_nvme",
	"decode_tok_s" },
	{ hit_vram = "%.3f", hit_ram = "%.3f", hit_nvme = "%.3f", decode_tok_s = "%.1f" }))
