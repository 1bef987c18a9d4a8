-- The decisions of calls whose limits are all O(1) algorithms (fw, swc, tb, lb, gcra; no block,
-- no concurrency or shadow limit: those are decide.lua's), one after another, through the
-- parts decide.lua uses on the same HASH fields, each seeing every earlier one as if each had
-- been a script run of its own: a lone call (a batch of one), or concurrent calls on one
-- connection, coalesced (store/redis/batch.rs). A batch pays once what a run costs whatever
-- it decides: the EVALSHA's dispatch, the reply, and TIME.
--
-- KEYS     every call's keys (one HASH per limit), call after call.
-- ARGV     per call: now (0 = the server's TIME, read once for the batch), cost, its key count m
--          (its m keys follow the previous call's in KEYS), then per limit: algorithm, rule
--          count n, burst (0 = count), n x (window µs, count), longest window first. Text, as
--          decide.lua takes them, without the member and the mode, which this script would not
--          read (each argument costs the server about 1 000 instructions to receive).
-- Returns per call, concatenated in call order, 48 bytes (decide.lua's answer without `why`):
-- struct.pack('<dddddd', allowed, limit, rule, remaining, reset_us, now).

-- Globals are table lookups: locals are cheaper.
local KEYS, ARGV, redis, unpack, struct = KEYS, ARGV, redis, unpack, struct
local release, peek, statuses = false, false, nil
--@exact
--@calendar
-- The server's clock, once read (server_time.lua), as a number alone (no state here is scored
-- by time as text).
local server_now, server_text, time_text = false, false, false
-- The replies of a batch of several calls (a table costs about 1 400 instructions: a batch of
-- one answers without it).
local replies, calls = false, 0
local pos, base, last = 1, 0, #ARGV
while pos <= last do
  local now = ARGV[pos]
  if now == '0' then
    --@server_time
    now = server_now
  else
    now = now + 0
  end
  local cost = 1
  if ARGV[pos + 1] ~= '1' then cost = ARGV[pos + 1] + 0 end
  local m = ARGV[pos + 2] + 0
  pos = pos + 3
  --@decision
  local at = now
  -- The call's limits, over KEYS[base + 1] to KEYS[base + m]: each decided by o1_limit, then,
  -- if every one admits, each one's new state written and its expiry moved.
  -- Per limit: its HSET arguments (key first) and its new expiry in ms (false: unchanged). The
  -- first limit's in locals, the others' in tables.
  local set1, exp1, sets, exps
  for g = 1, m do
    local key = KEYS[base + g]
    -- No runtime override (see bucket.lua).
    local under = false
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
  base = base + m

  local reply = struct.pack('<dddddd', allowed, at_g, at_r, remaining, reset, now)
  if calls == 0 and pos > last then return reply end
  if not replies then replies = {} end
  calls = calls + 1
  replies[calls] = reply
end
return table.concat(replies)
