// Package qdrant is the memory backend for teams whose agents run on many
// machines: memories live in Qdrant (github.com/qdrant/go-client, gRPC),
// one collection per project, each memory a point with a sparse vector
// "text" (the lexical BM25 weights of memory.DocVector) under Qdrant's IDF
// modifier, and a payload with the memory and the fields that filters use
// (project, principal, kind, confidence, suspicious, tags). Qdrant scores a
// query exactly as the embedded index does; memory.Rank then breaks ties
// and applies the optional dense rerank the same way.
package qdrant

import (
	"cmp"
	"context"
	"crypto/sha1"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	qc "github.com/qdrant/go-client/qdrant"

	"github.com/foldproxy/foldproxy/fold/memory"
	"github.com/foldproxy/foldproxy/policy"
)

var _ memory.Store = (*Store)(nil)

// vectorName is the sparse vector of every point.
const vectorName = "text"

// Store keeps memories in Qdrant.
type Store struct {
	client  *qc.Client
	prefix  string // collection name prefix
	project string // the project looked in first by Get and Delete

	mu    sync.Mutex
	ready map[string]bool // collections known to exist
}

// Options configure Open.
type Options struct {
	// Settings locate the server (URL, APIKey) and name the collections.
	Settings policy.Qdrant
	// Project is the project that Get and Delete look in first.
	Project string
	// Config, when not nil, replaces the client configuration derived from
	// Settings (tests pass their own dial options).
	Config *qc.Config
}

// ParseURL turns memory.qdrant.url ("host:port", "http://host:port" or
// "https://host:port") into a client configuration; the port defaults to
// Qdrant's gRPC port, 6334.
func ParseURL(raw, apiKey string) (*qc.Config, error) {
	if raw == "" {
		raw = "localhost:6334"
	}
	useTLS := false
	if strings.Contains(raw, "://") {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: memory.qdrant.url %q: %v", memory.ErrInvalid, raw, err)
		}
		switch u.Scheme {
		case "http", "grpc":
		case "https", "grpcs":
			useTLS = true
		default:
			return nil, fmt.Errorf("%w: memory.qdrant.url %q: the scheme must be http or https", memory.ErrInvalid, raw)
		}
		raw = u.Host
	}
	host, port := raw, 6334
	if h, p, ok := strings.Cut(raw, ":"); ok && !strings.Contains(p, ":") {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 65535 {
			return nil, fmt.Errorf("%w: memory.qdrant.url %q: bad port %q", memory.ErrInvalid, raw, p)
		}
		host, port = h, n
	}
	if host == "" {
		return nil, fmt.Errorf("%w: memory.qdrant.url %q has no host", memory.ErrInvalid, raw)
	}
	return &qc.Config{Host: host, Port: port, APIKey: apiKey, UseTLS: useTLS, SkipCompatibilityCheck: true}, nil
}

// Open connects to Qdrant. Collections are created when first written.
func Open(ctx context.Context, opts Options) (*Store, error) {
	cfg := opts.Config
	if cfg == nil {
		var err error
		if cfg, err = ParseURL(opts.Settings.URL, opts.Settings.APIKey); err != nil {
			return nil, err
		}
	}
	client, err := qc.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("memory/qdrant: connect to %s:%d: %w", cfg.Host, cfg.Port, err)
	}
	s := &Store{client: client, prefix: cmp.Or(opts.Settings.Collection, "foldproxy_memories"), project: opts.Project, ready: map[string]bool{}}
	// Fail at start rather than at the first branch: list the collections.
	if _, err := client.ListCollections(ctx); err != nil {
		client.Close()
		return nil, fmt.Errorf("memory/qdrant: %s:%d does not answer: %w", cfg.Host, cfg.Port, err)
	}
	return s, nil
}

// Collection is the name of a project's collection.
func (s *Store) Collection(project string) string {
	var b strings.Builder
	for _, r := range project {
		if r < 128 && (r == '-' || r == '_' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')) {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	name := b.String()
	if name == "" {
		name = "default"
	}
	// Distinct projects that sanitize alike stay apart.
	if name != project {
		name += fmt.Sprintf("_%x", sha1.Sum([]byte(project)))[:9]
	}
	return s.prefix + "_" + name
}

// ensure creates a project's collection and its payload indexes once.
func (s *Store) ensure(ctx context.Context, project string) (string, error) {
	name := s.Collection(project)
	s.mu.Lock()
	ok := s.ready[name]
	s.mu.Unlock()
	if ok {
		return name, nil
	}
	exists, err := s.client.CollectionExists(ctx, name)
	if err != nil {
		return "", fmt.Errorf("memory/qdrant: collection %s: %w", name, err)
	}
	if !exists {
		err := s.client.CreateCollection(ctx, &qc.CreateCollection{
			CollectionName: name,
			SparseVectorsConfig: qc.NewSparseVectorsConfig(map[string]*qc.SparseVectorParams{
				vectorName: {Modifier: qc.Modifier_Idf.Enum()},
			}),
		})
		if err != nil && !strings.Contains(err.Error(), "already exists") {
			return "", fmt.Errorf("memory/qdrant: create collection %s: %w", name, err)
		}
		for field, typ := range map[string]qc.FieldType{
			"project": qc.FieldType_FieldTypeKeyword, "principal": qc.FieldType_FieldTypeKeyword,
			"tags": qc.FieldType_FieldTypeKeyword, "confidence": qc.FieldType_FieldTypeFloat,
			"suspicious": qc.FieldType_FieldTypeBool,
		} {
			_, err := s.client.CreateFieldIndex(ctx, &qc.CreateFieldIndexCollection{
				CollectionName: name, FieldName: field, FieldType: typ.Enum(), Wait: qc.PtrOf(true),
			})
			if err != nil {
				return "", fmt.Errorf("memory/qdrant: index %s of %s: %w", field, name, err)
			}
		}
	}
	s.mu.Lock()
	s.ready[name] = true
	s.mu.Unlock()
	return name, nil
}

// pointID is the UUID of a memory's point, derived from its id.
func pointID(id string) *qc.PointId {
	h := sha1.Sum([]byte(id))
	h[6] = (h[6] & 0x0f) | 0x50 // version 5
	h[8] = (h[8] & 0x3f) | 0x80
	return qc.NewIDUUID(fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16]))
}

