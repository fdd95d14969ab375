package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/yosida95/uritemplate/v3"

	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// branchIDArg is the optional argument foldproxy adds to every forwarded
// tool's input schema and strips before forwarding.
const branchIDArg = "branch_id"

// branchIDSchema is the added argument's schema: its name alone, for every
// forwarded tool is in every conversation's context. branch_create's
// description says what it is for (parallel sub-agents pass their branch's
// id); omitted, the call goes to the innermost active branch. The bound
// of 10 tokens over a tool's own definition is kept by
// e2e/fold_cost_test.go.
var branchIDSchema = []byte(`{"type":"string"}`)

// catalog is the merged view of every upstream's catalogue, rebuilt when an
// upstream changes. It is immutable once built.
type catalog struct {
	tools, prompts, resources, templates []json.RawMessage
	foldTools                            map[string]bool
	toolRoutes                           map[string]route
	promptRoutes                         map[string]route
	resourceRoutes                       map[string]string // uri → upstream
	templateRoutes                       []templateRoute
	resourceServers                      []string // upstreams that serve resources
}

type route struct {
	upstream, name string
	injected       bool // branch_id was added to this tool's schema
}

type templateRoute struct {
	upstream string
	tmpl     *uritemplate.Template
}

// resourceUpstream finds the upstream serving uri: a listed resource, then
// a matching template, then the only upstream with resources at all.
func (c *catalog) resourceUpstream(uri string) (string, bool) {
	if up, ok := c.resourceRoutes[uri]; ok {
		return up, true
	}
	for _, t := range c.templateRoutes {
		if t.tmpl.Match(uri) != nil {
			return t.upstream, true
		}
	}
	if len(c.resourceServers) == 1 {
		return c.resourceServers[0], true
	}
	return "", false
}

// catalog returns the current merged catalogue, building it if needed.
func (s *Server) catalog() *catalog {
	s.mu.Lock()
	c := s.cat
	s.mu.Unlock()
	if c != nil {
		return c
	}
	c = s.buildCatalog()
	s.opts.Served.Add(c.tools)
	s.mu.Lock()
	if s.cat == nil {
		s.cat = c
	}
	c = s.cat
	s.mu.Unlock()
	return c
}

// invalidate drops the merged catalogue; the next request rebuilds it.
func (s *Server) invalidate() {
	s.mu.Lock()
	s.cat = nil
	s.mu.Unlock()
}

// cleanItems scrubs the catalogue items of one upstream (descriptions and
// titles are text the agent reads); an item that cannot be scanned is left
// out, never listed unscanned.
func (s *Server) cleanItems(up, kind string, items []json.RawMessage) []json.RawMessage {
	if s.opts.Scrubber == nil {
		return items
	}
	out := make([]json.RawMessage, 0, len(items))
	for _, it := range items {
		if clean, ok := s.scrub(context.Background(), up, kind, it); ok {
			out = append(out, clean)
		}
	}
	return out
}

func (s *Server) buildCatalog() *catalog {
	c := &catalog{
		foldTools:      make(map[string]bool),
		toolRoutes:     make(map[string]route),
		promptRoutes:   make(map[string]route),
		resourceRoutes: make(map[string]string),
	}
	for _, t := range s.opts.Fold.Tools() {
		c.tools = append(c.tools, t)
		c.foldTools[jsonscan.StringField(t, "name")] = true
	}
	inject := s.opts.Settings.BranchIDEnabled()
	for _, up := range s.names {
		cat := s.upstreams[up].Catalog()
		cat.Tools = s.cleanItems(up, "tools/list", cat.Tools)
		cat.Prompts = s.cleanItems(up, "prompts/list", cat.Prompts)
		cat.Resources = s.cleanItems(up, "resources/list", cat.Resources)
		cat.ResourceTemplates = s.cleanItems(up, "resources/templates/list", cat.ResourceTemplates)
		for _, t := range cat.Tools {
			name := jsonscan.StringField(t, "name")
			if name == "" || !s.opts.Settings.ToolAllowed(up, name) {
				continue
			}
			full := s.opts.Settings.NamePrefix(up) + name
			out, injected, err := renameTool(t, full, inject)
			if err != nil {
				s.log.Warn("skipping a malformed tool", "upstream", up, "tool", name, "err", err)
				continue
			}
			if _, dup := c.toolRoutes[full]; dup || c.foldTools[full] {
				s.log.Warn("duplicate tool name; keeping the first", "tool", full)
				continue
			}
			c.toolRoutes[full] = route{upstream: up, name: name, injected: injected}
			c.tools = append(c.tools, out)
		}
		for _, p := range cat.Prompts {
			name := jsonscan.StringField(p, "name")
			if name == "" {
				continue
			}
			full := s.opts.Settings.NamePrefix(up) + name
			out, err := jsonscan.SetField(p, "name", jsonscan.Quote(full))
			if err != nil {
				s.log.Warn("skipping a malformed prompt", "upstream", up, "prompt", name, "err", err)
				continue
			}
			c.promptRoutes[full] = route{upstream: up, name: name}
			c.prompts = append(c.prompts, out)
		}
		for _, r := range cat.Resources {
			if uri := jsonscan.StringField(r, "uri"); uri != "" {
				if _, dup := c.resourceRoutes[uri]; !dup {
					c.resourceRoutes[uri] = up
				}
			}
			c.resources = append(c.resources, r)
		}
		for _, t := range cat.ResourceTemplates {
			if tmpl, err := uritemplate.New(jsonscan.StringField(t, "uriTemplate")); err == nil {
				c.templateRoutes = append(c.templateRoutes, templateRoute{upstream: up, tmpl: tmpl})
			}
			c.templates = append(c.templates, t)
		}
		if hasCap(cat.ServerCapabilities, "resources") {
			c.resourceServers = append(c.resourceServers, up)
		}
	}
	return c
}

