package proxy

import (
	"sync"
	"testing"
	"testing/synctest"
)

// The pool runs every function, keeps idle goroutines for the next, and
// ends them when closed: synctest fails the test if one were left blocked.
func TestStdioPoolEndsItsGoroutines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var p stdioPool
		var mu sync.Mutex
		ran := 0
		for round := 0; round < 3; round++ {
			var wg sync.WaitGroup
			for range 20 {
				wg.Add(1)
				p.run(func() {
					defer wg.Done()
					mu.Lock()
					ran++
					mu.Unlock()
				})
			}
			wg.Wait()
			synctest.Wait()
			p.mu.Lock()
			idle := len(p.idle)
			p.mu.Unlock()
			if idle == 0 || idle > stdioPoolIdle {
				t.Errorf("round %d: %d idle goroutines, want 1 to %d", round, idle, stdioPoolIdle)
			}
		}
		p.close()
		if ran != 60 {
			t.Errorf("ran %d functions, want 60", ran)
		}
		// A function run after close still runs, on a goroutine that then ends.
		done := make(chan struct{})
		p.run(func() { close(done) })
		<-done
	})
}
