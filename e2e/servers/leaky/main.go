// Command leaky is an MCP stdio server that plants secrets in every channel
// an upstream can use to reach the agent, so that foldproxy's end-to-end
// tests can check that scrubbing covers them all: tool result text,
// structuredContent, embedded resources, error results, JSON-RPC errors,
// resource reads, prompt messages, logging notifications, progress
// notification messages, elicitation requests and sampling requests. Each
// channel carries the secrets plain, base64-encoded and inside escaped JSON.
//
// The secrets come from intercept/secretgen: one for each of the more than
// 30 gitleaks default rules it supports, drawn from a generator seeded by
// -seed (or $LEAKY_SEED), so the same seed plants the same values (see
// Rand). With -manifest FILE it writes what it planted (the values, their
// context lines and the exact encoded forms) to FILE, so a test knows what
// must never reach the agent.
//
// Logs go to stderr; stdout carries JSON-RPC only.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

func main() {
	defSeed := uint64(1)
	if v := os.Getenv("LEAKY_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			fmt.Fprintf(os.Stderr, "leaky: LEAKY_SEED=%q is not an unsigned integer\n", v)
			os.Exit(2)
		}
		defSeed = n
	}
	seed := flag.Uint64("seed", defSeed, "seed of the generated secrets (default $LEAKY_SEED, else 1): the same seed plants the same values")
	manifest := flag.String("manifest", "", "write the planted secrets and their encoded forms to this JSON file")
	long := flag.Bool("long", false, "plant secretgen's long family (private keys and JWTs of 5 to 12 KB) instead of one secret per rule")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	var p Planter = genPlanter{seed: *seed, long: *long}
	l, err := newLeaky(p)
	if err != nil {
		log.Error("leaky: planting", "err", err)
		os.Exit(1)
	}
	if *manifest != "" {
		if err := l.writeManifest(*manifest); err != nil {
			log.Error("leaky: writing manifest", "err", err)
			os.Exit(1)
		}
	}
	if err := server.ServeStdio(l.server(), server.WithErrorLogger(slog.NewLogLogger(log.Handler(), slog.LevelError))); err != nil {
		log.Error("leaky: serving stdio", "err", err)
		os.Exit(1)
	}
}

// Encodings in which a secret is planted.
var encodings = []string{"plain", "base64", "json"}

type leaky struct {
	secrets []Secret
	forms   map[string]string // encoding → payload text
	// releases ends a held leak_progress call (see leakProgress).
	releases chan struct{}
}

func newLeaky(p Planter) (*leaky, error) {
	secrets := p.Secrets()
	if len(secrets) == 0 {
		return nil, fmt.Errorf("planter %T gave no secrets", p)
	}
	l := &leaky{secrets: secrets, forms: map[string]string{}, releases: make(chan struct{}, 16)}
	for _, enc := range encodings {
		text, err := payload(secrets, enc)
		if err != nil {
			return nil, err
		}
		l.forms[enc] = text
	}
	return l, nil
}

// Manifest is what -manifest writes.
type Manifest struct {
	Secrets []Secret `json:"secrets"`
	// Forms holds, by encoding, every string planted that contains or
	// encodes a secret: the raw values for plain, the base64 strings, the
	// escaped-JSON texts.
	Forms map[string][]string `json:"forms"`
}

func (l *leaky) manifest() Manifest {
	m := Manifest{Secrets: l.secrets, Forms: map[string][]string{}}
	for _, s := range l.secrets {
		m.Forms["plain"] = append(m.Forms["plain"], s.Value)
		m.Forms["base64"] = append(m.Forms["base64"], base64Form(s))
		m.Forms["json"] = append(m.Forms["json"], jsonForm(s))
	}
	return m
}

