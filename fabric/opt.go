package fabric

import (
	"fmt"
	"math"

	"github.com/xdpfab/xdpfab/fi"
)

// OptLevel is an fi_getopt/fi_setopt option level.
type OptLevel int

// OptEndpoint is FI_OPT_ENDPOINT, the only level.
const OptEndpoint OptLevel = 0

// OptName is an FI_OPT_ENDPOINT option, numbered as in fi_endpoint.h.
type OptName int

// Endpoint options.
const (
	OptMinMultiRecv  OptName = iota // FI_OPT_MIN_MULTI_RECV, size_t (uint64)
	OptCMDataSize                   // FI_OPT_CM_DATA_SIZE: connection management only; not on RDM
	OptBufferedMin                  // FI_OPT_BUFFERED_MIN, size_t
	OptBufferedLimit                // FI_OPT_BUFFERED_LIMIT, size_t
	OptSendBufSize                  // FI_OPT_SEND_BUF_SIZE: not on the fi_endpoint(3) page
	OptRecvBufSize                  // FI_OPT_RECV_BUF_SIZE: not on the page
	OptTxSize                       // FI_OPT_TX_SIZE: not on the page
	OptRxSize                       // FI_OPT_RX_SIZE: not on the page
	OptHMEMP2P                      // FI_OPT_FI_HMEM_P2P, int
	OptXPUTrigger                   // FI_OPT_XPU_TRIGGER: fi_getopt only
)

// FI_OPT_FI_HMEM_P2P values (fi_endpoint.h).
const (
	HMEMP2PEnabled   = 0 // FI_HMEM_P2P_ENABLED, the default
	HMEMP2PRequired  = 1 // FI_HMEM_P2P_REQUIRED
	HMEMP2PPreferred = 2 // FI_HMEM_P2P_PREFERRED
	HMEMP2PDisabled  = 3 // FI_HMEM_P2P_DISABLED
)

