// Package secretgen makes random secrets that gitleaks' default rules
// detect, each embedded in a line the way real tool output shows it. The
// scrubber's tests and the end-to-end leak test plant them in traffic and
// check that no piece of any of them reaches the agent.
//
// Values are random (from the caller's generator, so a seed reproduces
// them) but valid for their rule: the right prefix, alphabet and length,
// entropy above the rule's threshold, and the keyword the rule needs
// nearby. They are not real credentials.
package secretgen

import (
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"strings"
)

// Secret is one planted secret.
type Secret struct {
	// RuleID is the gitleaks rule expected to find it.
	RuleID string
	// Value is the secret itself: what must not survive scrubbing.
	Value string
	// Context is a line (several for a private key) that embeds Value as
	// real output would, e.g. "export STRIPE_KEY=sk_live_...".
	Context string
}

const (
	upper    = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	lower    = "abcdefghijklmnopqrstuvwxyz"
	digits   = "0123456789"
	alnum    = upper + lower + digits
	lowerNum = lower + digits
	hexLower = "0123456789abcdef"
	// generic values avoid vowels and the letters of short stopwords
	// (html, http, md5, vpn, sha...) that gitleaks' generic rule ignores.
	genericAlpha = "BCDFGJKNQRSWXZbcdfgjknqrswxz0123456789"
	base32       = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
	bech32       = "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L"
)

func pick(rng *rand.Rand, alphabet string, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return string(b)
}

// pickMixed returns n characters of alphabet holding at least one digit,
// one lower and one upper case letter when the alphabet has them, so that
// entropy is high and allowlists for all-letter values do not apply.
func pickMixed(rng *rand.Rand, alphabet string, n int) string {
	for {
		s := pick(rng, alphabet, n)
		ok := true
		for _, class := range []string{digits, lower, upper} {
			if strings.ContainsAny(alphabet, class) && !strings.ContainsAny(s, class) {
				ok = false
			}
		}
		if ok {
			return s
		}
	}
}

func b64url(rng *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.IntN(256))
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func uuid(rng *rand.Rand) string {
	return pick(rng, hexLower, 8) + "-" + pick(rng, hexLower, 4) + "-" + pick(rng, hexLower, 4) + "-" +
		pick(rng, hexLower, 4) + "-" + pick(rng, hexLower, 12)
}

// pem returns a private key block with a random body of about size bytes
// in 64-character lines.
func pem(rng *rand.Rand, kind string, size int) string {
	raw := make([]byte, size*3/4)
	for i := range raw {
		raw[i] = byte(rng.IntN(256))
	}
	body := base64.StdEncoding.EncodeToString(raw)
	var b strings.Builder
	fmt.Fprintf(&b, "-----BEGIN %s-----\n", kind)
	for len(body) > 64 {
		b.WriteString(body[:64])
		b.WriteByte('\n')
		body = body[64:]
	}
	b.WriteString(body)
	fmt.Fprintf(&b, "\n-----END %s-----", kind)
	return b.String()
}

