package store

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// The archived call's record is encoded by hand (issue 13: it is written
// on every call's reply path): the bytes are those encoding/json's Marshal
// gives for a storedCall (FuzzEncodeStoredCall checks it), and
// decodeCall reads them with encoding/json.

// marshalStoredCall returns the JSON of sc, as json.Marshal(sc) would.
func marshalStoredCall(sc *storedCall) ([]byte, error) {
	if !rfc3339able(sc.Time) {
		return json.Marshal(sc) // its error, or a form this does not write
	}
	n := 240 + len(sc.Upstream) + len(sc.Method) + len(sc.Name) + len(sc.Args) + len(sc.Result) + len(sc.Handle)
	b := make([]byte, 0, n+n/16)
	b = append(b, `{"seq":`...)
	b = strconv.AppendInt(b, int64(sc.Seq), 10)
	b = append(b, `,"time":"`...)
	b = sc.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","upstream":`...)
	b = jsonscan.AppendQuoteHTML(b, sc.Upstream)
	b = append(b, `,"method":`...)
	b = jsonscan.AppendQuoteHTML(b, sc.Method)
	b = append(b, `,"name":`...)
	b = jsonscan.AppendQuoteHTML(b, sc.Name)
	if sc.Args != "" {
		b = append(b, `,"args":`...)
		b = jsonscan.AppendQuoteHTML(b, sc.Args)
	}
	b = append(b, `,"result":`...)
	b = jsonscan.AppendQuoteHTML(b, sc.Result)
	b = append(b, `,"tokens":`...)
	b = strconv.AppendInt(b, int64(sc.Tokens), 10)
	if sc.Handle != "" {
		b = append(b, `,"handle":`...)
		b = jsonscan.AppendQuoteHTML(b, sc.Handle)
	}
	if r := sc.Ref; r != nil {
		b = append(b, `,"ref":{"seg":`...)
		b = strconv.AppendUint(b, uint64(r.Seg), 10)
		b = append(b, `,"off":`...)
		b = strconv.AppendInt(b, r.Off, 10)
		b = append(b, `,"len":`...)
		b = strconv.AppendInt(b, r.Len, 10)
		b = append(b, `,"crc":`...)
		b = strconv.AppendUint(b, uint64(r.CRC), 10)
		b = append(b, '}')
	}
	return append(b, '}'), nil
}

// rfc3339able reports whether time.Time's MarshalJSON writes t, in its
// RFC 3339 form with nanoseconds (it refuses years outside [0,9999] and
// zone offsets of a day or more).
func rfc3339able(t time.Time) bool {
	if y := t.Year(); y < 0 || y > 9999 {
		return false
	}
	_, off := t.Zone()
	return off > -24*3600 && off < 24*3600
}

