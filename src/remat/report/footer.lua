--[[ footer.lua: the page footer naming the renderer that made the page, under both engines.

  "Rendered by Quarto 1.7.34 on 2025-01-31."                                   (quarto render: _quarto.yml filters)
  "Rendered by remat's fallback renderer (pandoc 3.9) on 2025-01-31."          (remat/report/fallback.py)

Quarto runs it as a user filter (the global `quarto` and its `quarto.version` exist there); plain pandoc has
no `quarto`, so the page came from the fallback and PANDOC_VERSION names the pandoc. The date is today's
(UTC), or SOURCE_DATE_EPOCH's when set (reproducible builds). HTML only; the style is inline so that it looks
the same on Quarto's page and on the fallback's. Separate from crossref.lua, which must not run under Quarto.
]]

local function renderer()
  if quarto ~= nil and quarto.version ~= nil then
    return "Quarto " .. tostring(quarto.version)
  end
  return "remat's fallback renderer (pandoc " .. tostring(PANDOC_VERSION) .. ")"
end

local function today()
  local epoch = tonumber(os.getenv("SOURCE_DATE_EPOCH") or "")
  return os.date("!%Y-%m-%d", epoch)
end

local function escape(s)
  return (s:gsub("&", "&amp;"):gsub("<", "&lt;"):gsub(">", "&gt;"))
end

local STYLE = "margin-top:3rem;padding-top:.75rem;border-top:1px solid #dee2e6;"
  .. "font-size:.85em;color:#6c757d;"

function Pandoc(doc)
  if not FORMAT:match("html") then return nil end
  local text = "Rendered by " .. renderer() .. " on " .. today() .. "."
  doc.blocks:insert(pandoc.RawBlock("html",
    '<footer class="remat-footer" style="' .. STYLE .. '">\n<p>' .. escape(text) .. '</p>\n</footer>'))
  return doc
end
