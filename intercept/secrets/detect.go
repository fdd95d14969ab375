package secrets

import (
	"context"
	"strings"

	"github.com/zricethezav/gitleaks/v8/detect"
	"github.com/zricethezav/gitleaks/v8/report"
)

// detectWindow runs det over text[w[0]:w[1]] and returns its findings in
// offsets of text, without those whose secret holds one of stops. With
// decodedOnly, findings that were not made in a decoded segment are
// dropped (the rule windows report those).
func detectWindow(ctx context.Context, det *detect.Detector, stops stopWords, text string, w [2]int, decodedOnly bool) ([]found, error) {
	return detectIn(ctx, det, stops, windowText(text, w), w, decodedOnly)
}

// windowText is the text gitleaks is given for text[w[0]:w[1]]: the
// window with a newline at its end. A trailing newline makes gitleaks
// report the end line and column of every match, which the offsets of
// findings are computed from.
func windowText(text string, w [2]int) string {
	win := text[w[0]:w[1]]
	switch {
	case strings.HasSuffix(win, "\n"):
		return win
	case w[1] < len(text) && text[w[1]] == '\n':
		return text[w[0] : w[1]+1] // the same string, not copied
	default:
		return win + "\n"
	}
}

// detectIn is detectWindow given the window's text (windowText).
func detectIn(ctx context.Context, det *detect.Detector, stops stopWords, win string, w [2]int, decodedOnly bool) ([]found, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	fs := det.DetectContext(ctx, detect.Fragment{Raw: win})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(fs) == 0 {
		return nil, nil
	}
	nls := newlines(win, nil)
	limit := w[1] - w[0]
	out := make([]found, 0, len(fs))
	for i := range fs {
		if stops.allowed(&fs[i]) {
			continue
		}
		f, ok := locate(win, nls, &fs[i])
		if !ok || (decodedOnly && f.secret != "") {
			continue
		}
		f.start, f.end = min(f.start, limit), min(f.end, limit)
		if f.start >= f.end {
			continue
		}
		f.start += w[0]
		f.end += w[0]
		out = append(out, f)
	}
	return out, nil
}

// locate turns a gitleaks finding into byte offsets of the fragment it was
// found in. gitleaks reports lines and columns only: line L starts after
// the L-th newline, columns count bytes from that newline (from 1 on the
// first line).
func locate(win string, nls []int, f *report.Finding) (found, bool) {
	ls := func(line int) int {
		switch {
		case line <= 0:
			return 0
		case line-1 < len(nls):
			return nls[line-1]
		default:
			return -1
		}
	}
	s0, e0 := ls(f.StartLine), ls(f.EndLine)
	if s0 < 0 || e0 < 0 {
		return found{}, false
	}
	start, end := s0+f.StartColumn-1, e0+f.EndColumn
	if start < 0 || start > len(win) {
		return found{}, false
	}
	end = min(max(end, start), len(win))
	out := found{rule: f.RuleID}
	decoded := false
	for _, t := range f.Tags {
		if strings.HasPrefix(t, "decoded:") {
			decoded = true
		}
	}
	m := f.Match
	if decoded {
		// Redact the whole encoded segment the match starts in. gitleaks
		// maps a decoded match back to the segment, but a match that runs
		// past the segment's end (a delimiter after the secret) is mapped
		// to a wrong end, sometimes before its start.
		for start > 0 && isEncodedByte(win[start-1]) {
			start--
		}
		e := start
		for e < len(win) && isEncodedByte(win[e]) {
			e++
		}
		out.start, out.end = start, max(end, e)
		return out, out.end > out.start
	}
	if m == "" {
		out.start, out.end = start, end
		return out, end > start
	}
	// gitleaks trims newlines off the match but not off its start offset.
	i := strings.Index(win[start:min(len(win), start+len(m)+16)], m)
	if i < 0 {
		out.start, out.end = start, end
		return out, end > start
	}
	out.start, out.end = start+i, start+i+len(m)
	if s := f.Secret; s != "" && s != m {
		if j := strings.Index(m, s); j >= 0 {
			out.start, out.end = out.start+j, out.start+j+len(s)
		}
	}
	out.secret = win[out.start:out.end]
	return out, true
}
