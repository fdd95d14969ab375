package proxy

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/foldproxy/foldproxy/intercept"
	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// A transport front's session is the core's: its fold session is opened,
// answered and ended by the core, which relays it nothing.
func TestTransportSessionIsTheCores(t *testing.T) {
	var kinds []string
	mark := func(next Handler) Handler {
		return func(ctx context.Context, ex *intercept.Exchange) error {
			kinds = append(kinds, ex.Name)
			return next(ctx, ex)
		}
	}
	served := NewServedTools()
	s, ff := newTestServer(t, nil, func(o *Options) { o.Interceptors = []intercept.Interceptor{mark}; o.Served = served })
	ctx := context.Background()
	sess, err := s.OpenTransportSession(ctx, "transparent", json.RawMessage(`{"name":"ex"}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(ff.opened) != 1 || ff.opened[0] != sess.ID() || ff.records[sess.ID()].Transport != "transparent" {
		t.Fatalf("fold sessions opened %v (%+v), want %s of transport transparent", ff.opened, ff.records, sess.ID())
	}
	if live := s.liveSessions(); len(live) != 0 {
		t.Errorf("live sessions %v: the core must relay nothing to a transport front's session", live)
	}
	tools := s.FoldTools()
	if len(tools) != 1 || jsonscan.StringField(tools[0], "name") != "branch_create" || !s.IsFoldTool("branch_create") || s.IsFoldTool("echo") {
		t.Errorf("fold tools %s", tools)
	}
	ex := &intercept.Exchange{Session: sess.ID(), Method: "tools/call", Name: "branch_create", Params: json.RawMessage(`{"name":"branch_create"}`), Args: json.RawMessage(`{}`)}
	if err := s.CallFoldToolOf(ctx, ex); err != nil || !json.Valid(ex.Result) || len(ex.Result) == 0 {
		t.Errorf("branch_create: err %v, result %s", err, ex.Result)
	}
	if len(kinds) != 0 {
		t.Errorf("branch_create went through the full chain (%v), want the control chain", kinds)
	}
	s.AddServed(tools)
	if !served.Served("mcp__ex__branch_create") {
		t.Error("AddServed did not record branch_create")
	}
	s.CloseSession(sess)
	if !slices.Equal(ff.ended, []string{sess.ID()}) {
		t.Errorf("fold sessions ended %v, want %s", ff.ended, sess.ID())
	}
}
