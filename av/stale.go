package av

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/internal/bpffs"
)

// Named AVs of namespaces that are gone.
//
// A named AV lives until Unlink, like a file, in the directory of its
// network namespace. When the namespace goes first (a test's namespace
// deleted by a process killed before its cleanup, a container stopped
// without unlinking), nobody can name the AV again, and its pin and
// fi_addr array would stay on the host for good; worse, the kernel hands
// a dead namespace's inode number to a later namespace, which would find
// the old AVs under its names. So a namespace's directory is named by
// its inode and its netns cookie (SO_NETNS_COOKIE, never reused while the
// system runs): a later namespace with the same inode has another
// directory. And the first named Open of a process removes the
// directories (pins and fi_addr arrays) of namespaces that no longer
// exist: no process or thread is in them, no file descriptor or mount
// (ip netns's /run/netns) holds them, or, for the inode of the caller's
// own namespace, another cookie. A namespace kept alive only by sockets
// of a process that left it looks gone: its AVs lose their pins, which
// only matters to processes that could enter it, and none can. Processes
// whose namespaces even root may not read (EACCES: a sandbox's own
// supervisor, for one) are passed over: they cannot reach bpffs's
// root-only directory to use a named AV. Nothing is removed when /proc
// itself cannot be read.

// soNetnsCookie is SO_NETNS_COOKIE (asm-generic socket.h; Linux 5.14).
const soNetnsCookie = 71

var pruneOnce sync.Once

// netnsID names the calling thread's network namespace: its inode number
// and, where the kernel has it, its cookie ("<inode>-<cookie>"); "0" if
// /proc cannot tell.
func netnsID() string {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return "0"
	}
	id := strconv.FormatUint(st.Ino, 10)
	if c, ok := netnsCookie(); ok {
		id += "-" + strconv.FormatUint(c, 10)
	}
	return id
}

// netnsCookie is the cookie of the calling thread's network namespace.
func netnsCookie() (uint64, bool) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, false
	}
	defer unix.Close(fd)
	c, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, soNetnsCookie)
	return c, err == nil
}

// pruneGoneNamespaces removes the named-AV directories of namespaces that
// no longer exist, once per process.
func pruneGoneNamespaces() {
	pruneOnce.Do(func() {
		live, ok := liveNetns()
		if !ok {
			return
		}
		pruneIn(bpffs.Path("av"), "/dev/shm", netnsID(), live)
	})
}

// pruneIn removes the directories under avDir, and the fi_addr arrays
// under shmDir, of the namespaces gone: not in live, or, for the inode of
// self (the caller's namespace ID), with another cookie.
func pruneIn(avDir, shmDir, self string, live map[uint64]bool) {
	selfIno, selfCookie, _ := strings.Cut(self, "-")
	entries, err := os.ReadDir(avDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		inoStr, cookie, hasCookie := strings.Cut(e.Name(), "-")
		ino, err := strconv.ParseUint(inoStr, 10, 64)
		if err != nil || ino == 0 {
			continue // not a namespace's directory
		}
		if hasCookie {
			if _, err := strconv.ParseUint(cookie, 10, 64); err != nil {
				continue
			}
		}
		reused := inoStr == selfIno && selfCookie != "" && hasCookie && cookie != selfCookie
		if live[ino] && !reused {
			continue
		}
		dir := filepath.Join(avDir, e.Name())
		pins, _ := os.ReadDir(dir)
		for _, p := range pins {
			_ = os.Remove(filepath.Join(dir, p.Name()))
		}
		_ = os.Remove(dir)
		arrays, _ := filepath.Glob(filepath.Join(shmDir, "xdpfab-av."+e.Name()+".*"))
		for _, a := range arrays {
			_ = os.Remove(a)
		}
	}
}

// liveNetns returns the inodes of the network namespaces that exist: those
// of every process and thread, those held by file descriptors and those
// bind-mounted in any mount namespace. Processes that exit meanwhile or
// may not be inspected are passed over; ok is false when /proc cannot be
// read at all.
func liveNetns() (live map[uint64]bool, ok bool) {
	live = make(map[uint64]bool)
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, false
	}
	mountNS := make(map[string]bool)
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		base := filepath.Join("/proc", p.Name())
		tasks, err := os.ReadDir(filepath.Join(base, "task"))
		if err != nil {
			if passedOver(err) {
				continue
			}
			return nil, false
		}
		for _, t := range tasks {
			if !addNSLink(live, filepath.Join(base, "task", t.Name(), "ns", "net")) {
				return nil, false
			}
		}
		fds, err := os.ReadDir(filepath.Join(base, "fd"))
		if err != nil && !passedOver(err) {
			return nil, false
		}
		for _, fd := range fds {
			if !addNSLink(live, filepath.Join(base, "fd", fd.Name())) {
				return nil, false
			}
		}
		// Bind mounts, once per mount namespace.
		mnt, err := os.Readlink(filepath.Join(base, "ns", "mnt"))
		if err != nil {
			if passedOver(err) {
				continue
			}
			return nil, false
		}
		if mountNS[mnt] {
			continue
		}
		mountNS[mnt] = true
		info, err := os.ReadFile(filepath.Join(base, "mountinfo"))
		if err != nil {
			if passedOver(err) {
				continue
			}
			return nil, false
		}
		for _, line := range strings.Split(string(info), "\n") {
			// "id parent major:minor root mountpoint ... - fstype source opts"
			f := strings.Fields(line)
			if len(f) < 4 {
				continue
			}
			if ino, isNet := netLinkIno(f[3]); isNet {
				live[ino] = true
			}
		}
	}
	return live, true
}

// addNSLink adds the network namespace a /proc link names, if it names
// one; false when the link cannot be read for a reason other than its
// owner having gone or being off limits.
func addNSLink(live map[uint64]bool, path string) bool {
	target, err := os.Readlink(path)
	if err != nil {
		return passedOver(err)
	}
	if ino, ok := netLinkIno(target); ok {
		live[ino] = true
	}
	return true
}

// netLinkIno parses "net:[4026531833]".
func netLinkIno(s string) (uint64, bool) {
	rest, ok := strings.CutPrefix(s, "net:[")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSuffix(rest, "]"), 10, 64)
	return n, err == nil
}

// passedOver reports whether a /proc read failed because its process or file
// descriptor went away meanwhile, or because the process may not be
// inspected.
func passedOver(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) ||
		errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM)
}
