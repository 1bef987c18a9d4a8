-- After a limit with a penalty (spliced where `--@block_merge` stands): if its rules refused the
-- call (and no block did), the block starts should the call be refused; then its decision is
-- merged with the one before it, as deciding them in one pass would: the refusal with the
-- longest wait (the earlier on ties), else the tightest rule (the earlier on ties).
-- In scope: g, blk, outer, blocked, starts and the decision's locals.
if allowed == 0 and not blocked then starts[#starts + 1] = {g, at_r, blk} end
local oa, og, orl, ort, orm, ors = unpack(outer)
if oa == 0 then
  if not (allowed == 0 and retry > ort) then
    allowed, at_g, at_r, retry, remaining, reset = oa, og, orl, ort, orm, ors
  end
elseif allowed == 1 and orm >= 0 and (remaining < 0 or orm <= remaining) then
  allowed, at_g, at_r, retry, remaining, reset = oa, og, orl, ort, orm, ors
end
