package modelwire

import (
	"context"
	"slices"

	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// ScrubJSON scrubs every string value of a JSON body that the model may
// read, through scrub, and returns the body with those strings replaced
// (body itself when nothing changed). It is for the requests of the model
// APIs that the context manager does not fold but that carry a
// conversation: Anthropic's message batches (each request's params), the
// OpenAI completions, embeddings and conversations APIs, and any other
// JSON the front relays. Ids, signatures, types, URLs and binary data
// (skipKeys, base64 sources), a batch request's custom_id and the model's
// name are left alone; keys are never changed. A
// body with a key twice in one object is refused (DuplicateKeyError), and
// a scrub error is returned as it is (the caller fails closed).
func ScrubJSON(ctx context.Context, body []byte, scrub func(ctx context.Context, text string) (string, error)) ([]byte, error) {
	if !jsonscan.Valid(body) {
		return nil, ErrNotJSON
	}
	if err := duplicateKey(body); err != nil {
		return nil, err
	}
	var strs []span
	lo, hi := jsonscan.SkipSpace(body, 0), len(body)
	for hi > lo && jsonscan.IsSpace(body[hi-1]) {
		hi--
	}
	gatherStrings(body, span{lo, hi}, &strs, 0)
	var edits []edit
	for _, v := range strs {
		s, err := unquote(body[v.s:v.e])
		if err != nil || s == "" {
			continue
		}
		out, err := scrub(ctx, s)
		if err != nil {
			return nil, err
		}
		if out != s {
			edits = append(edits, edit{v.s, v.e, jsonscan.Quote(out)})
		}
	}
	if len(edits) == 0 {
		return body, nil
	}
	slices.SortFunc(edits, func(x, y edit) int { return x.s - y.s })
	return applyEdits(body, edits)
}

// gatherStrings appends the spans of the strings of the value at v that
// ScrubJSON scrubs.
func gatherStrings(b []byte, v span, out *[]span, depth int) {
	if !v.ok() || depth > 10000 {
		return
	}
	switch b[v.s] {
	case '"':
		*out = append(*out, v)
	case '[':
		els, err := elements(b, v)
		if err != nil {
			return
		}
		for _, el := range els {
			gatherStrings(b, el, out, depth+1)
		}
	case '{':
		o, err := parseObj(b, v)
		if err != nil {
			return
		}
		textSource := o.str("type") == "text" || o.str("type") == "plain_text"
		for _, m := range o.mem {
			if m.key == "data" && textSource {
				gatherStrings(b, m.val, out, depth+1)
				continue
			}
			if skipKeys[m.key] || m.key == "custom_id" || m.key == "model" {
				continue
			}
			gatherStrings(b, m.val, out, depth+1)
		}
	}
}
