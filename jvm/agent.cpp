/*
 * agent.cpp - libstrata-jvm.so as a JVMTI agent (java -agentpath:...,
 * strata record --jvm): typed `jvm` events recorded with the runtime-declared
 * event API (include/strata/dynamic.h) into the same buffers and clock as
 * every other Strata event.  docs/jvm.md describes the events.
 *
 * Concurrency contract:
 *   - JVMTI callbacks run on any Java thread (GC callbacks on a VM thread,
 *     where no JNI/JVMTI call but raw monitors is allowed: they only emit).
 *     Emitting is strata_dyn_emit: lock-free, async-signal-safe.
 *   - ThreadStart is on for the JVM's whole life: each thread stores its OS
 *     tid in its JVMTI thread-local storage (the thread map, see there).
 *   - Every other JVMTI notification follows which jvm events some session
 *     enables (apply_notifications).  It runs in Agent_OnLoad and VMInit, then only on
 *     the agent thread ("Strata JVM agent", RunAgentThread), which blocks on
 *     an eventfd.  libstrata's change hook (strata_rt_set_change_hook), run
 *     after every tp-async update, possibly in its signal handler, only
 *     writes that eventfd (async-signal-safe).  So a JVM with no session
 *     enabling jvm events gets no monitor, GC or compiled-code notification
 *     at all.
 *   - Per-thread data (contended-enter time, OS tid) is thread_local,
 *     written and read by its own thread only.
 */
#include <jni.h>
#include <jvmti.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <strata/dynamic.h>

#include "jvm_internal.h"

#include "runtime.h"

