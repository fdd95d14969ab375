package qdrant

import (
	"cmp"
	"container/heap"
	"context"
	"math"
	"net"
	"slices"
	"sort"
	"sync"
	"testing"

	qc "github.com/qdrant/go-client/qdrant"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// standIn is an in-memory Qdrant: the Collections, Points and Qdrant gRPC
// services that the backend uses, served over a real gRPC listener on
// loopback. Sparse vectors are scored as Qdrant scores them with the IDF
// modifier: the sum over shared indices of query value times point value
// times ln((N-n+0.5)/(n+0.5)+1), N the points of the collection and n those
// holding the index. Filters support what the backend sends: keyword,
// keywords (any), bool and range conditions, all under must.
type standIn struct {
	mu   sync.Mutex
	cols map[string]*standInCollection
}

// The three services share the stand-in's state; their method sets
// overlap (Get, Delete), hence three types.
type (
	collectionsSvc struct {
		qc.UnimplementedCollectionsServer
		*standIn
	}
	pointsSvc struct {
		qc.UnimplementedPointsServer
		*standIn
	}
	qdrantSvc struct {
		qc.UnimplementedQdrantServer
	}
)

type standInCollection struct {
	idf      bool
	points   map[string]*standInPoint      // by UUID
	postings map[uint32]map[string]float32 // sparse index -> point UUID -> value
}

type standInPoint struct {
	id      *qc.PointId
	sparse  map[uint32]float32
	payload map[string]*qc.Value
}

// startStandIn serves a stand-in on a loopback port and returns a client
// configuration for it.
func startStandIn(t testing.TB) (*standIn, *qc.Config) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &standIn{cols: map[string]*standInCollection{}}
	srv := grpc.NewServer()
	qc.RegisterCollectionsServer(srv, collectionsSvc{standIn: s})
	qc.RegisterPointsServer(srv, pointsSvc{standIn: s})
	qc.RegisterQdrantServer(srv, qdrantSvc{})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	addr := ln.Addr().(*net.TCPAddr)
	return s, &qc.Config{Host: "127.0.0.1", Port: addr.Port, SkipCompatibilityCheck: true,
		GrpcOptions: []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}}
}

func (qdrantSvc) HealthCheck(context.Context, *qc.HealthCheckRequest) (*qc.HealthCheckReply, error) {
	return &qc.HealthCheckReply{Title: "qdrant stand-in", Version: "1.17.0"}, nil
}

func (s collectionsSvc) List(context.Context, *qc.ListCollectionsRequest) (*qc.ListCollectionsResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &qc.ListCollectionsResponse{}
	for name := range s.cols {
		out.Collections = append(out.Collections, &qc.CollectionDescription{Name: name})
	}
	return out, nil
}

func (s collectionsSvc) CollectionExists(_ context.Context, r *qc.CollectionExistsRequest) (*qc.CollectionExistsResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.cols[r.GetCollectionName()]
	return &qc.CollectionExistsResponse{Result: &qc.CollectionExists{Exists: ok}}, nil
}

func (s collectionsSvc) Create(_ context.Context, r *qc.CreateCollection) (*qc.CollectionOperationResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.cols[r.GetCollectionName()]; ok {
		return nil, status.Errorf(codes.AlreadyExists, "Collection `%s` already exists!", r.GetCollectionName())
	}
	c := &standInCollection{points: map[string]*standInPoint{}, postings: map[uint32]map[string]float32{}}
	for _, p := range r.GetSparseVectorsConfig().GetMap() {
		c.idf = p.GetModifier() == qc.Modifier_Idf
	}
	s.cols[r.GetCollectionName()] = c
	return &qc.CollectionOperationResponse{Result: true}, nil
}

func (s collectionsSvc) Delete(_ context.Context, r *qc.DeleteCollection) (*qc.CollectionOperationResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.cols[r.GetCollectionName()]
	delete(s.cols, r.GetCollectionName())
	return &qc.CollectionOperationResponse{Result: ok}, nil
}

