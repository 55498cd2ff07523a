package metrics

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/xdp"
)

// SocketPrefix begins the abstract unix socket names of the processes'
// metrics servers: SocketPrefix + PID + "-" + random hex.
const SocketPrefix = "xdpfab-metrics-"

// soAcceptCon is __SO_ACCEPTCON, the Flags bit of a listening socket in
// /proc/net/unix.
const soAcceptCon = 1 << 16

// FetchTimeout bounds how long Fetch waits for a process's answer.
const FetchTimeout = time.Second

// server answers connections to one namespace's metrics socket with the
// process's snapshot of that namespace.
type server struct {
	ns   xdp.NetnsID
	ln   *net.UnixListener
	wg   sync.WaitGroup
	uid  int
	done chan struct{}
}

// listen binds the metrics socket of namespace ns; the calling thread is
// in ns (the abstract socket namespace is the thread's network
// namespace's).
func listen(ns xdp.NetnsID) (*server, error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := fmt.Sprintf("@%s%d-%s", SocketPrefix, os.Getpid(), hex.EncodeToString(b[:]))
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("metrics: listen %s: %w", name, err)
	}
	s := &server{ns: ns, ln: ln, uid: os.Geteuid(), done: make(chan struct{})}
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

func (s *server) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			select {
			case <-s.done:
				return
			default:
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like: do not spin
			continue
		}
		s.answer(c)
	}
}

// answer writes the snapshot to a peer that is root or this process's
// user, and hangs up.
func (s *server) answer(c *net.UnixConn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(FetchTimeout))
	if !s.allowed(c) {
		return
	}
	p, _ := snapshot(s.ns)
	_ = json.NewEncoder(c).Encode(p)
}

func (s *server) allowed(c *net.UnixConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return false
	}
	return cred.Uid == 0 || int(cred.Uid) == s.uid
}

func (s *server) close() {
	close(s.done)
	s.ln.Close()
	s.wg.Wait()
}

// Discover lists the metrics sockets of the calling thread's network
// namespace (their names without the leading '@'), from
// /proc/thread-self/net/unix: listening sockets whose abstract name
// begins with SocketPrefix.
func Discover() ([]string, error) {
	f, err := os.Open("/proc/thread-self/net/unix")
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	defer f.Close()
	var names []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Scan() // header: Num RefCount Protocol Flags Type St Inode Path
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 8 || !strings.HasPrefix(fl[7], "@"+SocketPrefix) {
			continue
		}
		flags, err := strconv.ParseUint(fl[3], 16, 32)
		if err != nil || flags&soAcceptCon == 0 {
			continue // an accepted connection carries the name too
		}
		if name := fl[7][1:]; !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	return names, sc.Err()
}

// Fetch asks the metrics socket name (from Discover) for its process's
// snapshot. The calling thread must be in the namespace Discover looked
// at.
func Fetch(name string) (Process, error) {
	var p Process
	ctx, cancel := context.WithTimeout(context.Background(), FetchTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", "@"+name)
	if err != nil {
		return p, fmt.Errorf("metrics: %s: %w", name, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(FetchTimeout))
	if err := json.NewDecoder(c).Decode(&p); err != nil {
		return p, fmt.Errorf("metrics: %s: %w", name, err)
	}
	p.normalize()
	return p, nil
}

// Gather is the report of the calling thread's network namespace as a
// process outside it sees it: the XDP counters of every attachment there
// and the snapshots of every process serving a metrics socket there (a
// process that exits meanwhile is left out).
func Gather() (*Report, error) {
	r := &Report{}
	as, err := xdp.OpenAll()
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, a := range as {
			a.Close()
		}
	}()
	for _, a := range as {
		x, err := XDPOf(a)
		if err != nil {
			return nil, err
		}
		r.XDP = append(r.XDP, x)
	}
	names, err := Discover()
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		p, err := Fetch(n)
		if err != nil {
			// Gone since Discover (ECONNREFUSED), or not answering us
			// (another user's process hangs up): nothing to show.
			continue
		}
		r.Processes = append(r.Processes, p)
	}
	slices.SortFunc(r.Processes, func(a, b Process) int { return a.PID - b.PID })
	r.normalize()
	return r, nil
}
