package xdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/ktable"
)

// PortConfig is how the program treats UDP datagrams to one port.
type PortConfig struct {
	AVID     uint32 `json:"av_id"`     // AV whose peers may send to the port
	DomainID uint32 `json:"domain_id"` // domain whose MR keys the port's requests name
	Strict   bool   `json:"strict"`    // drop datagrams from peers not in the AV
	// Addr is the address the port's endpoint is bound to: only datagrams
	// to it are the endpoint's. The zero Addr (or an unspecified one)
	// binds every address of the namespace (the local_addrs map, see
	// SyncLocalAddrs). Datagrams to other addresses (forwarded or bridged
	// traffic) pass to the stack, counted as pass_other_host.
	Addr netip.Addr `json:"addr,omitzero"`
	// KernelServe lets the program serve requests to the port on
	// kernel-resident regions (bpf/kserve.h): the endpoint shares its
	// target state. Off, requests cost no lookup of that state.
	KernelServe bool `json:"kernel_serve,omitempty"`
}

// Port is one configured UDP port.
type Port struct {
	Port uint16 `json:"port"`
	PortConfig
}

func portKey(port uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], port)
	return binary.NativeEndian.Uint16(b[:])
}

// setPort writes the entry of port (host order), replacing its config if
// it had one; SetPort also records the calling process as its owner.
func (a *Attachment) setPort(port uint16, cfg PortConfig) error {
	if port == 0 {
		return fmt.Errorf("xdp: %s: port 0: %w", a.Iface, fi.EINVAL)
	}
	v := bpf.XdpfabPortConfig{AvId: cfg.AVID, DomainId: cfg.DomainID}
	if cfg.Strict {
		v.Flags |= bpf.PortStrict
	}
	if cfg.KernelServe {
		v.Flags |= bpf.PortKServe
	}
	if cfg.Addr.IsValid() && !cfg.Addr.IsUnspecified() {
		v.Flags |= bpf.PortBoundAddr
		v.Addr = cfg.Addr.Unmap().As16() // IPv4-mapped for IPv4, as the program compares
	}
	if err := a.PortMap.Put(portKey(port), v); err != nil {
		if errors.Is(err, unix.E2BIG) {
			return fmt.Errorf("xdp: %s: set port %d: ports map full (%d): %w", a.Iface, port, a.PortMap.MaxEntries(), fi.ENOSPC)
		}
		return fmt.Errorf("xdp: %s: set port %d: %w", a.Iface, port, mapErr(err))
	}
	return nil
}

// deletePort removes the entry of port.
func (a *Attachment) deletePort(port uint16) error {
	err := a.PortMap.Delete(portKey(port))
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("xdp: %s: port %d is not configured: %w", a.Iface, port, fi.ENOENT)
	}
	if err != nil {
		return fmt.Errorf("xdp: %s: delete port %d: %w", a.Iface, port, mapErr(err))
	}
	return nil
}

func portConfigOf(v *bpf.XdpfabPortConfig) PortConfig {
	cfg := PortConfig{AVID: v.AvId, DomainID: v.DomainId, Strict: v.Flags&bpf.PortStrict != 0,
		KernelServe: v.Flags&bpf.PortKServe != 0}
	if v.Flags&bpf.PortBoundAddr != 0 {
		cfg.Addr = netip.AddrFrom16(v.Addr).Unmap()
	}
	return cfg
}

// port reads the config of port; ok is false if it has none.
func (a *Attachment) port(port uint16) (cfg PortConfig, ok bool, err error) {
	var v bpf.XdpfabPortConfig
	err = a.PortMap.Lookup(portKey(port), &v)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return cfg, false, nil
	}
	if err != nil {
		return cfg, false, fmt.Errorf("xdp: %s: read port %d: %w", a.Iface, port, mapErr(err))
	}
	return portConfigOf(&v), true, nil
}

// Ports lists the configured ports in ascending order.
func (a *Attachment) Ports() ([]Port, error) {
	var (
		key   uint16
		value bpf.XdpfabPortConfig
	)
	ports := []Port{}
	it := a.PortMap.Iterate()
	for it.Next(&key, &value) {
		var b [2]byte
		binary.NativeEndian.PutUint16(b[:], key)
		ports = append(ports, Port{Port: binary.BigEndian.Uint16(b[:]), PortConfig: portConfigOf(&value)})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("xdp: %s: list ports: %w", a.Iface, mapErr(err))
	}
	slices.SortFunc(ports, func(x, y Port) int { return int(x.Port) - int(y.Port) })
	return ports, nil
}

