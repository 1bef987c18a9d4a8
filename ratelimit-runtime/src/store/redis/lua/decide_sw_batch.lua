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
  -- call: its longest window (µs), which bounds what its log keeps and when it expires, and what
  -- its commit trims and whether it moves the key's expiry. The first limit's in locals, the
  -- others' in tables made only for them (a table costs the server about 1 400 instructions).
  local longest1, longest, leaving1, leaving = 0, false, 0, false
  -- The units in the log of the limit being checked (counted at its first rule).
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
      -- What is in this window: the log's units less those before it (scores are whole µs, so the
      -- units after now - w are those counted). Both counts are cheap: ZCARD is O(1), and a range
      -- from -inf ends near the log's oldest unit. ZCOUNT of the window itself, up to +inf, walks the
      -- skip list down to its newest unit, which cost the server about 0.4 µs more per rule on a log
      -- of 700 units. The log is trimmed only when a call is admitted (sliding_commit): a refused call
      -- writes nothing.
      if r == 1 then card = redis.call('ZCARD', key) end
      local before = redis.call('ZCOUNT', key, '-inf', format('%d', now - w))
      local used = card - before
      if r == 1 then
        -- What the commit does to this log: the units before the longest window leave it, and the
        -- key's expiry moves when some leave or the window held none. Kept in one number: how many
        -- leave, or -1 less that when the window held none.
        local leave = before
        if used == 0 then leave = -1 - before end
        if g == 1 then
          longest1, leaving1 = w, leave
        else
          if not longest then longest, leaving = {}, {} end
          longest[g], leaving[g] = w, leave
        end
      end
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
      -- One sliding-window limit's commit, once the call is admitted: what left the longest window
      -- goes, a unique member per unit comes, and the key's expiry moves when needed. Reads: key, g,
      -- now, now_text, cost, member, format and the memo (sliding_memo.lua).
      local l, leave = longest1, leaving1
      if g > 1 then l, leave = longest[g], leaving[g] end
      -- The units before the window were counted by sliding_check, in this same run: none, no trim.
      local gone = leave
      if leave < 0 then gone = -1 - leave end
      if gone > 0 then redis.call('ZREMRANGEBYSCORE', key, '-inf', format('%d', now - l)) end
      if cost == 1 then
        redis.call('ZADD', key, now_text, member)
      else
        for i = 1, cost do redis.call('ZADD', key, now_text, member .. ':' .. i) end
      end
      -- The expiry moves to two windows after now (in whole ms, rounded up, and one more), and only
      -- when units left the window here or the log was empty. Every unit still counts when its key
      -- expires: the admission that last moved the expiry, at r, set r + 2L; an admission at t needs
      -- t + L, so only one after r + L needs a move, and the first such finds r's units leaving the
      -- window (refused calls trim nothing, so no unit leaves unseen), or the log empty. A refund that
      -- removes r's units moves the expiry to two windows after the newest unit left, which then
      -- plays r's part (sliding_release.lua). A busy key whose units leave on every call moves it on
      -- every call; one whose units stay in the window (a long window) moves it about once per window.
      if leave ~= 0 then
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
