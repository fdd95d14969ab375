package fold

import (
	"context"
	"encoding/json"

	"github.com/foldproxy/foldproxy/policy"
)

// Budget accounting between a parent and its children. A child's budget is
// not reserved out of its parent's: it must only be no larger than what the
// parent has left when the child is created. While the child works, its
// tool results are charged to the child alone; when it returns, the parent
// is charged the tokens of what it receives, the return message and return
// value as the parent sees them. A forced return charges the parent nothing
// at once: its automatic summary is appended to the parent's next result,
// whose tokens the parent pays.

// memoryUnavailable is the answer's memory field when memories were asked
// for and the Manager has no Memories.
const memoryUnavailable = "unavailable"

// rawValue turns a stored return value (compact JSON text) into the JSON
// value it was.
func rawValue(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	return json.RawMessage(s)
}

// chargeAnswer fixes an answer's figure of what its receiver has left
// after paying for the answer itself: it renders the answer with set
// called on the remaining budget (nil when unlimited) until the figure and
// the tokens agree, and returns the tokens and the last rendering, which
// is the answer as it stands (the caller sends it unless it changes the
// answer again). rem is what the receiver had before, -1 when unlimited.
func (m *Manager) chargeAnswer(v any, rem int, set func(*int)) (int, string, error) {
	if rem < 0 {
		// Unlimited (the main thread by default): the answer holds no
		// figure that depends on its own tokens, so that one count is
		// exact.
		text, err := answerText(v)
		if err != nil {
			return 0, "", err
		}
		return m.count.CountText(text), text, nil
	}
	tokens := 0
	var text string
	for range 4 {
		if rem >= 0 {
			left := max(rem-tokens, 0)
			set(&left)
		}
		var err error
		if text, err = answerText(v); err != nil {
			return 0, "", err
		}
		n := m.count.CountText(text)
		if n == tokens {
			break
		}
		tokens = n
	}
	return tokens, text, nil
}

func remaining(b *Branch) int {
	if b.Budget <= 0 {
		return -1
	}
	return max(b.Budget-b.Used, 0)
}

// addUsage adds tokens to a branch's usage by tool and upstream.
func addUsage(b *Branch, upstream, name string, tokens int) {
	if b.ByTool == nil {
		b.ByTool = make(map[string]int)
	}
	if b.ByUpstream == nil {
		b.ByUpstream = make(map[string]int)
	}
	b.ByTool[upstream+"/"+name] += tokens
	b.ByUpstream[upstream] += tokens
}

// levelRank orders warning level names; -1 for an unknown name.
func levelRank(name string) int {
	if l, ok := policy.ParseLevel(name); ok {
		return int(l)
	}
	return -1
}

// levelEvent emits a warning event when a branch's level rose.
func (m *Manager) levelEvent(ctx context.Context, before, after *Branch) {
	if levelRank(after.Level) > levelRank(before.Level) {
		m.emit(ctx, branchEvent("warning", after))
	}
}