// Counters are the program's outcome counters summed over CPUs, indexed by
// bpf.Counter.
type Counters [bpf.XdpfabXdpfabCounterCNT_MAX]uint64

// Counters reads the counters, summed over CPUs.
func (a *Attachment) Counters() (Counters, error) {
	var c Counters
	var perCPU []uint64
	for i := range c {
		if err := a.CounterMap.Lookup(uint32(i), &perCPU); err != nil {
			return c, fmt.Errorf("xdp: %s: read counter %v: %w", a.Iface, bpf.Counter(i), mapErr(err))
		}
		for _, v := range perCPU {
			c[i] += v
		}
	}
	return c, nil
}

// SetXSK steers packets of RX queue to the AF_XDP socket fd (bound to this
// interface and queue).
func (a *Attachment) SetXSK(queue uint32, fd int) error {
	if queue >= bpf.XSKMaxQueues || fd < 0 {
		return fmt.Errorf("xdp: %s: queue %d (max %d) fd %d: %w", a.Iface, queue, bpf.XSKMaxQueues-1, fd, fi.EINVAL)
	}
	if err := a.XSKMap.Put(queue, uint32(fd)); err != nil {
		return fmt.Errorf("xdp: %s: set AF_XDP socket of queue %d: %w", a.Iface, queue, mapErr(err))
	}
	return nil
}

// DeleteXSK removes the AF_XDP socket of queue, if any; its packets go to
// the stack again. (Closing the socket removes it too.)
func (a *Attachment) DeleteXSK(queue uint32) error {
	if queue >= bpf.XSKMaxQueues {
		return fmt.Errorf("xdp: %s: queue %d (max %d): %w", a.Iface, queue, bpf.XSKMaxQueues-1, fi.EINVAL)
	}
	err := a.XSKMap.Delete(queue)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("xdp: %s: delete AF_XDP socket of queue %d: %w", a.Iface, queue, mapErr(err))
	}
	return nil
}

// BoundQueues lists the RX queues that have an AF_XDP socket in the XSKMAP.
// The kernel does not let user space read an XSKMAP, so this runs the
// object's xsk_probe program on it with BPF_PROG_TEST_RUN.
func (a *Attachment) BoundQueues() ([]uint32, error) {
	spec, err := bpf.LoadXdpfab()
	if err != nil {
		return nil, err
	}
	var probe struct {
		Prog *ebpf.Program `ebpf:"xsk_probe"`
	}
	opts := &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{bpf.XdpfabMapXsks: a.XSKMap}}
	if err := spec.LoadAndAssign(&probe, opts); err != nil {
		return nil, fmt.Errorf("xdp: %s: load XSKMAP probe: %w", a.Iface, loadErr(err))
	}
	defer probe.Prog.Close()
	out := make([]byte, 14)
	ropts := ebpf.RunOptions{Data: make([]byte, 14), DataOut: out}
	if _, err := probe.Prog.Run(&ropts); err != nil {
		return nil, fmt.Errorf("xdp: %s: run XSKMAP probe: %w", a.Iface, mapErr(err))
	}
	bits := binary.NativeEndian.Uint64(ropts.DataOut[:8])
	qs := []uint32{}
	for q := uint32(0); q < bpf.XSKMaxQueues; q++ {
		if bits&(1<<q) != 0 {
			qs = append(qs, q)
		}
	}
	return qs, nil
}

