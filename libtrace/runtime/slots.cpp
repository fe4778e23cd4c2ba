/*
 * slots.cpp - session slot buffers: creation (memfd + layout + header),
 * closing, fork and process exit, the control lock and quiescence.
 *
 * Contract: every entry point here is async-signal-safe (runtime.h): only
 * system calls, no malloc, no stdio; the control lock is a try-lock that
 * reports re-entry on the same thread as STRATA_RT_EBUSY.
 *
 * A closed slot's mapping is not unmapped: a writer that loaded the slot's
 * Channel just before the close may still be writing into it.  Instead the
 * shared pages are replaced in place (MAP_FIXED) by private anonymous
 * memory that costs nothing until such a late writer touches it; the
 * Channel itself lives in a private page that is never freed.  What this
 * costs: address space only (one mapping per slot open), no RAM, and no
 * read-side synchronisation on the fast path at all.
 */
#include <errno.h>
#include <fcntl.h>
#include <elf.h>
#include <link.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "crash_reg.h"
#include "huge_chunks.h"
#include "rt_internal.h"
#include "proto/proto.h"

// The control protocol's limits are the runtime's (both from
// strata_limits.h); the public tracepoint.h, installed alone, repeats the
// slot count.
static_assert(STRATA_MAX_SLOTS == STRATA_LIMIT_SLOTS, "tracepoint.h and strata_limits.h: slots");

// This object's ELF header (defined by the linker; map_code_ahead), then
// its program headers and the rest of its first segment: declared as bytes
// of unknown extent, since they are read past the header's size (as an
// Ehdr object, UBSan's object-size check refuses the program headers).
extern "C" const unsigned char __ehdr_start[] __attribute__((visibility("hidden")));

namespace strata {
// Registered for MEMBARRIER_CMD_GLOBAL_EXPEDITED, which a consumer issues
// before it closes an owned lane of ours: our buffers are FAST_OWNER.
// Constructor and fork child (a new mm) only (rt_internal.h).
bool g_membarrier_global;
} // namespace strata

namespace strata {
namespace {

constexpr uint64_t kPage = 4096;

// How long a writer waits between two tries of an owed hand-over
// (Channel::handoff_owed): each try is a connect and a send.
constexpr uint64_t kHandoffRetryNs = 100000000;

// A buffer the daemon never received is about to go: say what it held, on
// stderr (AS-safe: warn's one write), since no trace will count it.
void warn_unhanded(const Channel *ch)
{
	uint64_t bytes = 0, discarded = 0;
	for (uint32_t i = 0; i < ch->n_lanes; i++) {
		// Relaxed: the process's last look at its own counters.
		bytes += __atomic_load_n(&ch->lanes[i].head, __ATOMIC_RELAXED);
		discarded += strata_lane_discarded(&ch->lanes[i]);
	}
	char msg[160];
	size_t n = 0;
	const auto put = [&](const char *t) {
		while (*t && n < sizeof msg - 1)
			msg[n++] = *t++;
	};
	const auto num = [&](uint64_t v) {
		char d[24];
		int k = 0;
		do
			d[k++] = (char)('0' + v % 10);
		while ((v /= 10) && k < 24);
		while (k && n < sizeof msg - 1)
			msg[n++] = d[--k];
	};
	put("the consumer daemon never received a buffer: ");
	num(bytes);
	put(" bytes of events and ");
	num(discarded);
	put(" discarded events are lost");
	msg[n] = 0;
	warn(msg);
}

// One try of an owed hand-over, under the control lock.  True when the
// daemon has the buffer now.
bool handoff_owed_locked(Channel *ch, uint64_t now)
{
	if (!ch->handoff_owed.load(std::memory_order_relaxed))
		return true;
	if (ch->handoff(ch->slot, ch->fd, ch->handoff_ctx) == 0) { // says why itself
		ch->handoff_owed.store(0, std::memory_order_relaxed);
		warn("the buffer was handed to the consumer daemon on a retry: no event lost");
		return true;
	}
	// 100 ms, then doubling up to 6.4 s: a daemon gone for good costs a
	// connect attempt every few seconds, not one per packet.
	const uint32_t k = ch->handoff_tries < 6 ? ch->handoff_tries++ : 6;
	ch->handoff_next_ns.store(now + (kHandoffRetryNs << k), std::memory_order_relaxed);
	return false;
}

using proto::kDefaultSubbufs;
using proto::kDefaultSubbufSize;
constexpr uint64_t kMinDescCapacity = 1 << 20;

std::atomic<uint32_t> g_lock_owner{0}; // tid holding the control lock, 0: free
std::atomic<strata_rt_fork_hook> g_fork_hook{nullptr};
// Per slot, how many times it was opened: a binding that keeps per-session
// state by slot tells a slot reopened for another session from the same
// one (the JVM agent's thread_exists replay).
std::atomic<uint32_t> g_slot_gen[STRATA_MAX_SLOTS];
bool g_membarrier_private;

void register_global_membarrier()
{
#ifdef STRATA_UNLOCKED_COMMIT
	g_membarrier_global = getenv("STRATA_NO_FAST_OWNER") == nullptr && // read-only walk of environ
			      syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0;
#endif
}
bool g_fork_locked; // the atfork prepare handler took the lock

// Closed Channels whose mapping is not retired yet: closed by a signal
// handler that interrupted a writer of its own thread inside a reservation
// (a stop applied by tp-async's handler), which can only finish after the
// handler returns.  Retired by the next control call made outside any
// reservation (a slot's open or close; retire_owed_locked).  Under the
// control lock.
Channel *g_retire_owed[2 * STRATA_MAX_SLOTS];
unsigned g_n_retire_owed;

// Keeping a forked child's early buffer (docs/boot.md): a process that
// records into an early buffer (slot 15, no daemon) makes, at fork, the
// memfd its child's early buffer will live in, and keeps its own descriptor
// of it.  The buffer then outlives a child that exits before any daemon
// exists; the daemon finds it among the parent's descriptors
// (--adopt-early).  At most STRATA_EARLY_KEEP (default 16) per process:
// bound = that many early buffers (each lanes x sub-buffers, touched pages
// only).  Fork-handler context only (the control lock held by prepare).
constexpr unsigned kEarlySlot = 15;
int g_early_child_fd = -1; // made by prepare; the child's buffer, or -1
unsigned g_early_kept;     // descriptors kept by this process

unsigned early_keep_max()
{
	const char *v = getenv("STRATA_EARLY_KEEP");
	return v && *v ? (unsigned)strtoul(v, nullptr, 10) : 16;
}

uint64_t round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) & ~(a - 1);
}

