-- Scores by the address of a fresh table: differs from run to run.
return function(ctx)
  local addr = tostring({}):match("0x(%x+)") or tostring({}):match("(%x+)$")
  return tonumber(addr, 16) % 1000003
end
