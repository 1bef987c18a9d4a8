-- One atomic decision over every limit of a call.
--
-- KEYS[g]  one key per limit of the call: a ZSET log (sliding window), a HASH (the others), or
--          a ZSET of slots (a concurrency limit); a limit's block is the key `KEYS[g]:blk`
--          (same hash tag, same slot)
-- ARGV[1]  now in µs, or "0" to read the server's TIME (the usual case; tests pin time)
-- ARGV[2]  cost: units this call consumes
-- ARGV[3]  member: a process-unique id for this call (sliding window; unit i > 1 adds ":i"; a
--          concurrency slot)
-- ARGV[4]  mode: "d" decides; "o" decides once the runtime overrides are checked (see
--          override_check.lua); "r" releases what a "d" with the same member and cost admitted
--          (a refund; the end of a call, which frees its slots; on a Redis Cluster, a later slot
--          denied, so earlier slots give the call back); "s<units>" releases as "r" does, the
--          call settled to <units> (decimal): fewer than its cost give the difference back, more
--          take the extra past the limit (debt); "p" peeks (cost 0): reads every rule, writes
--          nothing, and returns {remaining, reset_us} per rule
-- ARGV[5]  "r", "s": when the call was admitted (µs; "0": now): the window its units count in;
--          "d": how many of the keys, at the end, are shadow limits ("0": none). The others
--          decide the call; if they admit it, the shadow limits are decided as a group of their
--          own: the call is recorded in all of them if all have room, else in none of them (their
--          refusal is reported, and starts their blocks). If the others refuse, the shadow limits
--          are not even read.
-- then per KEYS[g]: block µs (0 = none), concurrency (0 = a rate limit), lease µs, algorithm
-- ("cc" for a concurrency limit), rule count n, burst (0 = count), n x (window µs, count),
-- longest window first
--
-- Returns 56 bytes, struct.pack('<ddddddd', allowed, limit, rule, remaining, reset_us, now, why):
-- seven little-endian doubles (every value is an integer below 2^53: exact), one bulk string
-- that the client reads for a fraction of what an array of integers costs it to parse. When
-- allowed, `limit` and `rule` (1-based) name the tightest rule (least remaining) and the
-- retry-after is 0; else they name the denying rule with the longest wait, `remaining` is 0,
-- and `reset_us` is the retry-after: the least whole µs after which the same call passes, for
-- every rule. `now` is the time decided at (a refund finds the call's window by it); `why` says
-- what refused: 0 a rule, 1 a block, 2 a full concurrency limit. The decision is the limits'
-- before the shadow ones; when those would have refused, 80 bytes: three more doubles, the
-- shadow limit (1-based among the shadow limits), its refusing rule and its wait (µs).
-- A denied call records nothing (it may drop entries that have left every window) but the
-- blocks it starts. Keys expire (PEXPIREAT) when their state stops mattering: the sliding
-- window's log when the call's units leave its longest window; the O(1) algorithms' HASH on the
-- grid line (1/64 of the longest window) after it; a block when it ends; slots when the last
-- lease ends; with a pinned `now`, expiry follows the pinned clock. decide_sw_batch.lua and
-- decide_o1_batch.lua decide calls without blocks, slots or shadow limits on the same keys with
-- the same parts.

--@override_check
local now, cost, member = ARGV[1], ARGV[2], ARGV[3]
-- o1_limit.lua reads its arguments from A.
local A = ARGV
-- Strings are compared before they are converted, and converted by the VM's own coercion where
-- arithmetic needs them (each C call such as tonumber costs far more than a comparison). Numbers
-- given to redis.call go as text made by '%d' (exact below 2^53): the server formats a number
-- with snprintf("%.17g"), about 1 700 instructions more.
local format = string.format
-- The call's time (as text: the score of its units in a sliding window's log).
local now_text, server_now, server_text, time_text = false, false, false, true
if now == '0' then
  --@server_time
  now, now_text = server_now, server_text
else
  now = now + 0
  now_text = format('%d', now)
end
if cost == '1' then cost = 1 else cost = cost + 0 end
--@decision
--@sliding_memo
local mode = ARGV[4]
local release = mode == 'r'
local peek = mode == 'p'
-- A release gives back `cost` units of the call's `est` (all of them: a refund), or takes `more`
-- past them (a settle to more units than the cost).
local est, more = cost, 0
if #mode > 1 then
  release = true
  local actual = string.sub(mode, 2) + 0
  if actual < cost then cost = cost - actual else cost, more = 0, actual - cost end
