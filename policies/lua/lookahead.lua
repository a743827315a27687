-- Lookahead prefetch from hints, as a Lua script: the same decisions as the
-- built-in C `lookahead:adaptive=0:keep_unused=1` (the conformance suite
-- checks that they agree; the C policy's adaptation and scheduling options
-- are not part of the script).
--
--   strata replay ... --prefetch policies/lua/lookahead.lua:depth=2
--
-- Before moe layer L runs, take the hints (experts predicted for later
-- layers of the same token: a trace's recorded router predictions, or an
-- online predictor's) for layers L+1 .. L+depth scored at least min_score,
-- keep the topn best scored per layer (ties: lower expert first), and ask for
-- them to move into `tier`, nearest layer first.  The engine drops requests
-- for experts already resident and counts them.
local depth, topn, min_score, dest
local n_layers, n_experts = 0, 0
-- Reused between calls: no table is created per layer.
local L, E, S, order = {}, {}, {}, {}

-- Insertion sort of order[1..n] by (layer asc, score desc, expert asc): the
-- hints of one step are few (depth x top_k), and inline comparisons beat
-- table.sort's call of a Lua comparator per comparison.
local function sort(n)
	for i = 2, n do
		local k = order[i]
		local l, s, e = L[k], S[k], E[k]
		local j = i - 1
		while j >= 1 do
			local m = order[j]
			local lm = L[m]
			if lm < l or (lm == l and (S[m] > s or (S[m] == s and E[m] < e))) then break end
			order[j + 1] = m
			j = j - 1
		end
		order[j + 1] = k
	end
end

return {
	options = {
		{ name = "depth", default = 1, min = 1, max = 1024, help = "layers ahead to prefetch" },
		{ name = "topn", default = 0, min = 0, max = 65536,
		  help = "hints kept per layer, best score first (0: top_k)" },
		{ name = "min_score", type = "double", default = 0, min = 0, max = 1,
		  help = "ignore hints scored below this" },
		{ name = "tier", default = "vram", choices = "vram|ram", help = "destination tier" },
	},
	init = function(env, opts)
		depth, min_score = opts.depth, opts.min_score
		topn = opts.topn ~= 0 and opts.topn or math.max(env.top_k, 1)
		dest = strata.tier(opts.tier)
		n_layers, n_experts = env.n_moe_layers, env.n_experts
	end,
	on_layer = function(token, layer, now, hints, out)
		local nh = #hints
		if nh == 0 then return end
		local n = 0
		for i = 1, nh do
			local l, e, s = hints:get(i)
			if l > layer and l - layer <= depth and l < n_layers and e < n_experts and s >= min_score then
				n = n + 1
				L[n], E[n], S[n], order[n] = l, e, s, n
			end
		end
		sort(n)
		local run, pl, pe = 0, -1, -1
		for i = 1, n do
			local k = order[i]
			local l, e = L[k], E[k]
			run = (i > 1 and l == pl) and run + 1 or 0
			if run < topn and not (l == pl and e == pe) then
				if not out:push(l * n_experts + e, dest) then break end
			end
			pl, pe = l, e
		end
	end,
}
