-- Drops every candidate with tensor parallel size 8, saying why, and keeps
-- the rest: the filter hook of tests/search/test_search_space.py.
return function(ctx)
  local c = ctx.candidate
  if c.tp == 8 then
    return "no tp8 on " .. c.role .. " pools here"
  end
  return true
end
