package fold

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/foldproxy/foldproxy/policy"
)

// The tests of Fit run it on a wire of words: a result is a text, its
// tokens are its words (wordCounter), a budget cut keeps its first words
// and a cap may keep its first and last words; notices are listed beside
// the kept text and cost their words.

// wres is a result of the word wire.
type wres struct {
	kept    string   // the content delivered
	rest    string   // what a cut left out
	cut     bool     // made by a cut
	notices []string // attached notices
}

// wordWire is the word wire for one result, with faults to inject.
type wordWire struct {
	text      string
	frame     int   // tokens that the first notices attached to a cut add beyond theirs (their container)
	greedy    int   // > 0: a cut to a limit above 0 keeps this many words (it overruns)
	cutErr    error // every cut fails with it
	attachErr error // attaching notices fails with it
	cuts      int   // calls of Cut and of the cap's cut
}

func countWords(s string) int { return wordCounter{}.CountText(s) }

// wordEnd is the byte offset after the first n words of s.
func wordEnd(s string, n int) int {
	end, seen := 0, 0
	for i := 0; i < len(s) && seen < n; {
		for i < len(s) && s[i] == ' ' {
			i++
		}
		if i == len(s) {
			break
		}
		for i < len(s) && s[i] != ' ' {
			i++
		}
		end, seen = i, seen+1
	}
	return end
}

func (w *wordWire) Cut(limit int) (wres, Piece, error) {
	w.cuts++
	if w.cutErr != nil {
		return wres{}, Piece{}, w.cutErr
	}
	if w.greedy > 0 && limit > 0 {
		limit = w.greedy
	}
	end := wordEnd(w.text, max(limit, 0))
	r := wres{kept: w.text[:end], rest: w.text[end:], cut: true}
	return r, Piece{Kept: countWords(r.kept), Bytes: len(r.kept), RestBytes: len(r.rest)}, nil
}

// headTail keeps the first half of limit words and the last half.
func (w *wordWire) headTail(limit int) (wres, Piece, error) {
	w.cuts++
	f := strings.Fields(w.text)
	if limit >= len(f) {
		return wres{kept: w.text, cut: true}, Piece{Kept: len(f), Bytes: len(w.text)}, nil
	}
	h := max(limit, 0) / 2
	t := max(limit, 0) - h
	kept := strings.Join(append(append([]string(nil), f[:h]...), f[len(f)-t:]...), " ")
	rest := strings.Join(f[h:len(f)-t], " ")
	return wres{kept: kept, rest: rest, cut: true}, Piece{Kept: h + t, Bytes: len(kept), RestBytes: len(rest)}, nil
}

func (w *wordWire) NoticeTokens(n string) int { return countWords(n) }

func (w *wordWire) Attach(r wres, tokens int, notices []string) (wres, int, error) {
	if w.attachErr != nil {
		return wres{}, 0, w.attachErr
	}
	if r.cut && len(notices) > 0 && len(r.notices) == 0 {
		tokens += w.frame // the notices' container, made once
	}
	r.notices = append(append([]string(nil), r.notices...), notices...)
	return r, tokens, nil
}

// tokens is the exact count of a delivered result on this wire.
func (w *wordWire) tokens(r wres) int {
	n := countWords(r.kept)
	for _, s := range r.notices {
		n += countWords(s)
	}
	if r.cut && len(r.notices) > 0 {
		n += w.frame
	}
	return n
}

func (w *wordWire) measured(notices bool) Measured[wres] {
	return Measured[wres]{Result: wres{kept: w.text}, Tokens: countWords(w.text), Bytes: len(w.text), Notices: notices}
}

// stub is the notice of a capped result in these tests.
func stub(kept, total int, estimated bool) string {
	return "[foldproxy] kept " + Commas(kept) + " of " + Commas(total) + " tokens; branch_recall with handle \"h\" reads the middle."
}

var testThresholds = policy.Default().Fold.Thresholds

