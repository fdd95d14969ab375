package secrets

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// scanText is one text the engine scans: a view of the raw text (the raw
// text itself, or one with a level of JSON escaping undone), or a window
// of a deeper view around its decoded escapes, starting at off in v.text.
type scanText struct {
	v    *view
	off  int
	text string
	nls  []int
}

// scanJob is one piece of a scanText: the secrets whose keyword starts in
// text[lo:hi], or (rule >= 0) one whole rule over the whole text. It holds
// its text by value, and ti is the text's index in the scan's list: a scan
// of one piece then keeps its texts and jobs in its own frame (a pointer
// to a text, shared with the workers of runJobsParallel, would move every
// text to the heap).
type scanJob struct {
	t      scanText
	ti     int
	lo, hi int
	rule   int
}

// scan finds the secrets of text and returns them merged. In JSON mode
// text is JSON: its strings are scanned decoded. Besides the text as it
// is, the views with one and two more levels of JSON escaping undone are
// scanned around their escape sequences.
//
// Texts longer than a chunk are scanned in pieces of about s.chunk bytes,
// in parallel. Pieces do not overlap and are cut where no stretched rule
// can run through the cut; a piece scans the windows of the keywords that
// start in it, wherever they reach, so a secret across a piece border is
// found whole. Rules that can run through any byte (private keys) are
// run once over the whole text when a piece reports their keyword.
//
// It also returns the view the scan starts from: in JSON mode the text with
// one level of escaping undone (its strings decoded), else the text itself.
func (s *Scrubber) scan(ctx context.Context, text string, jsonMode bool) ([]found, *view, error) {
	if uint64(len(text)) > maxScanText {
		return nil, nil, &ScanError{Reason: fmt.Sprintf("scan refused: the text is %d bytes, over the scrubber's limit of %d", len(text), uint64(maxScanText))}
	}
	root := &view{text: text}
	cur := root
	if jsonMode {
		if v, ok := unescapeView(root, true); ok {
			cur = v
		}
	}
	first := cur
	nls := cur.nls
	if cur.parent == nil {
		nls = newlines(cur.text, nil)
	}
	// Sized for the common scan, which these fit: kept in this frame.
	texts := make([]scanText, 0, 4)
	texts = append(texts, scanText{v: cur, text: cur.text, nls: nls})
	// The deeper views are the scan's own: their buffers go back when it
	// ends (every job has ended by then, runJobs waits for them; what
	// the scan returns holds offsets into the raw text).
	var deeper []*view
	defer func() {
		for _, v := range deeper {
			v.release()
		}
	}()
	for range unescapeDepth {
		v, ok := unescapeView(cur, false)
		if !ok {
			break
		}
		deeper = append(deeper, v)
		for _, w := range v.changedWindows(unescapePad) {
			sub := v.text[w[0]:w[1]]
			texts = append(texts, scanText{v: v, off: w[0], text: sub, nls: newlines(sub, nil)})
		}
		cur = v
	}
	jobs := make([]scanJob, 0, 4)
	for ti, t := range texts {
		for lo := 0; lo < len(t.text); {
			hi := len(t.text)
			if len(t.text)-lo > s.chunk {
				hi = s.eng.splitPoint(t.text, lo+s.chunk)
			}
			jobs = append(jobs, scanJob{t: t, ti: ti, lo: lo, hi: hi, rule: -1})
			lo = hi
		}
	}
	res := make([]jobResult, 4)
	if len(jobs) > len(res) {
		res = make([]jobResult, len(jobs))
	}
	res = res[:len(jobs)]
	if err := s.runJobs(ctx, jobs, res); err != nil {
		return nil, nil, err
	}
	// Second round: whole rules whose keyword a piece saw.
	var more []scanJob
	seen := map[[2]int]bool{}
	for i, r := range res {
		for _, ri := range r.whole {
			k := [2]int{jobs[i].ti, ri}
			if !seen[k] {
				seen[k] = true
				more = append(more, scanJob{t: jobs[i].t, ti: jobs[i].ti, rule: ri})
			}
		}
	}
	var all []found
	for i, r := range res {
		all = appendMapped(all, jobs[i].t.v, r.fs, jobs[i].t.off)
	}
	// Compressed text (gzip+base64, split.go), looked for in the
	// text as the client reads it.
	if strings.Contains(first.text, gzipMagic64) {
		gz, err := s.gzipFindings(ctx, first.text)
		if err != nil {
			return nil, nil, err
		}
		all = appendMapped(all, first, gz, 0)
	}
	if len(more) > 0 {
		res2 := make([]jobResult, len(more))
		if err := s.runJobs(ctx, more, res2); err != nil {
			return nil, nil, err
		}
		for i, r := range res2 {
			all = appendMapped(all, more[i].t.v, r.fs, more[i].t.off)
		}
	}
	if len(all) == 0 {
		return nil, first, nil
	}
	all = append(all, sweep(text, all)...)
	return mergeFound(all), first, nil
}

// jobResult is what one scanJob found.
type jobResult struct {
	fs    []found
	whole []int
}

// runJob runs one scanJob.
func (s *Scrubber) runJob(ctx context.Context, j scanJob) (jobResult, error) {
	if j.rule >= 0 {
		fs, err := s.eng.findWhole(ctx, j.t.text, j.rule)
		return jobResult{fs: fs}, err
	}
	fs, whole, err := s.find(ctx, j.t.text, j.t.nls, j.lo, j.hi)
	return jobResult{fs: fs, whole: whole}, err
}

// runJobs runs jobs over GOMAXPROCS workers and stores their results in
// res, in order (res has a result for each job). The first error (a
// *ScanError first) cancels the rest.
func (s *Scrubber) runJobs(ctx context.Context, jobs []scanJob, res []jobResult) error {
	if len(jobs) == 1 {
		r, err := s.runJob(ctx, jobs[0])
		res[0] = r
		return err
	}
	results, err := s.runJobsParallel(ctx, slices.Clone(jobs))
	copy(res, results)
	return err
}

// runJobsParallel is runJobs of more than one job. It is a function of its
// own so that what its workers share is put on the heap only when there
// are workers (a small text is one job); jobs is its own, shared with
// them.
func (s *Scrubber) runJobsParallel(ctx context.Context, jobs []scanJob) ([]jobResult, error) {
	results := make([]jobResult, len(jobs))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	workers := min(runtime.GOMAXPROCS(0), len(jobs))
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, workers)
	// Worker 0 is this goroutine, which would only wait otherwise.
	var first func()
	for w := range workers {
		wg.Add(1)
		work := func() {
			if w > 0 {
				growStack(0)
			}
			defer wg.Done()
			defer func() {
				if r := recover(); r != nil {
					errs[w] = s.Panicked(r)
					cancel()
				}
			}()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(jobs) || ctx.Err() != nil {
					return
				}
				r, err := s.runJob(ctx, jobs[i])
				if err != nil {
					errs[w] = err
					cancel()
					return
				}
				results[i] = r
			}
		}
		if w == 0 {
			first = work
		} else {
			go work()
		}
	}
	first()
	wg.Wait()
	for _, err := range errs {
		var se *ScanError
		if errors.As(err, &se) {
			return nil, err
		}
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return results, nil
}

// appendMapped maps findings made at offset off of v.text to the raw text.
func appendMapped(out []found, v *view, fs []found, off int) []found {
	for _, f := range fs {
		f.start, f.end = v.toRoot(f.start+off, f.end+off)
		out = append(out, f)
	}
	return out
}
