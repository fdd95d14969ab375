package modelwire

import (
	"slices"

	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// Scrubbing what the model reads besides tool results. The user's own
// messages carry file contents: Claude Code puts a file named with @ and
// its system reminders (a file changed on disk, the project's notes) in
// the user message's text, and any client may attach documents. Every
// text of a user message is scrubbed, its parts as one text
// (Options.ScrubAcross); a text that cannot be scanned is withheld.

// withheldText replaces a user text that could not be scanned for secrets.
const withheldText = "[foldproxy] This text was withheld: it could not be scanned for secrets, so it was not sent to the model."

// scrubParts scrubs texts read one after the other (the parts of one
// result or message): each alone, then across their boundaries. changed
// reports whether any part changed; parts is never changed in place.
func (a *applier) scrubParts(parts []string) (out []string, changed bool, err error) {
	out = make([]string, len(parts))
	for x, p := range parts {
		if out[x], err = a.opt.Scrub(a.ctx, p); err != nil {
			return nil, false, err
		}
		changed = changed || out[x] != p
	}
	if a.opt.ScrubAcross != nil && len(out) > 1 {
		across, err := a.opt.ScrubAcross(a.ctx, out)
		if err != nil {
			return nil, false, err
		}
		if len(across) == len(out) {
			for x := range across {
				changed = changed || across[x] != out[x]
			}
			out = across
		}
	}
	return out, changed, nil
}

// userTexts are the spans of the strings of user message m that the
// model reads as text: a string content, text parts, documents and
// search results (not tool results, which results() handles).
func (c *conv) userTexts(m *msg) []span {
	if m.role != "user" || !m.content.ok() {
		return nil
	}
	b := c.body
	switch b[m.content.s] {
	case '"':
		return []span{m.content}
	case '[':
	default:
		return nil
	}
	els, err := elements(b, m.content)
	if err != nil {
		return nil
	}
	var r result
	for _, el := range els {
		if b[el.s] != '{' {
			continue
		}
		o, err := parseObj(b, el)
		if err != nil {
			continue
		}
		switch o.str("type") {
		case "text", "input_text":
			if v, ok := o.get("text"); ok && b[v.s] == '"' {
				r.texts = append(r.texts, v)
			}
		case "document", "search_result":
			collectTexts(b, el, &r, 0)
		}
	}
	return r.texts
}

// userText scrubs the text of every user message: it edits the messages
// that stay, and keeps what it made of all of them (userScrubbed) for
// the text a fold moves (mergeTail).
func (a *applier) userText(removed []bool) error {
	if a.opt.Scrub == nil {
		return nil
	}
	c := a.c
	for i := range c.msgs {
		sps := c.userTexts(&c.msgs[i])
		if len(sps) == 0 {
			continue
		}
		parts := make([]string, len(sps))
		for x, v := range sps {
			parts[x], _ = unquote(c.body[v.s:v.e])
		}
		out, changed, err := a.scrubParts(parts)
		if err != nil {
			// Fail closed: no part of it reaches the model.
			out, changed = slices.Repeat([]string{withheldText}, len(parts)), true
		}
		if !changed {
			continue
		}
		for x, v := range sps {
			if out[x] == parts[x] {
				continue
			}
			if a.userScrubbed == nil {
				a.userScrubbed = map[int]string{}
			}
			a.userScrubbed[v.s] = out[x]
			if !removed[i] {
				a.edits = append(a.edits, edit{v.s, v.e, jsonscan.Quote(out[x])})
			}
		}
	}
	return nil
}

// userBytes is the body's bytes of sp with the user texts in it as
// scrubbed.
func (a *applier) userBytes(sp span) []byte {
	b := a.c.body[sp.s:sp.e]
	if len(a.userScrubbed) == 0 {
		return b
	}
	var starts []int
	for s := range a.userScrubbed {
		if s >= sp.s && s < sp.e {
			starts = append(starts, s)
		}
	}
	if len(starts) == 0 {
		return b
	}
	slices.Sort(starts)
	out := make([]byte, 0, len(b))
	at := sp.s
	for _, s := range starts {
		e, err := jsonscan.SkipString(a.c.body, s)
		if err != nil || s < at {
			continue // cannot be: s starts a string of the valid body
		}
		out = append(out, a.c.body[at:s]...)
		out = append(out, jsonscan.Quote(a.userScrubbed[s])...)
		at = e
	}
	return append(out, a.c.body[at:sp.e]...)
}
