-- The budget periods (UTC calendar), shared by the limiter's scripts: prepended to each by redis_limits.py.
local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = (m + 9) % 12
  local doy = math.floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

local function civil_month(s)
  local z = math.floor(s / 86400) + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local y = yoe + era * 400
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local m = mp < 10 and mp + 3 or mp - 9
  if m <= 2 then y = y + 1 end
  return y, m
end

local function label(p, s)
  if p == 1 then return 'd' .. math.floor(s / 86400) end
  if p == 2 then local y, m = civil_month(s) return 'm' .. y .. '-' .. m end
  return 't'
end

local function period_end(p, s)  -- seconds since the epoch when the period of s ends; -1: never
  if p == 1 then return (math.floor(s / 86400) + 1) * 86400 end
  if p == 2 then
    local y, m = civil_month(s)
    if m == 12 then y, m = y + 1, 1 else m = m + 1 end
    return days_from_civil(y, m, 1) * 86400
  end
  return -1
end
