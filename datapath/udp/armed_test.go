package udp

import (
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/datapath"
)

// setReports reports whether the armed socket's epoll set holds a report
// (consuming it, which is what a woken Receive does).
func setReports(t *testing.T, s *armedSocket) bool {
	t.Helper()
	var got bool
	if err := s.epRaw.Control(func(fd uintptr) { got = s.reported(fd) }); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestArmedOnlyWhileWaiting: the socket of a transport with a receive
// goroutine of its own is watched (its epoll set, which is in Go's
// netpoller, reports it) only while a Receive waits: datagrams that
// arrive while nobody waits wake no thread. A waiting Receive is woken by
// the next datagram, and one that starts waiting with a datagram already
// queued returns it at once.
func TestArmedOnlyWhileWaiting(t *testing.T) {
	a := listen(t, "127.0.0.1:0")
	b := listen(t, "127.0.0.1:0")
	s, ok := a.raw.(*armedSocket)
	if !ok {
		t.Fatalf("socket %T, want *armedSocket without SharedPoll", a.raw)
	}
	send := func(msg string) {
		if err := b.Send([]datapath.Packet{{Buf: []byte(msg), Addr: a.LocalAddr()}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // loopback delivers within the send; margin for a loaded host
	}
	send("before anyone waits")
	if setReports(t, s) {
		t.Fatal("a socket nobody waited for was reported")
	}
	if got := receiveAll(t, a, 1); string(got[0].Buf) != "before anyone waits" {
		t.Fatalf("queued datagram: %q", got[0].Buf)
	}

	rx := rxBufs(4, 100)
	done := make(chan string)
	go func() {
		n, err := a.Receive(rx, true)
		if err != nil || n != 1 {
			done <- err.Error()
			return
		}
		done <- string(rx[0].Buf)
	}()
	time.Sleep(20 * time.Millisecond) // let it arm and park
	send("to a waiter")
	select {
	case got := <-done:
		if got != "to a waiter" {
			t.Fatalf("waiting receive: %q", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a waiting Receive was not woken by a datagram")
	}
	send("after the wait")
	if setReports(t, s) {
		t.Fatal("the socket stayed armed after the report that ended a wait")
	}
	if got := receiveAll(t, a, 1); string(got[0].Buf) != "after the wait" {
		t.Fatalf("datagram after the wait: %q", got[0].Buf)
	}
}

// TestDualStack runs testDualStack on the default (armed) sockets.
func TestDualStack(t *testing.T) { testDualStack(t) }
