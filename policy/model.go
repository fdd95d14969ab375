package policy

import (
	"net/url"
	"strings"
)

// Model configures the model front: the model APIs served on the HTTP
// listener (Anthropic Messages, OpenAI Chat Completions and Responses),
// whose requests foldproxy folds and forwards.
type Model struct {
	// AnthropicURL is where Anthropic requests go: the request's path
	// (/v1/messages, ...) is appended to it. Default https://api.anthropic.com.
	AnthropicURL string `json:"anthropicURL,omitempty"`
	// OpenAIURL is where OpenAI-style requests go (/v1/chat/completions,
	// /v1/responses, ...), the path appended the same way. Default
	// https://api.openai.com.
	OpenAIURL string `json:"openaiURL,omitempty"`
	// MaxRequestBytes bounds one model request body; a larger one is
	// refused with 413. Default 32 MiB, the Messages API's own limit.
	MaxRequestBytes int64 `json:"maxRequestBytes,omitempty"`
	// Guidance configures the reminders that suggest a branch.
	Guidance ModelGuidance `json:"guidance,omitzero"`
	// AutoFold configures automatic folding.
	AutoFold ModelAutoFold `json:"autofold,omitzero"`
	// Prices are cached input tokens' prices relative to uncached ones.
	Prices ModelPrices `json:"prices,omitzero"`
}

// Model defaults.
const (
	DefaultAnthropicURL         = "https://api.anthropic.com"
	DefaultOpenAIURL            = "https://api.openai.com"
	DefaultModelMaxRequestBytes = 32 << 20
)

// defaultModel is Model with every default filled in.
func defaultModel() Model {
	var m Model
	m.fill()
	return m
}

func (m *Model) fill() {
	if m.AnthropicURL == "" {
		m.AnthropicURL = DefaultAnthropicURL
	}
	if m.OpenAIURL == "" {
		m.OpenAIURL = DefaultOpenAIURL
	}
	if m.MaxRequestBytes == 0 {
		m.MaxRequestBytes = DefaultModelMaxRequestBytes
	}
	m.AutoFold.fill()
	m.Prices.fill()
}

func (m Model) validate() error {
	for _, f := range []struct{ name, v string }{
		{"model.anthropicURL", m.AnthropicURL},
		{"model.openaiURL", m.OpenAIURL},
	} {
		if err := checkBaseURL(f.v); err != "" {
			return invalid(f.name, "%q %s", f.v, err)
		}
	}
	if err := m.Guidance.validate(); err != nil {
		return err
	}
	if err := m.AutoFold.validate(); err != nil {
		return err
	}
	if err := m.Prices.validate(); err != nil {
		return err
	}
	if m.MaxRequestBytes < 1024 {
		return invalid("model.maxRequestBytes", "%d is below the minimum of 1024", m.MaxRequestBytes)
	}
	return nil
}

// checkBaseURL says what is wrong with a model API base URL, "" if nothing.
// Credentials belong in the agent's own headers, never in the URL, where
// they would end up in logs.
func checkBaseURL(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "is not a URL"
	case u.Scheme != "http" && u.Scheme != "https":
		return "must be an http:// or https:// URL"
	case u.Host == "":
		return "has no host"
	case u.User != nil:
		return "must not carry credentials (the agent's own x-api-key or Authorization header is passed through)"
	case u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(s, "?"):
		return "must have no query or fragment (the request path is appended to it)"
	}
	return ""
}
