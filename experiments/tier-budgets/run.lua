-- Study 1 (CI-sized): hit rate and decode tok/s as the VRAM budget varies,
-- for each eviction policy (C built-ins and the Lua LRU), against the Belady
-- bound, on the engine's virtual clock (strata sim) over a synthetic trace of
-- a scaled Qwen3-30B-A3B.
--
--   strata run experiments/tier-budgets/run.lua [tokens=256] [model=SPEC] [trace=PATH]
--
-- Results: results/tier-budgets.csv (one row per run; resumable), and
-- results/table.md (hit rate per policy and budget).
local dir = strata.script_dir
local results = dir .. "/results"
local model = strata.args.model or "qwen3-30b-a3b:layers=8,experts=64"
local trace = strata.args.trace or strata.trace_gen{
	path = results .. "/trace.strace", model = model, seed = 7,
	requests = 4, prompt = 32, gen = tonumber(strata.args.tokens or 64),
	pred_depth = 2, pred_accuracy = 0.8,
}

-- One expert of this model is about 1.6 MB at the tier mix; 512 experts in all.
local budgets = { "64M", "128M", "256M", "512M" }
local policies = { "lru", "fifo", "lfu", "lfu-decay", "belady", "policies/lua/lru.lua" }

local configs = strata.product({ evict = policies, vram = budgets }, {
	mode = "sim", model = model, trace = trace, ram = "256M", place = "cache", seed = 1,
})
for _, c in ipairs(configs) do c.tags = { budget = c.vram } end

local rows = strata.sweep{ name = "tier-budgets", configs = configs, out = results .. "/tier-budgets.csv" }

-- Table: one line per policy, hit rate (VRAM) per budget, and decode tok/s.
local by = {}
local order = {}
for _, r in ipairs(rows) do
	local key = r.config or "?"
	if not by[key] then by[key] = { policy = key }; order[#order + 1] = key end
	if r.status == "ok" then
		by[key]["vram " .. r.budget] = string.format("%.1f%%", 100 * r.hit_rate_vram)
		by[key]["tok/s " .. r.budget] = string.format("%.1f", r.decode_tok_s)
	else
		by[key]["vram " .. r.budget] = "error"
	end
end
local cols = { "policy" }
for _, b in ipairs(budgets) do cols[#cols + 1] = "vram " .. b end
for _, b in ipairs(budgets) do cols[#cols + 1] = "tok/s " .. b end
local t = {}
for _, k in ipairs(order) do t[#t + 1] = by[k] end
local md = strata.markdown(t, cols)
strata.write_file(results .. "/table.md", md)
io.write(md)
