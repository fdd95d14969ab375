package tokens

import "encoding/json"

// Decoded is a JSON text whose strings were decoded already (by the
// secrets scan, secrets.Decoded): CountExchange reads a result's texts from
// it rather than decoding them again.
type Decoded interface {
	// Of reports whether the value decodes raw: the same bytes at the
	// same address.
	Of(raw []byte) bool
	// Text returns the decoded value of the JSON string whose literal,
	// quotes included, is raw[start:end], and whether it is the value a
	// JSON decoder gives.
	Text(start, end int) (string, bool)
}

// CountExchange counts a call's arguments and its result against
// remaining (no limit when negative), the result as raw JSON text when it
// cannot be parsed. dec, when not nil, holds the result's strings decoded
// (by the scan); the counts are the same with or without it.
func (c *Counter) CountExchange(args, res json.RawMessage, dec Decoded, method string, remaining int) Counts {
	var tc Counts
	tc.Args = c.CountArgs(args)
	var err error
	tc.Result, tc.Over, err = c.countResult(method, res, remaining, dec, &tc.IsError)
	if err != nil {
		tc.Result, tc.Over = c.CountUpTo(string(res), remaining)
	}
	return tc
}

// Counts are what CountExchange counts of one exchange.
type Counts struct {
	Args   int  // tokens of the arguments (CountArgs)
	Result int  // tokens of the result, capped when Over (CountResult)
	Over   bool // the result's count stopped past remaining
	// IsError is the result's "isError" as the count found it parsing the
	// result: the first member of that key, true only when its value is
	// the literal true; IsErrorUnknown when the result could not be parsed.
	IsError IsError
}

// IsError is whether a result has "isError": true, when known.
type IsError uint8

// The values of IsError.
const (
	IsErrorUnknown IsError = iota
	IsErrorFalse
	IsErrorTrue
)

// isError reads the result's "isError" member: the first member of that
// key, true only when its value is the literal true.
func (sh *shape) isError() IsError {
	for i, m := range sh.members {
		if m.Key == "isError" {
			if string(sh.value(i)) == "true" {
				return IsErrorTrue
			}
			return IsErrorFalse
		}
	}
	return IsErrorFalse
}