bool pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

unsigned log2_of(uint64_t v)
{
	return (unsigned)__builtin_ctzll(v);
}

// Owned lanes by default: 2 per CPU the process may run on, at least
// kMinDefaultLanes.  The floor is for small machines, where a server's
// writing threads outnumber 2 x CPUs (memcached -t 2: 8 on 2 CPUs): a
// thread beyond the owned lanes pays a locked CAS and a locked add a
// record in a shared lane (10 and 5.5 ns on the Intel Xeon kind, where a
// record costs 26-31 ns), and a lane costs memory only once a thread
// writes it (docs/ring-buffer.md, "Lanes: per thread, not per CPU").
constexpr uint32_t kMinDefaultLanes = 8;

// The CPUs the process may run on (at least 1).
uint32_t affinity_cpus()
{
	cpu_set_t set;
	uint32_t ncpu = 1;
	if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
		ncpu = (uint32_t)CPU_COUNT(&set);
	return ncpu;
}

uint32_t default_lanes()
{
	const uint32_t ncpu = affinity_cpus();
	uint32_t n = 2 * ncpu < kMinDefaultLanes ? kMinDefaultLanes : 2 * ncpu;
	return n > STRATA_MAX_LANES ? STRATA_MAX_LANES : n;
}

struct Geometry {
	uint32_t n_lanes, n_shared, n_subbuf, mode, block_ms;
	uint64_t subbuf_size, desc_capacity;
	uint64_t desc_offset, lanes_offset, data_offset, total;
};

