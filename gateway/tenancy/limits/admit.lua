-- Check and reserve, atomically, for every scope of one request (gateway/tenancy/limits/redis_limits.py).
-- KEYS, 4 per scope: rpm buckets (hash second -> requests), tpm buckets (hash second -> tokens),
--   in-flight leases (zset id -> deadline), budget counter prefix (the period label is appended).
-- ARGV: id, tokens wanted, min tokens, lease ms, window seconds, then 5 per scope:
--   rpm, tpm, max_concurrency, budget, period code (0 none, 1 day, 2 month, 3 total); -1: no limit.
-- Returns {ok, granted, second, reason, scope index, retry ms,
--          requests limit, remaining, reset ms, tokens limit, remaining, reset ms,
--          budget limit, remaining, reset ms, then per scope: budget used after this (-1: none)}.
-- The clock is Redis's own (TIME), so replicas with skewed clocks agree. calendar.lua comes first.
local t = redis.call('TIME')
local sec = tonumber(t[1])
local now = sec + tonumber(t[2]) / 1000000
local id = ARGV[1]
local want = tonumber(ARGV[2])
local least = tonumber(ARGV[3])
local lease = tonumber(ARGV[4]) / 1000
local window = tonumber(ARGV[5])
local oldest = sec - window + 1
local n = #KEYS / 4

local function window_sum(key)
  local flat = redis.call('HGETALL', key)
  local sum, live = 0, {}
  for j = 1, #flat, 2 do
    local s = tonumber(flat[j])
    if s < oldest then
      redis.call('HDEL', key, flat[j])
    else
      local v = tonumber(flat[j + 1])
      sum = sum + v
      live[#live + 1] = {s, v}
    end
  end
  table.sort(live, function(a, b) return a[1] < b[1] end)
  return sum, live
end

local function wait_for(live, need)  -- seconds until `need` units have left the window
  local freed = 0
  for _, b in ipairs(live) do
    freed = freed + b[2]
    if freed >= need then return b[1] + window - now end
  end
  return window
end

local function ms(x) return math.floor(x * 1000 + 0.5) end

local info = {-1, -1, -1, -1, -1, -1, -1, -1, -1}
local function tighter(slot, limit, remaining, reset)
  if info[slot] == -1 or remaining < info[slot + 1] then
    info[slot], info[slot + 1], info[slot + 2] = limit, remaining, reset
  end
end

local function refuse(reason, i, retry)
  local out = {0, 0, sec, reason, i, retry >= 0 and ms(retry) or -1}
  for _, v in ipairs(info) do out[#out + 1] = v end
  return out
end

local granted = want
local scopes = {}
for i = 1, n do
  local a = 5 + (i - 1) * 5
  local rpm, tpm, conc = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local budget, period = tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  local k = (i - 1) * 4
  local scope = {rpm = rpm, tpm = tpm, conc = conc, budget = budget, period = period, k = k}
  if rpm >= 0 then
    local used, live = window_sum(KEYS[k + 1])
    if used + 1 > rpm then
      tighter(1, rpm, 0, ms(live[#live][1] + window - now))
      return refuse(1, i, wait_for(live, used + 1 - rpm))
    end
    scope.rpm_used = used
  end
  if tpm >= 0 then
    local used, live = window_sum(KEYS[k + 2])
    if least > tpm then
      tighter(4, tpm, math.max(tpm - used, 0), 0)
      return refuse(5, i, -1)
    end
    local need = math.min(want, tpm)
    if used + need > tpm then
      tighter(4, tpm, math.max(tpm - used, 0), ms(live[#live][1] + window - now))
      return refuse(2, i, wait_for(live, used + need - tpm))
    end
    granted = math.min(granted, tpm - used)
    scope.tpm_used = used
  end
  if conc >= 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[k + 3], '-inf', now)
    if redis.call('ZCARD', KEYS[k + 3]) + 1 > conc then
      return refuse(3, i, 1)
    end
  end
  if budget >= 0 then
    local bkey = KEYS[k + 4] .. ':' .. label(period, sec)
    local used = tonumber(redis.call('GET', bkey) or '0')
    local ends = period_end(period, sec)
    if budget - used < least then
      tighter(7, budget, math.max(budget - used, 0), ends >= 0 and ms(ends - now) or -1)
      return refuse(4, i, ends >= 0 and ends - now or -1)
    end
    granted = math.min(granted, budget - used)
    scope.bkey, scope.budget_used, scope.ends = bkey, used, ends
  end
  scopes[i] = scope
end

local used_after = {}
for i = 1, n do
  local s = scopes[i]
  local k = s.k
  if s.rpm >= 0 then
    redis.call('HINCRBY', KEYS[k + 1], sec, 1)
    redis.call('EXPIRE', KEYS[k + 1], window + 1)
    tighter(1, s.rpm, s.rpm - s.rpm_used - 1, ms(sec + window - now))
  end
  if s.tpm >= 0 then
    redis.call('HINCRBY', KEYS[k + 2], sec, granted)
    redis.call('EXPIRE', KEYS[k + 2], window + 1)
    tighter(4, s.tpm, s.tpm - s.tpm_used - granted, ms(sec + window - now))
  end
  if s.conc >= 0 then
    redis.call('ZADD', KEYS[k + 3], now + lease, id)
    redis.call('EXPIRE', KEYS[k + 3], math.ceil(lease) + 1)
  end
  if s.budget >= 0 then
    local total = redis.call('INCRBY', s.bkey, granted)
    if s.ends >= 0 then redis.call('EXPIREAT', s.bkey, s.ends + 86400) end
    tighter(7, s.budget, s.budget - total, s.ends >= 0 and ms(s.ends - now) or -1)
    used_after[i] = total
  else
    used_after[i] = -1
  end
end

local out = {1, granted, sec, 0, 0, 0}
for _, v in ipairs(info) do out[#out + 1] = v end
for i = 1, n do out[#out + 1] = used_after[i] end
return out
