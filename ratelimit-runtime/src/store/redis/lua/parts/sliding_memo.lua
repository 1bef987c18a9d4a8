-- What sliding_check.lua notes about each sliding-window limit for sliding_commit.lua, once per
-- call: its longest window (µs), which bounds what its log keeps and when it expires, and what
-- its commit trims and whether it moves the key's expiry. The first limit's in locals, the
-- others' in tables made only for them (a table costs the server about 1 400 instructions).
local longest1, longest, leaving1, leaving = 0, false, 0, false
-- The units in the log of the limit being checked (counted at its first rule).
local card = 0
