-- `..` of two strings of the longest length a hook may make (1 MiB): the
-- result is refused before a byte is copied (E0620); pcall cannot catch it.
return function(ctx)
  local s = string.rep("x", 1 << 20)
  local ok = pcall(function() return s .. s end)
  return ctx.default
end