func (s *standIn) col(name string) (*standInCollection, error) {
	c, ok := s.cols[name]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "Collection `%s` doesn't exist!", name)
	}
	return c, nil
}

func done() *qc.PointsOperationResponse {
	return &qc.PointsOperationResponse{Result: &qc.UpdateResult{Status: qc.UpdateStatus_Completed}}
}

func (s pointsSvc) CreateFieldIndex(_ context.Context, r *qc.CreateFieldIndexCollection) (*qc.PointsOperationResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.col(r.GetCollectionName()); err != nil {
		return nil, err
	}
	return done(), nil
}

func (c *standInCollection) remove(uuid string) {
	if old := c.points[uuid]; old != nil {
		for i := range old.sparse {
			if delete(c.postings[i], uuid); len(c.postings[i]) == 0 {
				delete(c.postings, i)
			}
		}
		delete(c.points, uuid)
	}
}

func (s pointsSvc) Upsert(_ context.Context, r *qc.UpsertPoints) (*qc.PointsOperationResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.col(r.GetCollectionName())
	if err != nil {
		return nil, err
	}
	for _, p := range r.GetPoints() {
		uuid := p.GetId().GetUuid()
		c.remove(uuid)
		sp := map[uint32]float32{}
		for name, v := range p.GetVectors().GetVectors().GetVectors() {
			sv := v.GetSparse()
			if name != vectorName || sv == nil || len(sv.GetIndices()) != len(sv.GetValues()) {
				return nil, status.Errorf(codes.InvalidArgument, "vector %q: want a sparse vector", name)
			}
			for i, idx := range sv.GetIndices() {
				sp[idx] = sv.GetValues()[i]
			}
		}
		for i, v := range sp {
			if c.postings[i] == nil {
				c.postings[i] = map[string]float32{}
			}
			c.postings[i][uuid] = v
		}
		c.points[uuid] = &standInPoint{id: p.GetId(), sparse: sp, payload: p.GetPayload()}
	}
	return done(), nil
}

func (s pointsSvc) Delete(_ context.Context, r *qc.DeletePoints) (*qc.PointsOperationResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.col(r.GetCollectionName())
	if err != nil {
		return nil, err
	}
	for _, id := range r.GetPoints().GetPoints().GetIds() {
		c.remove(id.GetUuid())
	}
	return done(), nil
}

func (s pointsSvc) Get(_ context.Context, r *qc.GetPoints) (*qc.GetResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.col(r.GetCollectionName())
	if err != nil {
		return nil, err
	}
	out := &qc.GetResponse{}
	for _, id := range r.GetIds() {
		if p := c.points[id.GetUuid()]; p != nil {
			out.Result = append(out.Result, &qc.RetrievedPoint{Id: p.id, Payload: p.payload})
		}
	}
	return out, nil
}

