-- The decisions of calls whose limits are all sliding windows (no block, no concurrency or
-- shadow limit: those are decide.lua's), one after another, each seeing every earlier one as if
-- each had been a script run of its own: a lone call (a batch of one), or concurrent calls on
-- one connection, coalesced (store/redis/batch.rs). A batch pays once what a run costs
-- whatever it decides: the EVALSHA's dispatch and arguments, the reply, and TIME (about 6 400
-- server instructions).
--
-- KEYS     every call's keys, call after call.
-- ARGV[1]  the numbers, packed as little-endian doubles (integers below 2^53: exact): the call
--          count, then per call its member (16 raw bytes), now (µs; 0: the server's TIME, read
--          once for the batch), cost, its key count m, and per key (its m keys follow the
--          previous call's in KEYS) the rule count n and n x (window µs, count), longest window
--          first. The member goes in the numbers: an argument of its own costs the server about
--          600 instructions to receive.
-- Returns per call, concatenated in call order: struct.pack('<dddddd', allowed, limit, rule,
-- remaining, reset_us, now), or for an admission by one limit of one rule the 24 bytes
-- struct.pack('<ddd', -1 - remaining, reset_us, now): the first value, negative there and 0 or
-- 1 in the long form, tells the client which form follows.

-- Globals are table lookups: locals are cheaper.
local KEYS, ARGV, redis, string, struct = KEYS, ARGV, redis, string, struct
local format, concat = string.format, table.concat
local nums = ARGV[1]
-- Each struct.unpack is a C call: the first call's header is read with the call count, and each
-- key's first rule with its rule count (a limit here has at least one rule), so that a batch of
-- one call of one rule reads its numbers in two.
local calls, member, now, cost, keys, p = struct.unpack('<dc16ddd', nums)
-- The server's clock, once read (server_time.lua), as a number and as text (a unit's score).
local server_now, server_text, time_text = false, false, true
-- The replies of a batch of several calls (a table costs about 1 400 instructions: a batch of
-- one answers without it).
local replies = calls > 1 and {}
local base = 0
for c = 1, calls do
  if c > 1 then member, now, cost, keys, p = struct.unpack('<c16ddd', nums, p) end
  local now_text
  if now == 0 then
    --@server_time
    now, now_text = server_now, server_text
  else
    now_text = format('%d', now)
  end
  --@decision
  --@sliding_memo
  -- Whether the call has one limit of one rule (then an admission answers the short form).
  local single = false
  for g = 1, keys do
    local key = KEYS[base + g]
    local n, w, count
    n, w, count, p = struct.unpack('<ddd', nums, p)
    if keys == 1 then single = n == 1 end
    for r = 1, n do
      if r > 1 then w, count, p = struct.unpack('<dd', nums, p) end
      --@sliding_check
      --@verdict
    end
  end

  if allowed == 1 then
    for g = 1, keys do
      local key = KEYS[base + g]
      --@sliding_commit
    end
  end
  base = base + keys

  local reply
  if allowed == 1 and single then
    reply = struct.pack('<ddd', -1 - remaining, reset, now)
  else
    reply = struct.pack('<dddddd', allowed, at_g, at_r, remaining, reset, now)
  end
  if calls == 1 then return reply end
  replies[c] = reply
end
return concat(replies)
