package memory

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/foldproxy/foldproxy/policy"
)

// Bounds of what a memory holds.
const (
	MaxTitle   = 200
	MaxContent = 4000
	MaxTags    = 16
	MaxTag     = 64
	// MaxLesson bounds the lesson a branch is given (about 40 tokens);
	// the content is on memory_search.
	MaxLesson = 160
	// briefTitle bounds the title a branch is given.
	briefTitle = 80
)

// Options configure a Service. Store and Count are required.
type Options struct {
	// Settings are the memory settings; zero fields take their defaults.
	Settings policy.Memory
	Store    Store
	// Scrub removes secrets from text before it is stored. It returns an
	// error when the text could not be scanned; the memory is then not
	// stored (fail closed). nil stores text as given: only when scrubbing
	// is disabled.
	Scrub func(ctx context.Context, text string) (string, error)
	// Count counts the tokens of a text, in the session's encoding.
	Count func(text string) int
	// Embed, when not nil, embeds texts for dense reranking.
	Embed Embedder
	// Logger receives flagged memories and failures; nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Embedder turns texts into dense vectors (see NewOpenAIEmbedder).
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
}

// Service is the backend-independent logic of memories: extraction and
// recording with scrubbing, flagging and near-duplicate merging; search and
// injection within a budget; confidence from outcomes; ageing.
type Service struct {
	set   policy.Memory
	store Store
	scrub func(context.Context, string) (string, error)
	count func(string) int
	embed Embedder
	log   *slog.Logger
	now   func() time.Time
}

// New validates opts and returns a Service.
func New(opts Options) (*Service, error) {
	if opts.Store == nil {
		return nil, fmt.Errorf("%w: memory: Options.Store is nil", ErrInvalid)
	}
	if opts.Count == nil {
		return nil, fmt.Errorf("%w: memory: Options.Count is nil", ErrInvalid)
	}
	set := policy.FillMemory(opts.Settings)
	if err := set.Validate(); err != nil {
		return nil, err
	}
	s := &Service{set: set, store: opts.Store, scrub: opts.Scrub, count: opts.Count, embed: opts.Embed, log: opts.Logger, now: opts.Now}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// Settings returns the service's settings, defaults filled.
func (s *Service) Settings() policy.Memory { return s.set }

// Store returns the backend.
func (s *Service) Store() Store { return s.store }

// Candidate is a memory about to be stored.
type Candidate struct {
	Kind    Kind
	Title   string
	Content string
	// Lesson is what a branch will be given (see Memory.Lesson); empty:
	// the start of Content, to a sentence's end within MaxLesson.
	Lesson     string
	Outcome    string
	Tags       []string
	Provenance Provenance
	// Confidence, when not zero, overrides memory.initialConfidence
	// (imports keep theirs).
	Confidence float64
}

// NewID returns a fresh memory id.
func NewID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "mem-" + hex.EncodeToString(b[:])
}

