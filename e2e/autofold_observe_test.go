package e2e

// Observe mode and the billing figures end to end: with
// foldproxy.model.autofold.mode "observe", every request reaches the model
// API byte for byte as the client sent it, while the audit log and
// foldproxy report say what folding would have saved, under names that
// cannot be taken for real savings; with the default mode, the same
// conversation is folded and the report's billed input is what the model
// API reported in its answers' usage.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// recordingAPI is a model API that records every body it receives and
// answers with a streamed message reporting a fixed usage.
type recordingAPI struct {
	mu     sync.Mutex
	bodies [][]byte
}

func (a *recordingAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	a.bodies = append(a.bodies, b)
	a.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"x\",\"usage\":{\"input_tokens\":10,\"cache_creation_input_tokens\":100,\"cache_read_input_tokens\":1000,\"output_tokens\":1}}}\n\n")
	fmt.Fprint(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":5}}\n\n")
	fmt.Fprint(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
}

// observeConversation sends n growing requests of Bash results to the
// model front at base and returns what it sent.
func observeConversation(t *testing.T, base string, n int) [][]byte {
	t.Helper()
	var msgs []string
	msgs = append(msgs, `{"role":"user","content":"go"}`)
	var sent [][]byte
	for i := 1; i <= n; i++ {
		var out strings.Builder
		for l := 0; l < 60; l++ {
			fmt.Fprintf(&out, "result %d line %d: some tool output to read\n", i, l)
		}
		q, _ := json.Marshal(out.String())
		msgs = append(msgs,
			fmt.Sprintf(`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_o%02d","name":"Bash","input":{"command":"grep -rn x%d ."}}]}`, i, i),
			fmt.Sprintf(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_o%02d","content":%s}]}`, i, q))
		body := []byte(`{"model":"x","max_tokens":100,"stream":true,"tools":[{"name":"Bash","input_schema":{"type":"object"}}],"messages":[` + strings.Join(msgs, ",") + `]}`)
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Claude-Code-Session-Id", "observe-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(data, []byte("message_stop")) {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, data)
		}
		sent = append(sent, body)
	}
	return sent
}

type modelReport struct {
	Model struct {
		Sessions []struct {
			Session string `json:"session"`
		} `json:"sessions"`
		Total struct {
			Requests         int     `json:"requests"`
			Received         int     `json:"tokens_received"`
			Forwarded        int     `json:"tokens_forwarded"`
			Folds            int     `json:"folds"`
			FoldSaved        int     `json:"fold_saved_tokens"`
			WouldFolds       int     `json:"observe_would_fold"`
			WouldSave        int     `json:"observe_would_save_tokens"`
			UsageRequests    int     `json:"usage_requests"`
			CacheRead        int     `json:"usage_cache_read"`
			Billed           float64 `json:"billed_input"`
			EstimatedWithout float64 `json:"billed_input_without_estimate"`
		} `json:"total"`
		Folds []struct {
			Handle string `json:"handle"`
			Kind   string `json:"kind"`
		} `json:"folds"`
	} `json:"model"`
}

func readModelReport(t *testing.T, state string) modelReport {
	t.Helper()
	out, err := exec.Command(proxyBin(t), "report", "--audit", filepath.Join(state, "audit.jsonl"), "--json").Output()
	if err != nil {
		t.Fatalf("foldproxy report: %v", err)
	}
	var r modelReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("report --json: %v\n%s", err, out)
	}
	return r
}

func TestAutoFoldObserveByteForByte(t *testing.T) {
	for _, mode := range []string{"observe", "on"} {
		t.Run(mode, func(t *testing.T) {
			api := &recordingAPI{}
			srv := httptest.NewServer(api)
			defer srv.Close()
			state := t.TempDir()
			cfg := writeConfig(t, map[string]any{}, map[string]any{"model": map[string]any{
				"anthropicURL": srv.URL, "autofold": map[string]any{"mode": mode}}})
			addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
			p := startProcess(t, "foldproxy --listen "+addr, exec.Command(proxyBin(t), "serve", "--config", cfg, "--listen", addr, "--state", state))
			waitListening(testContext(t, 60*time.Second), t, p, addr)
			base := "http://" + addr
			const n = 30
			sent := observeConversation(t, base, n)
			api.mu.Lock()
			got := api.bodies
			api.mu.Unlock()
			if len(got) != n {
				t.Fatalf("the model API received %d requests, want %d", len(got), n)
			}
			changed := 0
			for i := range sent {
				if !bytes.Equal(got[i], sent[i]) {
					changed++
				}
			}
			// A request's audit record is written once its answer is
			// relayed; stopping foldproxy closes the log with every record.
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case <-p.done:
			case <-testContext(t, 60*time.Second).Done():
				t.Fatal("foldproxy did not stop on SIGTERM")
			}
			rep := readModelReport(t, state)
			tot := rep.Model.Total
			if tot.Requests != n || len(rep.Model.Sessions) != 1 || tot.UsageRequests != n || tot.CacheRead != 1000*n || tot.Billed != float64(n)*(10+0.1*1000+1.25*100) {
				t.Fatalf("report: %+v", tot)
			}
			switch mode {
			case "observe":
				if changed != 0 {
					t.Fatalf("observe mode changed %d of %d requests", changed, n)
				}
				if tot.WouldFolds == 0 || tot.WouldSave == 0 || tot.Folds != 0 || tot.FoldSaved != 0 || tot.Forwarded != tot.Received || len(rep.Model.Folds) != 0 {
					t.Fatalf("observe mode's report: %+v", tot)
				}
			case "on":
				if changed == 0 || tot.Folds == 0 || tot.FoldSaved == 0 || tot.WouldFolds != 0 || tot.Forwarded >= tot.Received || len(rep.Model.Folds) != tot.Folds {
					t.Fatalf("on: %d requests changed; report %+v", changed, tot)
				}
				if tot.EstimatedWithout <= tot.Billed {
					t.Fatalf("the estimate without foldproxy (%.0f) is not above the billed input (%.0f)", tot.EstimatedWithout, tot.Billed)
				}
			}
			t.Logf("%s: %d of %d requests changed; report %+v", mode, changed, n, tot)
		})
	}
}
