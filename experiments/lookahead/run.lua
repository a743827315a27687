-- Study 2 (CI-sized): lookahead prefetch depth 0..3 against predictor
-- accuracy 50..100%: stall time and decode tok/s on the engine's virtual
-- clock (strata sim), a scaled Qwen3-30B-A3B and synthetic traces whose
-- recorded predictions are right with the given probability.
--
--   strata run experiments/lookahead/run.lua [tokens=128] [model=SPEC]
--
-- Results: results/lookahead.csv (one row per run, resumable) and
-- results/table.md.
local dir = strata.script_dir
local results = dir .. "/results"
local model = strata.args.model or "qwen3-30b-a3b:layers=8,experts=64"
local tokens = tonumber(strata.args.tokens or 128)
local accuracies = { 0.5, 0.75, 0.9, 1.0 }
local depths = { 0, 1, 2, 3 }

local configs = {}
for _, acc in ipairs(accuracies) do
	-- One trace per accuracy: the same routing (same seed), only the
	-- recorded predictions differ.
	local trace = strata.trace_gen{
		path = string.format("%s/trace-acc%03d.strace", results, math.floor(acc * 100 + 0.5)),
		model = model, seed = 11, requests = 4, prompt = 32, gen = tokens,
		pred_depth = 3, pred_accuracy = acc,
	}
	for _, d in ipairs(depths) do
		configs[#configs + 1] = {
			mode = "sim", model = model, trace = trace, vram = "256M", ram = "512M",
			place = "static:promote=vram", evict = "lru",
			prefetch = d == 0 and "none" or ("lookahead:depth=" .. d),
			tags = { depth = d, accuracy = acc },
		}
	end
end

local rows = strata.sweep{ name = "lookahead", configs = configs, out = results .. "/lookahead.csv" }

local t = {}
for _, r in ipairs(rows) do
	if r.status == "ok" then
		t[#t + 1] = {
			accuracy = string.format("%d%%", math.floor(r.accuracy * 100 + 0.5)),
			depth = r.depth,
			["vram hit"] = string.format("%.1f%%", 100 * r.hit_rate_vram),
			["stall ms"] = string.format("%.1f", r.stall_ms),
			["decode tok/s"] = string.format("%.1f", r.decode_tok_s),
			["prefetch accuracy"] = string.format("%.1f%%", 100 * r.prefetch_accuracy),
			["wasted"] = r.prefetch_wasted,
		}
	else
		t[#t + 1] = { accuracy = tostring(r.accuracy), depth = r.depth, ["vram hit"] = "error: " .. tostring(r.error) }
	end
end
local md = strata.markdown(t, { "accuracy", "depth", "vram hit", "stall ms", "decode tok/s",
	"prefetch accuracy", "wasted" })
strata.write_file(results .. "/table.md", md)
io.write(md)
