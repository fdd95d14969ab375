package attach

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/foldproxy/foldproxy/policy/jsonrpc"
	"github.com/foldproxy/foldproxy/proxy"
)

// The session journal is what lets the daemon read and write an attached
// agent's pipes itself (attach_fd_linux.go) without a request being lost
// when the daemon dies. The relay that the agent started makes it (a
// memfd), passes it to the daemon with the agent's stdin and stdout, and
// maps it only once the daemon is gone. The daemon keeps in it, as it
// goes, everything a successor needs to go on where it stopped:
//
//   - the bytes it has read from stdin and not yet handled: the agent's
//     stdin is read straight into the journal's input buffer, so that a
//     request read in part when the daemon died is read again whole;
//   - the requests it has taken and not yet answered (one slot each: id,
//     method, and the line itself when it changes nothing and may be
//     sent again);
//   - the message it is writing to stdout, and how many of its bytes
//     went out, so that a line cut short is ended before anything else
//     is written.
//
// Every change is made so that the journal reads right after a kill -9
// between any two instructions: several words that change together are
// written to the copy of the state not in use, which one atomic store
// then makes current; a word that changes alone is stored atomically and
// after what it vouches for. Nobody else touches the journal while the
// daemon lives (the relay has not mapped it), so the atomics order the
// stores only, for whoever reads the journal after the daemon's death.
//
// The input buffer: the agent's bytes [consumed, filled) are read and not
// yet handled (consumed and filled are offsets in the buffer, base the
// stream offset of its byte 0). Every byte of the buffer at or past
// filled is zero, except those that a read(2) in flight is writing, before
// [filled, readEnd): what a successor finds there up to the first zero
// byte was read by a call whose return was not recorded, and is the
// agent's too (JSON text holds no zero byte).

const (
	journalMagic  = 0x31304c4e524a5046 // "FPJRNL01"
	journalHeader = 4096
	journalSlot   = 1024
	// journalSlots bounds the requests of one session taken and not yet
	// answered; another one is refused with an error until some end.
	journalSlots = 1024
	// journalChunk is the most one read(2) of stdin takes.
	journalChunk = 64 << 10
	// journalSlotData is what a slot holds of id, method and line.
	journalSlotData = journalSlot - slotData

	// Header words.
	hdrMagic    = 0
	hdrSlots    = 8
	hdrRingOff  = 16
	hdrRingCap  = 24
	hdrInSel    = 32
	hdrIn0      = 64  // input state copy 0 (inWords words)
	hdrIn1      = 128 // input state copy 1
	hdrOutState = 192 // 1 while a message is being written to stdout
	hdrOutTotal = 200
	hdrOutDone  = 208
	hdrOutRef   = 216 // the requests the message answers (outRef)

	// Input state words.
	inBase     = 0
	inConsumed = 8
	inFilled   = 16
	inReadEnd  = 24
	inFlags    = 32

	// inDiscarding: the line being read is longer than the limit; its
	// bytes are dropped up to its newline, and then refused.
	inDiscarding = 1

	// Slot words.
	slotState = 0 // 1: a request taken and not answered
	slotSeq   = 8
	slotEnd   = 16 // stream offset just past the request's line
	slotGroup = 24 // the batch it belongs to; 0 when alone
	slotLens  = 32 // id length << 32 | method length
	slotLine  = 40 // length of the line kept after them; 0: not kept
	slotData  = 48

	// outBatch marks an outRef that names a batch rather than a slot.
	outBatch = uint64(1) << 63
)

// journalSize returns the size of a journal whose input buffer holds a
// line of up to maxLine bytes (and initial bytes besides).
func journalSize(maxLine int64, initial int) (size int64, ringOff, ringCap int64) {
	ringOff = journalHeader + journalSlots*journalSlot
	// Twice the longest line and a read more: a line that has to move to
	// the buffer's start never overlaps where it moves to.
	ringCap = 2*(maxLine+2) + journalChunk + int64(initial)
	ringCap = (ringCap + 4095) &^ 4095
	return ringOff + ringCap, ringOff, ringCap
}

// jWord returns the 8-byte word at off of mem (8-aligned).
func jWord(mem []byte, off int) *uint64 {
	return (*uint64)(unsafe.Pointer(&mem[off]))
}