// record is a memory as stored in the payload, with its dense vector.
type record struct {
	*memory.Memory
	DenseVec []float32 `json:"dense,omitempty"`
}

func payload(m *memory.Memory) (map[string]*qc.Value, error) {
	raw, err := json.Marshal(record{Memory: m, DenseVec: m.Dense})
	if err != nil {
		return nil, err
	}
	tags := make([]*qc.Value, 0, len(m.Tags))
	for _, t := range m.Tags {
		tags = append(tags, qc.NewValueString(t))
	}
	return map[string]*qc.Value{
		"memory":     qc.NewValueString(string(raw)),
		"id":         qc.NewValueString(m.ID),
		"project":    qc.NewValueString(m.Project),
		"principal":  qc.NewValueString(m.Provenance.Principal),
		"kind":       qc.NewValueString(string(m.Kind)),
		"confidence": qc.NewValueDouble(m.Confidence),
		"suspicious": qc.NewValueBool(len(m.Suspicious) > 0),
		"tags":       qc.NewValueFromList(tags...),
	}, nil
}

func decode(p map[string]*qc.Value) (*memory.Memory, error) {
	v, ok := p["memory"]
	if !ok {
		return nil, errors.New("memory/qdrant: a point has no memory payload")
	}
	var r record
	if err := json.Unmarshal([]byte(v.GetStringValue()), &r); err != nil || r.Memory == nil {
		return nil, fmt.Errorf("memory/qdrant: a point's memory payload does not decode: %v", err)
	}
	r.Memory.Dense = r.DenseVec
	return r.Memory, nil
}

// Put implements memory.Store.
func (s *Store) Put(ctx context.Context, m *memory.Memory) error {
	if m == nil || m.ID == "" {
		return fmt.Errorf("%w: memory/qdrant: a memory needs an id", memory.ErrInvalid)
	}
	name, err := s.ensure(ctx, m.Project)
	if err != nil {
		return err
	}
	pl, err := payload(m)
	if err != nil {
		return fmt.Errorf("memory/qdrant: encode %s: %w", m.ID, err)
	}
	sv := memory.DocVector(m.Text())
	vectors := map[string]*qc.Vector{}
	if len(sv.Indices) > 0 {
		vectors[vectorName] = qc.NewVectorSparse(sv.Indices, sv.Values)
	}
	_, err = s.client.Upsert(ctx, &qc.UpsertPoints{
		CollectionName: name, Wait: qc.PtrOf(true),
		Points: []*qc.PointStruct{{Id: pointID(m.ID), Vectors: qc.NewVectorsMap(vectors), Payload: pl}},
	})
	if err != nil {
		return fmt.Errorf("memory/qdrant: upsert %s: %w", m.ID, err)
	}
	return nil
}

