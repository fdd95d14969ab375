package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/foldproxy/foldproxy/intercept/secretgen"
)

// Secret is one planted value, the id of the gitleaks rule expected to
// catch it, and the line (several for a private key) that embeds it as
// real output would.
type Secret struct {
	Rule    string `json:"rule"`
	Value   string `json:"value"`
	Context string `json:"context"`
}

// Planter supplies the secrets leaky plants.
type Planter interface {
	Secrets() []Secret
}

// genPlanter plants the secrets of intercept/secretgen: one fresh secret
// for each rule the generator supports (more than 30 of gitleaks' default
// rules), each in its context line.
type genPlanter struct {
	seed uint64
	long bool // plant secretgen's long family instead
}

var _ Planter = genPlanter{}

// Rand returns the generator leaky draws its secrets from for a seed. A
// test that wants to know the secrets without reading the manifest builds
// the same one: rand.New(rand.NewPCG(seed, ^seed)).
func Rand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, ^seed)) }

// Secrets returns secretgen.Generate's secrets for the planter's seed, or
// with long set secretgen.Long's (private keys and JWTs of 5 to 12 KB), in
// secretgen's order. The same seed gives the same secrets.
func (p genPlanter) Secrets() []Secret {
	gen := secretgen.Generate(Rand(p.seed))
	if p.long {
		gen = secretgen.Long(Rand(p.seed))
	}
	out := make([]Secret, len(gen))
	for i, s := range gen {
		out[i] = Secret{Rule: s.RuleID, Value: s.Value, Context: s.Context}
	}
	return out
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// line is how a secret appears in plain text: its context line.
func line(s Secret) string { return s.Context }

// base64Form is how a secret appears base64-encoded: its context line and
// a newline, encoded, as a config file shipped inside JSON or YAML is.
func base64Form(s Secret) string { return b64(line(s) + "\n") }

// jsonForm is how a secret appears inside escaped JSON: a JSON document
// holding a string that is itself a JSON document holding the context
// line, so that the secret sits under two levels of escaping once the
// whole is put in a JSON-RPC message.
func jsonForm(s Secret) string {
	inner, _ := json.Marshal(map[string]string{"rule": s.Rule, "line": line(s)})
	outer, _ := json.Marshal(map[string]string{"config": string(inner)})
	return string(outer)
}

// payload is the text planted for one encoding: one entry per secret.
func payload(secrets []Secret, enc string) (string, error) {
	var lines []string
	for _, s := range secrets {
		switch enc {
		case "plain":
			lines = append(lines, line(s))
		case "base64":
			lines = append(lines, "blob: "+base64Form(s))
		case "json":
			lines = append(lines, jsonForm(s))
		default:
			return "", fmt.Errorf("unknown encoding %q", enc)
		}
	}
	return strings.Join(lines, "\n"), nil
}
