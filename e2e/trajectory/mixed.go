package trajectory

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Mixed returns about size bytes of realistic tool output: blocks of 2-24
// KB taking turns between the recorded outputs outs (in order, when there
// are any), Go source code, JSON records and log lines. It is
// deterministic. The bench's fast server answers with it, and the
// intercept package's benchmarks run on it.
func Mixed(outs []string, size int) string {
	rng := rand.New(rand.NewPCG(29, 2026))
	var b strings.Builder
	b.Grow(size + 64<<10)
	gens := []func(*strings.Builder, *rand.Rand, int){genCode, genJSON, genLogs}
	next, gen := 0, 0
	for i := 0; b.Len() < size; i++ {
		n := 2<<10 + rng.IntN(22<<10)
		if len(outs) > 0 && i%2 == 0 {
			// The recorded outputs, in order, as many as make the block.
			for w := 0; w < n; {
				o := outs[next%len(outs)]
				next++
				b.WriteString(o)
				if !strings.HasSuffix(o, "\n") {
					b.WriteByte('\n')
				}
				w += len(o) + 1
			}
			continue
		}
		gens[gen%len(gens)](&b, rng, n)
		gen++
	}
	return b.String()
}

var (
	identWords = []string{"user", "item", "order", "session", "branch", "config", "result", "request", "cache", "index",
		"token", "count", "buffer", "reader", "writer", "handler", "client", "server", "record", "entry", "path", "name"}
	typeNames = []string{"int", "string", "[]byte", "error", "bool", "*Client", "map[string]int", "time.Duration", "context.Context", "[]Entry"}
	words     = strings.Fields("the a of to and in is it for that on with as was at by an be this which or from but not are have " +
		"request response failed retry timeout connection cache index value field parse invalid missing found update delete " +
		"create build test run check file folder module package import return error nil true false deadline budget branch")
	levels  = []string{"INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR"}
	methods = []string{"GET", "GET", "POST", "PUT", "DELETE"}
	paths   = []string{"/api/v1/items", "/api/v1/users", "/healthz", "/api/v2/orders", "/static/app.js", "/api/v1/search", "/metrics"}
)

func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

func ident(rng *rand.Rand) string {
	a, b := pick(rng, identWords), pick(rng, identWords)
	return a + strings.ToUpper(b[:1]) + b[1:]
}

func sentence(rng *rand.Rand, n int) string {
	ws := make([]string, n)
	for i := range ws {
		ws[i] = pick(rng, words)
	}
	return strings.Join(ws, " ")
}

func hexString(rng *rand.Rand, n int) string {
	const digits = "0123456789abcdef"
	b := make([]byte, n)
	for i := range b {
		b[i] = digits[rng.IntN(16)]
	}
	return string(b)
}

// genCode writes about n bytes of Go-like source: functions with comments,
// error handling, string literals and struct types.
func genCode(b *strings.Builder, rng *rand.Rand, n int) {
	start := b.Len()
	fmt.Fprintf(b, "// Package %s %s.\npackage %s\n\nimport (\n\t\"context\"\n\t\"errors\"\n\t\"fmt\"\n)\n\n", pick(rng, identWords), sentence(rng, 8), pick(rng, identWords))
	for b.Len()-start < n {
		switch rng.IntN(3) {
		case 0:
			t := strings.ToUpper(ident(rng)[:1]) + ident(rng)[1:]
			fmt.Fprintf(b, "// %s holds %s.\ntype %s struct {\n", t, sentence(rng, 6), t)
			for range 2 + rng.IntN(6) {
				f := ident(rng)
				fmt.Fprintf(b, "\t%s %s `json:\"%s,omitempty\"`\n", strings.ToUpper(f[:1])+f[1:], pick(rng, typeNames), f)
			}
			b.WriteString("}\n\n")
		default:
			fn := ident(rng)
			fmt.Fprintf(b, "// %s %s.\n// It returns an error when %s.\nfunc %s(ctx context.Context, %s %s) (%s, error) {\n",
				fn, sentence(rng, 7), sentence(rng, 5), fn, ident(rng), pick(rng, typeNames), pick(rng, typeNames))
			for range 2 + rng.IntN(5) {
				v := ident(rng)
				switch rng.IntN(4) {
				case 0:
					fmt.Fprintf(b, "\t%s, err := %s(ctx, %d)\n\tif err != nil {\n\t\treturn nil, fmt.Errorf(\"%s: %%w\", err)\n\t}\n", v, ident(rng), rng.IntN(1000), sentence(rng, 4))
				case 1:
					fmt.Fprintf(b, "\tfor i := 0; i < len(%s); i++ {\n\t\t%s[i] += %d\n\t}\n", v, v, rng.IntN(64))
				case 2:
					fmt.Fprintf(b, "\tif %s == nil {\n\t\treturn nil, errors.New(%q)\n\t}\n", v, sentence(rng, 6))
				default:
					fmt.Fprintf(b, "\t%s := map[string]int{%q: %d, %q: %d}\n", v, pick(rng, identWords), rng.IntN(100), pick(rng, identWords), rng.IntN(100))
				}
			}
			b.WriteString("\treturn nil, nil\n}\n\n")
		}
	}
}

// genJSON writes about n bytes of JSON records, one a line, as an API or
// a tool that lists objects prints them.
func genJSON(b *strings.Builder, rng *rand.Rand, n int) {
	start := b.Len()
	for i := 0; b.Len()-start < n; i++ {
		id := rng.IntN(1_000_000)
		fmt.Fprintf(b, `{"id":%d,"node_id":"I_kw%s","title":%q,"state":"%s","user":{"login":"%s","id":%d,"url":"https://api.example.com/users/%s"},"labels":[%q,%q],"comments":%d,"created_at":"2025-%02d-%02dT%02d:%02d:%02dZ","body":%q,"score":%d.%02d}`+"\n",
			id, hexString(rng, 12), sentence(rng, 6), pick(rng, []string{"open", "closed"}), pick(rng, identWords), rng.IntN(100000), pick(rng, identWords),
			pick(rng, words), pick(rng, words), rng.IntN(40), 1+rng.IntN(12), 1+rng.IntN(28), rng.IntN(24), rng.IntN(60), rng.IntN(60),
			sentence(rng, 10+rng.IntN(30)), rng.IntN(100), rng.IntN(100))
	}
}

// genLogs writes about n bytes of server log lines.
func genLogs(b *strings.Builder, rng *rand.Rand, n int) {
	start := b.Len()
	for i := 0; b.Len()-start < n; i++ {
		fmt.Fprintf(b, "2025-06-%02dT%02d:%02d:%02d.%03dZ %-5s [%s] req=%s %s %s/%d status=%d dur=%dms ip=10.%d.%d.%d msg=%q\n",
			1+rng.IntN(28), rng.IntN(24), rng.IntN(60), rng.IntN(60), rng.IntN(1000), pick(rng, levels), pick(rng, identWords),
			hexString(rng, 16), pick(rng, methods), pick(rng, paths), rng.IntN(100000), pick(rng, []int{200, 200, 200, 201, 204, 304, 400, 404, 500}),
			rng.IntN(900), rng.IntN(256), rng.IntN(256), rng.IntN(256), sentence(rng, 3+rng.IntN(8)))
	}
}
