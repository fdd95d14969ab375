package modelfront

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"encoding/json"
	"io"
	"strings"
)

// Usage is what a model API reported of one answer's tokens: input
// not read from the prompt cache, read from it, written to it, and the
// output. Known is false when the answer carried no usage the front could
// read (an error, an encoding it does not decode, a stream cut short).
type Usage struct {
	Known      bool
	Input      int
	CacheRead  int
	CacheWrite int
	Output     int
}

// Total is every input token of the answer, cached or not.
func (u Usage) Total() int { return u.Input + u.CacheRead + u.CacheWrite }

// Billed is the input billed at the prices given (relative to an uncached
// token): uncached input, plus reads and writes weighted.
func (u Usage) Billed(read, write float64) float64 {
	return float64(u.Input) + read*float64(u.CacheRead) + write*float64(u.CacheWrite)
}

// usageTap reads the usage out of a model answer as it is relayed, without
// holding the answer back: an event stream is parsed event by event (the
// usage of Anthropic's message_start and message_delta, OpenAI Chat's last
// chunk, the Responses API's response.completed), a JSON answer is kept up
// to maxUsageBody bytes and read at its end. gzip and deflate answers are
// decoded on the side; other encodings are relayed without usage.
type usageTap struct {
	rc     io.ReadCloser
	stream bool
	usage  *Usage
	recall *recallCalls // nil: no recall tool to watch for

	// dec, when the answer is compressed, decodes what was read so far
	// from pr's other end.
	pw   *io.PipeWriter
	done chan struct{}

	line []byte // the event stream's current line
	body []byte // a JSON answer
	over bool   // the JSON answer passed maxUsageBody
	fin  bool
}

// maxUsageBody bounds the JSON answer kept to read its usage.
const maxUsageBody = 8 << 20

func newUsageTap(rc io.ReadCloser, contentType, encoding string, usage *Usage, recall *recallCalls) io.ReadCloser {
	mt := strings.ToLower(strings.TrimSpace(strings.SplitN(contentType, ";", 2)[0]))
	t := &usageTap{rc: rc, stream: mt == "text/event-stream", usage: usage, recall: recall}
	if !t.stream && mt != "application/json" {
		return rc
	}
	switch strings.ToLower(strings.TrimSpace(encoding)) {
	case "", "identity":
	case "gzip", "deflate":
		pr, pw := io.Pipe()
		t.pw, t.done = pw, make(chan struct{})
		enc := strings.ToLower(strings.TrimSpace(encoding))
		go func() {
			defer close(t.done)
			var r io.Reader
			if enc == "gzip" {
				zr, err := gzip.NewReader(pr)
				if err != nil {
					_ = pr.CloseWithError(err)
					return
				}
				r = zr
			} else {
				r = flate.NewReader(pr)
			}
			buf := make([]byte, 32<<10)
			for {
				n, err := r.Read(buf)
				t.feed(buf[:n])
				if err != nil {
					if err == io.EOF {
						t.finish()
					}
					_ = pr.CloseWithError(err)
					return
				}
			}
		}()
	default:
		return rc
	}
	return t
}

func (t *usageTap) Read(p []byte) (int, error) {
	n, err := t.rc.Read(p)
	if n > 0 {
		if t.pw != nil {
			_, _ = t.pw.Write(p[:n]) // a decoding error only loses the usage
		} else {
			t.feed(p[:n])
		}
	}
	if err == io.EOF {
		if t.pw != nil {
			_ = t.pw.Close()
			<-t.done
		} else {
			t.finish()
		}
	}
	return n, err
}

func (t *usageTap) Close() error {
	if t.pw != nil {
		_ = t.pw.CloseWithError(io.ErrUnexpectedEOF)
		<-t.done
	}
	return t.rc.Close()
}

// feed takes the next bytes of the (decoded) answer.
func (t *usageTap) feed(b []byte) {
	if !t.stream {
		if t.over {
			return
		}
		if len(t.body)+len(b) > maxUsageBody {
			t.over, t.body = true, nil
			return
		}
		t.body = append(t.body, b...)
		return
	}
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if len(t.line)+len(b) <= maxUsageBody {
				t.line = append(t.line, b...)
			}
			return
		}
		t.line = append(t.line, b[:i]...)
		t.event(t.line)
		t.line = t.line[:0]
		b = b[i+1:]
	}
}

// event reads one line of an event stream.
func (t *usageTap) event(line []byte) {
	line = bytes.TrimRight(line, "\r")
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return
	}
	data = bytes.TrimSpace(data)
	if t.recall != nil {
		t.recall.event(data)
	}
	if bytes.Contains(data, []byte(`"usage"`)) {
		readUsage(data, t.usage)
	}
}

// finish reads a JSON answer at its end.
func (t *usageTap) finish() {
	if t.fin {
		return
	}
	t.fin = true
	if !t.stream && !t.over && len(t.body) > 0 {
		readUsage(t.body, t.usage)
		if t.recall != nil {
			t.recall.answer(t.body)
		}
	}
	if t.stream && t.recall != nil {
		t.recall.end()
	}
}

// wireUsage holds the usage objects of the three dialects' answers and
// stream events.
type wireUsage struct {
	// Anthropic
	InputTokens              *int `json:"input_tokens"`
	OutputTokens             *int `json:"output_tokens"`
	CacheReadInputTokens     *int `json:"cache_read_input_tokens"`
	CacheCreationInputTokens *int `json:"cache_creation_input_tokens"`
	// OpenAI Chat
	PromptTokens        *int `json:"prompt_tokens"`
	CompletionTokens    *int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	// Responses (input_tokens, output_tokens as Anthropic's, cached apart)
	InputTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
}

// readUsage merges the usage of one answer or event into u: later events
// carry the final counts (Anthropic's message_delta repeats the input
// counts and adds the output).
func readUsage(data []byte, u *Usage) {
	var v struct {
		Usage   *wireUsage `json:"usage"`
		Message *struct {
			Usage *wireUsage `json:"usage"`
		} `json:"message"`
		Response *struct {
			Usage *wireUsage `json:"usage"`
		} `json:"response"`
	}
	if json.Unmarshal(data, &v) != nil {
		return
	}
	w := v.Usage
	if w == nil && v.Message != nil {
		w = v.Message.Usage
	}
	if w == nil && v.Response != nil {
		w = v.Response.Usage
	}
	if w == nil {
		return
	}
	set := func(dst *int, src *int) {
		if src != nil {
			*dst = *src
			u.Known = true
		}
	}
	switch {
	case w.PromptTokens != nil: // Chat: prompt_tokens holds the cached ones
		cached := 0
		if w.PromptTokensDetails != nil {
			cached = w.PromptTokensDetails.CachedTokens
		}
		u.Input, u.CacheRead, u.Known = max(*w.PromptTokens-cached, 0), cached, true
		set(&u.Output, w.CompletionTokens)
	case w.InputTokensDetails != nil: // Responses: input_tokens holds the cached ones
		if w.InputTokens != nil {
			u.Input, u.CacheRead, u.Known = max(*w.InputTokens-w.InputTokensDetails.CachedTokens, 0), w.InputTokensDetails.CachedTokens, true
		}
		set(&u.Output, w.OutputTokens)
	default: // Anthropic
		set(&u.Input, w.InputTokens)
		set(&u.CacheRead, w.CacheReadInputTokens)
		set(&u.CacheWrite, w.CacheCreationInputTokens)
		set(&u.Output, w.OutputTokens)
	}
}