int compute_geometry(const strata_channel_config *cfg, Geometry *g)
{
	// cfg->n_lanes lanes a thread can own, plus shared ones for the threads
	// beyond them (half as many, at least one: 8 threads on 4 owned lanes
	// put 2 on each shared lane, as many as lanes shared before): records in a shared
	// lane carry their thread, those of an owned lane do not (strata_abi.h).
	// By default, at most one shared lane a CPU: a sharer writes its CPU's
	// (shared_lane), so that on fewer than 4 CPUs (8 owned lanes) half the
	// owned lanes' count would leave lanes no CPU ever writes.  Pages of a
	// lane nobody claimed are never touched.
	const uint32_t owned = cfg->n_lanes ? cfg->n_lanes : default_lanes();
	g->n_shared = owned / 2 ? owned / 2 : 1;
	if (!cfg->n_lanes && g->n_shared > affinity_cpus())
		g->n_shared = affinity_cpus();
	g->n_lanes = owned + g->n_shared;
	if (owned > STRATA_MAX_LANES)
		return -EINVAL;
	if (g->n_lanes > STRATA_MAX_LANES)
		g->n_lanes = STRATA_MAX_LANES; // fewer owned lanes, never fewer shared
	g->n_subbuf = cfg->n_subbuf ? cfg->n_subbuf : kDefaultSubbufs;
	g->subbuf_size = cfg->subbuf_size ? cfg->subbuf_size : kDefaultSubbufSize;
	g->mode = cfg->mode & STRATA_MODE_MASK;
	g->block_ms = STRATA_MODE_BLOCK_MS(cfg->mode); // strata_abi.h: the mode word
	if (g->n_lanes > STRATA_MAX_LANES || !pow2(g->n_subbuf) || g->n_subbuf < 2 ||
	    g->n_subbuf > STRATA_MAX_SUBBUF || !pow2(g->subbuf_size) ||
	    g->subbuf_size < STRATA_MIN_SUBBUF_SIZE || g->subbuf_size > STRATA_MAX_SUBBUF_SIZE ||
	    (g->mode != STRATA_MODE_DISCARD && g->mode != STRATA_MODE_OVERWRITE) ||
	    (g->block_ms && g->mode != STRATA_MODE_DISCARD) ||
	    cfg->stream_id == UINT32_MAX || // shared lanes use stream_id + 1

	    !memchr(cfg->name, 0, sizeof cfg->name))
		return -EINVAL;
	uint64_t want = 2 * registry_encoded_size();
	g->desc_capacity = round_up(want > kMinDescCapacity ? want : kMinDescCapacity, kPage);
	g->desc_offset = kPage;
	g->lanes_offset = g->desc_offset + g->desc_capacity;
	g->data_offset = round_up(g->lanes_offset + g->n_lanes * sizeof(strata_lane_ctl), kPage);
	// Lanes of whole 2 MiB chunks start huge_lead(S) before a chunk
	// boundary, so that a busy lane's first lap past its lead is whole
	// chunks made as 2 MiB pages (huge_chunks.h); the file grows by at
	// most 2 MiB of unwritten, unallocated bytes.
	const uint64_t stride = (uint64_t)g->n_subbuf * g->subbuf_size, lead = huge_lead(g->subbuf_size);
	if (stride % kHugeChunk == 0)
		g->data_offset = round_up(g->data_offset + lead, kHugeChunk) - lead;
	// At most 256 lanes x 64 x 64 MiB = 2^40: no overflow in 64 bits.
	g->total = g->data_offset + (uint64_t)g->n_lanes * g->n_subbuf * g->subbuf_size;
	return 0;
}

void fill_header(strata_buffer_header *h, const strata_channel_config *cfg, const Geometry &g,
		 const uint8_t uuid[16])
{
	h->magic = STRATA_ABI_MAGIC;
	h->abi_major = STRATA_ABI_MAJOR;
	h->abi_minor = STRATA_ABI_MINOR;
	h->header_size = sizeof *h;
	h->endian_check = 0x01020304u;
	h->total_size = g.total;
	h->pid = (uint32_t)getpid();
	h->uid = (uint32_t)getuid();
	char comm[17] = {0};
	prctl(PR_GET_NAME, comm, 0, 0, 0);
	memcpy(h->comm, comm, sizeof comm);
	const char *name = cfg->name[0] ? cfg->name : "channel0";
	memcpy(h->channel, name, strlen(name) + 1);
	memcpy(h->trace_uuid, uuid, 16);
	h->stream_id = cfg->stream_id;
	h->mode = g.mode;
	h->n_lanes = g.n_lanes;
	h->n_subbuf = g.n_subbuf;
	h->subbuf_size = g.subbuf_size;
	h->desc_offset = g.desc_offset;
	h->desc_capacity = g.desc_capacity;
	h->lanes_offset = g.lanes_offset;
	h->data_offset = g.data_offset;
	h->lane_stride = (uint64_t)g.n_subbuf * g.subbuf_size;
	h->clock_id = strata_rt_clock_id();
	h->record_format = STRATA_REC_COMPACT;
	h->n_shared_lanes = g.n_shared;
	h->block_timeout_ms = g.block_ms;
}

