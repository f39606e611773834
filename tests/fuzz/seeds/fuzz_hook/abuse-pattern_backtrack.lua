-- A Lua pattern that backtracks: seven lazy `.-` items try every way of
-- splitting 48 bytes before the missing `b` fails them all, in one call of
-- the string library where no instruction is counted. The sandbox refuses
-- it before it starts (E0619).
return function(ctx)
  local s = string.rep("a", 48)
  return string.find(s, ".-.-.-.-.-.-.-b")
end
