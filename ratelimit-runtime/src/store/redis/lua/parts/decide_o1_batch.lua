-- The decisions of calls whose limits are all O(1) algorithms (fw, swc, tb, lb, gcra; no block,
-- no concurrency or shadow limit: those are decide.lua's), one after another, through the
-- parts decide.lua uses on the same HASH fields, each seeing every earlier one as if each had
-- been a script run of its own: a lone call (a batch of one), or concurrent calls on one
-- connection, coalesced (store/redis/batch.rs). A batch pays once what a run costs whatever
-- it decides: the EVALSHA's dispatch, the reply, and TIME.
--
-- KEYS     every call's keys (one HASH per limit), call after call.
-- ARGV[1] every number of the batch, little-endian doubles (as decide_sw_batch.lua takes its
--          own): the call count (not read here), then per call: cost, its key count m (its m
--          keys follow the previous call's in KEYS), or -1 - m when the caller gives the call's
--          time, which follows (µs; else the call takes the server's TIME, read once for the
--          batch: a time not sent is a number the server neither unpacks nor reads, about 500
--          instructions a decision), then per limit: algorithm (1 fw, 2 swc, 3 tb, lb or gcra,
--          which decide alike), rule count n, burst (0 = count), n x (window µs, or minus its
--          months, count), longest window first. One argument, not one per number: each
--          argument costs the server about 1 000 instructions to receive and each text number a
--          strtod to convert (under callgrind, 5 300 instructions per one-rule decision in all).
-- Returns, for a lone call, 48 bytes (decide.lua's answer without `why`):
-- struct.pack('<dddddd', allowed, limit, rule, remaining, reset_us, now), or for an admission
-- reported by the first limit's first rule the 24 bytes struct.pack('<ddd', -1 - remaining,
-- reset_us, now), as decide_sw_batch.lua answers. For several calls, per call in call order the
-- same without now (40 or 16 bytes), then the server's time (µs, 0 if no call took it): the
-- caller knows the time it gave a call (each double of a reply costs the server a table write
-- and about 20 instructions a byte to pack).

-- Globals are table lookups: locals are cheaper.
local KEYS, ARGV, redis, unpack, string, struct = KEYS, ARGV, redis, unpack, string, struct
-- The C functions every decision calls, looked up once: each lookup of a table's field costs the
-- server about 100 instructions (o1_limit.lua and the algorithms' parts call them by these names).
local rcall, spack, sunpack = redis.call, struct.pack, struct.unpack
local release, peek, statuses = false, false, nil
--@exact
-- Calendar months' conversions, made when first needed (fixed_window.lua, calendar.lua).
local month_start, month_window
-- The server's clock, once read (server_time.lua), as a number alone (no state here is scored
-- by time as text).
local server_now, server_text, time_text = false, false, false
-- The replies of a batch of several calls, as numbers: packed by one struct.pack at the end, not
-- a string per call joined by table.concat (each string costs the server its interning and each
-- byte two copies). They are kept in A itself, whose numbers they replace once read: a call
-- takes at least 7 numbers and answers at most 5 (and the batch's time is written last), so
-- the k replies so far never reach a number not yet read, and no table is grown for them. A
-- batch of one answers without them.
local k = 0
-- The numbers, unpacked at once: one C call for the batch, not one per call (Lua's C stack takes
-- about 8 000 results; a batch past 4 000 numbers is unpacked one at a time).
local nums = ARGV[1]
local last = (#nums - 8) / 8
-- The format of n doubles, '<' and n times 'd'. Written out for up to 64 numbers (a lone call
-- sends fewer unless it has many limits): a literal costs the server nothing per run, where
-- building it did (string.rep copies a byte at a time, about 30 instructions a byte; with the
-- joins, 4 500 instructions a run, 8% of a lone call). Past 64, 64 at a time.
local f64 = '<dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd'
local function doubles(n)
  if n <= 64 then return string.sub(f64, 1, n + 1) end
  local r = n % 64
  local d64 = string.sub(f64, 2)
  return '<' .. string.rep(d64, (n - r) / 64) .. string.sub(d64, 1, r)
end
local A
if last <= 4000 then
  A = {struct.unpack(doubles(last), nums, 9)}
else
  A = {}
  for i = 1, last do A[i] = struct.unpack('<d', nums, 1 + 8 * i) end
end
local pos, base = 1, 0
-- The expiry's grid of the last limit's longest window (o1_limit.lua).
local grid_w, grid, grid_us = false, 0, 0
while pos <= last do
  local cost, m = A[pos], A[pos + 1]
  local now
  if m < 0 then
    m = -1 - m
    now = A[pos + 2]
    pos = pos + 3
  else
    --@server_time
    now = server_now
    pos = pos + 2
  end
  --@decision
  local at = now
  -- The call's limits, over KEYS[base + 1] to KEYS[base + m]: each decided by o1_limit, then,
  -- if every one admits, each one's new state written and its expiry moved.
  -- Per limit: what HSET writes (o1_limit's set) and its new expiry in ms (false: unchanged).
  -- The first limit's in locals (key1, its rule count n1, set1 the state of a one-rule limit),
  -- the others' in tables, as HSET's arguments. Each is set by a statement of its own: Lua
  -- assigns several locals at once through temporaries, an instruction more per value.
  local key1, n1, set1, exp1, sets, exps
  for g = 1, m do
    local key = KEYS[base + g]
    -- No runtime override (see bucket.lua).
    local under = false
    --@o1_limit
    if g == 1 then
      key1 = key
      n1 = n
      set1 = set
      exp1 = expiry
    else
      if n == 1 and set then set = {key, '1', set} end
      if not sets then sets, exps = {}, {} end
      sets[g], exps[g] = set, expiry
    end
  end

  if allowed == 1 then
    if n1 == 1 then rcall('HSET', key1, '1', set1) else rcall('HSET', unpack(set1)) end
    if exp1 then rcall('PEXPIREAT', key1, exp1) end
    if m > 1 then
      for g = 2, m do
        rcall('HSET', unpack(sets[g]))
        if exps[g] then rcall('PEXPIREAT', KEYS[base + g], exps[g]) end
      end
    end
  end
  base = base + m

  if allowed == 1 and at_g == 1 and at_r == 1 then
    if pos > last and k == 0 then return struct.pack('<ddd', -1 - remaining, reset, now) end
    A[k + 1] = -1 - remaining
    A[k + 2] = reset
    k = k + 2
  else
    if pos > last and k == 0 then
      return struct.pack('<dddddd', allowed, at_g, at_r, remaining, reset, now)
    end
    A[k + 1], A[k + 2], A[k + 3], A[k + 4], A[k + 5] = allowed, at_g, at_r, remaining, reset
    k = k + 5
  end
end
-- The server's time the calls without their own took (0: none did), once for the batch.
k = k + 1
A[k] = server_now or 0
-- Packed 4 000 at a time at most: Lua's C stack takes about 8 000 values.
if k <= 4000 then return struct.pack(doubles(k), unpack(A, 1, k)) end
local out = {}
for i = 1, k, 4000 do
  local j = i + 3999
  if j > k then j = k end
  out[#out + 1] = struct.pack(doubles(j - i + 1), unpack(A, i, j))
end
return table.concat(out)
