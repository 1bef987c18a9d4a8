-- What sliding_check.lua notes about each sliding-window limit for sliding_commit.lua, once per
-- call: its longest window (µs), which bounds what its log keeps and when it expires, and
-- whether its log was empty (then the commit's ZADD makes the key, and its expiry is set after
-- it). The first limit's in locals, the others' in tables made only for them (a table costs the
-- server about 1 400 instructions).
local longest1, longest, empty1, empty = 0, false, false, false
-- The units in the log of the limit being checked (counted at its first rule, once trimmed).
local card = 0
