package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// taskCPU returns the CPU time process pid has used, every thread's, from
// /proc/<pid>/task/*/schedstat (nanoseconds; a thread that has exited is
// no longer counted, and Go programs seldom end threads), and false where
// it cannot be read (not Linux, the process gone).
func taskCPU(pid int) (time.Duration, bool) {
	if pid <= 0 {
		return 0, false
	}
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return 0, false
	}
	var sum time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "task", t.Name(), "schedstat"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		sum += time.Duration(ns)
	}
	return sum, true
}

// cpuOf returns the CPU time of each process of pids.
func cpuOf(pids []int) []time.Duration {
	out := make([]time.Duration, len(pids))
	for i, pid := range pids {
		out[i], _ = taskCPU(pid)
	}
	return out
}

// sumCPU returns the CPU time the processes of pids used together.
func sumCPU(pids []int) time.Duration {
	var s time.Duration
	for _, d := range cpuOf(pids) {
		s += d
	}
	return s
}

// proxyPIDs returns the processes of a foldproxy started as pid on state
// folder state: pid itself and, in the default mode, the project's daemon
// (its pid is in daemon.lock).
func proxyPIDs(pid int, state string) []int {
	pids := []int{pid}
	if b, err := os.ReadFile(filepath.Join(state, "daemon.lock")); err == nil {
		if d, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && d != pid {
			pids = append(pids, d)
		}
	}
	return pids
}