// journalInit lays out a fresh journal in mem (zeroed, of the size
// journalSize gave) with initial as its first unread input; discarding
// says that a line too long is being dropped.
func journalInit(mem []byte, ringOff, ringCap int64, initial []byte, discarding bool) {
	copy(mem[ringOff:ringOff+ringCap], initial)
	st := jState{filled: uint64(len(initial)), readEnd: uint64(len(initial))}
	if discarding {
		st.flags = inDiscarding
	}
	st.store(mem, hdrIn0)
	atomic.StoreUint64(jWord(mem, hdrInSel), 0)
	atomic.StoreUint64(jWord(mem, hdrSlots), journalSlots)
	atomic.StoreUint64(jWord(mem, hdrRingOff), uint64(ringOff))
	atomic.StoreUint64(jWord(mem, hdrRingCap), uint64(ringCap))
	atomic.StoreUint64(jWord(mem, hdrMagic), journalMagic)
}

// jState is one copy of the input state.
type jState struct {
	base, consumed, filled, readEnd, flags uint64
}

func (s jState) store(mem []byte, off int) {
	atomic.StoreUint64(jWord(mem, off+inBase), s.base)
	atomic.StoreUint64(jWord(mem, off+inConsumed), s.consumed)
	atomic.StoreUint64(jWord(mem, off+inFilled), s.filled)
	atomic.StoreUint64(jWord(mem, off+inReadEnd), s.readEnd)
	atomic.StoreUint64(jWord(mem, off+inFlags), s.flags)
}

func loadState(mem []byte, off int) jState {
	return jState{
		base:     atomic.LoadUint64(jWord(mem, off+inBase)),
		consumed: atomic.LoadUint64(jWord(mem, off+inConsumed)),
		filled:   atomic.LoadUint64(jWord(mem, off+inFilled)),
		readEnd:  atomic.LoadUint64(jWord(mem, off+inReadEnd)),
		flags:    atomic.LoadUint64(jWord(mem, off+inFlags)),
	}
}

// journal is the daemon's side of a session journal: the input buffer's
// reader (one goroutine), the slots of the requests taken and the record
// of the message being written (one writer at a time).
type journal struct {
	mem  []byte
	ring []byte
	max  int64 // the longest line taken
	// zero clears ring[a:b]; on Linux it gives large ranges back to the
	// system (their pages are then zero).
	zero func(ring []byte, a, b int)

	// rmu is held by the reader but while it waits for stdin, and by
	// release, which ends the mapping: the reader never touches it after.
	rmu      sync.Mutex
	released bool
	// The reader's: the current input state, as published.
	in       jState
	sel      uint64
	lineEnd  int // end of the line last returned, -1 when none
	scanFrom int // the buffer holds no newline in [consumed, scanFrom)

	// hook, when set (tests only), is called between the stores that
	// change the journal, where a kill -9 may fall.
	hook func()

	mu     sync.Mutex
	used   []bool           // slots in use
	byKey  map[string][]int // id key → slots, oldest first
	seq    uint64
	groups uint64
}

// errJournalFull refuses a request when every slot is in use.
var errJournalFull = fmt.Errorf("too many requests in flight on this session (at most %d): wait for some to end", journalSlots)

// openJournal checks mem, a journal made by the relay, and returns its
// daemon side.
func openJournal(mem []byte, maxLine int64, zero func([]byte, int, int)) (*journal, error) {
	if len(mem) < journalHeader || uintptr(unsafe.Pointer(&mem[0]))%8 != 0 {
		return nil, errors.New("journal: too small")
	}
	if atomic.LoadUint64(jWord(mem, hdrMagic)) != journalMagic {
		return nil, errors.New("journal: not a foldproxy session journal")
	}
	off, rcap := atomic.LoadUint64(jWord(mem, hdrRingOff)), atomic.LoadUint64(jWord(mem, hdrRingCap))
	if atomic.LoadUint64(jWord(mem, hdrSlots)) != journalSlots || off != journalHeader+journalSlots*journalSlot ||
		off+rcap > uint64(len(mem)) || rcap < uint64(2*(maxLine+2)+journalChunk) {
		return nil, fmt.Errorf("journal: its layout (%d slots, buffer %d+%d of %d bytes) is not this foldproxy's", atomic.LoadUint64(jWord(mem, hdrSlots)), off, rcap, len(mem))
	}
	j := &journal{mem: mem, ring: mem[off : off+rcap], max: maxLine, zero: zero, lineEnd: -1,
		used: make([]bool, journalSlots), byKey: make(map[string][]int)}
	if j.zero == nil {
		j.zero = func(r []byte, a, b int) { clear(r[a:b]) }
	}
	j.sel = atomic.LoadUint64(jWord(mem, hdrInSel)) & 1
	j.in = loadState(mem, hdrIn0+int(j.sel)*(hdrIn1-hdrIn0))
	if j.in.consumed > j.in.filled || j.in.filled > rcap || j.in.readEnd > rcap || j.in.readEnd < j.in.filled {
		return nil, errors.New("journal: its input state is not valid")
	}
	// What a relay put there is whole; anything past it is zero.
	j.in.readEnd = j.in.filled
	j.scanFrom = int(j.in.consumed)
	return j, nil
}

