-- Mode "o" decides as "d" does once every runtime override the caller decides with is the one
-- in force. After the limits' arguments, three per key: its override's key ('' when there is
-- nothing to check), the override's text the caller decides with ('' for none), and the rules
-- of the limit it overrides, as the override's text ('' for none; bucket.lua reads them). When one
-- differs, nothing is decided: the reply is each such key and the text in force ('' for none),
-- for the caller to decide again with them.
if ARGV[4] == 'o' then
  local stale, base = false, #ARGV - 3 * #KEYS
  for g = 1, #KEYS do
    local key = ARGV[base + 3 * g - 2]
    if key ~= '' then
      local in_force = redis.call('GET', key) or ''
      if in_force ~= ARGV[base + 3 * g - 1] then
        stale = stale or {}
        stale[#stale + 1] = key
        stale[#stale + 1] = in_force
      end
    end
  end
  if stale then return stale end
end
