-- Least frequently used eviction, as a Lua script: the same decisions as the
-- built-in C `lfu` (the conformance suite checks that they agree).
--
--   strata replay ... --evict policies/lua/lfu.lua[:history=1]
--
-- The score of a resident expert is the number of accesses it had while
-- resident (history=1: since the run started, "perfect LFU"); the victim is
-- the unpinned resident expert with the lowest score, ties broken by the
-- least recent insert or access, then the lower id.  Like the C version, an
-- indexed binary min-heap keyed by (count, last, eid): O(log n) per access.
local cnt, last = {}, {}
local heap, pos, n = {}, {}, 0 -- heap[1..n] = eid; pos[eid] = index
local history = false
local is_pinned = strata.is_pinned

local function less(a, b)
	local ca, cb = cnt[a], cnt[b]
	if ca ~= cb then return ca < cb end
	local la, lb = last[a], last[b]
	if la ~= lb then return la < lb end
	return a < b
end

-- up/down compare inline (no call per comparison): this is the hot path.
local function up(i)
	local e = heap[i]
	local ce, le = cnt[e], last[e]
	while i > 1 do
		local p = i // 2
		local pe = heap[p]
		local cp = cnt[pe]
		if cp < ce then break end
		if cp == ce then
			local lp = last[pe]
			if lp < le or (lp == le and pe < e) then break end
		end
		heap[i] = pe; pos[pe] = i
		i = p
	end
	heap[i] = e; pos[e] = i
end

local function down(i)
	local e = heap[i]
	local ce, le = cnt[e], last[e]
	while true do
		local c = 2 * i
		if c > n then break end
		local x = heap[c]
		local cx, lx = cnt[x], last[x]
		if c < n then
			local y = heap[c + 1]
			local cy, ly = cnt[y], last[y]
			if cy < cx or (cy == cx and (ly < lx or (ly == lx and y < x))) then
				c, x, cx, lx = c + 1, y, cy, ly
			end
		end
		-- stop unless the child is smaller than e
		if cx > ce or (cx == ce and (lx > le or (lx == le and x > e))) then break end
		heap[i] = x; pos[x] = i
		i = c
	end
	heap[i] = e; pos[e] = i
end

-- Smallest unpinned entry: descend only below pinned nodes (children are
-- never smaller than their parent), and prune subtrees that cannot win.
local stack = {}
local function min_unpinned()
	if n == 0 then return nil end
	local best, top = nil, 1
	stack[1] = 1
	while top > 0 do
		local i = stack[top]
		top = top - 1
		local e = heap[i]
		if not best or less(e, best) then
			if not is_pinned(e) then
				best = e
			else
				local c = 2 * i
				if c <= n then top = top + 1; stack[top] = c end
				if c + 1 <= n then top = top + 1; stack[top] = c + 1 end
			end
		end
	end
	return best
end

return {
	options = {
		history = { default = false, help = "keep counts of evicted experts (perfect LFU)" },
	},
	init = function(env, opts) history = opts.history end,
	on_insert = function(eid, now)
		if pos[eid] then return end
		if not history or not cnt[eid] then cnt[eid] = 0 end
		last[eid] = now
		n = n + 1
		heap[n] = eid
		up(n)
	end,
	on_access = function(eid, now)
		cnt[eid] = (cnt[eid] or 0) + 1
		local i = pos[eid]
		if i then
			last[eid] = now
			down(i) -- count and time only grow
		end
	end,
	on_remove = function(eid)
		local i = pos[eid]
		if not i then return end
		pos[eid] = nil
		local e = heap[n]
		heap[n] = nil
		n = n - 1
		if i <= n then
			heap[i] = e; pos[e] = i
			up(i)
			down(pos[e])
		end
		last[eid] = nil
		if not history then cnt[eid] = nil end
	end,
	victim = function(now) return min_unpinned() end,
}