// Status describes an attachment for `xdpfab status`. Lists are empty,
// never nil (JSON [], not null).
type Status struct {
	Iface       string       `json:"iface"`
	Ifindex     int          `json:"ifindex"`
	Netns       NetnsID      `json:"netns"`
	Mode        string       `json:"mode"`
	ProgramID   uint32       `json:"program_id"`
	LinkID      uint32       `json:"link_id"`
	PinDir      string       `json:"pin_dir"`
	Ports       []PortStatus `json:"ports"`
	Owners      []Owner      `json:"owners"`
	AVs         int          `json:"avs"`         // kernel tables in av_map: open AVs', and closed ones' parked empty for their av_id
	AVMaxAVs    uint32       `json:"av_max_avs"`  // av_map's capacity
	AVEntries   int          `json:"av_entries"`  // addresses, over every AV's table
	AVCapacity  uint32       `json:"av_capacity"` // slots of those tables (they grow)
	MREntries   int          `json:"mr_entries"`  // keys in the MR table
	MRCapacity  uint32       `json:"mr_capacity"` // its slots
	BoundQueues []uint32     `json:"bound_queues"`
	// Dispatcher is the libxdp dispatcher xdpfab runs in as one program
	// among others (Options.MultiProg); nil when it runs alone.
	Dispatcher *DispatcherStatus `json:"dispatcher,omitempty"`
}

// PortStatus is a configured port and the process that set it, if a
// live one did (none for the ports of Options.Ports).
type PortStatus struct {
	Port
	Owner *PortOwner `json:"owner,omitempty"`
}

// PortOwner names the process owning a port.
type PortOwner struct {
	PID  int    `json:"pid"`
	Comm string `json:"comm"`
}

// Status gathers the attachment's mode, ids, ports and their owners, map
// occupancy and bound AF_XDP sockets, after reaping dead owners (whose
// entries are then gone). The calling thread must be in the attachment's
// network namespace.
func (a *Attachment) Status() (*Status, error) {
	st := &Status{Iface: a.Iface, Ifindex: a.Ifindex, Netns: a.Netns, PinDir: a.PinDir}
	if nl, err := netlink.LinkByIndex(a.Ifindex); err == nil {
		st.Iface = nl.Attrs().Name // renamed since it was opened
		st.Mode = attachedMode(nl).String()
		if st.Mode == ModeAuto.String() {
			st.Mode = "detached"
		}
	}
	if info, err := a.Program.Info(); err == nil {
		id, _ := info.ID()
		st.ProgramID = uint32(id)
	}
	if l, err := link.LoadPinnedLink(filepath.Join(a.PinDir, pinLink), nil); err == nil {
		if info, err := l.Info(); err == nil {
			st.LinkID = uint32(info.ID)
		}
		l.Close()
	}
	var err error
	if st.Owners, err = a.Owners(); err != nil {
		return nil, err
	}
	ports, err := a.Ports()
	if err != nil {
		return nil, err
	}
	st.Ports = make([]PortStatus, len(ports))
	for i, p := range ports {
		st.Ports[i].Port = p
		for _, o := range st.Owners {
			if slices.Contains(o.Ports, p) {
				st.Ports[i].Owner = &PortOwner{PID: o.PID, Comm: o.Comm}
			}
		}
	}
	if st.AVs, st.AVEntries, st.AVCapacity, err = a.avOccupancy(); err != nil {
		return nil, fmt.Errorf("xdp: %s: count AV entries: %w", a.Iface, err)
	}
	st.AVMaxAVs = a.AVMap.MaxEntries()
	if t, err := ktable.OpenReadOnly(a.MRMap); err == nil {
		st.MREntries, st.MRCapacity = t.Len(), uint32(t.Slots())
		t.Close()
	} else {
		st.MRCapacity = uint32(ktable.Ways * (a.MRMap.MaxEntries() - 1)) // no header yet: never written
	}
	if st.BoundQueues, err = a.BoundQueues(); err != nil {
		return nil, err
	}
	st.Dispatcher = a.dispatcherStatus()
	return st, nil
}

// avOccupancy counts the AVs in av_map and the entries and slots of
// their kernel tables.
func (a *Attachment) avOccupancy() (avs, entries int, slots uint32, err error) {
	var id uint32
	var inner ebpf.MapID
	it := a.AVMap.Iterate()
	for it.Next(&id, &inner) {
		m, err := ebpf.NewMapFromID(inner)
		if err != nil {
			continue // replaced or deleted since: counted with its successor
		}
		if t, err := ktable.OpenAVTableReadOnly(m); err == nil {
			avs++
			entries += t.Len()
			slots += uint32(t.Slots())
			t.Close()
		}
		m.Close()
	}
	if err := it.Err(); err != nil {
		return 0, 0, 0, mapErr(err)
	}
	return avs, entries, slots, nil
}