// publish makes st the current input state.
func (j *journal) publish(st jState) {
	next := j.sel ^ 1
	st.store(j.mem, hdrIn0+int(next)*(hdrIn1-hdrIn0))
	j.crashPoint()
	atomic.StoreUint64(jWord(j.mem, hdrInSel), next)
	j.sel, j.in = next, st
	j.crashPoint()
}

// crashPoint calls the test hook.
func (j *journal) crashPoint() {
	if j.hook != nil {
		j.hook()
	}
}

// readLine returns a copy of the next line of the agent's input, without
// its line ending, reading more with fill when the buffer holds no whole
// line; as stdioReadLine does, a line longer than the limit is reported
// as tooLarge (and its bytes dropped as they come), and a last line
// without a newline comes with the error that ended the input. fill reads
// into p and calls got(n) as soon as it has n bytes. done must follow
// before the next readLine.
func (j *journal) readLine(fill func(p []byte, got func(int)) (int, error)) (line []byte, tooLarge bool, err error) {
	j.rmu.Lock()
	defer j.rmu.Unlock()
	for {
		if j.released {
			return nil, false, errJournalReleased
		}
		filled := int(j.in.filled)
		if i := bytes.IndexByte(j.ring[j.scanFrom:filled], '\n'); i >= 0 {
			end := j.scanFrom + i + 1
			j.lineEnd, j.scanFrom = end, end
			if j.in.flags&inDiscarding != 0 {
				return nil, true, nil
			}
			l := j.ring[j.in.consumed : end-1]
			l = bytes.TrimSuffix(l, []byte{'\r'})
			if int64(len(l)) > j.max {
				return nil, true, nil
			}
			return bytes.Clone(l), false, nil
		}
		j.scanFrom = filled
		if st := j.in; st.flags&inDiscarding == 0 && int64(filled)-int64(st.consumed) > j.max+2 {
			// Too long: from now on its bytes are dropped as they come.
			st.flags |= inDiscarding
			j.publish(st)
		}
		if j.in.flags&inDiscarding != 0 && j.in.consumed < j.in.filled {
			j.reset(uint64(filled), inDiscarding)
		}
		if int(j.in.filled)+journalChunk > len(j.ring) {
			j.compact()
		}
		if want := j.in.filled + journalChunk; j.in.readEnd < want {
			st := j.in
			st.readEnd = want
			j.publish(st)
		}
		start := int(j.in.filled)
		if start+journalChunk > len(j.ring) {
			return nil, false, errors.New("journal: the input buffer is full")
		}
		// Unlocked while it waits: release closes stdin first, which
		// waits for a read in flight (and so for got), and takes the lock
		// before it unmaps.
		j.rmu.Unlock()
		_, rerr := fill(j.ring[start:start+journalChunk], func(n int) {
			st := j.in
			st.filled += uint64(n)
			j.publish(st)
		})
		j.rmu.Lock()
		if j.released {
			return nil, false, errJournalReleased
		}
		if rerr != nil {
			if j.in.filled > j.in.consumed && j.in.flags&inDiscarding == 0 {
				// The last line, without its newline.
				end := int(j.in.filled)
				j.lineEnd, j.scanFrom = end, end
				l := bytes.TrimSuffix(j.ring[j.in.consumed:end], []byte{'\r'})
				if int64(len(l)) > j.max {
					return nil, true, rerr
				}
				return bytes.Clone(l), false, rerr
			}
			if j.in.flags&inDiscarding != 0 {
				end := int(j.in.filled)
				j.lineEnd, j.scanFrom = end, end
				return nil, true, rerr
			}
			return nil, false, rerr
		}
	}
}

// journalSource is the stdioSource of an attached session whose stdin the
// daemon reads itself, into the journal: fill reads stdin into p and
// calls got(n) as soon as it has n bytes.
type journalSource struct {
	j    *journal
	fill func(p []byte, got func(int)) (int, error)
}

