package bpffs

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Lock takes the flock of Dir that serialises changes to xdpfab's pins
// across processes (and goroutines: each call opens its own file
// description). With create false, a missing Dir (or an unmounted bpffs)
// means nothing is pinned: no lock is taken, nothing is created or
// mounted, and unlock is nil.
//
// unlock removes Dir when it is empty before it lets go, so that the last
// detach leaves nothing in bpffs. That is why a Dir found unlinked once
// locked is not the directory of its path any more: a later locker would
// lock a new directory there, and the two would not exclude each other.
// Lock then starts over (making Dir again when create is set). Code that
// makes directories under Dir without this lock (named AVs, the MR pin)
// goes through Ensure, which retries when Dir vanishes under MkdirAll.
func Lock(create bool) (unlock func(), err error) {
	if !create && !IsMounted() {
		return nil, nil
	}
	return lockDir(Dir, create, func(dir string) error {
		_, err := Ensure(dir)
		return err
	})
}

// RemoveDirIfEmpty removes Dir under its lock when nothing is left in it
// (the named AVs' Unlink calls it after removing their own directory).
func RemoveDirIfEmpty() {
	if unlock, err := Lock(false); err == nil && unlock != nil {
		unlock()
	}
}

// beforeLock, when set (by a test), runs between lockDir's open and its
// flock: where another process's removal of the directory would fall.
var beforeLock func(dir string)

func lockDir(dir string, create bool, mkdir func(string) error) (unlock func(), err error) {
	for range 16 {
		if create {
			if err := mkdir(dir); err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue
				}
				return nil, err
			}
		}
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err == unix.ENOENT {
			if !create {
				return nil, nil
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", dir, err)
		}
		if beforeLock != nil {
			beforeLock(dir)
		}
		for {
			if err = unix.Flock(fd, unix.LOCK_EX); err != unix.EINTR {
				break
			}
		}
		var st unix.Stat_t
		if err == nil {
			err = unix.Fstat(fd, &st)
		}
		if err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("lock %s: %w", dir, err)
		}
		if st.Nlink == 0 {
			unix.Close(fd) // removed while we waited; drops the lock too
			if !create {
				return nil, nil
			}
			continue
		}
		return func() {
			_ = unix.Rmdir(dir) // ENOTEMPTY unless the last pin is gone
			unix.Close(fd)
		}, nil
	}
	return nil, fmt.Errorf("lock %s: the directory keeps being removed: %w", dir, unix.EAGAIN)
}
