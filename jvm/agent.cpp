/*
 * agent.cpp - libstrata-jvm.so: the JVMTI agent (provider `jvm`) and the
 * JNI side of the Java API (jni.cpp).  Load it with
 * `java -agentpath:/path/libstrata-jvm.so` or `strata record --jvm`.
 *
 * The library links libstrata and the tp-async-lib object, so the JVM
 * joins the sessions active when it loads the agent and follows sessions
 * started, stopped or changed later (the update signal).  Its events are
 * declared at run time (strata/dynamic.h) in Agent_OnLoad, so they are
 * ordinary tracepoints: patterns, log levels, filters, --wait.
 *
 * Concurrency contract.  Roles: JVMTI callbacks (any Java or VM thread, GC
 * callbacks inside a collection where neither JNI nor most of JVMTI may be
 * called: they only emit), the agent thread (a JVMTI agent thread started
 * at VM init: the only one that turns JVMTI notifications on and off, on
 * the runtime's state eventfd), tp-async's signal handler (switches state
 * words and writes the eventfd; never calls into the JVM).  A callback
 * checks its event's state word before doing any work, so an event that
 * was switched off between the notification and the callback costs one
 * load.  Notifications are on only while some session records an event
 * that needs them: a disabled agent adds no JVMTI event to the VM.
 */
#include <errno.h>
#include <jni.h>
#include <jvmti.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <string>

#include <strata/dynamic.h>

#include "jvm_agent.h"
#include "runtime.h"

