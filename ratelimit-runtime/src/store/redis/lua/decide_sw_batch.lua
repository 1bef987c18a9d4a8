-- Assembled by store/redis/script/assembly.rs from lua/parts/decide_sw_batch.lua, each line
-- `--@name` of a part replaced by a comment naming lua/parts/name.lua, then that part.
-- Edit the parts, not this file, then re-assemble:
--     RATELIMIT_ASSEMBLE_SCRIPTS=1 cargo test -p ratelimit-runtime --lib scripts

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
    -- parts/server_time.lua
    -- The server's clock, read once per run into server_now (µs): the calls of a batch that ask for
    -- it share one reading (false until read). A script that stores now as a score (the sliding
    -- window's ZADD, with time_text set) also gets it as text in server_text. Each converts TIME's
    -- two strings the way that costs it least: with the text, the µs are padded to six digits
    -- (which they have nine times in ten), joined to the seconds and converted once, a conversion
    -- (strtod) costing the server about 1 500 instructions; without, joining would cost about 550
    -- more than converting both strings.
    if not server_now then
      local t = redis.call('TIME')
      if time_text then
        local us = t[2]
        if #us < 6 then us = string.sub('00000', #us) .. us end
        server_text = t[1] .. us
        server_now = server_text + 0
      else
        server_now = t[1] * 1000000 + t[2]
      end
    end
    now, now_text = server_now, server_text
  else
    now_text = format('%d', now)
  end
  -- parts/decision.lua
  -- The call's decision, built rule by rule (verdict.lua merges each rule's verdict into it):
  -- allowed (1/0), the limit and rule it reports (at_g, at_r, 1-based; 0: none yet), the
  -- retry-after, and that rule's remaining (-1: no rule yet) and reset (µs).
  local allowed, at_g, at_r, retry, remaining, reset = 1, 0, 0, 0, -1, 0
  -- parts/sliding_memo.lua
  -- What sliding_check.lua notes about each sliding-window limit for sliding_commit.lua, once per
  -- call: its longest window (µs), which bounds what its log keeps and when it expires, and
  -- whether its log was empty (then the commit's ZADD makes the key, and its expiry is set after
  -- it). The first limit's in locals, the others' in tables made only for them (a table costs the
  -- server about 1 400 instructions).
  local longest1, longest, empty1, empty = 0, false, false, false
  -- The units in the log of the limit being checked (counted at its first rule, once trimmed).
  local card = 0
  -- Whether the call has one limit of one rule (then an admission answers the short form).
  local single = false
  for g = 1, keys do
    local key = KEYS[base + g]
    local n, w, count
    n, w, count, p = struct.unpack('<ddd', nums, p)
    if keys == 1 then single = n == 1 end
    for r = 1, n do
      if r > 1 then w, count, p = struct.unpack('<dd', nums, p) end
      -- parts/sliding_check.lua
      -- One rule of a sliding-window limit, in the loop over the limit's rules (longest window
      -- first): what the call would leave in the window. Reads: key, g, r, w (µs), count, now, cost,
      -- format, card and the memo (sliding_memo.lua). Sets: left, wait and rst, the rule's verdict
      -- (see verdict.lua).
      -- What is in this window (scores are whole µs, so the units after now - w are those counted).
      -- At the longest window, the first rule, the units at or before its start count in no window
      -- of this limit: they are trimmed first, whatever the decision, and the log's size (ZCARD,
      -- O(1)) is then the window's count. Trimming first saves a busy log a count on every call:
      -- counting before the window and trimming it after an admission took one more command. At a
      -- shorter window, the units at or before its start are counted from -inf, which ends near the
      -- log's oldest unit (a count of the window itself, up to +inf, walks the skip list down to its
      -- newest unit: about 0.4 µs more per rule on a log of 700 units).
      local before = 0
      if r == 1 then
        local gone = redis.call('ZREMRANGEBYSCORE', key, '-inf', format('%d', now - w))
        card = redis.call('ZCARD', key)
        -- Units left the log: its expiry moves to two windows after now (in whole ms, rounded up, and
        -- one more), refused or not. Every unit still counts when its key expires: the move before
        -- this one, at m, set m + 2L; a unit added at t needs t + L, so only units added after m + L
        -- need a move, and the first call after m + L finds the units that were in the log at m
        -- leaving it (every trim moves the expiry, so none left unseen), or the log empty, and the
        -- commit of an admission into an empty log moves it (sliding_commit.lua). A refund that
        -- removes units moves it to two windows after the newest unit left (sliding_release.lua). A
        -- busy key whose units leave on every call moves it on every call; one whose units stay in
        -- the window (a long window) about once per window. An emptied log is a deleted key: nothing
        -- to move.
        if gone > 0 and card > 0 then
          local ms = now + 2 * w + 1999
          redis.call('PEXPIREAT', key, format('%d', (ms - ms % 1000) / 1000))
        end
        if g == 1 then
          longest1, empty1 = w, card == 0
        else
          if not longest then longest, empty = {}, {} end
          longest[g], empty[g] = w, card == 0
        end
      else
        before = redis.call('ZCOUNT', key, '-inf', format('%d', now - w))
      end
      local used = card - before
      -- The rule's quota is whole again when this call's units leave it: the reset is a window.
      local left, wait, rst = count - used - cost, w, w
      if left < 0 and cost <= count then
        -- The oldest -left units in this window must leave before the call fits: it fits when the
        -- (-left)-th oldest leaves. (A cost above the count never fits: wait a whole window.)
        local e = redis.call('ZRANGEBYSCORE', key, format('%d', now - w + 1), '+inf', 'WITHSCORES', 'LIMIT', -left - 1, 1)
        wait = tonumber(e[2]) + w - now
      end
      -- parts/verdict.lua
      -- Merges one rule's verdict into the call's decision, as deciding every rule at once would: a
      -- refusal with the longest wait wins, the earlier on ties (waiting it is enough for every
      -- rule); else the tightest rule, the one with the least remaining, the earlier on ties.
      -- Reads: g and r (the limit and rule, 1-based), left (what the rule has left after the call;
      -- < 0: refused), wait (refused: the retry-after), rst (admitted: the reset) and the decision.
      if left < 0 then
        if allowed == 1 or wait > retry then
          allowed, at_g, at_r, retry, remaining, reset = 0, g, r, wait, 0, wait
        end
      elseif allowed == 1 and (remaining < 0 or left < remaining) then
        at_g = g
        at_r = r
        remaining = left
        reset = rst
      end
    end
  end

  if allowed == 1 then
    for g = 1, keys do
      local key = KEYS[base + g]
      -- parts/sliding_commit.lua
      -- One sliding-window limit's commit, once the call is admitted: a unique member per unit comes
      -- (sliding_check.lua trimmed what left the longest window, and moved the key's expiry if any
      -- did). Reads: key, g, now, now_text, cost, member, format and the memo (sliding_memo.lua).
      if cost == 1 then
        redis.call('ZADD', key, now_text, member)
      else
        for i = 1, cost do redis.call('ZADD', key, now_text, member .. ':' .. i) end
      end
      -- Into an empty log, the ZADD made the key: its expiry is two windows after now, as a trim sets
      -- it (the reasons are sliding_check.lua's).
      local l, fresh = longest1, empty1
      if g > 1 then l, fresh = longest[g], empty[g] end
      if fresh then
        local ms = now + 2 * l + 1999
        redis.call('PEXPIREAT', key, format('%d', (ms - ms % 1000) / 1000))
      end
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
