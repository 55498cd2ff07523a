package fi

import (
	"errors"
	"strconv"
	"syscall"
)

// Errno is a libfabric error number as rdma/fi_errno.h defines it: the
// positive value of the negative return code of a libfabric call. Values
// below 256 are the Linux errno values; 256 and above are libfabric's own.
//
// An Errno is an error. errors.Is(err, fi.EAGAIN) matches an Errno wrapped
// anywhere in err's chain; it also matches the syscall.Errno of the same
// number, so errors.Is(fi.EAGAIN, syscall.EAGAIN) is true.
type Errno int

// Errno values directly mapped from Linux errno (rdma/fi_errno.h).
const (
	SUCCESS       Errno = 0
	EPERM         Errno = Errno(syscall.EPERM)
	ENOENT        Errno = Errno(syscall.ENOENT)
	EINTR         Errno = Errno(syscall.EINTR)
	EIO           Errno = Errno(syscall.EIO)
	E2BIG         Errno = Errno(syscall.E2BIG)
	EBADF         Errno = Errno(syscall.EBADF)
	EAGAIN        Errno = Errno(syscall.EAGAIN)
	ENOMEM        Errno = Errno(syscall.ENOMEM)
	EACCES        Errno = Errno(syscall.EACCES)
	EFAULT        Errno = Errno(syscall.EFAULT)
	EBUSY         Errno = Errno(syscall.EBUSY)
	ENODEV        Errno = Errno(syscall.ENODEV)
	EINVAL        Errno = Errno(syscall.EINVAL)
	EMFILE        Errno = Errno(syscall.EMFILE)
	ENOSPC        Errno = Errno(syscall.ENOSPC)
	ENOSYS        Errno = Errno(syscall.ENOSYS)
	EWOULDBLOCK   Errno = Errno(syscall.EWOULDBLOCK)
	ENOMSG        Errno = Errno(syscall.ENOMSG)
	ENODATA       Errno = Errno(syscall.ENODATA)
	EOVERFLOW     Errno = Errno(syscall.EOVERFLOW)
	EMSGSIZE      Errno = Errno(syscall.EMSGSIZE)
	ENOPROTOOPT   Errno = Errno(syscall.ENOPROTOOPT)
	EOPNOTSUPP    Errno = Errno(syscall.EOPNOTSUPP)
	EADDRINUSE    Errno = Errno(syscall.EADDRINUSE)
	EADDRNOTAVAIL Errno = Errno(syscall.EADDRNOTAVAIL)
	ENETDOWN      Errno = Errno(syscall.ENETDOWN)
	ENETUNREACH   Errno = Errno(syscall.ENETUNREACH)
	ECONNABORTED  Errno = Errno(syscall.ECONNABORTED)
	ECONNRESET    Errno = Errno(syscall.ECONNRESET)
	ENOBUFS       Errno = Errno(syscall.ENOBUFS)
	EISCONN       Errno = Errno(syscall.EISCONN)
	ENOTCONN      Errno = Errno(syscall.ENOTCONN)
	ESHUTDOWN     Errno = Errno(syscall.ESHUTDOWN)
	ETIMEDOUT     Errno = Errno(syscall.ETIMEDOUT)
	ECONNREFUSED  Errno = Errno(syscall.ECONNREFUSED)
	EHOSTDOWN     Errno = Errno(syscall.EHOSTDOWN)
	EHOSTUNREACH  Errno = Errno(syscall.EHOSTUNREACH)
	EALREADY      Errno = Errno(syscall.EALREADY)
	EINPROGRESS   Errno = Errno(syscall.EINPROGRESS)
	EREMOTEIO     Errno = Errno(syscall.EREMOTEIO)
	ECANCELED     Errno = Errno(syscall.ECANCELED)
	EKEYREJECTED  Errno = Errno(syscall.EKEYREJECTED)
)

// libfabric-specific error numbers, starting at FI_ERRNO_OFFSET (256).
const (
	EOTHER      Errno = 256 // FI_EOTHER: unspecified error
	ETOOSMALL   Errno = 257 // FI_ETOOSMALL: provided buffer is too small
	EOPBADSTATE Errno = 258 // FI_EOPBADSTATE: operation not permitted in current state
	EAVAIL      Errno = 259 // FI_EAVAIL: error available
	EBADFLAGS   Errno = 260 // FI_EBADFLAGS: flags not supported
	ENOEQ       Errno = 261 // FI_ENOEQ: missing or unavailable event queue
	EDOMAIN     Errno = 262 // FI_EDOMAIN: invalid resource domain
	ENOCQ       Errno = 263 // FI_ENOCQ: missing or unavailable completion queue
	ECRC        Errno = 264 // FI_ECRC: CRC error
	ETRUNC      Errno = 265 // FI_ETRUNC: truncation error
	ENOKEY      Errno = 266 // FI_ENOKEY: required key not available
	ENOAV       Errno = 267 // FI_ENOAV: missing or unavailable address vector
	EOVERRUN    Errno = 268 // FI_EOVERRUN: queue has been overrun
	ENORX       Errno = 269 // FI_ENORX: receiver not ready, no receive buffers available
	ENOMR       Errno = 270 // FI_ENOMR: memory registration limit exceeded

	errnoOffset = 256
	errnoMax    = 271 // FI_ERRNO_MAX
)

