// Package wait implements libfabric wait objects and wait sets, fi_poll(3)'s
// fi_wait_open / fi_wait / fi_trywait, for the objects that support
// blocking reads: event queues, completion queues and counters.
//
// Two pieces are here. An Object is the wait object of one queue: the queue
// calls Signal after it has made something readable, and a goroutine blocked
// in Wait (the queue's sread) wakes up. A Set is fi_wait_open's wait set: a
// Set has one Object of its own, queues opened with fi.WaitSet join it as a
// Member and signal the Set instead of an Object of their own, and Set.Wait
// blocks until any member has something to read.
//
// # Model
//
// Blocking inside the process never goes through the kernel: every Object
// has a one-token doorbell channel, and Wait parks the goroutine on it. A
// waiter registers before it checks the queue, and Signal rings only when a
// waiter is registered, so a queue with nobody blocked pays one atomic load
// per event, and a goroutine blocked in Wait wakes within microseconds of the
// Signal. The wait-object kind only decides what is exported to the
// application on top of that, for use with its own poll loops:
//
//   - fi.WaitFD: an eventfd (EFD_NONBLOCK|EFD_CLOEXEC). It is readable
//     (POLLIN) from the first Signal until the owner re-arms it with Reset,
//     which the owner's TryWait does before it checks for pending entries,
//     exactly as fi_trywait(3) prescribes. Reading entries never clears it,
//     so a peek or an sread cannot lose a wake-up; after the queue is
//     drained the fd may stay readable until the next TryWait (a false
//     positive, which fi_poll(3) allows). Applications poll the fd, they must
//     not read from it.
//   - fi.WaitMutexCond: Go has no pthread objects, so the equivalent is a
//     MutexCond: a *sync.Mutex and a *sync.Cond on it, broadcast after every
//     Signal. The application holds the Mutex, calls the owner's TryWait and
//     sleeps in Cond.Wait while TryWait returns nil (nothing pending); since
//     Signal takes the Mutex to broadcast, no wake-up is lost. A pair
//     outside Go (the C provider's pthread mutex and cond) registers with
//     the SetNotify control command to be woken after each broadcast.
//   - fi.WaitYield: Wait spins, calling runtime.Gosched between checks, as
//     FI_WAIT_YIELD's "yield on every wait" says; Signal does no work.
//   - fi.WaitUnspec: the doorbell alone, the fastest; there is nothing to
//     retrieve (FI_GETWAIT fails with FI_ENODATA, as the page allows).
//
// fi.WaitNone and fi.WaitSet are not Object kinds: a queue opened with
// WaitNone has no Object and no blocking read, one opened with WaitSet
// signals its Set.
//
// # Provider choices
//
// fi_wait's result on timeout is not stated by fi_poll(3); Set.Wait returns
// FI_ETIMEDOUT there, as libfabric's util wait sets do, and nil as soon as a
// member has something pending (also when it already had before the call).
// A member's fi_cq_signal (SignalTaker) ends one Set.Wait that finds
// nothing pending, as it ends one sread of the CQ: libfabric signals the
// set's wait object there, and its fi_wait returns. Signals are remembered
// by their owner until a blocking wait takes them; neither fi_trywait nor a
// zero-timeout wait consumes one.
// A member whose entries come only while the application calls in
// (FI_PROGRESS_MANUAL, a Driver) is driven by Set.Wait, as libfabric's wait
// sets poll their members' CQs: Wait runs its progress, spins for 100 µs
// and then sleeps on the set's object in 1 ms steps, driving again after
// each, so a manual-progress set sees its traffic while the application
// waits (a sleep on the exported fd or condition variable does not drive
// anything: with manual progress only calls into xdpfab do).
// Set.Close fails with FI_EBUSY while a member is attached. Set attributes
// reject flags (they are reserved and must be 0) with FI_EBADFLAGS and
// FI_WAIT_POLLFD with FI_ENOSYS. Control knows FI_GETWAIT and
// FI_GETWAITOBJ; other commands fail with FI_ENOSYS.
//
// # Locking rules for owners
//
// An owner (EQ, CQ, counter) calls Signal and Set.Add / Set.Remove without
// holding its own lock, and its Pending (or Wait's ready function) may take
// it. The order is therefore: the application's MutexCond mutex, then a Set's
// lock, then the owner's lock; Signal takes only the MutexCond mutex.
package wait
