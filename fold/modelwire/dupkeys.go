package modelwire

import (
	"fmt"
	"hash/maphash"

	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// DuplicateKeyError is Apply's (and ScrubJSON's) error for a body with a
// key twice in one object. foldproxy reads the first of two such members,
// most decoders (the model APIs' among them) the last: a secret in the
// second would pass the scrubber unseen, so such a body is refused.
type DuplicateKeyError struct {
	Key string // the key, cut to 64 bytes
}

func (e *DuplicateKeyError) Error() string {
	return fmt.Sprintf("modelwire: the request has the key %q twice in one object; send each key once", e.Key)
}

// duplicateKey returns the first key found twice in one object of the
// valid JSON body, walking every object and array of it.
func duplicateKey(body []byte) error {
	return dupIn(body, jsonscan.SkipSpace(body, 0), 0)
}

// duplicateKey is the package's duplicateKey for a request object whose
// messages (messages, input) the Memo remembers as checked: an agent
// resends its history on every request, and a message is checked once.
func (m *Memo) duplicateKey(body []byte) error {
	i := jsonscan.SkipSpace(body, 0)
	if m == nil || i >= len(body) || body[i] != '{' {
		return duplicateKey(body)
	}
	ms, _, err := jsonscan.ObjectAt(body, i)
	if err != nil {
		return nil
	}
	for x, mb := range ms {
		for y := range x {
			if ms[y].Key == mb.Key {
				return dupErr(mb.Key)
			}
		}
		v := mb.Value
		if (mb.Key != "messages" && mb.Key != "input") || body[v.Start] != '[' {
			if err := dupIn(body, v.Start, 1); err != nil {
				return err
			}
			continue
		}
		es, _, err := jsonscan.ArrayAt(body, v.Start)
		if err != nil {
			return nil
		}
		for _, e := range es {
			el := body[e.Start:e.End]
			k := [2]uint64{maphash.Bytes(m.seed, el), maphash.Bytes(m.seed2, el)}
			if _, ok := m.unique.get(k); ok {
				continue
			}
			if err := dupIn(body, e.Start, 2); err != nil {
				return err
			}
			m.unique.put(k, true)
		}
	}
	return nil
}

func dupIn(b []byte, i, depth int) error {
	if i >= len(b) || depth > 10000 {
		return nil
	}
	switch b[i] {
	case '{':
		ms, _, err := jsonscan.ObjectAt(b, i)
		if err != nil {
			return nil // not this check's business: Valid said the body is valid
		}
		// Most objects are small: compare pairwise; a map for large ones.
		var seen map[string]bool
		if len(ms) > 16 {
			seen = make(map[string]bool, len(ms))
		}
		for x, m := range ms {
			if seen != nil {
				if seen[m.Key] {
					return dupErr(m.Key)
				}
				seen[m.Key] = true
			} else {
				for y := range x {
					if ms[y].Key == m.Key {
						return dupErr(m.Key)
					}
				}
			}
			if c := b[m.Value.Start]; c == '{' || c == '[' {
				if err := dupIn(b, m.Value.Start, depth+1); err != nil {
					return err
				}
			}
		}
	case '[':
		es, _, err := jsonscan.ArrayAt(b, i)
		if err != nil {
			return nil
		}
		for _, e := range es {
			if c := b[e.Start]; c == '{' || c == '[' {
				if err := dupIn(b, e.Start, depth+1); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func dupErr(key string) error {
	if len(key) > 64 {
		key = key[:alignRune(key, 64)]
	}
	return &DuplicateKeyError{Key: key}
}
