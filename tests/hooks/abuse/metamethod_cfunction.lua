-- A metamethod that is a library (C) function: table.concat would then
-- call table.concat for every missing element, 2^40 times, in C where no
-- instruction is counted. setmetatable refuses it (E0605).
return function(ctx)
  local t = setmetatable({}, {__index = table.concat})
  return #table.concat(t, "", 1, 2^40)
end
