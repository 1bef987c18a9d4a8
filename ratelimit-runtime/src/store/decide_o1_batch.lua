-- Several O(1) decisions in one run (store/batch.rs: concurrent calls on one connection,
-- coalesced): each call decided as decide_o1.lua decides it, through the same fragment, one
-- after another, so that each sees every earlier one of the batch, as if each had been a script
-- run of its own. The batch pays once what a run costs whatever it decides: the EVALSHA's
-- dispatch, the reply, and TIME. Assembled by store/script.rs: `--@name` lines become
-- lua/name.lua.
--
-- KEYS     every call's keys (one HASH per limit), call after call.
-- ARGV     per call: now (0 = the server's TIME, read once for the batch), cost, its key count m
--          (its m keys follow the previous call's in KEYS), then per limit decide_o1.lua's
--          arguments: algorithm, rule count n, burst (0 = count), n x (window µs, count),
--          longest window first.
-- Returns per call, concatenated in call order, decide_o1.lua's 48 bytes:
-- struct.pack('<dddddd', allowed, limit, rule, remaining, reset_us, now).

-- Globals are table lookups: locals are cheaper.
local KEYS, ARGV, redis, unpack, struct = KEYS, ARGV, redis, unpack, struct
local release, peek, statuses = false, false, nil
--@exact
-- The server's time, once read, for every call of the batch that asks for it.
local server_now = false
local replies, calls = {}, 0
local pos, base, last = 1, 0, #ARGV
while pos <= last do
  local now = ARGV[pos]
  if now == '0' then
    if not server_now then
      local t = redis.call('TIME')
      server_now = t[1] * 1000000 + t[2]
    end
    now = server_now
  else
    now = now + 0
  end
  local cost = 1
  if ARGV[pos + 1] ~= '1' then cost = ARGV[pos + 1] + 0 end
  local m = ARGV[pos + 2] + 0
  pos = pos + 3
  local allowed, at_g, at_r, retry, remaining, reset = 1, 0, 0, 0, -1, 0
  local at = now
  --@o1_call
  base = base + m

  calls = calls + 1
  replies[calls] = struct.pack('<dddddd', allowed, at_g, at_r, remaining, reset, now)
end
return table.concat(replies)