// Replace the shared pages by private zero pages (see the file comment):
// everything past the header page first, then STRATA_BUF_RETIRED in the
// header, then the header page.  A consumer that sees the flag knows that
// no access of ours to a lane or its data reaches the shared pages any
// more (the mmap returned before the flag's store, every thread's view of
// the mapping changed), so its last flush waits for no writer (a late
// writer's wake_seq or block_timeouts add may still land in the header
// page meanwhile: counters, harmless).  A split the kernel refuses (pages
// larger than kPage): the whole mapping at once, without the flag.
void retire_mapping(Channel *ch)
{
	crash_unregister(ch->base);
	constexpr int kProt = PROT_READ | PROT_WRITE;
	constexpr int kFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE;
	void *p = ch->total_size > kPage
			  ? mmap(ch->base + kPage, ch->total_size - kPage, kProt, kFlags, -1, 0)
			  : MAP_FAILED;
	if (p != MAP_FAILED) {
		// Release: orders nothing of ours before it that the consumer
		// reads; the mmap above is what the flag says happened.
		__atomic_fetch_or(&ch->hdr->flags, STRATA_BUF_RETIRED, __ATOMIC_RELEASE);
		p = mmap(ch->base, kPage, kProt, kFlags, -1, 0);
	} else {
		p = mmap(ch->base, ch->total_size, kProt, kFlags, -1, 0);
	}
	if (p == MAP_FAILED)
		count_invariant_error("could not retire a closed buffer mapping");
	close(ch->fd);
}

// The flag only, no wake-up: the daemon learns of an exit from the
// process's pidfd and of a closed slot from its own session change, and its
// drain never waits for this flag.  A FUTEX_WAKE here would run in every
// traced process's exit path once a drain was waiting, and wake that drain
// for a round with nothing to do.
void mark_exited(Channel *ch)
{
	// Release: everything the producer wrote is visible to a consumer that
	// sees the flag (pairs with Reader::producer_exited's acquire load).
	__atomic_fetch_or(&ch->hdr->flags, STRATA_BUF_PRODUCER_EXITED, __ATOMIC_RELEASE);
}

void atfork_prepare()
{
	g_fork_locked = control_lock() == 0;
	g_early_child_fd = -1;
	if (g_fork_locked && g_slots[kEarlySlot].load(std::memory_order_relaxed) &&
	    g_early_kept < early_keep_max())
		g_early_child_fd =
			(int)syscall(SYS_memfd_create, "strata-slot-15", MFD_CLOEXEC | MFD_ALLOW_SEALING);
}

void atfork_parent()
{
	if (g_early_child_fd >= 0) {
		g_early_kept++; // kept open: the child's buffer outlives the child
		g_early_child_fd = -1;
	}
	if (g_fork_locked)
		control_unlock();
}

void atfork_child()
{
	g_early_kept = 0; // the parent's kept descriptors are not the child's to count
	control_lock_reset_in_child();
	register_global_membarrier(); // the child's mm is a new one
	writer_forget_thread_state_in_child();
	for (unsigned i = 0; i < g_n_retire_owed; i++)
		retire_mapping(g_retire_owed[i]); // nobody writes them in the child
	g_n_retire_owed = 0;
	for (unsigned s = 0; s < STRATA_MAX_SLOTS; s++) {
		Channel *ch = g_slots[s].load(std::memory_order_relaxed);
		if (!ch)
			continue;
		g_slots[s].store(nullptr, std::memory_order_relaxed); // one thread in the child
		if (ch->hdr)                                          // a pending slot has no mapping yet
			retire_mapping(ch); // the child must never write the parent's buffers
		else
			ch->state.store(kChDead, std::memory_order_relaxed);
	}
	registry_disarm_all_in_child();
	// Acquire: pairs with the release store in strata_rt_set_fork_child_hook.
	strata_rt_fork_hook hook = g_fork_hook.load(std::memory_order_acquire);
	if (hook)
		hook();
}

// The library's own code and read-only data mapped in one call per segment
// as it loads: the start-up path (constructors, the state query, slot open)
// spans the whole text, and each page reached first by a fault costs ~12 us
// on a VM, while the populate costs ~15 us for 256 KB of cached text
// (docs/benchmarks.md).  __ehdr_start is this object's ELF header (the
// linker defines it), at the start of its first segment.
__attribute__((constructor(101))) void map_code_ahead()
{
	const auto *eh = reinterpret_cast<const ElfW(Ehdr) *>(__ehdr_start);
	if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0)
		return;
	const auto *ph =
		reinterpret_cast<const ElfW(Phdr) *>(reinterpret_cast<const char *>(eh) + eh->e_phoff);
	const ElfW(Phdr) *first = nullptr;
	for (unsigned i = 0; i < eh->e_phnum; i++) {
		if (ph[i].p_type != PT_LOAD)
			continue;
		if (!first) {
			first = &ph[i];
			if (first->p_offset != 0)
				return; // not laid out as we assume: leave the faults
		}
		if (ph[i].p_flags & PF_W)
			continue;
		const uintptr_t base = reinterpret_cast<uintptr_t>(eh) - first->p_vaddr;
		const uintptr_t a = (base + ph[i].p_vaddr) & ~static_cast<uintptr_t>(kPage - 1);
		const uintptr_t e = base + ph[i].p_vaddr + ph[i].p_memsz;
		madvise(reinterpret_cast<void *>(a), e - a, kMadvPopulateRead);
	}
}

