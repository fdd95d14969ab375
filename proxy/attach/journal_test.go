package attach

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/foldproxy/foldproxy/policy/jsonrpc"
	"github.com/foldproxy/foldproxy/proxy"
)

// newTestJournal lays out a journal in memory, as the relay does in its
// memfd, with initial as its first input, and opens the daemon's side.
func newTestJournal(t *testing.T, max int64, initial []byte) (*journal, []byte) {
	t.Helper()
	size, off, rcap := journalSize(max, len(initial))
	words := make([]uint64, size/8)
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), size)
	journalInit(mem, off, rcap, initial, false)
	j, err := openJournal(mem, max, nil)
	if err != nil {
		t.Fatal(err)
	}
	return j, mem
}

// jEvents is what a reader of s makes of it: its lines, "TOO LARGE" for a
// line longer than max, and with discarding, first the end of a line too
// long already begun.
func jEvents(s string, max int, discarding bool) []string {
	var out []string
	if discarding {
		i := strings.IndexByte(s, '\n')
		out = append(out, "TOO LARGE")
		if i < 0 {
			return out
		}
		s = s[i+1:]
	}
	for len(s) > 0 {
		line, rest, _ := strings.Cut(s, "\n")
		s = rest
		line = strings.TrimSuffix(line, "\r")
		if len(line) > max {
			line = "TOO LARGE"
		}
		out = append(out, line)
	}
	return out
}

// jModel is what the daemon has done, for the checks of a crash.
type jModel struct {
	stream   string
	read     int // bytes of stream that fill has put in the journal
	handled  int // stream offset past the last line handled
	handled2 int // the same once the operation in progress is done (-1: none)
	owed     map[string]bool
	owed2    map[string]bool // owed once the operation in progress is done
	writing  bool            // a message is being written
	starting bool            // one is starting to be: either
	complete bool            // all its bytes are recorded as written
	resend   map[string]string
}

// check recovers the journal as it is in mem (a kill -9 here) and checks
// that a successor would go on exactly where the daemon stopped.
func (m *jModel) check(t *testing.T, mem []byte, max int, where string) {
	t.Helper()
	rec, err := recoverJournal(mem, false)
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	got := jEvents(string(rec.input)+m.stream[m.read:], max, rec.discarding)
	var ids []string
	for _, p := range rec.pending {
		ids = append(ids, string(p.id))
		if want, ok := m.resend[string(p.id)]; ok != (p.line != nil) || (ok && string(p.line) != want) {
			t.Fatalf("%s: pending %s kept line %q, want %q", where, p.id, p.line, want)
		}
	}
	slices.Sort(ids)
	matches := func(handled int, owed map[string]bool) bool {
		want := jEvents(m.stream[handled:], max, false)
		var wantIDs []string
		for id := range owed {
			wantIDs = append(wantIDs, id)
		}
		slices.Sort(wantIDs)
		return slices.Equal(got, want) && slices.Equal(ids, wantIDs)
	}
	ok := matches(m.handled, m.owed)
	if !ok && m.handled2 >= 0 {
		ok = matches(m.handled2, m.owed2)
	}
	if !ok {
		t.Fatalf("%s: a successor would read %.300q and answer %v;\nwant %.300q and %v (or, with the step done, from %d)",
			where, got, ids, jEvents(m.stream[m.handled:], max, false), m.owed, m.handled2)
	}
	if wantMend := m.writing && !m.complete; rec.mend != wantMend && !m.starting {
		t.Fatalf("%s: mend %v, want %v", where, rec.mend, wantMend)
	}
}

