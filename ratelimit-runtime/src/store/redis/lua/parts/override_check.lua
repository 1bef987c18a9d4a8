-- Mode "o" decides as "d" does once every runtime override the caller decides with is the one
-- in force. After the limits' arguments, two per key: its override's key ('' when there is
-- nothing to check) and the override's text the caller decides with ('' for none). When one
-- differs, nothing is decided: the reply is each such key and the text in force ('' for none),
-- for the caller to decide again with them.
if ARGV[4] == 'o' then
  local stale, base = false, #ARGV - 2 * #KEYS
  for g = 1, #KEYS do
    local key = ARGV[base + 2 * g - 1]
    if key ~= '' then
      local in_force = redis.call('GET', key) or ''
      if in_force ~= ARGV[base + 2 * g] then
        stale = stale or {}
        stale[#stale + 1] = key
        stale[#stale + 1] = in_force
      end
    end
  end
  if stale then return stale end
end
