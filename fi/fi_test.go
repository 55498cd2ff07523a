package fi_test

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fi"
)

// TestErrnoNumbers pins every number to rdma/fi_errno.h.
func TestErrnoNumbers(t *testing.T) {
	want := map[fi.Errno]int{
		fi.SUCCESS: 0, fi.EPERM: 1, fi.ENOENT: 2, fi.EINTR: 4, fi.EIO: 5, fi.E2BIG: 7,
		fi.EBADF: 9, fi.EAGAIN: 11, fi.ENOMEM: 12, fi.EACCES: 13, fi.EFAULT: 14,
		fi.EBUSY: 16, fi.ENODEV: 19, fi.EINVAL: 22, fi.EMFILE: 24, fi.ENOSPC: 28,
		fi.ENOSYS: 38, fi.ENOMSG: 42, fi.ENODATA: 61, fi.EOVERFLOW: 75,
		fi.EMSGSIZE: 90, fi.ENOPROTOOPT: 92, fi.EOPNOTSUPP: 95, fi.EADDRINUSE: 98,
		fi.EADDRNOTAVAIL: 99, fi.ENETDOWN: 100, fi.ENETUNREACH: 101,
		fi.ECONNABORTED: 103, fi.ECONNRESET: 104, fi.ENOBUFS: 105, fi.EISCONN: 106,
		fi.ENOTCONN: 107, fi.ESHUTDOWN: 108, fi.ETIMEDOUT: 110, fi.ECONNREFUSED: 111,
		fi.EHOSTDOWN: 112, fi.EHOSTUNREACH: 113, fi.EALREADY: 114, fi.EINPROGRESS: 115,
		fi.EREMOTEIO: 121, fi.ECANCELED: 125, fi.EKEYREJECTED: 129,
		fi.EOTHER: 256, fi.ETOOSMALL: 257, fi.EOPBADSTATE: 258, fi.EAVAIL: 259,
		fi.EBADFLAGS: 260, fi.ENOEQ: 261, fi.EDOMAIN: 262, fi.ENOCQ: 263, fi.ECRC: 264,
		fi.ETRUNC: 265, fi.ENOKEY: 266, fi.ENOAV: 267, fi.EOVERRUN: 268, fi.ENORX: 269,
		fi.ENOMR: 270,
	}
	for e, n := range want {
		require.Equal(t, n, int(e), e.Name())
		require.NotEmpty(t, e.Name(), "errno %d has no name", n)
	}
	require.Equal(t, fi.EAGAIN, fi.EWOULDBLOCK)
}

func TestErrnoText(t *testing.T) {
	require.Equal(t, "Success", fi.SUCCESS.Error())
	require.Equal(t, "Error available", fi.EAVAIL.Error())
	require.Equal(t, "Queue has been overrun", fi.EOVERRUN.Error())
	require.Equal(t, "Required key not available", fi.ENOKEY.Error())
	require.Equal(t, syscall.EAGAIN.Error(), fi.EAGAIN.Error())
	require.Equal(t, "Truncation error", fi.Strerror(-265))
	require.Contains(t, fi.Errno(9999).Error(), "9999")
}

func TestErrnoMatching(t *testing.T) {
	err := fmt.Errorf("eq read: %w", fi.EAGAIN)
	require.True(t, errors.Is(err, fi.EAGAIN))
	require.False(t, errors.Is(err, fi.EAVAIL))
	require.True(t, errors.Is(err, syscall.EAGAIN), "fi.Errno matches the syscall.Errno of the same number")
	require.Equal(t, fi.EAGAIN, fi.ErrnoOf(err))
	require.Equal(t, fi.SUCCESS, fi.ErrnoOf(nil))
	require.Equal(t, fi.EOTHER, fi.ErrnoOf(errors.New("plain")))
	require.Equal(t, fi.ETIMEDOUT, fi.ErrnoOf(fmt.Errorf("x: %w", syscall.ETIMEDOUT)))
}

// TestFlagBits pins the bits to libfabric's headers.
func TestFlagBits(t *testing.T) {
	bits := map[string]struct {
		f   fi.Flags
		bit uint
	}{
		"FI_MSG": {fi.MSG, 1}, "FI_RMA": {fi.RMA, 2}, "FI_TAGGED": {fi.TAGGED, 3},
		"FI_ATOMIC": {fi.ATOMIC, 4}, "FI_READ": {fi.READ, 8}, "FI_WRITE": {fi.WRITE, 9},
		"FI_RECV": {fi.RECV, 10}, "FI_SEND": {fi.SEND, 11}, "FI_REMOTE_READ": {fi.REMOTE_READ, 12},
		"FI_REMOTE_WRITE": {fi.REMOTE_WRITE, 13}, "FI_MORE": {fi.MORE, 18}, "FI_PEEK": {fi.PEEK, 19},
		"FI_FENCE": {fi.FENCE, 21}, "FI_COMPLETION": {fi.COMPLETION, 24}, "FI_EVENT": {fi.EVENT, 24},
		"FI_INJECT": {fi.INJECT, 25}, "FI_DELIVERY_COMPLETE": {fi.DELIVERY_COMPLETE, 28},
		"FI_AV_USER_ID": {fi.AV_USER_ID, 41}, "FI_RMA_EVENT": {fi.RMA_EVENT, 56},
		"FI_SOURCE": {fi.SOURCE, 57}, "FI_SYNC_ERR": {fi.SYNC_ERR, 58}, "FI_SYMMETRIC": {fi.SYMMETRIC, 59},
		"FI_FETCH_ATOMIC": {fi.FETCH_ATOMIC, 58}, "FI_COMPARE_ATOMIC": {fi.COMPARE_ATOMIC, 59},
		"FI_REG_MR": {fi.REG_MR, 59}, "FI_AUTH_KEY": {fi.AUTH_KEY, 57}, "FI_UNIVERSE": {fi.UNIVERSE, 57},
	}
	for name, b := range bits {
		require.Equal(t, fi.Flags(1)<<b.bit, b.f, name)
	}
}

func TestAddrAndFID(t *testing.T) {
	require.Equal(t, uint64(0xFFFFFFFFFFFFFFFF), uint64(fi.AddrNotAvail))
	require.Equal(t, fi.AddrNotAvail, fi.AddrUnspec)
	require.Equal(t, "FI_ADDR_NOTAVAIL", fi.AddrNotAvail.String())
	require.Equal(t, "7", fi.Addr(7).String())
	require.Equal(t, ^uint64(0), fi.KeyNotAvail)

	b := fi.NewFIDBase(fi.ClassEQ, "ctx")
	var f fi.FID = &b
	require.Equal(t, fi.ClassEQ, f.Class())
	require.Equal(t, "ctx", f.Context())
	require.Equal(t, "FI_CLASS_EQ", fi.ClassEQ.String())
	require.Equal(t, 13, int(fi.ClassEQ))
	require.Equal(t, 4, int(fi.WaitMutexCond))
	require.Equal(t, "FI_WAIT_FD", fi.WaitFD.String())
}

// TestIsDoesNotAllocate: callers spin on errors.Is(err, fi.EAVAIL).
func TestIsDoesNotAllocate(t *testing.T) {
	var err error = fi.EAGAIN
	allocs := testing.AllocsPerRun(100, func() {
		if errors.Is(err, fi.EAVAIL) || !errors.Is(err, fi.EAGAIN) {
			t.Fatal("wrong match")
		}
	})
	require.Zero(t, allocs)
}