__attribute__((constructor)) void slots_init()
{
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
	g_membarrier_private = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
	register_global_membarrier();
}

// Normal exit: tell consumers no more events will come.  Open packets are
// closed by the consumer (Reader::flush), not here: a destructor may run
// while other threads still write.
__attribute__((destructor)) void slots_fini()
{
	for (unsigned s = 0; s < STRATA_MAX_SLOTS; s++) {
		// Acquire: pairs with strata_rt_slot_open's release store.
		Channel *ch = g_slots[s].load(std::memory_order_acquire);
		// Acquire: a buffer made by another thread's first event is
		// complete (pairs with channel_materialize's release).
		if (!ch || ch->state.load(std::memory_order_acquire) != kChReady)
			continue;
		// Relaxed: a hint, re-checked under the lock.  The last chance
		// for a buffer whose hand-over failed: the daemon then reads it
		// as any exited process's.
		if (ch->handoff_owed.load(std::memory_order_relaxed) && control_lock(true) == 0) {
			if (!handoff_owed_locked(ch, clock_now_slow()))
				warn_unhanded(ch);
			control_unlock();
		}
		mark_exited(ch);
	}
}

} // namespace

// Signals and the control lock.  A slot's first event takes the lock to
// make its pending buffer (channel_materialize); a signal handler that fires
// such an event on a thread that already holds the lock would find it taken
// by its own thread, and its event could not be recorded.  So while any
// pending Channel exists (g_pending_slots), the lock holds the holder's
// asynchronous signals back: the handler runs, and records, right after the
// control call.  Faults stay deliverable.  With no pending slot no mask is
// taken (two system calls, ~3 us on the VM of docs/benchmarks.md).
// g_pending_slots changes only under the lock; it is read before taking
// it as a hint and checked again once held (a holder that took the lock
// unmasked while a slot went pending takes it again, masked).
std::atomic<uint32_t> g_pending_slots{0};
sigset_t g_lock_oldmask; // holder only: its mask before control_lock
bool g_lock_masked;      // holder only: control_lock blocked signals

sigset_t async_signals()
{
	sigset_t m;
	sigfillset(&m);
	static const int kFaults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT};
	for (int sig : kFaults)
		sigdelset(&m, sig);
	return m;
}

int control_lock(bool mask_signals)
{
	const uint32_t me = current_tid();
	for (;;) {
		// Relaxed: a hint, checked again under the lock below.
		const bool mask = mask_signals || g_pending_slots.load(std::memory_order_relaxed) != 0;
		sigset_t old;
		if (mask) {
			const sigset_t held = async_signals();
			pthread_sigmask(SIG_BLOCK, &held, &old);
		}
		uint32_t expected = 0;
		// Acquire on success: pairs with control_unlock's release store, so
		// the previous holder's registry, rule and slot updates are visible.
		if (g_lock_owner.compare_exchange_strong(expected, me, std::memory_order_acquire,
							 std::memory_order_relaxed)) {
			if (!mask && g_pending_slots.load(std::memory_order_relaxed) != 0) {
				// Release: as control_unlock (nothing was changed).
				g_lock_owner.store(0, std::memory_order_release);
				continue; // again, with the mask
			}
			g_lock_masked = mask;
			if (mask)
				g_lock_oldmask = old;
			return 0;
		}
		if (mask)
			pthread_sigmask(SIG_SETMASK, &old, nullptr); // not while we wait
		if (expected == me)
			return STRATA_RT_EBUSY; // a handler interrupted our own call
		sched_yield();
	}
}

void control_unlock()
{
	const bool masked = g_lock_masked;
	const sigset_t old = g_lock_oldmask;
	g_lock_owner.store(0, std::memory_order_release); // pairs with control_lock
	if (masked)
		pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

void control_lock_reset_in_child()
{
	// The child has one thread, and the parent's mask from before the
	// atfork prepare handler took the lock.  Its pending slots are retired
	// next (atfork_child).
	const bool held = g_lock_owner.load(std::memory_order_relaxed) != 0;
	g_lock_owner.store(0, std::memory_order_relaxed);
	g_pending_slots.store(0, std::memory_order_relaxed);
	if (held && g_lock_masked)
		pthread_sigmask(SIG_SETMASK, &g_lock_oldmask, nullptr);
}

} // namespace strata

using namespace strata;

