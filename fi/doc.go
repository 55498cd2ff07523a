// Package fi is xdpfab's shared libfabric vocabulary: the error numbers of
// rdma/fi_errno.h, fabric addresses (fi_addr_t), the flag bits several
// objects share, wait-object kinds, and the FID notion that events point
// back to.
//
// It is a leaf package: every other xdpfab package imports it and it imports
// nothing of xdpfab. Numeric values are exactly libfabric's so that a C
// binding can be layered on later without a translation table: an Errno is
// the positive value a libfabric call returns negated, a Flags bit is the
// same bit as in fabric.h, fi_domain.h, fi_eq.h and fi_atomic.h.
//
// Errors returned by xdpfab carry an Errno, usually wrapped with context via
// fmt.Errorf("...: %w", fi.ErrX); match them with errors.Is(err, fi.EAGAIN)
// or extract the number with fi.ErrnoOf(err).
package fi
