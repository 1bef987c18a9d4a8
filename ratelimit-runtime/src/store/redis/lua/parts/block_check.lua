-- A limit's penalty, before its rules (spliced where `--@block_check` stands). The limit is
-- decided on its own (the decision so far saved in `outer`, merged back by block_merge.lua), so
-- that it is known whether it refused the call itself. Its block, `key:blk`, holds
-- struct.pack('<dd', end µs, refusing rule): while it lasts, the limit refuses with the rest of
-- the block as its wait. In scope: key, g, now, blocks, outer, blocked and the decision's locals.
outer = {allowed, at_g, at_r, retry, remaining, reset}
allowed, at_g, at_r, retry, remaining, reset = 1, 0, 0, 0, -1, 0
local b = redis.call('GET', key .. ':blk')
if b and #b == 16 then
  local till, rule = struct.unpack('<dd', b)
  if till > now then
    blocked = true
    blocks[g] = till - now
    allowed, at_g, at_r, retry, remaining, reset = 0, g, rule, till - now, 0, till - now
  end
end
