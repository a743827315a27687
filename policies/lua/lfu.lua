-- Least frequently used eviction, as a Lua script: the same decisions as the
-- built-in C `lfu` (the conformance suite checks that they agree).
--
--   strata replay ... --evict policies/lua/lfu.lua[:history=1]
--
-- The score of a resident expert is the number of accesses it had while
-- resident (history=1: since the run started, "perfect LFU"); the victim is
-- the unpinned resident expert with the lowest score, ties broken by the
-- least recent insert or access, then the lower id.  victim scans the
-- resident set, O(resident): fine for tiers of a few thousand experts, and
-- it keeps the script short (the C version keeps a heap).
local count, last, resident = {}, {}, {}
local history = false
local is_pinned = strata.is_pinned

return {
	options = {
		history = { default = false, help = "keep counts of evicted experts (perfect LFU)" },
	},
	init = function(env, opts) history = opts.history end,
	on_insert = function(eid, now)
		if not history or not count[eid] then count[eid] = 0 end
		last[eid] = now
		resident[eid] = true
	end,
	on_access = function(eid, now)
		count[eid] = (count[eid] or 0) + 1
		if resident[eid] then last[eid] = now end
	end,
	on_remove = function(eid)
		resident[eid] = nil
		last[eid] = nil
		if not history then count[eid] = nil end
	end,
	victim = function(now)
		local best, bc, bl
		for eid in pairs(resident) do
			if not is_pinned(eid) then
				local c, l = count[eid], last[eid]
				if not best or c < bc or (c == bc and (l < bl or (l == bl and eid < best))) then
					best, bc, bl = eid, c, l
				end
			end
		end
		return best
	end,
}