// fiErrStr holds fi_strerror's texts for libfabric's own numbers.
var fiErrStr = [errnoMax - errnoOffset]string{
	"Unspecified error",
	"Provided buffer is too small",
	"Operation not permitted in current state",
	"Error available",
	"Flags not supported",
	"Missing or unavailable event queue",
	"Invalid resource domain",
	"Missing or unavailable completion queue",
	"CRC error",
	"Truncation error",
	"Required key not available",
	"Missing or unavailable address vector",
	"Queue has been overrun",
	"Receiver not ready, no receive buffers available",
	"Memory registration limit exceeded",
}

// Error returns the text fi_strerror gives for e: strerror's text for the
// Linux errno values, libfabric's own table from 256 on.
func (e Errno) Error() string {
	switch {
	case e == SUCCESS:
		return "Success"
	case e >= errnoOffset && e < errnoMax:
		return fiErrStr[e-errnoOffset]
	case e > 0 && e < errnoOffset:
		return syscall.Errno(e).Error()
	}
	return "Unknown error " + strconv.Itoa(int(e))
}

// Name returns the libfabric constant name, e.g. "FI_EAGAIN", or "" when e
// has no libfabric name.
func (e Errno) Name() string { return errnoNames[e] }

// Is makes errors.Is(fi.EAGAIN, syscall.EAGAIN) hold, so callers used to the
// syscall package can match either form.
func (e Errno) Is(target error) bool {
	// A type assertion, not errors.As: errors.Is already walks target's
	// chain, and errors.As would move se to the heap on every call.
	if se, ok := target.(syscall.Errno); ok {
		return int(se) == int(e)
	}
	return false
}

// ErrnoOf returns the libfabric error number carried by err: the Errno in
// its chain, a syscall.Errno converted as is, FI_SUCCESS for nil and
// FI_EOTHER for any other error.
func ErrnoOf(err error) Errno {
	if err == nil {
		return SUCCESS
	}
	// A bare Errno first: an empty CQ read's FI_EAGAIN comes this way
	// millions of times a second, and errors.As costs reflection and an
	// allocation (its target escapes) on every call.
	if e, ok := err.(Errno); ok {
		return e
	}
	var e Errno
	if errors.As(err, &e) {
		return e
	}
	var se syscall.Errno
	if errors.As(err, &se) {
		return Errno(se)
	}
	return EOTHER
}

// Strerror is fi_strerror: the text for a (positive or negative) error
// number.
func Strerror(errnum int) string {
	if errnum < 0 {
		errnum = -errnum
	}
	return Errno(errnum).Error()
}

var errnoNames = map[Errno]string{
	SUCCESS: "FI_SUCCESS", EPERM: "FI_EPERM", ENOENT: "FI_ENOENT", EINTR: "FI_EINTR",
	EIO: "FI_EIO", E2BIG: "FI_E2BIG", EBADF: "FI_EBADF", EAGAIN: "FI_EAGAIN",
	ENOMEM: "FI_ENOMEM", EACCES: "FI_EACCES", EFAULT: "FI_EFAULT", EBUSY: "FI_EBUSY",
	ENODEV: "FI_ENODEV", EINVAL: "FI_EINVAL", EMFILE: "FI_EMFILE", ENOSPC: "FI_ENOSPC",
	ENOSYS: "FI_ENOSYS", ENOMSG: "FI_ENOMSG", ENODATA: "FI_ENODATA",
	EOVERFLOW: "FI_EOVERFLOW", EMSGSIZE: "FI_EMSGSIZE", ENOPROTOOPT: "FI_ENOPROTOOPT",
	EOPNOTSUPP: "FI_EOPNOTSUPP", EADDRINUSE: "FI_EADDRINUSE",
	EADDRNOTAVAIL: "FI_EADDRNOTAVAIL", ENETDOWN: "FI_ENETDOWN",
	ENETUNREACH: "FI_ENETUNREACH", ECONNABORTED: "FI_ECONNABORTED",
	ECONNRESET: "FI_ECONNRESET", ENOBUFS: "FI_ENOBUFS", EISCONN: "FI_EISCONN",
	ENOTCONN: "FI_ENOTCONN", ESHUTDOWN: "FI_ESHUTDOWN", ETIMEDOUT: "FI_ETIMEDOUT",
	ECONNREFUSED: "FI_ECONNREFUSED", EHOSTDOWN: "FI_EHOSTDOWN",
	EHOSTUNREACH: "FI_EHOSTUNREACH", EALREADY: "FI_EALREADY",
	EINPROGRESS: "FI_EINPROGRESS", EREMOTEIO: "FI_EREMOTEIO",
	ECANCELED: "FI_ECANCELED", EKEYREJECTED: "FI_EKEYREJECTED",
	EOTHER: "FI_EOTHER", ETOOSMALL: "FI_ETOOSMALL", EOPBADSTATE: "FI_EOPBADSTATE",
	EAVAIL: "FI_EAVAIL", EBADFLAGS: "FI_EBADFLAGS", ENOEQ: "FI_ENOEQ",
	EDOMAIN: "FI_EDOMAIN", ENOCQ: "FI_ENOCQ", ECRC: "FI_ECRC", ETRUNC: "FI_ETRUNC",
	ENOKEY: "FI_ENOKEY", ENOAV: "FI_ENOAV", EOVERRUN: "FI_EOVERRUN",
	ENORX: "FI_ENORX", ENOMR: "FI_ENOMR",
}
