package secrets

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// Secrets split across the items of one result. A client shows the model
// a result's text items one after the other, so a secret cut in two (a
// server that pages its output into blocks of a fixed size, or one that
// means to get it past a scanner) reads whole; each item scanned alone
// shows neither part. ScrubAcross scans the joins: a window of
// s.overlap bytes (a private key fits in it) on each side of every
// boundary between two items, and redacts in each item the part of every
// secret that runs across one.

// ScrubAcross returns texts (items read one after the other) with every
// secret that runs across the boundary between two of them replaced, in
// each item it touches, by [REDACTED:<rule-id>], and the number of such
// secrets by rule. Secrets inside one item are not its business: each item
// is scanned on its own first. Errors are as for ScrubText; texts is never
// changed in place.
func (s *Scrubber) ScrubAcross(ctx context.Context, texts []string) ([]string, map[string]int, error) {
	return s.scrubAcross(ctx, time.Now().Add(s.timeout), texts)
}

func (s *Scrubber) scrubAcross(ctx context.Context, deadline time.Time, texts []string) ([]string, map[string]int, error) {
	if s.disabled || len(texts) < 2 {
		return texts, nil, nil
	}
	// Offsets of the items in their join, and the windows around the
	// boundaries, merged where they overlap.
	starts := make([]int, len(texts)+1)
	for i, t := range texts {
		starts[i+1] = starts[i] + len(t)
	}
	total := starts[len(texts)]
	var wins [][2]int
	for _, b := range starts[1:len(texts)] {
		lo, hi := max(0, b-s.overlap), min(total, b+s.overlap)
		if n := len(wins); n > 0 && lo <= wins[n-1][1] {
			wins[n-1][1] = max(wins[n-1][1], hi)
			continue
		}
		wins = append(wins, [2]int{lo, hi})
	}
	// slice returns the join's bytes [lo, hi).
	slice := func(lo, hi int) string {
		var b strings.Builder
		b.Grow(hi - lo)
		for i, t := range texts {
			a, z := max(lo, starts[i]), min(hi, starts[i+1])
			if a < z {
				b.WriteString(t[a-starts[i] : z-starts[i]])
			}
		}
		return b.String()
	}
	var across []found // in join offsets
	for _, w := range wins {
		text := slice(w[0], w[1])
		spans, err := runScan(s, ctx, deadline, len(text), func(ctx context.Context) ([]found, error) {
			spans, v, err := s.scan(ctx, text, false)
			v.release()
			return spans, err
		})
		if err != nil {
			return nil, nil, err
		}
		for _, f := range spans {
			f.start += w[0]
			f.end += w[0]
			// A secret that ends at a boundary or starts at one is
			// inside one item: not this scan's.
			i := idxOf(starts, f.start)
			if f.end > starts[i+1] {
				across = append(across, f)
			}
		}
	}
	if len(across) == 0 {
		return texts, nil, nil
	}
	across = mergeFound(across)
	out := slices.Clone(texts)
	counts := map[string]int{}
	for i, t := range texts {
		var parts []found // this item's parts, in its own offsets
		for _, f := range across {
			a, z := max(f.start, starts[i]), min(f.end, starts[i+1])
			if a < z {
				parts = append(parts, found{start: a - starts[i], end: z - starts[i], rule: f.rule})
			}
		}
		if len(parts) > 0 {
			out[i], _ = redact(t, parts)
		}
	}
	for _, f := range across {
		counts[f.rule]++
	}
	return out, counts, nil
}

// idxOf returns the item whose bytes hold join offset off.
func idxOf(starts []int, off int) int {
	i, found := slices.BinarySearch(starts, off)
	if !found {
		i--
	}
	return min(i, len(starts)-2)
}

// resultTexts lists the string literals (spans, with their quotes) of the
// text items of a result, in the order a client shows them: the "text" of
// the items of "content" (a tool result) and "contents" (a resource
// read), and of the "content" of each of "messages" (a prompt).
func resultTexts(raw []byte) []jsonscan.Span {
	members, _, err := jsonscan.ObjectAt(raw, jsonscan.SkipSpace(raw, 0))
	if err != nil {
		return nil
	}
	var out []jsonscan.Span
	textOf := func(at int) {
		ms, _, err := jsonscan.ObjectAt(raw, at)
		if err != nil {
			return
		}
		for _, m := range ms {
			if m.Key == "text" && raw[m.Value.Start] == '"' {
				out = append(out, m.Value)
				return
			}
		}
	}
	for _, m := range members {
		if m.Key != "content" && m.Key != "contents" && m.Key != "messages" || raw[m.Value.Start] != '[' {
			continue
		}
		items, _, err := jsonscan.ArrayAt(raw, m.Value.Start)
		if err != nil {
			continue
		}
		for _, it := range items {
			if raw[it.Start] != '{' {
				continue
			}
			if m.Key != "messages" {
				textOf(it.Start)
				continue
			}
			if c, ok := jsonscan.Field(it.Of(raw), "content"); ok && len(c) > 0 && c[0] == '{' {
				// c is a sub-slice of raw: its offset is where it starts.
				textOf(it.Start + bytes.Index(it.Of(raw), c))
			}
		}
	}
	return out
}

