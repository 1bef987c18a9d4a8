-- A limit's block, before its rules. The limit is decided on its own (the decision so far saved
-- in outer, merged back by block_merge.lua), so that it is known whether its rules refused the
-- call. Its block, `key:blk`, holds struct.pack('<dd', end µs, refusing rule): while it lasts,
-- the limit refuses with the rest of the block as its wait, a verdict of that rule. Reads: key,
-- g, now, blocks and the decision. Sets: outer, blocked.
outer = {allowed, at_g, at_r, retry, remaining, reset}
allowed, at_g, at_r, retry, remaining, reset = 1, 0, 0, 0, -1, 0
local b = redis.call('GET', key .. ':blk')
if b and #b == 16 then
  local till, r = struct.unpack('<dd', b)
  if till > now then
    blocked = true
    blocks[g] = till - now
    local left, wait, rst = -1, till - now, 0
    --@verdict
  end
end
