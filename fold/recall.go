package fold

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// recallArgs are branch_recall's arguments.
type recallArgs struct {
	Handle    string
	BranchID  string
	Offset    *int
	MaxTokens *int
}

// recallPage is one page of a cut remainder or an archived call's result.
type recallPage struct {
	Handle     string `json:"handle"`
	Offset     int    `json:"offset"`
	NextOffset int    `json:"next_offset"`
	Done       bool   `json:"done"`
	TotalBytes int    `json:"total_bytes"`
	Tokens     int    `json:"tokens"`
	Text       string `json:"text"`
	// TextBase64 replaces Text when the page is not valid UTF-8, which
	// JSON text could not carry byte for byte.
	TextBase64 string `json:"text_base64,omitempty"`
}

// recallCalls is one page of a branch's archived calls.
type recallCalls struct {
	BranchID   string         `json:"branch_id"`
	Offset     int            `json:"offset"`
	NextOffset int            `json:"next_offset"`
	Done       bool           `json:"done"`
	Calls      []recalledCall `json:"calls"`
}

// recalledCall is one archived call as branch_recall shows it.
type recalledCall struct {
	Seq         int    `json:"seq"`
	Time        string `json:"time"`
	Upstream    string `json:"upstream"`
	Method      string `json:"method"`
	Name        string `json:"name"`
	Args        string `json:"args,omitempty"`
	Tokens      int    `json:"tokens"` // what the branch was charged for it
	CutHandle   string `json:"cut_handle,omitempty"`
	CallHandle  string `json:"call_handle"`
	Result      string `json:"result"`
	ResultBytes int    `json:"result_bytes"`
	// Truncated is set when Result is only the start of the result; read
	// the whole of it with branch_recall and CallHandle.
	Truncated bool `json:"truncated,omitempty"`
}

// maxBytesPerToken bounds the bytes a page is searched over: no token of
// the supported encodings is longer, so a page never stops short because of
// it in practice.
const maxBytesPerToken = 64

// parseHandle splits a recall handle: "<branch>~<hex>" names a cut
// remainder, "<branch>#<seq>" an archived call.
func parseHandle(h string) (branch string, seq int, call bool, ok bool) {
	if i := strings.LastIndexByte(h, '#'); i > 0 {
		if n, err := strconv.Atoi(h[i+1:]); err == nil && n > 0 && h[i+1] != '+' {
			return h[:i], n, true, true
		}
	}
	if i := strings.LastIndexByte(h, '~'); i > 0 && i < len(h)-1 {
		for _, r := range h[i+1:] {
			if !strings.ContainsRune("0123456789abcdef", r) {
				return "", 0, false, false
			}
		}
		return h[:i], 0, false, true
	}
	return "", 0, false, false
}

// recall is branch_recall.
func (m *Manager) recall(ctx context.Context, sess string, a recallArgs) (any, error) {
	limit := m.set.RecallPageTokens
	if a.MaxTokens != nil {
		limit = min(*a.MaxTokens, limit)
	}
	offset := 0
	if a.Offset != nil {
		offset = *a.Offset
	}
	if a.BranchID != "" {
		_, n, err := m.branchField(sess, "branch_id", a.BranchID)
		if err != nil {
			return nil, err
		}
		return m.recallCalls(ctx, n.id, offset, limit)
	}

	if isFoldHandle(a.Handle) {
		// A fold of the model wire: its handle is the capability (see
		// autofold.go).
		return m.recallFold(ctx, a.Handle, offset, limit)
	}
	unknown := fmt.Errorf("%w: handle %q is unknown in this session; use the handle of a cut notice, or a call_handle from branch_status detailed", ErrCutNotFound, a.Handle)
	branch, seq, isCall, ok := parseHandle(a.Handle)
	if !ok {
		return nil, unknown
	}
	if _, _, err := m.branchOf(sess, branch); err != nil {
		return nil, unknown
	}
	var data []byte
	if isCall {
		calls, err := m.store.Calls(ctx, branch, seq, 1)
		if err != nil {
			return nil, fmt.Errorf("fold: read the archive of %s: %w", branch, err)
		}
		if len(calls) == 0 || calls[0].Seq != seq {
			return nil, unknown
		}
		data = []byte(calls[0].Result)
	} else {
		var err error
		if data, err = m.store.GetCut(ctx, a.Handle); err != nil {
			if refusal(err) != nil {
				return nil, unknown
			}
			return nil, fmt.Errorf("fold: read cut %s: %w", a.Handle, err)
		}
	}
	return m.recallPage(a.Handle, data, offset, limit)
}