namespace {

// -------------------------------------------------------------- the events

// Each schema is written once, as a list of its fields in record order:
//   STR(member, "name")                      a string (const char *)
//   INT(member, "name", bytes, signed, base) an integer (int64_t if signed)
// From a list come the declared fields (kF_<schema>), a typed record
// (struct R_<schema>, filled by member name) and the code that packs the
// record into strata_dyn_values in field order.  The event list ties each
// event to its schema: emit<kEvent>(record) accepts only that schema's
// record, so a mismatch is a compile error, and reordering a list reorders
// the fields and the packing together.
#define JS_vm(STR, INT) INT(pid, "pid", 4, 0, 10)
#define JS_thread(STR, INT) \
	STR(name, "name")   \
	INT(java_tid, "java_tid", 8, 1, 10) INT(os_tid, "os_tid", 4, 0, 10) INT(daemon, "daemon", 1, 0, 10)
#define JS_MONITOR_HEAD(STR, INT) \
	STR(cls, "class") INT(hash, "hash", 4, 0, 16) INT(os_tid, "os_tid", 4, 0, 10)
#define JS_enter(STR, INT) \
	JS_MONITOR_HEAD(STR, INT) INT(owner_java_tid, "owner_java_tid", 8, 1, 10) STR(stack, "stack")
#define JS_entered(STR, INT) JS_MONITOR_HEAD(STR, INT) INT(wait_ns, "wait_ns", 8, 0, 10)
#define JS_wait(STR, INT) JS_MONITOR_HEAD(STR, INT) INT(timeout_ms, "timeout_ms", 8, 1, 10)
#define JS_waited(STR, INT) \
	JS_MONITOR_HEAD(STR, INT) INT(timed_out, "timed_out", 1, 0, 10) INT(wait_ns, "wait_ns", 8, 0, 10)
#define JS_gc_start(STR, INT) INT(gc, "gc", 4, 0, 10)
#define JS_gc_finish(STR, INT) INT(gc, "gc", 4, 0, 10) INT(duration_ns, "duration_ns", 8, 0, 10)
#define JS_load(STR, INT) INT(address, "address", 8, 0, 16) INT(size, "size", 4, 0, 10) STR(method, "method")
#define JS_unload(STR, INT) INT(address, "address", 8, 0, 16)
#define JS_code(STR, INT) INT(address, "address", 8, 0, 16) INT(size, "size", 4, 0, 10) STR(name, "name")
#define JVM_SCHEMAS(X) \
	X(vm)          \
	X(thread) X(enter) X(entered) X(wait) X(waited) X(gc_start) X(gc_finish) X(load) X(unload) X(code)

// The events: EV(enumerator, event name, loglevel, schema).
#define JVM_EVENTS(EV)                                                                    \
	EV(kVmStart, "vm_start", STRATA_LOGLEVEL_INFO, vm)                                \
	EV(kVmDeath, "vm_death", STRATA_LOGLEVEL_INFO, vm)                                \
	EV(kThreadStart, "thread_start", STRATA_LOGLEVEL_INFO, thread)                    \
	EV(kThreadEnd, "thread_end", STRATA_LOGLEVEL_INFO, thread)                        \
	EV(kThreadExists, "thread_exists", STRATA_LOGLEVEL_INFO, thread)                  \
	EV(kContendedEnter, "monitor_contended_enter", STRATA_LOGLEVEL_INFO, enter)       \
	EV(kContendedEntered, "monitor_contended_entered", STRATA_LOGLEVEL_INFO, entered) \
	EV(kWait, "monitor_wait", STRATA_LOGLEVEL_INFO, wait)                             \
	EV(kWaited, "monitor_waited", STRATA_LOGLEVEL_INFO, waited)                       \
	EV(kGcStart, "gc_start", STRATA_LOGLEVEL_INFO, gc_start)                          \
	EV(kGcFinish, "gc_finish", STRATA_LOGLEVEL_INFO, gc_finish)                       \
	EV(kMethodLoad, "method_load", STRATA_LOGLEVEL_DEBUG, load)                       \
	EV(kMethodUnload, "method_unload", STRATA_LOGLEVEL_DEBUG, unload)                 \
	EV(kCodeGenerated, "code_generated", STRATA_LOGLEVEL_DEBUG, code)

#define JVM_EV_ENUM(id, nm, lvl, s) id,
enum Ev { JVM_EVENTS(JVM_EV_ENUM) kNumEv };

template <bool Signed> struct JvmInt {
	using type = uint64_t;
};
template <> struct JvmInt<true> {
	using type = int64_t;
};
inline void jvm_pack(strata_dyn_value &v, const char *x)
{
	v.s = x;
}
inline void jvm_pack(strata_dyn_value &v, int64_t x)
{
	v.i = x;
}
inline void jvm_pack(strata_dyn_value &v, uint64_t x)
{
	v.u = x;
}

#define JF_STR(m, n) {n, STRATA_FIELD_STRING, 0, 0, 0, 0},
#define JF_INT(m, n, sz, sgn, base) {n, STRATA_FIELD_INTEGER, sz, sgn, base, 0},
#define JR_STR(m, n) const char *m = "";
#define JR_INT(m, n, sz, sgn, base) JvmInt<sgn>::type m = 0;
#define JP_STR(m, n) jvm_pack(v[k++], r.m);
#define JP_INT(m, n, sz, sgn, base) jvm_pack(v[k++], r.m);
#define JVM_SCHEMA(s)                                                      \
	const strata_dyn_field kF_##s[] = {JS_##s(JF_STR, JF_INT)};        \
	struct R_##s {                                                     \
		JS_##s(JR_STR, JR_INT)                                     \
	};                                                                 \
	void emit_record(strata_dyn_event *ev, const R_##s &r)             \
	{                                                                  \
		constexpr uint32_t n = sizeof(kF_##s) / sizeof(kF_##s[0]); \
		strata_dyn_value v[n];                                     \
		uint32_t k = 0;                                            \
		JS_##s(JP_STR, JP_INT) strata_dyn_emit(ev, v, n);          \
	}
JVM_SCHEMAS(JVM_SCHEMA)

struct EvDecl {
	const char *name;
	int loglevel;
	const strata_dyn_field *fields;
	uint32_t n;
};
#define JVM_EV_DECL(id, nm, lvl, s) {nm, lvl, kF_##s, sizeof(kF_##s) / sizeof(kF_##s[0])},
const EvDecl kDecl[kNumEv] = {JVM_EVENTS(JVM_EV_DECL)};

// Rec<E>: the record type of event E.
template <Ev E> struct Rec;
#define JVM_EV_REC(id, nm, lvl, s)   \
	template <> struct Rec<id> { \
		using type = R_##s;  \
	};
JVM_EVENTS(JVM_EV_REC)

strata_dyn_event *g_ev[kNumEv];
JavaVM *g_vm;
jvmtiEnv *g_jvmti;
int g_efd = -1;
int g_stack_depth = 8; // frames at a contended enter; agent option stack=N (0: none)
bool g_owner;          // agent option owner=1: the owner's Java tid at a contended enter
uint32_t g_gc_seq;     // GC callbacks run on one VM thread at a time (a safepoint)
uint64_t g_gc_t0;

bool on(Ev e)
{
	return g_ev[e] && strata_dyn_enabled(g_ev[e]);
}

template <Ev E> void emit(const typename Rec<E>::type &r)
{
	emit_record(g_ev[E], r);
}

uint64_t now_ns()
{
	timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

thread_local uint32_t t_tid;
thread_local uint64_t t_enter_ns, t_wait_ns;

uint32_t os_tid()
{
	if (!t_tid)
		t_tid = uint32_t(syscall(SYS_gettid));
	return t_tid;
}

// "Ljava/lang/String;" -> "java.lang.String"; "[I" stays as it is.
void class_name(const char *sig, char *out, size_t len)
{
	size_t n = 0;
	const char *p = sig;
	if (*p == 'L')
		p++;
	for (; *p && *p != ';' && n + 1 < len; p++)
		out[n++] = *p == '/' ? '.' : *p;
	out[n] = 0;
}

void dealloc(void *p)
{
	if (p)
		g_jvmti->Deallocate(static_cast<unsigned char *>(p));
}

void object_class(JNIEnv *jni, jobject obj, char *out, size_t len)
{
	snprintf(out, len, "?");
	jclass k = jni->GetObjectClass(obj);
	if (!k)
		return;
	char *sig = nullptr;
	if (g_jvmti->GetClassSignature(k, &sig, nullptr) == JVMTI_ERROR_NONE && sig)
		class_name(sig, out, len);
	dealloc(sig);
	jni->DeleteLocalRef(k);
}

uint32_t object_hash(jobject obj)
{
	jint h = 0;
	g_jvmti->GetObjectHashCode(obj, &h);
	return uint32_t(h);
}

// "pkg.Class.method(sig)" of a method.
void method_name(jmethodID m, char *out, size_t len, bool with_sig)
{
	char *name = nullptr, *sig = nullptr, *csig = nullptr;
	jclass k = nullptr;
	char cls[256] = "?";
	if (g_jvmti->GetMethodDeclaringClass(m, &k) == JVMTI_ERROR_NONE &&
	    g_jvmti->GetClassSignature(k, &csig, nullptr) == JVMTI_ERROR_NONE && csig)
		class_name(csig, cls, sizeof cls);
	if (g_jvmti->GetMethodName(m, &name, &sig, nullptr) != JVMTI_ERROR_NONE)
		name = sig = nullptr;
	snprintf(out, len, "%s.%s%s", cls, name ? name : "?", with_sig && sig ? sig : "");
	dealloc(name);
	dealloc(sig);
	dealloc(csig);
	// A stack walk or a GenerateEvents replay names many methods in one
	// callback: free each class reference at once.
	JNIEnv *jni = nullptr;
	if (k && g_vm && g_vm->GetEnv(reinterpret_cast<void **>(&jni), JNI_VERSION_1_8) == JNI_OK && jni)
		jni->DeleteLocalRef(k);
}

int line_of(jmethodID m, jlocation loc)
{
	jint n = 0;
	jvmtiLineNumberEntry *t = nullptr;
	if (g_jvmti->GetLineNumberTable(m, &n, &t) != JVMTI_ERROR_NONE)
		return -1;
	int line = -1;
	for (jint i = 0; i < n; i++)
		if (t[i].start_location <= loc)
			line = t[i].line_number;
	dealloc(t);
	return line;
}

// The current thread's Java stack, innermost first: "C.m:line;C.m:line".
void java_stack(char *out, size_t len)
{
	out[0] = 0;
	if (g_stack_depth <= 0)
		return;
	jvmtiFrameInfo frames[64];
	jint n = 0;
	int depth = g_stack_depth < 64 ? g_stack_depth : 64;
	if (g_jvmti->GetStackTrace(nullptr, 0, depth, frames, &n) != JVMTI_ERROR_NONE)
		return;
	size_t used = 0;
	for (jint i = 0; i < n && used + 1 < len; i++) {
		char m[256];
		method_name(frames[i].method, m, sizeof m, false);
		int w = snprintf(out + used, len - used, "%s%s:%d", i ? ";" : "", m,
				 line_of(frames[i].method, frames[i].location));
		if (w < 0)
			break;
		used += size_t(w);
	}
	if (used >= len)
		out[len - 1] = 0;
}

// -------------------------------------------------------------- callbacks

template <Ev E> void emit_vm()
{
	typename Rec<E>::type r;
	r.pid = uint64_t(getpid());
	emit<E>(r);
}

// Thread.getId() of a thread (-1 if the call fails).
jlong java_tid(JNIEnv *jni, jthread thread)
{
	jlong id = -1;
	jclass tc = jni->FindClass("java/lang/Thread");
	if (tc) {
		jmethodID getid = jni->GetMethodID(tc, "getId", "()J");
		if (getid)
			id = jni->CallLongMethod(thread, getid);
		jni->DeleteLocalRef(tc);
	}
	if (jni->ExceptionCheck())
		jni->ExceptionClear();
	return id;
}

template <Ev E> void emit_thread(JNIEnv *jni, jthread thread, uint32_t tid)
{
	jvmtiThreadInfo info;
	memset(&info, 0, sizeof info);
	g_jvmti->GetThreadInfo(thread, &info);
	typename Rec<E>::type r;
	r.name = info.name ? info.name : "";
	r.java_tid = java_tid(jni, thread);
	r.os_tid = tid;
	r.daemon = info.is_daemon ? 1 : 0;
	emit<E>(r);
	dealloc(info.name);
	if (info.thread_group)
		jni->DeleteLocalRef(info.thread_group);
	if (info.context_class_loader)
		jni->DeleteLocalRef(info.context_class_loader);
}

// ------------------------------------------------------------ the thread map
//
// JVMTI names no thread's OS tid, and a thread can only ask its own
// (gettid).  So every thread records its tid in its JVMTI thread-local
// storage as it starts: ThreadStart is on for the JVM's whole life (once per
// thread, never per event), and the VMInit callback does it for the initial
// thread.  Threads started before the agent could see them (before the
// JVM's start phase: Reference Handler, Finalizer, Signal Dispatcher) get
// theirs at VMInit from /proc/self/task/*/comm, the first 15 bytes of the
// Java name the JVM gave the native thread, when exactly one task matches;
// else kTidUnknown.  When a session starts enabling jvm:thread_exists, the
// agent thread lists the live threads (GetAllThreads) and records one
// thread_exists each with the tid read back from that storage.
//
// Ordering: a starting thread stores its tid, then (seq_cst fence) reads
// whether thread_start is on; the replay (after the state word was armed,
// seq_cst fence) reads the tids.  Store-buffer pattern with a fence on each
// side: a thread either sees thread_start on and records itself, or its tid
// is visible to the replay.  A thread listed whose storage is still empty is
// in the middle of its ThreadStart callback, after the arming: it records
// thread_start itself.

constexpr uintptr_t kTidUnknown = ~uintptr_t(0); // storage of an early thread /proc could not name

// The tid in a thread's storage: 0 none yet, kTidUnknown, else the tid.
uintptr_t stored_tid(jthread thread)
{
	void *p = nullptr;
	if (g_jvmti->GetThreadLocalStorage(thread, &p) != JVMTI_ERROR_NONE)
		return 0;
	return reinterpret_cast<uintptr_t>(p);
}

void store_tid(jthread thread, uintptr_t tid)
{
	g_jvmti->SetThreadLocalStorage(thread, reinterpret_cast<const void *>(tid));
}

struct Task {
	uint32_t tid;
	char comm[16];
	bool taken;
};

// /proc/self/task/*: tid and comm of each thread of the process.
size_t read_tasks(Task *out, size_t cap)
{
	DIR *d = opendir("/proc/self/task");
	if (!d)
		return 0;
	size_t n = 0;
	while (dirent *e = readdir(d)) {
		char *end;
		unsigned long tid = strtoul(e->d_name, &end, 10);
		if (*end || !tid || n == cap)
			continue;
		char path[64];
		snprintf(path, sizeof path, "/proc/self/task/%lu/comm", tid);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		ssize_t r = read(fd, out[n].comm, sizeof out[n].comm - 1);
		close(fd);
		if (r <= 0)
			continue;
		out[n].comm[r] = 0;
		if (out[n].comm[r - 1] == '\n')
			out[n].comm[r - 1] = 0;
		out[n].tid = uint32_t(tid);
		out[n].taken = false;
		n++;
	}
	closedir(d);
	return n;
}

// VMInit: tids of the threads that started before ThreadStart was posted,
// by their native name (see above).  Returns how many stayed unknown.
int name_early_threads(JNIEnv *jni)
{
	jint n = 0;
	jthread *ts = nullptr;
	if (g_jvmti->GetAllThreads(&n, &ts) != JVMTI_ERROR_NONE)
		return 0;
	static Task tasks[4096];
	size_t nt = read_tasks(tasks, sizeof tasks / sizeof tasks[0]);
	for (jint i = 0; i < n; i++) // tids already known are not candidates
		for (size_t k = 0; k < nt; k++)
			if (tasks[k].tid == stored_tid(ts[i]))
				tasks[k].taken = true;
	int unknown = 0;
	for (jint i = 0; i < n; i++) {
		if (stored_tid(ts[i]))
			continue;
		jvmtiThreadInfo info;
		memset(&info, 0, sizeof info);
		g_jvmti->GetThreadInfo(ts[i], &info);
		char comm[16];
		snprintf(comm, sizeof comm, "%s", info.name ? info.name : "");
		size_t hit = nt, hits = 0;
		for (size_t k = 0; k < nt; k++)
			if (!tasks[k].taken && strcmp(tasks[k].comm, comm) == 0)
				hit = k, hits++;
		if (hits == 1) {
			tasks[hit].taken = true;
			store_tid(ts[i], tasks[hit].tid);
		} else {
			store_tid(ts[i], kTidUnknown);
			unknown++;
		}
		dealloc(info.name);
		if (info.thread_group)
			jni->DeleteLocalRef(info.thread_group);
		if (info.context_class_loader)
			jni->DeleteLocalRef(info.context_class_loader);
	}
	for (jint i = 0; i < n; i++)
		jni->DeleteLocalRef(ts[i]);
	dealloc(ts);
	return unknown;
}

// One jvm:thread_exists per live thread whose tid is stored (see above).
void replay_threads(JNIEnv *jni)
{
	std::atomic_thread_fence(std::memory_order_seq_cst); // pairs with on_thread_start's
	jint n = 0;
	jthread *ts = nullptr;
	if (g_jvmti->GetAllThreads(&n, &ts) != JVMTI_ERROR_NONE)
		return;
	for (jint i = 0; i < n; i++) {
		uintptr_t tid = stored_tid(ts[i]);
		if (tid) // 0: still in its ThreadStart callback, which records it
			emit_thread<kThreadExists>(jni, ts[i], tid == kTidUnknown ? 0 : uint32_t(tid));
		jni->DeleteLocalRef(ts[i]);
	}
	dealloc(ts);
}

// On for the JVM's whole life: the thread map (see above).
void JNICALL on_thread_start(jvmtiEnv *, JNIEnv *jni, jthread thread)
{
	store_tid(thread, os_tid());
	std::atomic_thread_fence(std::memory_order_seq_cst); // pairs with replay_threads'
	if (on(kThreadStart))
		emit_thread<kThreadStart>(jni, thread, os_tid());
}

void JNICALL on_thread_end(jvmtiEnv *, JNIEnv *jni, jthread thread)
{
	if (on(kThreadEnd))
		emit_thread<kThreadEnd>(jni, thread, os_tid());
}

// A monitor event's head (JS_MONITOR_HEAD): class, identity hash and OS
// tid; the caller fills the rest of the record by name.
struct MonitorClass {
	char name[256];
};
template <class R> void monitor_head(JNIEnv *jni, jobject obj, MonitorClass *cls, R *r)
{
	object_class(jni, obj, cls->name, sizeof cls->name);
	r->cls = cls->name;
	r->hash = object_hash(obj);
	r->os_tid = os_tid();
}

// Nanoseconds since *t0 (0 if unknown), and *t0 cleared.
uint64_t since(uint64_t *t0)
{
	uint64_t t = now_ns(), d = *t0 && t >= *t0 ? t - *t0 : 0;
	*t0 = 0;
	return d;
}

// Java tid of the thread that owns obj's monitor, -1 if unknown.  A VM
// operation (a safepoint) per call: only with the agent option owner=1.
jlong owner_java_tid(JNIEnv *jni, jobject obj)
{
	jvmtiMonitorUsage u;
	memset(&u, 0, sizeof u);
	if (g_jvmti->GetObjectMonitorUsage(obj, &u) != JVMTI_ERROR_NONE)
		return -1;
	jlong id = -1;
	if (u.owner)
		id = java_tid(jni, u.owner);
	dealloc(u.waiters);
	dealloc(u.notify_waiters);
	if (u.owner)
		jni->DeleteLocalRef(u.owner);
	return id;
}

void JNICALL on_contended_enter(jvmtiEnv *, JNIEnv *jni, jthread, jobject obj)
{
	t_enter_ns = now_ns();
	if (!on(kContendedEnter))
		return;
	char stack[2048];
	java_stack(stack, sizeof stack);
	MonitorClass cls;
	Rec<kContendedEnter>::type r;
	monitor_head(jni, obj, &cls, &r);
	r.owner_java_tid = g_owner ? owner_java_tid(jni, obj) : -1;
	r.stack = stack;
	emit<kContendedEnter>(r);
}

// A monitor event E (but contended_enter, whose stack must outlive the
// record): its head from obj, then fill(r) sets its own fields by name.
template <Ev E, class F> void emit_monitor(JNIEnv *jni, jobject obj, F fill)
{
	if (!on(E))
		return;
	MonitorClass cls;
	typename Rec<E>::type r;
	monitor_head(jni, obj, &cls, &r);
	fill(r);
	emit<E>(r);
}

void JNICALL on_contended_entered(jvmtiEnv *, JNIEnv *jni, jthread, jobject obj)
{
	const uint64_t waited = since(&t_enter_ns);
	emit_monitor<kContendedEntered>(jni, obj, [&](auto &r) { r.wait_ns = waited; });
}

void JNICALL on_wait(jvmtiEnv *, JNIEnv *jni, jthread, jobject obj, jlong timeout)
{
	t_wait_ns = now_ns();
	emit_monitor<kWait>(jni, obj, [&](auto &r) { r.timeout_ms = timeout; });
}

void JNICALL on_waited(jvmtiEnv *, JNIEnv *jni, jthread, jobject obj, jboolean timed_out)
{
	const uint64_t waited = since(&t_wait_ns);
	emit_monitor<kWaited>(jni, obj, [&](auto &r) {
		r.timed_out = timed_out ? 1 : 0;
		r.wait_ns = waited;
	});
}

// GC callbacks: no JNI or JVMTI call allowed here; emitting is enough.
void JNICALL on_gc_start(jvmtiEnv *)
{
	g_gc_seq++;
	g_gc_t0 = now_ns();
	if (!on(kGcStart))
		return;
	Rec<kGcStart>::type r;
	r.gc = g_gc_seq;
	emit<kGcStart>(r);
}

void JNICALL on_gc_finish(jvmtiEnv *)
{
	Rec<kGcFinish>::type r;
	r.gc = g_gc_seq;
	r.duration_ns = since(&g_gc_t0);
	if (!on(kGcFinish))
		return;
	emit<kGcFinish>(r);
}

void JNICALL on_method_load(jvmtiEnv *, jmethodID m, jint size, const void *addr, jint,
			    const jvmtiAddrLocationMap *, const void *)
{
	if (!on(kMethodLoad))
		return;
	char name[1024];
	method_name(m, name, sizeof name, true);
	Rec<kMethodLoad>::type r;
	r.address = uint64_t(uintptr_t(addr));
	r.size = uint32_t(size);
	r.method = name;
	emit<kMethodLoad>(r);
}

void JNICALL on_method_unload(jvmtiEnv *, jmethodID, const void *addr)
{
	if (!on(kMethodUnload))
		return;
	Rec<kMethodUnload>::type r;
	r.address = uint64_t(uintptr_t(addr));
	emit<kMethodUnload>(r);
}

void JNICALL on_code_generated(jvmtiEnv *, const char *name, const void *addr, jint len)
{
	if (!on(kCodeGenerated))
		return;
	Rec<kCodeGenerated>::type r;
	r.address = uint64_t(uintptr_t(addr));
	r.size = uint32_t(len);
	r.name = name;
	emit<kCodeGenerated>(r);
}

// ------------------------------------------------- notifications follow state

bool g_live; // the VM reached VMInit (GenerateEvents is allowed)
bool g_notif[kNumEv];
bool g_verbose; // $STRATA_JVM_VERBOSE set: say on stderr when notifications change

void set_mode(jvmtiEvent what, bool want)
{
	g_jvmti->SetEventNotificationMode(want ? JVMTI_ENABLE : JVMTI_DISABLE, what, nullptr);
}

uint32_t g_exists_slots;                 // session slots of jvm:thread_exists at the last look
uint32_t g_exists_gen[STRATA_MAX_SLOTS]; // and each one's generation then

// Agent_OnLoad (jni null), VMInit, then the agent thread only (see the
// contract).
void apply_notifications(JNIEnv *jni)
{
	bool want[kNumEv];
	for (int e = 0; e < kNumEv; e++)
		want[e] = on(Ev(e));
	// An "entered" (wait time) needs the matching "enter" time.
	bool contended = want[kContendedEnter] || want[kContendedEntered];
	bool waits = want[kWait] || want[kWaited];
	bool gc = want[kGcStart] || want[kGcFinish];
	set_mode(JVMTI_EVENT_THREAD_END, want[kThreadEnd]);
	set_mode(JVMTI_EVENT_MONITOR_CONTENDED_ENTER, contended);
	set_mode(JVMTI_EVENT_MONITOR_CONTENDED_ENTERED, contended);
	set_mode(JVMTI_EVENT_MONITOR_WAIT, waits);
	set_mode(JVMTI_EVENT_MONITOR_WAITED, waits);
	set_mode(JVMTI_EVENT_GARBAGE_COLLECTION_START, gc);
	set_mode(JVMTI_EVENT_GARBAGE_COLLECTION_FINISH, gc);
	set_mode(JVMTI_EVENT_COMPILED_METHOD_LOAD, want[kMethodLoad]);
	set_mode(JVMTI_EVENT_COMPILED_METHOD_UNLOAD, want[kMethodUnload]);
	set_mode(JVMTI_EVENT_DYNAMIC_CODE_GENERATED, want[kCodeGenerated]);
	// Code that already exists when a session starts wanting it: replayed,
	// so that addresses in native stacks can be named from then on.
	if (g_live && want[kMethodLoad] && !g_notif[kMethodLoad])
		g_jvmti->GenerateEvents(JVMTI_EVENT_COMPILED_METHOD_LOAD);
	if (g_live && want[kCodeGenerated] && !g_notif[kCodeGenerated])
		g_jvmti->GenerateEvents(JVMTI_EVENT_DYNAMIC_CODE_GENERATED);
	// A session that starts enabling thread_exists gets the live threads:
	// a slot bit new since the last look, or a slot opened again since
	// (another session, both changes seen in one wake-up).  Sessions that
	// already had them get them again: a thread_exists is a snapshot, a
	// repeat says the same.
	uint32_t slots = g_ev[kThreadExists]
				 ? __atomic_load_n(&g_ev[kThreadExists]->state, __ATOMIC_RELAXED) &
					   STRATA_TP_SLOTS_MASK
				 : 0;
	uint32_t gen[STRATA_MAX_SLOTS] = {};
	bool fresh = false;
	for (unsigned s = 0; s < STRATA_MAX_SLOTS; s++) {
		if (!(slots >> s & 1))
			continue;
		gen[s] = strata_rt_slot_generation(s);
		fresh = fresh || !(g_exists_slots >> s & 1) || gen[s] != g_exists_gen[s];
	}
	if (g_live && jni && fresh) {
		replay_threads(jni);
		if (g_verbose) // STRATA_JVM_VERBOSE: tests wait for this line
			fprintf(stderr, "strata-jvm: thread_exists replayed\n");
	}
	if (g_live && jni) {
		g_exists_slots = slots;
		memcpy(g_exists_gen, gen, sizeof gen);
	}
	bool changed = false;
	// Notifications on from Agent_OnLoad miss nothing: no replay at VMInit.
	for (int e = 0; e < kNumEv; e++) {
		changed |= g_notif[e] != want[e];
		g_notif[e] = want[e];
	}
	if (g_verbose && changed) { // STRATA_JVM_VERBOSE: tests wait for this line
		char line[512];
		size_t n = size_t(snprintf(line, sizeof line, "strata-jvm: notifications for:"));
		for (int e = 0; e < kNumEv && n < sizeof line; e++)
			if (want[e])
				n += size_t(snprintf(line + n, sizeof line - n, " %s", kDecl[e].name));
		fprintf(stderr, "%s\n", line);
	}
}

// libstrata's change hook: async-signal-safe, only wakes the agent thread.
void on_state_change(void)
{
	if (g_efd >= 0) {
		int saved = errno;
		uint64_t one = 1;
		ssize_t r = write(g_efd, &one, sizeof one);
		(void)r;
		errno = saved;
	}
}

void JNICALL agent_thread(jvmtiEnv *, JNIEnv *jni, void *)
{
	for (;;) {
		uint64_t n;
		ssize_t r = read(g_efd, &n, sizeof n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r != sizeof n)
			return;
		apply_notifications(jni);
	}
}

void JNICALL on_vm_init(jvmtiEnv *jvmti, JNIEnv *jni, jthread thread)
{
	store_tid(thread, os_tid()); // the initial thread had no ThreadStart
	int unknown = name_early_threads(jni);
	if (g_verbose && unknown)
		fprintf(stderr,
			"strata-jvm: %d early threads with no unique native name: os_tid 0 in "
			"thread_exists\n",
			unknown);
	g_live = true;
	if (on(kVmStart))
		emit_vm<kVmStart>();
	apply_notifications(jni); // replays compiled code and threads if wanted
	jclass tc = jni->FindClass("java/lang/Thread");
	jmethodID init = tc ? jni->GetMethodID(tc, "<init>", "(Ljava/lang/String;)V") : nullptr;
	jstring name = jni->NewStringUTF("Strata JVM agent");
	jthread t = init && name ? jni->NewObject(tc, init, name) : nullptr;
	if (!t ||
	    jvmti->RunAgentThread(t, agent_thread, nullptr, JVMTI_THREAD_NORM_PRIORITY) != JVMTI_ERROR_NONE) {
		if (jni->ExceptionCheck())
			jni->ExceptionClear();
		fprintf(stderr, "strata-jvm: cannot start the agent thread: jvm events keep the "
				"notifications they had at start-up\n");
	}
}

void JNICALL on_vm_death(jvmtiEnv *, JNIEnv *)
{
	if (on(kVmDeath))
		emit_vm<kVmDeath>();
}

void parse_options(const char *opts)
{
	g_verbose = getenv("STRATA_JVM_VERBOSE") != nullptr;
	if (const char *e = getenv("STRATA_JVM_OWNER"))
		g_owner = atoi(e) != 0;
	if (const char *e = getenv("STRATA_JVM_STACK_DEPTH"))
		g_stack_depth = atoi(e);
	if (!opts)
		return;
	const char *p = strstr(opts, "stack=");
	if (p)
		g_stack_depth = atoi(p + 6);
	p = strstr(opts, "owner=");
	if (p)
		g_owner = atoi(p + 6) != 0;
	if (g_stack_depth < 0)
		g_stack_depth = 0;
	if (g_stack_depth > 64)
		g_stack_depth = 64;
}

} // namespace

namespace strata_jvm {

int declare_jvm_events()
{
	for (int e = 0; e < kNumEv; e++) {
		if (g_ev[e])
			continue;
		int rc = strata_dyn_declare("jvm", kDecl[e].name, kDecl[e].loglevel, kDecl[e].fields,
					    kDecl[e].n, &g_ev[e]);
		if (rc < 0) {
			fprintf(stderr, "strata-jvm: jvm:%s: %s\n", kDecl[e].name, strata_dyn_strerror(rc));
			return rc;
		}
	}
	return 0;
}

} // namespace strata_jvm

extern "C" JNIEXPORT jint JNICALL Agent_OnLoad(JavaVM *vm, char *options, void *)
{
	parse_options(options);
	g_vm = vm;
	if (vm->GetEnv(reinterpret_cast<void **>(&g_jvmti), JVMTI_VERSION_1_2) != JNI_OK) {
		fprintf(stderr, "strata-jvm: no JVMTI 1.2 environment\n");
		return JNI_ERR;
	}
	if (strata_jvm::declare_jvm_events() < 0)
		return JNI_ERR;
	jvmtiCapabilities caps;
	memset(&caps, 0, sizeof caps);
	caps.can_generate_monitor_events = 1;
	caps.can_generate_garbage_collection_events = 1;
	caps.can_generate_compiled_method_load_events = 1;
	caps.can_get_line_numbers = 1;
	caps.can_get_monitor_info = g_owner ? 1 : 0;
	if (g_jvmti->AddCapabilities(&caps) != JVMTI_ERROR_NONE) {
		fprintf(stderr, "strata-jvm: the JVM refuses the capabilities the agent needs\n");
		return JNI_ERR;
	}
	jvmtiEventCallbacks cb;
	memset(&cb, 0, sizeof cb);
	cb.VMInit = on_vm_init;
	cb.VMDeath = on_vm_death;
	cb.ThreadStart = on_thread_start;
	cb.ThreadEnd = on_thread_end;
	cb.MonitorContendedEnter = on_contended_enter;
	cb.MonitorContendedEntered = on_contended_entered;
	cb.MonitorWait = on_wait;
	cb.MonitorWaited = on_waited;
	cb.GarbageCollectionStart = on_gc_start;
	cb.GarbageCollectionFinish = on_gc_finish;
	cb.CompiledMethodLoad = on_method_load;
	cb.CompiledMethodUnload = on_method_unload;
	cb.DynamicCodeGenerated = on_code_generated;
	g_jvmti->SetEventCallbacks(&cb, sizeof cb);
	g_jvmti->SetEventNotificationMode(JVMTI_ENABLE, JVMTI_EVENT_VM_INIT, nullptr);
	g_jvmti->SetEventNotificationMode(JVMTI_ENABLE, JVMTI_EVENT_VM_DEATH, nullptr);
	g_efd = eventfd(0, EFD_CLOEXEC);
	if (g_efd >= 0)
		strata_rt_set_change_hook(on_state_change);
	g_jvmti->SetEventNotificationMode(JVMTI_ENABLE, JVMTI_EVENT_THREAD_START, nullptr); // the thread map
	apply_notifications(nullptr);
	return JNI_OK;
}
