package memory

import (
	"context"
	"errors"
	"strings"
	"time"
)

// Sentinel errors.
var (
	// ErrNotFound is wrapped when a memory id is unknown.
	ErrNotFound = errors.New("memory not found")
	// ErrInvalid is wrapped when a memory or a query is malformed.
	ErrInvalid = errors.New("invalid memory")
	// ErrUnscanned is wrapped when a text could not be scanned for
	// secrets; the memory is not stored (fail closed).
	ErrUnscanned = errors.New("memory text could not be scanned for secrets")
)

// Origin says how a memory came to be.
type Origin string

// Origins.
const (
	OriginExtracted Origin = "extracted" // from a branch's return or forced summary
	OriginRecorded  Origin = "recorded"  // the agent called memory_record
	OriginImported  Origin = "imported"  // foldproxy memory import
)

// Kind says whether a memory is something to repeat or to avoid.
type Kind string

// Kinds.
const (
	KindLesson      Kind = "lesson"       // what worked
	KindAntiPattern Kind = "anti_pattern" // what failed: a force-returned or failed branch
	KindRemediation Kind = "remediation"  // a failure's problem, root cause and solution (remediation_record)
)

// Resembling reports whether a kind is injected only into branches that
// resemble the one it came from (memory.minResemblance): what failed, and
// how a failure was fixed, are worth their tokens only for like work.
func (k Kind) Resembling() bool { return k == KindAntiPattern || k == KindRemediation }

// Provenance records where a memory came from (SEC-005).
type Provenance struct {
	Session   string    `json:"session,omitempty"`
	Branch    string    `json:"branch,omitempty"`
	Principal string    `json:"principal,omitempty"`
	Time      time.Time `json:"time"`
	Origin    Origin    `json:"origin"`
}

// Memory is one stored lesson or anti-pattern. Title and Content have been
// scrubbed for secrets before the memory reaches a Store.
type Memory struct {
	ID      string `json:"id"`
	Project string `json:"project,omitempty"`
	Kind    Kind   `json:"kind"`
	Title   string `json:"title"`
	Content string `json:"content"`
	// Lesson is the memory as a branch is given it: a few sentences of
	// at most MaxLesson bytes. The content is on memory_search. Memories
	// stored before it was kept have none: their content's start stands
	// in for it.
	Lesson     string     `json:"lesson,omitempty"`
	Outcome    string     `json:"outcome,omitempty"`
	Tags       []string   `json:"tags,omitempty"`
	Confidence float64    `json:"confidence"`
	Provenance Provenance `json:"provenance"`
	// Suspicious lists the ids of the injection patterns the text matched;
	// such a memory is not injected while memory.blockSuspicious is on.
	Suspicious []string `json:"suspicious,omitempty"`
	// Merged counts the near-duplicates folded into this memory.
	Merged    int       `json:"merged,omitempty"`
	Injected  int       `json:"injected,omitempty"` // branches it was injected into
	Successes int       `json:"successes,omitempty"`
	Failures  int       `json:"failures,omitempty"`
	Created   time.Time `json:"created"`
	Updated   time.Time `json:"updated"`
	LastUsed  time.Time `json:"lastUsed,omitzero"` // last injected or found by memory_search
	// Dense is the optional embedding of Text(), when an embeddings
	// endpoint is configured. It is not exported.
	Dense []float32 `json:"-"`
}

// Text is what retrieval indexes: the title, the lesson (when it is not
// part of the content), the content and the tags.
func (m *Memory) Text() string {
	s := m.Title + "\n" + m.Content
	if m.Lesson != "" && !strings.Contains(m.Content, m.Lesson) {
		s = m.Title + "\n" + m.Lesson + "\n" + m.Content
	}
	for _, t := range m.Tags {
		s += "\n" + t
	}
	return s
}

// Clone returns a deep copy.
func (m *Memory) Clone() *Memory {
	c := *m
	c.Tags = append([]string(nil), m.Tags...)
	c.Suspicious = append([]string(nil), m.Suspicious...)
	c.Dense = append([]float32(nil), m.Dense...)
	return &c
}

// Query asks a Store for the memories most relevant to a text.
type Query struct {
	// Sparse is the query's lexical vector (see Vectorize with a query).
	Sparse Sparse
	// Dense is the query's embedding, when embeddings are configured; the
	// backend then reranks the lexical candidates by it.
	Dense []float32
	// Project restricts the search to one project ("" is a project too).
	Project string
	// Limit is how many hits to return at most.
	Limit int
	// MinConfidence drops memories below it.
	MinConfidence float64
	// Tags, when not empty, keeps memories carrying at least one of them.
	Tags []string
	// ExcludeSuspicious drops memories flagged by an injection pattern.
	ExcludeSuspicious bool
	// Principal, when not empty, keeps only the memories of that
	// principal (memory.shareAcrossPrincipals off).
	Principal string
}

// Hit is one search result: a memory and its relevance.
type Hit struct {
	Memory *Memory
	Score  float64
}

// Store keeps memories. Implementations are safe for concurrent use; a Put
// that returned nil survives a restart.
//
// Search ranks by the same function in every backend: the sum over the
// query's terms of the term's inverse document frequency,
// ln((N-n+0.5)/(n+0.5)+1) over the memories of the project, times the
// memory's BM25 term weight (Sparse); ties by confidence, then id.
type Store interface {
	// Put inserts or replaces a memory by id.
	Put(ctx context.Context, m *Memory) error
	// Get returns a memory; ErrNotFound when absent.
	Get(ctx context.Context, id string) (*Memory, error)
	// Delete removes a memory; ErrNotFound when absent.
	Delete(ctx context.Context, id string) error
	// List returns every memory of project, or of all projects when
	// all is true, oldest first.
	List(ctx context.Context, project string, all bool) ([]*Memory, error)
	// Search returns at most q.Limit hits, best first.
	Search(ctx context.Context, q Query) ([]Hit, error)
	// Count returns how many memories project holds.
	Count(ctx context.Context, project string) (int, error)
	Close() error
}

// BatchStore is an optional extension of Store: PutAll inserts or replaces
// several memories in one durable write, all or nothing. The Service uses
// it when its store has it, so that the memories injected into a branch
// (MarkUsed) or moved by its outcome (Outcome) cost one commit, not one
// each, on the branch_create and branch_return they belong to.
type BatchStore interface {
	PutAll(ctx context.Context, ms []*Memory) error
}

// TermStats is an optional extension of Store: how many memories a
// project holds, and in how many of them each term occurs. The Service
// weighs the terms of its relevance floor with it (Relevance); without it
// every term weighs the same.
type TermStats interface {
	DocFreq(project string, terms []uint32) (total int, df []int)
}

// EmptyStore is a Store that tells at once, without a query, that a
// project holds no memory; Inject then skips building the query (the
// branch_create of a project without memories yet, the default).
type EmptyStore interface {
	Empty(project string) bool
}
