-- Pipeline split that counts the embedding (first stage) and the lm_head
-- (last stage) as weight: each is vocab_size * hidden_size parameters,
-- compared with one transformer layer's attention and SwiGLU FFN
-- parameters. The stages then get layer counts that even out parameters,
-- so the first and last stages carry fewer layers.
return function(ctx)
  local m, pp = ctx.model, ctx.pool.pp
  local h = m.hidden_size
  local q = m.heads * m.head_dim
  local kv = m.kv_heads * m.head_dim
  local layer = h * q + 2 * h * kv + q * h + 3 * h * m.intermediate_size
  local ends = m.vocab_size * h
  -- The embedding and the lm_head in units of layers, rounded down.
  local extra = ends // layer
  local total = m.layers + (pp > 1 and 2 * extra or extra)
  local out, given = {}, 0
  for s = 1, pp do
    local share = total * s // pp - total * (s - 1) // pp
    if pp > 1 and (s == 1 or s == pp) then share = share - extra end
    if share < 1 then share = 1 end
    out[s] = share
    given = given + share
  end
  -- Rounding leftovers go to the middle stages (or the only stage).
  local s = pp > 2 and 2 or 1
  while given < m.layers do
    out[s] = out[s] + 1
    given = given + 1
    s = (pp > 2) and (s % (pp - 2) + 2) or 1
  end
  while given > m.layers do
    local big = 1
    for i = 2, pp do if out[i] > out[big] then big = i end end
    out[big] = out[big] - 1
    given = given - 1
  end
  return out
end