// GetOpt is fi_getopt. val points to the option's type: *uint64 for the
// size_t options, *int for FI_OPT_FI_HMEM_P2P; another type is FI_EINVAL
// (the optlen check of C).
//
//   - FI_OPT_MIN_MULTI_RECV: the space below which a FI_MULTI_RECV buffer
//     is released (DefaultMinMultiRecv unless set).
//   - FI_OPT_BUFFERED_LIMIT: the eager limit, the largest message the
//     receiver buffers on its own when no receive is posted; longer ones
//     go by rendezvous and are buffered as their header only
//     (DefaultEagerLimit unless set). xdpfab has no FI_BUFFERED_RECV mode,
//     so this is the limit's only meaning.
//   - FI_OPT_BUFFERED_MIN: 0: an RTS carries no data.
//   - FI_OPT_FI_HMEM_P2P: the mode set (FI_HMEM_P2P_ENABLED by default;
//     xdpfab has no device memory, so it changes nothing).
//   - FI_OPT_XPU_TRIGGER: FI_EOPNOTSUPP: no XPU triggered operations.
//   - FI_OPT_CM_DATA_SIZE (an RDM endpoint has no connection management),
//     other names and levels: FI_ENOPROTOOPT.
func (ep *Endpoint) GetOpt(level OptLevel, name OptName, val any) error {
	if level != OptEndpoint {
		return fmt.Errorf("getopt: level %d: %w", level, fi.ENOPROTOOPT)
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	size := func(v uint64) error {
		p, ok := val.(*uint64)
		if !ok || p == nil {
			return fmt.Errorf("getopt %d: size_t option takes a *uint64, not %T: %w", name, val, fi.EINVAL)
		}
		*p = v
		return nil
	}
	switch name {
	case OptMinMultiRecv:
		ep.rx.mu.Lock()
		v := ep.rx.minMultiRecv
		ep.rx.mu.Unlock()
		return size(uint64(v))
	case OptBufferedLimit:
		return size(uint64(ep.eagerLimit))
	case OptBufferedMin:
		return size(0)
	case OptHMEMP2P:
		p, ok := val.(*int)
		if !ok || p == nil {
			return fmt.Errorf("getopt FI_OPT_FI_HMEM_P2P takes an *int, not %T: %w", val, fi.EINVAL)
		}
		*p = ep.hmemP2P
		return nil
	case OptXPUTrigger:
		return fmt.Errorf("getopt FI_OPT_XPU_TRIGGER: no XPU triggered operations: %w", fi.EOPNOTSUPP)
	}
	return fmt.Errorf("getopt: option %d: %w", name, fi.ENOPROTOOPT)
}

// SetOpt is fi_setopt. val is the option's type: uint64 for the size_t
// options, int for FI_OPT_FI_HMEM_P2P; another type is FI_EINVAL.
//
//   - FI_OPT_MIN_MULTI_RECV: any value; it applies to FI_MULTI_RECV
//     buffers posted afterwards.
//   - FI_OPT_BUFFERED_LIMIT: before Enable (FI_EOPBADSTATE after), from
//     the inject size to MaxEagerLimit (FI_EMSGSIZE outside; SIZE_MAX,
//     math.MaxUint64, sets MaxEagerLimit). Peers need not agree on it: a
//     receiver takes either protocol.
//   - FI_OPT_BUFFERED_MIN: 0 only (FI_EMSGSIZE otherwise): an RTS carries
//     no data.
//   - FI_OPT_FI_HMEM_P2P: ENABLED, PREFERRED or DISABLED; REQUIRED is
//     FI_EOPNOTSUPP (no peer-to-peer device transfers), others FI_EINVAL.
//   - FI_OPT_CM_DATA_SIZE (read-only and not on RDM), FI_OPT_XPU_TRIGGER
//     (fi_getopt only), other names and levels: FI_ENOPROTOOPT.
func (ep *Endpoint) SetOpt(level OptLevel, name OptName, val any) error {
	if level != OptEndpoint {
		return fmt.Errorf("setopt: level %d: %w", level, fi.ENOPROTOOPT)
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.closed {
		return fmt.Errorf("setopt: endpoint closed: %w", fi.EINVAL)
	}
	size := func() (uint64, error) {
		v, ok := val.(uint64)
		if !ok {
			return 0, fmt.Errorf("setopt %d: size_t option takes a uint64, not %T: %w", name, val, fi.EINVAL)
		}
		return v, nil
	}
	switch name {
	case OptMinMultiRecv:
		v, err := size()
		if err != nil {
			return err
		}
		ep.rx.mu.Lock()
		ep.rx.minMultiRecv = int(min(v, math.MaxInt32))
		ep.rx.mu.Unlock()
		return nil
	case OptBufferedLimit:
		v, err := size()
		if err != nil {
			return err
		}
		if ep.enabled {
			return fmt.Errorf("setopt FI_OPT_BUFFERED_LIMIT: endpoint enabled: %w", fi.EOPBADSTATE)
		}
		if v == math.MaxUint64 {
			v = MaxEagerLimit
		}
		if v < uint64(ep.size.injectSize) || v > MaxEagerLimit {
			return fmt.Errorf("setopt FI_OPT_BUFFERED_LIMIT: %d outside %d..%d: %w", v, ep.size.injectSize, MaxEagerLimit, fi.EMSGSIZE)
		}
		ep.eagerLimit = int(v)
		return nil
	case OptBufferedMin:
		v, err := size()
		if err != nil {
			return err
		}
		if v != 0 {
			return fmt.Errorf("setopt FI_OPT_BUFFERED_MIN: %d: an RTS carries no data: %w", v, fi.EMSGSIZE)
		}
		return nil
	case OptHMEMP2P:
		v, ok := val.(int)
		if !ok {
			return fmt.Errorf("setopt FI_OPT_FI_HMEM_P2P takes an int, not %T: %w", val, fi.EINVAL)
		}
		switch v {
		case HMEMP2PEnabled, HMEMP2PPreferred, HMEMP2PDisabled:
			ep.hmemP2P = v
			return nil
		case HMEMP2PRequired:
			return fmt.Errorf("setopt FI_OPT_FI_HMEM_P2P: peer to peer required: %w", fi.EOPNOTSUPP)
		}
		return fmt.Errorf("setopt FI_OPT_FI_HMEM_P2P: mode %d: %w", v, fi.EINVAL)
	}
	return fmt.Errorf("setopt: option %d: %w", name, fi.ENOPROTOOPT)
}