namespace strata {
namespace {

// A Channel in a private page of its own, never freed once published (the
// file comment).  nullptr on failure, with errno.
Channel *new_channel(unsigned slot, const uint8_t uuid[16])
{
	void *priv = mmap(nullptr, round_up(sizeof(Channel), kPage), PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (priv == MAP_FAILED)
		return nullptr;
	auto *ch = new (priv) Channel();
	ch->slot = slot;
	ch->fd = -1;
	memcpy(ch->uuid, uuid, 16);
	return ch;
}

// The shared buffer of `ch` (its slot and uuid set): a memfd sealed at its
// size, mapped, its header and every current descriptor written.  Control
// lock held.  0, or -errno with nothing left behind.
int make_buffer(Channel *ch, const strata_channel_config *cfg)
{
	Geometry g;
	int rc = compute_geometry(cfg, &g);
	if (rc)
		return rc;
	const unsigned slot = ch->slot;
	char name[] = "strata-slot-00";
	name[12] = (char)('0' + slot / 10);
	name[13] = (char)('0' + slot % 10);
	// A forked child's early buffer: the memfd its parent made and keeps.
	int fd = -1;
	if (slot == kEarlySlot && g_early_child_fd >= 0) {
		fd = g_early_child_fd;
		g_early_child_fd = -1;
	} else {
		fd = (int)syscall(SYS_memfd_create, name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	}
	void *base = MAP_FAILED;
	// Sealed at its size: the consumer maps it too, and a buffer that
	// could shrink under its mapping would SIGBUS it (it refuses an
	// unsealed buffer).
	if (fd < 0 || ftruncate(fd, (off_t)g.total) != 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0 ||
	    (base = map_chunk_aligned(g.total, PROT_READ | PROT_WRITE, fd)) == MAP_FAILED) {
		rc = -errno;
		if (fd >= 0)
			close(fd);
		return rc;
	}
	// What this open writes (the header, the first descriptors) and the
	// lanes' control words a writer's first event touches, each range
	// mapped in one call (kMadvPopulateWrite).
	madvise(base, g.desc_offset + kPage, kMadvPopulateWrite);
	const uint64_t lanes_page = g.lanes_offset & ~(uint64_t)(kPage - 1);
	madvise((char *)base + lanes_page, g.data_offset - lanes_page, kMadvPopulateWrite);
	ch->fd = fd;
	ch->huge_pages = !huge_pages_off();
	ch->base = (char *)base;
	ch->total_size = g.total;
	ch->hdr = (strata_buffer_header *)base;
	ch->lanes = (strata_lane_ctl *)(ch->base + g.lanes_offset);
	ch->data = ch->base + g.data_offset;
	ch->subbuf_size = g.subbuf_size;
	ch->n_subbuf = g.n_subbuf;
	ch->lane_stride = (uint64_t)g.n_subbuf * g.subbuf_size;
	ch->stride_mask = ch->lane_stride - 1;
	ch->nsub_mask = g.n_subbuf - 1;
	ch->subbuf_shift = log2_of(g.subbuf_size);
	ch->ring_shift = log2_of(ch->lane_stride);
	ch->n_lanes = g.n_lanes;
	ch->first_shared = g.n_lanes - g.n_shared;
	ch->mode = g.mode;
	ch->fast_commit_tag = fast_commit_tag(g.mode);
	ch->block_ns = (uint64_t)g.block_ms * 1000000u;
	ch->block_stalled.store(0, std::memory_order_relaxed);
	ch->stream_id = cfg->stream_id;
	ch->desc = ch->base + g.desc_offset;
	ch->desc_capacity = g.desc_capacity;
	ch->desc_used = 0;
	fill_header(ch->hdr, cfg, g, ch->uuid);
	ch->fast_owner = g_membarrier_global;
	if (ch->fast_owner) // before the consumer can see the buffer
		ch->hdr->flags |= STRATA_BUF_FAST_OWNER;
	registry_describe_all(ch);
	crash_register(slot, base, g.total); // docs/crash.md; without the module, nothing
	return 0;
}

// The slot's Channel made current: writers see it, its rules armed.
void publish_slot(Channel *ch)
{
	// Release: the Channel (and, when ready, the header and descriptors)
	// is complete before a writer can load the pointer (pairs with the
	// acquire load in strata_reserve).
	g_slots[ch->slot].store(ch, std::memory_order_release);
	// Relaxed: a counter read by bindings after the change hook
	// (strata_rt_slot_generation), which runs after this call.
	g_slot_gen[ch->slot].fetch_add(1, std::memory_order_relaxed);
	registry_arm_slot(ch->slot);
}

// Writers that loaded the Channel before it was unpublished may be inside a
// reservation: their record and its commit would land in the private pages
// retire_mapping puts in place, and the consumer would wait for a commit
// that never comes, with the records before it in the packet (it cuts the
// packet there: Reader::cut_pending).  So a close waits until every lane's
// reservations are committed, bounded (a writer stopped by SIGSTOP, or
// descheduled for long).  Polling: the commits are other threads' plain
// adds; only system calls (the contract above).
void wait_for_writers(Channel *ch)
{
	constexpr uint64_t kWaitNs = 100000000; // 100 ms
	struct timespec t0, now;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (!writer_lanes_settled(ch)) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		const uint64_t spent = (uint64_t)(now.tv_sec - t0.tv_sec) * 1000000000u +
				       (uint64_t)now.tv_nsec - (uint64_t)t0.tv_nsec;
		if (spent >= kWaitNs)
			return;
		struct timespec pause = {0, 50000};
		nanosleep(&pause, nullptr);
	}
}

void retire_owed_locked()
{
	if (writer_depth() != 0)
		return;
	for (unsigned i = 0; i < g_n_retire_owed; i++) {
		wait_for_writers(g_retire_owed[i]);
		retire_mapping(g_retire_owed[i]);
	}
	g_n_retire_owed = 0;
}

// Retire a closed Channel's mapping once its writers have committed; later
// (retire_owed_locked) when this thread is inside a reservation itself.
void retire_locked(Channel *ch)
{
	if (writer_depth() != 0 && g_n_retire_owed < sizeof g_retire_owed / sizeof *g_retire_owed) {
		g_retire_owed[g_n_retire_owed++] = ch;
		return;
	}
	if (writer_depth() == 0)
		wait_for_writers(ch);
	retire_mapping(ch);
}

// Close `slot` with the control lock held: tracepoints disarmed, the
// Channel unpublished, its buffer (if it has one) marked and retired once
// the writers inside a reservation have committed (retire_locked).
void close_locked(unsigned slot)
{
	retire_owed_locked();
	Channel *ch = g_slots[slot].load(std::memory_order_relaxed);
	if (!ch)
		return;
	registry_disarm_slot(slot);
	// A buffer the daemon never received: a last try before its events are
	// gone, and if that fails too, say how many (the daemon cannot).
	if (ch->hdr && !handoff_owed_locked(ch, clock_now_slow()))
		warn_unhanded(ch);
	// Relaxed: writers that still load the old pointer are harmless
	// (retire_mapping; a pending Channel re-checks under the lock), and
	// the lock orders later control calls.
	g_slots[slot].store(nullptr, std::memory_order_relaxed);
	registry_forget_slot(slot);
	if (ch->hdr) {
		mark_exited(ch);
		retire_locked(ch);
	}
	if (ch->state.load(std::memory_order_relaxed) == kChPending) {
		ch->state.store(kChDead, std::memory_order_relaxed); // a late first event gives up at once
		g_pending_slots.fetch_sub(1, std::memory_order_relaxed); // under the lock
	}
}

} // namespace

void retry_handoff(Channel *ch, uint64_t now)
{
	// Relaxed: hints, re-checked under the lock.
	if (!ch->handoff_owed.load(std::memory_order_relaxed) ||
	    now < ch->handoff_next_ns.load(std::memory_order_relaxed))
		return;
	// Relaxed: a hint; a writer does not wait for a control call (which
	// may be a hand-over itself) to finish: a later switch retries.
	if (g_lock_owner.load(std::memory_order_relaxed) != 0 || control_lock(true) != 0)
		return;
	if (g_slots[ch->slot].load(std::memory_order_relaxed) == ch)
		handoff_owed_locked(ch, now);
	control_unlock();
}

int channel_materialize(Channel *ch)
{
	// Acquire: pairs with the release store below, made by whichever
	// thread made the buffer; its fields are then complete for us.
	uint32_t st = ch->state.load(std::memory_order_acquire);
	if (__builtin_expect(st == kChReady, 1))
		return 0;
	if (st == kChDead)
		return -1;
	// The lock holds asynchronous signals back while a slot is pending
	// (control_lock), so a handler of ours cannot find it taken by its own
	// thread; a fault handler can, and its event cannot wait: it counts as
	// discarded.
	if (control_lock(true) != 0) {
		ch->pending_discards.fetch_add(1, std::memory_order_relaxed);
		return -1;
	}
	if (ch->state.load(std::memory_order_relaxed) == kChPending &&
	    g_slots[ch->slot].load(std::memory_order_relaxed) == ch) {
		int rc = make_buffer(ch, &ch->cfg);
		if (rc != 0)
			warn("a session's buffer could not be made at the first event: the slot is closed");
		else
			rc = ch->handoff(ch->slot, ch->fd, ch->handoff_ctx); // says why itself
		if (rc != 0 && ch->hdr) {
			// The buffer exists, the daemon did not get it: keep
			// recording into it and owe the hand-over (retry_handoff),
			// rather than lose the process's events uncounted.
			ch->handoff_owed.store(1, std::memory_order_relaxed);
			ch->handoff_next_ns.store(clock_now_slow() + kHandoffRetryNs,
						  std::memory_order_relaxed);
			warn("the buffer stays in the process and its hand-over is retried");
			rc = 0;
		}
		if (rc == 0) {
			// Release: the buffer, the Channel's geometry and the
			// descriptors are complete before a writer claims a lane.
			ch->state.store(kChReady, std::memory_order_release);
			g_pending_slots.fetch_sub(1, std::memory_order_relaxed); // under the lock
		} else {
			close_locked(ch->slot);
		}
	}
	control_unlock();
	// Acquire: as above (another thread may have made it while we waited).
	return ch->state.load(std::memory_order_acquire) == kChReady ? 0 : -1;
}

} // namespace strata

extern "C" STRATA_EXPORT int strata_rt_slot_open(unsigned slot, const struct strata_channel_config *cfg,
						 const uint8_t trace_uuid[16])
{
	if (slot >= STRATA_MAX_SLOTS || !cfg || !trace_uuid)
		return -EINVAL;
	int rc = control_lock();
	if (rc)
		return rc;
	retire_owed_locked();
	if (g_slots[slot].load(std::memory_order_relaxed)) {
		rc = -EEXIST;
	} else if (Channel *ch = new_channel(slot, trace_uuid)) {
		registry_prefault_slot(slot);
		rc = make_buffer(ch, cfg);
		if (rc == 0) {
			publish_slot(ch);
			rc = ch->fd;
		} else {
			munmap(ch, round_up(sizeof(Channel), kPage)); // never published
		}
	} else {
		rc = -errno;
	}
	control_unlock();
	return rc;
}

extern "C" STRATA_EXPORT int strata_rt_slot_open_lazy(unsigned slot, const struct strata_channel_config *cfg,
						      const uint8_t trace_uuid[16], strata_rt_handoff handoff,
						      const void *ctx, size_t ctx_len)
{
	if (slot >= STRATA_MAX_SLOTS || !cfg || !trace_uuid || !handoff || ctx_len > STRATA_RT_HANDOFF_CTX ||
	    (ctx_len && !ctx))
		return -EINVAL;
	Geometry g;
	int rc = compute_geometry(cfg, &g); // refused now, not at the first event
	if (rc)
		return rc;
	// The clock is decided at open, as for a buffer made now (clock.cpp):
	// every buffer of the process stamps with it.
	strata_rt_clock_id();
	rc = control_lock(true); // a handler may fire into the slot as soon as it is published
	if (rc)
		return rc;
	retire_owed_locked();
	if (g_slots[slot].load(std::memory_order_relaxed)) {
		rc = -EEXIST;
	} else if (Channel *ch = new_channel(slot, trace_uuid)) {
		ch->cfg = *cfg;
		ch->handoff = handoff;
		if (ctx_len)
			memcpy(ch->handoff_ctx, ctx, ctx_len);
		ch->state.store(kChPending, std::memory_order_relaxed);  // published below with release
		g_pending_slots.fetch_add(1, std::memory_order_relaxed); // under the lock
		registry_prefault_slot(slot);
		registry_describe_all(ch); // pending: marks the events, writes nothing
		publish_slot(ch);
		rc = 0;
	} else {
		rc = -errno;
	}
	control_unlock();
	return rc;
}

extern "C" STRATA_EXPORT void strata_rt_slot_close(unsigned slot)
{
	if (slot >= STRATA_MAX_SLOTS)
		return;
	if (control_lock() != 0) {
		count_invariant_error("strata_rt_slot_close re-entered from a signal handler: ignored");
		return;
	}
	close_locked(slot);
	control_unlock();
}

extern "C" void strata_rt_state_changed(void); // change_hook.cpp

extern "C" STRATA_EXPORT void strata_rt_quiesce(void)
{
	if (!(g_membarrier_private && syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0) &&
	    syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) != 0)
		// No membarrier: the stores were already release; this is the best
		// we can do, and call sites see the change within a few instructions.
		std::atomic_thread_fence(std::memory_order_seq_cst);
	strata_rt_state_changed(); // bindings that follow enablement (JVM agent)
}

extern "C" STRATA_EXPORT uint32_t strata_rt_slot_generation(unsigned slot)
{
	// Relaxed: see strata_rt_slot_open.
	return slot < STRATA_MAX_SLOTS ? g_slot_gen[slot].load(std::memory_order_relaxed) : 0;
}

extern "C" STRATA_EXPORT void strata_rt_set_fork_child_hook(strata_rt_fork_hook hook)
{
	g_fork_hook.store(hook, std::memory_order_release); // pairs with atfork_child
}
