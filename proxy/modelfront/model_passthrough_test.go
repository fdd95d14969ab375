package modelfront

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

const testAWSKey = "AKIAIOSFODNN7EXAMPLE"

var reTestAWS = regexp.MustCompile(`AKIA[0-9A-Z]{16}`)

func scrubAWS(_ context.Context, s string) (string, error) {
	return reTestAWS.ReplaceAllString(s, "[REDACTED:aws-access-token]"), nil
}

// Every /v1/ request that carries a conversation reaches the model API
// scrubbed: message batches, paths with a trailing slash, other JSON
// bodies; a key twice in one object is refused naming the key, and a
// compressed body refused.
func TestModelScrubsEveryPath(t *testing.T) {
	up := newModelUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	})
	url, obs, _ := newModelTest(t, up, func(o *Options) { o.Wire.Scrub = scrubAWS })
	msg := `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"key ` + testAWSKey + `"}]}`
	for _, tc := range []struct {
		name, path, body string
		header           map[string]string
		status           int
		want             string // in the error answered, when status is not 200
	}{
		{"batches", "/v1/messages/batches", `{"requests":[{"custom_id":"a","params":` + msg + `}]}`, nil, 200, ""},
		{"trailing slash", "/v1/messages/", msg, map[string]string{"Anthropic-Version": "2023-06-01"}, 200, ""},
		{"double slash", "/v1//messages", msg, nil, 200, ""},
		{"completions", "/v1/completions", `{"model":"m","prompt":"key ` + testAWSKey + `"}`, nil, 200, ""},
		{"duplicate key folded", "/v1/messages", `{"model":"m","messages":[{"role":"user","content":"x","content":"key ` + testAWSKey + `"}]}`, nil, 400, `the key \"content\" twice`},
		{"duplicate key batch", "/v1/messages/batches", `{"requests":[],"requests":[{"custom_id":"a","params":` + msg + `}]}`, nil, 400, `the key \"requests\" twice`},
		{"compressed batch", "/v1/messages/batches", `{}`, map[string]string{"Content-Encoding": "gzip"}, 415, "Content-Encoding"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := up.count()
			req, _ := http.NewRequest(http.MethodPost, url+tc.path, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got := string(readAll(t, resp.Body))
			resp.Body.Close()
			obs.last(t)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, got)
			}
			if tc.status != 200 {
				if !strings.Contains(got, tc.want) || up.count() != before {
					t.Errorf("answer %s, want it to say %q, and nothing forwarded", got, tc.want)
				}
				return
			}
			_, body := up.last(t)
			if strings.Contains(string(body), testAWSKey) || !strings.Contains(string(body), "[REDACTED:aws-access-token]") {
				t.Errorf("the model API received %s", body)
			}
		})
	}
}
