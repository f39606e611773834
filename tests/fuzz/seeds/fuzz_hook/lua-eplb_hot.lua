-- Hot-expert replication in the manner of EPLB (DeepSeek's Expert
-- Parallelism Load Balancer): from the load of each logical expert, give
-- the hottest experts extra replicas and pack all replicas on the ep ranks
-- so that every rank holds the same number of experts and the busiest rank
-- carries as little load as this greedy packing finds.
--
-- The histogram is an example computed by a formula (a Zipf law, the k-th
-- hottest expert getting load proportional to 1/k, with the hot experts
-- scattered over the expert ids). Replace `load` with the per-expert token
-- counts your serving engine measured.
local function load_of(experts)
  local load = {}
  for e = 0, experts - 1 do
    load[e] = 1000000 // ((e * 37) % experts + 1)
  end
  return load
end

return function(ctx)
  local experts, ep = ctx.model.experts, ctx.pool.ep
  if experts % ep ~= 0 then
    error(string.format("%d experts do not divide over %d ep ranks", experts, ep))
  end
  local load = load_of(experts)
  -- One redundant slot per ep rank.
  local redundant = ep
  local slots = (experts + redundant) // ep

  -- Replicate: each extra replica goes to the expert with the highest load
  -- per replica (lowest id on ties), as EPLB's replicate step does.
  local count = {}
  for e = 0, experts - 1 do count[e] = 1 end
  for _ = 1, redundant do
    local best
    for e = 0, experts - 1 do
      if count[e] < ep and (not best or load[e] * count[best] > load[best] * count[e]) then
        best = e
      end
    end
    count[best] = count[best] + 1
  end

  -- Pack: replicas heaviest first, each on the least-loaded rank that has a
  -- free slot and does not hold that expert yet (lowest rank on ties).
  local replicas = {}
  for e = 0, experts - 1 do
    for _ = 1, count[e] do
      replicas[#replicas + 1] = {e = e, w = load[e] / count[e]}
    end
  end
  table.sort(replicas, function(a, b)
    if a.w ~= b.w then return a.w > b.w end
    return a.e < b.e
  end)
  local rank_load, rank_used, holds = {}, {}, {}
  for r = 0, ep - 1 do
    rank_load[r], rank_used[r], holds[r] = 0, 0, {}
  end
  local map = {}
  for e = 0, experts - 1 do map[e + 1] = {} end
  for _, rep in ipairs(replicas) do
    local best
    for r = 0, ep - 1 do
      if rank_used[r] < slots and not holds[r][rep.e]
          and (not best or rank_load[r] < rank_load[best]) then
        best = r
      end
    end
    if not best then
      error(string.format("no ep rank left for a replica of expert %d", rep.e))
    end
    rank_load[best] = rank_load[best] + rep.w
    rank_used[best] = rank_used[best] + 1
    holds[best][rep.e] = true
    table.insert(map[rep.e + 1], best)
  end
  for e = 1, experts do table.sort(map[e]) end
  return map
end