// Generate returns one fresh secret for each supported rule, in a fixed
// order of rules.
func Generate(rng *rand.Rand) []Secret {
	var out []Secret
	add := func(rule, value, format string) {
		out = append(out, Secret{RuleID: rule, Value: value, Context: fmt.Sprintf(format, value)})
	}
	add("aws-access-token", "AKIA"+pick(rng, base32, 16), "export AWS_ACCESS_KEY_ID=%s")
	add("github-pat", "ghp_"+pickMixed(rng, alnum, 36), "GITHUB_TOKEN=%s")
	add("github-fine-grained-pat", "github_pat_"+pickMixed(rng, alnum, 22)+"_"+pickMixed(rng, alnum, 59), "gh auth login --with-token <<< %s")
	add("github-oauth", "gho_"+pickMixed(rng, alnum, 36), "oauth_token: %s")
	add("github-app-token", "ghs_"+pickMixed(rng, alnum, 36), "Authorization: token %s")
	add("gitlab-pat", "glpat-"+pickMixed(rng, alnum, 20), "git clone https://oauth2:%s@gitlab.com/acme/app.git")
	add("slack-bot-token", "xoxb-"+pick(rng, digits, 12)+"-"+pick(rng, digits, 13)+"-"+pickMixed(rng, alnum, 24), "SLACK_BOT_TOKEN=%s")
	add("slack-user-token", "xoxp-"+pick(rng, digits, 12)+"-"+pick(rng, digits, 12)+"-"+pick(rng, digits, 13)+"-"+pickMixed(rng, lowerNum, 32), "slack_user_token = '%s'")
	add("slack-webhook-url", "https://hooks.slack.com/services/T"+pick(rng, upper+digits, 8)+"/B"+pick(rng, upper+digits, 10)+"/"+pickMixed(rng, alnum, 24), "curl -X POST -d @msg.json %s")
	add("stripe-access-token", "sk_live_"+pickMixed(rng, alnum, 40), "export STRIPE_KEY=%s")
	add("gcp-api-key", "AIza"+pickMixed(rng, alnum, 35), `const firebaseConfig = { apiKey: "%s" };`)
	add("openai-api-key", "sk-proj-"+pickMixed(rng, alnum, 74)+"T3BlbkFJ"+pickMixed(rng, alnum, 74), "OPENAI_API_KEY=%s")
	add("openai-api-key", "sk-"+pickMixed(rng, alnum, 20)+"T3BlbkFJ"+pickMixed(rng, alnum, 20), "openai.api_key = \"%s\"")
	add("anthropic-api-key", "sk-ant-api03-"+pickMixed(rng, alnum, 93)+"AA", "ANTHROPIC_API_KEY=%s")
	add("npm-access-token", "npm_"+pickMixed(rng, lowerNum, 36), "//registry.npmjs.org/:_authToken=%s")
	add("pypi-upload-token", "pypi-AgEIcHlwaS5vcmc"+pickMixed(rng, alnum, 70), "password = %s")
	add("sendgrid-api-token", "SG."+pickMixed(rng, alnum, 22)+"."+pickMixed(rng, alnum, 43), "SENDGRID_API_KEY=%s")
	add("twilio-api-key", "SK"+pick(rng, hexLower, 32), "twilio api:core:keys:fetch --sid %s")
	add("jwt", "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."+
		strings.TrimRight(base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, `{"sub":"%s","name":"%s","iat":%d}`, pick(rng, digits, 10), pick(rng, lower, 8), 1700000000+rng.IntN(1e7))), "=")+
		"."+b64url(rng, 32), "Authorization: Bearer %s")
	add("heroku-api-key", uuid(rng), "HEROKU_API_KEY=%s")
	add("heroku-api-key-v2", "HRKU-AA"+pickMixed(rng, alnum, 58), "heroku auth:token -> %s")
	add("shopify-access-token", "shpat_"+pick(rng, hexLower, 32), "X-Shopify-Access-Token: %s")
	add("shopify-shared-secret", "shpss_"+pick(rng, hexLower, 32), "SHOPIFY_SHARED_SECRET=%s")
	add("digitalocean-pat", "dop_v1_"+pick(rng, hexLower, 64), "doctl auth init -t %s")
	add("digitalocean-access-token", "doo_v1_"+pick(rng, hexLower, 64), "DO_OAUTH=%s")
	add("mailgun-private-api-token", "key-"+pick(rng, hexLower, 32), "MAILGUN_API_KEY=%s")
	add("datadog-access-token", pickMixed(rng, lowerNum, 40), "DATADOG_API_KEY=%s")
	add("square-access-token", "sq0atp-"+pickMixed(rng, alnum, 22), "SQUARE_ACCESS_TOKEN=%s")
	add("doppler-api-token", "dp.pt."+pickMixed(rng, alnum, 43), "DOPPLER_TOKEN=%s")
	add("linear-api-key", "lin_api_"+pickMixed(rng, alnum, 40), "LINEAR_API_KEY=%s")
	add("postman-api-token", "PMAK-"+pick(rng, hexLower, 24)+"-"+pick(rng, hexLower, 34), "x-api-key: %s")
	add("vault-service-token", "hvs."+pickMixed(rng, alnum, 96), "VAULT_TOKEN=%s")
	add("hashicorp-tf-api-token", pickMixed(rng, lowerNum, 14)+".atlasv1."+pickMixed(rng, lowerNum, 66), `token = "%s"`)
	add("databricks-api-token", "dapi"+pick(rng, hexLower, 32), "DATABRICKS_TOKEN=%s")
	add("age-secret-key", "AGE-SECRET-KEY-1"+pick(rng, bech32, 58), "# secret key: %s")
	add("grafana-service-account-token", "glsa_"+pickMixed(rng, alnum, 32)+"_"+pick(rng, hexLower, 8), "GRAFANA_TOKEN=%s")
	add("huggingface-access-token", "hf_"+pickMixed(rng, upper+lower, 34), "HF_TOKEN=%s")
	add("sentry-user-token", "sntryu_"+pick(rng, hexLower, 64), "SENTRY_AUTH_TOKEN=%s")
	add("pulumi-api-token", "pul-"+pick(rng, hexLower, 40), "PULUMI_ACCESS_TOKEN=%s")
	add("planetscale-password", "pscale_pw_"+pickMixed(rng, alnum, 43), "DATABASE_PASSWORD=%s")
	add("generic-api-key", pickMixed(rng, genericAlpha, 32), `api_key = "%s"`)
	add("generic-api-key", pickMixed(rng, genericAlpha, 28), `client_secret: %s`)
	add("private-key", pem(rng, "RSA PRIVATE KEY", 3200), "%s")
	add("private-key", pem(rng, "EC PRIVATE KEY", 160), "%s")
	add("private-key", pem(rng, "OPENSSH PRIVATE KEY", 400), "%s")
	add("private-key", pem(rng, "PRIVATE KEY", 1650), "%s")
	return out
}