// clip cuts s to at most n bytes at a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Add scrubs, flags and stores a candidate, merging it into a stored
// memory of the same project and kind whose text is a near-duplicate. It
// returns the stored memory and whether it was merged.
func (s *Service) Add(ctx context.Context, c Candidate) (*Memory, bool, error) {
	if c.Kind == "" {
		c.Kind = KindLesson
	}
	if c.Kind != KindLesson && c.Kind != KindAntiPattern && c.Kind != KindRemediation {
		return nil, false, fmt.Errorf("%w: kind %q is not %s, %s or %s", ErrInvalid, c.Kind, KindLesson, KindAntiPattern, KindRemediation)
	}
	title := strings.TrimSpace(clip(c.Title, MaxTitle))
	content := strings.TrimSpace(clip(c.Content, MaxContent))
	lesson := LessonOf(c.Lesson)
	if lesson == "" {
		lesson = LessonOf(content)
	}
	if title == "" || content == "" {
		return nil, false, fmt.Errorf("%w: a memory needs a title and content", ErrInvalid)
	}
	var tags []string
	for _, t := range c.Tags {
		t = strings.ToLower(strings.TrimSpace(clip(t, MaxTag)))
		if t != "" && !slices.Contains(tags, t) && len(tags) < MaxTags {
			tags = append(tags, t)
		}
	}
	var err error
	if s.scrub != nil {
		if title, err = s.scrub(ctx, title); err != nil {
			return nil, false, fmt.Errorf("%w: title: %v", ErrUnscanned, err)
		}
		if content, err = s.scrub(ctx, content); err != nil {
			return nil, false, fmt.Errorf("%w: content: %v", ErrUnscanned, err)
		}
		if lesson, err = s.scrub(ctx, lesson); err != nil {
			return nil, false, fmt.Errorf("%w: lesson: %v", ErrUnscanned, err)
		}
		for i := range tags {
			if tags[i], err = s.scrub(ctx, tags[i]); err != nil {
				return nil, false, fmt.Errorf("%w: tags: %v", ErrUnscanned, err)
			}
		}
	}
	now := s.now()
	if c.Provenance.Principal == "" {
		c.Provenance.Principal = s.set.Principal
	}
	if c.Provenance.Time.IsZero() {
		c.Provenance.Time = now
	}
	m := &Memory{
		ID: NewID(), Project: s.set.Project, Kind: c.Kind, Title: title, Content: content, Lesson: lesson,
		Outcome: clip(c.Outcome, MaxTag), Tags: tags, Confidence: cmp.Or(c.Confidence, s.set.InitialConfidence),
		Provenance: c.Provenance, Created: now, Updated: now,
	}
	m.Confidence = min(max(m.Confidence, 0), 1)
	// Near-duplicates merge: the newer text replaces the older, tags
	// join, and the higher confidence stays.
	// A flagged text never merges: it would taint a clean memory. Nor do
	// memories of different principals or origins merge.
	merged := false
	m.Suspicious = Flags(m.Text())
	var old *Memory
	if len(m.Suspicious) == 0 {
		old = s.nearDuplicate(ctx, m)
	}
	if old != nil {
		merged = true
		old.Title, old.Content, old.Lesson, old.Outcome = m.Title, m.Content, m.Lesson, cmp.Or(m.Outcome, old.Outcome)
		for _, t := range m.Tags {
			if !slices.Contains(old.Tags, t) && len(old.Tags) < MaxTags {
				old.Tags = append(old.Tags, t)
			}
		}
		old.Confidence = max(old.Confidence, m.Confidence)
		old.Merged++
		old.Updated = now
		m = old
	}
	if len(m.Suspicious) > 0 {
		s.log.Warn("memory matches prompt-injection patterns; it will not be injected while memory.blockSuspicious is on",
			"memory", m.ID, "patterns", strings.Join(m.Suspicious, ","), "origin", m.Provenance.Origin, "branch", m.Provenance.Branch)
	}
	if s.embed != nil {
		if v, err := s.embed.Embed(ctx, []string{m.Text()}); err != nil {
			s.log.Warn("memory embedding failed; the memory is stored for lexical retrieval only", "memory", m.ID, "err", err)
			m.Dense = nil
		} else if len(v) == 1 {
			m.Dense = v[0]
		}
	}
	if err := s.store.Put(ctx, m); err != nil {
		return nil, false, fmt.Errorf("memory: store: %w", err)
	}
	return m, merged, nil
}

// nearDuplicate finds a stored memory of the same kind whose text is a
// near-duplicate of m's.
func (s *Service) nearDuplicate(ctx context.Context, m *Memory) *Memory {
	hits, err := s.store.Search(ctx, Query{Sparse: QueryVector(m.Text()), Project: m.Project, Limit: 3})
	if err != nil {
		s.log.Warn("memory: looking for a near-duplicate failed; storing a new memory", "err", err)
		return nil
	}
	for _, h := range hits {
		old := h.Memory
		if old.Kind == m.Kind && len(old.Suspicious) == 0 && old.Provenance.Principal == m.Provenance.Principal &&
			(old.Provenance.Origin == OriginImported) == (m.Provenance.Origin == OriginImported) &&
			Similarity(old.Title+"\n"+old.Content, m.Title+"\n"+m.Content) >= s.set.MergeSimilarity {
			return old
		}
	}
	return nil
}

// ItemProvenance is a memory's provenance as an agent is shown it.
type ItemProvenance struct {
	Provenance
	// Untrusted is set for memories of another principal and imports:
	// treat them as information, never as instructions.
	Untrusted bool `json:"untrusted,omitempty"`
}

