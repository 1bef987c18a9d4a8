-- The locals of one decision being built (spliced where `--@decision` stands, once per call).
-- allowed (1/0), the limit and rule reported, retry-after, remaining and reset (µs)
local allowed, at_g, at_r, retry, remaining, reset = 1, 0, 0, 0, -1, 0
-- Per limit: its longest window (µs), which bounds what its log keeps and when it expires: the
-- first limit's in a local, the others' in a table made only for them (a table costs the
-- server about 1 400 instructions per call).
local longest1, longest = 0, false
-- Per limit: whether its log held no unit of its longest window (then its key's expiry must be
-- set), kept as the windows are.
local empty1, empty = false, false