// Long returns secrets longer than any fixed scan window around a keyword
// can hold: private keys the size of RSA-8192 and RSA-6144 keys (6.4 KB and
// 4.8 KB of PEM), a PKCS#8 key of 9 KB, and JSON Web Tokens of about 6.8 KB
// and 12 KB (OIDC tokens with many claims, signed with RSA-4096). gitleaks'
// default detector finds each of them whole.
func Long(rng *rand.Rand) []Secret {
	var out []Secret
	add := func(rule, value, format string) {
		out = append(out, Secret{RuleID: rule, Value: value, Context: fmt.Sprintf(format, value)})
	}
	add("private-key", pem(rng, "RSA PRIVATE KEY", 6230), "%s")
	add("private-key", pem(rng, "RSA PRIVATE KEY", 4700), "%s")
	add("private-key", pem(rng, "PRIVATE KEY", 9000), "%s")
	add("jwt", longJWT(rng, 6800), "Authorization: Bearer %s")
	add("jwt", longJWT(rng, 12000), `{"id_token": "%s"}`)
	return out
}

// longJWT returns a signed-looking RS256 JSON Web Token of about size bytes
// whose payload carries many claims, as an OIDC ID token with group
// memberships does.
func longJWT(rng *rand.Rand, size int) string {
	header := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"RS256","typ":"JWT","kid":"` + pick(rng, hexLower, 16) + `"}`))
	sig := b64url(rng, 512) // RSA-4096
	var claims strings.Builder
	fmt.Fprintf(&claims, `{"iss":"https://login.example.com/%s","sub":"%s","aud":"%s","iat":%d,"groups":[`,
		uuid(rng), pick(rng, digits, 12), uuid(rng), 1700000000+rng.IntN(1e7))
	for i := 0; ; i++ {
		if i > 0 {
			claims.WriteByte(',')
		}
		fmt.Fprintf(&claims, `"%s"`, uuid(rng))
		if len(header)+len(sig)+2+(claims.Len()+2)*4/3 >= size {
			break
		}
	}
	claims.WriteString("]}")
	return header + "." + base64.RawURLEncoding.EncodeToString([]byte(claims.String())) + "." + sig
}
