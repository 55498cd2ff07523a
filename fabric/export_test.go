package fabric

import "github.com/xdpfab/xdpfab/fi"

// Queued reports how many entries, successes and errors, cq holds. Tests
// use it to wait for several completions without consuming them.
func (cq *CQ) Queued() int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.n
}

// PostedReceives reports how many receives wait in the posted queues
// (tagged and untagged), so tests can tell when one has been matched.
func (ep *Endpoint) PostedReceives() int {
	ep.rx.mu.Lock()
	defer ep.rx.mu.Unlock()
	return ep.rx.posted.n + ep.rx.tposted.n
}

// Unexpected reports the messages the unexpected bounds count.
func (ep *Endpoint) Unexpected() int {
	ep.rx.mu.Lock()
	defer ep.rx.mu.Unlock()
	return ep.rx.unexpMsgs
}

// PushForTest queues a completion with context ctx as an endpoint would
// for an operation not holding a reservation.
func (cq *CQ) PushForTest(ctx any) { cq.complete(&CQEntry{Context: ctx}, fi.AddrNotAvail, false) }

// RingLen reports the length of cq's ring as allocated now.
func (cq *CQ) RingLen() int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return len(cq.ring)
}

// SharedPollForTest reports whether the endpoint's engine receives on the
// process's shared poller.
func (ep *Endpoint) SharedPollForTest() bool { return ep.sharedPoll }

// UDPEndpointsForTest is the process's count of endpoints on the kernel
// UDP socket (SharedPollAuto).
func UDPEndpointsForTest() int { return int(udpEndpoints.Load()) }

// Reserved reports the slots cq has promised: to accepted operations and
// as endpoints' credits (cq_credits.go).
func (cq *CQ) Reserved() int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.reserved
}
