package upstreams

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fakeWire is an in-memory MCP server with one tool. The method "crash"
// makes it behave as a stdio server that has exited.
type fakeWire struct {
	mu      sync.Mutex
	crashed bool
	closed  bool
}

var _ wire = (*fakeWire)(nil)

func (f *fakeWire) start(context.Context) error { return nil }

func (f *fakeWire) call(ctx context.Context, id int64, method string, _ []byte) (*envelope, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.crashed || f.closed {
		return nil, errTransportClosed
	}
	var result string
	switch method {
	case "initialize":
		result = `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"fake","version":"1"}}`
	case "tools/list":
		result = `{"tools":[{"name":"t"}]}`
	case "crash":
		f.crashed = true
		return nil, errTransportClosed
	default:
		result = `{"ok":true}`
	}
	return &envelope{ID: json.RawMessage(strconv.FormatInt(id, 10)), Result: json.RawMessage(result)}, nil
}

func (f *fakeWire) send(context.Context, []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.crashed || f.closed {
		return errTransportClosed
	}
	return nil
}

func (f *fakeWire) close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

// fakeUpstream returns an upstream whose connection attempts are recorded
// (as time since the start of the test) and fail while fail says so.
func fakeUpstream(opts Options, fail func(attempt int) bool) (u *Upstream, attempts func() []time.Duration) {
	var mu sync.Mutex
	var at []time.Duration
	start := time.Now()
	u = New(Entry{Name: "fake", Type: TypeStdio, Command: "fake"}, opts)
	u.dial = func(ctx context.Context, c *conn) error {
		mu.Lock()
		at = append(at, time.Since(start))
		n := len(at)
		mu.Unlock()
		if fail(n) {
			return errors.New("boom")
		}
		c.w = &fakeWire{}
		return nil
	}
	return u, func() []time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(at)
	}
}

func TestFailedStartsBackOffExponentially(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ms = time.Millisecond
		var mu sync.Mutex
		var states []State
		opts := Options{MinBackoff: 250 * ms, MaxBackoff: time.Second, OnState: func(u *Upstream, s State) {
			mu.Lock()
			states = append(states, s)
			mu.Unlock()
		}}
		u, attempts := fakeUpstream(opts, func(n int) bool { return n <= 5 })
		defer u.Close()
		u.Start(context.Background())
		if err := u.WaitReady(context.Background()); err != nil {
			t.Fatalf("WaitReady: %v", err)
		}
		wantAt := []time.Duration{0, 250 * ms, 750 * ms, 1750 * ms, 2750 * ms, 3750 * ms}
		if got := attempts(); !slices.Equal(got, wantAt) {
			t.Errorf("attempts at %v, want %v", got, wantAt)
		}
		synctest.Wait() // for OnState(up), which may follow WaitReady
		mu.Lock()
		defer mu.Unlock()
		want := []State{StateStarting, StateDown, StateStarting, StateDown, StateStarting, StateDown, StateStarting, StateDown, StateStarting, StateDown, StateStarting, StateUp}
		if !slices.Equal(states, want) {
			t.Errorf("states = %v, want %v", states, want)
		}
		if u.Restarts() != 0 {
			t.Errorf("Restarts() = %d; a first start is not a restart", u.Restarts())
		}
	})
}

func TestRestartAfterCrashRespectsBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ms = time.Millisecond
		u, attempts := fakeUpstream(Options{MinBackoff: 250 * ms}, func(int) bool { return false })
		defer u.Close()
		u.Start(context.Background())
		if err := u.WaitReady(context.Background()); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()

		_, err := u.Call(ctx, "crash", nil)
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), `upstream "fake" exited while handling crash`) {
			t.Fatalf("crash: %v", err)
		}
		// The first restart waits for the backoff since the last attempt.
		if _, err := u.Call(ctx, "echo", nil); err != nil {
			t.Fatalf("echo: %v", err)
		}
		// A crash long after the last attempt restarts at once.
		time.Sleep(10 * time.Second)
		if _, err := u.Call(ctx, "crash", nil); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("crash: %v", err)
		}
		if _, err := u.Call(ctx, "echo", nil); err != nil {
			t.Fatalf("echo: %v", err)
		}
		want := []time.Duration{0, 250 * ms, 10250 * ms}
		if got := attempts(); !slices.Equal(got, want) {
			t.Errorf("attempts at %v, want %v", got, want)
		}
		if got := u.Restarts(); got != 2 {
			t.Errorf("Restarts() = %d, want 2", got)
		}
	})
}

func TestCallsWhileDownNeverHang(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u, attempts := fakeUpstream(Options{MinBackoff: time.Second, MaxBackoff: 30 * time.Second}, func(int) bool { return true })
		defer u.Close()
		u.Start(context.Background())
		// Attempts at 0, 1, 3, 7, 15 and 31 s; the next is at 61 s.
		time.Sleep(32 * time.Second)
		if got := len(attempts()); got != 6 {
			t.Fatalf("%d attempts in 32 s, want 6", got)
		}
		tests := []struct {
			name    string
			sleep   time.Duration // before the call
			timeout time.Duration // of the call's context; 0: none
			wait    time.Duration // how long the call may take
			want    string
		}{
			{"next attempt beyond the wait: fail at once", 0, 0, 0, "next attempt in 29s"},
			{"context shorter than the wait: fail at once", 25 * time.Second, 2 * time.Second, 0, "next attempt in 4s"},
			{"next attempt within the wait: wait for it", 0, 0, 4 * time.Second, "could not be started"},
		}
		for _, tt := range tests {
			time.Sleep(tt.sleep)
			ctx := context.Background()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			start := time.Now()
			_, err := u.Call(ctx, "echo", nil)
			took := time.Since(start)
			if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "boom") {
				t.Errorf("%s: got %v, want ErrUnavailable saying %q and the cause", tt.name, err, tt.want)
			}
			if took != tt.wait {
				t.Errorf("%s: the call took %v, want %v", tt.name, took, tt.wait)
			}
		}
	})
}