// collections lists this store's collections, the default project's first.
func (s *Store) collections(ctx context.Context) ([]string, error) {
	all, err := s.client.ListCollections(ctx)
	if err != nil {
		return nil, fmt.Errorf("memory/qdrant: list collections: %w", err)
	}
	first := s.Collection(s.project)
	out := []string{}
	for _, c := range all {
		if strings.HasPrefix(c, s.prefix+"_") && c != first {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	if slices.Contains(all, first) {
		out = append([]string{first}, out...)
	}
	return out, nil
}

// find returns a memory and its collection.
func (s *Store) find(ctx context.Context, id string) (*memory.Memory, string, error) {
	cols, err := s.collections(ctx)
	if err != nil {
		return nil, "", err
	}
	for _, c := range cols {
		pts, err := s.client.Get(ctx, &qc.GetPoints{CollectionName: c, Ids: []*qc.PointId{pointID(id)}, WithPayload: qc.NewWithPayload(true)})
		if err != nil {
			return nil, "", fmt.Errorf("memory/qdrant: get %s: %w", id, err)
		}
		if len(pts) > 0 {
			m, err := decode(pts[0].GetPayload())
			return m, c, err
		}
	}
	return nil, "", fmt.Errorf("%w: %s", memory.ErrNotFound, id)
}

// Get implements memory.Store.
func (s *Store) Get(ctx context.Context, id string) (*memory.Memory, error) {
	m, _, err := s.find(ctx, id)
	return m, err
}

// Delete implements memory.Store.
func (s *Store) Delete(ctx context.Context, id string) error {
	_, c, err := s.find(ctx, id)
	if err != nil {
		return err
	}
	_, err = s.client.Delete(ctx, &qc.DeletePoints{CollectionName: c, Wait: qc.PtrOf(true), Points: qc.NewPointsSelector(pointID(id))})
	if err != nil {
		return fmt.Errorf("memory/qdrant: delete %s: %w", id, err)
	}
	return nil
}

// List implements memory.Store.
func (s *Store) List(ctx context.Context, project string, all bool) ([]*memory.Memory, error) {
	var cols []string
	if all {
		var err error
		if cols, err = s.collections(ctx); err != nil {
			return nil, err
		}
	} else {
		exists, err := s.client.CollectionExists(ctx, s.Collection(project))
		if err != nil {
			return nil, fmt.Errorf("memory/qdrant: list: %w", err)
		}
		if exists {
			cols = []string{s.Collection(project)}
		}
	}
	var out []*memory.Memory
	for _, c := range cols {
		var offset *qc.PointId
		for {
			pts, next, err := s.client.ScrollAndOffset(ctx, &qc.ScrollPoints{
				CollectionName: c, Offset: offset, Limit: qc.PtrOf(uint32(1000)), WithPayload: qc.NewWithPayload(true),
			})
			if err != nil {
				return nil, fmt.Errorf("memory/qdrant: scroll %s: %w", c, err)
			}
			for _, p := range pts {
				m, err := decode(p.GetPayload())
				if err != nil {
					return nil, err
				}
				if all || m.Project == project {
					out = append(out, m)
				}
			}
			if next == nil || len(pts) == 0 {
				break
			}
			offset = next
		}
	}
	slices.SortFunc(out, func(a, b *memory.Memory) int {
		return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// Count implements memory.Store.
func (s *Store) Count(ctx context.Context, project string) (int, error) {
	name := s.Collection(project)
	exists, err := s.client.CollectionExists(ctx, name)
	if err != nil || !exists {
		return 0, err
	}
	n, err := s.client.Count(ctx, &qc.CountPoints{CollectionName: name, Exact: qc.PtrOf(true)})
	if err != nil {
		return 0, fmt.Errorf("memory/qdrant: count: %w", err)
	}
	return int(n), nil
}

// Search implements memory.Store: a sparse query on the project's
// collection, filtered by the payload, then memory.Rank.
func (s *Store) Search(ctx context.Context, q memory.Query) ([]memory.Hit, error) {
	if q.Limit <= 0 || len(q.Sparse.Indices) == 0 {
		return nil, nil
	}
	name := s.Collection(q.Project)
	s.mu.Lock()
	ok := s.ready[name]
	s.mu.Unlock()
	if !ok {
		exists, err := s.client.CollectionExists(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("memory/qdrant: search: %w", err)
		}
		if !exists {
			return nil, nil
		}
	}
	must := []*qc.Condition{qc.NewMatchKeyword("project", q.Project)}
	if q.MinConfidence > 0 {
		must = append(must, qc.NewRange("confidence", &qc.Range{Gte: qc.PtrOf(q.MinConfidence)}))
	}
	if q.ExcludeSuspicious {
		must = append(must, qc.NewMatchBool("suspicious", false))
	}
	if q.Principal != "" {
		must = append(must, qc.NewMatchKeyword("principal", q.Principal))
	}
	if len(q.Tags) > 0 {
		must = append(must, qc.NewMatchKeywords("tags", q.Tags...))
	}
	// Fetch more than asked so that ties and the dense rerank are decided
	// by memory.Rank, as in the embedded backend.
	limit := q.Limit*2 + 10
	if len(q.Dense) > 0 {
		limit = max(5*q.Limit, 50)
	}
	pts, err := s.client.Query(ctx, &qc.QueryPoints{
		CollectionName: name, Query: qc.NewQuerySparse(q.Sparse.Indices, q.Sparse.Values), Using: qc.PtrOf(vectorName),
		Filter: &qc.Filter{Must: must}, Limit: qc.PtrOf(uint64(limit)), WithPayload: qc.NewWithPayload(true),
	})
	if err != nil {
		return nil, fmt.Errorf("memory/qdrant: query %s: %w", name, err)
	}
	hits := make([]memory.Hit, 0, len(pts))
	for _, p := range pts {
		m, err := decode(p.GetPayload())
		if err != nil {
			return nil, err
		}
		if memory.Admit(m, q) {
			hits = append(hits, memory.Hit{Memory: m, Score: float64(p.GetScore())})
		}
	}
	return memory.Rank(hits, q), nil
}

// Close implements memory.Store.
func (s *Store) Close() error { return s.client.Close() }
