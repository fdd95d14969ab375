package memory_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/foldproxy/foldproxy/fold/memory"
	"github.com/foldproxy/foldproxy/policy"
)

// embeddingsServer answers /v1/embeddings as an OpenAI-compatible server:
// texts mentioning "alpha" point one way, the rest the other. fail makes
// it answer 500.
func embeddingsServer(t *testing.T, fail *bool) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/embeddings" || r.Header.Get("Authorization") != "Bearer k" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		if *fail {
			http.Error(w, "overloaded", http.StatusInternalServerError)
			return
		}
		var req struct {
			Model string   `json:"model"`
			Input []string `json:"input"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Model != "m" {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		type item struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		}
		var out struct {
			Data []item `json:"data"`
		}
		for i, s := range req.Input {
			v := []float32{0, 1}
			if strings.Contains(s, "alpha") {
				v = []float32{1, 0}
			}
			out.Data = append(out.Data, item{i, v})
		}
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1/embeddings"
}

func TestDenseRerank(t *testing.T) {
	fail := false
	e, err := memory.NewOpenAIEmbedder(policy.Embeddings{URL: embeddingsServer(t, &fail), Model: "m", APIKey: "k"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := e.Embed(t.Context(), []string{"alpha", "beta"})
	if err != nil || len(v) != 2 || v[0][0] != 1 || v[1][1] != 1 {
		t.Fatalf("Embed = %v, %v", v, err)
	}
	lexical, _ := newService(t, nil)
	dense := newServiceWith(t, e)
	for _, svc := range []*memory.Service{lexical, dense} {
		for _, c := range []memory.Candidate{
			{Title: "widget frobnicate alpha", Content: "frobnicate the widget with alpha", Confidence: 0.95},
			{Title: "widget frobnicate beta", Content: "frobnicate the widget with beta", Confidence: 0.9},
		} {
			if _, _, err := svc.Add(t.Context(), c); err != nil {
				t.Fatal(err)
			}
		}
	}
	first := func(svc *memory.Service) string {
		items, err := svc.Search(t.Context(), "frobnicate widget gamma", 2, nil)
		if err != nil || len(items) != 2 {
			t.Fatalf("Search: %v %v", items, err)
		}
		return items[0].Title
	}
	if got := first(lexical); got != "widget frobnicate alpha" {
		t.Fatalf("lexical first = %q, want the higher confidence on a tie", got)
	}
	if got := first(dense); got != "widget frobnicate beta" {
		t.Fatalf("with embeddings first = %q, want the one whose embedding matches the query's", got)
	}
	// An embeddings failure leaves lexical retrieval working.
	fail = true
	if _, _, err := dense.Add(t.Context(), memory.Candidate{Title: "gizmo", Content: "gizmo calibration steps"}); err != nil {
		t.Fatalf("Add with embeddings down: %v", err)
	}
	if items, err := dense.Search(t.Context(), "gizmo calibration", 1, nil); err != nil || len(items) != 1 {
		t.Fatalf("Search with embeddings down: %v %v", items, err)
	}
	if _, err := memory.NewOpenAIEmbedder(policy.Embeddings{}, nil); err == nil {
		t.Fatal("an embedder without a URL")
	}
}

// newServiceWith is newService with an embedder.
func newServiceWith(t *testing.T, e memory.Embedder) *memory.Service {
	t.Helper()
	base, _ := newService(t, nil)
	svc, err := memory.New(memory.Options{
		Settings: base.Settings(), Store: base.Store(), Embed: e,
		Count: func(s string) int { return len(strings.Fields(s)) },
		Scrub: func(_ context.Context, s string) (string, error) { return s, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}
