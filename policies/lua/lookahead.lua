-- Lookahead prefetch from hints, as a Lua script: the same decisions as the
-- built-in C `lookahead` (the conformance suite checks that they agree).
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

local function better(a, b)
	if L[a] ~= L[b] then return L[a] < L[b] end
	if S[a] ~= S[b] then return S[a] > S[b] end
	return E[a] < E[b]
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
		for i = n + 1, #order do order[i] = nil end
		table.sort(order, better)
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
