package main

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// dropStartupPages unmaps the resident pages of the executable's read-only
// mappings (code, read-only data, the pc tables) from this process, and
// returns how many bytes were resident there. The pages stay in the page
// cache, shared with every foldproxy process, and a page used again is
// mapped back by the next access, from that cache. What start-up alone
// reads stops counting in the process's resident set: the tokenizer's
// vocabulary literal (200,000 strings), gitleaks' configuration and the
// code that compiles its rules, package initialisers; and with it the
// pages the kernel mapped around every page touched (fault-around maps 64
// KB at a time from a cached file).
//
// Only mappings without a private copy of any page (no Anonymous bytes in
// /proc/self/smaps) are dropped: madvise(MADV_DONTNEED) discards such
// copies, which a relocated read-only segment would hold.
func dropStartupPages() (resident int64) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0
	}
	data, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0
	}
	type mapping struct {
		lo, hi    uintptr
		rss, anon int64
	}
	var maps []mapping
	var cur *mapping
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if !strings.HasSuffix(f[0], ":") {
			// A mapping's header: range perms offset dev inode path.
			cur = nil
			if len(f) < 6 || strings.Join(f[5:], " ") != exe || strings.ContainsAny(f[1], "ws") {
				continue
			}
			lo, hi, ok := strings.Cut(f[0], "-")
			a, err1 := strconv.ParseUint(lo, 16, 64)
			b, err2 := strconv.ParseUint(hi, 16, 64)
			if !ok || err1 != nil || err2 != nil || b <= a {
				continue
			}
			maps = append(maps, mapping{lo: uintptr(a), hi: uintptr(b)})
			cur = &maps[len(maps)-1]
			continue
		}
		if cur == nil || len(f) < 2 {
			continue
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "Rss:":
			cur.rss = kb << 10
		case "Anonymous:":
			cur.anon = kb << 10
		}
	}
	for _, m := range maps {
		if m.anon != 0 || m.rss == 0 {
			continue
		}
		if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, m.lo, m.hi-m.lo, syscall.MADV_DONTNEED); e == 0 {
			resident += m.rss
		}
	}
	return resident
}
