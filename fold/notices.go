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
// A cut always means the receiver is at its limit: a branch is
// force-returned; the main thread (fold.rootBudget) takes no more results,
// so the notice says what to do instead.
func CutNotice(branch, handle string, root bool, kept, total int, estimated bool) string {
	of := Commas(total)
	if estimated {
		of = "about " + of
	}
	if root {
		return fmt.Sprintf("[foldproxy] result cut at %s of %s tokens: the main thread has reached its token budget (fold.rootBudget) and takes no more tool results. %s",
			Commas(kept), of, rootAdvice(handle, "The rest"))
	}
	return fmt.Sprintf("[foldproxy] result cut at %s of %s tokens to fit branch %s's budget. The rest is kept: call branch_recall with handle %q to read it. This branch has been force-returned; continue in the parent.",
		Commas(kept), of, branch, handle)
}

// ShortCutNotice is the shortest cut notice, for a branch with almost no
// budget left.
func ShortCutNotice(handle string) string {
	return fmt.Sprintf("[foldproxy] cut; rest: branch_recall %q", handle)
}

// NoticeReserve is what a limited branch keeps back so that the result that
// ends it still carries its cut notice (see Budget.Reserve): the tokens of
// the cut notice with the largest figures a result can show. Handles of
// other calls may tokenize a few tokens apart; within that, the shorter
// notice (ShortCutNotice) fits.
func NoticeReserve(count func(string) int, branch, handle string, root bool, budget int) int {
	if budget <= 0 {
		return 0
	}
	return count(CutNotice(branch, handle, root, budget, 999_999_999, true))
}

// SpentNotice is the error a limited branch's result gets instead of
// delivery when not even the shortest cut notice fits what the branch has
// left (a branch created with a budget below its notice reserve, or one
// that paid for answers down to its last tokens): nothing of the result
// arrives, so the error says why, where the result is kept and what to do.
// A branch is force-returned by it; the main thread is told to work in
// branches.
func SpentNotice(branch, handle string, root bool, left, budget int) string {
	if root {
		return fmt.Sprintf("foldproxy did not deliver this result: the main thread has reached its token budget (fold.rootBudget, %s tokens) and takes no more tool results. %s",
			Commas(budget), rootAdvice(handle, "The whole result"))
	}
	return fmt.Sprintf("foldproxy did not deliver this result: branch %s has %s tokens left of its budget of %s, fewer than a cut notice needs, so it has been force-returned. The whole result is kept: call branch_recall with handle %q to read it. Continue in the parent.",
		branch, Commas(left), Commas(budget), handle)
}

// rootAdvice says, to a main thread at its limit, where a result is kept
// and what to do. Its branches keep their own budgets, and the main thread
// keeps enough to hear their returns; a new branch could be given no more
// than the main thread has left.
func rootAdvice(handle, what string) string {
	return fmt.Sprintf("%s is kept: call branch_recall with handle %q from a branch to read it. Branches already open still work and can return. Finish with what you have; to go on, the user can raise fold.rootBudget or start a new session.", what, handle)
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
