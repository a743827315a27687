-- Least frequently used eviction, as a Lua script.
--
--   strata replay ... --evict policies/lua/lfu.lua
--
-- Counts accesses of each resident expert (an insert counts as one); the
-- victim is the unpinned resident expert with the fewest, ties broken by the
-- least recent use.  Counts are forgotten when an expert leaves the tier.
-- victim scans the resident set (O(resident)); fine for tiers of a few
-- thousand experts, and it keeps the script short.
local count, last = {}, {}
local is_pinned = strata.is_pinned

return {
	on_insert = function(eid, now) count[eid] = 1; last[eid] = now end,
	on_access = function(eid, now) count[eid] = (count[eid] or 0) + 1; last[eid] = now end,
	on_remove = function(eid) count[eid] = nil; last[eid] = nil end,
	victim = function(now)
		local best, bc, bl
		for eid, c in pairs(count) do
			if not is_pinned(eid) then
				local l = last[eid]
				if not best or c < bc or (c == bc and (l < bl or (l == bl and eid < best))) then
					best, bc, bl = eid, c, l
				end
			end
		end
		return best
	end,
}