// renameTool returns the tool with its new name and, when inject is set and
// the tool has no branch_id property of its own, the branch_id property
// added to its input schema. Every other byte is kept.
func renameTool(tool json.RawMessage, name string, inject bool) (json.RawMessage, bool, error) {
	out, err := jsonscan.SetField(tool, "name", jsonscan.Quote(name))
	if err != nil {
		return nil, false, err
	}
	if !inject {
		return out, false, nil
	}
	schema, ok := jsonscan.Field(out, "inputSchema")
	if !ok || len(schema) == 0 || schema[0] != '{' {
		return out, false, nil
	}
	props, ok := jsonscan.Field(schema, "properties")
	if !ok || string(props) == "null" {
		props = json.RawMessage("{}")
	}
	if props[0] != '{' {
		return out, false, nil
	}
	if _, taken := jsonscan.Field(props, branchIDArg); taken {
		return out, false, nil // the upstream uses the name itself: leave it alone
	}
	if props, err = jsonscan.SetField(props, branchIDArg, branchIDSchema); err != nil {
		return nil, false, err
	}
	if schema, err = jsonscan.SetField(schema, "properties", props); err != nil {
		return nil, false, err
	}
	if out, err = jsonscan.SetField(out, "inputSchema", schema); err != nil {
		return nil, false, err
	}
	return out, true, nil
}

// WarnLongNames logs a warning for every tool whose full Claude Code name
// mcp__<entry>__<server>__<tool> passes 64 characters, the limit of
// Anthropic's API. entry is the name foldproxy has in the agent's config.
func (s *Server) WarnLongNames(entry string) int {
	n := 0
	for _, t := range s.catalog().tools {
		name := jsonscan.StringField(t, "name")
		full := "mcp__" + entry + "__" + name
		if len(full) > 64 {
			n++
			s.log.Warn("tool name too long for Claude Code", "tool", name, "full_name", full, "length", len(full),
				"hint", fmt.Sprintf("shorten the server name, set a shorter %q separator, or deny the tool", strings.TrimSpace(s.sep)))
		}
	}
	return n
}

// UpstreamChanged tells the core that an upstream's catalogue or state
// changed: the merged catalogue is rebuilt and every session is sent
// list_changed for the kinds that changed.
func (s *Server) UpstreamChanged(name string) {
	old := s.catalog()
	s.invalidate()
	now := s.catalog()
	var methods []string
	if !sameItems(old.tools, now.tools) {
		methods = append(methods, "notifications/tools/list_changed")
	}
	if !sameItems(old.prompts, now.prompts) {
		methods = append(methods, "notifications/prompts/list_changed")
	}
	if !sameItems(old.resources, now.resources) || !sameItems(old.templates, now.templates) {
		methods = append(methods, "notifications/resources/list_changed")
	}
	if len(methods) == 0 {
		return
	}
	s.log.Debug("catalogue changed", "upstream", name, "notify", methods)
	for _, sess := range s.liveSessions() {
		for _, m := range methods {
			sess.send(nil, Notification(m, nil))
		}
	}
}

func sameItems(a, b []json.RawMessage) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if string(a[i]) != string(b[i]) {
			return false
		}
	}
	return true
}

func (s *Server) liveSessions() []*Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Session, 0, len(s.sessions))
	for _, sess := range s.sessions {
		sess.mu.Lock()
		ok := sess.initialized && !sess.closed && !sess.relayOnly
		sess.mu.Unlock()
		if ok {
			out = append(out, sess)
		}
	}
	return out
}
