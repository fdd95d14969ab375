package modelwire

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden outputs in testdata/golden")

var reAWS = regexp.MustCompile(`AKIA[0-9A-Z]{16}`)

// testScrub redacts AWS access key ids, as the gitleaks rule would.
func testScrub(_ context.Context, s string) (string, error) {
	return reAWS.ReplaceAllString(s, "[REDACTED:aws-access-token]"), nil
}

// goldenSummary is what a golden case records besides the forwarded body.
type goldenSummary struct {
	Changed      bool     `json:"changed"`
	Folded       []string `json:"folded"`
	Branches     []string `json:"branches"`
	TokensBefore int      `json:"tokens_before"`
	TokensAfter  int      `json:"tokens_after"`
	Reminders    int      `json:"reminders"`
	Cut          int      `json:"cut"`
	Charges      []string `json:"charges"`
	// Automatic folds, for the *-autofold cases: "kind tool-use-id".
	AutoFolds []string `json:"autofolds,omitempty"`
}

// TestGolden folds the real request shapes in testdata/golden/*: each
// directory holds request.json and state.json (the branches the State
// knows); forwarded.json and result.json are the expected output,
// rewritten by go test -run TestGolden -update.
func TestGolden(t *testing.T) {
	dirs, err := filepath.Glob("testdata/golden/*")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			req := readFile(t, filepath.Join(dir, "request.json"))
			var sf struct{ Branches []Branch }
			if err := json.Unmarshal(readFile(t, filepath.Join(dir, "state.json")), &sf); err != nil {
				t.Fatal(err)
			}
			var st State = newFakeState(sf.Branches...)
			opt := Options{Scrub: testScrub, Guidance: Guidance{AfterTokens: 400}}
			auto := strings.HasSuffix(filepath.Base(dir), "-autofold")
			if auto {
				// Automatic folding with the oversize rule in reach.
				st = newFolder(sf.Branches...)
				opt.AutoFold = AutoFold{Mode: ModeOn, Oversize: 1500, KeepHead: 300, KeepTail: 150}
			}
			d := Anthropic
			switch {
			case strings.HasPrefix(filepath.Base(dir), "openai-chat"):
				d = OpenAIChat
			case strings.HasPrefix(filepath.Base(dir), "openai-responses"):
				d = OpenAIResponses
			}
			if err := Check(d, req); err != nil {
				t.Fatalf("the golden request itself is not valid: %v", err)
			}
			res := mustApply(t, d, req, st, opt)
			var charges []string
			if fs, ok := st.(*fakeState); ok {
				charges = fs.order
			} else {
				charges = st.(*folderState).order
			}
			sum := goldenSummary{Changed: res.Changed, Folded: res.Folded, Branches: res.Branches,
				TokensBefore: res.TokensBefore, TokensAfter: res.TokensAfter, Reminders: res.Reminders, Cut: res.Cut, Charges: charges}
			for _, r := range res.AutoFold.New {
				sum.AutoFolds = append(sum.AutoFolds, r.Kind+" "+r.ToolUseID)
			}
			if auto && len(sum.AutoFolds) < 3 {
				t.Errorf("the autofold case folds %v: too little to show the rules", sum.AutoFolds)
			}
			sumJSON, _ := json.MarshalIndent(sum, "", "  ")
			sumJSON = append(sumJSON, '\n')
			// Determinism: the same request and state give the same bytes.
			again := mustApply(t, d, req, st, opt)
			if !bytes.Equal(again.Body, res.Body) {
				t.Fatal("a second Apply gave different bytes")
			}
			if *update {
				writeFile(t, filepath.Join(dir, "forwarded.json"), res.Body)
				writeFile(t, filepath.Join(dir, "result.json"), sumJSON)
				return
			}
			if want := readFile(t, filepath.Join(dir, "forwarded.json")); !bytes.Equal(res.Body, want) {
				t.Errorf("forwarded request differs from forwarded.json (run with -update after checking):\n got %s\nwant %s", res.Body, want)
			}
			if want := readFile(t, filepath.Join(dir, "result.json")); !bytes.Equal(sumJSON, want) {
				t.Errorf("result differs from result.json:\n got %s\nwant %s", sumJSON, want)
			}
		})
	}
}

func readFile(t testing.TB, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t testing.TB, p string, b []byte) {
	t.Helper()
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
