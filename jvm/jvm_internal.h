/*
 * jvm_internal.h - shared between the JVMTI agent (agent.cpp) and the Java
 * API's natives (java_api.cpp) inside libstrata-jvm.so.  Internal.
 */
#ifndef STRATA_JVM_INTERNAL_H
#define STRATA_JVM_INTERNAL_H

namespace strata_jvm {

/* Declares the jvm:* events (idempotent); 0 or a negative errno. */
int declare_jvm_events();

} // namespace strata_jvm

#endif
