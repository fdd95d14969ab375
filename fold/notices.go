package fold

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/foldproxy/foldproxy/policy"
)

// The one-line notices an agent receives with a result, on the MCP wire
// (the budget interceptor) and on the model wire (ModelState) alike.

// CutNotice tells the agent that a result was cut and where the rest is.
func CutNotice(branch, handle string, root bool, kept, total int, estimated bool) string {
	of := Commas(total)
	if estimated {
		of = "about " + of
	}
	if root {
		return fmt.Sprintf("[foldproxy] result cut at %s of %s tokens to fit the main thread's budget. The rest is kept: call branch_recall with handle %q to read it.",
			Commas(kept), of, handle)
	}
	return fmt.Sprintf("[foldproxy] result cut at %s of %s tokens to fit branch %s's budget. The rest is kept: call branch_recall with handle %q to read it. This branch has been force-returned; continue in the parent.",
		Commas(kept), of, branch, handle)
}

// ShortCutNotice is the shortest cut notice, for a branch with almost no
// budget left.
func ShortCutNotice(handle string) string {
	return fmt.Sprintf("[foldproxy] cut; rest: branch_recall %q", handle)
}

// WarningText is the one-line notice of a warning level.
func WarningText(branch string, root bool, used, total int, lvl policy.Level) string {
	pct := 0
	if total > 0 {
		pct = int(int64(used) * 100 / int64(total))
	}
	who := "branch " + branch
	var advice string
	switch {
	case root:
		who = "main thread"
		advice = "Keep tool output small: do large reads inside a branch (branch_create)."
	case lvl >= policy.Critical:
		advice = "Call branch_return now: the next large result will be cut and the branch force-returned."
	case lvl >= policy.Warning:
		advice = "Wrap up and call branch_return with what you have."
	default:
		advice = "Finish the sub-task and call branch_return soon."
	}
	return fmt.Sprintf("[foldproxy] %s budget: %s/%s tokens used (%d%%, %s). %s", who, Commas(used), Commas(total), pct, lvl, advice)
}

// Commas formats n with thousands separators.
func Commas(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}
