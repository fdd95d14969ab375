package memory

import (
	"regexp"
	"strings"
)

// Pattern is one prompt-injection rule: text that tries to steer the agent
// that will be shown the memory rather than inform it. Rules are data, as
// gitleaks' are: an id, keywords that must appear (a cheap prefilter, any
// one of them, lowercase) and a regular expression.
type Pattern struct {
	ID       string
	Keywords []string
	Re       *regexp.Regexp
}

// Patterns are the injection rules. Hidden control characters and
// invisible Unicode are checked separately (see Flags).
var Patterns = []Pattern{
	{
		ID:       "ignore-instructions",
		Keywords: []string{"ignore", "disregard", "forget", "override", "bypass"},
		Re:       regexp.MustCompile(`(?is)\b(ignore|disregard|forget|override|bypass)\b.{0,40}\b(previous|prior|above|earlier|preceding|all|any|your|the|system|safety)\b.{0,40}\b(instructions?|prompts?|rules|directions|guidelines|guardrails|messages?)\b`),
	},
	{
		ID:       "role-override",
		Keywords: []string{"you are now", "from now on", "new instructions", "system prompt", "developer mode"},
		Re:       regexp.MustCompile(`(?i)\b(you are now (a|an|in|the)\b|from now on,? you\b|new instructions?\s*:|(reveal|print|show|repeat|leak)\s+(your|the)\s+system prompt|developer mode)`),
	},
	{
		ID:       "call-tools",
		Keywords: []string{"call", "invoke", "execute", "run", "<tool", "<function", "tool_use"},
		Re:       regexp.MustCompile(`(?i)(<\s*(tool_call|function_calls?|invoke|antml)\b|"type"\s*:\s*"tool_use"|\b(you must|you should|always|immediately|silently|secretly|automatically)\s+(call|invoke|execute|run|use)\s+(the\s+)?[\w./-]*\s*(tool|function|command)\b|\b(call|invoke|execute|run)\s+(the\s+)?[\w./-]+\s+(tool|function)\s+(without|before)\s+(asking|telling|confirm\w*|informing|the user))`),
	},
	{
		ID:       "exfiltrate",
		Keywords: []string{"send", "upload", "post", "exfiltrat", "leak", "forward", "transmit", "curl", "wget", "email"},
		Re:       regexp.MustCompile(`(?is)(\bexfiltrat\w*|\b(send|upload|post|leak|forward|transmit|email|copy)\b.{0,60}\b(secrets?|credentials?|tokens?|api[ _-]?keys?|passwords?|env(ironment)?\s+var\w*|\.env\b|ssh keys?|private keys?|cookies?)\b.{0,60}\b(to|at|into)\s+(https?://|[\w.+-]+@[\w-]+\.|[\w-]+\.[a-z]{2,}\b|an? (external|remote|attacker|third))|\b(curl|wget)\b[^\n]{0,200}\$\{?[A-Z_]*(KEY|TOKEN|SECRET|PASS\w*)\b)`),
	},
}

// Flags returns the ids of the injection patterns text matches, in the
// order of Patterns, then "control-chars" and "invisible-unicode". An
// empty result means the text looks benign.
func Flags(text string) []string {
	var out []string
	lower := strings.ToLower(text)
	for _, p := range Patterns {
		hit := false
		for _, k := range p.Keywords {
			if strings.Contains(lower, k) {
				hit = true
				break
			}
		}
		if hit && p.Re.MatchString(text) {
			out = append(out, p.ID)
		}
	}
	ctrl, invisible, run := false, false, 0
	for _, r := range text {
		switch {
		case r == '\t' || r == '\n' || r == '\r':
			run = 0
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			ctrl = true
			run = 0
		case isHidden(r):
			invisible = true
		case isZeroWidth(r):
			// One zero-width space before a link is how Trac and other
			// trackers mark external links; hidden messages need runs.
			if run++; run >= 2 {
				invisible = true
			}
		default:
			run = 0
		}
	}
	if ctrl {
		out = append(out, "control-chars")
	}
	if invisible {
		out = append(out, "invisible-unicode")
	}
	return out
}

// isHidden reports characters that have no business in a lesson: Unicode
// tag characters (which can smuggle ASCII invisibly) and the bidirectional
// embeddings, overrides and isolates (which reorder what a reader sees).
func isHidden(r rune) bool {
	return (r >= 0xe0000 && r <= 0xe007f) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}

// isZeroWidth reports format characters that render as nothing: zero-width
// spaces and joiners, marks, word joiners, the byte order mark, the soft
// hyphen and similar. Two or more in a row are flagged.
func isZeroWidth(r rune) bool {
	switch {
	case r == 0x00ad, r == 0x034f, r == 0x061c, r == 0x180e, r == 0xfeff:
		return true
	case r >= 0x200b && r <= 0x200f:
		return true
	case r >= 0x2060 && r <= 0x2064:
		return true
	}
	return false
}
