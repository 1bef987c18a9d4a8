-- After a limit with a block: if its rules refused the call (and no block did), its block starts
-- should the call be refused (block_start.lua). Then the limit's decision is merged into the one
-- before it (outer) as one verdict, which is what merging its rules' verdicts into outer one by
-- one would have given. Reads: g, blk, outer, blocked, starts and the decision.
if allowed == 0 and not blocked then starts[#starts + 1] = {g, at_r, blk} end
local r, left, wait, rst = at_r, remaining, retry, reset
if allowed == 0 then left = -1 end
allowed, at_g, at_r, retry, remaining, reset = unpack(outer)
--@verdict