// marshalBranch returns the JSON of b, as json.Marshal(b) would: a branch
// record is written with every charge, and a parent's with every
// branch_create and branch_return (FuzzEncodeBranch compares the two). Its
// children are not in it (Branch.Ord), so that its size does not grow
// with them.
func marshalBranch(b *Branch) ([]byte, error) {
	if !rfc3339able(b.Created) || !b.Deadline.IsZero() && !rfc3339able(b.Deadline) || !b.Closed.IsZero() && !rfc3339able(b.Closed) {
		return json.Marshal(b) // its error, or a form this does not write
	}
	n := 400 + len(b.ID) + len(b.Session) + len(b.Principal) + len(b.Parent) + len(b.Description) + len(b.Prompt) + len(b.Reason) +
		len(b.Message) + len(b.ReturnValue) + len(b.Summary)
	for _, l := range [...][]string{b.DependsOn, b.Cuts, b.Injected} {
		for _, s := range l {
			n += len(s) + 3
		}
	}
	n += 24 * (len(b.ByTool) + len(b.ByUpstream))
	e := jsonWriter{b: make([]byte, 0, n+n/16)}
	e.str(`{"id":`, b.ID, false)
	e.str(`,"session":`, b.Session, false)
	e.str(`,"parent":`, b.Parent, true)
	e.num(`,"depth":`, b.Depth)
	e.str(`,"description":`, b.Description, true)
	e.str(`,"prompt":`, b.Prompt, true)
	e.str(`,"status":`, string(b.Status), false)
	e.str(`,"reason":`, b.Reason, true)
	e.num(`,"budget":`, b.Budget)
	e.num(`,"used":`, b.Used)
	e.str(`,"level":`, b.Level, false)
	e.tm(`,"created":`, b.Created)
	e.tm(`,"deadline":`, b.Deadline)
	e.tm(`,"closed":`, b.Closed)
	if b.Ord != 0 {
		e.num(`,"ord":`, b.Ord)
	}
	e.list(`,"dependsOn":`, b.DependsOn)
	e.num(`,"calls":`, b.Calls)
	e.counts(`,"byTool":`, b.ByTool)
	e.counts(`,"byUpstream":`, b.ByUpstream)
	e.list(`,"cuts":`, b.Cuts)
	if b.CutCount != 0 {
		e.num(`,"cutCount":`, b.CutCount)
	}
	e.str(`,"message":`, b.Message, true)
	e.str(`,"returnValue":`, b.ReturnValue, true)
	e.str(`,"summary":`, b.Summary, true)
	e.list(`,"injected":`, b.Injected)
	if b.SummaryDelivered {
		e.b = append(e.b, `,"summaryDelivered":true`...)
	}
	if b.ModelContext != nil {
		mc, err := json.Marshal(b.ModelContext)
		if err != nil {
			return json.Marshal(b) // its error
		}
		e.b = append(e.b, `,"modelContext":`...)
		e.b = append(e.b, mc...)
	}
	e.str(`,"principal":`, b.Principal, true)
	if b.Acknowledged {
		e.b = append(e.b, `,"acknowledged":true`...)
	}
	if b.Reasoning != 0 {
		e.num(`,"reasoning":`, b.Reasoning)
	}
	return append(e.b, '}'), nil
}

// sep is what precedes element i of a JSON array or object opened by open.
func sep(i int, open byte) byte {
	if i == 0 {
		return open
	}
	return ','
}

// jsonWriter appends the members of a branch record's JSON object.
type jsonWriter struct{ b []byte }

func (e *jsonWriter) str(key, v string, omitEmpty bool) {
	if omitEmpty && v == "" {
		return
	}
	e.b = append(e.b, key...)
	e.b = jsonscan.AppendQuoteHTML(e.b, v)
}

func (e *jsonWriter) num(key string, v int) {
	e.b = append(e.b, key...)
	e.b = strconv.AppendInt(e.b, int64(v), 10)
}

// tm writes a time, omitted when zero but for "created".
func (e *jsonWriter) tm(key string, t time.Time) {
	if t.IsZero() && key != `,"created":` {
		return
	}
	e.b = append(e.b, key...)
	e.b = append(e.b, '"')
	e.b = t.AppendFormat(e.b, time.RFC3339Nano)
	e.b = append(e.b, '"')
}

func (e *jsonWriter) list(key string, l []string) {
	if len(l) == 0 {
		return
	}
	e.b = append(e.b, key...)
	for i, s := range l {
		e.b = append(e.b, sep(i, '['))
		e.b = jsonscan.AppendQuoteHTML(e.b, s)
	}
	e.b = append(e.b, ']')
}

// counts writes a map in the order of its keys, as encoding/json does.
func (e *jsonWriter) counts(key string, m map[string]int) {
	if len(m) == 0 {
		return
	}
	var buf [8]string
	keys := buf[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	e.b = append(e.b, key...)
	for i, k := range keys {
		e.b = append(e.b, sep(i, '{'))
		e.b = jsonscan.AppendQuoteHTML(e.b, k)
		e.b = append(e.b, ':')
		e.b = strconv.AppendInt(e.b, int64(m[k]), 10)
	}
	e.b = append(e.b, '}')
}