func TestFit(t *testing.T) {
	const h = "b~h"
	cutNote := func(kept, total int) string { return CutNotice("b", h, false, kept, total, false) }
	type got struct {
		Verdict Verdict
		Kept    int // words of content delivered
		Notices []string
		Tokens  int
		Level   policy.Level
		Forced  bool
		Message string
		Cuts    int
	}
	tests := []struct {
		name  string
		bud   Budget
		wire  wordWire
		notes bool // the result can carry notices
		opt   FitOptions[wres]
		over  int // > 0: counting stopped after this many tokens
		want  got
	}{
		{
			name: "unlimited", bud: Budget{Branch: "b", Remaining: -1, Handle: h},
			wire: wordWire{text: words(5000, "a")}, notes: true,
			want: got{Verdict: FitWhole, Kept: 5000, Tokens: 5000},
		},
		{
			name: "fits beyond the reserve", bud: Budget{Branch: "b", Total: 1000, Used: 100, Remaining: 900, Reserve: 40, Handle: h},
			wire: wordWire{text: words(300, "a")}, notes: true,
			want: got{Verdict: FitWhole, Kept: 300, Tokens: 300},
		},
		{
			// The warning's figures include the warning itself: 840 words
			// are 84% (caution), with its 18 words they are 85.8%.
			name: "warning at its fixed point", bud: Budget{Branch: "b", Total: 1000, Remaining: 1000, Handle: h},
			wire: wordWire{text: words(840, "a")}, notes: true,
			want: got{Verdict: FitWhole, Kept: 840, Tokens: 858, Level: policy.Warning,
				Notices: []string{"[foldproxy] branch b budget: 858/1,000 tokens used (85%, warning). Wrap up and call branch_return with what you have."}},
		},
		{
			name: "no second warning at the same level", bud: Budget{Branch: "b", Total: 1000, Used: 860, Remaining: 140, Level: "warning", Handle: h},
			wire: wordWire{text: words(20, "a")}, notes: true,
			want: got{Verdict: FitWhole, Kept: 20, Tokens: 20, Level: policy.Warning},
		},
		{
			name: "main thread's warning", bud: Budget{Branch: "root-s", Total: 1000, Used: 600, Remaining: 1000 - 600, Handle: h},
			wire: wordWire{text: words(100, "a")}, notes: true, opt: FitOptions[wres]{Root: true},
			want: got{Verdict: FitWhole, Kept: 100, Tokens: 120, Level: policy.Caution,
				Notices: []string{"[foldproxy] main thread budget: 720/1,000 tokens used (72%, caution). Keep tool output small: do large reads inside a branch (branch_create)."}},
		},
		{
			name: "a warning that does not fit is left out", bud: Budget{Branch: "b", Total: 1000, Remaining: 1000, Handle: h},
			wire: wordWire{text: words(990, "a")}, notes: true,
			want: got{Verdict: FitWhole, Kept: 990, Tokens: 990, Level: policy.Critical},
		},
		{
			name: "summaries, trimmed and marked", bud: Budget{Branch: "b", Total: 1000, Remaining: 1000, Handle: h,
				Summaries: []string{" branch b-2 was force-returned. ", "", "[foldproxy] branch b-3 returned."}},
			wire: wordWire{text: words(10, "a")}, notes: true,
			want: got{Verdict: FitWhole, Kept: 10, Tokens: 19,
				Notices: []string{"[foldproxy] branch b-2 was force-returned.", "[foldproxy] branch b-3 returned."}},
		},
		{
			name: "no notices on a result that carries none", bud: Budget{Branch: "b", Total: 1000, Used: 500, Remaining: 500, Reserve: 40, Handle: h,
				Summaries: []string{"branch b-2 returned."}},
			wire: wordWire{text: words(480, "a")},
			want: got{Verdict: FitWhole, Kept: 480, Tokens: 480, Level: policy.Critical},
		},
		{
			name: "notices that cannot be attached", bud: Budget{Branch: "b", Total: 1000, Remaining: 1000, Handle: h, Summaries: []string{"S"}},
			wire: wordWire{text: words(10, "a"), attachErr: errors.New("no notice array")}, notes: true,
			want: got{Verdict: FitWhole, Kept: 10, Tokens: 10},
		},
		{
			// 80 words would leave less than the reserve of 30: cut, the
			// 34-word notice included.
			name: "the reserve", bud: Budget{Branch: "b", Total: 100, Remaining: 100, Reserve: 30, Handle: h},
			wire: wordWire{text: words(80, "a")}, notes: true,
			want: got{Verdict: FitCut, Kept: 66, Tokens: 100, Level: policy.Critical, Forced: true,
				Notices: []string{cutNote(66, 80)}, Cuts: 1},
		},
		{
			name: "cut of a main thread", bud: Budget{Branch: "root-s", Total: 200, Used: 50, Remaining: 150, Reserve: 40, Handle: h},
			wire: wordWire{text: words(500, "a")}, notes: true, opt: FitOptions[wres]{Root: true},
			want: got{Verdict: FitCut, Kept: 150 - countWords(CutNotice("root-s", h, true, 100, 500, false)), Tokens: 150, Level: policy.Critical,
				Notices: []string{CutNotice("root-s", h, true, 150-countWords(CutNotice("root-s", h, true, 100, 500, false)), 500, false)}, Cuts: 1},
		},
		{
			name: "cut with summaries", bud: Budget{Branch: "b", Total: 100, Remaining: 100, Reserve: 30, Handle: h, Summaries: []string{"branch b-2 returned."}},
			wire: wordWire{text: words(200, "a")}, notes: true,
			want: got{Verdict: FitCut, Kept: 62, Tokens: 100, Level: policy.Critical, Forced: true,
				Notices: []string{"[foldproxy] branch b-2 returned.", cutNote(62, 200)}, Cuts: 1},
		},
		{
			// Attaching costs 3 tokens more than the notices: the first cut
			// overruns by 3, the second keeps 3 words fewer.
			name: "the cut corrects an overrun", bud: Budget{Branch: "b", Total: 100, Remaining: 100, Reserve: 30, Handle: h},
			wire: wordWire{text: words(200, "a"), frame: 3}, notes: true,
			want: got{Verdict: FitCut, Kept: 63, Tokens: 100, Level: policy.Critical, Forced: true,
				Notices: []string{cutNote(63, 200)}, Cuts: 2},
		},
		{
			// A cut that always keeps 70 words overruns by 4 each time:
			// four tries, then the notice alone.
			name: "four tries, then the notice alone", bud: Budget{Branch: "b", Total: 100, Remaining: 100, Reserve: 30, Handle: h},
			wire: wordWire{text: words(200, "a"), greedy: 70}, notes: true,
			want: got{Verdict: FitCut, Kept: 0, Tokens: 34, Forced: true,
				Notices: []string{cutNote(0, 200)}, Cuts: 5},
		},
		{
			name: "the summaries give way to the cut notice", bud: Budget{Branch: "b", Total: 100, Used: 60, Remaining: 40, Handle: h,
				Summaries: []string{"branch b-2 was force-returned: " + words(20, "x")}},
			wire: wordWire{text: words(200, "a")}, notes: true,
			want: got{Verdict: FitCut, Kept: 0, Tokens: 34, Level: policy.Warning, Forced: true,
				Notices: []string{cutNote(0, 200)}, Cuts: 1},
		},
		{
			name: "the short notice", bud: Budget{Branch: "b", Total: 100, Used: 90, Remaining: 10, Level: "critical", Handle: h},
			wire: wordWire{text: words(200, "a")}, notes: true,
			want: got{Verdict: FitCut, Kept: 0, Tokens: 5, Level: policy.Critical, Forced: true,
				Notices: []string{ShortCutNotice(h)}, Cuts: 1},
		},
		{
			name: "spent: a branch", bud: Budget{Branch: "b", Total: 100, Used: 97, Remaining: 3, Level: "critical", Handle: h},
			wire: wordWire{text: words(200, "a")}, notes: true,
			want: got{Verdict: FitSpent, Level: policy.Critical, Forced: true,
				Message: SpentNotice("b", h, false, 3, 100), Cuts: 1},
		},
		{
			// A main thread is never given the short form.
			name: "spent: the main thread", bud: Budget{Branch: "root-s", Total: 100, Used: 90, Remaining: 10, Level: "critical", Handle: h},
			wire: wordWire{text: words(200, "a")}, notes: true, opt: FitOptions[wres]{Root: true},
			want: got{Verdict: FitSpent, Level: policy.Critical,
				Message: SpentNotice("root-s", h, true, 10, 100), Cuts: 1},
		},
		{
			name: "refused: no notices", bud: Budget{Branch: "b", Total: 100, Used: 50, Remaining: 50, Level: "normal", Handle: h},
			wire: wordWire{text: words(60, "a")},
			want: got{Verdict: FitRefused},
		},
		{
			name: "refused: the cut fails", bud: Budget{Branch: "b", Total: 100, Used: 50, Remaining: 50, Level: "normal", Handle: h},
			wire: wordWire{text: words(60, "a"), cutErr: errors.New("not cuttable")}, notes: true,
			want: got{Verdict: FitRefused, Cuts: 1},
		},
		{
			name: "a count that stopped early is estimated", bud: Budget{Branch: "b", Total: 100, Remaining: 100, Reserve: 40, Handle: h},
			wire: wordWire{text: words(1000, "a")}, notes: true, over: 101,
			want: got{Verdict: FitCut, Kept: 65, Tokens: 100, Level: policy.Critical, Forced: true,
				Notices: []string{CutNotice("b", h, false, 65, 65+int(float64(len(words(1000, "a")[len(words(65, "a")):]))*65/float64(len(words(65, "a")))), true)}, Cuts: 1},
		},
		// The cap: at most Limit tokens of one result, not a budget overrun.
		{
			name: "capped: head and tail, unlimited", bud: Budget{Branch: "root-s", Remaining: -1, Handle: h},
			wire: wordWire{text: words(500, "a")}, notes: true,
			opt: FitOptions[wres]{Root: true, Cap: Cap[wres]{Limit: 100, Notice: stub}},
			want: got{Verdict: FitCapped, Kept: 100 - countWords(stub(100, 500, false)), Tokens: 100,
				Notices: []string{stub(100-countWords(stub(100, 500, false)), 500, false)}, Cuts: 1},
		},
		{
			name: "capped in a branch: not forced, warned", bud: Budget{Branch: "b", Total: 300, Used: 180, Remaining: 120, Reserve: 33, Handle: h},
			wire: wordWire{text: words(500, "a")}, notes: true,
			opt: FitOptions[wres]{Cap: Cap[wres]{Limit: 40, Notice: stub}},
			want: got{Verdict: FitCapped, Kept: 40 - countWords(stub(40, 500, false)), Tokens: 40 + 16, Level: policy.Caution,
				Notices: []string{stub(40-countWords(stub(40, 500, false)), 500, false),
					"[foldproxy] branch b budget: 236/300 tokens used (78%, caution). Finish the sub-task and call branch_return soon."}, Cuts: 1},
		},
		{
			name: "under the cap: whole", bud: Budget{Branch: "b", Remaining: -1, Handle: h},
			wire: wordWire{text: words(90, "a")}, notes: true,
			opt:  FitOptions[wres]{Cap: Cap[wres]{Limit: 100, Notice: stub}},
			want: got{Verdict: FitWhole, Kept: 90, Tokens: 90},
		},
		{
			name: "a cap below its own notice is not applied", bud: Budget{Branch: "b", Remaining: -1, Handle: h},
			wire: wordWire{text: words(90, "a")}, notes: true,
			opt:  FitOptions[wres]{Cap: Cap[wres]{Limit: 5, Notice: stub}},
			want: got{Verdict: FitWhole, Kept: 90, Tokens: 90, Cuts: 1},
		},
		{
			// The capped result (60) would leave less than the reserve:
			// a budget cut, which keeps no more content than the cap.
			name: "capped, and over the budget still: a budget cut within the cap", bud: Budget{Branch: "b", Total: 300, Used: 100, Remaining: 200, Reserve: 150, Handle: h},
			wire: wordWire{text: words(500, "a")}, notes: true,
			opt: FitOptions[wres]{Cap: Cap[wres]{Limit: 60, Notice: stub}},
			want: got{Verdict: FitCut, Kept: 60, Tokens: 94, Forced: true,
				Notices: []string{cutNote(60, 500)}, Cuts: 2},
		},
		{
			name: "capped, and over the budget still: a budget cut", bud: Budget{Branch: "b", Total: 100, Used: 30, Remaining: 70, Reserve: 33, Handle: h},
			wire: wordWire{text: words(500, "a")}, notes: true,
			opt: FitOptions[wres]{Cap: Cap[wres]{Limit: 60, Notice: stub}},
			want: got{Verdict: FitCut, Kept: 70 - 34, Tokens: 70, Level: policy.Critical, Forced: true,
				Notices: []string{cutNote(36, 500)}, Cuts: 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := tt.wire
			m := w.measured(tt.notes)
			if tt.over > 0 {
				m.Tokens, m.Over = tt.over, true
			}
			opt := tt.opt
			opt.Thresholds = testThresholds
			if opt.Cap.Limit > 0 {
				opt.Cap.Cut = w.headTail
			}
			d := Fit(tt.bud, m, &w, opt)
			g := got{Verdict: d.Verdict, Kept: countWords(d.Result.kept), Notices: d.Notices, Tokens: d.Tokens,
				Level: d.Level, Forced: d.Forced, Message: d.Message, Cuts: w.cuts}
			if !reflect.DeepEqual(g, tt.want) {
				t.Errorf("Fit:\n got %+v\nwant %+v", g, tt.want)
			}
			if !reflect.DeepEqual(d.Result.notices, d.Notices) {
				t.Errorf("notices attached %q, decided %q", d.Result.notices, d.Notices)
			}
			if d.Verdict <= FitCut && w.tokens(d.Result) != d.Tokens {
				t.Errorf("charged %d tokens for a result of %d", d.Tokens, w.tokens(d.Result))
			}
		})
	}
}

