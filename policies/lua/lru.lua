-- Least recently used eviction, as a Lua script: the same decisions as the
-- built-in C `lru` (the conformance suite checks that they agree exactly).
--
--   strata replay ... --evict policies/lua/lru.lua
--
-- One strata.list per instance (one instance per cached tier): the most
-- recently inserted or used expert at the front, victims taken from the back,
-- skipping experts pinned by a running computation.
local list = strata.list()
local nx, pv = list.nx, list.pv -- read directly in victim: no method calls
local is_pinned = strata.is_pinned

return {
	on_insert = function(eid, now) list:push_front(eid) end,
	on_access = function(eid, now) list:push_front(eid) end,
	on_remove = function(eid) list:remove(eid) end,
	victim = function(now)
		local k = list.tail
		while k do
			if not is_pinned(k) then return k end
			k = pv[k] or nil
		end
		return nil
	end,
}
