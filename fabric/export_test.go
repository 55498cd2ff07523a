package fabric

// Queued reports how many entries, successes and errors, cq holds. Tests
// use it to wait for several completions without consuming them.
func (cq *CQ) Queued() int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.n
}