// ReadLine, More and Handled make journalSource a proxy.LineSource.
func (s *journalSource) ReadLine(int64) ([]byte, bool, error) { return s.j.readLine(s.fill) }
func (s *journalSource) More() bool                           { return s.j.more() }
func (s *journalSource) Handled()                             { s.j.done() }

var _ proxy.Journal = (*journal)(nil)

// The methods of proxy.Journal: the stdio front's reader and writer note
// an attached session's requests and answers with them.

// NewGroup is newGroup.
func (j *journal) NewGroup() uint64 { return j.newGroup() }

// LineEndPos is lineEndPos.
func (j *journal) LineEndPos() uint64 { return j.lineEndPos() }

// Track is track.
func (j *journal) Track(id json.RawMessage, method string, line []byte, end, group uint64, keep bool) error {
	return j.track(id, method, line, end, group, keep)
}

// Untrack is untrack.
func (j *journal) Untrack(key string) { j.untrack(key) }

// Answering is answering.
func (j *journal) Answering(keys []string) (ref uint64, slots []int) { return j.answering(keys) }

// BeginOut is beginOut.
func (j *journal) BeginOut(total int, ref uint64) { j.beginOut(total, ref) }

// Wrote is wrote.
func (j *journal) Wrote(n int) { j.wrote(n) }

// EndOut is endOut.
func (j *journal) EndOut(slots []int, whole bool) { j.endOut(slots, whole) }

// errJournalReleased ends a read of a journal that was released.
var errJournalReleased = errors.New("journal: released")

// release ends the journal's use once the session is over: closeIn closes
// stdin, waiting for a read in flight (after it nothing read can go
// unrecorded), then unmap unmaps it, once the reader keeps off it.
func (j *journal) release(closeIn, unmap func()) {
	closeIn()
	j.rmu.Lock()
	defer j.rmu.Unlock()
	j.released = true
	unmap()
}

// more reports whether the buffer holds input past the line last returned.
func (j *journal) more() bool { return j.lineEnd >= 0 && uint64(j.lineEnd) < j.in.filled }

// lineEndPos is the stream offset just past the line last returned.
func (j *journal) lineEndPos() uint64 { return j.in.base + uint64(max(j.lineEnd, 0)) }

// done records the line last returned as handled: a successor does not
// read it again.
func (j *journal) done() {
	if j.lineEnd < 0 {
		return
	}
	end := uint64(j.lineEnd)
	j.lineEnd = -1
	if end >= j.in.filled {
		j.reset(j.in.filled, 0)
		return
	}
	st := j.in
	st.consumed, st.flags = end, st.flags&^inDiscarding
	j.publish(st)
}

// reset drops the buffer's bytes before upTo (all it holds) and starts it
// again at its byte 0, with flags.
func (j *journal) reset(upTo uint64, flags uint64) {
	if j.in.consumed < upTo || j.in.flags != flags {
		st := j.in
		st.consumed, st.flags = upTo, flags
		j.publish(st)
	}
	// Zeroed once the state in force says these bytes were handled (or
	// dropped), and before it says the buffer is empty, when every byte
	// of it must be zero.
	j.zero(j.ring, 0, int(j.in.filled))
	j.crashPoint()
	j.publish(jState{base: j.in.base + upTo, readEnd: 0, flags: flags})
	j.scanFrom = 0
}

// compact moves the unhandled bytes to the buffer's start.
func (j *journal) compact() {
	st := j.in
	n := st.filled - st.consumed
	if st.consumed == 0 || n > st.consumed {
		return // cannot happen: the buffer is more than twice the longest line
	}
	old := int(st.filled)
	copy(j.ring[:n], j.ring[st.consumed:st.filled])
	j.crashPoint()
	j.scanFrom -= int(st.consumed)
	j.publish(jState{base: st.base + st.consumed, filled: n, readEnd: n, flags: st.flags})
	j.zero(j.ring, int(n), old)
}

// slot returns slot i's bytes.
func (j *journal) slot(i int) []byte {
	off := journalHeader + i*journalSlot
	return j.mem[off : off+journalSlot]
}

// newGroup returns the number of a new batch.
func (j *journal) newGroup() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.groups++
	return j.groups
}

