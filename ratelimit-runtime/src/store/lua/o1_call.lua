-- One call's O(1) limits, over KEYS[base + 1] to KEYS[base + m] (spliced where `--@o1_call`
-- stands): each limit decided by o1_limit, then, if every one admits, each limit's new state
-- written and its expiry moved. Both decide_o1.lua and decide_o1_batch.lua decide a call
-- through it. In scope: base, m, pos, now, cost, release, peek, statuses and the decision's
-- locals.
-- Per limit: its HSET arguments (key first) and its new expiry in ms (false: unchanged). The
-- first limit's in locals, the others' in tables.
local set1, exp1, sets, exps
for g = 1, m do
  local key = KEYS[base + g]
  --@o1_limit
  if g == 1 then
    set1, exp1 = set, expiry
  else
    if not sets then sets, exps = {}, {} end
    sets[g], exps[g] = set, expiry
  end
end

if allowed == 1 then
  redis.call('HSET', unpack(set1))
  if exp1 then redis.call('PEXPIREAT', KEYS[base + 1], exp1) end
  for g = 2, m do
    redis.call('HSET', unpack(sets[g]))
    if exps[g] then redis.call('PEXPIREAT', KEYS[base + g], exps[g]) end
  end
end
