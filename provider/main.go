// Command provider is libxdpfab-go.so, the Go part of xdpfab's libfabric
// provider, built with -buildmode=c-shared (make provider). libfabric loads
// the C shim libxdpfab-fi.so (provider/shim), which loads this library only
// when a process asks libfabric for xdpfab; see provider/shim for when that
// is and how one process never gets two Go runtimes.
//
// Model. Every libfabric object xdpfab returns is a C struct beginning
// with libfabric's fid structure (struct fid_domain, fid_ep, ...) and
// holding the Go object's runtime/cgo.Handle (xdpfab.h): fid.context is
// the application's. The ops tables are static C tables whose functions
// call one exported Go function each (ops_*.c, exports in the Go files of
// the same object); a slot xdpfab does not serve returns -FI_ENOSYS (never
// NULL). Application buffers and registered memory are C memory the Go
// side uses in place (unsafe.Slice over the C pointer, no copy): cgo's
// pointer rules allow Go to hold C pointers, and no Go pointer is stored in
// C memory.
//
// Calls. fi_getinfo is fabric.GetInfo and fi_fabric/fi_domain/
// fi_endpoint open from the Info (fabric.OpenFabricInfo, DomainFromInfo,
// EndpointAttrFromInfo): info.go converts struct fi_info and fabric.Info
// both ways, field by field. Every call of fi_msg, fi_tagged, fi_rma and
// fi_atomic, the vector and msg forms included, is the Go call of the
// same name, with the application's iovec, ioc and rma_iov arrays viewed
// in place (msg.c, tagged.c, rma.c, endpoint.c); fi_cancel, fi_getopt and
// fi_setopt (FI_OPT_ENDPOINT: size_t options and the int
// FI_OPT_FI_HMEM_P2P), fi_getname, the CQ (fi_cq_sread's cond with
// FI_CQ_COND_THRESHOLD), counter, EQ, AV (FI_SYNC_ERR's int array written
// in place) and MR calls likewise. fi_av_open returns the type chosen for
// FI_AV_UNSPEC and, for a named AV, map_addr: the address of the AV's
// fi_addr array in this process (av.AddrArrayPath: slot i holds the
// fi_addr of index i, as the sockets provider lays a shared AV out and
// fabtests' fi_rdm_shared_av reads it). Wait sets (fi_wait_open: a
// fid_wait over wait.Set, with fi_wait, fi_trywait, FI_GETWAIT and
// FI_GETWAITOBJ; EQs, CQs and counters join one with FI_WAIT_SET and
// attr.wait_set, which is ignored for other wait objects; closing a set
// with members fails with FI_EBUSY) and poll sets (fi_poll_open: a
// fid_poll over fabric.PollSet, with fi_poll_add, fi_poll_del and fi_poll
// writing the members' fid contexts) are wait.go and poll.go, their C
// fids waitpoll.c. FI_GETWAIT on an object opened with FI_WAIT_MUTEX_COND
// gives a pthread mutex and cond the provider broadcasts on every signal
// (mutexcond.go). fi_setname before fi_enable moves an endpoint to
// another port of its own address (fabric.Endpoint.SetAddr; setname.go).
// -FI_ENOSYS: fi_getpeer (an RDM endpoint has no peer), connection
// management, scalable endpoints and tx/rx contexts, shared
// contexts, fi_rx/tx_size_left, collectives and AV sets.
//
// Unknown peers. Every endpoint is opened with fabric's AcceptUnknown:
// an RDM endpoint serves peers that are not in its AV, as fabtests and
// MPI expect when a server learns its clients from their first message;
// their completions report FI_ADDR_NOTAVAIL as source (fi_cq_readfrom),
// and the XDP program hands their datagrams up marked unknown instead of
// dropping them (its non-strict port mode).
//
// Errors. Every exported function recovers a panic and returns -FI_EOTHER
// (logging it), so no Go panic unwinds into C; other failures return the
// negative libfabric errno of the Go error (fi.ErrnoOf).
//
// Runtime. GOMAXPROCS is 2 unless XDPFAB_GOMAXPROCS (or GOMAXPROCS) says
// otherwise: a provider lives in every MPI rank, and a rank's Go runtime
// should not spread over every core the ranks share; a rank bound to one
// CPU still gets 2 (runtime.go says why). The first fi_enable of a process
// ends with one garbage collection (heapsettle.go), so that the cycle the
// set-up's allocations start does not run on into the first operations.
//
// fork. Only the forking thread survives fork(2), so the Go runtime cannot
// run in a child. A child that does not use xdpfab (MPI launchers, fabtests'
// helpers, fork+exec) is fine; in a child of a process that had loaded
// xdpfab every provider entry fails without entering Go: fi_getinfo for
// xdpfab gives FI_ENODATA (other providers still answer), other calls
// -FI_EOTHER. A child of a process that never asked for xdpfab loads it
// afresh like any process.
package main

/*
#cgo CFLAGS: -O2 -Wall
#cgo LDFLAGS: -lfabric
#include "xdpfab.h"
*/
import "C"

func main() {}
