package fabric

import "github.com/xdpfab/xdpfab/wait"

// A CQ or counter in a wait set of a manual-progress domain is a
// wait.Driver: fi_wait on the set drives the endpoints bound to it, as
// reading it would (wait.Set.Wait), so that a set of such queues sees the
// traffic that arrives while the application waits on it.
var (
	_ wait.Driver = (*cqMember)(nil)
	_ wait.Driver = (*cntrMember)(nil)
)

// Drive implements wait.Driver.
func (m *cqMember) Drive() bool { return (*CQ)(m).progress.driveManual() }

// Drive implements wait.Driver.
func (m *cntrMember) Drive() bool { return (*Cntr)(m).progress.driveManual() }

// driveManual runs the endpoints once when their progress is manual and
// reports whether it is (with at least one endpoint bound).
func (s *progressSet) driveManual() bool {
	if !s.manual() {
		return false
	}
	s.run()
	return true
}
