package memory

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/foldproxy/foldproxy/policy"
)

// OpenAIEmbedder calls an OpenAI-compatible /v1/embeddings endpoint.
type OpenAIEmbedder struct {
	url, model, key string
	client          *http.Client
}

// NewOpenAIEmbedder returns an Embedder for set; client nil means one with
// a 30 s timeout.
func NewOpenAIEmbedder(set policy.Embeddings, client *http.Client) (*OpenAIEmbedder, error) {
	if set.URL == "" {
		return nil, fmt.Errorf("%w: memory.embeddings.url is empty", ErrInvalid)
	}
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second}
	}
	return &OpenAIEmbedder{url: set.URL, model: set.Model, key: set.APIKey, client: client}, nil
}

// maxEmbeddingResponse bounds the answer read from the endpoint.
const maxEmbeddingResponse = 64 << 20

// Embed implements Embedder.
func (e *OpenAIEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	body, err := json.Marshal(map[string]any{"model": e.model, "input": texts})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("embeddings: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if e.key != "" {
		req.Header.Set("Authorization", "Bearer "+e.key)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("embeddings: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxEmbeddingResponse))
	if err != nil {
		return nil, fmt.Errorf("embeddings: reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("embeddings: %s answered %s", e.url, resp.Status)
	}
	var ans struct {
		Data []struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &ans); err != nil {
		return nil, fmt.Errorf("embeddings: the answer is not an embeddings list: %v", err)
	}
	out := make([][]float32, len(texts))
	for _, d := range ans.Data {
		if d.Index < 0 || d.Index >= len(texts) || len(d.Embedding) == 0 {
			return nil, fmt.Errorf("embeddings: the answer has a bad item (index %d, %d dimensions)", d.Index, len(d.Embedding))
		}
		out[d.Index] = d.Embedding
	}
	for i, v := range out {
		if v == nil {
			return nil, fmt.Errorf("embeddings: the answer has no embedding for input %d", i)
		}
	}
	return out, nil
}