namespace strata_jvm {

strata_dyn_event *g_ev[kEvents];
JavaVM *g_vm;

namespace {

jvmtiEnv *g_jvmti;
jmethodID g_thread_get_id;          // java.lang.Thread.getId()J, set at VM init
std::atomic<bool> g_live{false};     // between VM init and VM death
std::atomic<bool> g_dying{false};
std::mutex g_mode_lock;              // the notification modes below
bool g_mode[JVMTI_MAX_EVENT_TYPE_VAL + 1];
int g_stack_depth = 8;               // STRATA_JVM_STACK_DEPTH (0: no stacks)
bool g_verbose;                      // STRATA_JVM_VERBOSE: say each change of modes
bool g_owner;                        // STRATA_JVM_OWNER=1 or owner=1: a contended enter's owner
thread_local uint64_t t_enter_ns;    // monitor contended enter, this thread

const strata_dyn_field kThread[] = {
	{"name", STRATA_FIELD_STRING, 0, 0, 0, 0},
	{"java_tid", STRATA_FIELD_INTEGER, 8, 1, 10, 0},
	{"os_tid", STRATA_FIELD_INTEGER, 4, 1, 10, 0},
};
const strata_dyn_field kMonEnter[] = {
	{"class", STRATA_FIELD_STRING, 0, 0, 0, 0},
	{"hash", STRATA_FIELD_INTEGER, 4, 0, 16, 0},
	{"owner_java_tid", STRATA_FIELD_INTEGER, 8, 1, 10, 0},
	{"stack", STRATA_FIELD_STRING, 0, 0, 0, 0},
};
const strata_dyn_field kMonEntered[] = {
	{"class", STRATA_FIELD_STRING, 0, 0, 0, 0},
	{"hash", STRATA_FIELD_INTEGER, 4, 0, 16, 0},
	{"wait_ns", STRATA_FIELD_INTEGER, 8, 0, 10, 0},
};
const strata_dyn_field kMonWait[] = {
	{"class", STRATA_FIELD_STRING, 0, 0, 0, 0},
	{"hash", STRATA_FIELD_INTEGER, 4, 0, 16, 0},
	{"timeout_ms", STRATA_FIELD_INTEGER, 8, 1, 10, 0},
};
const strata_dyn_field kMonWaited[] = {
	{"class", STRATA_FIELD_STRING, 0, 0, 0, 0},
	{"hash", STRATA_FIELD_INTEGER, 4, 0, 16, 0},
	{"timed_out", STRATA_FIELD_INTEGER, 1, 0, 10, 0},
};
const strata_dyn_field kCode[] = {
	{"name", STRATA_FIELD_STRING, 0, 0, 0, 0},
	{"code_addr", STRATA_FIELD_INTEGER, 8, 0, 16, 0},
	{"code_size", STRATA_FIELD_INTEGER, 4, 0, 10, 0},
};
const strata_dyn_field kUnload[] = {
	{"name", STRATA_FIELD_STRING, 0, 0, 0, 0},
	{"code_addr", STRATA_FIELD_INTEGER, 8, 0, 16, 0},
};
const strata_dyn_field kVmStartFields[] = {
	{"vm_version", STRATA_FIELD_STRING, 0, 0, 0, 0},
};

struct Decl {
	const char *name;
	int loglevel;
	const strata_dyn_field *fields;
	uint32_t n;
};
#define DECL(n, lv, f) {n, lv, f, sizeof f / sizeof f[0]}
const Decl kDecls[kEvents] = {
	DECL("vm_start", STRATA_LOGLEVEL_INFO, kVmStartFields),
	{"vm_death", STRATA_LOGLEVEL_INFO, nullptr, 0},
	DECL("thread_start", STRATA_LOGLEVEL_INFO, kThread),
	DECL("thread_end", STRATA_LOGLEVEL_INFO, kThread),
	DECL("monitor_contended_enter", STRATA_LOGLEVEL_INFO, kMonEnter),
	DECL("monitor_contended_entered", STRATA_LOGLEVEL_INFO, kMonEntered),
	DECL("monitor_wait", STRATA_LOGLEVEL_DEBUG, kMonWait),
	DECL("monitor_waited", STRATA_LOGLEVEL_DEBUG, kMonWaited),
	{"gc_start", STRATA_LOGLEVEL_INFO, nullptr, 0},
	{"gc_finish", STRATA_LOGLEVEL_INFO, nullptr, 0},
	DECL("compiled_method_load", STRATA_LOGLEVEL_DEBUG, kCode),
	DECL("compiled_method_unload", STRATA_LOGLEVEL_DEBUG, kUnload),
	DECL("dynamic_code_generated", STRATA_LOGLEVEL_DEBUG, kCode),
};
#undef DECL

// Which JVMTI notifications each event needs.
struct Need {
	jvmtiEvent type;
	int ev[2]; // events that need it (-1: none)
};
const Need kNeeds[] = {
	{JVMTI_EVENT_THREAD_START, {kThreadStart, -1}},
	{JVMTI_EVENT_THREAD_END, {kThreadEnd, -1}},
	{JVMTI_EVENT_MONITOR_CONTENDED_ENTER, {kMonitorContendedEnter, kMonitorContendedEntered}},
	{JVMTI_EVENT_MONITOR_CONTENDED_ENTERED, {kMonitorContendedEntered, -1}},
	{JVMTI_EVENT_MONITOR_WAIT, {kMonitorWait, -1}},
	{JVMTI_EVENT_MONITOR_WAITED, {kMonitorWaited, -1}},
	{JVMTI_EVENT_GARBAGE_COLLECTION_START, {kGcStart, -1}},
	{JVMTI_EVENT_GARBAGE_COLLECTION_FINISH, {kGcFinish, -1}},
	{JVMTI_EVENT_COMPILED_METHOD_LOAD, {kCompiledMethodLoad, -1}},
	{JVMTI_EVENT_COMPILED_METHOD_UNLOAD, {kCompiledMethodUnload, -1}},
	{JVMTI_EVENT_DYNAMIC_CODE_GENERATED, {kDynamicCodeGenerated, -1}},
};

inline bool on(int ev)
{
	return g_ev[ev] && strata_dyn_enabled(g_ev[ev]);
}

uint64_t mono_ns()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int32_t os_tid()
{
	return (int32_t)syscall(SYS_gettid);
}

// "Ljava/lang/String;" -> "java.lang.String" (in place, into out).
void class_name(const char *sig, char *out, size_t cap)
{
	size_t n = 0;
	if (sig && *sig == 'L')
		sig++;
	for (; sig && *sig && *sig != ';' && n + 1 < cap; sig++)
		out[n++] = *sig == '/' ? '.' : *sig;
	out[n] = 0;
}

void dealloc(void *p)
{
	if (p)
		g_jvmti->Deallocate((unsigned char *)p);
}

// The monitor's class name and identity hash.
void monitor_of(JNIEnv *jni, jobject obj, char *cls, size_t cap, jint *hash)
{
	*hash = 0;
	cls[0] = 0;
	if (!obj)
		return;
	g_jvmti->GetObjectHashCode(obj, hash);
	jclass k = jni->GetObjectClass(obj);
	char *sig = nullptr;
	if (k && g_jvmti->GetClassSignature(k, &sig, nullptr) == JVMTI_ERROR_NONE)
		class_name(sig, cls, cap);
	dealloc(sig);
	if (k)
		jni->DeleteLocalRef(k);
}

// "pkg.Class.method:line" for a method and location.
void method_name(jmethodID m, jlocation loc, char *out, size_t cap)
{
	out[0] = 0;
	jclass k = nullptr;
	char *name = nullptr, *sig = nullptr;
	char cls[256];
	cls[0] = 0;
	if (g_jvmti->GetMethodDeclaringClass(m, &k) == JVMTI_ERROR_NONE && k &&
	    g_jvmti->GetClassSignature(k, &sig, nullptr) == JVMTI_ERROR_NONE)
		class_name(sig, cls, sizeof cls);
	g_jvmti->GetMethodName(m, &name, nullptr, nullptr);
	int line = -1;
	if (loc >= 0) {
		jint n = 0;
		jvmtiLineNumberEntry *tab = nullptr;
		if (g_jvmti->GetLineNumberTable(m, &n, &tab) == JVMTI_ERROR_NONE) {
			for (jint i = 0; i < n; i++)
				if (tab[i].start_location <= loc)
					line = tab[i].line_number;
			dealloc(tab);
		}
	}
	if (line >= 0)
		snprintf(out, cap, "%s.%s:%d", cls, name ? name : "?", line);
	else
		snprintf(out, cap, "%s.%s", cls, name ? name : "?");
	dealloc(name);
	dealloc(sig);
}

// The Java call stack of `thread`, innermost first, g_stack_depth frames
// at most, "frame;frame;...".
void stack_of(jthread thread, char *out, size_t cap)
{
	out[0] = 0;
	if (g_stack_depth <= 0)
		return;
	jvmtiFrameInfo frames[64];
	jint count = 0;
	const jint depth = g_stack_depth > 64 ? 64 : g_stack_depth;
	if (g_jvmti->GetStackTrace(thread, 0, depth, frames, &count) != JVMTI_ERROR_NONE)
		return;
	size_t n = 0;
	for (jint i = 0; i < count && n + 1 < cap; i++) {
		char f[320];
		method_name(frames[i].method, frames[i].location, f, sizeof f);
		int w = snprintf(out + n, cap - n, "%s%s", i ? ";" : "", f);
		if (w < 0)
			break;
		n += (size_t)w;
	}
	if (n >= cap)
		out[cap - 1] = 0;
}

// Thread.getId() of a thread (-1 if unknown).
jlong java_tid(JNIEnv *jni, jthread thread)
{
	jlong id = g_thread_get_id && thread ? jni->CallLongMethod(thread, g_thread_get_id) : -1;
	if (jni->ExceptionCheck()) {
		jni->ExceptionClear();
		id = -1;
	}
	return id;
}

// The Java tid of the thread that owns obj's monitor (-1 if unknown or off).
// GetObjectMonitorUsage is a VM operation (a safepoint) per call: only with
// STRATA_JVM_OWNER=1 or the agent option owner=1.
jlong owner_java_tid(JNIEnv *jni, jobject obj)
{
	if (!g_owner || !obj)
		return -1;
	jvmtiMonitorUsage u;
	memset(&u, 0, sizeof u);
	if (g_jvmti->GetObjectMonitorUsage(obj, &u) != JVMTI_ERROR_NONE)
		return -1;
	const jlong id = u.owner ? java_tid(jni, u.owner) : -1;
	dealloc(u.waiters);
	dealloc(u.notify_waiters);
	if (u.owner)
		jni->DeleteLocalRef(u.owner);
	return id;
}

void emit_thread(int ev, jvmtiEnv *jvmti, JNIEnv *jni, jthread thread)
{
	if (!on(ev))
		return;
	jvmtiThreadInfo info;
	memset(&info, 0, sizeof info);
	jvmti->GetThreadInfo(thread, &info);
	const jlong jtid = java_tid(jni, thread);
	union strata_dyn_value v[3];
	v[0].s = info.name ? info.name : "";
	v[1].i = jtid;
	v[2].i = os_tid();
	strata_dyn_emit(g_ev[ev], v, 3);
	dealloc(info.name);
	if (info.thread_group)
		jni->DeleteLocalRef(info.thread_group);
	if (info.context_class_loader)
		jni->DeleteLocalRef(info.context_class_loader);
}

void JNICALL on_thread_start(jvmtiEnv *jvmti, JNIEnv *jni, jthread thread)
{
	emit_thread(kThreadStart, jvmti, jni, thread);
}

void JNICALL on_thread_end(jvmtiEnv *jvmti, JNIEnv *jni, jthread thread)
{
	emit_thread(kThreadEnd, jvmti, jni, thread);
}

void JNICALL on_contended_enter(jvmtiEnv *, JNIEnv *jni, jthread thread, jobject obj)
{
	t_enter_ns = mono_ns();
	if (!on(kMonitorContendedEnter))
		return;
	char cls[256], stack[2048];
	jint hash;
	monitor_of(jni, obj, cls, sizeof cls, &hash);
	stack_of(thread, stack, sizeof stack);
	union strata_dyn_value v[4];
	v[0].s = cls;
	v[1].u = (uint32_t)hash;
	v[2].i = owner_java_tid(jni, obj);
	v[3].s = stack;
	strata_dyn_emit(g_ev[kMonitorContendedEnter], v, 4);
}

void JNICALL on_contended_entered(jvmtiEnv *, JNIEnv *jni, jthread, jobject obj)
{
	if (!on(kMonitorContendedEntered))
		return;
	char cls[256];
	jint hash;
	monitor_of(jni, obj, cls, sizeof cls, &hash);
	const uint64_t now = mono_ns();
	union strata_dyn_value v[3];
	v[0].s = cls;
	v[1].u = (uint32_t)hash;
	v[2].u = t_enter_ns && now > t_enter_ns ? now - t_enter_ns : 0;
	t_enter_ns = 0;
	strata_dyn_emit(g_ev[kMonitorContendedEntered], v, 3);
}

void JNICALL on_wait(jvmtiEnv *, JNIEnv *jni, jthread, jobject obj, jlong timeout)
{
	if (!on(kMonitorWait))
		return;
	char cls[256];
	jint hash;
	monitor_of(jni, obj, cls, sizeof cls, &hash);
	union strata_dyn_value v[3];
	v[0].s = cls;
	v[1].u = (uint32_t)hash;
	v[2].i = timeout;
	strata_dyn_emit(g_ev[kMonitorWait], v, 3);
}

void JNICALL on_waited(jvmtiEnv *, JNIEnv *jni, jthread, jobject obj, jboolean timed_out)
{
	if (!on(kMonitorWaited))
		return;
	char cls[256];
	jint hash;
	monitor_of(jni, obj, cls, sizeof cls, &hash);
	union strata_dyn_value v[3];
	v[0].s = cls;
	v[1].u = (uint32_t)hash;
	v[2].u = timed_out ? 1 : 0;
	strata_dyn_emit(g_ev[kMonitorWaited], v, 3);
}

// Inside a collection: no JNI, no JVMTI; only the emit.
void JNICALL on_gc_start(jvmtiEnv *)
{
	if (on(kGcStart))
		strata_dyn_emit(g_ev[kGcStart], nullptr, 0);
}

void JNICALL on_gc_finish(jvmtiEnv *)
{
	if (on(kGcFinish))
		strata_dyn_emit(g_ev[kGcFinish], nullptr, 0);
}

void JNICALL on_method_load(jvmtiEnv *, jmethodID m, jint size, const void *addr, jint,
			    const jvmtiAddrLocationMap *, const void *)
{
	if (!on(kCompiledMethodLoad))
		return;
	char name[512];
	method_name(m, -1, name, sizeof name);
	union strata_dyn_value v[3];
	v[0].s = name;
	v[1].u = (uint64_t)(uintptr_t)addr;
	v[2].u = (uint32_t)size;
	strata_dyn_emit(g_ev[kCompiledMethodLoad], v, 3);
}

void JNICALL on_method_unload(jvmtiEnv *, jmethodID m, const void *addr)
{
	if (!on(kCompiledMethodUnload))
		return;
	char name[512];
	method_name(m, -1, name, sizeof name); // the method may be gone: "?" parts
	union strata_dyn_value v[2];
	v[0].s = name;
	v[1].u = (uint64_t)(uintptr_t)addr;
	strata_dyn_emit(g_ev[kCompiledMethodUnload], v, 2);
}

void JNICALL on_code_generated(jvmtiEnv *, const char *name, const void *addr, jint size)
{
	if (!on(kDynamicCodeGenerated))
		return;
	union strata_dyn_value v[3];
	v[0].s = name ? name : "";
	v[1].u = (uint64_t)(uintptr_t)addr;
	v[2].u = (uint32_t)size;
	strata_dyn_emit(g_ev[kDynamicCodeGenerated], v, 3);
}

// Turn each JVMTI notification on exactly while an event needing it is
// recorded.  Code events switched on replay what is already compiled
// (GenerateEvents), so addresses of earlier code can be named too.
void apply_modes()
{
	std::lock_guard<std::mutex> g(g_mode_lock);
	if (!g_live.load(std::memory_order_acquire) || g_dying.load(std::memory_order_acquire))
		return;
	bool changed = false;
	for (const Need &n : kNeeds) {
		bool want = false;
		for (int e : n.ev)
			want = want || (e >= 0 && on(e));
		if (want == g_mode[n.type])
			continue;
		if (g_jvmti->SetEventNotificationMode(want ? JVMTI_ENABLE : JVMTI_DISABLE, n.type,
						      nullptr) != JVMTI_ERROR_NONE)
			continue;
		g_mode[n.type] = want;
		changed = true;
		if (want && (n.type == JVMTI_EVENT_COMPILED_METHOD_LOAD ||
			     n.type == JVMTI_EVENT_DYNAMIC_CODE_GENERATED))
			g_jvmti->GenerateEvents(n.type);
	}
	if (changed && g_verbose) {
		// One line naming the events whose notifications are now on
		// (tests wait for it: tests/jvm/check_live.py).
		std::string line = "strata-jvm: notifications for:";
		for (int e = 0; e < kEvents; e++)
			for (const Need &n : kNeeds)
				if (g_mode[n.type] && (n.ev[0] == e || n.ev[1] == e)) {
					line += std::string(" ") + kDecls[e].name;
					break;
				}
		line += "\n";
		ssize_t w = write(2, line.data(), line.size());
		(void)w;
	}
}

// The agent thread: waits on the runtime's state eventfd (written by the
// control call that switched a state word, tp-async's handler included)
// and applies the modes.  Ends at VM death (checked at least every 200 ms).
void JNICALL agent_loop(jvmtiEnv *, JNIEnv *, void *)
{
	const int fd = strata_rt_state_notify_fd();
	while (!g_dying.load(std::memory_order_acquire)) {
		if (fd >= 0) {
			struct pollfd p = {fd, POLLIN, 0};
			int r = poll(&p, 1, 200);
			if (r > 0) {
				uint64_t v;
				ssize_t n = read(fd, &v, sizeof v);
				(void)n;
				apply_modes();
			}
		} else {
			struct timespec t = {0, 200000000};
			nanosleep(&t, nullptr);
			apply_modes();
		}
	}
}

void JNICALL on_vm_init(jvmtiEnv *jvmti, JNIEnv *jni, jthread)
{
	jclass thread_class = jni->FindClass("java/lang/Thread");
	if (thread_class) {
		g_thread_get_id = jni->GetMethodID(thread_class, "getId", "()J");
		jmethodID init = jni->GetMethodID(thread_class, "<init>", "(Ljava/lang/String;)V");
		jstring name = jni->NewStringUTF("strata-jvm-agent");
		jobject t = init && name ? jni->NewObject(thread_class, init, name) : nullptr;
		if (t) {
			g_live.store(true, std::memory_order_release);
			if (jvmti->RunAgentThread(t, agent_loop, nullptr, JVMTI_THREAD_MIN_PRIORITY) !=
			    JVMTI_ERROR_NONE)
				fprintf(stderr, "strata-jvm: no agent thread: sessions started later "
						"will not switch JVM events on\n");
		}
	}
	if (jni->ExceptionCheck())
		jni->ExceptionClear();
	g_live.store(true, std::memory_order_release);
	apply_modes();
	if (on(kVmStart)) {
		char *ver = nullptr;
		jvmti->GetSystemProperty("java.vm.version", &ver);
		union strata_dyn_value v[1];
		v[0].s = ver ? ver : "";
		strata_dyn_emit(g_ev[kVmStart], v, 1);
		dealloc(ver);
	}
}

void JNICALL on_vm_death(jvmtiEnv *, JNIEnv *)
{
	if (on(kVmDeath))
		strata_dyn_emit(g_ev[kVmDeath], nullptr, 0);
	g_dying.store(true, std::memory_order_release);
}

} // namespace

int declare_events()
{
	for (int i = 0; i < kEvents; i++) {
		int rc = strata_dyn_declare("jvm", kDecls[i].name, kDecls[i].loglevel, kDecls[i].fields,
					    kDecls[i].n, &g_ev[i]);
		if (rc < 0) {
			fprintf(stderr, "strata-jvm: jvm:%s: %s\n", kDecls[i].name, strata_dyn_strerror(rc));
			return rc;
		}
	}
	return 0;
}

} // namespace strata_jvm

