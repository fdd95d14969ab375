package main

import (
	"os"

	"github.com/foldproxy/foldproxy/policy/redact"
)

// configRedactor redacts every credential of the configuration from what
// foldproxy writes (its logs, the errors it reports): the upstreams'
// (upstreams.Entry.Credentials), the token of its listeners, the memory
// backends' API keys, and the credentials in the model and remote MCP URLs.
// Each Upstream also redacts its own entry's from the errors it returns,
// which reach the agent (instructions, branch_status, tool errors) and the
// audit log.
func configRedactor(cfg *fileConfig, token string) *redact.Redactor {
	var vals []string
	for _, e := range cfg.Servers {
		vals = append(vals, e.Credentials()...)
	}
	st := cfg.Settings
	vals = append(vals, token, st.AuthToken, st.Memory.Qdrant.APIKey, st.Memory.Embeddings.APIKey,
		os.Getenv("QDRANT_API_KEY"), os.Getenv("EMBEDDINGS_API_KEY"))
	for _, u := range []string{st.Model.AnthropicURL, st.Model.OpenAIURL, st.Memory.Qdrant.URL, st.Memory.Embeddings.URL} {
		vals = append(vals, redact.FromURL(u)...)
	}
	for _, m := range st.Proxy.MCP {
		vals = append(vals, redact.FromURL(m.URL)...)
	}
	return redact.New(vals...)
}
