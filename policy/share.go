package policy

// Guaranteed returns the active branches every open session is sure of:
// fold.guaranteedPerSession, at most fold.maxActivePerSession.
func (f Fold) Guaranteed() int { return min(f.GuaranteedPerSess, f.MaxActivePerSess) }

// MayExceedShare reports whether a session that holds held active branches
// may create one more when the instance holds active ones and the other
// open sessions are still owed reserved (the sum, over them, of how far
// each is below Guaranteed). Within its guarantee a session is limited by
// the instance cap alone; beyond it, the creation must leave free what the
// others are owed plus one newcomer's guarantee.
func (f Fold) MayExceedShare(held, active, reserved int) bool {
	g := f.Guaranteed()
	if held < g {
		return active < f.MaxActiveInstance
	}
	return f.MaxActiveInstance-active-1 >= reserved+g
}
