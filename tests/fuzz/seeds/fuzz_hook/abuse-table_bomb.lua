-- Grows a table without bound.
return function(ctx)
  local t = {}
  local i = 0
  while true do
    i = i + 1
    t[i] = {i, i, i}
  end
end
