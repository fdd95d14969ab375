package secrets

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"
)

// inlined reports whether runScan scans a text of size bytes on the caller's
// goroutine: scanJSON may then read the text without copying it.
func (s *Scrubber) inlined(size int) bool { return size < s.inline }

// runScan runs f, the scan of a text of size bytes, until deadline, turning a
// deadline, a cancellation or a panic into a *ScanError.
//
// A text of s.inline bytes or more is scanned on a goroutine of its own,
// under a context that ends at the deadline, and runScan returns at the
// deadline even when f does not: a detector that ignores its context is
// left to finish on its own, its result discarded. A smaller text is
// scanned on the caller's goroutine, as Tokens counts a small result, with
// no goroutine, context or timer of its own: go-re2's engine runs in time
// linear in the text, and a scan that ends past the deadline fails all the
// same. ctx still cancels both (gitleaks checks it between rules).
//
// f returns what it found rather than storing it in the caller's
// variables, which would move them to the heap (f escapes, to the
// goroutine). What it returns is dropped when runScan fails.
func runScan[T any](s *Scrubber, ctx context.Context, deadline time.Time, size int, f func(context.Context) (T, error)) (T, error) {
	var v T
	var err error
	wctx := ctx
	if s.inlined(size) {
		v, err = runScanInline(s, ctx, f)
	} else {
		var cancel context.CancelFunc
		wctx, cancel = context.WithDeadlineCause(ctx, deadline, errWorkTimeout)
		defer cancel()
		type outcome struct {
			v   T
			err error
		}
		done := make(chan outcome, 1)
		go func() {
			growStack(0)
			defer func() {
				if r := recover(); r != nil {
					done <- outcome{err: s.Panicked(r)}
				}
			}()
			v, err := f(wctx)
			done <- outcome{v, err}
		}()
		select {
		case o := <-done:
			v, err = o.v, o.err
		case <-wctx.Done():
			err = wctx.Err()
		}
	}
	late := !time.Now().Before(deadline)
	if err == nil && !late {
		return v, nil
	}
	var zero T
	var se *ScanError
	switch {
	case ctx.Err() != nil:
		return zero, &ScanError{Reason: "scan canceled: " + ctx.Err().Error(), Err: ctx.Err()}
	case late || errors.Is(err, context.DeadlineExceeded) || wctx.Err() != nil:
		return zero, &ScanError{Reason: fmt.Sprintf("scan timed out after %s", s.timeout), Err: context.DeadlineExceeded}
	case errors.As(err, &se):
		return zero, se
	default:
		return zero, &ScanError{Reason: "scan failed: the secret detector reported an error", Err: err}
	}
}

// runScanInline runs f on the calling goroutine, a panic becoming an error.
func runScanInline[T any](s *Scrubber, ctx context.Context, f func(context.Context) (T, error)) (v T, err error) {
	defer func() {
		if r := recover(); r != nil {
			var zero T
			v, err = zero, s.Panicked(r)
		}
	}()
	if err := ctx.Err(); err != nil {
		return v, err
	}
	return f(ctx)
}

// scanStack is the stack a scan goroutine is grown to up front: gitleaks'
// detector calling into the regex engine (go-re2's translated
// WebAssembly) runs deep. 16 KiB removed nearly all later growth on the
// trajectory data; 32 and 64 KiB cost more in zeroing than they saved.
const scanStack = 16 << 10

// growStack grows the calling goroutine's stack to hold scanStack bytes
// at once, while it is nearly empty and cheap to copy. A goroutine starts
// with a few KB; growing it by doublings in the middle of a scan copies
// the deep frames of the detector at each one (5 to 10% of the CPU time
// of scrubbing the trajectory data's tool results went there). i is 0; it keeps the frame from
// being optimized away.
//
//go:noinline
func growStack(i int) byte {
	var pad [scanStack]byte
	pad[i] = 1
	return pad[(i*7)%len(pad)]
}

// Panicked logs a recovered panic of a scan (its type and stack, never its
// value, which could quote the text) and returns the error that replaces
// it: for callers that recover around a scan of their own.
func (s *Scrubber) Panicked(r any) error {
	s.logger.Error("scrub: secret detector panicked", "panic_type", fmt.Sprintf("%T", r), "stack", string(debug.Stack()))
	return &ScanError{Reason: "scan failed: the secret detector panicked"}
}
