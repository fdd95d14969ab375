package policy

import "slices"

// ModelAutoFold configures automatic folding on the model wire
// (foldproxy.model.autofold): tool results the agent did not fold itself
// leave the conversation the model sees, batched and priced against the
// prompt cache, each replaced by a stub naming a recall handle. Every
// field is optional; the methods give the effective values.
type ModelAutoFold struct {
	// Mode is "on" (the default), "observe" (forward every request as it
	// came and report what folding would have saved) or "off".
	Mode string `json:"mode,omitempty"`
	// KeepRecent: the newest results never folded as stale, besides every
	// result of the newest turn. Default 1.
	KeepRecent int `json:"keepRecent,omitempty"`
	// Trigger: stale results are folded only once the conversation's
	// tool-result tokens, folded or not, pass it. Default 2000.
	Trigger int `json:"trigger,omitempty"`
	// MinTokens: results smaller than this are never folded. Default 100.
	MinTokens int `json:"minTokens,omitempty"`
	// MinBatch: a batch of folds takes at least this many tokens out of
	// the conversation, stubs deducted. Default 300.
	MinBatch int `json:"minBatch,omitempty"`
	// Oversize: a result above this many tokens keeps only its first
	// KeepHead and last KeepTail tokens; -1 turns the rule off. Defaults
	// 10000, 4000, 2000.
	Oversize int `json:"oversize,omitempty"`
	KeepHead int `json:"keepHead,omitempty"`
	KeepTail int `json:"keepTail,omitempty"`
	// Superseded folds the earlier read of a file read again and the
	// earlier run of a command run again. Default true.
	Superseded *bool `json:"superseded,omitempty"`
	// Repeats folds a result repeated later byte for byte. Default true.
	Repeats *bool `json:"repeats,omitempty"`
	// Exclude names tools (as the model sees them, e.g. "Read",
	// "mcp__fs__read_text_file") whose results are never folded.
	Exclude []string `json:"exclude,omitempty"`
	// MinRequests: a batch is assumed to be read by at least this many
	// later requests. Default 20.
	MinRequests int `json:"minRequests,omitempty"`
}

// AutoFold modes.
const (
	AutoFoldOn      = "on"
	AutoFoldObserve = "observe"
	AutoFoldOff     = "off"
)

// AutoFold defaults.
const (
	DefaultAutoFoldKeepRecent  = 1
	DefaultAutoFoldTrigger     = 2000
	DefaultAutoFoldMinTokens   = 100
	DefaultAutoFoldMinBatch    = 300
	DefaultAutoFoldOversize    = 10000
	DefaultAutoFoldKeepHead    = 4000
	DefaultAutoFoldKeepTail    = 2000
	DefaultAutoFoldMinRequests = 20
)

// EffectiveMode is Mode with its default.
func (a ModelAutoFold) EffectiveMode() string {
	if a.Mode == "" {
		return AutoFoldOn
	}
	return a.Mode
}

// OnSuperseded and OnRepeats give the effective switches.
func (a ModelAutoFold) OnSuperseded() bool { return a.Superseded == nil || *a.Superseded }

// OnRepeats reports whether repeated results are folded.
func (a ModelAutoFold) OnRepeats() bool { return a.Repeats == nil || *a.Repeats }

func (a *ModelAutoFold) fill() {
	num := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	num(&a.KeepRecent, DefaultAutoFoldKeepRecent)
	num(&a.Trigger, DefaultAutoFoldTrigger)
	num(&a.MinTokens, DefaultAutoFoldMinTokens)
	num(&a.MinBatch, DefaultAutoFoldMinBatch)
	num(&a.Oversize, DefaultAutoFoldOversize)
	num(&a.KeepHead, DefaultAutoFoldKeepHead)
	num(&a.KeepTail, DefaultAutoFoldKeepTail)
	num(&a.MinRequests, DefaultAutoFoldMinRequests)
}

func (a ModelAutoFold) validate() error {
	switch a.Mode {
	case "", AutoFoldOn, AutoFoldObserve, AutoFoldOff:
	default:
		return invalid("model.autofold.mode", "%q is not a mode: use \"on\", \"observe\" or \"off\"", a.Mode)
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"keepRecent", a.KeepRecent}, {"trigger", a.Trigger}, {"minTokens", a.MinTokens},
		{"minBatch", a.MinBatch}, {"keepHead", a.KeepHead}, {"keepTail", a.KeepTail}, {"minRequests", a.MinRequests},
	} {
		if f.v < 0 {
			return invalid("model.autofold."+f.name, "%d is negative", f.v)
		}
	}
	if a.MinTokens > 0 && a.MinTokens < 50 {
		return invalid("model.autofold.minTokens", "%d is below the minimum of 50 (a stub costs about 40 tokens)", a.MinTokens)
	}
	if a.Oversize != -1 && a.Oversize < 0 {
		return invalid("model.autofold.oversize", "%d: give a number of tokens, or -1 to turn the rule off", a.Oversize)
	}
	if a.Oversize > 0 && a.KeepHead+a.KeepTail >= a.Oversize {
		return invalid("model.autofold.oversize", "%d leaves nothing to fold: keepHead (%d) and keepTail (%d) must together stay below it", a.Oversize, a.KeepHead, a.KeepTail)
	}
	if a.Oversize > 0 && a.KeepHead < 100 {
		return invalid("model.autofold.keepHead", "%d is below the minimum of 100 tokens", a.KeepHead)
	}
	if slices.Contains(a.Exclude, "") {
		return invalid("model.autofold.exclude", "holds an empty tool name")
	}
	return nil
}

// ModelPrices are the prices of cached input tokens relative to uncached
// ones (foldproxy.model.prices): what foldproxy weighs its batches by and
// bills the usage the model APIs report at. Defaults: Anthropic's
// published ratios, 0.1 for a cache read and 1.25 for a cache write.
type ModelPrices struct {
	CacheRead  float64 `json:"cacheRead,omitempty"`
	CacheWrite float64 `json:"cacheWrite,omitempty"`
}

// Price defaults.
const (
	DefaultCacheReadPrice  = 0.1
	DefaultCacheWritePrice = 1.25
)

func (p *ModelPrices) fill() {
	if p.CacheRead == 0 {
		p.CacheRead = DefaultCacheReadPrice
	}
	if p.CacheWrite == 0 {
		p.CacheWrite = DefaultCacheWritePrice
	}
}

func (p ModelPrices) validate() error {
	if p.CacheRead <= 0 || p.CacheRead > 1 {
		return invalid("model.prices.cacheRead", "%v: give the price of a cached token read relative to an uncached one, above 0 and at most 1 (default %v)", p.CacheRead, DefaultCacheReadPrice)
	}
	if p.CacheWrite < p.CacheRead || p.CacheWrite > 10 {
		return invalid("model.prices.cacheWrite", "%v: give the price of a token written to the cache relative to an uncached one, at least cacheRead and at most 10 (default %v)", p.CacheWrite, DefaultCacheWritePrice)
	}
	return nil
}