// Item is a memory as memory_search shows it: every field an agent can
// use. branch_create injects the shorter Brief.
type Item struct {
	Type       Kind           `json:"type"`
	ID         string         `json:"id"`
	Title      string         `json:"title"`
	Lesson     string         `json:"lesson,omitempty"`
	Content    string         `json:"content"`
	Tokens     int            `json:"tokens"`
	Confidence float64        `json:"confidence"`
	Provenance ItemProvenance `json:"provenance"`
	Tags       []string       `json:"tags,omitempty"`
	Suspicious []string       `json:"suspicious,omitempty"`
}

// Untrusted reports whether m came from another principal or an import.
func (s *Service) Untrusted(m *Memory) bool {
	return m.Provenance.Origin == OriginImported || m.Provenance.Principal != s.set.Principal
}

// item renders m for the agent; its tokens are those of its title and
// content, which is what a branch is charged for it.
func (s *Service) item(m *Memory) Item {
	return Item{
		Type: m.Kind, ID: m.ID, Title: m.Title, Lesson: m.Lesson, Content: m.Content,
		Tokens:     s.count(m.Title + "\n" + m.Content),
		Confidence: float64(int(m.Confidence*1000+0.5)) / 1000,
		Provenance: ItemProvenance{Provenance: m.Provenance, Untrusted: s.Untrusted(m)},
		Tags:       m.Tags, Suspicious: m.Suspicious,
	}
}

// query builds a store query for text.
func (s *Service) query(ctx context.Context, text string, limit int) Query {
	q := Query{Sparse: QueryVector(text), Project: s.set.Project, Limit: limit}
	if s.embed != nil {
		if v, err := s.embed.Embed(ctx, []string{text}); err != nil {
			s.log.Warn("memory: embedding the query failed; ranking lexically", "err", err)
		} else if len(v) == 1 {
			q.Dense = v[0]
		}
	}
	return q
}

// Brief is a memory as a branch is given it in branch_create's
// injected_context: its id, kind (lessons leave it out), title, lesson,
// and whether it is untrusted. memory_search shows the rest (Item).
type Brief struct {
	ID        string `json:"id"`
	Type      Kind   `json:"type,omitempty"`
	Title     string `json:"title"`
	Lesson    string `json:"lesson"`
	Untrusted bool   `json:"untrusted,omitempty"`
	// Suspicious lists the injection patterns matched (only ever set
	// while memory.blockSuspicious is off).
	Suspicious []string `json:"suspicious,omitempty"`
	// Tokens is what the brief costs the branch: its JSON as rendered.
	Tokens int `json:"-"`
	// Relevance is the brief's Relevance to the branch's task.
	Relevance float64 `json:"-"`
}