// track records a request taken from the line that ends at stream offset
// end, before it is delivered: its id, its method, and the line itself
// when keep (a request that changes nothing, alone on its line) and it
// fits. It fails when every slot is in use.
func (j *journal) track(id json.RawMessage, method string, line []byte, end, group uint64, keep bool) error {
	key := jsonrpc.IDKey(id)
	if len(id)+len(method) > journalSlotData {
		return fmt.Errorf("a request id of %d bytes is too long for this session (at most %d)", len(id), journalSlotData-len(method))
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	i := -1
	for k, u := range j.used {
		if !u {
			i = k
			break
		}
	}
	if i < 0 {
		return errJournalFull
	}
	j.used[i] = true
	j.byKey[key] = append(j.byKey[key], i)
	j.seq++
	s := j.slot(i)
	if !keep || len(id)+len(method)+len(line) > journalSlotData {
		line = nil
	}
	n := copy(s[slotData:], id)
	n += copy(s[slotData+n:], method)
	copy(s[slotData+n:], line)
	atomic.StoreUint64(jWord(s, slotSeq), j.seq)
	atomic.StoreUint64(jWord(s, slotEnd), end)
	atomic.StoreUint64(jWord(s, slotGroup), group)
	atomic.StoreUint64(jWord(s, slotLens), uint64(len(id))<<32|uint64(len(method)))
	atomic.StoreUint64(jWord(s, slotLine), uint64(len(line)))
	j.crashPoint()
	atomic.StoreUint64(jWord(s, slotState), 1)
	j.crashPoint()
	return nil
}

// untrack forgets the oldest request of id key (the agent cancelled it:
// no answer is owed).
func (j *journal) untrack(key string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if i, ok := j.takeLocked(key); ok {
		j.freeLocked(i)
	}
}

func (j *journal) takeLocked(key string) (int, bool) {
	l := j.byKey[key]
	if len(l) == 0 {
		return 0, false
	}
	if len(l) == 1 {
		delete(j.byKey, key)
	} else {
		j.byKey[key] = l[1:]
	}
	return l[0], true
}

func (j *journal) freeLocked(i int) {
	atomic.StoreUint64(jWord(j.slot(i), slotState), 0)
	j.used[i] = false
	j.crashPoint()
}

// answering returns the reference the out record holds for a message
// that answers the requests of keys (one request, or a batch), and takes
// their slots, which endOut frees once it is written.
func (j *journal) answering(keys []string) (ref uint64, slots []int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, k := range keys {
		if i, ok := j.takeLocked(k); ok {
			slots = append(slots, i)
		}
	}
	switch {
	case len(slots) == 0:
		return 0, nil
	case len(keys) == 1:
		return uint64(slots[0]) + 1, slots
	}
	g := atomic.LoadUint64(jWord(j.slot(slots[0]), slotGroup))
	return outBatch | g, slots
}

// beginOut records that a message of total bytes answering ref (0: none)
// starts being written.
func (j *journal) beginOut(total int, ref uint64) {
	atomic.StoreUint64(jWord(j.mem, hdrOutDone), 0)
	atomic.StoreUint64(jWord(j.mem, hdrOutTotal), uint64(total))
	atomic.StoreUint64(jWord(j.mem, hdrOutRef), ref)
	j.crashPoint()
	atomic.StoreUint64(jWord(j.mem, hdrOutState), 1)
	j.crashPoint()
}

// wrote records n more bytes of the message written.
func (j *journal) wrote(n int) {
	w := jWord(j.mem, hdrOutDone)
	atomic.StoreUint64(w, atomic.LoadUint64(w)+uint64(n))
	j.crashPoint()
}

// endOut records that the message went out whole (the requests it
// answers are settled) or not (they stay owed: a successor answers them).
func (j *journal) endOut(slots []int, whole bool) {
	j.mu.Lock()
	if whole {
		for _, i := range slots {
			j.freeLocked(i)
		}
	} else {
		// Owed again: a later answer (the front's error) takes them.
		for _, i := range slots {
			s := j.slot(i)
			id := s[slotData : slotData+int(atomic.LoadUint64(jWord(s, slotLens))>>32)]
			k := jsonrpc.IDKey(id)
			j.byKey[k] = append([]int{i}, j.byKey[k]...)
		}
	}
	j.mu.Unlock()
	atomic.StoreUint64(jWord(j.mem, hdrOutState), 0)
	j.crashPoint()
}

// journalPending is a request a dead daemon took and did not answer.
type journalPending struct {
	id     json.RawMessage
	method string
	line   []byte // the line, when kept: it may be sent again
	seq    uint64
	group  uint64
}

// journalRecovery is what a relay finds in the journal of a daemon that
// is gone.
type journalRecovery struct {
	// input is the agent's input the daemon read and did not handle, to
	// be read again before what stdin still holds.
	input []byte
	// discarding: input starts in a line too long, dropped up to its
	// newline and then refused.
	discarding bool
	// mend: a message to the agent may have been cut short; its line
	// must be ended before anything else is written.
	mend bool
	// pending are the requests taken and not answered, oldest first.
	pending []journalPending
}

// recoverJournal reads the journal mem of a daemon that is gone. pipeOut
// says that stdout is a pipe, where a write of up to 4 KiB is atomic.
func recoverJournal(mem []byte, pipeOut bool) (journalRecovery, error) {
	var r journalRecovery
	if len(mem) < journalHeader || binary.LittleEndian.Uint64(mem[hdrMagic:]) != journalMagic {
		return r, errors.New("journal: not a foldproxy session journal")
	}
	off, rcap := atomic.LoadUint64(jWord(mem, hdrRingOff)), atomic.LoadUint64(jWord(mem, hdrRingCap))
	slots := atomic.LoadUint64(jWord(mem, hdrSlots))
	if slots != journalSlots || off != journalHeader+slots*journalSlot || off+rcap > uint64(len(mem)) {
		return r, errors.New("journal: its layout is not valid")
	}
	ring := mem[off : off+rcap]
	sel := atomic.LoadUint64(jWord(mem, hdrInSel)) & 1
	st := loadState(mem, hdrIn0+int(sel)*(hdrIn1-hdrIn0))
	if st.consumed > st.filled || st.filled > rcap || st.readEnd > rcap {
		return r, errors.New("journal: its input state is not valid")
	}
	r.input = bytes.Clone(ring[st.consumed:st.filled])
	if st.readEnd > st.filled {
		// Bytes a read(2) took whose return was not recorded.
		tail := ring[st.filled:st.readEnd]
		if z := bytes.IndexByte(tail, 0); z >= 0 {
			tail = tail[:z]
		}
		r.input = append(r.input, tail...)
	}
	r.discarding = st.flags&inDiscarding != 0
	handled := st.base + st.consumed

	// The message being written.
	answered := map[int]bool{}
	if atomic.LoadUint64(jWord(mem, hdrOutState)) == 1 {
		total, done := atomic.LoadUint64(jWord(mem, hdrOutTotal)), atomic.LoadUint64(jWord(mem, hdrOutDone))
		ref := atomic.LoadUint64(jWord(mem, hdrOutRef))
		switch {
		case done >= total:
			// Written whole: what it answers is answered.
			if ref&outBatch != 0 {
				for i := 0; i < journalSlots; i++ {
					s := mem[journalHeader+i*journalSlot:]
					if atomic.LoadUint64(jWord(s, slotState)) == 1 && atomic.LoadUint64(jWord(s, slotGroup)) == ref&^outBatch {
						answered[i] = true
					}
				}
			} else if ref > 0 && ref <= journalSlots {
				answered[int(ref-1)] = true
			}
		case done == 0 && pipeOut && total <= 4096:
			// A pipe takes a write of up to 4 KiB whole or not at all:
			// the line is not cut (the answer may have gone out, and is
			// then answered twice, the second time with an error).
		default:
			r.mend = true
		}
	}
	for i := 0; i < journalSlots; i++ {
		s := mem[journalHeader+i*journalSlot : journalHeader+(i+1)*journalSlot]
		if atomic.LoadUint64(jWord(s, slotState)) != 1 || answered[i] {
			continue
		}
		if atomic.LoadUint64(jWord(s, slotEnd)) > handled {
			continue // its line is in input: it is read again
		}
		lens := atomic.LoadUint64(jWord(s, slotLens))
		il, ml, ll := int(lens>>32), int(lens&0xffffffff), int(atomic.LoadUint64(jWord(s, slotLine)))
		if il+ml+ll > journalSlotData || il == 0 {
			continue
		}
		p := journalPending{
			id:     bytes.Clone(s[slotData : slotData+il]),
			method: string(s[slotData+il : slotData+il+ml]),
			seq:    atomic.LoadUint64(jWord(s, slotSeq)),
			group:  atomic.LoadUint64(jWord(s, slotGroup)),
		}
		if ll > 0 {
			p.line = bytes.Clone(s[slotData+il+ml : slotData+il+ml+ll])
		}
		r.pending = append(r.pending, p)
	}
	sort.Slice(r.pending, func(a, b int) bool { return r.pending[a].seq < r.pending[b].seq })
	return r, nil
}