// TestFitVerdictNames pins the verdicts' names (they appear in logs).
func TestFitVerdictNames(t *testing.T) {
	var got []string
	for v := FitWhole; v <= FitRefused+1; v++ {
		got = append(got, v.String())
	}
	if want := "whole capped cut spent refused unknown"; strings.Join(got, " ") != want {
		t.Errorf("verdicts %q, want %q", got, want)
	}
}

// FuzzFit walks Fit over budgets, results and faults: the charge never
// exceeds what is left and is exactly what is delivered, a result never
// arrives empty without a notice, and nothing of a cut is lost.
func FuzzFit(f *testing.F) {
	f.Add(100, 0, 30, 80, 0, false, true, 0, 0, 0, 0, uint8(0))
	f.Add(100, 97, 30, 200, 0, false, true, 2, 0, 0, 0, uint8(3))
	f.Add(100, 90, 30, 200, 0, true, true, 0, 0, 0, 0, uint8(1))
	f.Add(0, 0, 0, 500, 0, true, true, 0, 0, 100, 0, uint8(0))
	f.Add(150, 50, 33, 500, 0, false, true, 1, 3, 40, 60, uint8(2))
	f.Add(1000, 840, 40, 200, 120, false, true, 1, 0, 0, 0, uint8(1))
	f.Add(100, 50, 0, 60, 0, false, false, 1, 0, 0, 0, uint8(0))
	f.Fuzz(func(t *testing.T, total, used, reserve, n, over int, root, notes bool, sums, frame, capLimit, greedy int, lvl uint8) {
		total, used, reserve = clampF(total, 0, 5000), clampF(used, 0, 5000), clampF(reserve, 0, 200)
		n, over, sums, frame = clampF(n, 0, 3000), clampF(over, 0, 3000), clampF(sums, 0, 3), clampF(frame, 0, 5)
		capLimit, greedy = clampF(capLimit, 0, 3000), clampF(greedy, 0, 3000)
		bud := Budget{Branch: "b", Handle: "b~h", Total: total, Remaining: -1, Level: policy.Level(lvl % 5).String()}
		if total > 0 {
			used = min(used, total)
			bud.Used, bud.Remaining, bud.Reserve = used, total-used, reserve
		}
		for i := range sums {
			bud.Summaries = append(bud.Summaries, "branch b-"+Commas(i)+" returned: "+words(i*7, "s"))
		}
		text := words(n, "w")
		w := &wordWire{text: text, frame: frame, greedy: greedy}
		m := w.measured(notes)
		if over > 0 && over < n && total > 0 {
			m.Tokens, m.Over = over, true
		}
		opt := FitOptions[wres]{Root: root, Thresholds: testThresholds}
		if capLimit > 0 {
			opt.Cap = Cap[wres]{Limit: capLimit, Notice: stub, Cut: w.headTail}
		}
		d := Fit(bud, m, w, opt)

		if bud.Remaining >= 0 && d.Tokens > bud.Remaining {
			t.Fatalf("charged %d tokens with %d left: %+v", d.Tokens, bud.Remaining, d)
		}
		old, _ := policy.ParseLevel(bud.Level)
		if d.Level < old {
			t.Fatalf("level fell from %s to %s", old, d.Level)
		}
		switch d.Verdict {
		case FitWhole, FitCapped, FitCut:
			if got := w.tokens(d.Result); got != d.Tokens {
				t.Fatalf("%s: charged %d tokens for a result of %d", d.Verdict, d.Tokens, got)
			}
			if d.Result.kept == "" && text != "" && len(d.Notices) == 0 {
				t.Fatalf("%s: an empty result without a notice", d.Verdict)
			}
			if d.Verdict == FitWhole && d.Result.kept != text {
				t.Fatalf("whole: delivered %q of %q", d.Result.kept, text)
			}
			if d.Verdict == FitCut {
				if d.Result.kept+d.Result.rest != text || d.Forced == root {
					t.Fatalf("cut: kept %q + rest %q, forced %v", d.Result.kept, d.Result.rest, d.Forced)
				}
				if !notes {
					t.Fatal("a result that carries no notices was cut")
				}
			}
			if d.Verdict == FitCapped {
				if capLimit == 0 || !notes || countWords(d.Result.kept)+countWords(d.Notices[0]) > capLimit {
					t.Fatalf("capped to %d: kept %d words and notice %q", capLimit, countWords(d.Result.kept), d.Notices[0])
				}
			}
		case FitSpent:
			if d.Tokens != 0 || d.Message == "" || !strings.Contains(d.Message, `"b~h"`) || d.Result.rest != text || d.Forced == root {
				t.Fatalf("spent: %+v", d)
			}
		case FitRefused:
			if d.Tokens != 0 || notes {
				t.Fatalf("refused: %+v", d)
			}
		default:
			t.Fatalf("verdict %d", d.Verdict)
		}
		if root && d.Forced {
			t.Fatal("the main thread force-returned")
		}
		for _, s := range d.Notices {
			if s == ShortCutNotice("b~h") && root {
				t.Fatal("the main thread was given the short notice")
			}
		}
	})
}

func clampF(v, lo, hi int) int { return min(max(v, lo), hi) }