// brief renders m for injection and counts its tokens.
func (s *Service) brief(m *Memory, rel float64) Brief {
	b := Brief{ID: m.ID, Title: LessonOf(clip(m.Title, briefTitle)), Lesson: m.Lesson, Untrusted: s.Untrusted(m), Suspicious: m.Suspicious, Relevance: rel}
	if b.Lesson == "" {
		b.Lesson = LessonOf(m.Content)
	}
	if m.Kind != KindLesson {
		b.Type = m.Kind
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(b) // strings only: it cannot fail
	b.Tokens = s.count(strings.TrimSuffix(buf.String(), "\n"))
	return b
}

// LessonOf makes a lesson of a text: on one line, up to the end of the
// last sentence that fits in MaxLesson bytes (else the last word that
// does, with an ellipsis).
func LessonOf(text string) string {
	t := strings.Join(strings.Fields(text), " ")
	if len(t) <= MaxLesson {
		return t
	}
	t = clip(t, MaxLesson-len("…"))
	if i := strings.LastIndexAny(t, ".!?;"); i >= MaxLesson/2 {
		return t[:i+1]
	}
	if i := strings.LastIndexByte(t, ' '); i > 0 {
		t = t[:i]
	}
	return t + "…"
}

// Select picks, from briefs ranked best first, at most maxItems whose
// tokens add up to no more than limit, skipping any that would not fit.
// It is the injection budget rule: a ceiling, not a target.
func Select(items []Brief, maxItems, limit int) []Brief {
	out := []Brief{}
	used := 0
	for _, it := range items {
		if len(out) == maxItems {
			break
		}
		if used+it.Tokens > limit {
			continue
		}
		used += it.Tokens
		out = append(out, it)
	}
	return out
}

// relativeFloor keeps, besides the absolute floor, only briefs at least
// this share as relevant as the best one: when one memory is about the
// task, the loosely related ones are not worth their tokens.
const relativeFloor = 0.75

// redundant is the Relevance between two memories above which the second
// is left out: it would tell the branch much the same again.
const redundant = 0.5

// Inject returns the memories to inject into a branch with the given
// budget (0: unlimited, then only maxItems bounds it) whose task is text,
// and their total tokens. A memory is injected only when its Relevance to
// the task clears memory.minRelevance (memory.minResemblance for
// anti-patterns and remediations, which only branches resembling the one
// that failed receive) and is at least relativeFloor of the best one's;
// confidence must be at least memory.minConfidence; and a memory much
// like one already chosen (redundant) is left out. Of those, the most relevant
// are taken, at most memory.maxItems, whose tokens fit in
// memory.injectionRatio of the budget. When nothing clears the floor,
// nothing is injected. Suspicious memories are left out while
// memory.blockSuspicious is on, and memories of another principal while
// memory.shareAcrossPrincipals is off.
func (s *Service) Inject(ctx context.Context, text string, budget int) ([]Brief, int, error) {
	if s.set.MaxItems == 0 || strings.TrimSpace(text) == "" {
		return []Brief{}, 0, nil
	}
	if es, ok := s.store.(EmptyStore); ok && es.Empty(s.set.Project) {
		return []Brief{}, 0, nil
	}
	limit := int(s.set.InjectionRatio * float64(budget))
	if budget <= 0 {
		limit = int(^uint(0) >> 1)
	}
	q := s.query(ctx, text, s.set.MaxItems*3)
	q.MinConfidence = s.set.MinConfidence
	q.ExcludeSuspicious = s.set.BlockSuspiciousEnabled()
	q.Principal = s.principalFilter()
	hits, err := s.store.Search(ctx, q)
	if err != nil {
		return nil, 0, fmt.Errorf("memory: search: %w", err)
	}
	idf := s.idfOf(q.Project)
	type cand struct {
		m   *Memory
		doc Sparse
		rel float64
		ord int
	}
	var cands []cand
	best := 0.0
	for i, h := range hits {
		doc := DocVector(h.Memory.Text())
		rel := Relevance(q.Sparse, doc, idf)
		floor := s.set.MinRelevance
		if h.Memory.Kind.Resembling() {
			floor = s.set.MinResemblance
		}
		if rel < floor {
			continue
		}
		best = max(best, rel)
		cands = append(cands, cand{h.Memory, doc, rel, i})
	}
	slices.SortStableFunc(cands, func(a, b cand) int { return cmp.Or(cmp.Compare(b.rel, a.rel), cmp.Compare(a.ord, b.ord)) })
	var briefs []Brief
	var chosen []Sparse
	for _, c := range cands {
		if c.rel < relativeFloor*best {
			break
		}
		// A memory much like one already chosen (another phase of the
		// same task, say) would tell the branch the same thing again.
		if slices.ContainsFunc(chosen, func(o Sparse) bool { return Relevance(o, c.doc, idf) >= redundant }) {
			continue
		}
		chosen = append(chosen, c.doc)
		briefs = append(briefs, s.brief(c.m, c.rel))
	}
	briefs = Select(briefs, s.set.MaxItems, limit)
	total := 0
	for _, it := range briefs {
		total += it.Tokens
	}
	return briefs, total, nil
}

// principalFilter is the principal a query keeps to: the service's own
// while memory.shareAcrossPrincipals is off, else none.
func (s *Service) principalFilter() string {
	if s.set.ShareAcrossPrincipals {
		return ""
	}
	return s.set.Principal
}

// idfOf returns the inverse document frequency of terms among the
// project's memories, from the store's term statistics (nil when it keeps
// none: every term then weighs 1), looked up once per term.
func (s *Service) idfOf(project string) func(uint32) float64 {
	ts, ok := s.store.(TermStats)
	if !ok {
		return nil
	}
	cache := map[uint32]float64{}
	return func(t uint32) float64 {
		if v, ok := cache[t]; ok {
			return v
		}
		total, df := ts.DocFreq(project, []uint32{t})
		v := IDF(total, df[0])
		cache[t] = v
		return v
	}
}

// MarkUsed records that memories were injected or found, for ageing and
// for the confidence of the branch's outcome.
func (s *Service) MarkUsed(ctx context.Context, ids []string, injected bool) error {
	now := s.now()
	var errs []error
	var ms []*Memory
	for _, id := range ids {
		m, err := s.store.Get(ctx, id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		m.LastUsed = now
		if injected {
			m.Injected++
		}
		ms = append(ms, m)
	}
	errs = append(errs, s.putAll(ctx, ms)...)
	if len(errs) > 0 {
		return fmt.Errorf("memory: mark used: %w", errs[0])
	}
	return nil
}

// putAll stores ms: in one write when the store is a BatchStore, else one
// by one. It returns the failures.
func (s *Service) putAll(ctx context.Context, ms []*Memory) []error {
	if len(ms) == 0 {
		return nil
	}
	if bs, ok := s.store.(BatchStore); ok && len(ms) > 1 {
		if err := bs.PutAll(ctx, ms); err != nil {
			return []error{err}
		}
		return nil
	}
	var errs []error
	for _, m := range ms {
		if err := s.store.Put(ctx, m); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// Search answers memory_search: the memories most relevant to query, of
// any confidence, at most limit, optionally only those carrying one of
// tags. Suspicious memories are left out while memory.blockSuspicious is on.
func (s *Service) Search(ctx context.Context, query string, limit int, tags []string) ([]Item, error) {
	q := s.query(ctx, query, limit)
	q.Tags = tags
	q.ExcludeSuspicious = s.set.BlockSuspiciousEnabled()
	q.Principal = s.principalFilter()
	hits, err := s.store.Search(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("memory: search: %w", err)
	}
	items := make([]Item, 0, len(hits))
	ids := make([]string, 0, len(hits))
	for _, h := range hits {
		items = append(items, s.item(h.Memory))
		ids = append(ids, h.Memory.ID)
	}
	if err := s.MarkUsed(ctx, ids, false); err != nil {
		s.log.Warn("memory: could not record a search's use", "err", err)
	}
	return items, nil
}

// Adjust is the confidence rule: success adds memory.reward, failure takes
// off memory.penalty, within [0, 1].
func Adjust(c float64, success bool, reward, penalty float64) float64 {
	if success {
		c += reward
	} else {
		c -= penalty
	}
	// Rounded to four places, so that steps add up as a person expects.
	return min(max(math.Round(c*1e4)/1e4, 0), 1)
}

// Outcome updates the confidence of memories injected into a branch that
// returned (success) or was force-returned (failure). Memories deleted
// since are skipped.
func (s *Service) Outcome(ctx context.Context, ids []string, success bool) error {
	var ms []*Memory
	for _, id := range ids {
		m, err := s.store.Get(ctx, id)
		if err != nil {
			continue
		}
		m.Confidence = Adjust(m.Confidence, success, s.set.Reward, s.set.Penalty)
		if success {
			m.Successes++
		} else {
			m.Failures++
		}
		ms = append(ms, m)
	}
	if errs := s.putAll(ctx, ms); len(errs) > 0 {
		return fmt.Errorf("memory: outcome of %d memories: %w", len(ms), errs[0])
	}
	return nil
}

// Stale reports whether m has aged out at now: neither injected, found nor
// updated for maxUnused.
func Stale(m *Memory, now time.Time, maxUnused time.Duration) bool {
	if maxUnused <= 0 {
		return false
	}
	last := m.Updated
	if m.LastUsed.After(last) {
		last = m.LastUsed
	}
	return now.Sub(last) > maxUnused
}

// Age forgets the memories of the project that have aged out and returns
// how many it removed.
func (s *Service) Age(ctx context.Context) (int, error) {
	all, err := s.store.List(ctx, s.set.Project, false)
	if err != nil {
		return 0, fmt.Errorf("memory: age: %w", err)
	}
	now, n := s.now(), 0
	for _, m := range all {
		if Stale(m, now, s.set.MaxUnused.D()) {
			if err := s.store.Delete(ctx, m.ID); err != nil {
				return n, fmt.Errorf("memory: age: %w", err)
			}
			n++
		}
	}
	return n, nil
}

// Import stores a memory exported elsewhere: its text is scrubbed and
// flagged again, its origin becomes imported (so it is untrusted), it gets
// a new id, and it merges into a near-duplicate like any new memory.
func (s *Service) Import(ctx context.Context, m *Memory) (*Memory, bool, error) {
	prov := m.Provenance
	prov.Origin = OriginImported
	return s.Add(ctx, Candidate{
		Kind: m.Kind, Title: m.Title, Content: m.Content, Outcome: m.Outcome, Tags: m.Tags,
		Provenance: prov, Confidence: cmp.Or(m.Confidence, s.set.InitialConfidence),
	})
}
