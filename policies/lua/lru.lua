-- Least recently used eviction, as a Lua script: the same decisions as the
-- built-in C `lru` (the conformance suite checks that they agree exactly).
--
--   strata replay ... --evict policies/lua/lru.lua
--
-- One strata.list per instance (one instance per cached tier): the most
-- recently inserted or used expert at the front, victims taken from the back,
-- skipping experts pinned by a running computation.
local list = strata.list()
local push_front, remove, back, newer = list.push_front, list.remove, list.back, list.newer
local is_pinned = strata.is_pinned

return {
	on_insert = function(eid, now) push_front(list, eid) end,
	on_access = function(eid, now) push_front(list, eid) end,
	on_remove = function(eid) remove(list, eid) end,
	victim = function(now)
		local k = back(list)
		while k do
			if not is_pinned(k) then return k end
			k = newer(list, k)
		end
		return nil
	end,
}
