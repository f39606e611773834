-- A long loop: run with a large instruction budget and a short deadline.
return function(ctx)
  local x = 0
  for i = 1, math.maxinteger do
    x = x + i % 7
  end
  return x
end
