// Package av implements libfabric address vectors, fi_av(3), for xdpfab's
// UDP endpoints, and keeps each AV mirrored into the BPF map the XDP
// program reads to map a packet's source (IP, UDP port) to its fi_addr.
//
// An endpoint address is an IPv4 or IPv6 address and a UDP port. An AV
// takes addresses in the format of its domain (WithAddrFormat):
// struct sockaddr_in (FI_SOCKADDR_IN, 16 bytes), struct sockaddr_in6
// (FI_SOCKADDR_IN6, 28 bytes), either by sa_family (FI_SOCKADDR, the
// default), or FI_ADDR_STR strings (fi_sockaddr_in://10.0.0.1:7471,
// fi_sockaddr_in6://[fe80::1]:7471); InsertAddrPort takes netip.AddrPort
// whatever the format. An address that is malformed, of the wrong length or
// family, all-zero or with port 0 fails alone (FI_EINVAL).
//
// The calls map onto fi_av(3) one to one:
//
//	fi_av_open             Open(Attr, ctx, ...Option)
//	fi_close               (*AV).Close
//	fi_av_bind             (*AV).Bind(*eq.EQ, flags)
//	fi_av_insert           (*AV).Insert([][]byte, ...), InsertAddrPort([]netip.AddrPort, ...)
//	fi_av_insertsvc        (*AV).InsertSvc
//	fi_av_insertsym        (*AV).InsertSym
//	fi_av_remove           (*AV).Remove
//	fi_av_lookup           (*AV).Lookup
//	fi_av_straddr          (*AV).Straddr
//	fi_rx_addr             RxAddr
//	fi_av_insert_auth_key  (*AV).InsertAuthKey
//	fi_av_lookup_auth_key  (*AV).LookupAuthKey
//	fi_av_set_user_id      (*AV).SetUserID
//
// The hot-path lookups of the data path allocate nothing and, for an
// address stored per index, take no lock: AddrPort (fi_addr -> peer, for
// sending; AddrPortAuthKey also answers the auth key handle the address is
// bound to), FIAddr and SourceAddr (peer -> fi_addr / user ID, for
// FI_SOURCE on receive; FIAddr16 and SourceAddr16 take the peer as raw key
// bytes). AuthKeySource (FI_SOURCE_ERR) takes the AV's read lock.
//
// Lock-free reads. The table (table.go) is a seqlock: every change is made
// by one writer holding the AV's mu, between two increments of the
// table's sequence counter. A reader loads the counter, then the entry's
// three words (address, address, port|generation|state|auth key), the
// chunk directory and the hash index's slots with atomic loads, and keeps
// what it read only when the counter was even and is unchanged afterwards;
// otherwise, and for what a lock-free read does not cover (members of a
// symmetric range, misses, a named AV catching up with other processes),
// it takes the read lock and reads again. The chunk directory and the hash
// index are replaced whole when they grow (filled, then published through
// an atomic pointer), never resized in place, so a reader that loaded one
// indexes it safely whatever the writer does; chunks are never freed while
// the table lives, and Close publishes an empty table while leaving the
// old one's counter odd. So a lookup never returns a torn entry, and once
// Remove has returned no lookup finds the removed address
// (TestLockFreeReadersConcurrent). The writer stores the words with
// release stores (internal/memorder: a MOV on x86-64), not locked
// instructions, so inserts pay nothing for it.
//
// Memory layout for the hot lookups. Entries are 24 bytes in chunks of
// 1024; a table past 64 chunks (or opened with a count that large) takes
// its chunks from 12 MiB slabs, and slabs and the hash index of a large
// AV ask for transparent huge pages (MADV_HUGEPAGE, then MADV_COLLAPSE for
// heap memory Go hands out again already faulted in small pages). A
// lookup of a recently used peer of a large AV then finds its entry (and
// for FIAddr its hash slot) in a TLB that covers the whole table, where
// 4 KiB pages cost a page walk per lookup once the working set spans more
// pages than the TLB holds. Failure modes: advice only, so with THP off
// or no huge page free the memory stays in small pages (slower lookups,
// same results); a slab's unused tail costs at most 12 MiB per AV, and
// an AV below 64 chunks allocates none. AddrPort reads a live dense entry
// in the one call it inlines to, and builds an IPv4 peer's address there
// with one byte swap (addr4OfWord); anything else takes the longer path.
//
// The endpoint package binds endpoints with
// AttachEndpoint / DetachEndpoint and EnableEndpoint / DisableEndpoint,
// which make Close and removing an auth key answer FI_EBUSY.
//
// # Kernel mirror
//
// Every insert and remove keeps a Mirror in step. An unnamed AV has a
// kernel table of its own (TableMirror): a hash table in a
// BPF_F_MMAPABLE array map that the process has mmapped and writes with
// plain stores, under the seqlock protocol of bpf/xdpfab.h ("Peer
// tables", the compact form of its "Kernel tables"), and that av_map, the
// XDP program's hash of maps, holds under the AV's av_id (ID). The program looks a datagram's source up in the
// table of its port's AV. The default av_map is the process's
// (ProcessKernelMap); WithKernelMap names another (the interface's, which
// the fabric package uses); WithMirror(nil) opens an AV without kernel
// copy. A named AV keeps its entries in its pinned hash map instead
// (KernelMirror, one BPF_MAP_UPDATE_BATCH per batchLen writes), which the
// XDP program does not read.
//
// An AV is its table's only writer (ktable.AVTable): the AV keeps a tag
// byte per slot in Go memory, so a write finds its slot without reading
// the table's buckets and costs half a cache line and no locked
// instruction. Inserts reach the table as keys it does not hold
// (AVTable.InsertMany: no search for the key; the emptier of its two
// buckets takes it), since the AV holds no address twice and a removal
// deletes from the table before the address can come back; SetUserID
// rewrites entries in place (Put).
//
// Why: an insert into a BPF hash map is a bpf(2) call and an element
// allocation, about 1.3 µs an address even batched, and a hash map sized
// for the largest AV preallocates its bucket array (64 MiB for 4M
// addresses, 100-340 ms to make). A kernel table costs memory writes per
// address and grows with the AV. An AV starts with a compact table
// (bpf/xdpfab.h, "Compact peer tables"): IPv4 peers only, 16-byte slots,
// 16 to a 256-byte bucket; it starts at 768 bytes (3 buckets), an AV
// opened with a count gets 4/3 slots an address (ktable.AVTable4Buckets:
// the bucket count need not be a power of two), and when an insert would
// fill it past 4/5 (or a key's two buckets are full) the AV builds a
// table twice the size, copies the entries and swaps it into av_map with
// one bpf(2) call (XDP reads the old table until then, the new one after;
// both hold every entry). The first peer a compact table cannot hold (an
// IPv6 address, an fi_addr past 48 bits) makes the AV rebuild it the same
// way with 32-byte slots, 8 to a bucket (ktable.AVTableBuckets: 3/2 slots
// an address, grown at 7/10 full), which hold any peer; it stays so.
// Kernel memory: 21 bytes an address as sized (40 after growth) while
// the AV's peers are IPv4, 48 (46-96) once one is not.
//
// What a large insert costs is mostly the table's pages, not the writes:
// each 4 KiB page of a new table is first touched by the insert, and on a
// VM whose hypervisor shadows the guest's page tables every first touch
// of a page traps out of the guest (~12-15 µs a page on the development
// VM, in any order, MAP_POPULATE or not, and as much when the kernel
// writes the pages for a bpf(2) call; a BPF_F_MMAPABLE map is vmalloc
// memory, mapped to user space in 4 KiB pages, so transparent huge pages,
// which make the Go side's arrays cheap to touch there, cannot help).
// Hence the compact layouts: an AV opened with count 1,000,000 gets a
// 20 MiB table (83334 buckets), whose pages alone take ~0.085 CPU-s there
// (BenchmarkTableFloor1M/compact), where the 32-byte slots took 46 MiB
// and ~0.16 CPU-s (/wide), and the 64-byte slots of the MR table's layout
// 128 MiB and ~0.43 CPU-s. Insert1M/kernel, alternating the builds six
// times in one spell (medians): 0.38 → 0.27 CPU-s, 0.39 → 0.28 s wall;
// the table's page traps are now ~0.065 CPU-s of an insert's ~0.3.
//
// Failure modes:
//   - A slot a writer holds (seq odd) is busy to readers: XDP passes that
//     datagram to the stack (pass_av_busy), whose kernel socket the
//     AF_XDP transport also reads; it is never resolved from a
//     half-written entry.
//   - A peer table keeps auth key ids in 16 bits, which the AV's ids
//     (1..65535) fit; a value above that is refused (FI_EINVAL), never
//     truncated.
//   - Growing needs a new map: if the kernel refuses it (memory, memlock),
//     the insert fails with the kernel's errno and those addresses leave
//     the AV, as any refused write (below).
//   - Entering a table in av_map or taking it out is a map-in-map update,
//     after which bpf(2) waits for running programs (an RCU grace period,
//     5-20 ms). The process's av_map therefore stays for the life of the
//     process and keeps the tables of closed AVs, emptied (up to 64 of at
//     most 64 buckets), for the next AVs, which take them with their
//     av_ids: fi_av_open + fi_close cost microseconds, not two grace
//     periods. An AV of an attached interface (WithKernelMap with
//     WithKernelID, as fabric opens it, its av_id from the attachment's
//     owner registry, which hands av_ids out lowest free first) leaves its
//     table in that av_map at Close, emptied (parked, TableMirror.Park),
//     and the next AV given the same av_id, in this process or another,
//     takes it over (a lookup in av_map, an mmap): fi_av_open + fi_close
//     cost ~0.4 ms, the registry's file locking mostly, instead of two
//     grace periods (30 ms measured). av_map then holds at most as many
//     tables as AVs were open at once. A table grown past 64 buckets is
//     deleted at Close (one grace period), and so are those of an owner
//     that died (the reaper), and of an AV in an av_map without
//     WithKernelID, whose ids are not handed out again.
//   - Growing an AV's table swaps the bigger one into av_map: one grace
//     period per doubling (an AV opened with its count is sized at open).
//   - Closing an AV empties or drops its table: a datagram the program
//     vets after Close returned finds no entry.
//
// Writes are gathered and made batchLen at a time; on machines with 4
// CPUs or more a full batch is written by a goroutine while the next one
// fills. An insert with FI_MORE may leave its writes pending; an insert
// without it, a remove, SetUserID or Close writes them and waits for them.
// If a write fails (a table that cannot grow, a full named AV map), that
// address fails with the kernel's error (FI_ENOSPC for a full map) and
// the addresses of the batch after it are aborted (FI_ECANCELED); all of
// them leave the AV again.
//
// # FI_MORE and late failures
//
// A synchronous FI_MORE insert returns before its kernel writes are made,
// so an address it reported inserted can fail later, when the writes are
// made. Its failure is then its insert's, as fi_av(3) wants for "the fi_addr
// buffer associated with a failed or aborted insertion":
//
//   - its fi_addr slot is set to FI_ADDR_NOTAVAIL and, if the insert had
//     FI_SYNC_ERR, its status to the error (FI_ENOSPC, or FI_ECANCELED for
//     the rest of the batch). The AV writes these slots after the FI_MORE
//     call returned, during the call that makes the writes: the fi_addr
//     and status buffers of an FI_MORE insert must stay valid, and must
//     not be read concurrently, until the next insert without FI_MORE (or
//     Remove, SetUserID, Close) returns;
//   - its index stays out of use, and its handle invalid, until the
//     application calls Remove with that handle: a handle the insert
//     returned, and the caller may have copied, is never handed out for
//     another address meanwhile (FI_AV_TABLE order skips it);
//   - when the writes are made by a synchronous insert without FI_MORE,
//     it returns a *LostError naming those handles (errors.Is matches the
//     kernel's errno); its own addresses are counted as usual. Remove and
//     SetUserID, which also make pending writes, succeed regardless (the
//     failure is not theirs): then the slots are the report.
//
// Asynchronous FI_MORE inserts complete only once their writes are made,
// so their failures are ordinary error entries.
//
// To attach XDP for an unnamed AV, load the program with KernelMap() as
// its av_map,
//
//	ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{bpf.XdpfabMapAvMap: a.KernelMap()}}
//
// and steer the AV's local port to ID(). KernelEntries reads an av_map
// back. A named AV's map, pinned at PinPath(name), is for the processes
// sharing the name (ebpf.LoadPinnedMap), not for the program.
//
// # Provider choices
//
//   - FI_AV_UNSPEC opens an FI_AV_TABLE. TABLE handles are indices, lowest
//     free index first. MAP handles are generation<<32 | index, never
//     pointers: a handle used after its address was removed is rejected,
//     also once the index holds a new address. The generation is 16 bits
//     (1..65535) and does not wrap: an index whose occupant of generation
//     65535 is removed is retired, never handed out again, so no handle is
//     ever returned twice and a stale one never names another address (an
//     AV gives up one index per 65535 reuses of it, out of 2^32-1). TABLE
//     handles are the bare index and are reused, lowest first.
//     Receive-context bits (rx_ctx_bits up to MaxRxCtxBits) sit in the top
//     bits, as fi_rx_addr puts them, and lookups ignore them.
//   - Count and ep_per_node are hints: an AV grows to 2^32-1 addresses.
//   - Duplicates are detected through the AV's address hash: inserting an
//     address the AV already holds fails for that address with
//     FI_EADDRINUSE (FI_ADDR_NOTAVAIL in its slot). One peer has one entry
//     in the kernel map, so a second handle could never be reported as a
//     source; FIAddr finds the existing handle. Remove then insert works.
//   - Asynchronous (FI_EVENT) inserts run in a per-AV goroutine in call
//     order, on a copy of the addresses taken by the call; InsertSvc and
//     InsertSym resolve host names there, not in the caller. An FI_MORE
//     insert completes when its kernel writes are made, that is with the
//     next insert without FI_MORE (or a remove); FI_SYNC_ERR is synchronous
//     only (FI_EINVAL on an FI_EVENT AV). Close aborts queued inserts with
//     FI_ECANCELED.
//   - An asynchronous insert returns 0 ("successfully initiated") at
//     once, except the one that ends an FI_MORE batch (no FI_MORE, after
//     inserts with it): fi_av(3) lets the provider aggregate a batch until
//     the application says it is complete, and xdpfab carries the batch
//     out in that call, which returns when the batch's addresses are in
//     the AV with the number of its own addresses inserted, as a
//     synchronous insert does (never an error for an address: those are
//     error entries). The events of every insert of the batch follow in
//     the EQ as for any asynchronous insert. The application learns that
//     the batch is usable without waiting on the EQ, and fabtests'
//     fi_av_test (av_good_2vector_async, from when asynchronous inserts
//     returned their count) expects this count. libfabric's sockets, util
//     and usnic AVs return 0 from every asynchronous insert and so fail
//     that test for more than one address (-n 8; runfabtests runs -n 1).
//   - FI_SYNC_ERR takes the status array as the insert's context, an []int
//     (or an []int32, a view of a C int array)
//     receiving 0 or a positive fi.Errno per address, as fi_av(3) says.
//   - FI_SYMMETRIC: InsertSym of a numeric range stores one range record:
//     memory does not grow with nodecnt x svccnt. Free TABLE indices are
//     filled address by address first, so indices stay lowest-first. The
//     kernel map still gets one entry per address, since XDP looks up exact
//     keys. Host-name ranges, per-insert user IDs and auth keys, and named
//     AVs insert address by address.
//   - User IDs: on an AV opened with FI_AV_USER_ID, SetUserID sets them and
//     sources report FI_ADDR_NOTAVAIL until then; per-insert FI_AV_USER_ID
//     is rejected there (FI_EINVAL), as with WithAVAuthKey, and on Remove.
//   - Auth keys are AuthKeySize (8) bytes; InsertAuthKey needs
//     WithAVAuthKey. Handles have bit 48 set so LookupAuthKey tells them
//     from address handles. An auth key cannot be removed while an endpoint
//     is enabled against it or an address is bound to it (FI_EBUSY). An AV
//     holds up to 65535 keys; InsertAuthKey then fails with FI_ENOSPC, as
//     libfabric's util AV does when full. Auth key handles carry no
//     generation: a removed key's handle is handed out again, lowest free
//     first. One peer can be in an AV once, whatever its key.
//   - A named AV is a BPF map pinned at PinPath(name) (under bpffs, mounted
//     if needed) holding its entries and metadata. Names are per network
//     namespace (that of the thread calling Open or Unlink): an AV holds
//     addresses of one namespace, and 10.0.0.1:7471 names another peer in
//     another one. It lives until Unlink, like a file, or until its
//     namespace is gone: the first named Open of a process removes the AVs
//     of namespaces that no longer exist (stale.go), and a later namespace
//     given a dead one's inode number does not see them (a namespace's
//     directory carries its netns cookie). Every process opening
//     the name gets the same handles, whatever map_addr it gives. The
//     map_addr Attr reports (and fi_av_open returns) is this process's
//     mapping of the AV's fi_addr array, shared memory in which slot i
//     holds the fi_addr of index i (AddrArrayPath; the layout of
//     libfabric's sockets provider, which fabtests' fi_rdm_shared_av
//     reads); a map_addr given at open is ignored, as sockets does. FI_READ
//     opens an existing named AV read-only. Changes are serialized across
//     processes with flock on the pin directory and a version record; a
//     process catches up before it changes the AV and when a lookup misses
//     (a miss costs one map lookup to see whether the version moved).
//     FI_MORE is not held back on named AVs, and user IDs, auth keys and
//     endpoint state stay per process (user IDs are not flagged in the
//     shared map, and addresses another process bound to an auth key show
//     no key here). Close keeps the pin; Unlink removes
//     it. MAP handles of a named AV are not reused. The pin directory of
//     a namespace (/sys/fs/bpf/xdpfab/av/<netns>) is created by its first
//     named Open; it is the lock its openers flock. Unlink of its last AV
//     removes it under that lock, and /sys/fs/bpf/xdpfab/av once empty
//     (and /sys/fs/bpf/xdpfab too, under xdp's pin lock, when nothing else
//     is pinned there), so nothing stays in bpffs; an Open that finds its locked directory
//     unlinked (removed between its creation and the lock) makes a new one,
//     so the lock is never split.
//   - IPv6 zones, flow labels and scope ids are not kept: the kernel map
//     key has none. An IPv4-mapped IPv6 address is the same peer as the
//     IPv4 address. An FI_SOCKADDR_IN6 AV takes IPv4-mapped sockaddr_in6
//     addresses (::ffff:a.b.c.d; their IPv4 packets match the entry, which
//     the kernel keys IPv4-mapped) and returns them in that form from
//     Lookup and Straddr; it refuses plain IPv4 addresses (a netip IPv4
//     address, fi_sockaddr_in://, a numeric IPv4 node), as an FI_SOCKADDR_IN
//     AV refuses IPv6 ones.
//   - Errors carry a fi.Errno matched by errors.Is, also those of system
//     calls (a named AV's bpffs directory, its lock), which keep their text.
package av