func (l *leaky) writeManifest(path string) error {
	b, err := json.MarshalIndent(l.manifest(), "", "  ")
	if err != nil {
		return fmt.Errorf("encoding manifest: %w", err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("manifest %s: %w", path, err)
	}
	return nil
}

// text returns the payload for an encoding argument: one of encodings, or
// "all" (the default) for every form, one per line.
func (l *leaky) text(enc string) (string, error) {
	if enc == "" || enc == "all" {
		return l.forms["plain"] + "\n" + l.forms["base64"] + "\n" + l.forms["json"], nil
	}
	t, ok := l.forms[enc]
	if !ok {
		return "", fmt.Errorf("unknown encoding %q: want plain, base64, json or all", enc)
	}
	return t, nil
}

func encodingArg() mcp.ToolOption {
	return mcp.WithString("encoding", mcp.Description("plain, base64, json or all (default)"), mcp.Enum("plain", "base64", "json", "all"))
}

func (l *leaky) server() *server.MCPServer {
	s := server.NewMCPServer("leaky", "1.0.0",
		server.WithToolCapabilities(false),
		server.WithResourceCapabilities(false, false),
		server.WithPromptCapabilities(false),
		server.WithLogging(),
		server.WithElicitation(),
	)
	s.EnableSampling()
	tools := []struct {
		name, desc string
		h          server.ToolHandlerFunc
	}{
		{"leak_text", "Returns secrets in the result text.", l.leakText},
		{"leak_structured", "Returns secrets in structuredContent (and its text mirror).", l.leakStructured},
		{"leak_embedded", "Returns secrets inside an embedded text resource and an embedded blob resource.", l.leakEmbedded},
		{"leak_error", "Returns a tool error (isError) whose text holds secrets.", l.leakError},
		{"leak_rpc_error", "Fails with an error whose message holds secrets.", l.leakRPCError},
		{"leak_log", "Sends a logging notification holding secrets, then returns ok.", l.leakLog},
		{"leak_progress", "Sends a progress notification whose message holds secrets (needs a progress token), then returns ok; with hold, only once leak_release is called.", l.leakProgress},
		{"leak_release", "Ends one held leak_progress call.", l.leakRelease},
		{"leak_elicit", "Sends an elicitation request whose message holds secrets and returns the action taken.", l.leakElicit},
		{"leak_sample", "Sends a sampling request whose messages hold secrets and returns the model's text.", l.leakSample},
	}
	for _, t := range tools {
		opts := []mcp.ToolOption{mcp.WithDescription(t.desc), encodingArg()}
		if t.name == "leak_progress" {
			opts = append(opts, mcp.WithBoolean("hold", mcp.Description("return only when leak_release is called (at most a minute later)")))
		}
		s.AddTool(mcp.NewTool(t.name, opts...), t.h)
	}
	for _, enc := range encodings {
		uri := "leaky://secrets/" + enc
		s.AddResource(mcp.NewResource(uri, "secrets-"+enc,
			mcp.WithResourceDescription("A document holding secrets ("+enc+")"),
			mcp.WithMIMEType("text/plain"),
		), l.readResource(uri, enc))
	}
	s.AddPrompt(mcp.NewPrompt("leaky_prompt",
		mcp.WithPromptDescription("A prompt whose messages hold secrets, in text and in an embedded resource."),
		mcp.WithArgument("encoding", mcp.ArgumentDescription("plain, base64, json or all (default)")),
	), l.prompt)
	return s
}

func (l *leaky) leakText(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	text, err := l.text(req.GetString("encoding", "all"))
	if err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	return mcp.NewToolResultText(text), nil
}

func (l *leaky) leakStructured(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	text, err := l.text(req.GetString("encoding", "all"))
	if err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	// Besides the payload, each secret sits bare under a key that names
	// its rule ("datadog-access-token": "..."), the shape of a parsed
	// config; keys are numbered where a rule has several secrets.
	byRule := map[string]any{}
	for _, s := range l.secrets {
		key := s.Rule
		for i := 2; byRule[key] != nil; i++ {
			key = fmt.Sprintf("%s-%d", s.Rule, i)
		}
		byRule[key] = s.Value
	}
	structured := map[string]any{
		"config": map[string]any{"credentials": text},
		"list":   []any{text},
		"env":    byRule,
	}
	return mcp.NewToolResultStructured(structured, text), nil
}

func (l *leaky) leakEmbedded(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	text, err := l.text(req.GetString("encoding", "all"))
	if err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	return &mcp.CallToolResult{Content: []mcp.Content{
		mcp.NewTextContent("two embedded resources follow"),
		mcp.NewEmbeddedResource(mcp.TextResourceContents{URI: "leaky://embedded/text", MIMEType: "text/plain", Text: text}),
		mcp.NewEmbeddedResource(mcp.BlobResourceContents{URI: "leaky://embedded/blob", MIMEType: "text/plain", Blob: b64(text)}),
	}}, nil
}

func (l *leaky) leakError(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	text, err := l.text(req.GetString("encoding", "all"))
	if err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	return mcp.NewToolResultError("request failed, debug dump follows:\n" + text), nil
}

func (l *leaky) leakRPCError(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	text, err := l.text(req.GetString("encoding", "all"))
	if err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	return nil, fmt.Errorf("upstream exploded with %s", text)
}

func (l *leaky) leakLog(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	text, err := l.text(req.GetString("encoding", "all"))
	if err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	srv := server.ServerFromContext(ctx)
	if err := srv.SendLogMessageToClient(ctx, mcp.NewLoggingMessageNotification(mcp.LoggingLevelError, "leaky", text)); err != nil {
		return mcp.NewToolResultErrorf("leak_log: sending the log message: %v", err), nil
	}
	return mcp.NewToolResultText("ok"), nil
}

func (l *leaky) leakProgress(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	text, err := l.text(req.GetString("encoding", "all"))
	if err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	if req.Params.Meta == nil || req.Params.Meta.ProgressToken == nil {
		return mcp.NewToolResultError("leak_progress: call it with a progress token in _meta"), nil
	}
	srv := server.ServerFromContext(ctx)
	err = srv.SendNotificationToClient(ctx, string(mcp.MethodNotificationProgress), map[string]any{
		"progressToken": req.Params.Meta.ProgressToken,
		"progress":      1,
		"total":         1,
		"message":       text,
	})
	if err != nil {
		return mcp.NewToolResultErrorf("leak_progress: sending the notification: %v", err), nil
	}
	// mcp-go writes notifications from a goroutine of their own, so the
	// response can overtake the notification on the wire, and a proxy
	// rightly drops progress that comes after its request's response.
	// With hold the call stays open until the client, having seen the
	// notification, calls leak_release.
	if req.GetBool("hold", false) {
		select {
		case <-l.releases:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Minute):
			return mcp.NewToolResultError("leak_progress: not released within a minute"), nil
		}
	}
	return mcp.NewToolResultText("ok"), nil
}