func (s pointsSvc) Scroll(_ context.Context, r *qc.ScrollPoints) (*qc.ScrollResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.col(r.GetCollectionName())
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(c.points))
	for id, p := range c.points {
		if match(p.payload, r.GetFilter()) {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	start := 0
	if off := r.GetOffset(); off != nil {
		start = sort.SearchStrings(ids, off.GetUuid())
	}
	limit := int(r.GetLimit())
	if limit == 0 {
		limit = 10
	}
	out := &qc.ScrollResponse{}
	for i := start; i < len(ids) && i < start+limit; i++ {
		p := c.points[ids[i]]
		out.Result = append(out.Result, &qc.RetrievedPoint{Id: p.id, Payload: p.payload})
	}
	if start+limit < len(ids) {
		out.NextPageOffset = c.points[ids[start+limit]].id
	}
	return out, nil
}

func (s pointsSvc) Count(_ context.Context, r *qc.CountPoints) (*qc.CountResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.col(r.GetCollectionName())
	if err != nil {
		return nil, err
	}
	n := 0
	for _, p := range c.points {
		if match(p.payload, r.GetFilter()) {
			n++
		}
	}
	return &qc.CountResponse{Result: &qc.CountResult{Count: uint64(n)}}, nil
}

func (s pointsSvc) Query(_ context.Context, r *qc.QueryPoints) (*qc.QueryResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.col(r.GetCollectionName())
	if err != nil {
		return nil, err
	}
	q := r.GetQuery().GetNearest().GetSparse()
	if q == nil || r.GetUsing() != vectorName {
		return nil, status.Errorf(codes.InvalidArgument, "the stand-in answers sparse nearest queries on %q", vectorName)
	}
	// Score the points holding a query index, from the postings alone.
	n := float64(len(c.points))
	scores := map[string]float64{}
	for i, idx := range q.GetIndices() {
		ps := c.postings[idx]
		w := float64(q.GetValues()[i])
		if c.idf {
			df := float64(len(ps))
			w *= math.Log((n-df+0.5)/(df+0.5) + 1)
		}
		for uuid, v := range ps {
			scores[uuid] += w * float64(v)
		}
	}
	// Keep the best limit points in a min-heap rather than sorting them all.
	limit := int(r.GetLimit())
	if limit <= 0 {
		limit = 10
	}
	h := &scoredHeap{}
	for uuid, score := range scores {
		p := c.points[uuid]
		if score <= 0 || !match(p.payload, r.GetFilter()) {
			continue
		}
		if h.Len() < limit {
			heap.Push(h, &qc.ScoredPoint{Id: p.id, Payload: p.payload, Score: float32(score)})
		} else if float32(score) > (*h)[0].Score {
			(*h)[0] = &qc.ScoredPoint{Id: p.id, Payload: p.payload, Score: float32(score)}
			heap.Fix(h, 0)
		}
	}
	out := []*qc.ScoredPoint(*h)
	slices.SortFunc(out, func(a, b *qc.ScoredPoint) int { return cmp.Compare(b.Score, a.Score) })
	return &qc.QueryResponse{Result: out}, nil
}

// scoredHeap is a min-heap of scored points by score.
type scoredHeap []*qc.ScoredPoint

func (h scoredHeap) Len() int           { return len(h) }
func (h scoredHeap) Less(i, j int) bool { return h[i].Score < h[j].Score }
func (h scoredHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *scoredHeap) Push(x any)        { *h = append(*h, x.(*qc.ScoredPoint)) }
func (h *scoredHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// match evaluates the filter's must conditions against a payload.
func match(payload map[string]*qc.Value, f *qc.Filter) bool {
	for _, c := range f.GetMust() {
		fc := c.GetField()
		if fc == nil {
			return false
		}
		v := payload[fc.GetKey()]
		if m := fc.GetMatch(); m != nil {
			var vals []*qc.Value
			if l := v.GetListValue(); l != nil {
				vals = l.GetValues()
			} else if v != nil {
				vals = []*qc.Value{v}
			}
			ok := false
			for _, x := range vals {
				switch mv := m.GetMatchValue().(type) {
				case *qc.Match_Keyword:
					ok = ok || x.GetStringValue() == mv.Keyword
				case *qc.Match_Keywords:
					ok = ok || slices.Contains(mv.Keywords.GetStrings(), x.GetStringValue())
				case *qc.Match_Boolean:
					_, isBool := x.GetKind().(*qc.Value_BoolValue)
					ok = ok || (isBool && x.GetBoolValue() == mv.Boolean)
				}
			}
			if !ok {
				return false
			}
		}
		if rg := fc.GetRange(); rg != nil {
			x := v.GetDoubleValue()
			if (rg.Gte != nil && x < rg.GetGte()) || (rg.Gt != nil && x <= rg.GetGt()) || (rg.Lte != nil && x > rg.GetLte()) || (rg.Lt != nil && x >= rg.GetLt()) {
				return false
			}
		}
	}
	return true
}
