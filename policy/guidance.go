package policy

// ModelGuidance configures the reminders the model front adds to the main
// thread to suggest a branch (foldproxy.model.guidance): after a number of
// unfolded tool-result tokens, and when a failing call is repeated. Every
// field is optional; the methods give the effective values.
type ModelGuidance struct {
	// Enabled turns the reminders on or off. Default true.
	Enabled *bool `json:"enabled,omitempty"`
	// AfterTokens: a reminder once the main thread has taken in more than
	// this many tokens of tool results since the last fold. Default 8000.
	AfterTokens int `json:"afterTokens,omitempty"`
	// Repeats adds a reminder when a call that failed is repeated with the
	// same input. Default true.
	Repeats *bool `json:"repeats,omitempty"`
}

// DefaultGuidanceAfterTokens is ModelGuidance.AfterTokens's default.
const DefaultGuidanceAfterTokens = 8000

// On reports whether reminders are added.
func (g ModelGuidance) On() bool { return g.Enabled == nil || *g.Enabled }

// Tokens is the effective AfterTokens.
func (g ModelGuidance) Tokens() int {
	if g.AfterTokens == 0 {
		return DefaultGuidanceAfterTokens
	}
	return g.AfterTokens
}

// OnRepeats reports whether a repeated failing call gets a reminder.
func (g ModelGuidance) OnRepeats() bool { return g.Repeats == nil || *g.Repeats }

func (g ModelGuidance) validate() error {
	if g.AfterTokens < 0 {
		return invalid("model.guidance.afterTokens", "%d is negative; give a number of tokens (default %d)", g.AfterTokens, DefaultGuidanceAfterTokens)
	}
	if g.AfterTokens > 0 && g.AfterTokens < 500 {
		return invalid("model.guidance.afterTokens", "%d is below the minimum of 500 (a reminder on every small result would cost more than it saves)", g.AfterTokens)
	}
	return nil
}
