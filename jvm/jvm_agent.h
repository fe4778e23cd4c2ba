/*
 * jvm_agent.h - what agent.cpp and jni.cpp share inside libstrata-jvm.so.
 */
#ifndef STRATA_JVM_AGENT_H
#define STRATA_JVM_AGENT_H

#include <jni.h>
#include <strata/dynamic.h>

namespace strata_jvm {

// The `jvm` provider's events, declared in Agent_OnLoad.
enum {
	kVmStart,
	kVmDeath,
	kThreadStart,
	kThreadEnd,
	kMonitorContendedEnter,
	kMonitorContendedEntered,
	kMonitorWait,
	kMonitorWaited,
	kGcStart,
	kGcFinish,
	kCompiledMethodLoad,
	kCompiledMethodUnload,
	kDynamicCodeGenerated,
	kEvents
};

extern strata_dyn_event *g_ev[kEvents]; // null until Agent_OnLoad declared them
extern JavaVM *g_vm;

} // namespace strata_jvm
#endif
