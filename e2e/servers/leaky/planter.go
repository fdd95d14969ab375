package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
)

// Secret is one planted value and the id of the gitleaks rule expected to
// catch it.
type Secret struct {
	Rule  string `json:"rule"`
	Value string `json:"value"`
}

// Planter supplies the secrets leaky plants.
//
// It is the seam to intercept/secretgen, the generator another engineer is
// writing: until it lands, formatPlanter below generates a few values in
// hard-coded formats. Switch main to a secretgen-backed Planter then, and
// delete formatPlanter.
type Planter interface {
	Secrets() []Secret
}

// formatPlanter generates random values in the formats of a few gitleaks
// default rules. Values are made at run time so that no secret-shaped
// literal sits in the source.
//
// Stopgap: to be replaced by intercept/secretgen.
type formatPlanter struct {
	rng *rand.Rand
}

func newFormatPlanter(seed uint64) *formatPlanter {
	return &formatPlanter{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

const (
	upperBase32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
	alnum       = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	digits      = "0123456789"
)

func (p *formatPlanter) pick(alphabet string, n int) string {
	var b strings.Builder
	for range n {
		b.WriteByte(alphabet[p.rng.IntN(len(alphabet))])
	}
	return b.String()
}

// Secrets returns one value per format, in a fixed order.
func (p *formatPlanter) Secrets() []Secret {
	return []Secret{
		{Rule: "aws-access-token", Value: "AKIA" + p.pick(upperBase32, 16)},
		{Rule: "github-pat", Value: "ghp_" + p.pick(alnum, 36)},
		{Rule: "slack-bot-token", Value: "xoxb-" + p.pick(digits, 12) + "-" + p.pick(digits, 12) + "-" + p.pick(alnum, 24)},
		{Rule: "stripe-access-token", Value: "sk_" + "live_" + p.pick(alnum, 24)},
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// base64Form is how a secret appears base64-encoded: an env-file line.
func base64Form(s Secret) string { return b64(envLine(s) + "\n") }

func envLine(s Secret) string {
	return strings.ToUpper(strings.ReplaceAll(s.Rule, "-", "_")) + "=" + s.Value
}

// jsonForm is how a secret appears inside escaped JSON: a JSON document
// holding a string that is itself a JSON document.
func jsonForm(s Secret) string {
	inner, _ := json.Marshal(map[string]string{"rule": s.Rule, "credential": s.Value})
	outer, _ := json.Marshal(map[string]string{"config": string(inner)})
	return string(outer)
}

// payload is the text planted for one encoding: one line per secret.
func payload(secrets []Secret, enc string) (string, error) {
	var lines []string
	for _, s := range secrets {
		switch enc {
		case "plain":
			lines = append(lines, envLine(s))
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
