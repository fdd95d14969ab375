package intercept

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// prepare sets a zero Time to now, stores the time in UTC and shortens
// Error and Tool.
func prepare(rec *Record) {
	if rec.Time.IsZero() {
		rec.Time = time.Now()
	}
	rec.Time = rec.Time.UTC()
	rec.Error = shorten(rec.Error, maxErrorLen)
	rec.Tool = shorten(rec.Tool, maxToolLen)
}

// encodeLine appends rec's line to buf. It is encoded by hand: the same
// bytes as json.Marshal, without its reflection and allocations; a record
// appendRecord leaves to it goes through json.Marshal, which also says
// what is wrong with one it cannot encode.
func encodeLine(buf []byte, rec *Record) ([]byte, error) {
	if !encodable(rec) {
		// A copy, so that rec itself stays where the caller has it (on
		// the stack, for write's record) rather than escaping for this
		// rare path.
		cp := *rec
		m, err := json.Marshal(&cp)
		if err != nil {
			return buf, fmt.Errorf("audit record %s: %w", rec.Kind, err)
		}
		return append(append(buf, m...), '\n'), nil
	}
	return append(appendRecord(buf, rec), '\n'), nil
}

// appendRecord appends rec as encoding/json would marshal it, byte for
// byte (field order, omitempty, HTML-safe string escapes, sorted map keys,
// float format), without reflection and into a reused buffer: the audit
// record is written on every call's reply path. TestAppendRecordMatchesJSON
// and FuzzAppendRecord pin it to json.Marshal.
func appendRecord(b []byte, rec *Record) []byte {
	b = append(b, `{"time":"`...)
	b = rec.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","kind":`...)
	b = appendJSONString(b, rec.Kind)
	b = appendStringField(b, "session", rec.Session)
	b = appendStringField(b, "branch", rec.Branch)
	b = appendStringField(b, "parent", rec.Parent)
	b = append(b, `,"depth":`...)
	b = strconv.AppendInt(b, int64(rec.Depth), 10)
	b = appendStringField(b, "upstream", rec.Upstream)
	b = appendStringField(b, "method", rec.Method)
	b = appendStringField(b, "tool", rec.Tool)
	b = appendIntField(b, "arg_tokens", rec.ArgTokens)
	b = appendIntField(b, "result_tokens", rec.ResultTokens)
	b = appendIntField(b, "delivered_tokens", rec.DeliveredTokens)
	if len(rec.Redactions) > 0 {
		b = append(b, `,"redactions":{`...)
		keys := make([]string, 0, len(rec.Redactions))
		for k := range rec.Redactions {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			b = strconv.AppendInt(b, int64(rec.Redactions[k]), 10)
		}
		b = append(b, '}')
	}
	b = appendIntField(b, "budget_used", rec.BudgetUsed)
	b = appendIntField(b, "budget_total", rec.BudgetTotal)
	b = appendStringField(b, "outcome", rec.Outcome)
	b = appendStringField(b, "error", rec.Error)
	b = appendStringField(b, "cut_handle", rec.CutHandle)
	b = appendFloatField(b, "latency_ms", rec.LatencyMS)
	b = appendFloatField(b, "upstream_latency_ms", rec.UpstreamLatencyMS)
	b = appendStringField(b, "event", rec.Event)
	b = appendStringField(b, "status", rec.Status)
	b = appendStringField(b, "reason", rec.Reason)
	b = appendStringField(b, "level", rec.Level)
	b = appendIntField(b, "tokens", rec.Tokens)
	if rec.Model != nil {
		// Model requests are a few a minute: encoding/json is fine here.
		m, err := json.Marshal(rec.Model)
		if err == nil {
			b = append(append(b, `,"model":`...), m...)
		}
	}
	return append(b, '}')
}

// encodable reports whether appendRecord can encode rec as json.Marshal
// would: a time json.Marshal refuses (a year outside 0..9999) or a float
// that is not finite makes Write fall back to json.Marshal for its error.
func encodable(rec *Record) bool {
	y := rec.Time.Year()
	return y >= 0 && y <= 9999 && finite(rec.LatencyMS) && finite(rec.UpstreamLatencyMS) &&
		(rec.Model == nil || finite(rec.Model.ModelledBilled) && finite(rec.Model.ModelledWithout) && (rec.Model.Usage == nil || finite(rec.Model.Usage.Billed)))
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// appendKey appends a member's separator and key: ,"name":
func appendKey(b []byte, name string) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	return append(b, '"', ':')
}

func appendStringField(b []byte, name, v string) []byte {
	if v == "" {
		return b
	}
	b = appendKey(b, name)
	return appendJSONString(b, v)
}

func appendIntField(b []byte, name string, v int) []byte {
	if v == 0 {
		return b
	}
	b = appendKey(b, name)
	return strconv.AppendInt(b, int64(v), 10)
}

// appendFloatField formats v as encoding/json does: 'f' format, or 'e'
// for very small and very large magnitudes, with a one-digit negative
// exponent written without its leading zero.
func appendFloatField(b []byte, name string, v float64) []byte {
	if v == 0 {
		return b
	}
	b = appendKey(b, name)
	format := byte('f')
	if abs := math.Abs(v); abs < 1e-6 || abs >= 1e21 {
		format = 'e'
	}
	b = strconv.AppendFloat(b, v, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// appendJSONString quotes s as json.Marshal does (HTML-safe escapes).
func appendJSONString(b []byte, s string) []byte { return jsonscan.AppendQuoteHTML(b, s) }
