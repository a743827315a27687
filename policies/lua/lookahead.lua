-- Lookahead prefetch from hints, as a Lua script.
--
--   strata replay ... --prefetch policies/lua/lookahead.lua:depth=2
--
-- Before moe layer L runs, every hint (a predicted expert for a later layer
-- of the same token: recorded predictions or an online predictor) for
-- layers L+1 .. L+depth is requested into VRAM, in the order given.  The
-- engine drops requests for experts already resident and counts them.
local depth

return {
	options = {
		depth = { default = 1, min = 0, max = 16, help = "moe layers ahead to prefetch" },
	},
	init = function(env, opts)
		depth = opts.depth
	end,
	on_layer = function(token, layer, now, hints, out)
		local last = layer + depth
		for i = 1, #hints do
			local l = hints:get(i)
			if l > layer and l <= last then
				if not out:push(hints:eid(i), strata.TIER_VRAM) then break end
			end
		end
	end,
}