end
local at, shadow = now, 0
if ARGV[5] ~= '0' then
  if release then at = ARGV[5] + 0 elseif not peek then shadow = ARGV[5] + 0 end
end
-- Peek mode's answer: remaining, reset (µs) per rule, in key and rule order.
local statuses = {}
local unpack = unpack
-- The C functions the algorithms' parts and o1_limit.lua call by these names.
local rcall, spack, sunpack = redis.call, struct.pack, struct.unpack
--@exact
-- Calendar months' conversions, made when first needed (fixed_window.lua, calendar.lua).
local month_start, month_window

local pos = 6
-- The expiry's grid of the last limit's longest window (o1_limit.lua).
local grid_w, grid, grid_us = false, 0, 0
-- Per limit: true (a sliding window's log), its HSET arguments and new expiry, or its lease
-- (a concurrency limit's slot).
local writes = {}
-- Per limit: the wait of its block, when it blocks the call; whether it is a concurrency limit.
local blocks, slots = {}, {}
-- The blocks the call starts if refused: {limit, refusing rule, length}, in limit order.
local starts = {}
-- The limits that decide, then (once they admit the call) the shadow ones, the decision of
-- the former kept meanwhile.
local enforced = #KEYS - shadow
local first, last, kept = 1, enforced, false
while true do
  for g = first, last do
    local key = KEYS[g]
    local blk, conc, lease = ARGV[pos] + 0, ARGV[pos + 1] + 0, ARGV[pos + 2] + 0
    pos = pos + 3
    if conc > 0 then
      pos = pos + 3
      slots[g] = true
      --@concurrency
    else
      local outer, blocked = false, false
      if blk > 0 and not (peek or release) then
        --@block_check
      end
      if ARGV[pos] ~= 'sw' then
        -- Under a runtime override: the rules of the limit it overrides, w and count flat.
        local under = false
        if mode == 'o' then
          local text = ARGV[#ARGV - 3 * #KEYS + 3 * g]
          if text ~= '' then
            under = {}
            for bw, bn in string.gmatch(text, '(%d+):(%d+)') do
              under[#under + 1], under[#under + 2] = bw + 0, bn + 0
            end
          end
        end
        --@o1_limit
        if n == 1 and set then set = {key, '1', set} end
        if release then
          if set then redis.call('HSET', unpack(set)) end
          if expiry then redis.call('PEXPIREAT', key, expiry) end
        elseif not peek then
          writes[g] = {set, expiry}
        end
      else
        local n = ARGV[pos + 1] + 0
        pos = pos + 3
        if peek then
          --@sliding_peek
        elseif release then
          --@sliding_release
        else
          for r = 1, n do
            local w, count = ARGV[pos] + 0, ARGV[pos + 1] + 0
            pos = pos + 2
            --@sliding_check
            --@verdict
          end
          writes[g] = true
        end
      end
      if outer then
        --@block_merge
      end
    end
  end
  if last == #KEYS or allowed == 0 then break end
  kept = {allowed, at_g, at_r, retry, remaining, reset}
  allowed, at_g, at_r, retry, remaining, reset = 1, 0, 0, 0, -1, 0
  first, last = enforced + 1, #KEYS
end

if peek then return statuses end
if release then return struct.pack('<ddddddd', 1, 0, 0, 0, 0, now, 0) end

if allowed == 0 then
  --@block_start
end
-- Shadow limits that would refuse record nothing; the call stands as the others decided it.
local commit, refused_in_shadow = #KEYS, false
if kept then
  if allowed == 0 then
    refused_in_shadow = {at_g - enforced, at_r, retry}
    commit = enforced
  end
  allowed, at_g, at_r, retry, remaining, reset = unpack(kept)
end

if allowed == 1 then
  for g = 1, commit do
    local key, wr = KEYS[g], writes[g]
    if wr == true then
      --@sliding_commit
    elseif type(wr) == 'number' then
      redis.call('ZADD', key, now + wr, member)
      redis.call('PEXPIREAT', key, math.ceil((now + wr) / 1000) + 1)
    elseif wr then
      redis.call('HSET', unpack(wr[1]))
      if wr[2] then redis.call('PEXPIREAT', key, wr[2]) end
    end
  end
end

local why = 0
if allowed == 0 then
  if slots[at_g] then why = 2 elseif blocks[at_g] == retry then why = 1 end
end
if refused_in_shadow then
  local sg, sr, sw = unpack(refused_in_shadow)
  return struct.pack('<dddddddddd', allowed, at_g, at_r, remaining, reset, now, why, sg, sr, sw)
end
return struct.pack('<ddddddd', allowed, at_g, at_r, remaining, reset, now, why)
