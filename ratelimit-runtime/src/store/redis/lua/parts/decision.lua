-- The locals of one decision being built (spliced where `--@decision` stands, once per call).
-- allowed (1/0), the limit and rule reported, retry-after, remaining and reset (µs)
local allowed, at_g, at_r, retry, remaining, reset = 1, 0, 0, 0, -1, 0
-- Per limit: its longest window (µs), which bounds what its log keeps and when it expires: the
-- first limit's in a local, the others' in a table made only for them (a table costs the
-- server about 1 400 instructions per call).
local longest1, longest = 0, false
-- Per limit: what its commit trims and whether it moves the key's expiry (see sliding_check),
-- kept as the windows are.
local leaving1, leaving = 0, false
-- The units in the log of the limit being checked (counted at its first rule).
local card = 0