// twoTextKeys reports whether raw, valid JSON, has two members named
// "text" or more: `"text"` followed by a colon is a key, as an unescaped
// quote cannot occur inside a string. A search instead of a walk of the
// result, which skipping its long strings would make several times
// slower.
func twoTextKeys(raw []byte) bool {
	n := 0
	for i := 0; ; {
		j := bytes.Index(raw[i:], []byte(`"text"`))
		if j < 0 {
			return false
		}
		i += j + len(`"text"`)
		if k := jsonscan.SkipSpace(raw, i); k < len(raw) && raw[k] == ':' {
			if n++; n == 2 {
				return true
			}
		}
	}
}

// ScrubItemsUntil redacts the secrets that run across the text items of a
// result (ScrubAcross), by deadline; out is raw itself when there are none.
func (s *Scrubber) ScrubItemsUntil(ctx context.Context, deadline time.Time, raw []byte) ([]byte, map[string]int, error) {
	if !twoTextKeys(raw) {
		return raw, nil, nil // one item or none: most results
	}
	spans := resultTexts(raw)
	if len(spans) < 2 {
		return raw, nil, nil
	}
	texts := make([]string, len(spans))
	for i, sp := range spans {
		t, err := jsonscan.Unquote(sp.Of(raw))
		if err != nil {
			return raw, nil, nil // not a text the client reads either
		}
		texts[i] = t
	}
	clean, counts, err := s.scrubAcross(ctx, deadline, texts)
	if err != nil || len(counts) == 0 {
		return raw, nil, err
	}
	var b bytes.Buffer
	b.Grow(len(raw))
	last := 0
	for i, sp := range spans {
		if clean[i] == texts[i] {
			continue
		}
		b.Write(raw[last:sp.Start])
		b.Write(jsonscan.Quote(clean[i]))
		last = sp.End
	}
	b.Write(raw[last:])
	return b.Bytes(), counts, nil
}

// Compressed text: gzip, base64-encoded (a Helm release in a Kubernetes
// secret, a compressed configuration or cookie). gitleaks decodes base64,
// but compressed bytes hide every secret from its rules. A run of base64
// that starts with the gzip header's encoding ("H4sI") is decoded,
// decompressed (at most gzipMaxOut bytes: a bomb costs no more), and the
// text scanned; a secret there redacts the whole run. Only texts holding
// "H4sI" pay more than a search for it (about 10 GB/s).

const (
	gzipMagic64 = "H4sI"
	// gzipMinRun is the shortest run decoded: a gzip stream of a secret is
	// longer than this.
	gzipMinRun = 40
	// gzipMaxOut bounds what one run is decompressed to.
	gzipMaxOut = 1 << 20
)

type gzipDepthKey struct{}

// gzipFindings returns a finding covering each run of gzip+base64 in text
// whose decompressed text holds a secret.
func (s *Scrubber) gzipFindings(ctx context.Context, text string) ([]found, error) {
	if ctx.Value(gzipDepthKey{}) != nil {
		return nil, nil // compressed inside compressed: not followed
	}
	var out []found
	for i := 0; i < len(text); {
		j := strings.Index(text[i:], gzipMagic64)
		if j < 0 {
			break
		}
		start := i + j
		end := start
		for end < len(text) && isB64Run(text[end]) {
			end++
		}
		i = max(end, start+1)
		if end-start < gzipMinRun {
			continue
		}
		plain := gunzipB64(text[start:end])
		if len(plain) == 0 {
			continue
		}
		spans, v, err := s.scan(context.WithValue(ctx, gzipDepthKey{}, 1), plain, false)
		v.release()
		if err != nil {
			return nil, err
		}
		if len(spans) > 0 {
			out = append(out, found{start: start, end: end, rule: spans[0].rule})
		}
	}
	return out, nil
}

// isB64Run reports whether c belongs to a run of base64 (either alphabet,
// padding included).
func isB64Run(c byte) bool {
	return isWordByte(c) || c == '+' || c == '/' || c == '-' || c == '='
}

// gunzipB64 decodes a run of base64 and decompresses it as gzip, up to
// gzipMaxOut bytes; what a broken or truncated stream gave before it
// broke is returned, "" when nothing.
func gunzipB64(run string) string {
	run = strings.TrimRight(run, "=")
	if strings.ContainsAny(run, "-_") {
		run = strings.NewReplacer("-", "+", "_", "/").Replace(run)
	}
	raw, err := base64.RawStdEncoding.DecodeString(run)
	if err != nil {
		var ce base64.CorruptInputError
		if !errors.As(err, &ce) || int(ce) < 16 {
			return ""
		}
		// A run that goes on past the stream's end: decode its start.
		if raw, err = base64.RawStdEncoding.DecodeString(run[:int(ce)&^3]); err != nil {
			return ""
		}
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(zr, gzipMaxOut))
	return string(b)
}