using namespace strata_jvm;

extern "C" JNIEXPORT jint JNICALL Agent_OnLoad(JavaVM *vm, char *options, void *)
{
	g_vm = vm;
	const char *verbose = getenv("STRATA_JVM_VERBOSE");
	g_verbose = verbose && *verbose && *verbose != '0';
	const char *owner = getenv("STRATA_JVM_OWNER");
	g_owner = owner && *owner && *owner != '0';
	if (options && strstr(options, "owner="))
		g_owner = atoi(strstr(options, "owner=") + 6) != 0;
	const char *d = getenv("STRATA_JVM_STACK_DEPTH");
	if (d && *d)
		g_stack_depth = atoi(d);
	if (options && strstr(options, "stack="))
		g_stack_depth = atoi(strstr(options, "stack=") + 6);
	if (vm->GetEnv((void **)&g_jvmti, JVMTI_VERSION_1_2) != JNI_OK || !g_jvmti) {
		fprintf(stderr, "strata-jvm: no JVMTI 1.2 environment: agent not loaded\n");
		return JNI_ERR;
	}
	if (declare_events() < 0)
		return JNI_ERR;
	jvmtiCapabilities caps;
	memset(&caps, 0, sizeof caps);
	caps.can_generate_monitor_events = 1;
	caps.can_generate_garbage_collection_events = 1;
	caps.can_generate_compiled_method_load_events = 1;
	caps.can_get_line_numbers = 1;
	caps.can_get_monitor_info = g_owner ? 1 : 0;
	if (g_jvmti->AddCapabilities(&caps) != JVMTI_ERROR_NONE)
		fprintf(stderr, "strata-jvm: some JVMTI capabilities are missing; their events stay off\n");
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
	// VM init and death: always (once each); the rest follow the sessions.
	g_jvmti->SetEventNotificationMode(JVMTI_ENABLE, JVMTI_EVENT_VM_INIT, nullptr);
	g_jvmti->SetEventNotificationMode(JVMTI_ENABLE, JVMTI_EVENT_VM_DEATH, nullptr);
	return JNI_OK;
}

extern "C" JNIEXPORT void JNICALL Agent_OnUnload(JavaVM *)
{
	g_dying.store(true, std::memory_order_release);
}