// recallPage is the page of data from offset within limit tokens.
func (m *Manager) recallPage(handle string, data []byte, offset, limit int) (*recallPage, error) {
	if offset < 0 {
		return nil, fmt.Errorf("%w: offset %d is negative", ErrInvalidArgument, offset)
	}
	if offset > len(data) {
		return nil, fmt.Errorf("%w: offset %d is past the end of the text (%d bytes)", ErrInvalidArgument, offset, len(data))
	}
	end := offset + m.pageEnd(data[offset:], limit)
	page := data[offset:end]
	p := &recallPage{
		Handle: handle, Offset: offset, NextOffset: end, Done: end == len(data),
		TotalBytes: len(data), Tokens: m.count.CountText(string(page)),
	}
	if utf8.Valid(page) {
		p.Text = string(page)
	} else {
		p.TextBase64 = base64.StdEncoding.EncodeToString(page)
	}
	return p, nil
}

// recallCalls pages through the archived calls of branch from sequence
// number from, within limit tokens. A result that does not fit is cut, and
// then only when it is alone on the page; its call handle reads the rest.
func (m *Manager) recallCalls(ctx context.Context, branch string, from, limit int) (*recallCalls, error) {
	ans := &recallCalls{BranchID: branch, Offset: from, NextOffset: from, Calls: []recalledCall{}}
	left := limit
	const overhead = 32 // tokens of the fields around a result
	for {
		batch, err := m.store.Calls(ctx, branch, ans.NextOffset, 16)
		if err != nil {
			return nil, fmt.Errorf("fold: read the archive of %s: %w", branch, err)
		}
		if len(batch) == 0 {
			ans.Done = true
			return ans, nil
		}
		for _, c := range batch {
			rc := recalledCall{
				Seq: c.Seq, Time: c.Time.UTC().Format(time.RFC3339), Upstream: c.Upstream,
				Method: c.Method, Name: c.Name, Args: c.Args, Tokens: c.Tokens,
				CutHandle: c.Handle, CallHandle: callHandle(branch, c.Seq), ResultBytes: len(c.Result),
			}
			cost := overhead + m.count.CountText(c.Args)
			if len(c.Result) <= left*maxBytesPerToken {
				cost += m.count.CountText(c.Result)
			} else {
				cost = left + 1 // certainly too big
			}
			if cost <= left {
				rc.Result = c.Result
				left -= cost
				ans.Calls = append(ans.Calls, rc)
				ans.NextOffset = c.Seq + 1
				continue
			}
			if len(ans.Calls) == 0 {
				room := max(left-overhead-m.count.CountText(c.Args), 1)
				rc.Result = c.Result[:m.pageEnd([]byte(c.Result), room)]
				rc.Truncated = true
				ans.Calls = append(ans.Calls, rc)
				ans.NextOffset = c.Seq + 1
			}
			more, err := m.store.Calls(ctx, branch, ans.NextOffset, 1)
			if err != nil {
				return nil, fmt.Errorf("fold: read the archive of %s: %w", branch, err)
			}
			ans.Done = len(more) == 0
			return ans, nil
		}
		ans.NextOffset = batch[len(batch)-1].Seq + 1
	}
}

// pageEnd returns how many bytes of data make the next page: at most limit
// tokens, ending at a clean boundary (after a newline, else after a space,
// else between runes) unless the page reaches the end of data. A page
// always makes progress: when not even one rune fits, it holds one rune.
func (m *Manager) pageEnd(data []byte, limit int) int {
	if len(data) == 0 {
		return 0
	}
	fits := func(n int) bool { return m.count.CountText(string(data[:n])) <= limit }
	hi := len(data)
	if hi > limit*maxBytesPerToken {
		hi = alignDown(data, limit*maxBytesPerToken)
	}
	if hi == len(data) && fits(hi) {
		return hi
	}
	// Largest rune-aligned n in [0, hi] whose prefix fits.
	lo := 0
	for lo < hi {
		mid := alignDown(data, lo+(hi-lo+1)/2)
		if mid <= lo {
			mid = lo + runeLen(data[lo:])
			if mid > hi {
				break
			}
		}
		if fits(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	n := lo
	if n == 0 {
		return runeLen(data)
	}
	if n == len(data) {
		return n
	}
	// Back off to a clean boundary, unless that loses more than half the page.
	if i := bytes.LastIndexByte(data[:n], '\n'); i+1 > n/2 {
		return i + 1
	}
	if i := bytes.LastIndexAny(data[:n], " \t"); i+1 > n/2 {
		return i + 1
	}
	return n
}

// alignDown returns the largest rune start at or before n (n itself when
// n is len(data)).
func alignDown(data []byte, n int) int {
	if n >= len(data) {
		return len(data)
	}
	for n > 0 && !utf8.RuneStart(data[n]) {
		n--
	}
	return n
}

// runeLen is the byte length of the first rune of data (1 for invalid UTF-8).
func runeLen(data []byte) int {
	_, size := utf8.DecodeRune(data)
	return max(size, 1)
}