// TestJournalRecoversAtEveryStep runs the daemon's side of a journal over
// a stream of requests, notifications, blank lines and lines too long,
// read in pieces of random sizes, answering requests in pieces too, and
// at every point where a store changes the journal (and between a read
// and its record) recovers a copy of it as a relay would after a kill -9:
// a successor must read exactly the lines not yet handled, and answer
// exactly the requests taken and not answered, the line of each that
// changes nothing kept to be sent again.
func TestJournalRecoversAtEveryStep(t *testing.T) {
	const max = 600
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 29))
			var sb strings.Builder
			for i := range 80 {
				switch k := rng.IntN(10); {
				case k < 5:
					method := []string{"tools/call", "ping", "tools/list"}[rng.IntN(3)]
					fmt.Fprintf(&sb, `{"jsonrpc":"2.0","id":%d,"method":%q,"params":{"pad":%q}}`+"\n", i, method, strings.Repeat("p", rng.IntN(300)))
				case k < 7:
					fmt.Fprintf(&sb, `{"jsonrpc":"2.0","method":"notifications/progress","params":{"n":%d}}`+"\r\n", i)
				case k < 8:
					sb.WriteString("\n")
				default:
					sb.WriteString(strings.Repeat("x", max+1+rng.IntN(3*max)) + "\n")
				}
			}
			initial := []byte(`{"jsonrpc":"2.0","id":"first","method":"ping"}` + "\n")
			stream := string(initial) + sb.String()
			j, mem := newTestJournal(t, max, initial)
			m := &jModel{stream: stream, read: len(initial), handled2: -1, owed: map[string]bool{}, resend: map[string]string{}}
			step := ""
			j.hook = func() { m.check(t, mem, max, step) }
			fill := func(p []byte, got func(int)) (int, error) {
				if m.read == len(stream) {
					return 0, io.EOF
				}
				n := min(len(p), 1+rng.IntN(700), len(stream)-m.read)
				copy(p, stream[m.read:m.read+n])
				m.read += n
				step = fmt.Sprintf("read %d bytes, not recorded", n)
				m.check(t, mem, max, step)
				step = "recording a read"
				got(n)
				return n, nil
			}
			var queue []string // ids owed, oldest first
			answer := func() {
				id := queue[0]
				queue = queue[1:]
				msg := []byte(`{"jsonrpc":"2.0","id":` + id + `,"result":{}}` + "\n")
				ref, slots := j.answering([]string{jsonrpc.IDKey([]byte(id))})
				step = "answering " + id
				m.starting, m.complete = true, false
				j.beginOut(len(msg), ref)
				m.starting, m.writing = false, true
				for done := 0; done < len(msg); {
					k := min(len(msg)-done, 1+rng.IntN(20))
					done += k
					if done == len(msg) {
						m.complete = true
						delete(m.owed, id)
						delete(m.resend, id)
					}
					j.wrote(k)
				}
				j.endOut(slots, true)
				m.writing = false
			}
			pos := 0 // where the line read starts in the stream
			for {
				line, tooLarge, err := j.readLine(fill)
				end := int(j.lineEndPos())
				if err != nil && line == nil && !tooLarge {
					break
				}
				if !tooLarge && len(line) > 0 {
					if id, method, ok := relayRequestOf(line); ok {
						keep := proxy.Resendable(method)
						step = "tracking " + string(id)
						if err := j.track(id, method, line, uint64(end), 0, keep); err != nil {
							t.Fatal(err)
						}
						m.owed2 = maps(m.owed, string(id))
						if keep {
							m.resend[string(id)] = string(line)
						}
						queue = append(queue, string(id))
					}
				}
				if m.owed2 == nil {
					m.owed2 = maps(m.owed, "")
				}
				step = fmt.Sprintf("handling the line at %d", pos)
				m.handled2 = end
				j.done()
				m.handled, m.owed = end, m.owed2
				m.handled2, m.owed2 = -1, nil
				pos = end
				for len(queue) > 0 && rng.IntN(3) == 0 {
					answer()
				}
				if err != nil {
					break
				}
			}
			for len(queue) > 0 {
				answer()
			}
			step = "the end"
			m.check(t, mem, max, step)
			if m.read != len(stream) || m.handled != len(stream) {
				t.Fatalf("read %d, handled %d of %d bytes", m.read, m.handled, len(stream))
			}
		})
	}
}

// maps returns a copy of m with k added (when not "").
func maps(m map[string]bool, k string) map[string]bool {
	out := make(map[string]bool, len(m)+1)
	for x := range m {
		out[x] = true
	}
	if k != "" {
		out[k] = true
	}
	return out
}

// TestJournalCutAnswer: a kill -9 while an answer is half written leaves
// its line to be ended and its request owed; an answer a pipe took whole
// or not at all (up to 4 KiB, nothing recorded written) is not mended.
func TestJournalCutAnswer(t *testing.T) {
	j, mem := newTestJournal(t, 1024, nil)
	line := []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call"}`)
	fill := func(p []byte, got func(int)) (int, error) { n := copy(p, append(line, '\n')); got(n); return n, nil }
	if _, _, err := j.readLine(fill); err != nil {
		t.Fatal(err)
	}
	if err := j.track([]byte("7"), "tools/call", line, j.lineEndPos(), 0, false); err != nil {
		t.Fatal(err)
	}
	j.done()
	ref, _ := j.answering([]string{jsonrpc.IDKey([]byte("7"))})
	j.beginOut(5000, ref)
	for _, tc := range []struct {
		done    int
		pipe    bool
		mend    bool
		pending int
	}{{0, true, true, 1}, {0, false, true, 1}, {100, true, true, 1}, {5000, true, false, 0}} {
		if tc.done > 0 {
			j.wrote(tc.done - int(*jWord(mem, hdrOutDone)))
		}
		rec, err := recoverJournal(mem, tc.pipe)
		if err != nil {
			t.Fatal(err)
		}
		if rec.mend != tc.mend || len(rec.pending) != tc.pending {
			t.Errorf("%d of 5000 bytes written (pipe %v): mend %v, %d pending; want %v, %d", tc.done, tc.pipe, rec.mend, len(rec.pending), tc.mend, tc.pending)
		}
	}
	j2, mem2 := newTestJournal(t, 1024, nil)
	if _, _, err := j2.readLine(fill); err != nil {
		t.Fatal(err)
	}
	_ = j2.track([]byte("7"), "tools/call", line, j2.lineEndPos(), 0, false)
	j2.done()
	ref, _ = j2.answering([]string{jsonrpc.IDKey([]byte("7"))})
	j2.beginOut(300, ref)
	if rec, _ := recoverJournal(mem2, true); rec.mend || len(rec.pending) != 1 {
		t.Errorf("an answer of 300 bytes to a pipe, none recorded written: mend %v, %d pending; want no mend, 1 pending", rec.mend, len(rec.pending))
	}
}

// TestJournalSlotsFull: a request beyond the slots is refused, and a slot
// freed is used again.
func TestJournalSlotsFull(t *testing.T) {
	j, _ := newTestJournal(t, 1024, nil)
	for i := range journalSlots {
		if err := j.track([]byte(fmt.Sprint(i)), "tools/call", nil, 0, 0, false); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if err := j.track([]byte("x"), "tools/call", nil, 0, 0, false); err != errJournalFull {
		t.Fatalf("a request past the slots: %v, want errJournalFull", err)
	}
	j.untrack(jsonrpc.IDKey([]byte("5")))
	if err := j.track([]byte("x"), "tools/call", nil, 0, 0, false); err != nil {
		t.Fatalf("a request once a slot is free: %v", err)
	}
	if err := j.track(bytes.Repeat([]byte("9"), journalSlotData), "ping", nil, 0, 0, false); err == nil {
		t.Fatal("an id longer than a slot holds was taken")
	}
}
