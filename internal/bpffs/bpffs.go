// Package bpffs finds or mounts the BPF filesystem xdpfab pins its objects
// in, as bpftool does: on a fresh machine /sys/fs/bpf exists but nothing is
// mounted on it, and pinning there fails until bpffs is mounted.
package bpffs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// Root is where bpffs is normally mounted.
const Root = "/sys/fs/bpf"

// Dir is xdpfab's directory under Root.
const Dir = Root + "/xdpfab"

var mountMu sync.Mutex

// Ensure makes sure Root is a mounted bpffs (mounting it if needed) and that
// dir, which must lie under Root, exists. It returns dir.
func Ensure(dir string) (string, error) {
	mountMu.Lock()
	defer mountMu.Unlock()
	if err := mountIfNeeded(); err != nil {
		return "", err
	}
	// Dir is removed when its last pin goes (Lock's unlock): a MkdirAll
	// racing with that removal finds a parent gone, and starts over.
	var err error
	for range 16 {
		if err = os.MkdirAll(dir, 0o700); !errors.Is(err, os.ErrNotExist) {
			break
		}
	}
	if err != nil {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	return dir, nil
}

// IsMounted reports whether Root is a bpffs mount.
func IsMounted() bool {
	var st unix.Statfs_t
	return unix.Statfs(Root, &st) == nil && st.Type == unix.BPF_FS_MAGIC
}

func mountIfNeeded() error {
	if IsMounted() {
		return nil
	}
	if err := os.MkdirAll(Root, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", Root, err)
	}
	if err := unix.Mount("bpf", Root, "bpf", 0, "mode=0700"); err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("mount bpffs at %s (needs CAP_SYS_ADMIN): %w", Root, err)
		}
		return fmt.Errorf("mount bpffs at %s: %w", Root, err)
	}
	return nil
}

// Path joins elements under Dir, e.g. Path("av", name).
func Path(elem ...string) string {
	return filepath.Join(append([]string{Dir}, elem...)...)
}
