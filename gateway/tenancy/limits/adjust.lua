-- Extend or settle one reservation (gateway/tenancy/limits/redis_limits.py). calendar.lua comes first.
-- KEYS, 4 per scope, as admit.lua. ARGV: id, mode (1 extend, 2 settle, 3 settle a request that never
--   reached an engine), tokens, admission second,
--   lease ms, window seconds, then 5 per scope as admit.lua.
-- extend: up to `tokens` more for the reservation, as far as every budget allows; charged to the
--   admission's tpm bucket (while it is in the window) and budget period; the lease renewed.
--   Returns {granted}.
-- settle: `tokens` (used minus granted, may be negative) charged to the same bucket and period,
--   never below zero; the lease released. Returns {0}. Mode 3 also takes the request out of the
--   admission second's rpm bucket (while it is in the window): it never ran, so it does not count.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local id, mode, tokens = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local sec0, lease, window = tonumber(ARGV[4]), tonumber(ARGV[5]) / 1000, tonumber(ARGV[6])
local in_window = sec0 >= tonumber(t[1]) - window + 1
local n = #KEYS / 4

local function scope(i)
  local a = 6 + (i - 1) * 5
  return (i - 1) * 4, tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]),
    tonumber(ARGV[a + 1])
end

if mode == 1 then
  for i = 1, n do
    local k, tpm, conc, budget, period = scope(i)
    if budget >= 0 then
      local used = tonumber(redis.call('GET', KEYS[k + 4] .. ':' .. label(period, sec0)) or '0')
      tokens = math.max(0, math.min(tokens, budget - used))
    end
  end
end
for i = 1, n do
  local k, tpm, conc, budget, period, rpm = scope(i)
  if mode == 3 and rpm >= 0 and in_window then
    if redis.call('HINCRBY', KEYS[k + 1], sec0, -1) < 0 then redis.call('HSET', KEYS[k + 1], sec0, 0) end
    redis.call('EXPIRE', KEYS[k + 1], window + 1)
  end
  if tokens ~= 0 and tpm >= 0 and in_window then
    if redis.call('HINCRBY', KEYS[k + 2], sec0, tokens) < 0 then redis.call('HSET', KEYS[k + 2], sec0, 0) end
    redis.call('EXPIRE', KEYS[k + 2], window + 1)
  end
  if tokens ~= 0 and budget >= 0 then
    local bkey = KEYS[k + 4] .. ':' .. label(period, sec0)
    if redis.call('INCRBY', bkey, tokens) <= 0 then redis.call('DEL', bkey)
    else
      local ends = period_end(period, sec0)
      if ends >= 0 then redis.call('EXPIREAT', bkey, ends + 86400) end
    end
  end
  if conc >= 0 then
    if mode == 1 then
      if redis.call('ZADD', KEYS[k + 3], 'XX', 'CH', now + lease, id) == 1 then
        redis.call('EXPIRE', KEYS[k + 3], math.ceil(lease) + 1)  -- the set outlives every lease in it
      end
    else redis.call('ZREM', KEYS[k + 3], id) end
  end
end
return {mode == 1 and tokens or 0}
