--[[ crossref.lua: Quarto-style cross references for remat's fallback report renderer (remat/report.py).

Pass 1 (document order): numbers figures and tables and captions them "Figure N: ..." / "Table N: ...":
  - a Figure with id fig-* (pandoc's implicit figure from ![caption](x.png){#fig-x});
  - a Div with id fig-* (a cell with '#| label: fig-x' + fig-cap): becomes a Figure, its last paragraph
    the caption;
  - a Table with id tbl-* (a markdown table with ': caption {#tbl-x}');
  - a Div with id tbl-* (a cell with tbl-cap): the caption (its last paragraph) moves above the table;
  and gives callout divs (.callout-note / -warning / -tip) a title: title="...", else a leading heading,
  else Note / Warning / Tip (as Quarto does).
Pass 2: section numbers as pandoc's --number-sections assigns them (pandoc.structure.make_sections);
  image paths "/x" resolve from the project root (metadata remat-project-root), as in Quarto projects.
Pass 3: @fig-x, @tbl-x, @sec-x become links "Figure N" / "Table N" / "Section N" with a non-breaking space
  (Quarto's text); [-@fig-x] gives the number only. An undefined label is a warning (remat runs pandoc
  with --fail-if-warnings, so it fails the render).
Pass 4 (the page): an image's fig-alt="..." attribute becomes its alt text, as Quarto writes it (markdown
  images {#fig-x fig-alt="..."}; fallback.py gives a cell's images its '#| fig-alt:' the same way); every
  table (a pandoc Table, or a raw HTML block holding one) goes in a <div class="table-wrap">, which page.css
  lets scroll sideways when the table is wider than the text; a body cell of one short word gets class
  nowrap (page.css keeps "gpt3-175b" on one line).
]]

local NBSP = "\u{00A0}"
local NAMES = { fig = "Figure", tbl = "Table", sec = "Section" }
local CALLOUTS = { ["callout-note"] = "Note", ["callout-warning"] = "Warning", ["callout-tip"] = "Tip" }

local numbers = {}            -- label -> number as shown ("3", "2.1")
local section_titles = {}     -- sec- label of an unnumbered section -> its heading text
local counts = { fig = 0, tbl = 0 }

local function kind_of(id)
  local kind = id:match("^(%a+)%-")
  return NAMES[kind] and kind or nil
end

local function next_number(id)
  local kind = kind_of(id)
  counts[kind] = counts[kind] + 1
  numbers[id] = tostring(counts[kind])
  return numbers[id]
end

local function captioned(id, inlines)
  local out = pandoc.Inlines { pandoc.Str(NAMES[kind_of(id)] .. NBSP .. next_number(id) .. ":") }
  if #inlines > 0 then
    out:insert(pandoc.Space())
    out:extend(inlines)
  end
  return out
end

-- the last Para/Plain of a div is its caption: (body blocks, caption inlines)
local function split_caption(blocks)
  local last = blocks[#blocks]
  if last and (last.t == "Para" or last.t == "Plain") then
    local body = pandoc.Blocks {}
    for i = 1, #blocks - 1 do body:insert(blocks[i]) end
    return body, last.content
  end
  return blocks, pandoc.Inlines {}
end

local function caption_inlines(caption)
  local long = caption.long
  if #long > 0 and long[1].content then return long[1].content end
  return pandoc.Inlines {}
end

local function callout(div, class)
  local body, title = div.content, nil
  if div.attributes.title then
    title = pandoc.utils.blocks_to_inlines(pandoc.read(div.attributes.title, "markdown").blocks)
  elseif body[1] and body[1].t == "Header" then
    title = body[1].content
    body = pandoc.Blocks { table.unpack(body, 2) }
  else
    title = pandoc.Inlines { pandoc.Str(CALLOUTS[class]) }
  end
  return pandoc.Div({
    pandoc.Div(pandoc.Plain(title), pandoc.Attr("", { "callout-title" })),
    pandoc.Div(body, pandoc.Attr("", { "callout-body" })),
  }, pandoc.Attr(div.identifier, { "callout", class }))
end

local floats = {
  traverse = "topdown",
  Figure = function(fig)
    if kind_of(fig.identifier) ~= "fig" then return nil end
    fig.caption = { long = { pandoc.Plain(captioned(fig.identifier, caption_inlines(fig.caption))) } }
    return fig
  end,
  Table = function(tbl)
    if kind_of(tbl.identifier) ~= "tbl" then return nil end
    tbl.caption = { long = { pandoc.Plain(captioned(tbl.identifier, caption_inlines(tbl.caption))) } }
    return tbl
  end,
  Div = function(div)
    local kind = kind_of(div.identifier)
    if kind == "fig" then
      local body, cap = split_caption(div.content)
      return pandoc.Figure(body, { long = { pandoc.Plain(captioned(div.identifier, cap)) } },
                           pandoc.Attr(div.identifier))
    elseif kind == "tbl" then
      local body, cap = split_caption(div.content)
      body:insert(1, pandoc.Div(pandoc.Plain(captioned(div.identifier, cap)), pandoc.Attr("", { "table-caption" })))
      return pandoc.Div(body, pandoc.Attr(div.identifier, { "table-float" }))
    end
    for class in pairs(CALLOUTS) do
      if div.classes:includes(class) then return callout(div, class) end
    end
  end,
}

local sections = {
  Pandoc = function(doc)
    local root = doc.meta["remat-project-root"] and pandoc.utils.stringify(doc.meta["remat-project-root"])
    pandoc.Blocks(pandoc.structure.make_sections(doc.blocks, { number_sections = true })):walk {
      Div = function(div)
        if div.classes:includes("section") and kind_of(div.identifier) == "sec" then
          numbers[div.identifier] = div.attributes.number
          section_titles[div.identifier] = pandoc.utils.stringify(div.content[1])
        end
      end,
    }
    if not root then return nil end
    return doc:walk {
      Image = function(img)
        if img.src:match("^/[^/]") then
          img.src = root .. img.src
          return img
        end
      end,
    }
  end,
}

local function reference(citation)
  local id = citation.id
  local kind = kind_of(id)
  local number = numbers[id]
  if number == nil and section_titles[id] then
    return pandoc.Link(section_titles[id], "#" .. id, "", pandoc.Attr("", { "quarto-xref" }))
  elseif number == nil then
    pandoc.log.warn("crossref.lua: @" .. id .. " refers to an undefined label")
    return pandoc.Strong(pandoc.Str("?@" .. id))
  end
  local text = NAMES[kind] .. NBSP .. number
  if citation.mode == "SuppressAuthor" then
    text = number
  elseif #citation.prefix > 0 then
    text = pandoc.utils.stringify(citation.prefix) .. NBSP .. number
  end
  return pandoc.Link(text, "#" .. id, "", pandoc.Attr("", { "quarto-xref" }))
end

local refs = {
  Cite = function(cite)
    for _, c in ipairs(cite.citations) do
      if not kind_of(c.id) then return nil end   -- not a cross reference: leave it alone
    end
    local out = pandoc.Inlines {}
    for i, c in ipairs(cite.citations) do
      if i > 1 then out:extend { pandoc.Str(","), pandoc.Space() } end
      out:insert(reference(c))
    end
    return out
  end,
}

local function wrapped(block)
  return pandoc.Div({ block }, pandoc.Attr("", { "table-wrap" }))
end

-- a body cell that is one short word ("gpt3-175b", "12.5") gets class nowrap: not broken at its hyphen
local function table_wrapped(tbl)
  for _, body in ipairs(tbl.bodies) do
    for _, row in ipairs(body.body) do
      for _, cell in ipairs(row.cells) do
        local text = pandoc.utils.stringify(cell.contents)
        if #text > 0 and #text <= 40 and not text:find("%s") then cell.attr.classes:insert("nowrap") end
      end
    end
  end
  return wrapped(tbl)
end

local page = {
  Image = function(img)
    local alt = img.attributes["fig-alt"]
    if alt == nil then return nil end
    img.attributes["fig-alt"] = nil
    img.caption = pandoc.Inlines { pandoc.Str(alt) }
    return img
  end,
  Table = table_wrapped,
  RawBlock = function(raw)
    if raw.format == "html" and raw.text:find("<table", 1, true) then return wrapped(raw) end
  end,
}

return { floats, sections, refs, page }
