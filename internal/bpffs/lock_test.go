package bpffs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func mkdir(dir string) error { return os.MkdirAll(dir, 0o700) }

// TestLockRemovesEmptyDir: unlock removes the directory once nothing is
// in it, and leaves it while something is.
func TestLockRemovesEmptyDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "xdpfab")
	unlock, err := lockDir(dir, true, mkdir)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pin"), nil, 0o600))
	unlock()
	require.DirExists(t, dir, "removed with a pin in it")

	unlock, err = lockDir(dir, false, mkdir)
	require.NoError(t, err)
	require.NotNil(t, unlock)
	require.NoError(t, os.Remove(filepath.Join(dir, "pin")))
	unlock()
	require.NoDirExists(t, dir, "left behind empty")

	unlock, err = lockDir(dir, false, mkdir)
	require.NoError(t, err)
	require.Nil(t, unlock, "a missing directory is locked or made")
	require.NoDirExists(t, dir)
}

// TestLockDirRemovedBeforeLock: a directory removed between a locker's
// open and its flock (another process's last unlock) is not the one at
// its path any more; the locker makes a new one and locks that, so it
// excludes the next locker.
func TestLockDirRemovedBeforeLock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "xdpfab")
	removed := 0
	beforeLock = func(d string) {
		if removed == 0 {
			require.NoError(t, unix.Rmdir(d))
			removed++
		}
	}
	t.Cleanup(func() { beforeLock = nil })
	unlock, err := lockDir(dir, true, mkdir)
	require.NoError(t, err)
	require.Equal(t, 1, removed)
	beforeLock = nil
	require.DirExists(t, dir)

	// The lock is on the directory at the path: a second locker waits.
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	require.ErrorIs(t, unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB), unix.EWOULDBLOCK,
		"the lock is held on an unlinked directory")
	unlock()

	// Without create, a directory removed before the flock means nothing
	// is pinned: no lock, nothing made.
	require.NoError(t, mkdir(dir))
	removed = 0
	beforeLock = func(d string) {
		if removed == 0 {
			require.NoError(t, unix.Rmdir(d))
			removed++
		}
	}
	unlock, err = lockDir(dir, false, mkdir)
	require.NoError(t, err)
	require.Nil(t, unlock)
	require.NoDirExists(t, dir)
}