func (l *leaky) leakRelease(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	select {
	case l.releases <- struct{}{}:
		return mcp.NewToolResultText("released"), nil
	default:
		return mcp.NewToolResultError("leak_release: too many releases pending"), nil
	}
}

func (l *leaky) leakElicit(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	text, err := l.text(req.GetString("encoding", "all"))
	if err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	srv := server.ServerFromContext(ctx)
	res, err := srv.RequestElicitation(ctx, mcp.ElicitationRequest{Params: mcp.ElicitationParams{
		Message: "Please confirm these credentials:\n" + text,
		RequestedSchema: map[string]any{
			"type":       "object",
			"properties": map[string]any{"confirm": map[string]any{"type": "boolean", "description": "confirm " + l.secrets[0].Value}},
		},
	}})
	if err != nil {
		return mcp.NewToolResultErrorf("leak_elicit: elicitation failed: %v", err), nil
	}
	return mcp.NewToolResultText("elicitation action: " + string(res.Action)), nil
}

func (l *leaky) leakSample(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	text, err := l.text(req.GetString("encoding", "all"))
	if err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	srv := server.ServerFromContext(ctx)
	res, err := srv.RequestSampling(ctx, mcp.CreateMessageRequest{CreateMessageParams: mcp.CreateMessageParams{
		Messages:     []mcp.SamplingMessage{{Role: mcp.RoleUser, Content: mcp.NewTextContent("Summarise this config:\n" + text)}},
		SystemPrompt: "You may use the key " + l.secrets[0].Value,
		MaxTokens:    50,
	}})
	if err != nil {
		return mcp.NewToolResultErrorf("leak_sample: sampling failed: %v", err), nil
	}
	if tc, ok := res.Content.(mcp.TextContent); ok {
		return mcp.NewToolResultText("model said: " + tc.Text), nil
	}
	return mcp.NewToolResultText(fmt.Sprintf("model answered with %T", res.Content)), nil
}

func (l *leaky) readResource(uri, enc string) server.ResourceHandlerFunc {
	return func(context.Context, mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
		return []mcp.ResourceContents{mcp.TextResourceContents{URI: uri, MIMEType: "text/plain", Text: l.forms[enc]}}, nil
	}
}

func (l *leaky) prompt(_ context.Context, req mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	text, err := l.text(req.Params.Arguments["encoding"])
	if err != nil {
		return nil, err
	}
	return &mcp.GetPromptResult{
		Description: "secrets in prompt messages",
		Messages: []mcp.PromptMessage{
			mcp.NewPromptMessage(mcp.RoleUser, mcp.NewTextContent("Use these credentials:\n"+text)),
			mcp.NewPromptMessage(mcp.RoleAssistant, mcp.NewEmbeddedResource(mcp.TextResourceContents{URI: "leaky://prompt/embedded", MIMEType: "text/plain", Text: text})),
		},
	}, nil
}
